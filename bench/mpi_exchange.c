/* mpi_exchange.c — the halo exchange LAMMPS's CommBrick makes with each neighbour, timed:
 * both ranks of a pair post MPI_Irecv, MPI_Send, then MPI_Wait, at once, ITERS times per
 * size; rank 0 prints one JSON line per size (min, p10, median of one exchange, us). A plain
 * MPI program: the same binary runs natively and with the PMPI shim preloaded.
 *   mpicc.openmpi -O2 bench/mpi_exchange.c -o build/mpi_exchange
 *   across the namespace hosts (tests/netns/rig.sh up 2), one rank on each CPU:
 *   printf 'rank 0=10.17.0.1 slot=0\nrank 1=10.17.0.2 slot=1\n' > build/rankfile2
 *   tests/netns/rig.sh ctl mpiexec.openmpi --mca plm_rsh_agent $PWD/tests/netns/launch.sh \
 *     --host 10.17.0.1:1,10.17.0.2:1 --rankfile build/rankfile2 --mca pml ob1 \
 *     --mca btl self,vader,tcp --mca btl_tcp_if_include cxk0 --mca oob_tcp_if_include \
 *     br0,cxk0 --mca mpi_yield_when_idle 1 [-x LD_PRELOAD=$PWD/build/c/libcxlkit_mpi_openmpi.so \
 *     -x CXLKIT_MPI_POOL=/dev/shm/x.pool] -n 2 build/mpi_exchange 5000 8 4000 11000 16384
 *   one host: mpiexec.openmpi --mca pml ob1 --mca btl self,vader -n 2 build/mpi_exchange ...
 * Usage: mpi_exchange [ITERS [BYTES...]] (defaults: 2000; 8 2048 4000 4096 11000 16384 33000) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SIZES 16
#define MAX_BYTES (1 << 20)

static int cmp(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int me, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (n != 2) {
        if (me == 0) fprintf(stderr, "mpi_exchange: %d ranks: needs 2; run it with -n 2\n", n);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const int iters = argc > 1 ? atoi(argv[1]) : 2000;
    int sizes[MAX_SIZES] = {8, 2048, 4000, 4096, 11000, 16384, 33000}, ns = 7;
    if (argc > 2) {
        ns = 0;
        for (int a = 2; a < argc && ns < MAX_SIZES; ++a) sizes[ns++] = atoi(argv[a]);
    }
    char *sb = malloc(MAX_BYTES), *rb = malloc(MAX_BYTES);
    double *t = malloc(sizeof(double) * (size_t)(iters > 0 ? iters : 1));
    if (!sb || !rb || !t || iters < 1) MPI_Abort(MPI_COMM_WORLD, 2);
    memset(sb, me + 1, MAX_BYTES);
    for (int s = 0; s < ns; ++s) {
        const int bytes = sizes[s] < 0 || sizes[s] > MAX_BYTES ? MAX_BYTES : sizes[s];
        int bad = 0;
        for (int i = 0; i < iters; ++i) {
            MPI_Request r;
            const double t0 = MPI_Wtime();
            MPI_Irecv(rb, bytes, MPI_BYTE, 1 - me, 0, MPI_COMM_WORLD, &r);
            MPI_Send(sb, bytes, MPI_BYTE, 1 - me, 0, MPI_COMM_WORLD);
            MPI_Wait(&r, MPI_STATUS_IGNORE);
            t[i] = MPI_Wtime() - t0;
            bad |= bytes && (rb[0] != 2 - me || rb[bytes - 1] != 2 - me);
        }
        qsort(t, (size_t)iters, sizeof *t, cmp);
        if (me == 0)
            printf("{\"bytes\": %d, \"iters\": %d, \"min_us\": %.2f, \"p10_us\": %.2f, "
                   "\"median_us\": %.2f, \"wrong\": %d}\n",
                   bytes, iters, t[0] * 1e6, t[iters / 10] * 1e6, t[iters / 2] * 1e6, bad);
    }
    free(sb), free(rb), free(t);
    MPI_Finalize();
    return 0;
}
