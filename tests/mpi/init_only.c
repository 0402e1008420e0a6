/* init_only.c — MPI_Init and MPI_Finalize, nothing between: what the shim does by itself. */
#include <mpi.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Finalize();
    return 0;
}
