/* coll_lat.c — small blocking collectives, timed: Barrier, and Bcast, Reduce, Allreduce,
 * Allgather of 8 bytes (per rank), ITERS rounds each after a warm-up; rank 0 prints one line
 * per collective: "<name> <mean µs per call>". Plain MPI, built with each MPI's mpicc, run
 * with and without the shim (bench/mpi_shim_coll.py). */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

enum { BARRIER, BCAST, REDUCE, ALLREDUCE, ALLGATHER, NCOLL };
static const char *names[NCOLL] = {"barrier", "bcast", "reduce", "allreduce", "allgather"};

static void one(int c, double *in, double *out, double *all) {
    switch (c) {
        case BARRIER: MPI_Barrier(MPI_COMM_WORLD); break;
        case BCAST: MPI_Bcast(in, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD); break;
        case REDUCE: MPI_Reduce(in, out, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD); break;
        case ALLREDUCE: MPI_Allreduce(in, out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD); break;
        default: MPI_Allgather(in, 1, MPI_DOUBLE, all, 1, MPI_DOUBLE, MPI_COMM_WORLD); break;
    }
}

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const int iters = argc > 1 ? atoi(argv[1]) : 2000;
    double in = rank, out = 0, *all = malloc(sizeof(double) * (size_t)size);
    for (int c = 0; c < NCOLL; ++c) {
        for (int i = 0; i < iters / 10 + 1; ++i) one(c, &in, &out, all);
        MPI_Barrier(MPI_COMM_WORLD);
        const double t0 = MPI_Wtime();
        for (int i = 0; i < iters; ++i) one(c, &in, &out, all);
        const double us = (MPI_Wtime() - t0) * 1e6 / iters;
        double worst = 0;
        MPI_Reduce(&us, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (rank == 0) printf("%s %.3f\n", names[c], worst);
    }
    free(all);
    MPI_Finalize();
    return 0;
}
