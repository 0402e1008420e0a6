/* pmpi_count.c — preloaded after the PMPI shim: counts the communication calls that reach the
 * MPI (the shim's own and the program's, both through PMPI_*) and prints the count of each
 * rank when the process ends: "pmpi-count: rank R: N calls". A test preloads it behind the
 * shim around a program that makes no call of its own between MPI_Init and MPI_Finalize. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>

static long calls;
static int rank = -1;

#define NEXT(name) ((__typeof__(&name))dlsym(RTLD_NEXT, #name))

int PMPI_Bcast(void *b, int n, MPI_Datatype t, int root, MPI_Comm c) {
    ++calls;
    return NEXT(PMPI_Bcast)(b, n, t, root, c);
}
int PMPI_Allreduce(const void *s, void *r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c) {
    ++calls;
    return NEXT(PMPI_Allreduce)(s, r, n, t, op, c);
}
int PMPI_Allgather(const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt,
                   MPI_Comm c) {
    ++calls;
    return NEXT(PMPI_Allgather)(s, sn, st, r, rn, rt, c);
}
int PMPI_Barrier(MPI_Comm c) {
    ++calls;
    return NEXT(PMPI_Barrier)(c);
}
int PMPI_Send(const void *b, int n, MPI_Datatype t, int dest, int tag, MPI_Comm c) {
    ++calls;
    return NEXT(PMPI_Send)(b, n, t, dest, tag, c);
}
int PMPI_Recv(void *b, int n, MPI_Datatype t, int src, int tag, MPI_Comm c, MPI_Status *st) {
    ++calls;
    return NEXT(PMPI_Recv)(b, n, t, src, tag, c, st);
}
int PMPI_Comm_rank(MPI_Comm c, int *r) {
    int rc = NEXT(PMPI_Comm_rank)(c, r);
    if (rc == MPI_SUCCESS && c == MPI_COMM_WORLD) rank = *r;
    return rc;
}

__attribute__((destructor)) static void report(void) {
    fprintf(stderr, "pmpi-count: rank %d: %ld calls\n", rank, calls);
}
