// extents.cpp — the data region as extents claimed on demand. Each host's extent map (2 bits
// per extent, one writer: that host) says which extents it holds and how they form runs; a
// run is one block chain (alloc.cpp). Claims need no cross-host atomic: under the bakery a
// host reserves free extents in its own map, flushes, re-reads every other map (at least one
// of two hosts that reserve the same extent at once sees the other's reservation: both store,
// fence, then load) and withdraws on a clash; only then does it format and join them.
#include "pool/extents.h"

#include <sched.h>

#include <algorithm>
#include <cerrno>

#include "pool/crash.h"
#include "pool/hosts.h"
#include "pool/space.h"

namespace cxk::pool {

namespace {
constexpr uint64_t kFieldLo = 0x5555555555555555ull;  // the low bit of every 2-bit field
constexpr uint64_t kAllCont = 0xaaaaaaaaaaaaaaaaull;  // every field kExtCont

uint64_t nwords(const cxk_pool *p) { return (p->geo.nextents + 31) / 32; }

// Word w of host h's map; another host's line is synced in first (it may be stale here).
uint64_t map_word(const cxk_pool *p, uint32_t h, uint64_t w) {
    const uint64_t *a = extmap(p, h) + w;
    if (h != p->host) sync_in(p, a, sizeof *a);
    return ld(a);
}

// Bit 2i set for each field i of v that is not kExtCont.
uint64_t noncont(uint64_t v) {
    const uint64_t y = v ^ kAllCont;
    return (y | (y >> 1)) & kFieldLo;
}

// Set extents [first, first + k) of our map: the first to s0, the rest to s1. Words are
// stored from the last one down when `last_first` (a commit: the word that makes the run
// whole goes last), else from the first up (a release: the word that ends the run goes first).
void map_set(cxk_pool *p, uint64_t first, uint64_t k, uint64_t s0, uint64_t s1,
             bool last_first) {
    if (!k) return;
    uint64_t *m = extmap(p, p->host);
    const uint64_t w0 = first / 32, w1 = (first + k - 1) / 32;
    for (uint64_t i = 0; i <= w1 - w0; ++i) {
        const uint64_t w = last_first ? w1 - i : w0 + i;
        uint64_t v = ldr(&m[w]);
        for (uint64_t f = std::max(first, w * 32); f < std::min(first + k, w * 32 + 32); ++f) {
            const unsigned sh = unsigned(2 * (f % 32));
            v = (v & ~(3ull << sh)) | ((f == first ? s0 : s1) << sh);
        }
        st(&m[w], v);
        sync_out(p, &m[w], sizeof v);  // one word reaches the pool before the next changes
    }
}

// The FREE block of ours that ends run r, found on the free lists (a bounded look at each
// size class, largest first: a run's free tail is usually the largest free block): 0 when
// none is seen. Walking the chain instead costs a step per block of the run, at every claim.
uint64_t run_free_tail(const cxk_pool *p, const Run &r, uint64_t *bytes) {
    const HostSlot *s = slot(p, p->host);
    const uint64_t end = ext_off(p, r.first + r.count);
    for (uint32_t c = kClasses; c-- > 0;) {
        uint64_t off = s->free_head[c];
        for (int n = 0; off && n < 16; ++n) {
            if (!own_block(p, off)) break;  // a corrupt link: recovery's business
            const ObjHeader *b = hdr(p, off);
            if (ld(&b->state) == kFree && b->block_bytes <= end - off &&
                off + b->block_bytes == end) {
                *bytes = b->block_bytes;
                return off;
            }
            off = b->link.next;
        }
    }
    return 0;
}

// The last block of our run r (a walk of its chain: a step per block) and its size; false on a
// broken chain.
bool run_last_block(const cxk_pool *p, const Run &r, uint64_t *off, uint64_t *bytes) {
    const uint64_t end = ext_off(p, r.first + r.count);
    for (uint64_t o = ext_off(p, r.first); o < end;) {
        const uint64_t b = ld(&hdr(p, o)->block_bytes);
        if (hdr(p, o)->magic != kObjMagic || b < kMinBlock || b % kLine || b > end - o)
            return false;
        if (o + b == end) {
            *off = o, *bytes = b;
            return true;
        }
        o += b;
    }
    return false;
}

// Which extents any host's map marks (reserved or held), ours included.
std::vector<uint8_t> taken_extents(const cxk_pool *p) {
    const uint64_t n = p->geo.nextents;
    std::vector<uint8_t> taken(n, 0);
    for (uint32_t h = 0; h < p->geo.max_hosts; ++h)
        for (uint64_t w = 0; w < nwords(p); ++w) {
            const uint64_t v = map_word(p, h, w);
            for (uint64_t f = w * 32; v && f < std::min(n, w * 32 + 32); ++f)
                if ((v >> (2 * (f % 32))) & 3) taken[f] = 1;
        }
    return taken;
}

bool all_free(const std::vector<uint8_t> &taken, uint64_t first, uint64_t k) {
    if (first + k > taken.size()) return false;
    for (uint64_t f = first; f < first + k; ++f)
        if (taken[f]) return false;
    return true;
}

// Extents for a block of `need` bytes: the end of one of our runs (*extend, *last: the run's
// last block when FREE, which the new extents join), else a first fit. false: none.
bool pick_extents(const cxk_pool *p, uint64_t need, const std::vector<uint8_t> &taken,
                  uint64_t *first, uint64_t *k, bool *extend, uint64_t *last,
                  uint64_t *last_bytes) {
    const uint64_t E = p->geo.extent_bytes;
    std::vector<Run> runs;
    runs_of(p, p->host, &runs);
    for (const Run &r : runs) {
        if (!all_free(taken, r.first + r.count, 1)) continue;  // no room after it
        // the run's last block: its free tail joins the new extents, and the new header's
        // boundary tag (prev_bytes) names it either way
        uint64_t lo = 0, lb = 0, tail = 0;
        if ((lo = run_free_tail(p, r, &lb)) != 0) tail = lb;
        else if (!run_last_block(p, r, &lo, &lb)) continue;
        const uint64_t kk = std::max<uint64_t>(1, (need - std::min(need, tail) + E - 1) / E);
        if (all_free(taken, r.first + r.count, kk)) {
            *first = r.first + r.count, *k = kk, *extend = true;
            *last = tail ? lo : 0, *last_bytes = lb;
            return true;
        }
    }
    // A new run goes into the longest stretch of free extents: at its start when the stretch
    // starts the region, else in its middle, so that the run before the stretch (whoever's)
    // and the new one both have room to grow; hosts that claim by turns then extend their own
    // runs instead of leaving a short tail in each extent.
    const uint64_t kk = (need + E - 1) / E;
    uint64_t best = 0, best_len = 0;
    for (uint64_t f = 0, len = 0; f <= taken.size(); ++f) {
        if (f < taken.size() && !taken[f]) {
            ++len;
            continue;
        }
        if (len > best_len) best = f - len, best_len = len;
        len = 0;
    }
    if (best_len < kk) return false;
    *first = best == 0 ? 0 : best + (best_len - kk) / 2;
    *k = kk, *extend = false, *last = 0, *last_bytes = 0;
    return true;
}
}  // namespace

uint32_t ext_state(const cxk_pool *p, uint32_t h, uint64_t e) {
    if (e >= p->geo.nextents) return kExtFree;
    return uint32_t((map_word(p, h, e / 32) >> (2 * (e % 32))) & 3);
}

bool run_at(const cxk_pool *p, uint32_t h, uint64_t off, uint64_t *begin, uint64_t *end) {
    // Every lookup, bounds check and free of a block asks this (a dozen times per create +
    // publish + destroy), so it reads the map a word at a time: usually the one word that
    // holds the extent, its run's START and its end. Nothing is cached: another host may
    // claim or return extents at any moment, and the words read are the truth.
    const Superblock &g = p->geo;
    if (off < g.data_off || off - g.data_off >= g.data_bytes) return false;
    // extent_bytes is a validated power of two and data_bytes == nextents * extent_bytes,
    // so x < nextents
    const uint64_t x = (off - g.data_off) >> __builtin_ctzll(g.extent_bytes);
    const uint64_t wx = x / 32;
    const unsigned fx = unsigned(x % 32);
    const uint64_t v = map_word(p, h, wx);
    const uint64_t sx = (v >> (2 * fx)) & 3;
    if (sx != kExtStart && sx != kExtCont) return false;
    // back: the nearest field at or below x that is not CONT must be a START (else an orphan)
    uint64_t w = wx, vw = v;
    uint64_t m = noncont(v) & (fx == 31 ? ~0ull : (1ull << (2 * fx + 2)) - 1);
    while (!m) {
        if (w == 0) return false;
        vw = map_word(p, h, --w);
        m = noncont(vw);
    }
    const unsigned fs = unsigned(63 - __builtin_clzll(m)) / 2;
    if (((vw >> (2 * fs)) & 3) != kExtStart) return false;
    // forward: the first field above x that is not CONT ends the run (nextents at the most:
    // fields past nextents may hold anything, the map is pool memory)
    const uint64_t n = p->geo.nextents, words = nwords(p);
    uint64_t we = wx;
    uint64_t mf = fx == 31 ? 0 : noncont(v) & (~0ull << (2 * fx + 2));
    while (!mf && ++we < words) mf = noncont(map_word(p, h, we));
    const uint64_t e = mf ? std::min(n, we * 32 + uint64_t(__builtin_ctzll(mf)) / 2) : n;
    *begin = ext_off(p, w * 32 + fs);
    *end = ext_off(p, e);
    return true;
}

bool own_block(const cxk_pool *p, uint64_t off, uint64_t *begin, uint64_t *end) {
    return off % kLine == 0 && run_at(p, p->host, off, begin, end) && off <= *end - kMinBlock &&
           hdr(p, off)->magic == kObjMagic;
}

bool own_block(const cxk_pool *p, uint64_t off) {
    uint64_t b, e;
    return own_block(p, off, &b, &e);
}

void runs_of(const cxk_pool *p, uint32_t h, std::vector<Run> *out) {
    const uint64_t n = p->geo.nextents;
    bool in_run = false;
    for (uint64_t w = 0; w < nwords(p); ++w) {
        const uint64_t v = map_word(p, h, w);
        if (!v) {
            in_run = false;
            continue;
        }
        for (uint64_t f = w * 32; f < std::min(n, w * 32 + 32); ++f) {
            const uint64_t s = (v >> (2 * (f % 32))) & 3;
            if (s == kExtStart) {
                out->push_back({f, 1});
                in_run = true;
            } else if (s == kExtCont && in_run) {
                out->back().count++;
            } else {
                in_run = false;
            }
        }
    }
}

uint64_t extents_held(const cxk_pool *p, uint32_t h) {
    uint64_t n = 0;
    std::vector<Run> runs;
    runs_of(p, h, &runs);
    for (const Run &r : runs) n += r.count;
    return n;
}

int extent_claim(cxk_pool *p, uint64_t need) {
    const uint64_t E = p->geo.extent_bytes;
    HostSlot *s = slot(p, p->host);
    for (int attempt = 0; attempt < 8; ++attempt) {
        const std::vector<uint8_t> taken = taken_extents(p);
        uint64_t first, k, last, last_bytes;
        bool extend;
        if (!pick_extents(p, need, taken, &first, &k, &extend, &last, &last_bytes))
            return -ENOSPC;
        map_set(p, first, k, kExtReserved, kExtReserved, false);
        crash_point(Crash::claim_reserved);
        // our reservation is in the pool (map_set fenced): now read everyone else's
        bool clash = false;
        for (uint32_t h = 0; h < p->geo.max_hosts && !clash; ++h)
            for (uint64_t f = first; h != p->host && f < first + k && !clash; ++f)
                clash = ext_state(p, h, f) != kExtFree;
        if (clash) {
            map_set(p, first, k, kExtFree, kExtFree, false);  // withdraw, then try again
            sched_yield();
            continue;
        }
        // the blocks under them exist before anything touches them: a sparse pool file on a
        // full filesystem fails here with -EDQUOT instead of faulting (SIGBUS) below
        if (int r = reserve_extents(p, first, k)) {
            map_set(p, first, k, kExtFree, kExtFree, false);
            return r;
        }
        // lines of these extents we cached while another host held them are stale: drop
        // them before writing (non-coherent memory; a no-op with coherence "host")
        sync_in(p, hdr(p, ext_off(p, first)), k * E);
        write_free_header(p, ext_off(p, first), k * E, extend ? last_bytes : 0);
        crash_point(Crash::claim_formatted);
        map_set(p, first, k, extend ? kExtCont : kExtStart, kExtCont, true);
        crash_point(Crash::claim_committed);
        s->free_bytes += k * E;
        uint64_t blk = ext_off(p, first);
        if (last && ld(&hdr(p, last)->state) == kFree) {
            // the run's free tail and the new extents become one block: one store
            free_list_remove(p, s, last);
            st(&hdr(p, last)->block_bytes, last_bytes + k * E);
            sync_out(p, hdr(p, last), kLine);
            blk = last;
        }
        free_list_push(p, s, blk);
        return 0;
    }
    return -EBUSY;
}

void extent_trim(cxk_pool *p, uint64_t off) {
    uint64_t rb, re;
    if (run_at(p, p->host, off, &rb, &re)) extent_trim(p, off, rb, re);
}

void extent_trim(cxk_pool *p, uint64_t off, uint64_t rb, uint64_t re) {
    const Superblock &g = p->geo;
    const uint64_t E = g.extent_bytes;
    HostSlot *s = slot(p, p->host);
    ObjHeader *b = hdr(p, off);
    if (ld(&b->state) != kFree || off + b->block_bytes != re) return;
    uint64_t t;
    if (off == rb) {
        t = rb;  // a whole run is free: it all goes, unless it is all we hold
        if ((re - rb) / E >= extents_held(p, p->host)) t += E;
    } else {
        t = g.data_off + (off - g.data_off + E - 1) / E * E;
        if (t - off < kMinBlock && t > off) t += E;  // the block before t needs a header
        t += E;  // keep one free extent at the tail: a host near a boundary does not churn
    }
    if (t >= re) return;
    free_list_remove(p, s, off);
    if (t > off) {
        // a split at t: the new header first, then the one store that shortens the block
        write_free_header(p, t, re - t, t - off);
        st(&b->block_bytes, t - off);
        sync_out(p, b, kLine);
        free_list_push(p, s, off);
        crash_point(Crash::trim_split);
    }
    s->free_bytes -= re - t;
    sync_out(p, hdr(p, t), re - t);  // as in extent_return_gap: no dirty line outlives the return
    // the word holding t first: the run ends at t before the rest are cleared (orphans)
    map_set(p, (t - g.data_off) / E, (re - t) / E, kExtFree, kExtFree, false);
    crash_point(Crash::trim_cleared);
}

void extent_return_gap(cxk_pool *p, uint64_t off) {
    uint64_t rb, re;
    if (run_at(p, p->host, off, &rb, &re)) extent_return_gap(p, off, rb, re);
}

void extent_return_gap(cxk_pool *p, uint64_t off, uint64_t rb, uint64_t re) {
    const Superblock &g = p->geo;
    const uint64_t E = g.extent_bytes;
    HostSlot *s = slot(p, p->host);
    ObjHeader *b = hdr(p, off);
    const uint64_t bytes = ld(&b->block_bytes);
    // the block is pool memory: it must lie in the run and stop short of its end
    if (ld(&b->state) != kFree || off < rb || off >= re || bytes >= re - off || bytes < E)
        return;
    const uint64_t end = off + bytes;
    // [g0, g1): the whole extents inside the block, leaving room for a header before and after
    uint64_t g0 = g.data_off + (off - g.data_off + E - 1) / E * E;
    if (g0 > off && g0 - off < kMinBlock) g0 += E;
    uint64_t g1 = g.data_off + (end - g.data_off) / E * E;
    if (g1 < end && end - g1 < kMinBlock) {
        if (g1 - g.data_off < E) return;
        g1 -= E;
    }
    if (g1 <= g0) return;
    // one extent of slack per host: a host near a boundary does not claim and return on
    // every create/destroy (free_bytes is derived; a wrong value changes only this choice)
    if (s->free_bytes < g1 - g0 || s->free_bytes - (g1 - g0) < E) g0 += E;
    if (g1 <= g0) return;
    free_list_remove(p, s, off);
    // Split at g1, then at g0: each a new FREE header, then the one store that shortens the
    // block, so the chain is whole after every store and no block spans the gap.
    if (g1 < end) {
        write_free_header(p, g1, end - g1, 0);  // it begins the run after the gap
        st(&b->block_bytes, g1 - off);
        sync_out(p, b, kLine);
    }
    hdr(p, end)->prev_bytes = end - g1;  // end < re: a block of ours (0 when g1 == end)
    if (g0 > off) {
        write_free_header(p, g0, g1 - g0, g0 - off);
        st(&b->block_bytes, g0 - off);
        sync_out(p, b, kLine);
        free_list_push(p, s, off);
    }
    if (g1 < end) free_list_push(p, s, g1);
    crash_point(Crash::gap_split);
    // the run after the gap begins at g1 (one store, CONT -> START) before the gap leaves
    // the map: a crash between them leaves two walkable runs, the first one's free tail
    map_set(p, (g1 - g.data_off) / E, 1, kExtStart, kExtStart, false);
    crash_point(Crash::gap_started);
    s->free_bytes -= g1 - g0;
    // lines of the gap this host dirtied (boundary tags, list links) reach the pool now: a
    // later write-back would land on the next owner's bytes (non-coherent memory)
    sync_out(p, hdr(p, g0), g1 - g0);
    // from the first up, as trim: the run before ends at g0 first, the rest are orphans
    map_set(p, (g0 - g.data_off) / E, (g1 - g0) / E, kExtFree, kExtFree, false);
    crash_point(Crash::gap_cleared);
}

void extmap_recover(cxk_pool *p) {
    uint64_t *m = extmap(p, p->host);
    const uint64_t n = p->geo.nextents;
    bool in_run = false;
    for (uint64_t w = 0; w < nwords(p); ++w) {
        const uint64_t v = ldr(&m[w]);
        uint64_t nv = 0;
        for (uint64_t f = w * 32; f < std::min(n, w * 32 + 32); ++f) {
            const unsigned sh = unsigned(2 * (f % 32));
            const uint64_t s = (v >> sh) & 3;
            const bool keep = s == kExtStart || (s == kExtCont && in_run);
            in_run = keep;
            if (keep) nv |= s << sh;
        }
        if (nv != v) {
            st(&m[w], nv);
            sync_out(p, &m[w], sizeof nv);
        }
    }
}

void extents_adopt(cxk_pool *p, uint32_t h) {
    std::vector<Run> runs;
    runs_of(p, h, &runs);
    for (const Run &r : runs) map_set(p, r.first, r.count, kExtStart, kExtCont, true);
}

void extmap_clear(cxk_pool *p, uint32_t h) {
    uint64_t *m = extmap(p, h);
    for (uint64_t w = 0; w < nwords(p); ++w) {
        st(&m[w], uint64_t(0));
        sync_out(p, &m[w], sizeof m[w]);
    }
}

uint64_t extents_overlapping(const cxk_pool *p) {
    std::vector<uint8_t> held(p->geo.nextents, 0);
    uint64_t both = 0;
    for (uint32_t h = 0; h < p->geo.max_hosts; ++h) {
        std::vector<Run> runs;
        runs_of(p, h, &runs);
        for (const Run &r : runs)
            for (uint64_t f = r.first; f < r.first + r.count; ++f)
                if (held[f]++ == 1) both++;
    }
    return both;
}

}  // namespace cxk::pool

using namespace cxk::pool;

extern "C" int cxk_pool_owns(cxk_pool *p, uint64_t off, uint64_t nbytes) {
    uint64_t b, e;
    if (!p || !run_at(p, p->host, off, &b, &e) || nbytes > e - off) return -EINVAL;
    return 0;
}
