// rdv.cpp — the rendezvous buffers: a sender's own ("msg.<job>.<rank>.rdv.<k>", one per
// message in flight, reused best-fit, recycled when its memory is needed for a larger one)
// and the views a receiver keeps of its peers' buffers (a lease each, dropped on kDrop).
#include <cerrno>
#include <cstring>

#include "msg/msg.h"

namespace cxk::msg {
namespace {

// How long memory released by rdv_release_idle may take to come back (peers drop their
// views when they next drive progress) before a send that needs it fails with -ENOSPC.
int64_t drop_grace_ns(const cxk_comm *c) { return int64_t(c->opts.dead_ms) * 1000000; }

bool any_busy(const cxk_comm *c) {
    for (const auto &b : c->rdv)
        if (b.off && b.busy) return true;
    return false;
}

// Remove my idle buffers and tell every peer I write to (myself included) to drop its view
// of them (kDrop, queued behind what is queued already: a later RTS naming a new buffer of
// the same index comes after it). The memory is free once no view holds it.
uint64_t release_idle(cxk_comm *c) {
    uint64_t freed = 0;
    for (size_t k = 0; k < c->rdv.size(); ++k) {
        RdvBuf &b = c->rdv[k];
        if (!b.off || b.busy) continue;
        std::string name = obj_name(c, c->rank, "rdv", long(k));
        cxk_obj_destroy(c->pool, name.c_str());
        cxk_obj_close(c->pool, b.off);
        freed += b.cap;
        c->rdv_bytes -= b.cap;
        b = RdvBuf{};
        for (int r = 0; r < c->nranks; ++r)
            if (c->peers[size_t(r)].out) c->peers[size_t(r)].ctlq.push_back(Ctl{kDrop, k, 0});
    }
    if (freed) c->rdv_released_ns = now_ns();
    return freed;
}

int create(cxk_comm *c, size_t k, uint64_t cap) {
    std::string name = obj_name(c, c->rank, "rdv", long(k));
    uint64_t off;
    int rc = cxk_obj_create_ex(c->pool, name.c_str(), sizeof(RdvHdr) + cap, CXK_OBJ_NOZERO, &off);
    if (rc) return rc;
    auto *h = reinterpret_cast<RdvHdr *>(c->base + off);
    std::memset(h, 0, sizeof *h);
    h->magic = kRdvMagic;
    cxk_pool_flush(c->pool, off, sizeof *h);
    if ((rc = publish_own(c, name, off))) return rc;
    if (k == c->rdv.size()) c->rdv.push_back(RdvBuf{});
    c->rdv[k] = RdvBuf{off, cap, false};
    c->rdv_bytes += cap;
    return 0;
}

}  // namespace

int rdv_pick(cxk_comm *c, uint64_t len) {
    int best = -1;
    size_t slot = c->rdv.size();  // where a new buffer goes: a freed slot, else the end
    for (size_t k = 0; k < c->rdv.size(); ++k) {
        const RdvBuf &b = c->rdv[k];
        if (!b.off) {
            if (slot == c->rdv.size()) slot = k;
            continue;
        }
        if (!b.busy && b.cap >= len && (best < 0 || b.cap < c->rdv[size_t(best)].cap))
            best = int(k);
    }
    if (best >= 0) return best;
    if (slot >= 65536) return -EAGAIN;  // the index space of views: wait for a FIN
    uint64_t cap = 65536;
    while (cap < len) cap <<= 1;
    // Over the limit (half my partition), the idle buffers of other sizes go first: a
    // window of smaller messages must not keep memory a larger message needs.
    if (c->rdv_bytes && c->rdv_bytes + cap > c->rdv_limit) {
        if (release_idle(c) || any_busy(c)) return -EAGAIN;
    }
    int rc = create(c, slot, cap);
    if (rc != -ENOSPC) return rc ? rc : int(slot);
    // the partition is full: what FINs and drops free will do, for a while
    if (release_idle(c) || any_busy(c)) return -EAGAIN;
    if (c->rdv_released_ns && now_ns() - c->rdv_released_ns < drop_grace_ns(c)) return -EAGAIN;
    return -ENOSPC;
}

int peer_view(cxk_comm *c, int src, const char *what, std::vector<RdvView> &views,
              uint64_t min_bytes, uint32_t index, RdvView **out) {
    if (index >= 65536) return -EBADMSG;  // the index space of views (a cell's u16 range)
    if (views.size() <= index) views.resize(index + 1);
    RdvView &v = views[index];
    if (v.off && cxk_obj_validate(c->pool, v.off, v.gen) != 0) {
        cxk_obj_close(c->pool, v.off);
        v = RdvView{};
    }
    if (!v.off) {
        std::string name = obj_name(c, src, what, long(index));
        struct cxk_obj_stat st;
        int rc = cxk_obj_open(c->pool, name.c_str(), &st);
        if (rc) return rc == -ENOENT ? -EBADMSG : rc;
        if (st.host != c->peers[size_t(src)].host || st.nbytes < min_bytes) {
            cxk_obj_close(c->pool, st.off);
            return -EBADMSG;
        }
        v.off = st.off, v.nbytes = st.nbytes, v.gen = st.generation;
    }
    *out = &v;
    return 0;
}

int rdv_view(cxk_comm *c, int src, uint32_t index, RdvView **out) {
    return peer_view(c, src, "rdv", c->peers[size_t(src)].rdv, sizeof(RdvHdr), index, out);
}

int rdv_fits(cxk_comm *c, int src, uint32_t index, uint64_t len, RdvView **out) {
    RdvView *v;
    if (int rc = rdv_view(c, src, index, &v)) {
        // a sender that died took its buffer with it: that is a lost peer, not garbage
        if (rc == -EBADMSG && check_peer(c, src)) return -ETIMEDOUT;
        return rc;
    }
    if (len > v->nbytes - sizeof(RdvHdr)) return -EBADMSG;
    if (out) *out = v;
    return 0;
}

int rdv_fin(cxk_comm *c, int src, uint64_t cookie) {
    for (auto &b : c->rdv)
        if (b.off && b.busy && b.peer == src && b.cookie == cookie) {
            b.busy = false;
            return 0;
        }
    return -EBADMSG;
}

int rdv_drop_view(cxk_comm *c, int src, const void *pl, uint32_t n) {
    if (n != sizeof(CtlMsg)) return -EBADMSG;
    CtlMsg m;
    std::memcpy(&m, pl, sizeof m);
    if (m.cookie >= 65536 || m.value > kDropMem) return -EBADMSG;
    if (m.value == kDropMem) return mem_drop_view(c, src, m.cookie), 0;
    Peer &p = c->peers[size_t(src)];
    if (m.cookie < p.rdv.size() && p.rdv[m.cookie].off) {
        cxk_obj_close(c->pool, p.rdv[m.cookie].off);
        p.rdv[m.cookie] = RdvView{};
    }
    return 0;  // a view never opened: nothing to drop
}

}  // namespace cxk::msg
