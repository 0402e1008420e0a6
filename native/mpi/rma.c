/* rma.c — MPI one-sided windows through the pool (the PMPI side of the cxk_win_* windows).
 *
 * Which windows: MPI_Win_allocate on a routed communicator that holds every world rank (any
 * order) becomes a pool window (cxk_win_create is collective over the engine's whole job, so
 * a window of a smaller communicator cannot be one). The decision is one PMPI_Allreduce(MIN)
 * over the communicator at creation: every rank routes the window or none does, and it stays
 * so for the window's life, so no epoch ever mixes the two routes. MPI_Win_create,
 * _create_dynamic (the user's own memory, not in the pool) and _allocate_shared (MPI's shared
 * memory already gives load/store access; nothing to carry) go to MPI, as do windows of
 * communicators the shim does not route, CXLKIT_MPI_RMA=0, and info key cxlkit_rma=mpi.
 *
 * A routed window keeps a real MPI handle (PMPI_Win_create_dynamic over the communicator, no
 * memory attached) so errhandlers, names, groups and attributes other than the five below
 * still work through MPI; the calls here look the handle up and drive the pool window.
 * Datatypes: the origin side of any datatype is packed (PMPI_Pack/Unpack) unless dense; a
 * non-dense target datatype is cut into contiguous runs (rma_types.c); accumulates need one
 * predefined element type of 4 or 8 bytes (int, unsigned, long, long long, their fixed-width
 * twins, float, double) and SUM, MIN, MAX, REPLACE, NO_OP (the ops the target applies); any
 * other type or op on a routed window is refused with MPI_ERR_TYPE / MPI_ERR_OP and a line
 * on stderr naming the way out (info cxlkit_rma=mpi for that window). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi/rma.h"

static struct shim_win *wins;  /* routed windows, newest first */
struct shim_rma_stats shim_rma_st;

struct shim_win *shim_win_of(MPI_Win win) {
    if (!g.on) return NULL;
    for (struct shim_win *w = wins; w; w = w->next)
        if (w->win == win) return w;
    return NULL;
}

int shim_win_fail(MPI_Win win, int err) {
    if (err != MPI_SUCCESS) PMPI_Win_call_errhandler(win, err);
    return err;
}

/* -errno of cxk_win_* -> MPI error class (user errors quietly, others with a line). */
int shim_win_err(int neg, const char *what) {
    switch (neg) {
        case 0: return MPI_SUCCESS;
        case -ERANGE: return MPI_ERR_RMA_RANGE;
        case -EPROTO: return MPI_ERR_RMA_SYNC;
        default: return shim_err(neg, what);
    }
}

/* ---- creation ---- */

/* This rank's vote on routing a window of comm (1 route). */
static int vote(MPI_Comm comm, MPI_Info info, MPI_Aint size, int disp_unit) {
    struct shim_comm *sc = shim_comm_of(comm);
    if (!sc || sc->size != g.size || g.esize != g.size || size < 0 || disp_unit <= 0) return 0;
    const char *env = getenv("CXLKIT_MPI_RMA");
    if (env && !strcmp(env, "0")) return 0;
    if (info != MPI_INFO_NULL) {
        char v[16] = {0};
        int flag = 0;
        if (PMPI_Info_get(info, "cxlkit_rma", (int)sizeof v - 1, v, &flag) == MPI_SUCCESS &&
            flag && !strcmp(v, "mpi"))
            return 0;
    }
    return 1;
}

static void free_rec(struct shim_win *w) {
    if (!w) return;
    free(w->disp_units);
    free(w->sizes);
    free(w->ranks);
    free(w);
}

/* All ranks of comm call it with route decided alike: the pool window, its MPI handle and
 * the per-rank displacement units and sizes. MPI error code. */
static int make_routed(MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm,
                       void *baseptr, MPI_Win *win) {
    struct shim_comm *sc = shim_comm_of(comm);
    struct shim_win *w = calloc(1, sizeof *w);
    int ok = w != NULL;
    if (ok) {
        w->disp_units = malloc(sizeof(int) * (size_t)sc->size);
        w->sizes = malloc(sizeof(MPI_Aint) * (size_t)sc->size);
        w->ranks = malloc(sizeof(int) * (size_t)sc->size);
        ok = w->disp_units && w->sizes && w->ranks;
    }
    int any_bad = 0, bad = !ok;
    PMPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, comm);
    if (any_bad) {
        free_rec(w);
        return MPI_ERR_NO_MEM;
    }
    /* collective over the engine's job (every rank is here: comm holds the whole world) */
    int rc = cxk_win_create(g.eng, (uint64_t)size, &w->cw);
    bad = rc != 0;
    PMPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, comm);
    if (any_bad) {  /* the engine's windows of the ranks that made one stay until Finalize */
        free_rec(w);
        return rc ? shim_err(rc, "MPI_Win_allocate") : MPI_ERR_NO_MEM;
    }
    int du = disp_unit;
    PMPI_Allgather(&du, 1, MPI_INT, w->disp_units, 1, MPI_INT, comm);
    for (int r = 0; r < sc->size; ++r) {
        uint64_t nb = 0;
        cxk_win_size(w->cw, sc->to_world[r], &nb);
        w->sizes[r] = (MPI_Aint)nb;
    }
    rc = PMPI_Win_create_dynamic(info, comm, &w->win);
    if (rc != MPI_SUCCESS) {
        cxk_win_free(w->cw);
        free_rec(w);
        return rc;
    }
    w->sc = sc;
    w->comm = comm;
    w->base = cxk_win_base(w->cw);
    w->size = size;
    w->disp_unit = disp_unit;
    w->flavor = MPI_WIN_FLAVOR_ALLOCATE;
    w->model = MPI_WIN_UNIFIED;  /* one copy: the pool memory is the window */
    w->next = wins;
    wins = w;
    /* a target applies accumulates and grants locks only when it drives the engine: an
     * unrouted blocking call must poll the engine while a routed window exists (p2p.c and
     * reqs.c do when g.inflight is non-zero; the collectives below always do) */
    ++g.inflight;
    ++shim_rma_st.pool_wins;
    *(void **)baseptr = w->base;
    *win = w->win;
    return MPI_SUCCESS;
}

int MPI_Win_allocate(MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm,
                     void *baseptr, MPI_Win *win) {
    if (!g.on) return PMPI_Win_allocate(size, disp_unit, info, comm, baseptr, win);
    int mine = vote(comm, info, size, disp_unit), all = 0;
    /* every rank of comm takes part (MPI_Win_allocate is collective over it) */
    if (shim_comm_of(comm) == NULL ||
        PMPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS || !all) {
        ++shim_rma_st.mpi_wins;
        return PMPI_Win_allocate(size, disp_unit, info, comm, baseptr, win);
    }
    int rc = make_routed(size, disp_unit, info, comm, baseptr, win);
    return rc == MPI_SUCCESS ? rc : shim_fail(comm, rc);
}

/* The user's memory is not pool memory: MPI keeps these windows (see the file's head). */
int MPI_Win_create(void *base, MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm,
                   MPI_Win *win) {
    if (g.on) ++shim_rma_st.mpi_wins;
    return PMPI_Win_create(base, size, disp_unit, info, comm, win);
}

int MPI_Win_create_dynamic(MPI_Info info, MPI_Comm comm, MPI_Win *win) {
    if (g.on) ++shim_rma_st.mpi_wins;
    return PMPI_Win_create_dynamic(info, comm, win);
}

int MPI_Win_allocate_shared(MPI_Aint size, int disp_unit, MPI_Info info, MPI_Comm comm,
                            void *baseptr, MPI_Win *win) {
    if (g.on) ++shim_rma_st.mpi_wins;
    return PMPI_Win_allocate_shared(size, disp_unit, info, comm, baseptr, win);
}

int MPI_Win_free(MPI_Win *win) {
    struct shim_win *w = win ? shim_win_of(*win) : NULL;
    if (!w) return PMPI_Win_free(win);
    if (w->lock_all || w->nlocked) return shim_win_fail(*win, MPI_ERR_RMA_SYNC);
    int rc = cxk_win_free(w->cw);  /* a barrier over the pool: every origin is done */
    for (struct shim_win **p = &wins; *p; p = &(*p)->next)
        if (*p == w) {
            *p = w->next;
            break;
        }
    --g.inflight;
    int mrc = PMPI_Win_free(&w->win);
    *win = MPI_WIN_NULL;
    free_rec(w);
    if (rc) return shim_err(rc, "MPI_Win_free");
    return mrc;
}

/* The attributes MPI cannot know of a routed window (its MPI handle has no memory). */
int MPI_Win_get_attr(MPI_Win win, int key, void *val, int *flag) {
    struct shim_win *w = shim_win_of(win);
    if (!w || !val || !flag) return PMPI_Win_get_attr(win, key, val, flag);
    if (key == MPI_WIN_BASE) *(void **)val = w->base;
    else if (key == MPI_WIN_SIZE) *(MPI_Aint **)val = &w->size;
    else if (key == MPI_WIN_DISP_UNIT) *(int **)val = &w->disp_unit;
    else if (key == MPI_WIN_CREATE_FLAVOR) *(int **)val = &w->flavor;
    else if (key == MPI_WIN_MODEL) *(int **)val = &w->model;
    else return PMPI_Win_get_attr(win, key, val, flag);
    *flag = 1;
    return MPI_SUCCESS;
}

/* A pool window is no MPI shared-memory window: MPI-4 says so with a NULL base and size 0
 * for every rank (the window's memory is reached through the RMA calls). */
int MPI_Win_shared_query(MPI_Win win, int rank, MPI_Aint *size, int *disp_unit,
                         void *baseptr) {
    struct shim_win *w = shim_win_of(win);
    if (!w) return PMPI_Win_shared_query(win, rank, size, disp_unit, baseptr);
    if (rank != MPI_PROC_NULL && (rank < 0 || rank >= w->sc->size))
        return shim_win_fail(win, MPI_ERR_RANK);
    *size = 0;
    *disp_unit = 1;
    *(void **)baseptr = NULL;
    return MPI_SUCCESS;
}

/* The collectives drive the engine too while routing is on (passive targets are served
 * only by their rank's progress): native/mpi/coll.c. */

void shim_rma_print_stats(void) {
    const struct shim_rma_stats *s = &shim_rma_st;
    fprintf(stderr,
            "cxlkit-mpi: rank %d: rma: pool %llu windows, %llu puts %llu B, %llu gets %llu B, "
            "%llu accumulates %llu B, %llu atomics; MPI %llu windows, %llu puts %llu B, "
            "%llu gets %llu B, %llu accumulates %llu B, %llu atomics\n",
            g.rank, (unsigned long long)s->pool_wins, (unsigned long long)s->pool[RMA_PUT].ops,
            (unsigned long long)s->pool[RMA_PUT].bytes, (unsigned long long)s->pool[RMA_GET].ops,
            (unsigned long long)s->pool[RMA_GET].bytes, (unsigned long long)s->pool[RMA_ACC].ops,
            (unsigned long long)s->pool[RMA_ACC].bytes, (unsigned long long)s->pool[RMA_ATOMIC].ops,
            (unsigned long long)s->mpi_wins, (unsigned long long)s->mpi[RMA_PUT].ops,
            (unsigned long long)s->mpi[RMA_PUT].bytes, (unsigned long long)s->mpi[RMA_GET].ops,
            (unsigned long long)s->mpi[RMA_GET].bytes, (unsigned long long)s->mpi[RMA_ACC].ops,
            (unsigned long long)s->mpi[RMA_ACC].bytes, (unsigned long long)s->mpi[RMA_ATOMIC].ops);
}
