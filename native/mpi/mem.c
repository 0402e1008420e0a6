/* mem.c — MPI_Alloc_mem / MPI_Free_mem: while routing is on, memory an MPI program asks for
 * comes from this rank's pool partition (cxk_msg_alloc_mem), so a routed send from it above
 * the eager limit travels in one copy (the receiver copies straight out of the sender's
 * block; the send completes at its FIN). Off, or for a pointer the engine did not give,
 * the calls go to the MPI. */
#include <errno.h>
#include <stdint.h>

#include "shim.h"

int MPI_Alloc_mem(MPI_Aint size, MPI_Info info, void *baseptr) {
    if (!g.eng || size <= 0) return PMPI_Alloc_mem(size, info, baseptr);
    void *p = NULL;
    int rc = cxk_msg_alloc_mem(g.eng, (uint64_t)size, &p);
    if (rc == -ENOSPC || rc == -ENOMEM) {
        /* the partition is full: the MPI's own memory still serves (two copies) */
        ++g.st.mem_fallbacks;
        return PMPI_Alloc_mem(size, info, baseptr);
    }
    if (rc) return shim_fail(MPI_COMM_WORLD, shim_err(rc, "MPI_Alloc_mem"));
    ++g.st.mem_blocks;
    *(void **)baseptr = p;
    return MPI_SUCCESS;
}

int MPI_Free_mem(void *base) {
    if (!g.eng || !base || !cxk_msg_is_pool_mem(g.eng, base, 1)) return PMPI_Free_mem(base);
    int rc = cxk_msg_free_mem(g.eng, base);
    if (rc == -EINVAL)  /* inside a block, not its start: not what MPI_Alloc_mem gave */
        return shim_fail(MPI_COMM_WORLD, MPI_ERR_ARG);
    if (rc == -EBUSY) {
        /* MPI frees memory only after the sends from it completed: drive them, then free */
        while ((rc = cxk_msg_free_mem(g.eng, base)) == -EBUSY) {
            int prc = cxk_msg_progress(g.eng);
            if (prc) return shim_fail(MPI_COMM_WORLD, shim_err(prc, "MPI_Free_mem"));
        }
    }
    if (rc) return shim_fail(MPI_COMM_WORLD, shim_err(rc, "MPI_Free_mem"));
    return MPI_SUCCESS;
}
