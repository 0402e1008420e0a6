/* mpi4.c — the MPI-4 forms of the routed calls (MPICH 4 has them; Open MPI 4.1 does not):
 * the large-count `_c` calls go to the int calls of the shim when the count fits (a larger
 * one on a routed communicator is refused with MPI_ERR_COUNT), and MPI_Isendrecv(_replace)
 * on a routed communicator is a buffered send (its own copy, nobody waits for it) plus a
 * receive whose request is the call's. On other communicators they go to PMPI. */
#include <limits.h>
#include <stdlib.h>

#include "mpi/shim.h"

/* Sends to a peer on the MPI's path from a copy of the shim's, nobody waiting for them: each
 * copy is freed once the MPI completes its send. */
struct mpi_copy {
    MPI_Request r;
    void *buf;
};
static struct mpi_copy *copies;
static int ncopies;
#if MPI_VERSION >= 4
static int capcopies;
#endif

void shim_mpi_copies_drain(int block) {
    for (int k = 0; k < ncopies;) {
        int flag = 0;
        if (block) PMPI_Wait(&copies[k].r, MPI_STATUS_IGNORE), flag = 1;
        else PMPI_Test(&copies[k].r, &flag, MPI_STATUS_IGNORE);
        if (!flag) {
            ++k;
            continue;
        }
        free(copies[k].buf);
        copies[k] = copies[--ncopies];
    }
}

#if MPI_VERSION >= 4

/* the int count of a routed call: -1 keeps a negative count an MPI_ERR_COUNT of the int call */
#define NARROW(comm, count)                                              \
    do {                                                                 \
        if ((count) > INT_MAX) return shim_fail((comm), MPI_ERR_COUNT);  \
        if ((count) < 0) (count) = -1;                                   \
    } while (0)

#define SEND_C(NAME)                                                                          \
    int MPI_##NAME##_c(const void *buf, MPI_Count count, MPI_Datatype dt, int dest, int tag,  \
                       MPI_Comm comm) {                                                       \
        if (!shim_comm_of(comm)) return PMPI_##NAME##_c(buf, count, dt, dest, tag, comm);     \
        NARROW(comm, count);                                                                  \
        return MPI_##NAME(buf, (int)count, dt, dest, tag, comm);                              \
    }
SEND_C(Send)
SEND_C(Ssend)
SEND_C(Rsend)
SEND_C(Bsend)

#define ISEND_C(NAME)                                                                          \
    int MPI_##NAME##_c(const void *buf, MPI_Count count, MPI_Datatype dt, int dest, int tag,   \
                       MPI_Comm comm, MPI_Request *req) {                                      \
        if (!shim_comm_of(comm)) return PMPI_##NAME##_c(buf, count, dt, dest, tag, comm, req); \
        NARROW(comm, count);                                                                   \
        return MPI_##NAME(buf, (int)count, dt, dest, tag, comm, req);                          \
    }
ISEND_C(Isend)
ISEND_C(Issend)
ISEND_C(Irsend)
ISEND_C(Ibsend)
ISEND_C(Send_init)
ISEND_C(Ssend_init)
ISEND_C(Rsend_init)
ISEND_C(Bsend_init)

int MPI_Recv_c(void *buf, MPI_Count count, MPI_Datatype dt, int source, int tag, MPI_Comm comm,
               MPI_Status *st) {
    if (!shim_comm_of(comm)) return PMPI_Recv_c(buf, count, dt, source, tag, comm, st);
    NARROW(comm, count);
    return MPI_Recv(buf, (int)count, dt, source, tag, comm, st);
}

int MPI_Irecv_c(void *buf, MPI_Count count, MPI_Datatype dt, int source, int tag, MPI_Comm comm,
                MPI_Request *req) {
    if (!shim_comm_of(comm)) return PMPI_Irecv_c(buf, count, dt, source, tag, comm, req);
    NARROW(comm, count);
    return MPI_Irecv(buf, (int)count, dt, source, tag, comm, req);
}

int MPI_Recv_init_c(void *buf, MPI_Count count, MPI_Datatype dt, int source, int tag,
                    MPI_Comm comm, MPI_Request *req) {
    if (!shim_comm_of(comm)) return PMPI_Recv_init_c(buf, count, dt, source, tag, comm, req);
    NARROW(comm, count);
    return MPI_Recv_init(buf, (int)count, dt, source, tag, comm, req);
}

int MPI_Sendrecv_c(const void *sbuf, MPI_Count scount, MPI_Datatype sdt, int dest, int stag,
                   void *rbuf, MPI_Count rcount, MPI_Datatype rdt, int source, int rtag,
                   MPI_Comm comm, MPI_Status *st) {
    if (!shim_comm_of(comm))
        return PMPI_Sendrecv_c(sbuf, scount, sdt, dest, stag, rbuf, rcount, rdt, source, rtag,
                               comm, st);
    NARROW(comm, scount);
    NARROW(comm, rcount);
    return MPI_Sendrecv(sbuf, (int)scount, sdt, dest, stag, rbuf, (int)rcount, rdt, source, rtag,
                        comm, st);
}

int MPI_Sendrecv_replace_c(void *buf, MPI_Count count, MPI_Datatype dt, int dest, int stag,
                           int source, int rtag, MPI_Comm comm, MPI_Status *st) {
    if (!shim_comm_of(comm))
        return PMPI_Sendrecv_replace_c(buf, count, dt, dest, stag, source, rtag, comm, st);
    NARROW(comm, count);
    return MPI_Sendrecv_replace(buf, (int)count, dt, dest, stag, source, rtag, comm, st);
}

int MPI_Mrecv_c(void *buf, MPI_Count count, MPI_Datatype dt, MPI_Message *msg, MPI_Status *st) {
    if (!g.on || !msg || slot_of_message(*msg) < 0) return PMPI_Mrecv_c(buf, count, dt, msg, st);
    if (count > INT_MAX) return shim_fail(slot_at(slot_of_message(*msg))->comm, MPI_ERR_COUNT);
    return MPI_Mrecv(buf, count < 0 ? -1 : (int)count, dt, msg, st);
}

int MPI_Imrecv_c(void *buf, MPI_Count count, MPI_Datatype dt, MPI_Message *msg,
                 MPI_Request *req) {
    if (!g.on || !msg || slot_of_message(*msg) < 0)
        return PMPI_Imrecv_c(buf, count, dt, msg, req);
    if (count > INT_MAX) return shim_fail(slot_at(slot_of_message(*msg))->comm, MPI_ERR_COUNT);
    return MPI_Imrecv(buf, count < 0 ? -1 : (int)count, dt, msg, req);
}

/* The send half carries its own copy (taken now), so the request need only be the receive's:
 * once it completes, both buffers are the caller's again. */
static int mpi_copy_send(const void *sbuf, int scount, MPI_Datatype sdt, int dest, int stag,
                         MPI_Comm comm) {
    int n = 0, pos = 0;
    if (scount < 0) return shim_fail(comm, MPI_ERR_COUNT);
    if (PMPI_Pack_size(scount, sdt, comm, &n) != MPI_SUCCESS) return shim_fail(comm, MPI_ERR_TYPE);
    if (ncopies == capcopies) {
        const int ncap = capcopies ? 2 * capcopies : 16;
        struct mpi_copy *nc = realloc(copies, sizeof *nc * (size_t)ncap);
        if (!nc) return shim_fail(comm, MPI_ERR_NO_MEM);
        copies = nc, capcopies = ncap;
    }
    void *buf = malloc(n ? (size_t)n : 1);
    if (!buf) return shim_fail(comm, MPI_ERR_NO_MEM);
    int rc = PMPI_Pack(sbuf, scount, sdt, buf, n, &pos, comm);
    if (!rc) rc = PMPI_Isend(buf, pos, MPI_PACKED, dest, stag, comm, &copies[ncopies].r);
    if (rc) {
        free(buf);
        return rc;
    }
    copies[ncopies++].buf = buf;
    shim_count_mpi_send(comm, dest, scount, sdt);
    return MPI_SUCCESS;
}

static int send_half(const void *sbuf, int scount, MPI_Datatype sdt, int dest, int stag,
                     MPI_Comm comm) {
    if (dest == MPI_PROC_NULL) return MPI_SUCCESS;
    struct shim_comm *sc = shim_comm_of(comm);
    if (dest >= 0 && dest < sc->size && !sc->route[dest])  /* the MPI's Ibsend needs a buffer */
        return mpi_copy_send(sbuf, scount, sdt, dest, stag, comm);
    MPI_Request s;
    int rc = MPI_Ibsend(sbuf, scount, sdt, dest, stag, comm, &s);
    return rc != MPI_SUCCESS ? rc : MPI_Request_free(&s);
}

int MPI_Isendrecv(const void *sbuf, int scount, MPI_Datatype sdt, int dest, int stag, void *rbuf,
                  int rcount, MPI_Datatype rdt, int source, int rtag, MPI_Comm comm,
                  MPI_Request *req) {
    struct shim_comm *sc = shim_comm_of(comm);
    if (!sc || !sc->npool)
        return PMPI_Isendrecv(sbuf, scount, sdt, dest, stag, rbuf, rcount, rdt, source, rtag,
                              comm, req);
    int rc = send_half(sbuf, scount, sdt, dest, stag, comm);
    return rc != MPI_SUCCESS ? rc : MPI_Irecv(rbuf, rcount, rdt, source, rtag, comm, req);
}

int MPI_Isendrecv_replace(void *buf, int count, MPI_Datatype dt, int dest, int stag, int source,
                          int rtag, MPI_Comm comm, MPI_Request *req) {
    struct shim_comm *sc = shim_comm_of(comm);
    if (!sc || !sc->npool)
        return PMPI_Isendrecv_replace(buf, count, dt, dest, stag, source, rtag, comm, req);
    int rc = send_half(buf, count, dt, dest, stag, comm);
    return rc != MPI_SUCCESS ? rc : MPI_Irecv(buf, count, dt, source, rtag, comm, req);
}

int MPI_Isendrecv_c(const void *sbuf, MPI_Count scount, MPI_Datatype sdt, int dest, int stag,
                    void *rbuf, MPI_Count rcount, MPI_Datatype rdt, int source, int rtag,
                    MPI_Comm comm, MPI_Request *req) {
    if (!shim_comm_of(comm))
        return PMPI_Isendrecv_c(sbuf, scount, sdt, dest, stag, rbuf, rcount, rdt, source, rtag,
                                comm, req);
    NARROW(comm, scount);
    NARROW(comm, rcount);
    return MPI_Isendrecv(sbuf, (int)scount, sdt, dest, stag, rbuf, (int)rcount, rdt, source,
                         rtag, comm, req);
}

int MPI_Isendrecv_replace_c(void *buf, MPI_Count count, MPI_Datatype dt, int dest, int stag,
                            int source, int rtag, MPI_Comm comm, MPI_Request *req) {
    if (!shim_comm_of(comm))
        return PMPI_Isendrecv_replace_c(buf, count, dt, dest, stag, source, rtag, comm, req);
    NARROW(comm, count);
    return MPI_Isendrecv_replace(buf, (int)count, dt, dest, stag, source, rtag, comm, req);
}

#endif
