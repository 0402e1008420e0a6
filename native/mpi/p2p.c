/* p2p.c — point-to-point calls on routed communicators: every send mode, receives, probes
 * and matched probes, sendrecv; dense data goes to the engine as it lies, other datatypes are
 * packed with PMPI_Pack and unpacked with PMPI_Unpack. Calls on other communicators (and to
 * or from MPI_PROC_NULL) go to PMPI unchanged. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "mpi/shim.h"

/* sc when a message to or from comm rank peer goes through the pool, else NULL (the MPI's own
 * path: a peer on this host or off the pool, a communicator not routed, MPI_PROC_NULL). */
static struct shim_comm *pool_peer(MPI_Comm comm, int peer) {
    struct shim_comm *sc = shim_comm_of(comm);
    if (!sc || !sc->npool || peer == MPI_PROC_NULL) return NULL;
    if (peer < 0 || peer >= sc->size) return sc;  /* check_args names the bad rank */
    return sc->route[peer] ? sc : NULL;
}

/* Where a receive from source goes. */
enum { RX_MPI, RX_POOL, RX_QUEUE };
static int recv_route(struct shim_comm *sc, int source) {
    if (!sc || !sc->npool || source == MPI_PROC_NULL) return RX_MPI;
    if (shim_must_queue(sc, source)) return RX_QUEUE;
    if (source == MPI_ANY_SOURCE || source < 0 || source >= sc->size) return RX_POOL;
    return sc->route[source] ? RX_POOL : RX_MPI;
}

/* MPI error class of bad arguments, before anything starts. */
static int check_args(const struct shim_comm *sc, int count, int peer, int tag, int recv) {
    if (count < 0) return MPI_ERR_COUNT;
    if (recv ? !(tag >= 0 || tag == MPI_ANY_TAG) : tag < 0) return MPI_ERR_TAG;
    if (!(peer >= 0 && peer < sc->size) && !(recv && peer == MPI_ANY_SOURCE)) return MPI_ERR_RANK;
    return MPI_SUCCESS;
}

static int packed_size(const struct slot *s, uint64_t *nbytes) {
    int n = 0;
    if (PMPI_Pack_size(s->count, s->dt, s->comm, &n) != MPI_SUCCESS) return MPI_ERR_TYPE;
    *nbytes = (uint64_t)n;
    return MPI_SUCCESS;
}

static int grow_tmp(struct slot *s, uint64_t nbytes) {
    if (s->tmp && s->tmp_bytes >= nbytes) return MPI_SUCCESS;
    void *p = realloc(s->tmp, nbytes ? nbytes : 1);
    if (!p) return MPI_ERR_NO_MEM;
    s->tmp = p, s->tmp_bytes = nbytes;
    return MPI_SUCCESS;
}

int shim_send_start(struct slot *s) {
    uint64_t nbytes;
    int tsize, rc;
    const int dense = shim_dense(s->dt, s->count, &nbytes, &tsize);
    if (dense < 0) return MPI_ERR_TYPE;
    const void *src = s->sbuf;
    if (!dense) {
        int pos = 0;
        if ((rc = packed_size(s, &nbytes)) || (rc = grow_tmp(s, nbytes))) return rc;
        if (nbytes > INT_MAX ||
            PMPI_Pack(s->sbuf, s->count, s->dt, s->tmp, (int)nbytes, &pos, s->comm) != MPI_SUCCESS)
            return MPI_ERR_TYPE;
        nbytes = (uint64_t)pos, src = s->tmp;
        ++g.st.packed;
    } else if (s->buffered) {  /* the caller may reuse its buffer at once */
        if ((rc = grow_tmp(s, nbytes))) return rc;
        if (nbytes) memcpy(s->tmp, s->sbuf, nbytes);
        src = s->tmp;
    }
    rc = cxk_msg_isend_ctx(g.eng, nbytes ? src : NULL, (int64_t)nbytes, shim_eng(s->sc, s->peer),
                           s->tag, s->sc->ctx, s->sync ? CXK_MSG_SYNC : 0, &s->req);
    if (rc) return shim_err(rc, "send");
    ++g.st.pool_sends;
    g.st.pool_send_bytes += nbytes;
    if (nbytes > cxk_msg_eager_bytes(g.eng) && cxk_msg_is_pool_mem(g.eng, src, nbytes))
        ++g.st.one_copy_sends;
    return MPI_SUCCESS;
}

/* Bytes the receive takes (dense: the buffer; else the packed size) and where. */
static int recv_room(struct slot *s, void **dst, uint64_t *cap, int *dense, int *tsize) {
    *dense = shim_dense(s->dt, s->count, cap, tsize);
    if (*dense < 0) return MPI_ERR_TYPE;
    *dst = s->rbuf;
    if (*dense) return MPI_SUCCESS;
    int rc = packed_size(s, cap);
    if (!rc) rc = grow_tmp(s, *cap);
    *dst = s->tmp;
    return rc;
}

int shim_recv_post(struct slot *s, int esrc, int etag) {
    void *dst;
    uint64_t cap;
    int dense, tsize;
    int rc = recv_room(s, &dst, &cap, &dense, &tsize);
    if (rc) return rc;
    rc = cxk_msg_irecv_ctx(g.eng, cap ? dst : NULL, (int64_t)cap, esrc, etag, s->sc->ctx, &s->req);
    return rc ? shim_err(rc, "receive") : MPI_SUCCESS;
}

/* A receive slot's start: queued behind (or as) an ANY_SOURCE receive of a communicator of
 * both routes, handed to the MPI for a peer on its path, else the engine's. */
int shim_recv_start(struct slot *s) {
    s->via_mpi = 0, s->mpi_err = MPI_SUCCESS, s->mreq = MPI_REQUEST_NULL;
    switch (recv_route(s->sc, s->peer)) {
        case RX_QUEUE: {
            const int i = slot_index(s);
            if (i < 0) return MPI_ERR_INTERN;  /* blocking receives queue through Irecv */
            return shim_queue_add(s->sc, i);
        }
        case RX_MPI:
            s->via_mpi = 1;
            return PMPI_Irecv(s->rbuf, s->count, s->dt, s->peer, s->tag, s->comm, &s->mreq);
        default: break;
    }
    const int src = s->peer == MPI_ANY_SOURCE ? CXK_ANY_SOURCE : shim_eng(s->sc, s->peer);
    const int tag = s->tag == MPI_ANY_TAG ? CXK_ANY_TAG : s->tag;
    return shim_recv_post(s, src, tag);
}

int shim_recv_finish(struct slot *s, MPI_Status *st) {
    if (s->cancelled) {
        shim_status_set(st, MPI_ANY_SOURCE, MPI_ANY_TAG, 0, 1);
        return MPI_SUCCESS;
    }
    if (s->via_mpi) {  /* the MPI wrote the data; its status, saved at completion */
        const int src = s->src >= 0 && s->src < g.size ? s->sc->from_world[s->src] : MPI_ANY_SOURCE;
        shim_status_set(st, src, s->rtag, s->nbytes, 0);
        ++g.st.mpi_recvs;
        return s->mpi_err;
    }
    if (s->err && s->err != -EMSGSIZE) return shim_err(s->err, "receive");
    void *dst;
    uint64_t cap;
    int dense, tsize;
    int rc = recv_room(s, &dst, &cap, &dense, &tsize);
    if (rc) return rc;
    /* on truncation the buffer holds the message's first cap bytes; the status counts them */
    const uint64_t got = s->nbytes < cap ? s->nbytes : cap;
    if (!dense && got) {
        int pos = 0;
        if (PMPI_Unpack(s->tmp, (int)got, &pos, s->rbuf, tsize ? (int)(got / (uint64_t)tsize) : 0,
                        s->dt, s->comm) != MPI_SUCCESS)
            return MPI_ERR_TYPE;
        ++g.st.packed;
    }
    const int src = s->src >= 0 && s->src < g.size ? s->sc->from_world[s->src] : MPI_ANY_SOURCE;
    shim_status_set(st, src, s->rtag, got, 0);
    ++g.st.pool_recvs;
    g.st.pool_recv_bytes += got;
    return s->err == -EMSGSIZE ? MPI_ERR_TRUNCATE : MPI_SUCCESS;
}

static void set_args(struct slot *s, struct shim_comm *sc, MPI_Comm comm, int kind,
                     const void *sbuf, void *rbuf, int count, MPI_Datatype dt, int peer, int tag) {
    s->kind = (uint8_t)kind, s->sc = sc, s->comm = comm;
    s->sbuf = sbuf, s->rbuf = rbuf, s->count = count, s->dt = dt, s->peer = peer, s->tag = tag;
}

/* ---- blocking calls: a slot on the stack, never in the table ---- */
static int run_blocking(struct slot *s, MPI_Status *st) {
    int rc = s->kind == SLOT_SEND ? shim_send_start(s) : shim_recv_start(s);
    if (!rc) {
        slot_drive(s, 1);
        if (s->kind == SLOT_RECV) rc = shim_recv_finish(s, st);
        else if (s->err) rc = shim_err(s->err, "send");
    }
    free(s->tmp);
    return rc ? shim_fail(s->comm, rc) : MPI_SUCCESS;
}

static int send_blocking(const void *buf, int count, MPI_Datatype dt, int dest, int tag,
                         MPI_Comm comm, struct shim_comm *sc, int sync) {
    int rc = check_args(sc, count, dest, tag, 0);
    if (rc) return shim_fail(comm, rc);
    struct slot s = {0};
    set_args(&s, sc, comm, SLOT_SEND, buf, NULL, count, dt, dest, tag);
    s.sync = (uint8_t)sync;
    return run_blocking(&s, MPI_STATUS_IGNORE);
}

/* An unrouted blocking call while the engine owes peers progress: nonblocking + polling. */
static int mpi_poll(int rc, MPI_Request *r, MPI_Status *st) {
    return rc != MPI_SUCCESS ? rc : MPI_Wait(r, st);
}

int MPI_Send(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm) {
    struct shim_comm *sc = pool_peer(comm, dest);
    if (sc) return send_blocking(buf, count, dt, dest, tag, comm, sc, 0);
    if (!g.on) return PMPI_Send(buf, count, dt, dest, tag, comm);
    shim_count_mpi_send(comm, dest, count, dt);
    MPI_Request r;
    if (g.inflight && dest != MPI_PROC_NULL)
        return mpi_poll(PMPI_Isend(buf, count, dt, dest, tag, comm, &r), &r, MPI_STATUS_IGNORE);
    return PMPI_Send(buf, count, dt, dest, tag, comm);
}

int MPI_Ssend(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm) {
    struct shim_comm *sc = pool_peer(comm, dest);
    if (sc) return send_blocking(buf, count, dt, dest, tag, comm, sc, 1);
    if (g.on) shim_count_mpi_send(comm, dest, count, dt);
    return PMPI_Ssend(buf, count, dt, dest, tag, comm);
}

int MPI_Rsend(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm) {
    struct shim_comm *sc = pool_peer(comm, dest);
    if (sc) return send_blocking(buf, count, dt, dest, tag, comm, sc, 0);
    if (g.on) shim_count_mpi_send(comm, dest, count, dt);
    return PMPI_Rsend(buf, count, dt, dest, tag, comm);
}

int MPI_Recv(void *buf, int count, MPI_Datatype dt, int source, int tag, MPI_Comm comm,
             MPI_Status *st) {
    struct shim_comm *sc = shim_comm_of(comm);
    const int rx = recv_route(sc, source);
    if (rx == RX_QUEUE) {  /* a slot of the table, so the queue can hold it */
        MPI_Request r;
        int rc = MPI_Irecv(buf, count, dt, source, tag, comm, &r);
        return rc ? rc : MPI_Wait(&r, st);
    }
    if (rx == RX_MPI) {
        if (!g.on) return PMPI_Recv(buf, count, dt, source, tag, comm, st);
        ++g.st.mpi_recvs;
        MPI_Request r;
        if (g.inflight && source != MPI_PROC_NULL)
            return mpi_poll(PMPI_Irecv(buf, count, dt, source, tag, comm, &r), &r, st);
        return PMPI_Recv(buf, count, dt, source, tag, comm, st);
    }
    int rc = check_args(sc, count, source, tag, 1);
    if (rc) return shim_fail(comm, rc);
    struct slot s = {0};
    set_args(&s, sc, comm, SLOT_RECV, NULL, buf, count, dt, source, tag);
    return run_blocking(&s, st);
}

/* ---- nonblocking and persistent: slots in the table ---- */
enum { MODE_STD = 0, MODE_SYNC = 1, MODE_BUFFERED = 2 };

static int new_request(struct shim_comm *sc, MPI_Comm comm, int kind, int mode, int persistent,
                       const void *sbuf, void *rbuf, int count, MPI_Datatype dt, int peer,
                       int tag, MPI_Request *req) {
    int rc = check_args(sc, count, peer, tag, kind == SLOT_RECV);
    if (rc) return shim_fail(comm, rc);
    const int i = slot_new();
    if (i < 0) return shim_fail(comm, MPI_ERR_NO_MEM);
    struct slot *s = slot_at(i);
    set_args(s, sc, comm, kind, sbuf, rbuf, count, dt, peer, tag);
    s->sync = mode == MODE_SYNC, s->buffered = mode == MODE_BUFFERED;
    s->persistent = (uint8_t)persistent;
    if (!persistent && (rc = slot_start(i))) {
        slot_release(i);
        return shim_fail(comm, rc);
    }
    if (req) *req = slot_request(i);
    else shim_detach_slot(i);
    return MPI_SUCCESS;
}

#define SEND_CALL(NAME, MODE, PERSISTENT)                                                      \
    int MPI_##NAME(const void *buf, int count, MPI_Datatype dt, int dest, int tag,              \
                   MPI_Comm comm, MPI_Request *req) {                                           \
        struct shim_comm *sc = pool_peer(comm, dest);                                           \
        if (!sc) {                                                                              \
            if (g.on) shim_count_mpi_send(comm, dest, count, dt);                               \
            return PMPI_##NAME(buf, count, dt, dest, tag, comm, req);                           \
        }                                                                                       \
        return new_request(sc, comm, SLOT_SEND, MODE, PERSISTENT, buf, NULL, count, dt, dest,   \
                           tag, req);                                                           \
    }
SEND_CALL(Isend, MODE_STD, 0)
SEND_CALL(Irsend, MODE_STD, 0)
SEND_CALL(Issend, MODE_SYNC, 0)
SEND_CALL(Ibsend, MODE_BUFFERED, 0)
SEND_CALL(Send_init, MODE_STD, 1)
SEND_CALL(Rsend_init, MODE_STD, 1)
SEND_CALL(Ssend_init, MODE_SYNC, 1)
SEND_CALL(Bsend_init, MODE_BUFFERED, 1)

/* Buffered: the engine gets a copy and the call returns; the shim drains it later. The
 * user's MPI_Buffer_attach space is not used (nor can it overflow). */
int MPI_Bsend(const void *buf, int count, MPI_Datatype dt, int dest, int tag, MPI_Comm comm) {
    struct shim_comm *sc = pool_peer(comm, dest);
    if (!sc) {
        if (g.on) shim_count_mpi_send(comm, dest, count, dt);
        return PMPI_Bsend(buf, count, dt, dest, tag, comm);
    }
    return new_request(sc, comm, SLOT_SEND, MODE_BUFFERED, 0, buf, NULL, count, dt, dest, tag,
                       NULL);
}

int MPI_Irecv(void *buf, int count, MPI_Datatype dt, int source, int tag, MPI_Comm comm,
              MPI_Request *req) {
    struct shim_comm *sc = shim_comm_of(comm);
    if (recv_route(sc, source) == RX_MPI) {
        if (g.on) ++g.st.mpi_recvs;
        return PMPI_Irecv(buf, count, dt, source, tag, comm, req);
    }
    return new_request(sc, comm, SLOT_RECV, MODE_STD, 0, NULL, buf, count, dt, source, tag, req);
}

int MPI_Recv_init(void *buf, int count, MPI_Datatype dt, int source, int tag, MPI_Comm comm,
                  MPI_Request *req) {
    struct shim_comm *sc = shim_comm_of(comm);
    /* on a communicator of both routes each start decides (a queue may be waiting then) */
    if (recv_route(sc, source) == RX_MPI && !(sc && sc->mixed && source != MPI_PROC_NULL)) {
        if (g.on) ++g.st.mpi_recvs;
        return PMPI_Recv_init(buf, count, dt, source, tag, comm, req);
    }
    return new_request(sc, comm, SLOT_RECV, MODE_STD, 1, NULL, buf, count, dt, source, tag, req);
}

/* ---- sendrecv: the receive is posted first, so two ranks exchanging never deadlock ---- */
static int sendrecv(struct shim_comm *sc, MPI_Comm comm, const void *sbuf, int scount,
                    MPI_Datatype sdt, int dest, int stag, void *rbuf, int rcount,
                    MPI_Datatype rdt, int source, int rtag, MPI_Status *st, int copy_send) {
    int rc = MPI_SUCCESS;
    if (dest != MPI_PROC_NULL) rc = check_args(sc, scount, dest, stag, 0);
    if (!rc && source != MPI_PROC_NULL) rc = check_args(sc, rcount, source, rtag, 1);
    if (rc) return shim_fail(comm, rc);
    struct slot s = {0}, r = {0};
    set_args(&s, sc, comm, SLOT_SEND, sbuf, NULL, scount, sdt, dest, stag);
    set_args(&r, sc, comm, SLOT_RECV, NULL, rbuf, rcount, rdt, source, rtag);
    s.buffered = (uint8_t)copy_send;  /* replace: the data leaves before the buffer is reused */
    if (dest != MPI_PROC_NULL) rc = shim_send_start(&s);
    if (!rc && source != MPI_PROC_NULL) rc = shim_recv_start(&r);
    if (!rc) {
        slot_drive(&s, 1);
        slot_drive(&r, 1);
        if (s.err) rc = shim_err(s.err, "send");
        if (source == MPI_PROC_NULL) shim_status_set(st, MPI_PROC_NULL, MPI_ANY_TAG, 0, 0);
        else if (!rc) rc = shim_recv_finish(&r, st);
    } else {
        if (s.req) slot_drive(&s, 1);  /* a started send finishes before its buffer goes */
        if (r.req) cxk_msg_cancel(g.eng, r.req);
    }
    free(s.tmp);
    free(r.tmp);
    return rc ? shim_fail(comm, rc) : MPI_SUCCESS;
}

/* Sendrecv on a communicator of both routes: the shim's own Irecv, Isend and Waitall (each
 * half on its peer's route, the receive queued when it must be). */
static int sendrecv_mixed(const void *sbuf, int scount, MPI_Datatype sdt, int dest, int stag,
                          void *rbuf, int rcount, MPI_Datatype rdt, int source, int rtag,
                          MPI_Comm comm, MPI_Status *st) {
    MPI_Request r[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    MPI_Status sts[2];
    int rc = MPI_Irecv(rbuf, rcount, rdt, source, rtag, comm, &r[0]);
    if (!rc) rc = MPI_Isend(sbuf, scount, sdt, dest, stag, comm, &r[1]);
    if (rc) {
        if (r[0] != MPI_REQUEST_NULL) MPI_Cancel(&r[0]), MPI_Wait(&r[0], MPI_STATUS_IGNORE);
        return rc;
    }
    rc = MPI_Waitall(2, r, sts);
    if (rc == MPI_ERR_IN_STATUS) rc = sts[0].MPI_ERROR ? sts[0].MPI_ERROR : sts[1].MPI_ERROR;
    if (st != MPI_STATUS_IGNORE) *st = sts[0];
    return rc;
}

int MPI_Sendrecv(const void *sbuf, int scount, MPI_Datatype sdt, int dest, int stag, void *rbuf,
                 int rcount, MPI_Datatype rdt, int source, int rtag, MPI_Comm comm,
                 MPI_Status *st) {
    struct shim_comm *sc = shim_comm_of(comm);
    if (sc && sc->mixed)
        return sendrecv_mixed(sbuf, scount, sdt, dest, stag, rbuf, rcount, rdt, source, rtag,
                              comm, st);
    if (!sc || !sc->npool) {
        if (g.on) shim_count_mpi_send(comm, dest, scount, sdt), ++g.st.mpi_recvs;
        return PMPI_Sendrecv(sbuf, scount, sdt, dest, stag, rbuf, rcount, rdt, source, rtag,
                             comm, st);
    }
    return sendrecv(sc, comm, sbuf, scount, sdt, dest, stag, rbuf, rcount, rdt, source, rtag,
                    st, 0);
}

/* The same for Sendrecv_replace: the outgoing data packed first (MPI_PACKED matches the
 * receiver's datatype on either route). */
static int sendrecv_replace_mixed(void *buf, int count, MPI_Datatype dt, int dest, int stag,
                                  int source, int rtag, MPI_Comm comm, MPI_Status *st) {
    int n = 0, pos = 0;
    if (count < 0) return shim_fail(comm, MPI_ERR_COUNT);
    if (PMPI_Pack_size(count, dt, comm, &n) != MPI_SUCCESS) return shim_fail(comm, MPI_ERR_TYPE);
    void *tmp = malloc(n ? (size_t)n : 1);
    if (!tmp) return shim_fail(comm, MPI_ERR_NO_MEM);
    int rc = PMPI_Pack(buf, count, dt, tmp, n, &pos, comm);
    if (!rc)
        rc = sendrecv_mixed(tmp, pos, MPI_PACKED, dest, stag, buf, count, dt, source, rtag, comm,
                            st);
    free(tmp);
    return rc;
}

int MPI_Sendrecv_replace(void *buf, int count, MPI_Datatype dt, int dest, int stag, int source,
                         int rtag, MPI_Comm comm, MPI_Status *st) {
    struct shim_comm *sc = shim_comm_of(comm);
    if (sc && sc->mixed)
        return sendrecv_replace_mixed(buf, count, dt, dest, stag, source, rtag, comm, st);
    if (!sc || !sc->npool) {
        if (g.on) shim_count_mpi_send(comm, dest, count, dt), ++g.st.mpi_recvs;
        return PMPI_Sendrecv_replace(buf, count, dt, dest, stag, source, rtag, comm, st);
    }
    return sendrecv(sc, comm, buf, count, dt, dest, stag, buf, count, dt, source, rtag, st, 1);
}

/* ---- probes ---- */
static int probe_args(struct shim_comm *sc, int source, int tag, int *src, int *tg) {
    int rc = check_args(sc, 0, source, tag, 1);
    *src = source == MPI_ANY_SOURCE ? CXK_ANY_SOURCE : rc ? 0 : shim_eng(sc, source);
    *tg = tag == MPI_ANY_TAG ? CXK_ANY_TAG : tag;
    return rc;
}

static void probe_status(struct shim_comm *sc, const struct cxk_msg_status *cs, MPI_Status *st) {
    shim_status_set(st, shim_comm_rank_of_eng(sc, cs->source), cs->tag, cs->count, 0);
}

/* Where a probe looks: the MPI alone, the pool alone, or both (ANY_SOURCE on a communicator of
 * both routes). Queued receives take their messages first: a probe sees what a receive
 * posted now would get. */
enum { PR_MPI = 1, PR_POOL = 2, PR_BOTH = 3 };
static int probe_route(struct shim_comm *sc, int source) {
    if (!sc || !sc->npool || source == MPI_PROC_NULL) return PR_MPI;
    if (sc->nq) shim_progress();
    if (source == MPI_ANY_SOURCE) return sc->mixed ? PR_BOTH : PR_POOL;
    if (source < 0 || source >= sc->size) return PR_POOL;
    return sc->route[source] ? PR_POOL : PR_MPI;
}

/* The engine's part of a probe (source in comm ranks or ANY). */
static int pool_iprobe(struct shim_comm *sc, int source, int tag, int *flag,
                       struct cxk_msg_status *cs) {
    int src, tg, rc = probe_args(sc, source, tag, &src, &tg);
    if (rc) return rc;
    if ((rc = cxk_msg_iprobe_ctx(g.eng, src, tg, sc->ctx, flag, cs))) return shim_err(rc, "iprobe");
    return MPI_SUCCESS;
}

int MPI_Iprobe(int source, int tag, MPI_Comm comm, int *flag, MPI_Status *st) {
    struct shim_comm *sc = shim_comm_of(comm);
    const int pr = probe_route(sc, source);
    if (pr & PR_MPI) {
        if (g.on && g.inflight) shim_progress();
        int rc = PMPI_Iprobe(source, tag, comm, flag, st);
        if (rc || *flag || pr == PR_MPI) return rc;
    }
    struct cxk_msg_status cs;
    int rc = pool_iprobe(sc, source, tag, flag, &cs);
    if (rc) return shim_fail(comm, rc);
    if (*flag) probe_status(sc, &cs, st);
    return MPI_SUCCESS;
}

int MPI_Probe(int source, int tag, MPI_Comm comm, MPI_Status *st) {
    struct shim_comm *sc = shim_comm_of(comm);
    const int pr = probe_route(sc, source);
    if (pr == PR_MPI && !(g.on && g.inflight)) return PMPI_Probe(source, tag, comm, st);
    if (pr == PR_POOL) {
        int src, tg, rc = probe_args(sc, source, tag, &src, &tg);
        if (rc) return shim_fail(comm, rc);
        struct cxk_msg_status cs;
        if ((rc = cxk_msg_probe_ctx(g.eng, src, tg, sc->ctx, &cs)))
            return shim_fail(comm, shim_err(rc, "probe"));
        probe_status(sc, &cs, st);
        return MPI_SUCCESS;
    }
    for (int flag = 0;;) {  /* both routes (or the MPI while the engine owes progress) */
        int rc = MPI_Iprobe(source, tag, comm, &flag, st);
        if (rc || flag) return rc;
        shim_progress();
    }
}

/* Matched probe: the probed message is received at once into a buffer of the message handle
 * (an exact-source, exact-tag receive takes the first such message, which is the probed
 * one: any earlier one would have matched the probe first). */
static int take_message(struct shim_comm *sc, MPI_Comm comm, const struct cxk_msg_status *cs,
                        MPI_Message *msg, MPI_Status *st) {
    const int i = slot_new();
    if (i < 0) return shim_fail(comm, MPI_ERR_NO_MEM);
    struct slot *s = slot_at(i);
    s->kind = SLOT_MESSAGE, s->sc = sc, s->comm = comm;
    int rc = grow_tmp(s, cs->count);
    if (!rc) {
        rc = cxk_msg_irecv_ctx(g.eng, cs->count ? s->tmp : NULL, (int64_t)cs->count, cs->source,
                               cs->tag, sc->ctx, &s->req);  /* engine ranks both */
        rc = rc ? shim_err(rc, "mprobe") : MPI_SUCCESS;
    }
    if (!rc) {
        slot_drive(s, 1);
        if (s->err) rc = shim_err(s->err, "mprobe");
    }
    if (rc) {
        slot_release(i);
        return shim_fail(comm, rc);
    }
    *msg = slot_message(i);
    probe_status(sc, cs, st);
    return MPI_SUCCESS;
}

int MPI_Improbe(int source, int tag, MPI_Comm comm, int *flag, MPI_Message *msg,
                MPI_Status *st) {
    struct shim_comm *sc = shim_comm_of(comm);
    const int pr = probe_route(sc, source);
    if (pr & PR_MPI) {
        if (g.on && g.inflight) shim_progress();
        int rc = PMPI_Improbe(source, tag, comm, flag, msg, st);
        if (rc || *flag || pr == PR_MPI) return rc;
    }
    struct cxk_msg_status cs;
    int rc = pool_iprobe(sc, source, tag, flag, &cs);
    if (rc) return shim_fail(comm, rc);
    return *flag ? take_message(sc, comm, &cs, msg, st) : MPI_SUCCESS;
}

int MPI_Mprobe(int source, int tag, MPI_Comm comm, MPI_Message *msg, MPI_Status *st) {
    struct shim_comm *sc = shim_comm_of(comm);
    const int pr = probe_route(sc, source);
    if (pr == PR_MPI && !(g.on && g.inflight)) return PMPI_Mprobe(source, tag, comm, msg, st);
    if (pr == PR_POOL) {
        int src, tg, rc = probe_args(sc, source, tag, &src, &tg);
        if (rc) return shim_fail(comm, rc);
        struct cxk_msg_status cs;
        if ((rc = cxk_msg_probe_ctx(g.eng, src, tg, sc->ctx, &cs)))
            return shim_fail(comm, shim_err(rc, "mprobe"));
        return take_message(sc, comm, &cs, msg, st);
    }
    for (int flag = 0;;) {
        int rc = MPI_Improbe(source, tag, comm, &flag, msg, st);
        if (rc || flag) return rc;
        shim_progress();
    }
}

/* The message's bytes into buf as a completed receive slot (the request of Imrecv). */
static int deliver(MPI_Message *msg, void *buf, int count, MPI_Datatype dt, int *out) {
    const int i = slot_of_message(*msg);
    struct slot *s = slot_at(i);
    if (count < 0) return MPI_ERR_COUNT;
    s->kind = SLOT_RECV, s->rbuf = buf, s->count = count, s->dt = dt;
    s->active = 1, s->done = 1;
    uint64_t cap;
    int tsize, dense = shim_dense(dt, count, &cap, &tsize);
    if (dense < 0) return MPI_ERR_TYPE;
    if (dense) {
        const uint64_t got = s->nbytes < cap ? s->nbytes : cap;
        if (got) memcpy(buf, s->tmp, got);
    } else {  /* recv_finish unpacks from tmp, which must hold the packed size */
        int rc = packed_size(s, &cap);
        if (rc || (rc = grow_tmp(s, cap))) return rc;
    }
    if (s->nbytes > cap) s->err = -EMSGSIZE;
    *msg = MPI_MESSAGE_NULL;
    *out = i;
    return MPI_SUCCESS;
}

int MPI_Imrecv(void *buf, int count, MPI_Datatype dt, MPI_Message *msg, MPI_Request *req) {
    if (!g.on || !msg || slot_of_message(*msg) < 0)
        return PMPI_Imrecv(buf, count, dt, msg, req);
    MPI_Comm comm = slot_at(slot_of_message(*msg))->comm;
    int i, rc = deliver(msg, buf, count, dt, &i);
    if (rc) return shim_fail(comm, rc);
    *req = slot_request(i);
    return MPI_SUCCESS;
}

int MPI_Mrecv(void *buf, int count, MPI_Datatype dt, MPI_Message *msg, MPI_Status *st) {
    if (!g.on || !msg || slot_of_message(*msg) < 0) return PMPI_Mrecv(buf, count, dt, msg, st);
    MPI_Request req;
    int rc = MPI_Imrecv(buf, count, dt, msg, &req);
    return rc ? rc : MPI_Wait(&req, st);
}
