/* reqs.c — the requests the shim owns: a table of slots whose handles MPI never sees (MPICH:
 * integers of a kind no MPICH handle has; Open MPI: addresses inside the table), driven by
 * the engine; every Wait/Test variant, Cancel, Request_free, Start/Startall and
 * Request_get_status over arrays that may mix them with MPI's own requests. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mpi/shim.h"

#define SLOT_MAX (1 << 20)    /* address space reserved once; pages are touched as used */
static struct slot *slots;
static int hw;                /* slots ever handed out */
static int free_head = -1;
static int *detached;         /* slots nobody will wait for (Bsend, Request_free) */
static int ndetached, capdetached;

int slot_new(void) {
    if (!slots) {
        void *m = NULL;
        if (cxk_map_anon(sizeof(struct slot) * SLOT_MAX, &m)) return -1;
        slots = m;
    }
    int i;
    if (free_head >= 0) i = free_head, free_head = slots[i].next_free;
    else if (hw < SLOT_MAX) i = hw++;
    else return -1;
    memset(&slots[i], 0, sizeof slots[i]);
    slots[i].used = 1;
    return i;
}

struct slot *slot_at(int i) { return &slots[i]; }

int slot_index(const struct slot *s) {
    if (!slots || s < slots || s >= slots + hw) return -1;
    return (int)(s - slots);
}

void slot_release(int i) {
    free(slots[i].tmp);
    memset(&slots[i], 0, sizeof slots[i]);
    slots[i].next_free = free_head;
    free_head = i;
}

#if defined(OPEN_MPI) || defined(MPI_ABI_VERSION)
/* Open MPI's handles are pointers, and so are the MPI-5 standard ABI's (mpi_abi.h: small
 * constants for the predefined ones): ours point into the table, where no MPI object lives. */
int slot_index_of_ptr(const void *p) {
    const uintptr_t a = (uintptr_t)p, b = (uintptr_t)slots;
    if (!slots || a < b || a >= b + (uintptr_t)hw * sizeof(struct slot)) return -1;
    if ((a - b) % sizeof(struct slot)) return -1;
    return (int)((a - b) / sizeof(struct slot));
}
static int slot_of_ptr(const void *p) {
    const int i = slot_index_of_ptr(p);
    return i >= 0 && slots[i].used ? i : -1;
}
MPI_Request slot_request(int i) { return (MPI_Request)(void *)&slots[i]; }
int slot_of_request(MPI_Request r) { return slot_of_ptr((const void *)r); }
MPI_Message slot_message(int i) { return (MPI_Message)(void *)&slots[i]; }
int slot_of_message(MPI_Message m) { return slot_of_ptr((const void *)m); }
#else
/* MPICH's handles are ints whose top two bits give the kind (never 00 for a live object) and
 * the next four the object type: 0x04000000 | index is no handle MPICH ever makes (its
 * REQUEST_NULL is 0x2c000000, MESSAGE_NO_PROC 0x6c000000). */
#define SLOT_MARK 0x04000000u
#define SLOT_MASK 0xfc000000u
static int slot_of_int(unsigned u) {
    if ((u & SLOT_MASK) != SLOT_MARK) return -1;
    const int i = (int)(u & ~SLOT_MASK);
    return i < hw && slots[i].used ? i : -1;
}
MPI_Request slot_request(int i) { return (MPI_Request)(SLOT_MARK | (unsigned)i); }
int slot_of_request(MPI_Request r) { return slot_of_int((unsigned)r); }
MPI_Message slot_message(int i) { return (MPI_Message)(SLOT_MARK | (unsigned)i); }
int slot_of_message(MPI_Message m) { return slot_of_int((unsigned)m); }
#endif

void shim_status_set(MPI_Status *st, int src, int tag, uint64_t nbytes, int cancelled) {
    if (st == MPI_STATUS_IGNORE) return;
    st->MPI_SOURCE = src;
    st->MPI_TAG = tag;
    /* both MPIs keep a byte count: MPI_Get_count divides it by the datatype's size */
    PMPI_Status_set_elements_x(st, MPI_BYTE, (MPI_Count)nbytes);
    PMPI_Status_set_cancelled(st, cancelled);
}

void shim_status_empty(MPI_Status *st) {
    if (st == MPI_STATUS_IGNORE) return;
    shim_status_set(st, MPI_ANY_SOURCE, MPI_ANY_TAG, 0, 0);
    st->MPI_ERROR = MPI_SUCCESS;
}

int slot_start(int i) {
    struct slot *s = &slots[i];
    int rc = s->kind == SLOT_SEND ? shim_send_start(s) : shim_recv_start(s);
    if (rc != MPI_SUCCESS) return rc;
    s->active = 1, s->done = 0, s->cancelled = 0, s->err = 0, s->counted = 1;
    ++g.inflight;
    return MPI_SUCCESS;
}

static void settle(struct slot *s) {
    s->done = 1;
    s->req = NULL;
    if (s->counted) s->counted = 0, --g.inflight;
}

/* A receive handed to the MPI: done once its request is (the status saved for the caller). */
static int drive_mpi(struct slot *s, int block) {
    while (s->mreq != MPI_REQUEST_NULL) {
        int flag = 0, cancelled = 0, n = 0;
        MPI_Status st;
        const int rc = PMPI_Test(&s->mreq, &flag, &st);
        if (rc != MPI_SUCCESS) {
            s->mpi_err = rc, s->src = -1, s->mreq = MPI_REQUEST_NULL;
            break;
        }
        if (flag) {
            PMPI_Test_cancelled(&st, &cancelled);
            PMPI_Get_count(&st, MPI_BYTE, &n);
            s->cancelled = (uint8_t)cancelled;
            s->src = st.MPI_SOURCE >= 0 && st.MPI_SOURCE < s->sc->size ? s->sc->to_world[st.MPI_SOURCE]
                                                                       : -1;
            s->rtag = st.MPI_TAG, s->nbytes = n == MPI_UNDEFINED ? 0 : (uint64_t)n;
            break;
        }
        if (!block) return 0;
        shim_progress();
    }
    settle(s);
    return 1;
}

int slot_drive(struct slot *s, int block) {
    while (s->queued) {  /* waits in its communicator's queue for a message (anysrc.c) */
        shim_progress();
        if (s->queued && !block) return 0;
    }
    if (s->via_mpi) return s->done ? 1 : drive_mpi(s, block);
    if (!s->req) return 1;
    struct cxk_msg_status cs = {0};
    int done = 1, rc;
    if (block) rc = cxk_msg_wait(g.eng, s->req, &cs);
    else rc = cxk_msg_test(g.eng, s->req, &done, &cs);
    if (!rc && !done) return 0;
    if (rc && rc != -EMSGSIZE && (block || !done)) {
        /* a wait that failed (a peer gone, a broken ring) may leave the request in the
         * engine: withdraw a receive so nothing is written into the buffer later */
        if (s->kind == SLOT_RECV) cxk_msg_cancel(g.eng, s->req);
        s->src = -1;
    } else {
        s->src = cs.source >= 0 && cs.source < g.esize ? g.e2w[cs.source] : -1;
        s->rtag = cs.tag, s->nbytes = cs.count;
    }
    s->err = rc;
    settle(s);
    return 1;
}

int slot_poll(int i, int block) {
    struct slot *s = &slots[i];
    if (!s->active || s->done) return 1;
    return slot_drive(s, block);
}

/* Hand slot i's result to the caller: status, MPI error code; a persistent request becomes
 * inactive, any other is freed and *h becomes MPI_REQUEST_NULL. */
static int slot_complete(int i, MPI_Request *h, MPI_Status *st) {
    struct slot *s = &slots[i];
    int err = MPI_SUCCESS;
    if (!s->active) {
        shim_status_empty(st);
        return MPI_SUCCESS;
    }
    if (s->kind == SLOT_RECV) {
        err = shim_recv_finish(s, st);
    } else {
        if (s->err) err = shim_err(s->err, "send");
        if (st != MPI_STATUS_IGNORE) {
            PMPI_Status_set_elements_x(st, MPI_BYTE, 0);
            PMPI_Status_set_cancelled(st, 0);
        }
    }
    s->active = 0, s->done = 0;
    if (!s->persistent) {
        slot_release(i);
        *h = MPI_REQUEST_NULL;
    }
    return err;
}

static void detach(int i) {
    if (ndetached == capdetached) {
        int ncap = capdetached ? 2 * capdetached : 64;
        int *n = realloc(detached, sizeof *n * (size_t)ncap);
        if (!n) {  /* no room to remember it: finish it now */
            slot_poll(i, 1);
            slot_release(i);
            return;
        }
        detached = n, capdetached = ncap;
    }
    slots[i].detached = 1;
    detached[ndetached++] = i;
}

void slots_drain_detached(int block) {
    for (int k = 0; k < ndetached;) {
        const int i = detached[k];
        if (!slot_poll(i, block)) {
            ++k;
            continue;
        }
        if (slots[i].err) shim_err(slots[i].err, "detached send");
        slot_release(i);
        detached[k] = detached[--ndetached];
    }
}

/* Bsend: the engine has its own copy; nobody waits for it. */
void shim_detach_slot(int i) { detach(i); }

/* ---- the Wait / Test family ---- */
enum { R_NULL, R_OURS, R_MPI };

static int classify(MPI_Request r, int *slot) {
    if (r == MPI_REQUEST_NULL) return R_NULL;
    const int i = slot_of_request(r);
    if (i < 0) return R_MPI;
    *slot = i;
    return R_OURS;
}

/* Can reqs[k] complete now? *idle: it is null or an inactive persistent request of ours.
 * MPI's own requests are looked at without freeing them (Request_get_status). */
static int ready(MPI_Request r, int *idle) {
    int i = -1, flag = 0;
    *idle = 0;
    switch (classify(r, &i)) {
        case R_NULL: *idle = 1; return 1;
        case R_OURS:
            if (!slots[i].active) return *idle = 1, 1;
            return slot_poll(i, 0);
        default:
            PMPI_Request_get_status(r, &flag, MPI_STATUS_IGNORE);
            return flag;
    }
}

static int complete_at(MPI_Request *r, MPI_Status *st) {
    int i = -1;
    switch (classify(*r, &i)) {
        case R_NULL: shim_status_empty(st); return MPI_SUCCESS;
        case R_OURS: return slot_complete(i, r, st);
        default: return PMPI_Wait(r, st);
    }
}

static MPI_Comm comm_at(MPI_Request r) {
    int i = -1;
    return classify(r, &i) == R_OURS ? slots[i].comm : MPI_COMM_WORLD;
}

/* How many of reqs are ours, MPI's; the index of the one active request of ours, if it is
 * the only active one (then a blocking engine wait, which watches the peer, is used). */
static void census(int n, const MPI_Request reqs[], int *ours, int *mpi, int *only) {
    int active = 0;
    *ours = *mpi = 0, *only = -1;
    for (int k = 0; k < n; ++k) {
        int i = -1, c = classify(reqs[k], &i);
        if (c == R_OURS) {
            ++*ours;
            if (slots[i].active) ++active, *only = k;
        } else if (c == R_MPI) {
            ++*mpi, ++active;
        }
    }
    if (active != 1 || *mpi) *only = -1;
}

/* Nothing of the engine's is waited on here, but the engine may still owe peers progress
 * (queued sends, FINs): poll MPI and the engine in turn instead of blocking in MPI. */
static int mpi_wait_polling(MPI_Request *r, MPI_Status *st) {
    for (;;) {
        /* completed by PMPI_Wait: MPICH 4.0's PMPI_Test gives a receive from MPI_PROC_NULL
         * source 0 and tag 0 where its Wait gives MPI_PROC_NULL and MPI_ANY_TAG */
        int flag = 0, rc = PMPI_Request_get_status(*r, &flag, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS || flag) return PMPI_Wait(r, st);
        shim_progress();
        slots_drain_detached(0);
    }
}

#define ST(sts, k) ((sts) == MPI_STATUSES_IGNORE ? MPI_STATUS_IGNORE : &(sts)[k])

int MPI_Wait(MPI_Request *r, MPI_Status *st) {
    int i = g.on && r ? slot_of_request(*r) : -1;
    if (i < 0) return g.on && g.inflight && r ? mpi_wait_polling(r, st) : PMPI_Wait(r, st);
    MPI_Comm comm = slots[i].comm;
    slot_poll(i, 1);
    int err = slot_complete(i, r, st);
    return err ? shim_fail(comm, err) : MPI_SUCCESS;
}

int MPI_Test(MPI_Request *r, int *flag, MPI_Status *st) {
    int i = g.on && r ? slot_of_request(*r) : -1;
    if (i < 0) {
        if (g.on && g.inflight) shim_progress();
        return PMPI_Test(r, flag, st);
    }
    if (!slot_poll(i, 0)) {
        *flag = 0;
        return MPI_SUCCESS;
    }
    *flag = 1;
    MPI_Comm comm = slots[i].comm;
    int err = slot_complete(i, r, st);
    return err ? shim_fail(comm, err) : MPI_SUCCESS;
}

/* Complete every entry (all ready); MPI_ERR_IN_STATUS when one failed. */
static int complete_all(int n, MPI_Request reqs[], MPI_Status sts[]) {
    int failed = 0;
    MPI_Comm comm = MPI_COMM_WORLD;
    for (int k = 0; k < n; ++k) {
        MPI_Comm c = comm_at(reqs[k]);
        int e = complete_at(&reqs[k], ST(sts, k));
        if (sts != MPI_STATUSES_IGNORE) sts[k].MPI_ERROR = e;
        if (e && !failed) failed = 1, comm = c;
    }
    return failed ? shim_fail(comm, MPI_ERR_IN_STATUS) : MPI_SUCCESS;
}

int MPI_Waitall(int n, MPI_Request reqs[], MPI_Status sts[]) {
    int ours, mpi, only;
    if (!g.on) return PMPI_Waitall(n, reqs, sts);
    census(n, reqs, &ours, &mpi, &only);
    if (!ours && !g.inflight) return PMPI_Waitall(n, reqs, sts);
    if (!mpi) {  /* ours alone: wait for each in turn (the engine watches the peer) */
        for (int k = 0; k < n; ++k) {
            int i = -1;
            if (classify(reqs[k], &i) == R_OURS) slot_poll(i, 1);
        }
    } else {
        for (;;) {
            int all = 1, idle;
            for (int k = 0; k < n; ++k) all &= ready(reqs[k], &idle);
            if (all) break;
            if (!ours) shim_progress();
        }
    }
    return complete_all(n, reqs, sts);
}

int MPI_Testall(int n, MPI_Request reqs[], int *flag, MPI_Status sts[]) {
    int ours, mpi, only;
    if (!g.on) return PMPI_Testall(n, reqs, flag, sts);
    census(n, reqs, &ours, &mpi, &only);
    if (!ours) {
        if (g.inflight) shim_progress();
        return PMPI_Testall(n, reqs, flag, sts);
    }
    int all = 1, idle;
    for (int k = 0; k < n; ++k) all &= ready(reqs[k], &idle);
    *flag = all;
    return all ? complete_all(n, reqs, sts) : MPI_SUCCESS;
}

/* One sweep: the first entry ready to complete (-1 none); *live: some entry is active. */
static int first_ready(int n, MPI_Request reqs[], int *live) {
    *live = 0;
    for (int k = 0; k < n; ++k) {
        int idle;
        int r = ready(reqs[k], &idle);
        if (idle) continue;
        *live = 1;
        if (r) return k;
    }
    return -1;
}

static int finish_any(MPI_Request reqs[], int k, int *index, MPI_Status *st) {
    MPI_Comm comm = comm_at(reqs[k]);
    *index = k;
    int e = complete_at(&reqs[k], st);
    return e ? shim_fail(comm, e) : MPI_SUCCESS;
}

int MPI_Waitany(int n, MPI_Request reqs[], int *index, MPI_Status *st) {
    int ours, mpi, only;
    if (!g.on) return PMPI_Waitany(n, reqs, index, st);
    census(n, reqs, &ours, &mpi, &only);
    if (!ours && !g.inflight) return PMPI_Waitany(n, reqs, index, st);
    if (only >= 0) {
        int i = -1;
        classify(reqs[only], &i);
        slot_poll(i, 1);
    }
    for (;;) {
        int live, k = first_ready(n, reqs, &live);
        if (k >= 0) return finish_any(reqs, k, index, st);
        if (!live) {
            *index = MPI_UNDEFINED;
            shim_status_empty(st);
            return MPI_SUCCESS;
        }
        if (!ours) shim_progress();
    }
}

int MPI_Testany(int n, MPI_Request reqs[], int *index, int *flag, MPI_Status *st) {
    int ours, mpi, only;
    if (!g.on) return PMPI_Testany(n, reqs, index, flag, st);
    census(n, reqs, &ours, &mpi, &only);
    if (!ours) {
        if (g.inflight) shim_progress();
        return PMPI_Testany(n, reqs, index, flag, st);
    }
    int live, k = first_ready(n, reqs, &live);
    *flag = k >= 0 || !live;
    *index = MPI_UNDEFINED;
    if (k >= 0) return finish_any(reqs, k, index, st);
    if (!live) shim_status_empty(st);
    return MPI_SUCCESS;
}

/* One sweep completing every entry ready now; *out = how many (MPI_UNDEFINED: none active). */
static int some(int n, MPI_Request reqs[], int *out, int idx[], MPI_Status sts[]) {
    int live = 0, failed = 0, m = 0;
    MPI_Comm comm = MPI_COMM_WORLD;
    for (int k = 0; k < n; ++k) {
        int idle, r = ready(reqs[k], &idle);
        if (idle) continue;
        live = 1;
        if (!r) continue;
        MPI_Comm c = comm_at(reqs[k]);
        int e = complete_at(&reqs[k], ST(sts, m));
        if (sts != MPI_STATUSES_IGNORE) sts[m].MPI_ERROR = e;
        if (e && !failed) failed = 1, comm = c;
        idx[m++] = k;
    }
    *out = live ? m : MPI_UNDEFINED;
    return failed ? shim_fail(comm, MPI_ERR_IN_STATUS) : MPI_SUCCESS;
}

int MPI_Waitsome(int n, MPI_Request reqs[], int *out, int idx[], MPI_Status sts[]) {
    int ours, mpi, only;
    if (!g.on) return PMPI_Waitsome(n, reqs, out, idx, sts);
    census(n, reqs, &ours, &mpi, &only);
    if (!ours && !g.inflight) return PMPI_Waitsome(n, reqs, out, idx, sts);
    if (only >= 0) {
        int i = -1;
        classify(reqs[only], &i);
        slot_poll(i, 1);
    }
    for (;;) {
        int rc = some(n, reqs, out, idx, sts);
        if (rc != MPI_SUCCESS || *out != 0) return rc;
        if (!ours) shim_progress();
    }
}

int MPI_Testsome(int n, MPI_Request reqs[], int *out, int idx[], MPI_Status sts[]) {
    int ours, mpi, only;
    if (!g.on) return PMPI_Testsome(n, reqs, out, idx, sts);
    census(n, reqs, &ours, &mpi, &only);
    if (!ours) {
        if (g.inflight) shim_progress();
        return PMPI_Testsome(n, reqs, out, idx, sts);
    }
    return some(n, reqs, out, idx, sts);
}

int MPI_Request_get_status(MPI_Request r, int *flag, MPI_Status *st) {
    int i = g.on ? slot_of_request(r) : -1;
    if (i < 0) return PMPI_Request_get_status(r, flag, st);
    struct slot *s = &slots[i];
    *flag = slot_poll(i, 0);
    if (!*flag) return MPI_SUCCESS;
    if (!s->active) shim_status_empty(st);
    else if (s->kind == SLOT_RECV) return shim_recv_finish(s, st);  /* idempotent */
    else if (st != MPI_STATUS_IGNORE) PMPI_Status_set_cancelled(st, 0);
    return MPI_SUCCESS;
}

int MPI_Cancel(MPI_Request *r) {
    int i = g.on && r ? slot_of_request(*r) : -1;
    if (i < 0) return PMPI_Cancel(r);
    struct slot *s = &slots[i];
    if (s->kind == SLOT_RECV && s->active && !s->done && s->queued &&
        shim_queue_remove(s->sc, i)) {
        s->cancelled = 1;
        s->src = MPI_ANY_SOURCE, s->rtag = MPI_ANY_TAG, s->nbytes = 0;
        settle(s);
        return MPI_SUCCESS;
    }
    if (s->kind == SLOT_RECV && s->active && !s->done && s->via_mpi && s->mreq != MPI_REQUEST_NULL)
        return PMPI_Cancel(&s->mreq);  /* completes (cancelled or not) through drive_mpi */
    /* a receive not yet matched is withdrawn; a send is never cancelled (MPI allows it:
     * Test_cancelled then says false), it completes as usual */
    if (s->kind == SLOT_RECV && s->active && !s->done && s->req &&
        cxk_msg_cancel(g.eng, s->req) == 0) {
        s->cancelled = 1;
        s->src = MPI_ANY_SOURCE, s->rtag = MPI_ANY_TAG, s->nbytes = 0;
        settle(s);
    }
    return MPI_SUCCESS;
}

int MPI_Request_free(MPI_Request *r) {
    int i = g.on && r ? slot_of_request(*r) : -1;
    if (i < 0) return PMPI_Request_free(r);
    struct slot *s = &slots[i];
    if (s->active && !s->done) detach(i);   /* it completes on its own, unseen */
    else slot_release(i);
    *r = MPI_REQUEST_NULL;
    return MPI_SUCCESS;
}

int MPI_Start(MPI_Request *r) {
    int i = g.on && r ? slot_of_request(*r) : -1;
    if (i < 0) return PMPI_Start(r);
    struct slot *s = &slots[i];
    if (!s->persistent || s->active) return shim_fail(s->comm, MPI_ERR_REQUEST);
    int rc = slot_start(i);
    return rc ? shim_fail(s->comm, rc) : MPI_SUCCESS;
}

int MPI_Startall(int n, MPI_Request reqs[]) {
    for (int k = 0; k < n; ++k) {
        int rc = MPI_Start(&reqs[k]);
        if (rc != MPI_SUCCESS) return rc;
    }
    return MPI_SUCCESS;
}
