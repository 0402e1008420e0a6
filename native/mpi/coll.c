/* coll.c — the blocking collectives, made nonblocking and polled while routing is on.
 * A rank inside a collective must go on driving the engine, for two reasons:
 *  - a passive target's pool window is served only when its rank drives the engine;
 *    programs end lock epochs with a barrier or a reduction, where the target would
 *    otherwise sit inside MPI while origins wait for its grant;
 *  - a rank may enter the collective owing a peer a control cell: the FIN of a rendezvous
 *    it received or the ACK of a synchronous send it matched, queued in the engine because
 *    its ring to that peer was full (of its own messages the peer had not read yet). Only
 *    its own progress pushes it, once the peer has drained the ring, and the peer may be
 *    waiting for exactly that before it can reach the collective (osu bibw hung so: both
 *    ranks post a window of rendezvous Isends and Irecvs, Waitall, then MPI_Barrier; the
 *    last FIN of one rank stayed queued, tests/mpi/owed_check.c). No request of the shim
 *    is in flight then (g.inflight is 0).
 * So every blocking collective with an MPI-3 nonblocking form runs as that form, polled by
 * shim_poll_mpi, on a communicator where some pair talks through the pool. A blocking
 * collective never matches a nonblocking one, so the choice must be the same on every rank:
 * it follows the communicator's mode (routes.c: computed alike on every rank from the job's
 * topology; not g.inflight nor the engine's queues, which differ between ranks). Where no
 * pair of it takes the pool (one host: every peer on the MPI's own path) the call goes
 * straight to the MPI's blocking form, so a collective never costs more than the MPI's own.
 * On a communicator that is the whole engine job (every rank maps the pool), Barrier, Bcast,
 * Reduce, Allreduce and Allgather of small buffers run through the pool (collpool.c, which
 * drives the engine and the MPI while it waits); the rest polled. The prototypes
 * are the same (const) in MPICH 4, Open MPI 4.1 and the MPI-5 ABI's mpi_abi.h. */
#include <stdlib.h>
#include <string.h>

#include "mpi/shim.h"

/* Largest buffer a collective takes through the pool: the engine's are linear in the ranks
 * (root to each, each to rank 0), the MPI's trees win above this. */
#define POOL_COLL_MAX (64 << 10)

static int mode_of(MPI_Comm comm) {
    if (!g.on) return COLL_MPI;
    if (comm == MPI_COMM_WORLD) return g.world.coll;
    struct shim_comm *sc = shim_comm_of(comm);
    return sc ? sc->coll : COLL_POLLED;  /* not adopted: the same on every rank (g.on) */
}

int shim_poll_mpi(int rc, MPI_Request *r) {
    if (rc != MPI_SUCCESS) return rc;
    for (;;) {
        int flag = 0;
        rc = PMPI_Test(r, &flag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS || flag) return rc;
        shim_progress();
    }
}

/* MPI_<name>(params) -> PMPI_<iname>(args..., &request), polled; PMPI_<name>(args) when
 * routing is off. */
#define POLLED(name, iname, params, ...)                                  \
    int MPI_##name params {                                               \
        if (mode_of(comm) == COLL_MPI) return PMPI_##name(__VA_ARGS__);   \
        MPI_Request r;                                                    \
        ++g.st.coll_mpi;                                                  \
        return shim_poll_mpi(PMPI_##iname(__VA_ARGS__, &r), &r);          \
    }
/* The same, the pool's form first: pool_<name>(args) gives 1 when it did the call (its MPI
 * code in *rc), 0 when the arguments are not for it (then polled). */
#define POOLED(name, iname, params, ...)                                  \
    int MPI_##name params {                                               \
        const int mode = mode_of(comm);                                   \
        if (mode == COLL_MPI) return PMPI_##name(__VA_ARGS__);            \
        int rc;                                                           \
        if (mode == COLL_POOL && pool_##name(__VA_ARGS__, &rc)) {         \
            ++g.st.coll_pool;                                             \
            return rc;                                                    \
        }                                                                 \
        MPI_Request r;                                                    \
        ++g.st.coll_mpi;                                                  \
        return shim_poll_mpi(PMPI_##iname(__VA_ARGS__, &r), &r);          \
    }

static int pool_rc(MPI_Comm comm, int neg, const char *what) {
    return neg ? shim_fail(comm, shim_err(neg, what)) : MPI_SUCCESS;
}

/* Scratch for data that must be packed, and for a non-root's reduce result. */
static uint8_t scratch[POOL_COLL_MAX];

/* The bytes of count elements of dt (*dense: they lie as they are), and whether they are
 * few enough for the pool. The choice looks at the byte count alone, which MPI's type
 * signatures make the same on every rank (the datatypes themselves may differ). */
static int pool_bytes(MPI_Datatype dt, int count, uint64_t *nbytes, int *dense) {
    int tsize;
    *dense = count >= 0 ? shim_dense(dt, count, nbytes, &tsize) : -1;
    return *dense >= 0 && *nbytes <= POOL_COLL_MAX;
}

/* The reductions the pool takes: predefined integer and floating types (-1: none) with SUM,
 * MIN, MAX (-1: none). Floating sums only between two ranks: the pool folds in rank order,
 * the MPI along its own tree, and a + b == b + a is the only order-free case (results stay
 * bit-identical to the MPI's). */
static int pool_type(MPI_Datatype dt) {
    if (dt == MPI_INT || dt == MPI_INT32_T) return CXK_MSG_INT32;
    if (dt == MPI_UNSIGNED || dt == MPI_UINT32_T) return CXK_MSG_UINT32;
    if (dt == MPI_LONG_LONG || dt == MPI_INT64_T || (dt == MPI_LONG && sizeof(long) == 8))
        return CXK_MSG_INT64;
    if (dt == MPI_UNSIGNED_LONG_LONG || dt == MPI_UINT64_T ||
        (dt == MPI_UNSIGNED_LONG && sizeof(long) == 8))
        return CXK_MSG_UINT64;
    if (dt == MPI_FLOAT) return CXK_MSG_FLOAT;
    if (dt == MPI_DOUBLE) return CXK_MSG_DOUBLE;
    return -1;
}

static int pool_op(MPI_Op op, int type) {
    if (op == MPI_SUM)
        return (type == CXK_MSG_FLOAT || type == CXK_MSG_DOUBLE) && g.size > 2 ? -1 : CXK_OP_SUM;
    return op == MPI_MIN ? CXK_OP_MIN : op == MPI_MAX ? CXK_OP_MAX : -1;
}

static struct shim_comm *pool_comm(MPI_Comm comm, int *me) {
    PMPI_Comm_rank(comm, me);
    return comm == MPI_COMM_WORLD ? &g.world : shim_comm_of(comm);
}

static int pool_Barrier(MPI_Comm comm, int *rc) {
    int me;
    struct shim_comm *sc = pool_comm(comm, &me);
    *rc = pool_rc(comm, shim_pool_barrier(sc, me), "MPI_Barrier");
    return 1;
}

static int pool_Bcast(void *buf, int count, MPI_Datatype dt, int root, MPI_Comm comm, int *rc) {
    uint64_t n;
    int dense, me, pos = 0;
    struct shim_comm *sc = pool_comm(comm, &me);
    if (!pool_bytes(dt, count, &n, &dense) || root < 0 || root >= sc->size) return 0;
    void *wire = dense ? buf : scratch;
    if (!dense && me == root) PMPI_Pack(buf, count, dt, scratch, (int)sizeof scratch, &pos, comm);
    *rc = pool_rc(comm, shim_pool_bcast(sc, me, wire, n, root), "MPI_Bcast");
    if (!*rc && !dense && me != root)
        PMPI_Unpack(scratch, (int)n, &pos, buf, count, dt, comm);
    return 1;
}

/* Reduce to root through the pool; root -1: then to every rank (Allreduce). MPI gives every
 * rank the same count, datatype and op here, so all choose alike. */
static int pool_reduce(const void *sbuf, void *rbuf, int count, MPI_Datatype dt, MPI_Op op,
                       int root, MPI_Comm comm, int *rc) {
    uint64_t n;
    int dense, me;
    const int type = pool_type(dt), o = type < 0 ? -1 : pool_op(op, type);
    if (o < 0 || !pool_bytes(dt, count, &n, &dense) || !dense) return 0;
    struct shim_comm *sc = pool_comm(comm, &me);
    if (sbuf == MPI_IN_PLACE) sbuf = rbuf;
    const int e = root < 0 ? shim_pool_allreduce(sc, me, sbuf, rbuf, count, dt, op, n)
                           : shim_pool_reduce(sc, me, sbuf, me == root ? rbuf : scratch, count,
                                              dt, op, n, root);
    *rc = pool_rc(comm, e, root < 0 ? "MPI_Allreduce" : "MPI_Reduce");
    return 1;
}

static int pool_Allreduce(const void *sbuf, void *rbuf, int count, MPI_Datatype dt, MPI_Op op,
                          MPI_Comm comm, int *rc) {
    return pool_reduce(sbuf, rbuf, count, dt, op, -1, comm, rc);
}

static int pool_Reduce(const void *sbuf, void *rbuf, int count, MPI_Datatype dt, MPI_Op op,
                       int root, MPI_Comm comm, int *rc) {
    int n = 0;
    PMPI_Comm_size(comm, &n);
    if (root < 0 || root >= n) return 0;
    return pool_reduce(sbuf, rbuf, count, dt, op, root, comm, rc);
}

/* Allgather: each rank's block packed where its rank puts it in scratch, sent to every
 * other rank, then every block unpacked into the receive buffer. */
static int pool_Allgather(const void *sbuf, int scount, MPI_Datatype stype, void *rbuf,
                          int rcount, MPI_Datatype rtype, MPI_Comm comm, int *rc) {
    uint64_t block;
    int dense, me, pos;
    MPI_Aint lb, ext;
    struct shim_comm *sc = pool_comm(comm, &me);
    if (!pool_bytes(rtype, rcount, &block, &dense) || block * (uint64_t)sc->size > POOL_COLL_MAX ||
        PMPI_Type_get_extent(rtype, &lb, &ext))
        return 0;
    const MPI_Aint stride = ext * rcount;
    pos = (int)(block * (uint64_t)me);
    if (sbuf == MPI_IN_PLACE)
        PMPI_Pack((uint8_t *)rbuf + stride * me, rcount, rtype, scratch, (int)sizeof scratch, &pos, comm);
    else PMPI_Pack(sbuf, scount, stype, scratch, (int)sizeof scratch, &pos, comm);
    *rc = pool_rc(comm, shim_pool_allgather(sc, me, scratch, block), "MPI_Allgather");
    for (int r = 0; !*rc && r < sc->size; ++r) {
        pos = (int)(block * (uint64_t)r);
        PMPI_Unpack(scratch, (int)sizeof scratch, &pos, (uint8_t *)rbuf + stride * r, rcount, rtype, comm);
    }
    return 1;
}

POOLED(Barrier, Ibarrier, (MPI_Comm comm), comm)

POOLED(Bcast, Ibcast, (void *buf, int count, MPI_Datatype dt, int root, MPI_Comm comm),
       buf, count, dt, root, comm)

POOLED(Reduce, Ireduce,
       (const void *sbuf, void *rbuf, int count, MPI_Datatype dt, MPI_Op op, int root,
        MPI_Comm comm),
       sbuf, rbuf, count, dt, op, root, comm)

POOLED(Allreduce, Iallreduce,
       (const void *sbuf, void *rbuf, int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm),
       sbuf, rbuf, count, dt, op, comm)

POLLED(Gather, Igather,
       (const void *sbuf, int scount, MPI_Datatype stype, void *rbuf, int rcount,
        MPI_Datatype rtype, int root, MPI_Comm comm),
       sbuf, scount, stype, rbuf, rcount, rtype, root, comm)

POLLED(Gatherv, Igatherv,
       (const void *sbuf, int scount, MPI_Datatype stype, void *rbuf, const int rcounts[],
        const int displs[], MPI_Datatype rtype, int root, MPI_Comm comm),
       sbuf, scount, stype, rbuf, rcounts, displs, rtype, root, comm)

POLLED(Scatter, Iscatter,
       (const void *sbuf, int scount, MPI_Datatype stype, void *rbuf, int rcount,
        MPI_Datatype rtype, int root, MPI_Comm comm),
       sbuf, scount, stype, rbuf, rcount, rtype, root, comm)

POLLED(Scatterv, Iscatterv,
       (const void *sbuf, const int scounts[], const int displs[], MPI_Datatype stype,
        void *rbuf, int rcount, MPI_Datatype rtype, int root, MPI_Comm comm),
       sbuf, scounts, displs, stype, rbuf, rcount, rtype, root, comm)

POOLED(Allgather, Iallgather,
       (const void *sbuf, int scount, MPI_Datatype stype, void *rbuf, int rcount,
        MPI_Datatype rtype, MPI_Comm comm),
       sbuf, scount, stype, rbuf, rcount, rtype, comm)

POLLED(Allgatherv, Iallgatherv,
       (const void *sbuf, int scount, MPI_Datatype stype, void *rbuf, const int rcounts[],
        const int displs[], MPI_Datatype rtype, MPI_Comm comm),
       sbuf, scount, stype, rbuf, rcounts, displs, rtype, comm)

POLLED(Alltoall, Ialltoall,
       (const void *sbuf, int scount, MPI_Datatype stype, void *rbuf, int rcount,
        MPI_Datatype rtype, MPI_Comm comm),
       sbuf, scount, stype, rbuf, rcount, rtype, comm)

POLLED(Alltoallv, Ialltoallv,
       (const void *sbuf, const int scounts[], const int sdispls[], MPI_Datatype stype,
        void *rbuf, const int rcounts[], const int rdispls[], MPI_Datatype rtype,
        MPI_Comm comm),
       sbuf, scounts, sdispls, stype, rbuf, rcounts, rdispls, rtype, comm)

POLLED(Alltoallw, Ialltoallw,
       (const void *sbuf, const int scounts[], const int sdispls[],
        const MPI_Datatype stypes[], void *rbuf, const int rcounts[], const int rdispls[],
        const MPI_Datatype rtypes[], MPI_Comm comm),
       sbuf, scounts, sdispls, stypes, rbuf, rcounts, rdispls, rtypes, comm)

POLLED(Reduce_scatter, Ireduce_scatter,
       (const void *sbuf, void *rbuf, const int rcounts[], MPI_Datatype dt, MPI_Op op,
        MPI_Comm comm),
       sbuf, rbuf, rcounts, dt, op, comm)

POLLED(Reduce_scatter_block, Ireduce_scatter_block,
       (const void *sbuf, void *rbuf, int rcount, MPI_Datatype dt, MPI_Op op, MPI_Comm comm),
       sbuf, rbuf, rcount, dt, op, comm)

POLLED(Scan, Iscan,
       (const void *sbuf, void *rbuf, int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm),
       sbuf, rbuf, count, dt, op, comm)

POLLED(Exscan, Iexscan,
       (const void *sbuf, void *rbuf, int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm),
       sbuf, rbuf, count, dt, op, comm)
