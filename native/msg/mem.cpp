// mem.cpp — pool-resident user memory (cxk_msg_alloc_mem): blocks of a rank's own pool
// partition ("msg.<job>.<rank>.mem.<k>") that a send above the eager limit leaves in place —
// its RTS names the block and an offset, the receiver copies straight out (one copy instead
// of two) and answers FIN — and the views a receiver keeps of its peers' blocks.
#include <cerrno>
#include <cstring>

#include "msg/msg.h"

namespace cxk::msg {
namespace {

constexpr size_t kMaxMem = 65536;  // the index space of views (as for rendezvous buffers)

// Peer src's memory object `index`, opened by name once (a lease) and revalidated on each use.
int mem_view(cxk_comm *c, int src, uint32_t index, RdvView **out) {
    return peer_view(c, src, "mem", c->peers[size_t(src)].mem, sizeof(MemHdr), index, out);
}

}  // namespace

int mem_find(const cxk_comm *c, const void *buf, uint64_t len, uint64_t *off) {
    const auto a = reinterpret_cast<uintptr_t>(buf);
    for (size_t k = 0; k < c->mem.size(); ++k) {
        const MemBuf &m = c->mem[k];
        if (!m.off) continue;
        const auto lo = reinterpret_cast<uintptr_t>(c->base + m.off + sizeof(MemHdr));
        if (a >= lo && a - lo <= m.nbytes && len <= m.nbytes - (a - lo)) {
            *off = a - lo;
            return int(k);
        }
    }
    return -1;
}

// A send whose bytes lie in one of my memory objects: the RTS names the object and offset,
// the receiver copies out of it, the FIN hands it back. No copy here.
int mem_send_start(cxk_comm *c, Peer &p, cxk_msg_req *r, int k, uint64_t off) {
    void *cell;
    if (int rc = cxk_ring_reserve(p.out, &cell)) return rc;
    // the user's stores into the block reach the pool before the RTS that sends the receiver
    // there (coherence "none", another domain's receiver; commit's fence orders them)
    if (p.nc) cxk_flush(r->sbuf, r->count);
    MsgHdr m{r->ctx, r->tag, r->count, r->cookie, r->flags | kInPool, 1, off, uint32_t(k), 0};
    seal(c, m, r);
    std::memcpy(cell, &m, sizeof m);
    if (int rc = cxk_ring_commit(p.out, sizeof m, kRts)) return rc;
    ++c->mem[size_t(k)].sends;
    r->mem = k;
    return 0;
}

int mem_span(cxk_comm *c, int src, uint32_t index, uint64_t off, uint64_t len,
             const uint8_t **data) {
    RdvView *v;
    if (int rc = mem_view(c, src, index, &v)) {
        // a sender that died took its object with it: that is a lost peer, not garbage
        if (rc == -EBADMSG && check_peer(c, src)) return -ETIMEDOUT;
        return rc;
    }
    auto *h = reinterpret_cast<const MemHdr *>(c->base + v->off);
    if (nc_with(c, src)) cxk_invalidate(h, kLine);
    // the RTS's offset and length are untrusted: the bytes must lie in the object as the pool
    // sized it (the header's own nbytes is the sender's word, checked against that too). Each
    // header word is read once: a peer rewriting nbytes between two reads must not widen the
    // range after its check.
    const uint64_t room = v->nbytes - sizeof(MemHdr);
    const uint64_t magic = __atomic_load_n(&h->magic, __ATOMIC_RELAXED);
    const uint64_t nbytes = __atomic_load_n(&h->nbytes, __ATOMIC_RELAXED);
    if (magic != kMemMagic || nbytes > room || off > nbytes || len > nbytes - off)
        return -EBADMSG;
    if (data) *data = c->base + v->off + sizeof(MemHdr) + off;
    return 0;
}

int mem_recv(cxk_comm *c, int src, uint64_t len, uint64_t cookie, uint32_t index, uint64_t off,
             void *dst, uint64_t cap, const CrcWant *crc) {
    const uint8_t *data;
    if (int rc = mem_span(c, src, index, off, len, &data)) return rc;
    uint64_t want = len < cap ? len : cap;
    // the sender flushed these bytes and fenced before its RTS (coherence "none")
    const uint64_t read = crc ? len : want;  // a checksum reads the bytes past cap too
    if (read && nc_with(c, src)) cxk_invalidate(data, read);
    uint32_t got = crc ? crc->seed : 0;
    copy_part(dst, cap, 0, data, len, crc ? &got : nullptr);
    c->peers[size_t(src)].ctlq.push_back(Ctl{kFin, cookie, 0});
    if (int rc = send_ctl(c, src)) return rc;
    return crc && got != crc->want ? -EBADMSG : 0;
}

void mem_drop_view(cxk_comm *c, int src, uint64_t index) {
    Peer &p = c->peers[size_t(src)];
    if (index < p.mem.size() && p.mem[index].off) {
        cxk_obj_close(c->pool, p.mem[index].off);
        p.mem[index] = RdvView{};
    }
}

void mem_release_all(cxk_comm *c) {
    for (auto &p : c->peers) {
        for (auto &v : p.mem)
            if (v.off) cxk_obj_close(c->pool, v.off);
        p.mem.clear();
    }
    for (size_t k = 0; k < c->mem.size(); ++k) {
        if (!c->mem[k].off) continue;
        std::string name = obj_name(c, c->rank, "mem", long(k));
        cxk_obj_destroy(c->pool, name.c_str());
        cxk_obj_close(c->pool, c->mem[k].off);
    }
    c->mem.clear();
}

}  // namespace cxk::msg

using namespace cxk::msg;

extern "C" {

int cxk_msg_alloc_mem(cxk_comm *c, uint64_t nbytes, void **ptr) {
    if (!c || !ptr || nbytes == 0 || nbytes > (uint64_t(1) << 62)) return -EINVAL;
    size_t k = 0;
    while (k < c->mem.size() && c->mem[k].off) ++k;
    if (k >= kMaxMem) return -ENOSPC;
    std::string name = obj_name(c, c->rank, "mem", long(k));
    uint64_t off;
    // zeroed: the block may have held another object's bytes
    int rc = cxk_obj_create(c->pool, name.c_str(), sizeof(MemHdr) + nbytes, &off);
    if (rc == -EEXIST) {
        // left by an earlier comm of this rank that crashed: it is ours to replace
        cxk_obj_destroy(c->pool, name.c_str());
        rc = cxk_obj_create(c->pool, name.c_str(), sizeof(MemHdr) + nbytes, &off);
    }
    if (rc) return rc;
    auto *h = reinterpret_cast<MemHdr *>(c->base + off);
    h->magic = kMemMagic;
    h->nbytes = nbytes;
    cxk_pool_flush(c->pool, off, sizeof *h);
    if ((rc = publish_own(c, name, off))) return rc;
    if (k == c->mem.size()) c->mem.push_back(MemBuf{});
    c->mem[k] = MemBuf{off, nbytes, 0};
    *ptr = c->base + off + sizeof(MemHdr);
    return 0;
}

int cxk_msg_free_mem(cxk_comm *c, void *ptr) {
    if (!c || !ptr) return -EINVAL;
    for (size_t k = 0; k < c->mem.size(); ++k) {
        MemBuf &m = c->mem[k];
        if (!m.off || c->base + m.off + sizeof(MemHdr) != ptr) continue;
        if (m.sends) return -EBUSY;
        std::string name = obj_name(c, c->rank, "mem", long(k));
        cxk_obj_destroy(c->pool, name.c_str());
        cxk_obj_close(c->pool, m.off);
        m = MemBuf{};
        // peers drop their views (the memory is free once none holds it); queued behind
        // what is queued already, so a later RTS naming a new block k comes after it
        for (int r = 0; r < c->nranks; ++r)
            if (c->peers[size_t(r)].out) c->peers[size_t(r)].ctlq.push_back(Ctl{kDrop, k, kDropMem});
        return 0;
    }
    return -EINVAL;
}

int cxk_msg_is_pool_mem(const cxk_comm *c, const void *buf, uint64_t nbytes) {
    uint64_t off;
    return c && mem_find(c, buf, nbytes, &off) >= 0 ? 1 : 0;
}

}  // extern "C"
