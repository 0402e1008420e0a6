// ring.cpp — single-producer/single-consumer rings in a pool object: formatting and
// attaching (geometry checked once), the producer's reserve/commit and the consumer's
// peek/release, with flushes and invalidates when the pool is not coherent.
#include "ring/ring.h"

#include "prim/mutate.h"
#include "ring/peek.h"
#include "ring/wake.h"

#include <cerrno>
#include <cstring>
#include <new>

namespace cxk::ring {
namespace {

bool good_geometry(uint32_t cell_bytes, uint32_t ncells) {
    return cell_bytes >= kLine && cell_bytes <= kMaxCellBytes && cell_bytes % kLine == 0 &&
           ncells >= 2 && ncells <= kMaxCells && (ncells & (ncells - 1)) == 0;
}

HeadLine *head_line(const cxk_ring *r) { return reinterpret_cast<HeadLine *>(r->base + kLine); }
ProdLine *prod_line(const cxk_ring *r) {
    return reinterpret_cast<ProdLine *>(r->base + 2 * kLine);
}
uint8_t *cell(const cxk_ring *r, uint64_t index) {
    return r->base + CXK_RING_HDR_BYTES + uint64_t(index & r->mask) * r->cell_bytes;
}
CellHdr *cell_hdr(const cxk_ring *r, uint64_t index) {
    return reinterpret_cast<CellHdr *>(cell(r, index));
}

int pool_geometry(cxk_pool *p, uint64_t *size, bool *nc) {
    struct cxk_pool_stat st;
    int rc = cxk_pool_stat(p, &st);
    if (rc) return rc;
    *size = st.size;
    *nc = st.coherence != CXK_COHERENCE_HOST;  // "none" or "sim"
    return 0;
}

// Producer: refresh the consumer's head (invalidate first on a non-coherent pool) and check
// it: a head behind the last one seen or ahead of what we wrote is no correct consumer's.
int refresh_head(cxk_ring *r) {
    HeadLine *h = head_line(r);
    if (r->nc) cxk_invalidate(h, sizeof *h);
    // acquire pairs with the consumer's release store of head: the cells it counts are read
    uint64_t head = __atomic_load_n(&h->head, __ATOMIC_ACQUIRE);
    if (head < r->head_seen || head > r->pos) return -EBADMSG;
    r->head_seen = head;
    return 0;
}

void publish_head(cxk_ring *r) {
    HeadLine *h = head_line(r);
    // release pairs with the producer's acquire in refresh_head: our reads of the cells
    // happened before it may reuse them
    __atomic_store_n(&h->head, r->pos, __ATOMIC_RELEASE);
    if (r->nc) {
        if (!cxk::mutated(cxk::Mut::ring_head_flush)) cxk_flush(h, sizeof *h);
        cxk_sfence();
    }
    r->head_pub = r->pos;
}

}  // namespace
}  // namespace cxk::ring

using namespace cxk::ring;

extern "C" {

uint64_t cxk_ring_bytes(uint32_t cell_bytes, uint32_t ncells) {
    if (!good_geometry(cell_bytes, ncells)) return 0;
    return CXK_RING_HDR_BYTES + uint64_t(cell_bytes) * ncells;
}

int cxk_ring_format(cxk_pool *p, uint64_t off, uint64_t nbytes, uint32_t cell_bytes,
                    uint32_t ncells) {
    if (!p) return -EINVAL;
    uint64_t need = cxk_ring_bytes(cell_bytes, ncells), size;
    bool nc;
    if (need == 0 || nbytes < need || off % kLine) return -EINVAL;
    if (int rc = pool_geometry(p, &size, &nc)) return rc;
    if (off > size || need > size - off) return -ERANGE;
    uint8_t *b = static_cast<uint8_t *>(cxk_pool_base(p)) + off;
    // stamps must start at 0 (no cell written): clear the headers and every cell's first line
    std::memset(b, 0, CXK_RING_HDR_BYTES);
    for (uint32_t i = 0; i < ncells; ++i) std::memset(b + CXK_RING_HDR_BYTES + uint64_t(i) * cell_bytes, 0, kLine);
    Header *h = reinterpret_cast<Header *>(b);
    h->magic = kMagic;
    h->version = kVersion;
    h->cell_bytes = cell_bytes;
    h->ncells = ncells;
    h->cells_off = CXK_RING_HDR_BYTES;
    cxk_flush(b, need);
    cxk_sfence();
    return 0;
}

int cxk_ring_attach(cxk_pool *p, uint64_t off, uint64_t nbytes, int role, cxk_ring **out) {
    if (!p || !out || (role != CXK_RING_PRODUCER && role != CXK_RING_CONSUMER)) return -EINVAL;
    uint64_t size;
    bool nc;
    if (int rc = pool_geometry(p, &size, &nc)) return rc;
    if (off % kLine || off > size || nbytes > size - off || nbytes < CXK_RING_HDR_BYTES)
        return -ERANGE;
    uint8_t *b = static_cast<uint8_t *>(cxk_pool_base(p)) + off;
    if (nc) cxk_invalidate(b, kLine);
    Header h;
    std::memcpy(&h, b, sizeof h);  // read once: the geometry we check is the one we use
    if (h.magic != kMagic || h.version != kVersion || h.cells_off != CXK_RING_HDR_BYTES ||
        !good_geometry(h.cell_bytes, h.ncells) ||
        cxk_ring_bytes(h.cell_bytes, h.ncells) > nbytes)
        return -EBADMSG;
    cxk_ring *r = new (std::nothrow) cxk_ring;
    if (!r) return -ENOMEM;
    r->waiter = {nullptr, nullptr, r, [](const void *o, struct cxk_ring_wake_stats *sum) {
                     cxk::ring::wake_stats_add(static_cast<const cxk_ring *>(o), sum);
                 }};
    r->pool = p;
    r->base = b;
    r->off = off;
    r->nc = nc;
    r->role = role;
    r->cell_bytes = h.cell_bytes;
    r->ncells = h.ncells;
    r->mask = h.ncells - 1;
    r->batch = h.ncells >= 16 ? h.ncells / 8 : 1;
    wake_attach(r, !nc);
    // Both sides start from the published head: a consumer that re-attaches resumes there,
    // a producer writes after the last cell consumed (a ring is re-attached only when the
    // other side has not written past it; messaging creates a fresh ring per job).
    HeadLine *hl = head_line(r);
    if (nc) cxk_invalidate(hl, sizeof *hl);
    uint64_t head = __atomic_load_n(&hl->head, __ATOMIC_ACQUIRE);
    r->pos = head;
    r->head_seen = head;
    r->head_pub = head;
    if (role == CXK_RING_PRODUCER) {
        // find the end of what was written: cells at and after head carry stamps head+1...
        for (uint32_t i = 0; i < r->ncells; ++i) {
            CellHdr *c = cell_hdr(r, r->pos);
            if (nc) cxk_invalidate(c, kLine);
            if (__atomic_load_n(&c->stamp, __ATOMIC_ACQUIRE) != r->pos + 1) break;
            ++r->pos;
        }
    }
    r->stamped = r->pos;
    *out = r;
    return 0;
}

int cxk_ring_create(cxk_pool *p, const char *name, uint32_t cell_bytes, uint32_t ncells,
                    int role, cxk_ring **out) {
    if (!p || !name || !out) return -EINVAL;
    uint64_t need = cxk_ring_bytes(cell_bytes, ncells), off;
    if (need == 0 || (role != CXK_RING_PRODUCER && role != CXK_RING_CONSUMER)) return -EINVAL;
    if (int rc = cxk_obj_create_ex(p, name, need, CXK_OBJ_NOZERO, &off)) return rc;
    int rc = cxk_ring_format(p, off, need, cell_bytes, ncells);
    if (!rc) rc = cxk_obj_publish(p, off, 0);
    if (!rc) rc = cxk_ring_attach(p, off, need, role, out);
    if (rc) {
        cxk_obj_destroy(p, name);
        cxk_obj_close(p, off);
        return rc;
    }
    (*out)->obj_off = off;
    return 0;
}

int cxk_ring_open(cxk_pool *p, const char *name, int role, cxk_ring **out) {
    if (!p || !name || !out) return -EINVAL;
    struct cxk_obj_stat st;
    if (int rc = cxk_obj_open(p, name, &st)) return rc;
    int rc = cxk_ring_attach(p, st.off, st.nbytes, role, out);
    if (rc) {
        cxk_obj_close(p, st.off);
        return rc;
    }
    (*out)->obj_off = st.off;
    return 0;
}

void cxk_ring_close(cxk_ring *r) {
    if (!r) return;
    if (r->role == CXK_RING_PRODUCER) {
        cxk_ring_publish(r);
        ProdLine *pl = prod_line(r);
        __atomic_store_n(&pl->closed, uint64_t(1), __ATOMIC_RELEASE);
        if (r->nc) {
            cxk_flush(pl, sizeof *pl);
            cxk_sfence();
        }
        wake_notify(r);  // a sleeping consumer sees -EPIPE now, not on its timeout
    } else if (r->pos != r->head_pub) {
        publish_head(r);
    }
    if (r->obj_off) cxk_obj_close(r->pool, r->obj_off);
    delete r;
}

uint32_t cxk_ring_payload_max(const cxk_ring *r) { return r ? r->cell_bytes - kCellHdr : 0; }
uint32_t cxk_ring_ncells(const cxk_ring *r) { return r ? r->ncells : 0; }
uint64_t cxk_ring_offset(const cxk_ring *r) { return r ? r->off : 0; }

int cxk_ring_reserve(cxk_ring *r, void **payload) {
    if (!r || !payload) return -EINVAL;
    if (r->role != CXK_RING_PRODUCER || r->reserved) return -EPROTO;
    if (r->pos - r->head_seen >= r->ncells) {
        if (int rc = refresh_head(r)) return rc;
        if (r->pos - r->head_seen >= r->ncells) return -EAGAIN;
    }
    *payload = cell(r, r->pos) + kCellHdr;
    r->reserved = true;
    return 0;
}

int cxk_ring_commit(cxk_ring *r, uint32_t nbytes, uint32_t kind) {
    return cxk_ring_commit_ex(r, nbytes, kind, 0);
}

int cxk_ring_commit_ex(cxk_ring *r, uint32_t nbytes, uint32_t kind, unsigned flags) {
    if (!r || (flags & ~CXK_RING_DEFER)) return -EINVAL;
    if (r->role != CXK_RING_PRODUCER || !r->reserved) return -EPROTO;
    if (nbytes > r->cell_bytes - kCellHdr) return -EMSGSIZE;
    if (!(flags & CXK_RING_DEFER) && r->stamped != r->pos) {
        if (int rc = cxk_ring_publish(r)) return rc;  // cells stay in order
    }
    uint8_t *c = cell(r, r->pos);
    CellHdr *h = reinterpret_cast<CellHdr *>(c);
    if (r->nc && kCellHdr + nbytes > kLine) cxk_flush(c + kLine, kCellHdr + nbytes - kLine);
    h->nbytes = nbytes;
    h->kind = kind;
    ++r->pos;
    r->reserved = false;
    if (flags & CXK_RING_DEFER) return 0;
    // what was flushed before the stamp reaches memory before it: the payload past the
    // stamp's line, and a caller's own lines (a rendezvous header, the bytes an RTS names),
    // whose write-backs would otherwise race the stamp's (flushes are unordered until a fence)
    if (r->nc) cxk_sfence();
    // release pairs with the consumer's acquire of the stamp: payload, length, kind first
    __atomic_store_n(&h->stamp, r->pos, __ATOMIC_RELEASE);
    if (r->nc) {
        cxk_flush(c, kLine);
        cxk_sfence();
    }
    r->stamped = r->pos;
    wake_notify(r);
    return 0;
}

int cxk_ring_publish(cxk_ring *r) {
    if (!r) return -EINVAL;
    if (r->role != CXK_RING_PRODUCER) return -EPROTO;
    if (r->stamped == r->pos) return 0;
    if (r->nc) cxk_sfence();  // every deferred payload line written back before any stamp
    for (uint64_t i = r->stamped; i < r->pos; ++i) {
        CellHdr *h = cell_hdr(r, i);
        // release pairs with the consumer's acquire of the stamp
        __atomic_store_n(&h->stamp, i + 1, __ATOMIC_RELEASE);
        if (r->nc) cxk_flush(h, kLine);
    }
    if (r->nc) cxk_sfence();
    r->stamped = r->pos;
    wake_notify(r);  // one wake-up check per batch: 128 cells, one fence, at most one syscall
    return 0;
}

int cxk_ring_push(cxk_ring *r, const void *data, uint32_t nbytes, uint32_t kind) {
    if (!r || (!data && nbytes)) return -EINVAL;
    if (r->role != CXK_RING_PRODUCER) return -EPROTO;
    if (nbytes > r->cell_bytes - kCellHdr) return -EMSGSIZE;
    void *dst;
    if (int rc = cxk_ring_reserve(r, &dst)) return rc;
    if (nbytes) std::memcpy(dst, data, nbytes);
    return cxk_ring_commit(r, nbytes, kind);
}

int cxk_ring_peek(cxk_ring *r, const void **payload, uint32_t *nbytes, uint32_t *kind) {
    return cxk::ring::peek(r, payload, nbytes, kind, false);
}

int cxk_ring_release(cxk_ring *r) {
    if (!r) return -EINVAL;
    if (r->role != CXK_RING_CONSUMER || !r->peeked) return -EPROTO;
    r->peeked = false;
    ++r->pos;
    if (r->pos - r->head_pub >= r->batch) publish_head(r);
    return 0;
}

int cxk_ring_pop(cxk_ring *r, void *dst, uint32_t cap, uint32_t *nbytes, uint32_t *kind) {
    if (!r || (!dst && cap)) return -EINVAL;
    const void *src;
    uint32_t len;
    if (int rc = cxk_ring_peek(r, &src, &len, kind)) return rc;
    if (nbytes) *nbytes = len;
    if (len > cap) {
        r->peeked = false;
        return -EMSGSIZE;
    }
    if (len) std::memcpy(dst, src, len);
    return cxk_ring_release(r);
}

int cxk_ring_space(cxk_ring *r, uint32_t *ncells) {
    if (!r || !ncells) return -EINVAL;
    if (r->role != CXK_RING_PRODUCER) return -EPROTO;
    if (int rc = refresh_head(r)) return rc;
    *ncells = uint32_t(r->ncells - (r->pos - r->head_seen));
    return 0;
}

int cxk_ring_wait(cxk_ring *r, const cxk_wait_opts *o, uint32_t timeout_ms) {
    if (!r || (o && cxk_wait_opts_check(o))) return -EINVAL;
    const int64_t limit = timeout_ms ? int64_t(timeout_ms) * 1000000 : INT64_MAX;
    cxk_wait w;
    cxk_wait_begin(&w, o);
    for (;;) {
        int rc;
        if (r->role == CXK_RING_CONSUMER) {
            const void *pl;
            const bool held = r->peeked;
            rc = cxk_ring_peek(r, &pl, nullptr, nullptr);
            if (rc == 0) r->peeked = held;  // looked only: the caller peeks it again
        } else {
            rc = r->reserved || r->pos - r->head_seen < r->ncells ? 0 : refresh_head(r);
            if (rc == 0 && r->pos - r->head_seen >= r->ncells && !r->reserved) rc = -EAGAIN;
        }
        if (rc != -EAGAIN) return rc;
        // a consumer's sleeps end at the producer's publish (same-host wake-up, wake.cpp)
        if (cxk_wait_idle_rings(&w, &r, 1) > limit) return -ETIMEDOUT;
    }
}

int cxk_ring_sync(cxk_ring *r) {
    if (!r) return -EINVAL;
    if (r->role != CXK_RING_CONSUMER) return -EPROTO;
    if (r->pos != r->head_pub) publish_head(r);
    return 0;
}

}  // extern "C"

namespace cxk::ring {

int peek(cxk_ring *r, const void **payload, uint32_t *nbytes, uint32_t *kind, bool drain) {
    if (!r || !payload) return -EINVAL;
    if (r->role != CXK_RING_CONSUMER) return -EPROTO;
    uint8_t *c = cell(r, r->pos);
    CellHdr *h = reinterpret_cast<CellHdr *>(c);
    if (r->nc) cxk_invalidate(c, kLine);
    // acquire pairs with the producer's release of the stamp in cxk_ring_commit
    uint64_t stamp = __atomic_load_n(&h->stamp, __ATOMIC_ACQUIRE);
    if (stamp != r->pos + 1) {
        // not written yet: the cell still holds the stamp of one lap ago (or 0 on lap one)
        uint64_t old = r->pos + 1 > r->ncells ? r->pos + 1 - r->ncells : 0;
        if (stamp != old) return -EBADMSG;
        if (drain) return -EAGAIN;
        if (r->head_pub != r->pos) publish_head(r);  // idle: give the producer its credit
        ProdLine *pl = prod_line(r);
        if (r->nc) cxk_invalidate(pl, sizeof *pl);
        if (__atomic_load_n(&pl->closed, __ATOMIC_ACQUIRE)) {
            // closed is stored after the last stamp: look once more before reporting EOF
            if (r->nc) cxk_invalidate(c, kLine);
            if (__atomic_load_n(&h->stamp, __ATOMIC_ACQUIRE) != r->pos + 1) return -EPIPE;
        } else {
            return -EAGAIN;
        }
    }
    uint32_t len = h->nbytes;
    if (len > r->cell_bytes - kCellHdr) return -EBADMSG;
    if (r->nc && kCellHdr + len > kLine) cxk_invalidate(c + kLine, kCellHdr + len - kLine);
    *payload = c + kCellHdr;
    if (nbytes) *nbytes = len;
    if (kind) *kind = h->kind;
    r->peeked = true;
    return 0;
}

void set_coherent(cxk_ring *r) {
    if (r) r->nc = false;
}

}  // namespace cxk::ring
