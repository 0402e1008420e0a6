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
 * shim_poll_mpi. A blocking collective never matches a nonblocking one, so the choice must be
 * the same on every rank: it follows g.on, which every rank agreed on at MPI_Init (not
 * g.inflight nor the engine's queues, which differ between ranks). The prototypes are the
 * same (const) in MPICH 4, Open MPI 4.1 and the MPI-5 ABI's mpi_abi.h. */
#include "mpi/shim.h"

int shim_poll_mpi(int rc, MPI_Request *r) {
    if (rc != MPI_SUCCESS) return rc;
    for (;;) {
        int flag = 0;
        rc = PMPI_Test(r, &flag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS || flag) return rc;
        cxk_msg_progress(g.eng);
    }
}

/* MPI_<name>(params) -> PMPI_<iname>(args..., &request), polled; PMPI_<name>(args) when
 * routing is off. */
#define POLLED(name, iname, params, ...)                                  \
    int MPI_##name params {                                               \
        if (!g.on) return PMPI_##name(__VA_ARGS__);                       \
        MPI_Request r;                                                    \
        return shim_poll_mpi(PMPI_##iname(__VA_ARGS__, &r), &r);          \
    }

POLLED(Barrier, Ibarrier, (MPI_Comm comm), comm)

POLLED(Bcast, Ibcast, (void *buf, int count, MPI_Datatype dt, int root, MPI_Comm comm),
       buf, count, dt, root, comm)

POLLED(Reduce, Ireduce,
       (const void *sbuf, void *rbuf, int count, MPI_Datatype dt, MPI_Op op, int root,
        MPI_Comm comm),
       sbuf, rbuf, count, dt, op, root, comm)

POLLED(Allreduce, Iallreduce,
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

POLLED(Allgather, Iallgather,
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
