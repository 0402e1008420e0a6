/* fortran.c — the Fortran bindings of the point-to-point calls, for Open MPI only.
 *
 * Why only Open MPI: Debian's MPICH (libmpichfort.so.12) implements mpi_send_ / MPI_SEND /
 * mpi_send__ and the mpi_f08 forms by calling the C MPI_Send (and MPI_Init, MPI_Wait...),
 * which the preloaded shim already defines, so MPICH's Fortran programs are routed with no
 * code here (tests/mpi/p2p_check.f90 proves it). Open MPI's libmpi_mpifh.so.40 calls
 * PMPI_Send, PMPI_Init... straight away, which would bypass the shim: a Fortran program would
 * never boot it, and a derived communicator made from Fortran would be unknown to it. So
 * this file defines Open MPI's mpif.h / `use mpi` symbols (all four manglings: mpi_send_,
 * mpi_send__, mpi_send, MPI_SEND) of every call the shim routes, converts the Fortran
 * handles and calls the shim's own C entry points, which route or forward to PMPI as for a C
 * program. The mpi_f08 module (libmpi_usempif08: mpi_send_f08_ -> ompi_send_f -> PMPI_Send)
 * is not covered: a `use mpi_f08` program under Open MPI runs entirely on MPI only when
 * CXLKIT_MPI_COMMS=none (docs/mpi-shim.md).
 *
 * Requests and matched messages the shim owns point into its table (reqs.c), where Open MPI's
 * own MPI_Request_c2f would write its Fortran index into our slot: they get Fortran integers
 * of their own instead, FHANDLE_BASE + slot (Open MPI's are indices of a table of live
 * requests, far below), and MPI_Request_c2f / f2c and MPI_Message_c2f / f2c are taken over
 * for C callers too, so mixed-language programs convert them alike. */
#include <mpi.h>

#if defined(OPEN_MPI)
#include <stdlib.h>

#include "mpi/shim.h"

#define FHANDLE_BASE 0x40000000
#define FSTACK 16   /* arrays up to this many requests are converted on the stack */

/* Open MPI's Fortran MPI_BOTTOM: a common block whose address stands for the C MPI_BOTTOM. */
extern MPI_Fint mpi_fortran_bottom_ __attribute__((weak));

static void *fbuf(void *b) {
    return &mpi_fortran_bottom_ && b == (void *)&mpi_fortran_bottom_ ? MPI_BOTTOM : b;
}

/* ---- handles ---- */
/* A handle into the shim's table, live or freed (a stale copy the caller kept), is never
 * given to Open MPI, whose c2f would write its index into our slot. */
MPI_Fint MPI_Request_c2f(MPI_Request r) {
    const int i = slot_index_of_ptr((const void *)r);
    return i >= 0 ? FHANDLE_BASE + i : PMPI_Request_c2f(r);
}

MPI_Request MPI_Request_f2c(MPI_Fint f) {
    if (f >= FHANDLE_BASE) {
        const MPI_Request r = slot_request(f - FHANDLE_BASE);
        if (slot_of_request(r) >= 0) return r;
        return MPI_REQUEST_NULL;  /* a freed slot: what Open MPI gives for a stale index */
    }
    return PMPI_Request_f2c(f);
}

MPI_Fint MPI_Message_c2f(MPI_Message m) {
    const int i = slot_index_of_ptr((const void *)m);
    return i >= 0 ? FHANDLE_BASE + i : PMPI_Message_c2f(m);
}

MPI_Message MPI_Message_f2c(MPI_Fint f) {
    if (f >= FHANDLE_BASE) {
        const MPI_Message m = slot_message(f - FHANDLE_BASE);
        return slot_of_message(m) >= 0 ? m : MPI_MESSAGE_NULL;
    }
    return PMPI_Message_f2c(f);
}

/* A Fortran request of the shim whose slot is gone (freed or completed earlier) is a user's
 * error: MPI_ERR_REQUEST through the world's error handler, never a lookup of a stale slot. */
static int freq(MPI_Fint f, MPI_Request *r) {
    *r = MPI_Request_f2c(f);
    if (f >= FHANDLE_BASE && *r == MPI_REQUEST_NULL) return shim_fail(MPI_COMM_WORLD, MPI_ERR_REQUEST);
    return MPI_SUCCESS;
}

/* ---- statuses: MPI_STATUS_IGNORE is a Fortran common block, MPI_F_STATUS_IGNORE its address */
static MPI_Status *st_in(MPI_Fint *f, MPI_Status *tmp) {
    return f == MPI_F_STATUS_IGNORE ? MPI_STATUS_IGNORE : tmp;
}

static void st_out(int rc, MPI_Fint *f, const MPI_Status *c) {
    if (f != MPI_F_STATUS_IGNORE && (rc == MPI_SUCCESS || rc == MPI_ERR_IN_STATUS))
        PMPI_Status_c2f(c, f);
}

/* Array arguments: the stack for small ones, else the heap (NULL: out of memory). */
struct fvec {
    MPI_Request *r;
    MPI_Status *s;
    MPI_Request rs[FSTACK];
    MPI_Status ss[FSTACK];
};

static int vec_in(struct fvec *v, int n, const MPI_Fint *f, MPI_Fint *fst) {
    v->r = v->rs, v->s = fst == MPI_F_STATUSES_IGNORE ? MPI_STATUSES_IGNORE : v->ss;
    if (n > FSTACK) {
        v->r = malloc(sizeof(MPI_Request) * (size_t)n);
        if (v->s != MPI_STATUSES_IGNORE) v->s = malloc(sizeof(MPI_Status) * (size_t)n);
        if (!v->r || !v->s) return MPI_ERR_NO_MEM;
    }
    int rc = MPI_SUCCESS;
    for (int i = 0; i < n && rc == MPI_SUCCESS; ++i) rc = freq(f[i], &v->r[i]);
    return rc;
}

/* Write back every request (completed ones are now MPI_REQUEST_NULL) and the first m
 * statuses (Fortran packs them like C: MPI_STATUS_SIZE integers each). */
static void vec_out(struct fvec *v, int rc, int n, MPI_Fint *f, MPI_Fint *fst, int m) {
    for (int i = 0; i < n; ++i) f[i] = MPI_Request_c2f(v->r[i]);
    if (v->s != MPI_STATUSES_IGNORE && (rc == MPI_SUCCESS || rc == MPI_ERR_IN_STATUS))
        for (int k = 0; k < m; ++k)
            PMPI_Status_c2f(&v->s[k], fst + (size_t)k * (sizeof(MPI_Status) / sizeof(MPI_Fint)));
}

static void vec_free(struct fvec *v) {
    if (v->r != v->rs) free(v->r);
    if (v->s != v->ss && v->s != MPI_STATUSES_IGNORE) free(v->s);
}

/* One definition, four names: gfortran's default (mpi_send_), -fsecond-underscore
 * (mpi_send__), -fno-underscoring (mpi_send) and upper case (MPI_SEND). */
#define FORTRAN(lower, UPPER, params)                                                          \
    void lower##_ params;                                                                       \
    void lower##__ params __attribute__((alias(#lower "_")));                                   \
    void lower params __attribute__((alias(#lower "_")));                                       \
    void UPPER params __attribute__((alias(#lower "_")));                                       \
    void lower##_ params

#define COMM(c) PMPI_Comm_f2c(*(c))
#define TYPE(t) PMPI_Type_f2c(*(t))

/* ---- init and finalize: the shim boots in its C MPI_Init ---- */
FORTRAN(mpi_init, MPI_INIT, (MPI_Fint *ierr)) { *ierr = MPI_Init(NULL, NULL); }

FORTRAN(mpi_init_thread, MPI_INIT_THREAD, (MPI_Fint *required, MPI_Fint *provided,
                                           MPI_Fint *ierr)) {
    int p = 0;
    *ierr = MPI_Init_thread(NULL, NULL, *required, &p);
    if (*ierr == MPI_SUCCESS) *provided = p;
}

FORTRAN(mpi_finalize, MPI_FINALIZE, (MPI_Fint *ierr)) { *ierr = MPI_Finalize(); }

/* ---- communicators: made through the shim so it can route them (comms.c) ---- */
FORTRAN(mpi_comm_dup, MPI_COMM_DUP, (MPI_Fint *comm, MPI_Fint *newcomm, MPI_Fint *ierr)) {
    MPI_Comm c = MPI_COMM_NULL;
    *ierr = MPI_Comm_dup(COMM(comm), &c);
    if (*ierr == MPI_SUCCESS) *newcomm = PMPI_Comm_c2f(c);
}

FORTRAN(mpi_comm_split, MPI_COMM_SPLIT, (MPI_Fint *comm, MPI_Fint *color, MPI_Fint *key,
                                         MPI_Fint *newcomm, MPI_Fint *ierr)) {
    MPI_Comm c = MPI_COMM_NULL;
    *ierr = MPI_Comm_split(COMM(comm), *color, *key, &c);
    if (*ierr == MPI_SUCCESS) *newcomm = PMPI_Comm_c2f(c);
}

FORTRAN(mpi_comm_create, MPI_COMM_CREATE, (MPI_Fint *comm, MPI_Fint *group, MPI_Fint *newcomm,
                                           MPI_Fint *ierr)) {
    MPI_Comm c = MPI_COMM_NULL;
    *ierr = MPI_Comm_create(COMM(comm), PMPI_Group_f2c(*group), &c);
    if (*ierr == MPI_SUCCESS) *newcomm = PMPI_Comm_c2f(c);
}

FORTRAN(mpi_comm_free, MPI_COMM_FREE, (MPI_Fint *comm, MPI_Fint *ierr)) {
    MPI_Comm c = COMM(comm);
    *ierr = MPI_Comm_free(&c);
    if (*ierr == MPI_SUCCESS) *comm = PMPI_Comm_c2f(c);
}

/* ---- blocking sends and receives ---- */
#define FSEND(lower, UPPER, call)                                                              \
    FORTRAN(lower, UPPER, (void *buf, MPI_Fint *count, MPI_Fint *dt, MPI_Fint *dest,           \
                           MPI_Fint *tag, MPI_Fint *comm, MPI_Fint *ierr)) {                   \
        *ierr = call(fbuf(buf), *count, TYPE(dt), *dest, *tag, COMM(comm));                    \
    }
FSEND(mpi_send, MPI_SEND, MPI_Send)
FSEND(mpi_ssend, MPI_SSEND, MPI_Ssend)
FSEND(mpi_rsend, MPI_RSEND, MPI_Rsend)
FSEND(mpi_bsend, MPI_BSEND, MPI_Bsend)

FORTRAN(mpi_recv, MPI_RECV, (void *buf, MPI_Fint *count, MPI_Fint *dt, MPI_Fint *source,
                             MPI_Fint *tag, MPI_Fint *comm, MPI_Fint *status, MPI_Fint *ierr)) {
    MPI_Status s;
    *ierr = MPI_Recv(fbuf(buf), *count, TYPE(dt), *source, *tag, COMM(comm), st_in(status, &s));
    st_out(*ierr, status, &s);
}

FORTRAN(mpi_sendrecv, MPI_SENDRECV,
        (void *sbuf, MPI_Fint *scount, MPI_Fint *sdt, MPI_Fint *dest, MPI_Fint *stag,
         void *rbuf, MPI_Fint *rcount, MPI_Fint *rdt, MPI_Fint *source, MPI_Fint *rtag,
         MPI_Fint *comm, MPI_Fint *status, MPI_Fint *ierr)) {
    MPI_Status s;
    *ierr = MPI_Sendrecv(fbuf(sbuf), *scount, TYPE(sdt), *dest, *stag, fbuf(rbuf), *rcount,
                         TYPE(rdt), *source, *rtag, COMM(comm), st_in(status, &s));
    st_out(*ierr, status, &s);
}

FORTRAN(mpi_sendrecv_replace, MPI_SENDRECV_REPLACE,
        (void *buf, MPI_Fint *count, MPI_Fint *dt, MPI_Fint *dest, MPI_Fint *stag,
         MPI_Fint *source, MPI_Fint *rtag, MPI_Fint *comm, MPI_Fint *status, MPI_Fint *ierr)) {
    MPI_Status s;
    *ierr = MPI_Sendrecv_replace(fbuf(buf), *count, TYPE(dt), *dest, *stag, *source, *rtag,
                                 COMM(comm), st_in(status, &s));
    st_out(*ierr, status, &s);
}

/* ---- nonblocking and persistent: the request goes back as the shim's Fortran integer ---- */
#define FISEND(lower, UPPER, call)                                                             \
    FORTRAN(lower, UPPER, (void *buf, MPI_Fint *count, MPI_Fint *dt, MPI_Fint *dest,           \
                           MPI_Fint *tag, MPI_Fint *comm, MPI_Fint *req, MPI_Fint *ierr)) {    \
        MPI_Request r = MPI_REQUEST_NULL;                                                      \
        *ierr = call(fbuf(buf), *count, TYPE(dt), *dest, *tag, COMM(comm), &r);                \
        if (*ierr == MPI_SUCCESS) *req = MPI_Request_c2f(r);                                   \
    }
FISEND(mpi_isend, MPI_ISEND, MPI_Isend)
FISEND(mpi_issend, MPI_ISSEND, MPI_Issend)
FISEND(mpi_irsend, MPI_IRSEND, MPI_Irsend)
FISEND(mpi_ibsend, MPI_IBSEND, MPI_Ibsend)
FISEND(mpi_send_init, MPI_SEND_INIT, MPI_Send_init)
FISEND(mpi_ssend_init, MPI_SSEND_INIT, MPI_Ssend_init)
FISEND(mpi_rsend_init, MPI_RSEND_INIT, MPI_Rsend_init)
FISEND(mpi_bsend_init, MPI_BSEND_INIT, MPI_Bsend_init)
FISEND(mpi_irecv, MPI_IRECV, MPI_Irecv)
FISEND(mpi_recv_init, MPI_RECV_INIT, MPI_Recv_init)

/* ---- probes and matched probes ---- */
FORTRAN(mpi_probe, MPI_PROBE, (MPI_Fint *source, MPI_Fint *tag, MPI_Fint *comm,
                               MPI_Fint *status, MPI_Fint *ierr)) {
    MPI_Status s;
    *ierr = MPI_Probe(*source, *tag, COMM(comm), st_in(status, &s));
    st_out(*ierr, status, &s);
}

FORTRAN(mpi_iprobe, MPI_IPROBE, (MPI_Fint *source, MPI_Fint *tag, MPI_Fint *comm,
                                 MPI_Fint *flag, MPI_Fint *status, MPI_Fint *ierr)) {
    MPI_Status s;
    int fl = 0;
    *ierr = MPI_Iprobe(*source, *tag, COMM(comm), &fl, st_in(status, &s));
    if (*ierr == MPI_SUCCESS) *flag = fl;
    if (fl) st_out(*ierr, status, &s);
}

FORTRAN(mpi_mprobe, MPI_MPROBE, (MPI_Fint *source, MPI_Fint *tag, MPI_Fint *comm,
                                 MPI_Fint *msg, MPI_Fint *status, MPI_Fint *ierr)) {
    MPI_Status s;
    MPI_Message m = MPI_MESSAGE_NULL;
    *ierr = MPI_Mprobe(*source, *tag, COMM(comm), &m, st_in(status, &s));
    if (*ierr == MPI_SUCCESS) *msg = MPI_Message_c2f(m);
    st_out(*ierr, status, &s);
}

FORTRAN(mpi_improbe, MPI_IMPROBE, (MPI_Fint *source, MPI_Fint *tag, MPI_Fint *comm,
                                   MPI_Fint *flag, MPI_Fint *msg, MPI_Fint *status,
                                   MPI_Fint *ierr)) {
    MPI_Status s;
    MPI_Message m = MPI_MESSAGE_NULL;
    int fl = 0;
    *ierr = MPI_Improbe(*source, *tag, COMM(comm), &fl, &m, st_in(status, &s));
    if (*ierr != MPI_SUCCESS) return;
    *flag = fl;
    if (fl) *msg = MPI_Message_c2f(m), st_out(*ierr, status, &s);
}

FORTRAN(mpi_mrecv, MPI_MRECV, (void *buf, MPI_Fint *count, MPI_Fint *dt, MPI_Fint *msg,
                               MPI_Fint *status, MPI_Fint *ierr)) {
    MPI_Status s;
    MPI_Message m = MPI_Message_f2c(*msg);
    *ierr = MPI_Mrecv(fbuf(buf), *count, TYPE(dt), &m, st_in(status, &s));
    if (*ierr == MPI_SUCCESS) *msg = MPI_Message_c2f(m);
    st_out(*ierr, status, &s);
}

FORTRAN(mpi_imrecv, MPI_IMRECV, (void *buf, MPI_Fint *count, MPI_Fint *dt, MPI_Fint *msg,
                                 MPI_Fint *req, MPI_Fint *ierr)) {
    MPI_Message m = MPI_Message_f2c(*msg);
    MPI_Request r = MPI_REQUEST_NULL;
    *ierr = MPI_Imrecv(fbuf(buf), *count, TYPE(dt), &m, &r);
    if (*ierr == MPI_SUCCESS) *msg = MPI_Message_c2f(m), *req = MPI_Request_c2f(r);
}

/* ---- completion of one request ---- */
FORTRAN(mpi_wait, MPI_WAIT, (MPI_Fint *req, MPI_Fint *status, MPI_Fint *ierr)) {
    MPI_Status s;
    MPI_Request r;
    if ((*ierr = freq(*req, &r))) return;
    *ierr = MPI_Wait(&r, st_in(status, &s));
    if (*ierr == MPI_SUCCESS) *req = MPI_Request_c2f(r);
    st_out(*ierr, status, &s);
}

FORTRAN(mpi_test, MPI_TEST, (MPI_Fint *req, MPI_Fint *flag, MPI_Fint *status, MPI_Fint *ierr)) {
    MPI_Status s;
    MPI_Request r;
    int fl = 0;
    if ((*ierr = freq(*req, &r))) return;
    *ierr = MPI_Test(&r, &fl, st_in(status, &s));
    if (*ierr != MPI_SUCCESS) return;
    *flag = fl;
    *req = MPI_Request_c2f(r);
    if (fl) st_out(*ierr, status, &s);
}

FORTRAN(mpi_request_get_status, MPI_REQUEST_GET_STATUS,
        (MPI_Fint *req, MPI_Fint *flag, MPI_Fint *status, MPI_Fint *ierr)) {
    MPI_Status s;
    MPI_Request r;
    int fl = 0;
    if ((*ierr = freq(*req, &r))) return;
    *ierr = MPI_Request_get_status(r, &fl, st_in(status, &s));
    if (*ierr != MPI_SUCCESS) return;
    *flag = fl;
    if (fl) st_out(*ierr, status, &s);
}

FORTRAN(mpi_request_free, MPI_REQUEST_FREE, (MPI_Fint *req, MPI_Fint *ierr)) {
    MPI_Request r;
    if ((*ierr = freq(*req, &r))) return;
    *ierr = MPI_Request_free(&r);
    if (*ierr == MPI_SUCCESS) *req = MPI_Request_c2f(r);
}

FORTRAN(mpi_cancel, MPI_CANCEL, (MPI_Fint *req, MPI_Fint *ierr)) {
    MPI_Request r;
    if ((*ierr = freq(*req, &r))) return;
    *ierr = MPI_Cancel(&r);
}

FORTRAN(mpi_start, MPI_START, (MPI_Fint *req, MPI_Fint *ierr)) {
    MPI_Request r;
    if ((*ierr = freq(*req, &r))) return;
    *ierr = MPI_Start(&r);
    if (*ierr == MPI_SUCCESS) *req = MPI_Request_c2f(r);
}

/* ---- arrays of requests ---- */
FORTRAN(mpi_startall, MPI_STARTALL, (MPI_Fint *n, MPI_Fint *reqs, MPI_Fint *ierr)) {
    struct fvec v;
    if ((*ierr = vec_in(&v, *n, reqs, MPI_F_STATUSES_IGNORE)) == MPI_SUCCESS) {
        *ierr = MPI_Startall(*n, v.r);
        vec_out(&v, *ierr, *n, reqs, MPI_F_STATUSES_IGNORE, 0);
    }
    vec_free(&v);
}

FORTRAN(mpi_waitall, MPI_WAITALL, (MPI_Fint *n, MPI_Fint *reqs, MPI_Fint *sts, MPI_Fint *ierr)) {
    struct fvec v;
    if ((*ierr = vec_in(&v, *n, reqs, sts)) == MPI_SUCCESS) {
        *ierr = MPI_Waitall(*n, v.r, v.s);
        vec_out(&v, *ierr, *n, reqs, sts, *n);
    }
    vec_free(&v);
}

FORTRAN(mpi_testall, MPI_TESTALL, (MPI_Fint *n, MPI_Fint *reqs, MPI_Fint *flag, MPI_Fint *sts,
                                   MPI_Fint *ierr)) {
    struct fvec v;
    int fl = 0;
    if ((*ierr = vec_in(&v, *n, reqs, sts)) == MPI_SUCCESS) {
        *ierr = MPI_Testall(*n, v.r, &fl, v.s);
        if (*ierr == MPI_SUCCESS || *ierr == MPI_ERR_IN_STATUS) *flag = fl;
        vec_out(&v, *ierr, *n, reqs, sts, fl ? *n : 0);
    }
    vec_free(&v);
}

/* index: 1-based in Fortran; MPI_UNDEFINED stays. */
static void any_out(struct fvec *v, int rc, int n, MPI_Fint *reqs, MPI_Fint *status, int k,
                    MPI_Fint *index) {
    vec_out(v, rc, n, reqs, MPI_F_STATUSES_IGNORE, 0);
    if (rc != MPI_SUCCESS) return;
    *index = k == MPI_UNDEFINED ? MPI_UNDEFINED : k + 1;
    if (k != MPI_UNDEFINED) st_out(rc, status, &v->ss[0]);
}

FORTRAN(mpi_waitany, MPI_WAITANY, (MPI_Fint *n, MPI_Fint *reqs, MPI_Fint *index,
                                   MPI_Fint *status, MPI_Fint *ierr)) {
    struct fvec v;
    int k = MPI_UNDEFINED;
    if ((*ierr = vec_in(&v, *n, reqs, MPI_F_STATUSES_IGNORE)) == MPI_SUCCESS) {
        *ierr = MPI_Waitany(*n, v.r, &k, st_in(status, &v.ss[0]));
        any_out(&v, *ierr, *n, reqs, status, k, index);
    }
    vec_free(&v);
}

FORTRAN(mpi_testany, MPI_TESTANY, (MPI_Fint *n, MPI_Fint *reqs, MPI_Fint *index,
                                   MPI_Fint *flag, MPI_Fint *status, MPI_Fint *ierr)) {
    struct fvec v;
    int k = MPI_UNDEFINED, fl = 0;
    if ((*ierr = vec_in(&v, *n, reqs, MPI_F_STATUSES_IGNORE)) == MPI_SUCCESS) {
        *ierr = MPI_Testany(*n, v.r, &k, &fl, st_in(status, &v.ss[0]));
        if (*ierr == MPI_SUCCESS) *flag = fl;
        any_out(&v, *ierr, *n, reqs, status, k, index);
    }
    vec_free(&v);
}

static void some(int wait, MPI_Fint *n, MPI_Fint *reqs, MPI_Fint *outcount, MPI_Fint *idx,
                 MPI_Fint *sts, MPI_Fint *ierr) {
    struct fvec v;
    int out = 0, *ci = malloc(sizeof(int) * (size_t)(*n > 0 ? *n : 1));
    if (!ci) {
        *ierr = MPI_ERR_NO_MEM;
        return;
    }
    if ((*ierr = vec_in(&v, *n, reqs, sts)) == MPI_SUCCESS) {
        *ierr = wait ? MPI_Waitsome(*n, v.r, &out, ci, v.s) : MPI_Testsome(*n, v.r, &out, ci, v.s);
        const int m = out == MPI_UNDEFINED ? 0 : out;
        vec_out(&v, *ierr, *n, reqs, sts, m);  /* the k-th status is the k-th completed */
        if (*ierr == MPI_SUCCESS || *ierr == MPI_ERR_IN_STATUS) {
            *outcount = out;
            for (int k = 0; k < m; ++k) idx[k] = ci[k] + 1;
        }
    }
    vec_free(&v);
    free(ci);
}

FORTRAN(mpi_waitsome, MPI_WAITSOME, (MPI_Fint *n, MPI_Fint *reqs, MPI_Fint *outcount,
                                     MPI_Fint *idx, MPI_Fint *sts, MPI_Fint *ierr)) {
    some(1, n, reqs, outcount, idx, sts, ierr);
}

FORTRAN(mpi_testsome, MPI_TESTSOME, (MPI_Fint *n, MPI_Fint *reqs, MPI_Fint *outcount,
                                     MPI_Fint *idx, MPI_Fint *sts, MPI_Fint *ierr)) {
    some(0, n, reqs, outcount, idx, sts, ierr);
}
#endif /* OPEN_MPI */
