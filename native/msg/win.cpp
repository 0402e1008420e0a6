// win.cpp — one-sided windows: creation, direct gets and whole-line puts, the operations a
// target applies from its ring (partial-line puts, accumulates, fetch-and-op, CAS, flush,
// lock and unlock: one consumer, so no cross-host atomic and no lock word in the pool), and
// the epochs (fence, post-start-complete-wait, lock/unlock).
#include <cerrno>
#include <cstring>
#include <deque>
#include <new>

#include "msg/msg.h"

namespace cxk::msg {
namespace {

constexpr uint64_t kWinMagic = 0x314e49574b5843ull;  // "CXKWIN1"
constexpr uint32_t kWinCtx = 2;

struct WinHdr {        // line 0 of a window object, written before publish
    uint64_t magic;
    uint32_t id;
    uint32_t rank;
    uint64_t nbytes;   // window bytes (data from line 1)
    uint8_t pad[40];
};
static_assert(sizeof(WinHdr) == kLine, "one line");

struct Remote {        // a rank's window as I see it (lease held on other ranks')
    uint64_t obj_off = 0;
    uint64_t nbytes = 0;
};

}  // namespace
}  // namespace cxk::msg

struct cxk_win {
    cxk_comm *c = nullptr;
    uint32_t id = 0;
    uint64_t obj_off = 0;
    uint8_t *data = nullptr;
    uint64_t nbytes = 0;
    std::vector<cxk::msg::Remote> remote;
    std::vector<uint8_t> touched;    // targets with operations in their rings since a flush
    std::vector<uint8_t> locked;     // lock type I hold on each target (0 none)
    // as a target: the lock state, written by my progress only
    int excl = -1;
    std::vector<int> shared;         // shared locks held per origin
    int nshared = 0;
    std::deque<cxk::msg::Ctl> lockq; // waiting: kind = origin rank, value = lock type
    std::vector<int> post_group, start_group;
    // the exposure epoch's "complete" receives, one per origin of post_group, posted by the
    // first wait / test of the epoch (NULL once matched); written by this rank only
    std::vector<cxk_msg_req *> done_reqs;
};

namespace cxk::msg {
namespace {

template <class T> void acc_one(uint8_t *d, const uint8_t *s, int op) {
    T a, b;
    std::memcpy(&a, d, sizeof a);
    std::memcpy(&b, s, sizeof b);
    switch (op) {
        case CXK_OP_SUM: a = T(a + b); break;
        case CXK_OP_MIN: a = b < a ? b : a; break;
        case CXK_OP_MAX: a = b > a ? b : a; break;
        case CXK_OP_REPLACE: a = b; break;
        default: break;  // NO_OP
    }
    std::memcpy(d, &a, sizeof a);
}

void apply(int type, int op, uint8_t *dst, const uint8_t *src, uint64_t count) {
    const size_t es = cxk_msg_type_size(type);
    for (uint64_t i = 0; i < count; ++i, dst += es, src += es) {
        switch (type) {
            case CXK_MSG_INT32: acc_one<int32_t>(dst, src, op); break;
            case CXK_MSG_INT64: acc_one<int64_t>(dst, src, op); break;
            case CXK_MSG_UINT32: acc_one<uint32_t>(dst, src, op); break;
            case CXK_MSG_UINT64: acc_one<uint64_t>(dst, src, op); break;
            case CXK_MSG_FLOAT: acc_one<float>(dst, src, op); break;
            default: acc_one<double>(dst, src, op); break;
        }
    }
}

bool in_window(uint64_t off, uint64_t n, uint64_t size) { return off <= size && n <= size - off; }

void reply(cxk_comm *c, int dest, uint64_t cookie, uint64_t value) {
    c->peers[size_t(dest)].ctlq.push_back(Ctl{kRmaReply, cookie, value});
    send_ctl(c, dest);
}

void grant_waiting(cxk_comm *c, cxk_win *w) {
    while (!w->lockq.empty()) {
        const Ctl &q = w->lockq.front();
        int origin = int(q.kind);
        if (q.value == CXK_LOCK_EXCLUSIVE) {
            if (w->excl >= 0 || w->nshared) return;
            w->excl = origin;
        } else {
            if (w->excl >= 0) return;
            w->shared[size_t(origin)]++, w->nshared++;
        }
        if (c->nc) cxk_flush(w->data, w->nbytes), cxk_sfence();  // my own stores, visible
        reply(c, origin, q.cookie, 0);
        w->lockq.pop_front();
    }
}

// Send one kRma cell to target (waiting for room while driving progress); with `wait`, also
// wait for its reply.
int rma_send(cxk_win *w, int target, const RmaHdr &h, const void *data, uint64_t n,
             RmaWait *wait) {
    cxk_comm *c = w->c;
    if (int rc = ensure_out(c, target)) return rc;
    Peer &p = c->peers[size_t(target)];
    Waiter wt(c, target);
    void *cell;
    for (;;) {
        int rc = cxk_ring_reserve(p.out, &cell);
        if (rc == 0) break;
        if (rc != -EAGAIN) return rc;
        if ((rc = progress(c)) || (rc = wt.check())) return rc;
    }
    std::memcpy(cell, &h, sizeof h);
    if (n) std::memcpy(static_cast<uint8_t *>(cell) + sizeof h, data, n);
    if (int rc = cxk_ring_commit(p.out, uint32_t(sizeof h + n), kRma)) return rc;
    w->touched[size_t(target)] = 1;
    if (!wait) return 0;
    c->rma_waits.push_back(wait);
    int rc = 0;
    while (!wait->done) {
        if ((rc = progress(c)) || (rc = wt.check(true))) break;
    }
    for (size_t i = 0; i < c->rma_waits.size(); ++i)
        if (c->rma_waits[i] == wait) c->rma_waits.erase(c->rma_waits.begin() + long(i));
    return wait->done ? 0 : rc;
}

int rma_sync(cxk_win *w, int target, uint16_t what, uint8_t op, uint64_t *value) {
    RmaHdr h{w->id, what, 0, op, 0, 0, w->c->next_cookie++};
    RmaWait wait{h.cookie, target};
    int rc = rma_send(w, target, h, nullptr, 0, &wait);
    if (!rc && value) *value = wait.value;
    return rc;
}

int check_access(const cxk_win *w, int target, uint64_t off, uint64_t n) {
    if (!w || target < 0 || target >= w->c->nranks) return -EINVAL;
    return in_window(off, n, w->remote[size_t(target)].nbytes) ? 0 : -ERANGE;
}

uint8_t *remote_data(const cxk_win *w, int target) {
    return w->c->base + w->remote[size_t(target)].obj_off + kLine;
}

uint64_t payload_room(cxk_win *w, int target) {
    Peer &p = w->c->peers[size_t(target)];
    return cxk_ring_payload_max(p.out) - sizeof(RmaHdr);
}

int group_ok(const cxk_win *w, const int *ranks, int n) {
    if (n < 0 || (n && !ranks)) return -EINVAL;
    for (int i = 0; i < n; ++i)
        if (ranks[i] < 0 || ranks[i] >= w->c->nranks) return -EINVAL;
    return 0;
}

}  // namespace

int rma_request(cxk_comm *c, int src, const void *pl, uint32_t n) {
    RmaHdr h;
    if (n < sizeof h) return -EBADMSG;
    std::memcpy(&h, pl, sizeof h);
    if (h.win >= c->wins.size() || !c->wins[h.win]) return -EBADMSG;
    cxk_win *w = c->wins[h.win];
    const uint8_t *arg = static_cast<const uint8_t *>(pl) + sizeof h;
    const uint64_t nargs = n - sizeof h;
    const size_t es = cxk_msg_type_size(h.type);
    switch (h.what) {
        case kRmaPut:
            if (nargs != h.count || !in_window(h.off, h.count, w->nbytes)) return -EBADMSG;
            std::memcpy(w->data + h.off, arg, nargs);
            if (c->nc) cxk_flush(w->data + h.off, nargs), cxk_sfence();
            return 0;
        case kRmaAcc:
            if (!es || h.op > CXK_OP_REPLACE || nargs != h.count * es || h.count > w->nbytes ||
                !in_window(h.off, nargs, w->nbytes))
                return -EBADMSG;
            apply(h.type, h.op, w->data + h.off, arg, h.count);
            if (c->nc) cxk_flush(w->data + h.off, nargs), cxk_sfence();
            return 0;
        case kRmaFop:
        case kRmaCas: {
            const uint64_t want = h.what == kRmaCas ? 2 * es : es;
            if (!es || h.count != 1 || nargs != want || !in_window(h.off, es, w->nbytes) ||
                (h.what == kRmaFop && h.op > CXK_OP_NO_OP))
                return -EBADMSG;
            uint64_t old = 0;
            std::memcpy(&old, w->data + h.off, es);
            if (h.what == kRmaFop) apply(h.type, h.op, w->data + h.off, arg, 1);
            else if (std::memcmp(w->data + h.off, arg, es) == 0)
                std::memcpy(w->data + h.off, arg + es, es);
            if (c->nc) cxk_flush(w->data + h.off, es), cxk_sfence();
            reply(c, src, h.cookie, old);
            return 0;
        }
        case kRmaFlush:
            reply(c, src, h.cookie, 0);
            return 0;
        case kRmaLock:
            if (h.op != CXK_LOCK_SHARED && h.op != CXK_LOCK_EXCLUSIVE) return -EBADMSG;
            w->lockq.push_back(Ctl{uint32_t(src), h.cookie, h.op});
            grant_waiting(c, w);
            return 0;
        case kRmaUnlock:
            if (w->excl == src) w->excl = -1;
            else if (w->shared[size_t(src)] > 0) w->shared[size_t(src)]--, w->nshared--;
            else return -EBADMSG;  // it holds no lock here
            reply(c, src, h.cookie, 0);
            grant_waiting(c, w);
            return 0;
        default:
            return -EBADMSG;
    }
}

int rma_reply(cxk_comm *c, int src, const CtlMsg &m) {
    for (RmaWait *w : c->rma_waits)
        if (w->cookie == m.cookie && w->target == src) {
            w->done = true;
            w->value = m.value;
            return 0;
        }
    return -EBADMSG;
}

void free_wins(cxk_comm *c) {
    for (size_t id = 0; id < c->wins.size(); ++id) {
        cxk_win *w = c->wins[id];
        if (!w) continue;
        for (int r = 0; r < c->nranks; ++r)
            if (r != c->rank && w->remote[size_t(r)].obj_off)
                cxk_obj_close(c->pool, w->remote[size_t(r)].obj_off);
        std::string name = obj_name(c, c->rank, "win", long(id));
        cxk_obj_destroy(c->pool, name.c_str());
        cxk_obj_close(c->pool, w->obj_off);
        delete w;
        c->wins[id] = nullptr;
    }
}

}  // namespace cxk::msg

using namespace cxk::msg;

extern "C" {

int cxk_win_create(cxk_comm *c, uint64_t nbytes, cxk_win **out) {
    if (!c || !out || nbytes > (1ull << 48)) return -EINVAL;
    auto *w = new (std::nothrow) cxk_win;
    if (!w) return -ENOMEM;
    w->c = c;
    w->id = uint32_t(c->wins.size());
    w->nbytes = nbytes;
    w->remote.resize(size_t(c->nranks));
    w->touched.assign(size_t(c->nranks), 0);
    w->locked.assign(size_t(c->nranks), 0);
    w->shared.assign(size_t(c->nranks), 0);
    std::string name = obj_name(c, c->rank, "win", long(w->id));
    int rc = cxk_obj_create(c->pool, name.c_str(), sizeof(WinHdr) + nbytes, &w->obj_off);
    if (rc) {
        delete w;
        return rc;
    }
    auto *h = reinterpret_cast<WinHdr *>(c->base + w->obj_off);
    *h = WinHdr{kWinMagic, w->id, uint32_t(c->rank), nbytes, {}};
    w->data = c->base + w->obj_off + kLine;
    if ((rc = publish_own(c, name, w->obj_off))) {
        delete w;
        return rc;
    }
    c->wins.push_back(w);
    w->remote[size_t(c->rank)] = Remote{w->obj_off, nbytes};
    rc = cxk_msg_barrier(c);
    for (int r = 0; !rc && r < c->nranks; ++r) {
        if (r == c->rank) continue;
        std::string pn = obj_name(c, r, "win", long(w->id));
        struct cxk_obj_stat st;
        if ((rc = cxk_obj_open(c->pool, pn.c_str(), &st))) break;
        WinHdr ph;
        cxk_pool_invalidate(c->pool, st.off, sizeof ph);
        std::memcpy(&ph, c->base + st.off, sizeof ph);
        w->remote[size_t(r)] = Remote{st.off, ph.nbytes};
        if (st.host != c->peers[size_t(r)].host || st.nbytes < sizeof ph || ph.magic != kWinMagic ||
            ph.id != w->id || ph.rank != uint32_t(r) || ph.nbytes > st.nbytes - sizeof ph)
            rc = -EBADMSG;
    }
    if (rc) {
        c->wins.back() = nullptr;
        for (int r = 0; r < c->nranks; ++r)
            if (r != c->rank && w->remote[size_t(r)].obj_off)
                cxk_obj_close(c->pool, w->remote[size_t(r)].obj_off);
        cxk_obj_destroy(c->pool, name.c_str());
        cxk_obj_close(c->pool, w->obj_off);
        delete w;
        return rc;
    }
    *out = w;
    return 0;
}

int cxk_win_free(cxk_win *w) {
    if (!w) return -EINVAL;
    cxk_comm *c = w->c;
    int rc = cxk_msg_barrier(c);
    for (int r = 0; r < c->nranks; ++r)
        if (r != c->rank && w->remote[size_t(r)].obj_off)
            cxk_obj_close(c->pool, w->remote[size_t(r)].obj_off);
    std::string name = obj_name(c, c->rank, "win", long(w->id));
    cxk_obj_destroy(c->pool, name.c_str());
    cxk_obj_close(c->pool, w->obj_off);
    c->wins[w->id] = nullptr;
    delete w;
    return rc;
}

void *cxk_win_base(const cxk_win *w) { return w ? w->data : nullptr; }

int cxk_win_size(const cxk_win *w, int rank, uint64_t *nbytes) {
    if (!w || !nbytes || rank < 0 || rank >= w->c->nranks) return -EINVAL;
    *nbytes = w->remote[size_t(rank)].nbytes;
    return 0;
}

int cxk_win_put(cxk_win *w, const void *buf, uint64_t n, int target, uint64_t off) {
    if (!w || (!buf && n)) return -EINVAL;
    if (int rc = check_access(w, target, off, n)) return rc;
    cxk_comm *c = w->c;
    uint8_t *dst = remote_data(w, target) + off;
    const auto *src = static_cast<const uint8_t *>(buf);
    if (!c->nc || target == c->rank) {
        std::memcpy(dst, src, n);  // one coherence domain: the caches merge partial lines
        return 0;
    }
    // whole lines straight to memory; the partial lines at either end by the target
    uint64_t lo = (uintptr_t(dst) + kLine - 1) & ~(kLine - 1), hi = (uintptr_t(dst) + n) & ~(kLine - 1);
    if (hi <= lo) lo = hi = uintptr_t(dst) + n;
    uint64_t head = lo - uintptr_t(dst), body = hi - lo, tail = n - head - body;
    if (body) cxk_copy_flush(dst + head, src + head, body);
    const uint64_t room = payload_room(w, target);
    auto am_put = [&](uint64_t pos, uint64_t len) -> int {
        for (uint64_t done = 0; done < len;) {
            uint64_t k = len - done < room ? len - done : room;
            RmaHdr h{w->id, kRmaPut, 0, 0, off + pos + done, k, 0};
            if (int rc = rma_send(w, target, h, src + pos + done, k, nullptr)) return rc;
            done += k;
        }
        return 0;
    };
    if (int rc = am_put(0, head)) return rc;
    return am_put(head + body, tail);
}

int cxk_win_get(cxk_win *w, void *buf, uint64_t n, int target, uint64_t off) {
    if (!w || (!buf && n)) return -EINVAL;
    if (int rc = check_access(w, target, off, n)) return rc;
    const uint8_t *src = remote_data(w, target) + off;
    if (w->c->nc && target != w->c->rank) cxk_invalidate(src, n);
    std::memcpy(buf, src, n);
    return 0;
}

int cxk_win_accumulate(cxk_win *w, const void *buf, uint64_t count, int type, int target,
                       uint64_t off, int op) {
    const size_t es = cxk_msg_type_size(type);
    if (!w || !es || op < CXK_OP_SUM || op > CXK_OP_REPLACE || (!buf && count) ||
        count > (1ull << 48))
        return -EINVAL;
    if (int rc = check_access(w, target, off, count * es)) return rc;
    if (int rc = ensure_out(w->c, target)) return rc;
    const uint64_t per = payload_room(w, target) / es;
    const auto *src = static_cast<const uint8_t *>(buf);
    for (uint64_t i = 0; i < count; i += per) {
        uint64_t k = count - i < per ? count - i : per;
        RmaHdr h{w->id, kRmaAcc, uint8_t(type), uint8_t(op), off + i * es, k, 0};
        if (int rc = rma_send(w, target, h, src + i * es, k * es, nullptr)) return rc;
    }
    return 0;
}

int cxk_win_fetch_and_op(cxk_win *w, const void *operand, void *result, int type, int target,
                         uint64_t off, int op) {
    const size_t es = cxk_msg_type_size(type);
    if (!w || !es || !result || (!operand && op != CXK_OP_NO_OP) || op < CXK_OP_SUM ||
        op > CXK_OP_NO_OP)
        return -EINVAL;
    if (int rc = check_access(w, target, off, es)) return rc;
    uint8_t arg[8] = {};
    if (operand) std::memcpy(arg, operand, es);
    RmaHdr h{w->id, kRmaFop, uint8_t(type), uint8_t(op), off, 1, w->c->next_cookie++};
    RmaWait wait{h.cookie, target};
    if (int rc = rma_send(w, target, h, arg, es, &wait)) return rc;
    std::memcpy(result, &wait.value, es);
    return 0;
}

int cxk_win_compare_and_swap(cxk_win *w, const void *compare, const void *swap, void *result,
                             int type, int target, uint64_t off) {
    const size_t es = cxk_msg_type_size(type);
    if (!w || !es || !compare || !swap || !result) return -EINVAL;
    if (int rc = check_access(w, target, off, es)) return rc;
    uint8_t arg[16];
    std::memcpy(arg, compare, es);
    std::memcpy(arg + es, swap, es);
    RmaHdr h{w->id, kRmaCas, uint8_t(type), 0, off, 1, w->c->next_cookie++};
    RmaWait wait{h.cookie, target};
    if (int rc = rma_send(w, target, h, arg, 2 * es, &wait)) return rc;
    std::memcpy(result, &wait.value, es);
    return 0;
}

int cxk_win_flush(cxk_win *w, int target) {
    if (!w || target < -1 || target >= w->c->nranks) return -EINVAL;
    for (int r = 0; r < w->c->nranks; ++r) {
        if ((target >= 0 && r != target) || !w->touched[size_t(r)]) continue;
        if (int rc = rma_sync(w, r, kRmaFlush, 0, nullptr)) return rc;
        w->touched[size_t(r)] = 0;
    }
    return 0;
}

int cxk_win_fence(cxk_win *w) {
    if (!w) return -EINVAL;
    if (int rc = cxk_win_flush(w, -1)) return rc;
    cxk_comm *c = w->c;
    if (c->nc) cxk_flush(w->data, w->nbytes), cxk_sfence();  // my own stores, visible
    if (int rc = cxk_msg_barrier(c)) return rc;
    if (c->nc) cxk_invalidate(w->data, w->nbytes);  // others' whole-line puts, seen
    return 0;
}

int cxk_win_post(cxk_win *w, const int *ranks, int n) {
    if (!w) return -EINVAL;
    if (int rc = group_ok(w, ranks, n)) return rc;
    if (!w->post_group.empty()) return -EPROTO;
    cxk_comm *c = w->c;
    if (c->nc) cxk_flush(w->data, w->nbytes), cxk_sfence();
    w->post_group.assign(ranks, ranks + n);
    for (int i = 0; i < n; ++i) {
        cxk_msg_req *r;
        if (int rc = isend_ctx(c, nullptr, 0, ranks[i], int(w->id) * 4 + 1, kWinCtx, 0, &r)) return rc;
        if (int rc = cxk_msg_wait(c, r, nullptr)) return rc;
    }
    return 0;
}

int cxk_win_start(cxk_win *w, const int *ranks, int n) {
    if (!w) return -EINVAL;
    if (int rc = group_ok(w, ranks, n)) return rc;
    if (!w->start_group.empty()) return -EPROTO;
    for (int i = 0; i < n; ++i) {
        cxk_msg_req *r;
        if (int rc = irecv_ctx(w->c, nullptr, 0, ranks[i], int(w->id) * 4 + 1, kWinCtx, &r)) return rc;
        int rc = cxk_msg_wait(w->c, r, nullptr);
        if (rc == -ETIMEDOUT) cxk_msg_cancel(w->c, r);
        if (rc) return rc;
    }
    w->start_group.assign(ranks, ranks + n);
    return 0;
}

int cxk_win_complete(cxk_win *w) {
    if (!w) return -EINVAL;
    if (w->start_group.empty()) return -EPROTO;
    for (int t : w->start_group) {
        if (w->touched[size_t(t)]) {
            if (int rc = rma_sync(w, t, kRmaFlush, 0, nullptr)) return rc;
            w->touched[size_t(t)] = 0;
        }
        cxk_msg_req *r;
        if (int rc = isend_ctx(w->c, nullptr, 0, t, int(w->id) * 4 + 2, kWinCtx, 0, &r)) return rc;
        if (int rc = cxk_msg_wait(w->c, r, nullptr)) return rc;
    }
    w->start_group.clear();
    return 0;
}

}  // extern "C"

namespace {
// Post the receives of the origins' "complete" messages once per exposure epoch.
int post_done_reqs(cxk_win *w) {
    if (!w->done_reqs.empty()) return 0;
    for (int o : w->post_group) {
        cxk_msg_req *r = nullptr;
        if (int rc = irecv_ctx(w->c, nullptr, 0, o, int(w->id) * 4 + 2, kWinCtx, &r)) return rc;
        w->done_reqs.push_back(r);
    }
    return 0;
}

void end_exposure(cxk_win *w) {
    w->post_group.clear();
    w->done_reqs.clear();
    if (w->c->nc) cxk_invalidate(w->data, w->nbytes);
}
}  // namespace

extern "C" {

int cxk_win_wait(cxk_win *w) {
    if (!w) return -EINVAL;
    if (w->post_group.empty()) return -EPROTO;
    if (int rc = post_done_reqs(w)) return rc;
    for (cxk_msg_req *&r : w->done_reqs) {
        if (!r) continue;
        int rc = cxk_msg_wait(w->c, r, nullptr);
        if (rc == -ETIMEDOUT) return rc;  // r stays valid: a later wait or test goes on
        r = nullptr;
        if (rc) return rc;
    }
    end_exposure(w);
    return 0;
}

int cxk_win_test(cxk_win *w, int *flag) {
    if (!w || !flag) return -EINVAL;
    if (w->post_group.empty()) return -EPROTO;
    *flag = 0;
    if (int rc = post_done_reqs(w)) return rc;
    bool all = true;
    for (cxk_msg_req *&r : w->done_reqs) {
        if (!r) continue;
        int done = 0, rc = cxk_msg_test(w->c, r, &done, nullptr);
        if (done) r = nullptr;
        if (rc) return rc;
        all = all && done;
    }
    if (!all) return 0;
    end_exposure(w);
    *flag = 1;
    return 0;
}

int cxk_win_lock(cxk_win *w, int type, int target) {
    if (!w || (type != CXK_LOCK_SHARED && type != CXK_LOCK_EXCLUSIVE) || target < 0 ||
        target >= w->c->nranks)
        return -EINVAL;
    if (w->locked[size_t(target)]) return -EPROTO;
    if (int rc = rma_sync(w, target, kRmaLock, uint8_t(type), nullptr)) return rc;
    w->locked[size_t(target)] = uint8_t(type);
    return 0;
}

int cxk_win_unlock(cxk_win *w, int target) {
    if (!w || target < 0 || target >= w->c->nranks) return -EINVAL;
    if (!w->locked[size_t(target)]) return -EPROTO;
    // the target answers after applying everything before the unlock (its ring is FIFO)
    if (int rc = rma_sync(w, target, kRmaUnlock, 0, nullptr)) return rc;
    w->locked[size_t(target)] = 0;
    w->touched[size_t(target)] = 0;
    return 0;
}

}  // extern "C"
