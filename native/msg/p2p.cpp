// p2p.cpp — two-sided messaging: the rings between ranks (created at the first send, found
// through the sender's directory), eager and rendezvous sends started in order per peer,
// MPI matching (posted receives, unexpected queue) and the progress loop that drives both.
#include <cerrno>
#include <cstring>
#include <new>

#include "msg/msg.h"
#include "pool/checksum.h"
#include "ring/peek.h"
#include "ring/ring.h"

namespace cxk::msg {
namespace {

constexpr uint64_t kScanEvery = 16;  // progress calls per look for a new incoming ring

uint64_t first_cap(uint64_t pmax) { return pmax - sizeof(MsgHdr); }
uint64_t cells_for(uint64_t len, uint64_t pmax) {
    uint64_t f = first_cap(pmax);
    return len <= f ? 1 : 1 + (len - f + pmax - 1) / pmax;
}

int push_ctl(cxk_comm *c, Peer &p);

bool matches(const cxk_msg_req *r, int src, int tag, uint32_t ctx) {
    return r->ctx == ctx && (r->peer == CXK_ANY_SOURCE || r->peer == src) &&
           (r->tag == CXK_ANY_TAG || r->tag == tag);
}

cxk_msg_req *take_posted(cxk_comm *c, int src, int tag, uint32_t ctx) {
    for (auto it = c->posted.begin(); it != c->posted.end(); ++it)
        if (matches(*it, src, tag, ctx)) {
            cxk_msg_req *r = *it;
            c->posted.erase(it);
            return r;
        }
    return nullptr;
}

void complete_recv(cxk_msg_req *r, int src, int tag, uint64_t len) {
    r->status.source = src;
    r->status.tag = tag;
    r->status.count = len;
    r->status.error = len > r->count ? -EMSGSIZE : 0;
    r->state = cxk_msg_req::kDone;
}

// A message's checksum against what its sender wrote (a receiver in checksum mode requires
// one); -EBADMSG when they differ.
int crc_verdict(const CrcWant *w, uint32_t got) { return w && got != w->want ? -EBADMSG : 0; }

// Wait for the next cell of a message already begun (its sender wrote them back to back).
int next_cell(cxk_comm *c, int src, const void **pl, uint32_t *n, uint32_t *kind) {
    Waiter w(c, src);
    for (;;) {
        int rc = cxk_ring_peek(c->peers[size_t(src)].in, pl, n, kind);
        if (rc != -EAGAIN) return rc == -EPIPE ? -EBADMSG : rc;
        if ((rc = w.check(true))) return rc;
    }
}

// The rest of an eager message: cells 2..ncells, each pmax bytes but the last.
int eager_rest(cxk_comm *c, int src, const MsgHdr &h, uint64_t pmax, void *dst, uint64_t cap,
               uint32_t *crc) {
    uint64_t pos = first_cap(pmax);
    for (uint32_t i = 1; i < h.ncells; ++i) {
        const void *pl;
        uint32_t n, kind;
        if (int rc = next_cell(c, src, &pl, &n, &kind)) return rc;
        uint64_t want = h.len - pos < pmax ? h.len - pos : pmax;
        if (kind != kCont || n != want) return -EBADMSG;
        copy_part(dst, cap, pos, pl, n, crc);
        pos += n;
        cxk_ring_release(c->peers[size_t(src)].in);
    }
    return 0;
}

// Receive side of a rendezvous: copy the message out of the sender's buffer as its ready
// count grows (the sender may still be copying in), then queue FIN. v: the buffer's view as
// rdv_fits checked it just now (an RTS matched on arrival), nullptr: checked here.
int rdv_recv(cxk_comm *c, int src, uint64_t len, uint64_t cookie, uint32_t index, void *dst,
             uint64_t cap, const CrcWant *crc, RdvView *v = nullptr) {
    if (!v)
        if (int rc = rdv_view(c, src, index, &v)) return rc;
    if (len > v->nbytes - sizeof(RdvHdr)) return -EBADMSG;
    auto *h = reinterpret_cast<RdvHdr *>(c->base + v->off);
    const uint8_t *data = c->base + v->off + sizeof(RdvHdr);
    const bool nc = nc_with(c, src);
    if (nc) cxk_invalidate(h, kLine);
    // the sender wrote magic and cookie (flushed) before the RTS we are answering
    if (h->magic != kRdvMagic || __atomic_load_n(&h->cookie, __ATOMIC_ACQUIRE) != cookie)
        return -EBADMSG;
    Waiter w(c, src);
    uint64_t done = 0;
    uint32_t got = crc ? crc->seed : 0;
    while (done < len) {
        if (nc) cxk_invalidate(h, kLine);
        // acquire pairs with the sender's release of ready: the bytes it counts are there
        uint64_t ready = __atomic_load_n(&h->ready, __ATOMIC_ACQUIRE);
        if (ready > len) return -EBADMSG;
        if (ready == done) {
            if (int rc = w.check()) return rc;
            continue;
        }
        ++c->events;  // a chunk arrived: the wait for the next one spins afresh
        uint64_t want = ready < cap ? ready : cap;
        if (want > done) {
            if (nc) cxk_invalidate(data + done, want - done);
            std::memcpy(static_cast<uint8_t *>(dst) + done, data + done, want - done);
        }
        if (crc) {  // the bytes as delivered, then those past the buffer where they lie
            const uint64_t lo = done > want ? done : want;
            auto *d = static_cast<uint8_t *>(dst);
            if (want > done) got = pool::crc32c(d + done, want - done, got);
            if (ready > lo) got = crc_more(nc, got, data + lo, ready - lo);
        }
        done = ready;
    }
    // the acquire of the last ready count orders this read after the sender's store of crc
    if (crc && nc) cxk_invalidate(h, kLine);
    const CrcWant sent{0, crc ? __atomic_load_n(&h->crc, __ATOMIC_RELAXED) : 0};
    c->peers[size_t(src)].ctlq.push_back(Ctl{kFin, cookie, 0});
    if (int rc = send_ctl(c, src)) return rc;
    return crc_verdict(crc ? &sent : nullptr, got);
}

int on_control(cxk_comm *c, int src, uint32_t kind, const void *pl, uint32_t n) {
    if (n != sizeof(CtlMsg)) return -EBADMSG;
    CtlMsg m;
    std::memcpy(&m, pl, sizeof m);
    if (kind == kRmaReply) return rma_reply(c, src, m);
    for (size_t i = 0; i < c->waiting.size(); ++i) {
        cxk_msg_req *r = c->waiting[i];
        if (r->cookie != m.cookie || r->peer != src) continue;
        if (kind == kFin) {
            if (r->rdv < 0 && r->mem < 0) return -EBADMSG;
            if (r->rdv >= 0) c->rdv[size_t(r->rdv)].busy = false;
            if (r->mem >= 0) --c->mem[size_t(r->mem)].sends;
            r->rdv = -1, r->mem = -1;
        }
        r->state = cxk_msg_req::kDone;
        ++c->completed;
        c->waiting.erase(c->waiting.begin() + long(i));
        return 0;
    }
    // no send of ours waits for it: a FIN frees the buffer of a send already complete
    return kind == kFin ? rdv_fin(c, src, m.cookie) : -EBADMSG;
}

// The header of a message's first cell (a kShort's as a MsgHdr of one cell): its bytes in
// the cell, or -EBADMSG.
int read_hdr(uint32_t kind, const void *pl, uint32_t n, MsgHdr *h) {
    if (kind != kShort) {
        if (n < sizeof *h) return -EBADMSG;
        std::memcpy(h, pl, sizeof *h);
        return int(sizeof *h);
    }
    ShortHdr s;
    if (n < sizeof s) return -EBADMSG;
    std::memcpy(&s, pl, sizeof s);
    if (s.len > kShortMax || n != sizeof s + s.len) return -EBADMSG;
    *h = MsgHdr{s.ctx, s.tag, s.len, s.cookie, s.flags, 1, 0, 0, s.crc};
    return int(sizeof s);
}

// The first cell of a message from src is at the head of its ring: match or queue it.
int on_message(cxk_comm *c, int src, uint32_t kind, const void *pl, uint32_t n) {
    Peer &p = c->peers[size_t(src)];
    const uint64_t pmax = cxk_ring_payload_max(p.in);
    MsgHdr h;
    const int hbytes = read_hdr(kind, pl, n, &h);
    if (hbytes < 0) return hbytes;
    // 0 user, 1 collectives, 2 windows, CXK_MSG_CTX_FIRST.. a layer above's communicators
    if ((h.ctx > 2 && h.ctx < CXK_MSG_CTX_FIRST) || h.tag < 0) return -EBADMSG;
    const bool eager = kind != kRts;
    if (kind == kEager) {
        // at most half the ring (cxk_msg_init's cap), checked before cells_for can overflow
        const uint64_t most = first_cap(pmax) + pmax * (cxk_ring_ncells(p.in) / 2 - 1);
        uint64_t first = h.len < first_cap(pmax) ? h.len : first_cap(pmax);
        if (h.len > most || h.ncells != cells_for(h.len, pmax) ||
            h.ncells > cxk_ring_ncells(p.in) / 2 || n != sizeof h + first)
            return -EBADMSG;
    } else if (kind == kRts && (n != sizeof h || h.len == 0)) {
        return -EBADMSG;
    }
    if (h.flags & ~(kSync | kInPool | kCrc) || ((h.flags & kInPool) && kind != kRts) ||
        (c->crc && !(h.flags & kCrc)))
        return -EBADMSG;
    const bool inpool = h.flags & kInPool;
    const bool sealed = h.flags & kCrc;
    const CrcWant want{sealed ? hdr_crc(h.ctx, h.tag, h.len) : 0, h.reserved};
    const CrcWant *crc = sealed ? &want : nullptr;
    // an RTS's length is checked against the sender's buffer before a probe reports it (a
    // receiver sizes its buffer from that) or a receive copies by it; the view checked here
    // serves a receive matched now (nothing runs in between that could recycle the buffer)
    RdvView *view = nullptr;
    if (kind == kRts) {
        int rc = inpool ? mem_span(c, src, h.rdv_index, h.rdv_off, h.len, nullptr)
                        : rdv_fits(c, src, h.rdv_index, h.len, &view);
        if (rc) return rc;
    }
    cxk_msg_req *r = take_posted(c, src, h.tag, h.ctx);
    Unexpected u;
    void *dst;
    uint64_t cap;
    if (r) {
        dst = r->rbuf, cap = r->count;
    } else {
        u = Unexpected{src,         h.tag,       h.ctx,     h.len,      h.flags,
                       h.cookie,    !eager,      h.rdv_index, h.rdv_off, h.reserved, {}};
        if (eager) {
            try {
                u.data.resize(h.len);
            } catch (const std::bad_alloc &) {
                return -ENOMEM;
            }
        }
        dst = u.data.data(), cap = eager ? h.len : 0;
    }
    int rc = 0;
    if (eager) {
        uint32_t got = want.seed;
        copy_part(dst, cap, 0, static_cast<const uint8_t *>(pl) + hbytes, n - uint32_t(hbytes),
                  crc ? &got : nullptr);
        cxk_ring_release(p.in);
        rc = eager_rest(c, src, h, pmax, dst, cap, crc ? &got : nullptr);
        if (!rc) rc = crc_verdict(crc, got);
        if (!rc && r && (h.flags & kSync)) {
            p.ctlq.push_back(Ctl{kAck, h.cookie, 0});
            rc = send_ctl(c, src);
        }
    } else {
        cxk_ring_release(p.in);
        if (r && inpool)
            rc = mem_recv(c, src, h.len, h.cookie, h.rdv_index, h.rdv_off, dst, cap, crc);
        else if (r)
            rc = rdv_recv(c, src, h.len, h.cookie, h.rdv_index, dst, cap, crc, view);
    }
    if (rc) {
        if (r) r->status.error = rc, r->status.source = src, r->state = cxk_msg_req::kDone;
        return rc;
    }
    if (r) complete_recv(r, src, h.tag, h.len), ++c->completed;
    else c->unexpected.push_back(std::move(u));
    return 0;
}

// Read the cells the ring from src holds now, up to the first that completes a request of
// ours: its waiter goes on without another look at the ring (the next progress reads on).
int drain(cxk_comm *c, int src) {
    Peer &p = c->peers[size_t(src)];
    if (p.broken) return p.broken;
    for (const uint64_t completed = c->completed; c->completed == completed;) {
        const void *pl;
        uint32_t n, kind;
        // a peer's end shows in its heartbeat and lease (check_peer), and every cell is read
        // as it comes: an idle look invalidates the next stamp's line, nothing else
        int rc = cxk::ring::peek(p.in, &pl, &n, &kind, true);
        if (rc == -EAGAIN) return 0;
        ++c->events;
        if (!rc) {
            if (kind == kRma) {
                rc = rma_request(c, src, pl, n);
                if (!rc) cxk_ring_release(p.in);
            } else if (kind == kDrop) {
                rc = rdv_drop_view(c, src, pl, n);
                if (!rc) cxk_ring_release(p.in);
            } else if (kind == kFin || kind == kAck || kind == kRmaReply) {
                rc = on_control(c, src, kind, pl, n);
                if (!rc) cxk_ring_release(p.in);
            } else if (kind == kEager || kind == kShort || kind == kRts) {
                rc = on_message(c, src, kind, pl, n);
            } else {
                rc = -EBADMSG;
            }
        }
        if (rc == -EBADMSG) {
            p.broken = rc;
            c->failed_rank = src;
        }
        if (rc) return rc;
    }
    return 0;
}

// My ring from src, if src has made one (its directory entry for me is set).
bool find_in(cxk_comm *c, int src) {
    Peer &p = c->peers[size_t(src)];
    if (p.in) return true;
    auto *dir = reinterpret_cast<uint64_t *>(c->base + p.obj_off + kDirOff) + c->rank;
    // my own directory is written by this process only: what it holds is already here
    if (p.nc && src != c->rank) cxk_invalidate(dir, 8);
    if (__atomic_load_n(dir, __ATOMIC_ACQUIRE) == 0) return false;
    std::string name = obj_name(c, src, "ring", c->rank);
    if (cxk_ring_open(c->pool, name.c_str(), CXK_RING_CONSUMER, &p.in)) p.in = nullptr;
    if (p.in && c->nc && !p.nc) cxk::ring::set_coherent(p.in);  // as src's end (ensure_out)
    return p.in != nullptr;
}

int push_ctl(cxk_comm *, Peer &p) {
    while (!p.ctlq.empty()) {
        const Ctl &t = p.ctlq.front();
        CtlMsg m{t.cookie, t.value};
        int rc = cxk_ring_push(p.out, &m, sizeof m, t.kind);
        if (rc) return rc;
        p.ctlq.pop_front();
    }
    return 0;
}

// A chunk into my rendezvous buffer. On coherence "none" it must be in memory before ready
// counts it (the caller's fence), so it always streams: the line-aligned body goes there
// without reading the lines first or flushing them after (bench/nc_floor.c: 1 MiB in 27
// GB/s against 16.5 for a copy then clwb of every line), the partial first and last lines
// (ordinary stores) are flushed. On "host" the reader finds a copy in cache, unless
// CXLKIT_MSG_RDV_NT asks to stream.
void rdv_copy(const cxk_comm *c, bool nc, uint8_t *dst, const uint8_t *src, uint64_t n) {
    if (!c->rdv_nt && !nc) {
        std::memcpy(dst, src, n);
        return;
    }
    cxk_nt_copy(dst, src, n);  // its fence drains the streamed lines
    if (nc && n) {
        cxk_flush(dst, 1), cxk_flush(dst + n - 1, 1);
        cxk_sfence();
    }
}

int start_rdv(cxk_comm *c, Peer &p, cxk_msg_req *r) {
    uint64_t moff;
    if (int mk = mem_find(c, r->sbuf, r->count, &moff); mk >= 0)
        return mem_send_start(c, p, r, mk, moff);
    int k = rdv_pick(c, r->count);  // -EAGAIN: a FIN or a peer's drop will make room
    if (k < 0) return k;
    void *cell;
    if (int rc = cxk_ring_reserve(p.out, &cell)) return rc;
    RdvBuf &b = c->rdv[size_t(k)];
    auto *h = reinterpret_cast<RdvHdr *>(c->base + b.off);
    uint8_t *data = c->base + b.off + sizeof(RdvHdr);
    h->cookie = r->cookie;
    h->ready = 0;
    if (p.nc) cxk_flush(h, kLine);
    MsgHdr m{r->ctx, r->tag, r->count, r->cookie, r->flags, 1, b.off, uint32_t(k), 0};
    if (c->crc) m.flags |= kCrc;  // its checksum goes into the buffer's header, below
    std::memcpy(cell, &m, sizeof m);
    // commit's fence orders the header's write-back before the RTS that sends the receiver here
    if (int rc = cxk_ring_commit(p.out, sizeof m, kRts)) return rc;
    b.busy = true, b.peer = r->peer, b.cookie = r->cookie;
    r->rdv = k;
    const auto *src = static_cast<const uint8_t *>(r->sbuf);
    const uint64_t chunk = c->rdv_chunk;
    uint32_t crc = c->crc ? hdr_crc(m.ctx, m.tag, m.len) : 0;
    for (uint64_t pos = 0; pos < r->count; pos += chunk) {
        uint64_t n = r->count - pos < chunk ? r->count - pos : chunk;
        rdv_copy(c, p.nc, data + pos, src + pos, n);
        if (c->crc) {  // over the chunk just read (in cache), while the receiver copies out
            crc = pool::crc32c(src + pos, n, crc);
            if (pos + n == r->count) h->crc = crc;  // flushed with ready's line below
        }
        // release pairs with the receiver's acquire of ready in rdv_recv
        __atomic_store_n(&h->ready, pos + n, __ATOMIC_RELEASE);
        if (p.nc) cxk_flush(&h->ready, 8), cxk_sfence();
    }
    return 0;
}

// Bytes of an eager message into a ring cell. On coherence "none" the commit writes back
// every line of the cell past the stamp's: streamed there (the line-aligned body never
// enters the cache), that write-back finds nothing dirty to carry.
void cell_copy(const Peer &p, void *dst, const void *src, uint64_t n) {
    if (p.nc) cxk_nt_copy(dst, src, n);
    else std::memcpy(dst, src, n);
}

// A message of at most kShortMax bytes: one cell, one line (kShort).
int start_short(cxk_comm *c, Peer &p, cxk_msg_req *r) {
    void *cell;
    if (int rc = cxk_ring_reserve(p.out, &cell)) return rc;
    MsgHdr m{r->ctx, r->tag, r->count, r->cookie, r->flags, 1, 0, 0, 0};
    seal(c, m, r);
    const ShortHdr s{m.ctx, m.tag, uint32_t(m.len), m.flags, m.cookie, m.reserved, 0};
    std::memcpy(cell, &s, sizeof s);
    if (r->count) std::memcpy(static_cast<uint8_t *>(cell) + sizeof s, r->sbuf, r->count);
    return cxk_ring_commit(p.out, uint32_t(sizeof s + r->count), kShort);
}

int start_eager(cxk_comm *c, Peer &p, cxk_msg_req *r) {
    if (r->count <= kShortMax) return start_short(c, p, r);
    const uint64_t pmax = cxk_ring_payload_max(p.out);
    const uint64_t ncells = cells_for(r->count, pmax);
    if (ncells > 1) {
        uint32_t space;
        if (int rc = cxk_ring_space(p.out, &space)) return rc;
        if (space < ncells) return -EAGAIN;
    }
    const auto *src = static_cast<const uint8_t *>(r->sbuf);
    void *cell;
    if (int rc = cxk_ring_reserve(p.out, &cell)) return rc;
    MsgHdr m{r->ctx, r->tag, r->count, r->cookie, r->flags, uint32_t(ncells), 0, 0, 0};
    seal(c, m, r);
    std::memcpy(cell, &m, sizeof m);
    uint64_t first = r->count < first_cap(pmax) ? r->count : first_cap(pmax);
    if (first) cell_copy(p, static_cast<uint8_t *>(cell) + sizeof m, src, first);
    if (int rc = cxk_ring_commit(p.out, uint32_t(sizeof m + first), kEager)) return rc;
    for (uint64_t pos = first; pos < r->count; pos += pmax) {
        uint64_t n = r->count - pos < pmax ? r->count - pos : pmax;
        if (int rc = cxk_ring_reserve(p.out, &cell)) return rc == -EAGAIN ? -EBADMSG : rc;
        cell_copy(p, cell, src + pos, n);
        if (int rc = cxk_ring_commit(p.out, uint32_t(n), kCont)) return rc;
    }
    return 0;
}

// Start the queued sends to peer in order; stop at the first that has to wait.
int start_sends(cxk_comm *c, int dest) {
    Peer &p = c->peers[size_t(dest)];
    if (p.ctlq.empty() && p.sendq.empty()) return 0;
    if (int rc = ensure_out(c, dest)) return rc;
    int rc = push_ctl(c, p);
    if (rc == -EAGAIN) return 0;
    if (rc) return rc;
    while (!p.sendq.empty()) {
        cxk_msg_req *r = p.sendq.front();
        rc = r->count > c->eager ? start_rdv(c, p, r) : start_eager(c, p, r);
        if (rc == -EAGAIN) return 0;
        p.sendq.pop_front();
        if (rc) {
            r->status.error = rc;
            r->state = cxk_msg_req::kDone;
            return rc;
        }
        // a synchronous send completes at its ACK or FIN (matched), a send from pool memory
        // at its FIN (the receiver reads the caller's bytes until then); any other once its
        // bytes are in a ring or in my rendezvous buffer (start_rdv copied them all), which
        // stays busy until the receiver's FIN (rdv_fin)
        if ((r->flags & kSync) || r->mem >= 0) {
            r->state = cxk_msg_req::kActive;
            c->waiting.push_back(r);
        } else {
            r->rdv = -1;
            r->state = cxk_msg_req::kDone;
        }
    }
    return 0;
}

}  // namespace

uint32_t hdr_crc(uint32_t ctx, int32_t tag, uint64_t len) {
    struct {
        uint32_t ctx;
        int32_t tag;
        uint64_t len;
    } k{ctx, tag, len};
    return pool::crc32c(&k, sizeof k);
}

uint32_t crc_more(bool nc, uint32_t crc, const void *p, uint64_t n) {
    if (nc) cxk_invalidate(p, n);
    return pool::crc32c(p, n, crc);
}

void copy_part(void *dst, uint64_t cap, uint64_t pos, const void *src, uint64_t n,
               uint32_t *crc) {
    const uint64_t m = pos >= cap ? 0 : (n < cap - pos ? n : cap - pos);
    if (m) std::memcpy(static_cast<uint8_t *>(dst) + pos, src, m);
    if (!crc) return;
    // the delivered copy, not the ring: a byte rewritten after the copy is not the one checked
    if (m) *crc = pool::crc32c(static_cast<uint8_t *>(dst) + pos, m, *crc);
    if (n > m) *crc = pool::crc32c(static_cast<const uint8_t *>(src) + m, n - m, *crc);
}

void seal(const cxk_comm *c, MsgHdr &m, const cxk_msg_req *r) {
    if (!c->crc) return;
    m.flags |= kCrc;
    m.reserved = pool::crc32c(r->sbuf, r->count, hdr_crc(m.ctx, m.tag, m.len));
}

int ensure_out(cxk_comm *c, int peer) {
    Peer &p = c->peers[size_t(peer)];
    if (p.out) return 0;
    std::string name = obj_name(c, c->rank, "ring", peer);
    int rc = cxk_ring_create(c->pool, name.c_str(), c->opts.cell_bytes, c->opts.ncells,
                             CXK_RING_PRODUCER, &p.out);
    if (rc) return rc;
    if (c->nc && !p.nc) cxk::ring::set_coherent(p.out);  // peer's end does so too (find_in)
    auto *dir = reinterpret_cast<uint64_t *>(c->base + c->obj_off + kDirOff) + peer;
    // the ring is published (flushed, fenced) before its directory entry names it
    __atomic_store_n(dir, cxk_ring_offset(p.out), __ATOMIC_RELEASE);
    if (p.nc) cxk_flush(dir, 8), cxk_sfence();
    return 0;
}

void free_req(cxk_msg_req *r) { delete r; }

// Send queued controls to dest now if its ring has room (else the next progress does).
int send_ctl(cxk_comm *c, int dest) {
    if (int rc = ensure_out(c, dest)) return rc;
    int rc = push_ctl(c, c->peers[size_t(dest)]);
    return rc == -EAGAIN ? 0 : rc;
}

void close_rings(cxk_comm *c) {
    for (int r = 0; r < c->nranks; ++r) {
        Peer &p = c->peers[size_t(r)];
        if (p.in) cxk_ring_close(p.in), p.in = nullptr;
        if (p.out) {
            cxk_ring_close(p.out);
            p.out = nullptr;
            std::string name = obj_name(c, c->rank, "ring", r);
            cxk_obj_destroy(c->pool, name.c_str());
        }
    }
}

int progress(cxk_comm *c) {
    ++c->polls;
    int err = 0;
    for (int r = 0; r < c->nranks; ++r) {
        Peer &p = c->peers[size_t(r)];
        if (!p.in) continue;
        int rc = drain(c, r);
        if (rc && !err) err = rc;
    }
    // look for one new incoming ring per call (a directory line of one peer); on coherence
    // "none" that line is invalidated first, so only every kScanEvery-th call looks, but my
    // own directory (written here) costs nothing and is looked at on every call
    if (!c->peers[size_t(c->rank)].in && find_in(c, c->rank)) {
        int rc = drain(c, c->rank);
        if (rc && !err) err = rc;
    }
    const bool scan = !c->nc || c->polls % kScanEvery == 0;
    for (int i = 0; scan && i < c->nranks; ++i) {
        int r = int(c->scan_next++ % uint32_t(c->nranks));
        if (c->peers[size_t(r)].in) continue;
        if (find_in(c, r)) {
            int rc = drain(c, r);
            if (rc && !err) err = rc;
        }
        break;
    }
    for (int r = 0; r < c->nranks; ++r) {
        int rc = start_sends(c, r);
        if (rc && !err) err = rc;
    }
    return err;
}

int isend_ctx(cxk_comm *c, const void *buf, uint64_t count, int dest, int tag, uint32_t ctx,
              unsigned flags, cxk_msg_req **out) {
    auto *r = new (std::nothrow) cxk_msg_req;
    if (!r) return -ENOMEM;
    r->kind = cxk_msg_req::kSend;
    r->sbuf = buf, r->count = count, r->peer = dest, r->tag = tag, r->ctx = ctx;
    r->flags = flags & CXK_MSG_SYNC ? kSync : 0;
    r->cookie = c->next_cookie++;
    r->status.source = dest, r->status.tag = tag, r->status.count = count;
    c->peers[size_t(dest)].sendq.push_back(r);
    int rc = start_sends(c, dest);
    if (rc && r->state != cxk_msg_req::kDone) return rc;  // queued: the error is the ring's
    *out = r;
    return 0;
}

int irecv_ctx(cxk_comm *c, void *buf, uint64_t count, int source, int tag, uint32_t ctx,
              cxk_msg_req **out) {
    auto *r = new (std::nothrow) cxk_msg_req;
    if (!r) return -ENOMEM;
    r->kind = cxk_msg_req::kRecv;
    r->rbuf = buf, r->count = count, r->peer = source, r->tag = tag, r->ctx = ctx;
    r->state = cxk_msg_req::kActive;
    *out = r;
    for (auto it = c->unexpected.begin(); it != c->unexpected.end(); ++it) {
        if (!matches(r, it->src, it->tag, it->ctx)) continue;
        Unexpected u = std::move(*it);
        c->unexpected.erase(it);
        int rc = 0;
        const bool sealed = u.flags & kCrc;
        const CrcWant want{sealed ? hdr_crc(u.ctx, u.tag, u.len) : 0, u.crc};
        const CrcWant *crc = sealed ? &want : nullptr;  // eager: checked at arrival
        if (u.rts && (u.flags & kInPool)) {
            rc = mem_recv(c, u.src, u.len, u.cookie, u.rdv_index, u.rdv_off, buf, count, crc);
        } else if (u.rts) {
            rc = rdv_recv(c, u.src, u.len, u.cookie, u.rdv_index, buf, count, crc);
        } else {
            copy_part(buf, count, 0, u.data.data(), u.len);
            if (u.flags & kSync) {
                c->peers[size_t(u.src)].ctlq.push_back(Ctl{kAck, u.cookie, 0});
                rc = send_ctl(c, u.src);
            }
        }
        complete_recv(r, u.src, u.tag, u.len);
        if (rc) r->status.error = rc;
        if (rc == -EBADMSG) {  // as drain does: the sender wrote garbage, name it
            c->peers[size_t(u.src)].broken = rc;
            c->failed_rank = u.src;
        }
        return 0;
    }
    c->posted.push_back(r);
    return 0;
}

}  // namespace cxk::msg

using namespace cxk::msg;

namespace {

bool bad_rank(const cxk_comm *c, int r, bool any_ok) {
    return !(r >= 0 && r < c->nranks) && !(any_ok && r == CXK_ANY_SOURCE);
}

int finish(cxk_msg_req *r, cxk_msg_status *st) {
    int err = r->status.error;
    if (st) *st = r->status;
    free_req(r);
    return err;
}

// context 0 is the default one; 1..CXK_MSG_CTX_FIRST-1 belong to collectives and windows
bool bad_ctx(uint32_t ctx) { return ctx != 0 && ctx < CXK_MSG_CTX_FIRST; }

int need_of(const cxk_msg_req *r) { return r->peer; }  // ANY_SOURCE (-1): every rank

// One look of a wait on peer `need`'s ring (need >= 0). On a pool that is not coherent every
// look at a ring of another domain evicts its next stamp's line and reads it from memory, so
// the rings of the other peers (what they may need of this rank: FINs, credit, their
// messages) are looked at on every kOthersEvery-th call only; need's ring and the sends to
// need on every call.
constexpr uint64_t kOthersEvery = 8;
int progress_on(cxk_comm *c, int need) {
    if (need < 0 || !c->nc || ++c->focus_polls % kOthersEvery == 0) return progress(c);
    Peer &p = c->peers[size_t(need)];
    int rc = p.in || find_in(c, need) ? drain(c, need) : 0;
    const int sent = start_sends(c, need);
    return rc ? rc : sent;
}

// Progress until r is done, by the comm's wait policy; -ETIMEDOUT (r still pending) when the
// wait's bound or a peer it needs is gone, or progress's error.
int wait_done(cxk_comm *c, cxk_msg_req *r) {
    Waiter w(c, need_of(r));
    for (;;) {
        int rc = w.check(true);
        if (rc) {
            progress(c);  // what a peer wrote before it went is still delivered
            return r->state == cxk_msg_req::kDone ? 0 : rc;
        }
        rc = progress_on(c, need_of(r));
        if (r->state == cxk_msg_req::kDone) return 0;
        if (rc) return rc;
    }
}

}  // namespace

extern "C" {

int cxk_msg_isend(cxk_comm *c, const void *buf, int64_t count, int dest, int tag,
                  unsigned flags, cxk_msg_req **req) {
    return cxk_msg_isend_ctx(c, buf, count, dest, tag, 0, flags, req);
}

int cxk_msg_isend_ctx(cxk_comm *c, const void *buf, int64_t count, int dest, int tag,
                      uint32_t ctx, unsigned flags, cxk_msg_req **req) {
    if (!c || !req || count < 0 || (!buf && count) || bad_rank(c, dest, false) || tag < 0 ||
        (flags & ~CXK_MSG_SYNC) || bad_ctx(ctx))
        return -EINVAL;
    return isend_ctx(c, buf, uint64_t(count), dest, tag, ctx, flags, req);
}

int cxk_msg_irecv(cxk_comm *c, void *buf, int64_t count, int source, int tag,
                  cxk_msg_req **req) {
    return cxk_msg_irecv_ctx(c, buf, count, source, tag, 0, req);
}

int cxk_msg_irecv_ctx(cxk_comm *c, void *buf, int64_t count, int source, int tag, uint32_t ctx,
                      cxk_msg_req **req) {
    if (!c || !req || count < 0 || (!buf && count) || bad_rank(c, source, true) ||
        (tag < 0 && tag != CXK_ANY_TAG) || bad_ctx(ctx))
        return -EINVAL;
    return irecv_ctx(c, buf, uint64_t(count), source, tag, ctx, req);
}

int cxk_msg_test(cxk_comm *c, cxk_msg_req *r, int *done, cxk_msg_status *st) {
    if (!c || !r || !done) return -EINVAL;
    *done = 0;
    if (r->state != cxk_msg_req::kDone) {
        int rc = progress(c);
        if (r->state != cxk_msg_req::kDone) return rc;
    }
    *done = 1;
    return finish(r, st);
}

int cxk_msg_wait(cxk_comm *c, cxk_msg_req *r, cxk_msg_status *st) {
    if (!c || !r) return -EINVAL;
    if (r->state != cxk_msg_req::kDone) {
        // one look before the wait begins: an answer already there costs no clock reading
        // (the wait's start, its policy's) and teaches the adaptive spin nothing
        int rc = progress(c);
        if (r->state != cxk_msg_req::kDone && (rc || (rc = wait_done(c, r)))) return rc;
    }
    return finish(r, st);
}

int cxk_msg_waitall(cxk_comm *c, size_t n, cxk_msg_req **reqs, cxk_msg_status *sts) {
    if (!c || (!reqs && n)) return -EINVAL;
    int first = 0;
    for (size_t i = 0; i < n; ++i) {
        if (!reqs[i]) continue;
        int rc = cxk_msg_wait(c, reqs[i], sts ? &sts[i] : nullptr);
        if (rc == -ETIMEDOUT) return rc;  // reqs[i] still pending: the caller may wait again
        reqs[i] = nullptr;
        if (rc && !first) first = rc;
    }
    return first;
}

int cxk_msg_waitany(cxk_comm *c, size_t n, cxk_msg_req **reqs, size_t *index,
                    cxk_msg_status *st) {
    if (!c || !index || (!reqs && n)) return -EINVAL;
    bool any = false;
    for (size_t i = 0; i < n; ++i) any |= reqs[i] != nullptr;
    if (!any) return -EINVAL;
    Waiter w(c, -1);
    for (;;) {
        for (size_t i = 0; i < n; ++i)
            if (reqs[i] && reqs[i]->state == cxk_msg_req::kDone) {
                *index = i;
                cxk_msg_req *r = reqs[i];
                reqs[i] = nullptr;
                return finish(r, st);
            }
        int rc = progress(c);
        if (rc || (rc = w.check(true))) return rc;
    }
}

int cxk_msg_cancel(cxk_comm *c, cxk_msg_req *r) {
    if (!c || !r) return -EINVAL;
    for (auto it = c->posted.begin(); it != c->posted.end(); ++it)
        if (*it == r) {
            c->posted.erase(it);
            free_req(r);
            return 0;
        }
    return -EBUSY;
}

int cxk_msg_send(cxk_comm *c, const void *buf, int64_t count, int dest, int tag, unsigned flags) {
    cxk_msg_req *r;
    if (int rc = cxk_msg_isend(c, buf, count, dest, tag, flags, &r)) return rc;
    return cxk_msg_wait(c, r, nullptr);
}

int cxk_msg_recv(cxk_comm *c, void *buf, int64_t count, int source, int tag, cxk_msg_status *st) {
    cxk_msg_req *r;
    if (int rc = cxk_msg_irecv(c, buf, count, source, tag, &r)) return rc;
    int rc = cxk_msg_wait(c, r, st);
    // a receive is matched and completed in the same step, so a timed-out one is still posted
    if (rc == -ETIMEDOUT) cxk_msg_cancel(c, r);
    return rc;
}

int cxk_msg_sendrecv(cxk_comm *c, const void *sbuf, int64_t scount, int dest, int stag,
                     void *rbuf, int64_t rcount, int source, int rtag, cxk_msg_status *st) {
    cxk_msg_req *rr, *sr;
    if (int rc = cxk_msg_irecv(c, rbuf, rcount, source, rtag, &rr)) return rc;
    if (int rc = cxk_msg_isend(c, sbuf, scount, dest, stag, 0, &sr)) {
        cxk_msg_cancel(c, rr);
        return rc;
    }
    int rs = cxk_msg_wait(c, sr, nullptr);
    int rv = cxk_msg_wait(c, rr, st);
    return rs ? rs : rv;
}

int cxk_msg_iprobe(cxk_comm *c, int source, int tag, int *flag, cxk_msg_status *st) {
    return cxk_msg_iprobe_ctx(c, source, tag, 0, flag, st);
}

int cxk_msg_iprobe_ctx(cxk_comm *c, int source, int tag, uint32_t ctx, int *flag,
                       cxk_msg_status *st) {
    if (!c || !flag || bad_rank(c, source, true) || (tag < 0 && tag != CXK_ANY_TAG) ||
        bad_ctx(ctx))
        return -EINVAL;
    *flag = 0;
    int rc = progress(c);
    cxk_msg_req probe;
    probe.peer = source, probe.tag = tag, probe.ctx = ctx;
    for (const auto &u : c->unexpected)
        if (matches(&probe, u.src, u.tag, u.ctx)) {
            *flag = 1;
            if (st) *st = cxk_msg_status{u.src, u.tag, u.len, 0, 0};
            return 0;
        }
    return rc;
}

int cxk_msg_probe(cxk_comm *c, int source, int tag, cxk_msg_status *st) {
    return cxk_msg_probe_ctx(c, source, tag, 0, st);
}

int cxk_msg_probe_ctx(cxk_comm *c, int source, int tag, uint32_t ctx, cxk_msg_status *st) {
    if (!c) return -EINVAL;
    Waiter w(c, source);
    for (;;) {
        int flag;
        int rc = cxk_msg_iprobe_ctx(c, source, tag, ctx, &flag, st);
        if (flag) return 0;
        if (rc || (rc = w.check(true))) return rc;
    }
}

int cxk_msg_progress(cxk_comm *c) { return c ? progress(c) : -EINVAL; }

}  // extern "C"
