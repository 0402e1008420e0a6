/* rma_ops.c — the communication calls of routed windows (put, get, accumulate,
 * get_accumulate, fetch_and_op, compare_and_swap and their request forms) and every
 * synchronisation call, on the pool windows; windows MPI keeps go to PMPI.
 *
 * Completion: the engine copies an origin buffer before a put or accumulate returns (into
 * the target's memory, or a cell of the target's ring) and a get reads the target's memory
 * before it returns, so every operation is locally complete when its call returns:
 * MPI_Win_flush_local(_all) has nothing to wait for, and the request of MPI_Rput & co. is
 * complete at once (a generalized request). Remote completion (flush, unlock, complete,
 * fence) waits for the target to have applied what it reads from its ring. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi/rma.h"

static uint64_t type_bytes(MPI_Datatype dt, int count) {
    int sz = 0;
    if (count <= 0 || PMPI_Type_size(dt, &sz) != MPI_SUCCESS || sz < 0) return 0;
    return (uint64_t)sz * (uint64_t)count;
}

static void count_mpi(int kind, uint64_t bytes) {
    if (!g.on) return;
    shim_rma_st.mpi[kind].ops++;
    shim_rma_st.mpi[kind].bytes += bytes;
}

/* The origin side: dense data as it lies, other datatypes packed (out: filled by the caller
 * and unpacked by origin_done). */
struct origin {
    const void *buf;
    void *user, *tmp;
    int count;
    MPI_Datatype dt;
    uint64_t n;
};

static int origin_in(struct origin *o, const void *buf, int count, MPI_Datatype dt, int out) {
    int tsize;
    memset(o, 0, sizeof *o);
    o->user = (void *)buf, o->count = count, o->dt = dt;
    if (count < 0) return MPI_ERR_COUNT;
    const int dense = shim_dense(dt, count, &o->n, &tsize);
    if (dense < 0) return MPI_ERR_TYPE;
    if (dense || !o->n) {
        o->buf = buf;
        return MPI_SUCCESS;
    }
    int psize = 0, pos = 0;
    if (PMPI_Pack_size(count, dt, MPI_COMM_SELF, &psize) != MPI_SUCCESS) return MPI_ERR_TYPE;
    if (!(o->tmp = malloc((size_t)psize))) return MPI_ERR_NO_MEM;
    if (!out && PMPI_Pack(buf, count, dt, o->tmp, psize, &pos, MPI_COMM_SELF) != MPI_SUCCESS)
        return free(o->tmp), o->tmp = NULL, MPI_ERR_TYPE;
    o->buf = o->tmp;
    ++g.st.packed;
    return MPI_SUCCESS;
}

static int origin_done(struct origin *o, int out, int rc) {
    if (o->tmp && out && rc == MPI_SUCCESS) {
        int pos = 0;
        if (PMPI_Unpack(o->tmp, (int)o->n, &pos, o->user, o->count, o->dt, MPI_COMM_SELF) !=
            MPI_SUCCESS)
            rc = MPI_ERR_TYPE;
    }
    free(o->tmp);
    return rc;
}

/* The target side: world rank, byte address of target_disp, the runs of its datatype,
 * every run checked against the target's window before any byte moves. */
struct target {
    int world;
    uint64_t addr;
    struct rma_run *runs;
    int nruns;
    uint64_t n;
};

static int target_in(struct shim_win *w, struct target *t, int rank, MPI_Aint disp, int count,
                     MPI_Datatype dt) {
    memset(t, 0, sizeof *t);
    if (rank < 0 || rank >= w->sc->size) return MPI_ERR_RANK;
    if (disp < 0) return MPI_ERR_DISP;  /* as both MPIs say */
    const uint64_t unit = (uint64_t)w->disp_units[rank], size = (uint64_t)w->sizes[rank];
    if ((uint64_t)disp > UINT64_MAX / 2 / unit) return MPI_ERR_RMA_RANGE;
    t->world = w->sc->to_world[rank];
    t->addr = (uint64_t)disp * unit;
    int rc = rma_runs(dt, count, &t->runs, &t->nruns, &t->n);
    for (int i = 0; rc == MPI_SUCCESS && i < t->nruns; ++i) {
        const struct rma_run *r = &t->runs[i];
        const int64_t at = (int64_t)t->addr + r->off;
        if (at < 0 || (uint64_t)at > size || r->len > size - (uint64_t)at) rc = MPI_ERR_RMA_RANGE;
    }
    return rc;
}

/* The element type of an accumulate: the one predefined type both sides are built of. */
static int acc_type(MPI_Datatype odt, MPI_Datatype tdt, int *es) {
    MPI_Datatype b = rma_basic_type(tdt);
    if (b == MPI_DATATYPE_NULL) return -1;
    if (odt != MPI_DATATYPE_NULL && rma_basic_type(odt) != b) return -1;
    return rma_elem_type(b, es);
}

enum xfer_kind { X_PUT, X_GET, X_ACC, X_GACC };

struct xfer {
    enum xfer_kind kind;
    const void *obuf;
    int ocount;
    MPI_Datatype odt;
    void *rbuf;        /* get: the origin buffer; get_accumulate: the result buffer */
    int rcount;
    MPI_Datatype rdt;
    int trank;
    MPI_Aint tdisp;
    int tcount;
    MPI_Datatype tdt;
    MPI_Op op;
};

static int say_unsupported(struct shim_win *w, const char *what, int err) {
    fprintf(stderr,
            "cxlkit-mpi: rank %d: %s on a pool window: the pool's targets apply SUM, MIN, MAX, "
            "REPLACE and NO_OP to int, unsigned, long, long long, (u)int32/64_t, float and "
            "double; create this window with info cxlkit_rma=mpi (or CXLKIT_MPI_RMA=0) to "
            "leave it to MPI\n",
            g.rank, what);
    return shim_win_fail(w->win, err);
}

/* Move the data run by run. */
static int xfer_runs(struct shim_win *w, const struct xfer *x, struct target *t,
                     const uint8_t *src, uint8_t *dst, int et, int es, int op) {
    for (int i = 0; x->kind >= X_ACC && i < t->nruns; ++i)  /* whole elements only */
        if (t->runs[i].len % (uint64_t)es || t->runs[i].pos % (uint64_t)es) return MPI_ERR_TYPE;
    for (int i = 0; i < t->nruns; ++i) {
        const struct rma_run *r = &t->runs[i];
        const uint64_t at = (uint64_t)((int64_t)t->addr + r->off);
        int rc = 0;
        switch (x->kind) {
            case X_PUT: rc = cxk_win_put(w->cw, src + r->pos, r->len, t->world, at); break;
            case X_GET: rc = cxk_win_get(w->cw, dst + r->pos, r->len, t->world, at); break;
            case X_ACC:
                rc = cxk_win_accumulate(w->cw, src + r->pos, r->len / (uint64_t)es, et,
                                        t->world, at, op);
                break;
            case X_GACC:  /* MPI's atomicity is per element: one fetch-and-op each */
                for (uint64_t k = 0; !rc && k < r->len; k += (uint64_t)es)
                    rc = cxk_win_fetch_and_op(w->cw, op == CXK_OP_NO_OP ? NULL : src + r->pos + k,
                                              dst + r->pos + k, et, t->world, at + k, op);
                break;
        }
        if (rc) return shim_win_err(rc, "one-sided operation");
    }
    return MPI_SUCCESS;
}

static int xfer(struct shim_win *w, const struct xfer *x) {
    if (x->trank == MPI_PROC_NULL) return MPI_SUCCESS;
    struct target t;
    struct origin o = {0}, res = {0};
    int et = -1, es = 1, op = -1, kind = x->kind == X_PUT ? RMA_PUT : x->kind == X_GET ? RMA_GET
                                                                                        : RMA_ACC;
    int rc = target_in(w, &t, x->trank, x->tdisp, x->tcount, x->tdt);
    if (rc == MPI_SUCCESS && (x->kind == X_ACC || x->kind == X_GACC)) {
        op = rma_op(x->op);
        if (op < 0 || (x->kind == X_ACC && op == CXK_OP_NO_OP)) {
            free(t.runs);
            return say_unsupported(w, "an accumulate op", MPI_ERR_OP);
        }
        et = acc_type(op == CXK_OP_NO_OP ? MPI_DATATYPE_NULL : x->odt, x->tdt, &es);
        if (et < 0) {
            free(t.runs);
            return say_unsupported(w, "an accumulate datatype", MPI_ERR_TYPE);
        }
    }
    const int gets = x->kind == X_GET || x->kind == X_GACC;
    const int sends = x->kind != X_GET && !(x->kind == X_GACC && op == CXK_OP_NO_OP);
    if (rc == MPI_SUCCESS && sends) rc = origin_in(&o, x->obuf, x->ocount, x->odt, 0);
    if (rc == MPI_SUCCESS && sends && o.n != t.n) rc = MPI_ERR_TYPE;  /* signatures differ */
    if (rc == MPI_SUCCESS && gets) rc = origin_in(&res, x->rbuf, x->rcount, x->rdt, 1);
    if (rc == MPI_SUCCESS && gets && res.n != t.n) rc = MPI_ERR_TYPE;
    if (rc == MPI_SUCCESS)
        rc = xfer_runs(w, x, &t, o.buf, (uint8_t *)res.buf, et, es, op);
    origin_done(&o, 0, rc);
    rc = origin_done(&res, 1, rc);
    free(t.runs);
    if (rc == MPI_SUCCESS) {
        shim_rma_st.pool[kind].ops++;
        shim_rma_st.pool[kind].bytes += t.n;
    }
    return shim_win_fail(w->win, rc);
}

int MPI_Put(const void *obuf, int ocount, MPI_Datatype odt, int trank, MPI_Aint tdisp,
            int tcount, MPI_Datatype tdt, MPI_Win win) {
    struct shim_win *w = shim_win_of(win);
    if (!w) {
        count_mpi(RMA_PUT, type_bytes(odt, ocount));
        return PMPI_Put(obuf, ocount, odt, trank, tdisp, tcount, tdt, win);
    }
    struct xfer x = {X_PUT, obuf, ocount, odt, NULL, 0, MPI_DATATYPE_NULL, trank, tdisp, tcount,
                     tdt, MPI_OP_NULL};
    return xfer(w, &x);
}

int MPI_Get(void *obuf, int ocount, MPI_Datatype odt, int trank, MPI_Aint tdisp, int tcount,
            MPI_Datatype tdt, MPI_Win win) {
    struct shim_win *w = shim_win_of(win);
    if (!w) {
        count_mpi(RMA_GET, type_bytes(odt, ocount));
        return PMPI_Get(obuf, ocount, odt, trank, tdisp, tcount, tdt, win);
    }
    struct xfer x = {X_GET, NULL, 0, MPI_DATATYPE_NULL, obuf, ocount, odt, trank, tdisp, tcount,
                     tdt, MPI_OP_NULL};
    return xfer(w, &x);
}

int MPI_Accumulate(const void *obuf, int ocount, MPI_Datatype odt, int trank, MPI_Aint tdisp,
                   int tcount, MPI_Datatype tdt, MPI_Op op, MPI_Win win) {
    struct shim_win *w = shim_win_of(win);
    if (!w) {
        count_mpi(RMA_ACC, type_bytes(odt, ocount));
        return PMPI_Accumulate(obuf, ocount, odt, trank, tdisp, tcount, tdt, op, win);
    }
    struct xfer x = {X_ACC, obuf, ocount, odt, NULL, 0, MPI_DATATYPE_NULL, trank, tdisp, tcount,
                     tdt, op};
    return xfer(w, &x);
}

int MPI_Get_accumulate(const void *obuf, int ocount, MPI_Datatype odt, void *rbuf, int rcount,
                       MPI_Datatype rdt, int trank, MPI_Aint tdisp, int tcount,
                       MPI_Datatype tdt, MPI_Op op, MPI_Win win) {
    struct shim_win *w = shim_win_of(win);
    if (!w) {
        count_mpi(RMA_ACC, type_bytes(rdt, rcount));
        return PMPI_Get_accumulate(obuf, ocount, odt, rbuf, rcount, rdt, trank, tdisp, tcount,
                                   tdt, op, win);
    }
    struct xfer x = {X_GACC, obuf, ocount, odt, rbuf, rcount, rdt, trank, tdisp, tcount, tdt, op};
    return xfer(w, &x);
}

/* One element of a 4- or 8-byte predefined type, compared or replaced bitwise. */
static int bits_type(MPI_Datatype dt, int *es) {
    int sz = 0;
    if (PMPI_Type_size(dt, &sz) != MPI_SUCCESS) return -1;
    *es = sz;
    return sz == 4 ? CXK_MSG_UINT32 : sz == 8 ? CXK_MSG_UINT64 : -1;
}

static int atomic_target(struct shim_win *w, int rank, MPI_Aint disp, int es, int *world,
                         uint64_t *at) {
    if (rank < 0 || rank >= w->sc->size) return MPI_ERR_RANK;
    const uint64_t unit = (uint64_t)w->disp_units[rank], size = (uint64_t)w->sizes[rank];
    if (disp < 0) return MPI_ERR_DISP;
    if ((uint64_t)disp > UINT64_MAX / 2 / unit) return MPI_ERR_RMA_RANGE;
    *at = (uint64_t)disp * unit;
    if (*at > size || (uint64_t)es > size - *at) return MPI_ERR_RMA_RANGE;
    *world = w->sc->to_world[rank];
    return MPI_SUCCESS;
}

int MPI_Fetch_and_op(const void *obuf, void *rbuf, MPI_Datatype dt, int trank, MPI_Aint tdisp,
                     MPI_Op op, MPI_Win win) {
    struct shim_win *w = shim_win_of(win);
    if (!w) {
        count_mpi(RMA_ATOMIC, type_bytes(dt, 1));
        return PMPI_Fetch_and_op(obuf, rbuf, dt, trank, tdisp, op, win);
    }
    if (trank == MPI_PROC_NULL) return MPI_SUCCESS;
    int es = 0, o = rma_op(op);
    if (o < 0) return say_unsupported(w, "MPI_Fetch_and_op's op", MPI_ERR_OP);
    int et = rma_elem_type(dt, &es);
    if (et < 0 && (o == CXK_OP_REPLACE || o == CXK_OP_NO_OP)) et = bits_type(dt, &es);
    if (et < 0) return say_unsupported(w, "MPI_Fetch_and_op's datatype", MPI_ERR_TYPE);
    int world;
    uint64_t at;
    int rc = atomic_target(w, trank, tdisp, es, &world, &at);
    if (rc == MPI_SUCCESS)
        rc = shim_win_err(cxk_win_fetch_and_op(w->cw, o == CXK_OP_NO_OP ? NULL : obuf, rbuf, et,
                                               world, at, o), "MPI_Fetch_and_op");
    if (rc == MPI_SUCCESS) shim_rma_st.pool[RMA_ATOMIC].ops++, shim_rma_st.pool[RMA_ATOMIC].bytes += (uint64_t)es;
    return shim_win_fail(win, rc);
}

int MPI_Compare_and_swap(const void *obuf, const void *cbuf, void *rbuf, MPI_Datatype dt,
                         int trank, MPI_Aint tdisp, MPI_Win win) {
    struct shim_win *w = shim_win_of(win);
    if (!w) {
        count_mpi(RMA_ATOMIC, type_bytes(dt, 1));
        return PMPI_Compare_and_swap(obuf, cbuf, rbuf, dt, trank, tdisp, win);
    }
    if (trank == MPI_PROC_NULL) return MPI_SUCCESS;
    int es = 0, et = bits_type(dt, &es);
    if (et < 0) return say_unsupported(w, "MPI_Compare_and_swap's datatype", MPI_ERR_TYPE);
    int world;
    uint64_t at;
    int rc = atomic_target(w, trank, tdisp, es, &world, &at);
    if (rc == MPI_SUCCESS)
        rc = shim_win_err(cxk_win_compare_and_swap(w->cw, cbuf, obuf, rbuf, et, world, at),
                          "MPI_Compare_and_swap");
    if (rc == MPI_SUCCESS) shim_rma_st.pool[RMA_ATOMIC].ops++, shim_rma_st.pool[RMA_ATOMIC].bytes += (uint64_t)es;
    return shim_win_fail(win, rc);
}

/* ---- request forms: locally complete on return (see the head), so a request MPI already
 * regards as complete: a generalized request completed at once, good for every Wait/Test. */
static int gq_query(void *extra, MPI_Status *st) {
    (void)extra;
    PMPI_Status_set_elements(st, MPI_BYTE, 0);
    PMPI_Status_set_cancelled(st, 0);
    st->MPI_SOURCE = MPI_UNDEFINED;
    st->MPI_TAG = MPI_UNDEFINED;
    return MPI_SUCCESS;
}
static int gq_free(void *extra) { return (void)extra, MPI_SUCCESS; }
static int gq_cancel(void *extra, int done) { return (void)extra, (void)done, MPI_SUCCESS; }

static int done_request(int rc, MPI_Request *req) {
    if (rc != MPI_SUCCESS) return rc;
    rc = PMPI_Grequest_start(gq_query, gq_free, gq_cancel, NULL, req);
    return rc == MPI_SUCCESS ? PMPI_Grequest_complete(*req) : rc;
}

int MPI_Rput(const void *obuf, int ocount, MPI_Datatype odt, int trank, MPI_Aint tdisp,
             int tcount, MPI_Datatype tdt, MPI_Win win, MPI_Request *req) {
    if (!shim_win_of(win)) {
        count_mpi(RMA_PUT, type_bytes(odt, ocount));
        return PMPI_Rput(obuf, ocount, odt, trank, tdisp, tcount, tdt, win, req);
    }
    return done_request(MPI_Put(obuf, ocount, odt, trank, tdisp, tcount, tdt, win), req);
}

int MPI_Rget(void *obuf, int ocount, MPI_Datatype odt, int trank, MPI_Aint tdisp, int tcount,
             MPI_Datatype tdt, MPI_Win win, MPI_Request *req) {
    if (!shim_win_of(win)) {
        count_mpi(RMA_GET, type_bytes(odt, ocount));
        return PMPI_Rget(obuf, ocount, odt, trank, tdisp, tcount, tdt, win, req);
    }
    return done_request(MPI_Get(obuf, ocount, odt, trank, tdisp, tcount, tdt, win), req);
}

int MPI_Raccumulate(const void *obuf, int ocount, MPI_Datatype odt, int trank, MPI_Aint tdisp,
                    int tcount, MPI_Datatype tdt, MPI_Op op, MPI_Win win, MPI_Request *req) {
    if (!shim_win_of(win)) {
        count_mpi(RMA_ACC, type_bytes(odt, ocount));
        return PMPI_Raccumulate(obuf, ocount, odt, trank, tdisp, tcount, tdt, op, win, req);
    }
    return done_request(MPI_Accumulate(obuf, ocount, odt, trank, tdisp, tcount, tdt, op, win),
                        req);
}

int MPI_Rget_accumulate(const void *obuf, int ocount, MPI_Datatype odt, void *rbuf, int rcount,
                        MPI_Datatype rdt, int trank, MPI_Aint tdisp, int tcount,
                        MPI_Datatype tdt, MPI_Op op, MPI_Win win, MPI_Request *req) {
    if (!shim_win_of(win)) {
        count_mpi(RMA_ACC, type_bytes(rdt, rcount));
        return PMPI_Rget_accumulate(obuf, ocount, odt, rbuf, rcount, rdt, trank, tdisp, tcount,
                                    tdt, op, win, req);
    }
    return done_request(MPI_Get_accumulate(obuf, ocount, odt, rbuf, rcount, rdt, trank, tdisp,
                                           tcount, tdt, op, win),
                        req);
}
