/* rma_sync.c — the synchronisation calls of routed windows on the pool window's own
 * algorithms (win.cpp): fence = flush of every target + a barrier over the pool;
 * post/start/complete/wait = zero-byte messages of the engine between the groups; lock and
 * unlock = requests the target grants from its ring in arrival order (shared ones together),
 * so no mutex and no atomic crosses hosts. Windows MPI keeps go to PMPI. */
#include <stdlib.h>

#include "mpi/rma.h"

static int fail(struct shim_win *w, int rc, const char *what) {
    return shim_win_fail(w->win, shim_win_err(rc, what));
}

int MPI_Win_fence(int assert_, MPI_Win win) {
    struct shim_win *w = shim_win_of(win);
    if (!w) return PMPI_Win_fence(assert_, win);
    if (w->lock_all || w->nlocked) return shim_win_fail(win, MPI_ERR_RMA_SYNC);
    return fail(w, cxk_win_fence(w->cw), "MPI_Win_fence");
}

/* The world ranks of group's members into w->ranks (group: processes of the window's
 * communicator). MPI error code. */
static int group_ranks(struct shim_win *w, MPI_Group group, int *n) {
    static MPI_Group world_group = MPI_GROUP_NULL;  /* lives until MPI_Finalize */
    if (world_group == MPI_GROUP_NULL && PMPI_Comm_group(MPI_COMM_WORLD, &world_group))
        return MPI_ERR_GROUP;
    if (PMPI_Group_size(group, n) != MPI_SUCCESS || *n > w->sc->size) return MPI_ERR_GROUP;
    int *ids = malloc(sizeof(int) * (size_t)(*n ? *n : 1));
    if (!ids) return MPI_ERR_NO_MEM;
    for (int i = 0; i < *n; ++i) ids[i] = i;
    int rc = PMPI_Group_translate_ranks(group, *n, ids, world_group, w->ranks);
    free(ids);
    for (int i = 0; rc == MPI_SUCCESS && i < *n; ++i)
        if (w->ranks[i] < 0 || w->ranks[i] >= g.size) rc = MPI_ERR_GROUP;
    return rc == MPI_SUCCESS ? rc : MPI_ERR_GROUP;
}

int MPI_Win_post(MPI_Group group, int assert_, MPI_Win win) {
    struct shim_win *w = shim_win_of(win);
    if (!w) return PMPI_Win_post(group, assert_, win);
    int n = 0, rc = group_ranks(w, group, &n);
    if (rc != MPI_SUCCESS) return shim_win_fail(win, rc);
    if (w->post_empty) return shim_win_fail(win, MPI_ERR_RMA_SYNC);
    if (n == 0) return w->post_empty = 1, MPI_SUCCESS;  /* nobody to wait for */
    return fail(w, cxk_win_post(w->cw, w->ranks, n), "MPI_Win_post");
}

int MPI_Win_start(MPI_Group group, int assert_, MPI_Win win) {
    struct shim_win *w = shim_win_of(win);
    if (!w) return PMPI_Win_start(group, assert_, win);
    int n = 0, rc = group_ranks(w, group, &n);
    if (rc != MPI_SUCCESS) return shim_win_fail(win, rc);
    if (w->start_empty) return shim_win_fail(win, MPI_ERR_RMA_SYNC);
    if (n == 0) return w->start_empty = 1, MPI_SUCCESS;
    return fail(w, cxk_win_start(w->cw, w->ranks, n), "MPI_Win_start");
}

int MPI_Win_complete(MPI_Win win) {
    struct shim_win *w = shim_win_of(win);
    if (!w) return PMPI_Win_complete(win);
    if (w->start_empty) return w->start_empty = 0, MPI_SUCCESS;
    return fail(w, cxk_win_complete(w->cw), "MPI_Win_complete");
}

int MPI_Win_wait(MPI_Win win) {
    struct shim_win *w = shim_win_of(win);
    if (!w) return PMPI_Win_wait(win);
    if (w->post_empty) return w->post_empty = 0, MPI_SUCCESS;
    return fail(w, cxk_win_wait(w->cw), "MPI_Win_wait");
}

/* Nonblocking: true once every origin of the post has completed (then the epoch is over). */
int MPI_Win_test(MPI_Win win, int *flag) {
    struct shim_win *w = shim_win_of(win);
    if (!w) return PMPI_Win_test(win, flag);
    if (w->post_empty) return w->post_empty = 0, *flag = 1, MPI_SUCCESS;
    *flag = 0;
    return fail(w, cxk_win_test(w->cw, flag), "MPI_Win_test");
}

static int lock_type(int t) {
    return t == MPI_LOCK_EXCLUSIVE ? CXK_LOCK_EXCLUSIVE : t == MPI_LOCK_SHARED ? CXK_LOCK_SHARED : 0;
}

int MPI_Win_lock(int type, int rank, int assert_, MPI_Win win) {
    struct shim_win *w = shim_win_of(win);
    if (!w) return PMPI_Win_lock(type, rank, assert_, win);
    if (rank == MPI_PROC_NULL) return MPI_SUCCESS;
    if (!lock_type(type)) return shim_win_fail(win, MPI_ERR_LOCKTYPE);
    if (rank < 0 || rank >= w->sc->size) return shim_win_fail(win, MPI_ERR_RANK);
    if (w->lock_all) return shim_win_fail(win, MPI_ERR_RMA_SYNC);
    int rc = fail(w, cxk_win_lock(w->cw, lock_type(type), w->sc->to_world[rank]), "MPI_Win_lock");
    if (rc == MPI_SUCCESS) w->nlocked++;
    return rc;
}

int MPI_Win_unlock(int rank, MPI_Win win) {
    struct shim_win *w = shim_win_of(win);
    if (!w) return PMPI_Win_unlock(rank, win);
    if (rank == MPI_PROC_NULL) return MPI_SUCCESS;
    if (rank < 0 || rank >= w->sc->size) return shim_win_fail(win, MPI_ERR_RANK);
    if (w->lock_all) return shim_win_fail(win, MPI_ERR_RMA_SYNC);
    int rc = fail(w, cxk_win_unlock(w->cw, w->sc->to_world[rank]), "MPI_Win_unlock");
    if (rc == MPI_SUCCESS) w->nlocked--;
    return rc;
}

/* A shared lock on every rank, taken in world order (each is granted by its own target). */
int MPI_Win_lock_all(int assert_, MPI_Win win) {
    struct shim_win *w = shim_win_of(win);
    if (!w) return PMPI_Win_lock_all(assert_, win);
    if (w->lock_all || w->nlocked) return shim_win_fail(win, MPI_ERR_RMA_SYNC);
    for (int r = 0; r < g.size; ++r) {
        int rc = cxk_win_lock(w->cw, CXK_LOCK_SHARED, r);
        if (rc) {
            while (r-- > 0) cxk_win_unlock(w->cw, r);
            return fail(w, rc, "MPI_Win_lock_all");
        }
    }
    w->lock_all = 1;
    return MPI_SUCCESS;
}

int MPI_Win_unlock_all(MPI_Win win) {
    struct shim_win *w = shim_win_of(win);
    if (!w) return PMPI_Win_unlock_all(win);
    if (!w->lock_all) return shim_win_fail(win, MPI_ERR_RMA_SYNC);
    int rc = 0;
    for (int r = 0; r < g.size; ++r) {
        int e = cxk_win_unlock(w->cw, r);
        if (e && !rc) rc = e;
    }
    w->lock_all = 0;
    return fail(w, rc, "MPI_Win_unlock_all");
}

/* Flushes need a passive epoch (MPI_ERR_RMA_SYNC otherwise, as MPI says). */
static int passive(struct shim_win *w) { return w->lock_all || w->nlocked; }

int MPI_Win_flush(int rank, MPI_Win win) {
    struct shim_win *w = shim_win_of(win);
    if (!w) return PMPI_Win_flush(rank, win);
    if (rank == MPI_PROC_NULL) return MPI_SUCCESS;
    if (rank < 0 || rank >= w->sc->size) return shim_win_fail(win, MPI_ERR_RANK);
    if (!passive(w)) return shim_win_fail(win, MPI_ERR_RMA_SYNC);
    return fail(w, cxk_win_flush(w->cw, w->sc->to_world[rank]), "MPI_Win_flush");
}

int MPI_Win_flush_all(MPI_Win win) {
    struct shim_win *w = shim_win_of(win);
    if (!w) return PMPI_Win_flush_all(win);
    if (!passive(w)) return shim_win_fail(win, MPI_ERR_RMA_SYNC);
    return fail(w, cxk_win_flush(w->cw, -1), "MPI_Win_flush_all");
}

/* Local completion: already there when each operation returned (rma_ops.c's head). */
int MPI_Win_flush_local(int rank, MPI_Win win) {
    struct shim_win *w = shim_win_of(win);
    if (!w) return PMPI_Win_flush_local(rank, win);
    if (rank == MPI_PROC_NULL) return MPI_SUCCESS;
    if (rank < 0 || rank >= w->sc->size) return shim_win_fail(win, MPI_ERR_RANK);
    return passive(w) ? MPI_SUCCESS : shim_win_fail(win, MPI_ERR_RMA_SYNC);
}

int MPI_Win_flush_local_all(MPI_Win win) {
    struct shim_win *w = shim_win_of(win);
    if (!w) return PMPI_Win_flush_local_all(win);
    return passive(w) ? MPI_SUCCESS : shim_win_fail(win, MPI_ERR_RMA_SYNC);
}

/* The window is one copy (MPI_WIN_UNIFIED): order this rank's loads and stores against the
 * others' accesses, apply what other ranks left in this rank's ring, and, without a
 * coherent pool, drop stale lines of this rank's window. */
int MPI_Win_sync(MPI_Win win) {
    struct shim_win *w = shim_win_of(win);
    if (!w) return PMPI_Win_sync(win);
    if (!w->lock_all && !w->nlocked) return shim_win_fail(win, MPI_ERR_RMA_SYNC);  /* as MPICH */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    int rc = cxk_msg_progress(g.eng);
    if (w->size > 0)
        cxk_pool_invalidate(g.pool, (uint64_t)((uint8_t *)w->base - (uint8_t *)cxk_pool_base(g.pool)),
                            (uint64_t)w->size);
    return fail(w, rc, "MPI_Win_sync");
}
