// coll.cpp — collectives: the barrier by per-rank sequence numbers in the rank objects, and
// bcast / allreduce of small buffers as messages on context 1 (never matched by user
// receives, which are on context 0).
#include <cerrno>
#include <cstring>
#include <vector>

#include "msg/msg.h"
#include "sys/sys.h"

namespace cxk::msg {
namespace {

constexpr uint32_t kCollCtx = 1;
constexpr int kTagBcast = 1, kTagReduce = 2;

RankSeq *seq_line(const cxk_comm *c, uint64_t obj_off) {
    return reinterpret_cast<RankSeq *>(c->base + obj_off + 2 * kLine);
}

// Same-host wake-up of the barrier (coherence "host"; the rings' Dekker pair, ring/wake.cpp):
// after my entry is stored, wake whoever sleeps on my word. A peer's bsleep is untrusted: a
// wrong 1 costs a needless FUTEX_WAKE.
void wake_barrier_sleepers(cxk_comm *c, RankSeq *me) {
    // the producer half: my entry stored before any peer's bsleep is read
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    for (int r = 0; r < c->nranks; ++r) {
        if (r == c->rank || !c->peers[size_t(r)].obj_off) continue;
        if (__atomic_load_n(&seq_line(c, c->peers[size_t(r)].obj_off)->bsleep, __ATOMIC_RELAXED)) {
            // I am this word's one writer; release pairs with the sleeper's acquire load
            __atomic_store_n(&me->bwake, me->bwake + 1, __ATOMIC_RELEASE);
            cxk::sys_futex_wake(&me->bwake, 0x7fffffff);
            return;
        }
    }
}

int send_coll(cxk_comm *c, const void *buf, uint64_t n, int dest, int tag) {
    cxk_msg_req *r;
    if (int rc = isend_ctx(c, buf, n, dest, tag, kCollCtx, 0, &r)) return rc;
    return cxk_msg_wait(c, r, nullptr);
}

int recv_coll(cxk_comm *c, void *buf, uint64_t n, int src, int tag) {
    cxk_msg_req *r;
    if (int rc = irecv_ctx(c, buf, n, src, tag, kCollCtx, &r)) return rc;
    cxk_msg_status st;
    int rc = cxk_msg_wait(c, r, &st);
    if (rc == -ETIMEDOUT) cxk_msg_cancel(c, r);
    if (!rc && st.count != n) rc = -EBADMSG;  // every rank passes the same count
    return rc;
}

template <class T> void reduce(T *acc, const T *x, int64_t n, int op) {
    for (int64_t i = 0; i < n; ++i) {
        switch (op) {
            case CXK_OP_SUM: acc[i] = T(acc[i] + x[i]); break;
            case CXK_OP_MIN: acc[i] = x[i] < acc[i] ? x[i] : acc[i]; break;
            default: acc[i] = x[i] > acc[i] ? x[i] : acc[i]; break;
        }
    }
}

void reduce_any(void *acc, const void *x, int64_t n, int type, int op) {
    switch (type) {
        case CXK_MSG_INT32: reduce(static_cast<int32_t *>(acc), static_cast<const int32_t *>(x), n, op); break;
        case CXK_MSG_INT64: reduce(static_cast<int64_t *>(acc), static_cast<const int64_t *>(x), n, op); break;
        case CXK_MSG_UINT32: reduce(static_cast<uint32_t *>(acc), static_cast<const uint32_t *>(x), n, op); break;
        case CXK_MSG_UINT64: reduce(static_cast<uint64_t *>(acc), static_cast<const uint64_t *>(x), n, op); break;
        case CXK_MSG_FLOAT: reduce(static_cast<float *>(acc), static_cast<const float *>(x), n, op); break;
        default: reduce(static_cast<double *>(acc), static_cast<const double *>(x), n, op); break;
    }
}

}  // namespace
}  // namespace cxk::msg

using namespace cxk::msg;

// One barrier: enter it, then wait for every peer's entry.
static int barrier_once(cxk_comm *c) {
    const uint64_t mine = ++c->barrier_seq;
    RankSeq *me = seq_line(c, c->obj_off);
    // release: everything this rank did before the barrier precedes its entry
    __atomic_store_n(&me->barrier, mine, __ATOMIC_RELEASE);
    if (c->nc) cxk_flush(me, kLine), cxk_sfence();
    else wake_barrier_sleepers(c, me);
    // only a rank that has not arrived can fail the barrier: one that passed it may be gone
    for (int r = 0; r < c->nranks; ++r) {
        if (r == c->rank) continue;
        RankSeq *s = seq_line(c, c->peers[size_t(r)].obj_off);
        Waiter wr(c, r);
        // a sleep also ends when r's entry wakes it (coherence "host")
        const cxk::ring::Extra woken_by_r{&s->bwake, &me->bsleep, &s->barrier, mine};
        for (;;) {
            if (c->nc) cxk_invalidate(s, kLine);
            // acquire pairs with rank r's release of its entry
            uint64_t seq = __atomic_load_n(&s->barrier, __ATOMIC_ACQUIRE);
            if (seq > mine + 1) return c->failed_rank = r, -EBADMSG;  // no rank runs ahead by two
            if (seq >= mine) break;
            int rc = progress(c);  // queued sends and FINs keep moving while we wait
            if (rc) return rc;
            if ((rc = wr.check(true, c->nc ? nullptr : &woken_by_r))) {
                // r may have arrived, passed and finalized since we read its entry
                if (c->nc) cxk_invalidate(s, kLine);
                if (__atomic_load_n(&s->barrier, __ATOMIC_ACQUIRE) >= mine) break;
                return rc;
            }
        }
    }
    return 0;
}

extern "C" {

size_t cxk_msg_type_size(int type) {
    switch (type) {
        case CXK_MSG_INT32: case CXK_MSG_UINT32: case CXK_MSG_FLOAT: return 4;
        case CXK_MSG_INT64: case CXK_MSG_UINT64: case CXK_MSG_DOUBLE: return 8;
        default: return 0;
    }
}

int cxk_msg_barrier(cxk_comm *c) {
    if (!c) return -EINVAL;
    if (c->barrier_failed) return c->barrier_failed;
    const int rc = barrier_once(c);
    if (rc) c->barrier_failed = rc;
    return rc;
}

int cxk_msg_bcast(cxk_comm *c, void *buf, int64_t count, int root) {
    if (!c || count < 0 || (!buf && count) || root < 0 || root >= c->nranks) return -EINVAL;
    if (c->rank != root) return recv_coll(c, buf, uint64_t(count), root, kTagBcast);
    for (int r = 0; r < c->nranks; ++r)
        if (r != root)
            if (int rc = send_coll(c, buf, uint64_t(count), r, kTagBcast)) return rc;
    return 0;
}

int cxk_msg_allreduce(cxk_comm *c, const void *sendbuf, void *recvbuf, int64_t n, int type,
                      int op) {
    const size_t es = cxk_msg_type_size(type);
    if (!c || n < 0 || es == 0 || (op != CXK_OP_SUM && op != CXK_OP_MIN && op != CXK_OP_MAX) ||
        (n && (!sendbuf || !recvbuf)))
        return -EINVAL;
    const uint64_t nbytes = uint64_t(n) * es;
    if (c->rank != 0) {
        if (int rc = send_coll(c, sendbuf, nbytes, 0, kTagReduce)) return rc;
        return recv_coll(c, recvbuf, nbytes, 0, kTagBcast);
    }
    // rank 0 folds in rank order: every run gives the same floating-point result
    std::vector<uint8_t> acc(static_cast<const uint8_t *>(sendbuf),
                             static_cast<const uint8_t *>(sendbuf) + nbytes);
    std::vector<uint8_t> in(nbytes);
    for (int r = 1; r < c->nranks; ++r) {
        if (int rc = recv_coll(c, in.data(), nbytes, r, kTagReduce)) return rc;
        reduce_any(acc.data(), in.data(), n, type, op);
    }
    if (nbytes) std::memcpy(recvbuf, acc.data(), nbytes);
    return cxk_msg_bcast(c, recvbuf, n * int64_t(es), 0);
}

}  // extern "C"
