/* netns_coll.c — the collective and idle-wait measurements of bench/netns.py, a plain MPI
 * program (run with and without the PMPI shim):
 *   netns_coll coll ITERS    MPI_Allreduce (sum of doubles) and MPI_Bcast at 8 B and 64 KiB:
 *                            one line per (op, bytes): "allreduce 8 <us per call>" (rank 0,
 *                            the mean over ranks of each rank's mean); every result is checked
 *                            (exit 3 on a wrong value)
 *   netns_coll idle SECONDS  rank 0 waits in MPI_Recv while rank 1 sleeps SECONDS, then sends:
 *                            "idle <seconds waited> <CPU seconds of rank 0 meanwhile>"
 *                            (getrusage: user + system) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static double cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
           (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static void bad(const char *what, int rank) {
    fprintf(stderr, "netns_coll: rank %d: wrong %s result\n", rank, what);
    MPI_Abort(MPI_COMM_WORLD, 3);
}

/* the mean over ranks of each rank's time per call, printed by rank 0 */
static void report(const char *op, size_t bytes, double t, int iters, int rank, int size) {
    double per = t / iters * 1e6, sum = 0;
    MPI_Reduce(&per, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) printf("%s %zu %.3f\n", op, bytes, sum / size);
}

static void coll(int iters, int rank, int size) {
    const size_t sizes[] = {8, 65536};
    for (int s = 0; s < 2; ++s) {
        const size_t n = sizes[s] / sizeof(double);
        double *in = malloc(sizes[s]), *out = malloc(sizes[s]);
        if (!in || !out) MPI_Abort(MPI_COMM_WORLD, 2);
        for (size_t i = 0; i < n; ++i) in[i] = rank + (double)i;
        MPI_Barrier(MPI_COMM_WORLD);
        double t = MPI_Wtime();
        for (int k = 0; k < iters; ++k)
            MPI_Allreduce(in, out, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        t = MPI_Wtime() - t;
        for (size_t i = 0; i < n; ++i)  /* sum over ranks of rank + i */
            if (out[i] != size * (double)i + size * (size - 1) / 2.0) bad("allreduce", rank);
        report("allreduce", sizes[s], t, iters, rank, size);
        MPI_Barrier(MPI_COMM_WORLD);
        t = MPI_Wtime();
        for (int k = 0; k < iters; ++k) {
            if (rank == k % size) for (size_t i = 0; i < n; ++i) out[i] = k + (double)i;
            MPI_Bcast(out, (int)n, MPI_DOUBLE, k % size, MPI_COMM_WORLD);
        }
        t = MPI_Wtime() - t;
        for (size_t i = 0; i < n; ++i)
            if (out[i] != (iters - 1) + (double)i) bad("bcast", rank);
        report("bcast", sizes[s], t, iters, rank, size);
        free(in);
        free(out);
    }
}

static void idle(double seconds, int rank) {
    int v = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1) {
        struct timespec ts = {(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)};
        nanosleep(&ts, NULL);
        v = 42;
        MPI_Send(&v, 1, MPI_INT, 0, 9, MPI_COMM_WORLD);
    } else if (rank == 0) {
        const double c = cpu_s(), t = MPI_Wtime();
        MPI_Recv(&v, 1, MPI_INT, 1, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        const double dt = MPI_Wtime() - t, dc = cpu_s() - c;
        if (v != 42) bad("idle", rank);
        printf("idle %.3f %.4f\n", dt, dc);
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *what = argc > 1 ? argv[1] : "";
    const double arg = argc > 2 ? atof(argv[2]) : 0;
    if (!strcmp(what, "coll") && arg >= 1) coll((int)arg, rank, size);
    else if (!strcmp(what, "idle") && arg > 0 && size >= 2) idle(arg, rank);
    else {
        if (rank == 0) fprintf(stderr, "usage: netns_coll coll ITERS | idle SECONDS (2+ ranks)\n");
        MPI_Finalize();
        return 2;
    }
    MPI_Finalize();
    return 0;
}
