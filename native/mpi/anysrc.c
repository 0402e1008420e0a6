/* anysrc.c — receives on a communicator whose peers take both routes (some on the MPI's own
 * path, some through the pool). A receive from one peer goes to that peer's route, which keeps
 * the pair's order. An MPI_ANY_SOURCE receive cannot be posted to both transports: each could
 * match a message before the other is withdrawn, and a message once matched cannot be given
 * back (MPICH's ch4 posts it to both its shared-memory and network modules and cancels the
 * partner from the match callback, inside the one progress engine that drives both; the shim
 * drives two engines, so it matches by probing instead). Such a receive waits in the
 * communicator's queue, and so does every receive posted behind it while it waits (a later
 * receive must never take a message an earlier one matches). Progress probes both routes for
 * each queued receive in posted order, without taking anything; a message found goes to the
 * first queued receive that matches it (the message may have arrived after an earlier
 * receive's probe), taken atomically from the MPI (PMPI_Improbe + PMPI_Imrecv) or from the
 * engine (an exact-source, exact-tag receive takes the first such message: the probed one).
 * That is MPI's rule: a message goes to the first posted receive it matches, messages of one
 * sender in order. */
#include <stdlib.h>

#include "mpi/shim.h"

static struct shim_comm **busy;  /* communicators with queued receives */
static int nbusy, capbusy;

int shim_must_queue(const struct shim_comm *sc, int source) {
    return sc->mixed && (source == MPI_ANY_SOURCE || sc->nq > 0);
}

int shim_queue_add(struct shim_comm *sc, int i) {
    if (sc->nq == sc->capq) {
        const int ncap = sc->capq ? 2 * sc->capq : 8;
        int *nq = realloc(sc->q, sizeof *nq * (size_t)ncap);
        if (!nq) return MPI_ERR_NO_MEM;
        sc->q = nq, sc->capq = ncap;
    }
    if (!sc->nq && nbusy == capbusy) {
        const int ncap = capbusy ? 2 * capbusy : 8;
        struct shim_comm **nb = realloc(busy, sizeof *nb * (size_t)ncap);
        if (!nb) return MPI_ERR_NO_MEM;
        busy = nb, capbusy = ncap;
    }
    if (!sc->nq) busy[nbusy++] = sc;
    sc->q[sc->nq++] = i;
    slot_at(i)->queued = 1;
    return MPI_SUCCESS;
}

static void unqueue_at(struct shim_comm *sc, int k) {
    slot_at(sc->q[k])->queued = 0;
    for (int j = k + 1; j < sc->nq; ++j) sc->q[j - 1] = sc->q[j];
    if (--sc->nq) return;
    if (sc->held != MPI_COMM_NULL) PMPI_Comm_free(&sc->held);
    for (int b = 0; b < nbusy; ++b)
        if (busy[b] == sc) {
            busy[b] = busy[--nbusy];
            return;
        }
}

int shim_queue_remove(struct shim_comm *sc, int i) {
    for (int k = 0; k < sc->nq; ++k)
        if (sc->q[k] == i) {
            unqueue_at(sc, k);
            return 1;
        }
    return 0;
}

static int matches(const struct slot *s, int src, int tag) {
    return (s->peer == MPI_ANY_SOURCE || s->peer == src) && (s->tag == MPI_ANY_TAG || s->tag == tag);
}

/* The first queued receive (up to k) that takes a message from comm rank src with tag. */
static int first_match(const struct shim_comm *sc, int k, int src, int tag) {
    for (int j = 0; j < k; ++j)
        if (matches(slot_at(sc->q[j]), src, tag)) return j;
    return k;
}

/* One message for the queued receive k (or an earlier one it matches): 1 when one was taken. */
static int take_one(struct shim_comm *sc, int k) {
    struct slot *s = slot_at(sc->q[k]);
    const int any = s->peer == MPI_ANY_SOURCE, valid = any || (s->peer >= 0 && s->peer < sc->size);
    int flag = 0;
    if (valid && (any || !sc->route[s->peer])) {
        MPI_Message m;
        MPI_Status st;
        if (PMPI_Improbe(s->peer, s->tag, s->comm, &flag, &m, &st) != MPI_SUCCESS) flag = 0;
        if (flag) {
            const int j = first_match(sc, k, st.MPI_SOURCE, st.MPI_TAG);
            struct slot *t = slot_at(sc->q[j]);
            unqueue_at(sc, j);
            t->via_mpi = 1;
            t->mpi_err = PMPI_Imrecv(t->rbuf, t->count, t->dt, &m, &t->mreq);
            return 1;
        }
    }
    if (valid && g.eng && (any || sc->route[s->peer])) {
        struct cxk_msg_status cs;
        const int esrc = any ? CXK_ANY_SOURCE : shim_eng(sc, s->peer);
        const int etag = s->tag == MPI_ANY_TAG ? CXK_ANY_TAG : s->tag;
        if (cxk_msg_iprobe_ctx(g.eng, esrc, etag, sc->ctx, &flag, &cs)) flag = 0;
        const int src = flag ? shim_comm_rank_of_eng(sc, cs.source) : -1;
        if (flag && src >= 0) {
            const int j = first_match(sc, k, src, cs.tag);
            struct slot *t = slot_at(sc->q[j]);
            unqueue_at(sc, j);
            const int rc = shim_recv_post(t, cs.source, cs.tag);
            if (rc) t->via_mpi = 1, t->mpi_err = rc, t->src = -1;  /* done, failed */
            return 1;
        }
    }
    return 0;
}

static void queue_progress(struct shim_comm *sc) {
    for (int k = 0; k < sc->nq;)
        if (!take_one(sc, k)) ++k;
}

void shim_progress(void) {
    if (g.eng) cxk_msg_progress(g.eng);
    shim_mpi_copies_drain(0);
    for (int b = nbusy - 1; b >= 0; --b)
        if (b < nbusy) queue_progress(busy[b]);
}
