// kv.cpp — the KV copy engine: batched scatter/gather of block images between the pool and an
// engine's paged tensors following a plan of contiguous runs, with the flush / non-temporal /
// invalidate variants the pool's publish and read protocol needs, and the block checksum.
#include "kv/kv.h"

#include <immintrin.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <utility>
#include <vector>

#include "cxlkit.h"

namespace cxk::kv {

static_assert(sizeof(cxk_kv_block_hdr) == CXK_KV_HDR_BYTES, "block header is 128 bytes");

namespace {

inline void fold_word(Checksum &c, uint64_t w) noexcept {
    unsigned l = unsigned(c.words & 3);
    c.a[l] += w;
    c.b[l] += c.a[l];
    ++c.words;
}

inline uint64_t mix(uint64_t z) noexcept {  // splitmix64's finalizer
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

}  // namespace

void Checksum::update(const void *p, size_t n) noexcept {
    auto *s = static_cast<const uint8_t *>(p);
    nbytes += n;
    while (ncarry && n) {  // finish a word a previous run left open
        carry[ncarry++] = *s++;
        --n;
        if (ncarry == 8) {
            uint64_t w;
            std::memcpy(&w, carry, 8);
            fold_word(*this, w);
            ncarry = 0;
        }
    }
    while (n >= 8 && (words & 3)) {  // realign to lane 0 for the wide loop
        uint64_t w;
        std::memcpy(&w, s, 8);
        fold_word(*this, w);
        s += 8;
        n -= 8;
    }
    // four independent lanes: the compiler vectorizes this loop
    uint64_t la[4] = {a[0], a[1], a[2], a[3]}, lb[4] = {b[0], b[1], b[2], b[3]};
    size_t chunks = n / 32;
    for (size_t i = 0; i < chunks; ++i) {
        uint64_t w[4];
        std::memcpy(w, s + 32 * i, 32);
        for (int l = 0; l < 4; ++l) {
            la[l] += w[l];
            lb[l] += la[l];
        }
    }
    for (int l = 0; l < 4; ++l) {
        a[l] = la[l];
        b[l] = lb[l];
    }
    words += 4 * chunks;
    s += 32 * chunks;
    n -= 32 * chunks;
    while (n >= 8) {
        uint64_t w;
        std::memcpy(&w, s, 8);
        fold_word(*this, w);
        s += 8;
        n -= 8;
    }
    while (n--) carry[ncarry++] = *s++;
}

uint64_t Checksum::finish() noexcept {
    if (ncarry) {
        uint8_t pad[8] = {};
        std::memcpy(pad, carry, ncarry);
        uint64_t w;
        std::memcpy(&w, pad, 8);
        fold_word(*this, w);
        ncarry = 0;
    }
    uint64_t h = mix(nbytes ^ 0x6b76636b73756d31ull);  // "kvcksum1"
    for (int l = 0; l < 4; ++l) h = mix(h ^ a[l]) + mix(h ^ b[l] ^ uint64_t(l));
    return h ? h : 1;
}

namespace {

bool valid_plan(const cxk_kv_plan *p) noexcept {
    if (!p || !p->bases || !p->block_stride || !p->extent || (p->nsegs && !p->segs)) return false;
    for (uint32_t i = 0; i < p->nsegs; ++i) {
        const cxk_kv_seg &g = p->segs[i];
        if (g.base >= p->nbases || g.reserved != 0) return false;
        if (g.img_off > p->image_bytes || g.nbytes > p->image_bytes - g.img_off) return false;
    }
    return true;
}

// Every run of block b inside its base's extent: [eng_off + b*stride, +nbytes) within [0, extent).
bool block_in_range(const cxk_kv_plan *p, int64_t b) noexcept {
    if (b < 0) return false;
    for (uint32_t i = 0; i < p->nsegs; ++i) {
        const cxk_kv_seg &g = p->segs[i];
        __int128 lo = __int128(g.eng_off) + __int128(b) * p->block_stride[g.base];
        if (lo < 0 || lo + __int128(g.nbytes) > __int128(p->extent[g.base])) return false;
    }
    return true;
}

inline char *eng_addr(const cxk_kv_plan *p, const cxk_kv_seg &g, int64_t b) noexcept {
    return reinterpret_cast<char *>(p->bases[g.base] + uint64_t(g.eng_off) +
                                    uint64_t(b) * uint64_t(p->block_stride[g.base]));
}

int check_call(const cxk_kv_plan *plan, const int64_t *ids, const void *imgs, size_t n) noexcept {
    if (!valid_plan(plan) || (n && (!ids || !imgs))) return -EINVAL;
    for (size_t i = 0; i < n; ++i)
        if (!block_in_range(plan, ids[i])) return -ERANGE;
    return 0;
}

}  // namespace
}  // namespace cxk::kv

extern "C" {

int cxk_kv_plan_check(const struct cxk_kv_plan *plan) {
    return cxk::kv::valid_plan(plan) ? 0 : -EINVAL;
}

int cxk_kv_gather(const struct cxk_kv_plan *plan, const int64_t *block_ids, void *const *images,
                  size_t nblocks, unsigned flags) {
    using namespace cxk::kv;
    if (flags & ~(CXK_KV_FLUSH | CXK_KV_NT)) return -EINVAL;
    if (int r = check_call(plan, block_ids, images, nblocks)) return r;
    for (size_t i = 0; i < nblocks; ++i) {
        if (!images[i]) return -EINVAL;
    }
    for (size_t i = 0; i < nblocks; ++i) {
        char *img = static_cast<char *>(images[i]);
        for (uint32_t s = 0; s < plan->nsegs; ++s) {
            const cxk_kv_seg &g = plan->segs[s];
            const char *src = eng_addr(plan, g, block_ids[i]);
            if (flags & CXK_KV_NT) cxk_nt_copy(img + g.img_off, src, g.nbytes);
            else std::memcpy(img + g.img_off, src, g.nbytes);
        }
        if ((flags & CXK_KV_FLUSH) && !(flags & CXK_KV_NT)) cxk_flush(img, plan->image_bytes);
    }
    // pairs with the reader's invalidate + header check: the caller writes the block header
    // only after this fence, so a reader that sees the header sees these bytes
    if (flags) cxk_sfence();
    return 0;
}

int cxk_kv_scatter(const struct cxk_kv_plan *plan, const int64_t *block_ids,
                   const void *const *images, size_t nblocks, unsigned flags, uint64_t *sums) {
    using namespace cxk::kv;
    if (flags & ~CXK_KV_INVALIDATE) return -EINVAL;
    if (int r = check_call(plan, block_ids, images, nblocks)) return r;
    for (size_t i = 0; i < nblocks; ++i) {
        if (!images[i]) return -EINVAL;
    }
    for (size_t i = 0; i < nblocks; ++i) {
        const char *img = static_cast<const char *>(images[i]);
        // drop stale lines a non-coherent pool may have left in this host's cache; pairs with
        // the writer's flush before it published the header
        if (flags & CXK_KV_INVALIDATE) cxk_invalidate(img, plan->image_bytes);
        Checksum c;
        for (uint32_t s = 0; s < plan->nsegs; ++s) {
            const cxk_kv_seg &g = plan->segs[s];
            char *dst = eng_addr(plan, g, block_ids[i]);
            std::memcpy(dst, img + g.img_off, g.nbytes);
            if (sums) c.update(dst, g.nbytes);  // the bytes just written are still in cache
        }
        if (sums) sums[i] = c.finish();
    }
    return 0;
}

uint64_t cxk_kv_checksum(const void *image, size_t nbytes) {
    cxk::kv::Checksum c;
    c.update(image, nbytes);
    return c.finish();
}

int cxk_kv_checksum_engine(const struct cxk_kv_plan *plan, int64_t block_id, uint64_t *sum) {
    using namespace cxk::kv;
    if (!sum) return -EINVAL;
    if (int r = check_call(plan, &block_id, plan, 1)) return r;
    Checksum c;
    for (uint32_t s = 0; s < plan->nsegs; ++s)
        c.update(eng_addr(plan, plan->segs[s], block_id), plan->segs[s].nbytes);
    *sum = c.finish();
    return 0;
}

}  // extern "C"

// ---- blocks in a pool: put / get / lookup over cxk_obj_* ----------------------------------
namespace cxk::kv {
namespace {

int64_t realtime_ns() noexcept {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// Do the plan's runs write every byte of [0, image_bytes)? Then put may skip zeroing the
// object (CXK_OBJ_NOZERO: the header and the runs cover the whole payload before publish).
bool covers_image(const cxk_kv_plan *p) {
    std::vector<std::pair<uint64_t, uint64_t>> runs;
    runs.reserve(p->nsegs);
    for (uint32_t i = 0; i < p->nsegs; ++i)
        if (p->segs[i].nbytes) runs.emplace_back(p->segs[i].img_off, p->segs[i].nbytes);
    std::sort(runs.begin(), runs.end());
    uint64_t end = 0;  // [0, end) is covered
    for (const auto &r : runs) {
        if (r.first > end) return false;
        end = std::max(end, r.first + r.second);
    }
    return end >= p->image_bytes;
}

// The argument checks put and get share: -EINVAL for bad pointers, plan or flags (outside
// `allowed`), -ERANGE for a block id whose runs leave a base's extent.
int check_batch(cxk_pool *p, const cxk_kv_plan *plan, const char *const *names,
                const uint8_t *keys, const uint8_t *layout, const int64_t *ids, size_t n,
                unsigned flags, unsigned allowed, const int *status) noexcept {
    if (!p || !status || (flags & ~allowed)) return -EINVAL;
    if (n && (!keys || !layout)) return -EINVAL;
    return check_call(plan, ids, names, n);
}

}  // namespace
}  // namespace cxk::kv

extern "C" {

int cxk_kv_put(struct cxk_pool *p, const struct cxk_kv_plan *plan, const char *const *names,
               const uint8_t *keys, const uint8_t *layout, const int64_t *block_ids, size_t n,
               unsigned flags, int *status) {
    using namespace cxk::kv;
    if (int r = check_batch(p, plan, names, keys, layout, block_ids, n, flags,
                            CXK_KV_CHECKSUM | CXK_KV_NT, status))
        return r;
    auto *base = static_cast<uint8_t *>(cxk_pool_base(p));
    const unsigned create_flags = covers_image(plan) ? CXK_OBJ_NOZERO : 0u;
    int stored = 0;
    for (size_t i = 0; i < n; ++i) {
        uint64_t off = 0;
        int r = cxk_obj_create_ex(p, names[i], CXK_KV_HDR_BYTES + plan->image_bytes,
                                  create_flags, &off);
        if (r < 0) {
            status[i] = r;  // -EEXIST: another writer has it (immutable, so equal); -ENOSPC
            continue;
        }
        uint8_t *obj = base + off;
        uint8_t *img = obj + CXK_KV_HDR_BYTES;
        void *imgs[1] = {img};
        // plain or streaming copies: cxk_obj_publish flushes the whole payload (coherence
        // "none") and fences before it writes the object header that readers check
        r = cxk_kv_gather(plan, &block_ids[i], imgs, 1, flags & CXK_KV_NT);
        if (r == 0) {
            cxk_kv_block_hdr h;
            std::memset(&h, 0, sizeof h);
            h.magic = CXK_KV_BLOCK_MAGIC;
            std::memcpy(h.key, keys + 32 * i, 32);
            std::memcpy(h.layout, layout, 32);
            h.image_bytes = plan->image_bytes;
            h.checksum = (flags & CXK_KV_CHECKSUM) ? cxk_kv_checksum(img, plan->image_bytes) : 0;
            h.created_ns = realtime_ns();
            std::memcpy(obj, &h, sizeof h);
            r = cxk_obj_publish(p, off, 0);
        }
        // the creator's lease; on failure the unpublished object is reclaimed by the pool
        if (r < 0) {
            cxk_obj_close(p, off);
            cxk_obj_destroy(p, names[i]);
            status[i] = r;
            continue;
        }
        cxk_obj_close(p, off);
        status[i] = 0;
        ++stored;
    }
    return stored;
}

int cxk_kv_get(struct cxk_pool *p, const struct cxk_kv_plan *plan, const char *const *names,
               const uint8_t *keys, const uint8_t *layout, const int64_t *block_ids, size_t n,
               unsigned flags, int *status) {
    using namespace cxk::kv;
    if (int r = check_batch(p, plan, names, keys, layout, block_ids, n, flags,
                            CXK_KV_CHECKSUM | CXK_KV_INVALIDATE, status))
        return r;
    const auto *base = static_cast<const uint8_t *>(cxk_pool_base(p));
    const bool verify = flags & CXK_KV_CHECKSUM;
    int loaded = 0;
    for (size_t i = 0; i < n; ++i) {
        struct cxk_obj_stat st;
        int r = cxk_obj_open(p, names[i], &st);  // takes a lease: the memory is not reused
        if (r < 0) {
            status[i] = r;
            break;
        }
        cxk_kv_block_hdr h;
        if (flags & CXK_KV_INVALIDATE) cxk_pool_invalidate(p, st.off, sizeof h);
        std::memcpy(&h, base + st.off, sizeof h);
        if (st.nbytes != CXK_KV_HDR_BYTES + plan->image_bytes || h.magic != CXK_KV_BLOCK_MAGIC ||
            h.image_bytes != plan->image_bytes || std::memcmp(h.key, keys + 32 * i, 32) != 0 ||
            std::memcmp(h.layout, layout, 32) != 0) {
            r = -EBADMSG;
        } else if (verify && h.checksum == 0) {
            r = -ENODATA;  // put without a checksum: nothing to verify it against
        } else {
            const void *imgs[1] = {base + st.off + CXK_KV_HDR_BYTES};
            uint64_t sum = 0;
            r = cxk_kv_scatter(plan, &block_ids[i], imgs, 1, flags & CXK_KV_INVALIDATE,
                               verify ? &sum : nullptr);
            // the seqlock's second read: the object must still be the one we opened (pairs
            // with the owner's destroy, which changes the header before the memory is reused)
            if (r == 0) r = cxk_obj_validate(p, st.off, st.generation);
            if (r == 0 && verify && sum != h.checksum) r = -EBADMSG;
        }
        cxk_obj_close(p, st.off);
        status[i] = r;
        if (r < 0) break;
        ++loaded;
    }
    return loaded;
}

int cxk_kv_lookup(struct cxk_pool *p, const char *const *names, size_t n, size_t *nhits) {
    if (!p || !nhits || (n && !names)) return -EINVAL;
    size_t i = 0;
    for (; i < n; ++i) {
        struct cxk_obj_stat st;
        if (cxk_obj_stat(p, names[i], &st) < 0 || st.state != CXK_OBJ_LIVE) break;
    }
    *nhits = i;
    return 0;
}

}  // extern "C"
