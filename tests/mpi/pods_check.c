/* pods_check.c — a plain MPI program for a job of two pods (tests/msg/test_mpi_routes.py):
 * world ranks below FIRST (argv[1]) form one pod, the others the second. It splits the world
 * by pod and runs Barrier, Bcast, Allreduce, Allgather on each pod's communicator, then the
 * same four on MPI_COMM_WORLD, checking every value; each pod's lowest rank sends its pod's
 * sum to world rank 0 and world rank 0 prints the transcript (the same natively and under the
 * shim). Exit 1 on any wrong value. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int bad;
#define CHECK(c)                                                                    \
    do {                                                                            \
        if (!(c)) {                                                                 \
            ++bad;                                                                  \
            fprintf(stderr, "pods_check: %s:%d: %s failed\n", __FILE__, __LINE__, #c); \
        }                                                                           \
    } while (0)

/* The four collectives on comm (n ranks, this one r), values from the world rank w;
 * comm's sum of world ranks, checked on every rank. */
static long four(MPI_Comm comm, int w) {
    int r, n;
    MPI_Comm_rank(comm, &r);
    MPI_Comm_size(comm, &n);
    MPI_Barrier(comm);
    long root_w = w;
    MPI_Bcast(&root_w, 1, MPI_LONG, 0, comm);
    long sum = 0, mine = w;
    MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, comm);
    int *all = malloc(sizeof(int) * (size_t)n);
    if (!all) MPI_Abort(MPI_COMM_WORLD, 2);
    MPI_Allgather(&w, 1, MPI_INT, all, 1, MPI_INT, comm);
    long again = 0;
    for (int i = 0; i < n; ++i) again += all[i];
    CHECK(again == sum);
    CHECK(all[r] == w);
    CHECK(r != 0 || root_w == w);
    free(all);
    return sum;
}

int main(int argc, char **argv) {
    int w, n;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &w);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    const int first = argc > 1 ? atoi(argv[1]) : n / 2;
    const int pod = w >= first;
    MPI_Comm podc;
    MPI_Comm_split(MPI_COMM_WORLD, pod, w, &podc);
    const long want = pod ? (long)(n - 1 + first) * (n - first) / 2 : (long)(first - 1) * first / 2;
    const long got = four(podc, w);
    CHECK(got == want);
    int pr;
    MPI_Comm_rank(podc, &pr);
    if (w == 0) {
        long other = -1;
        MPI_Recv(&other, 1, MPI_LONG, first, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        printf("pod 0 (%d ranks) sum %ld; pod 1 (%d ranks) sum %ld\n", first, got, n - first,
               other);
    } else if (pr == 0) {
        MPI_Send(&got, 1, MPI_LONG, 0, 5, MPI_COMM_WORLD);
    }
    const long world = four(MPI_COMM_WORLD, w);
    CHECK(world == (long)(n - 1) * n / 2);
    if (w == 0) printf("world (%d ranks) sum %ld\n", n, world);
    MPI_Comm_free(&podc);
    int all = 0;
    MPI_Allreduce(&bad, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (w == 0) printf("pods_check: %s\n", all ? "FAILED" : "all passed");
    MPI_Finalize();
    return all ? 1 : 0;
}
