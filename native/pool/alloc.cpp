// alloc.cpp — the allocator of one host's runs of extents: in each run a chain of blocks
// (each headed by its ObjHeader) with boundary tags, segregated free lists by floor(log2(size)), first fit,
// split and coalesce. Crash-safe by construction: the chain changes only through single
// 8-byte stores of block_bytes made after the bytes they expose are written; lists and
// counters are derived and rebuilt by recovery (recovery.cpp). A block never crosses the end
// of its run; extents.cpp grows runs (claim) and gives emptied tails back (trim).
#include <cstring>

#include "pool/crash.h"
#include "pool/extents.h"
#include "pool/pool.h"

namespace cxk::pool {
namespace {

uint32_t size_class(uint64_t n) { return 63u - uint32_t(__builtin_clzll(n)); }

// A list link (0 = none) we may write through: a block of our partition. A bad one marks
// the derived state for recovery and is not followed.
bool link_ok(cxk_pool *p, uint64_t off) {
    if (off == 0 || own_block(p, off)) return true;
    p->needs_recover = true;
    return false;
}

}  // namespace

void free_list_remove(cxk_pool *p, HostSlot *s, uint64_t off) {
    ObjHeader *b = hdr(p, off);
    uint32_t c = size_class(b->block_bytes);
    const uint64_t prev = b->link.prev, next = b->link.next;
    if (!link_ok(p, prev) || !link_ok(p, next)) return;
    if (prev) hdr(p, prev)->link.next = next;
    else if (s->free_head[c] == off) s->free_head[c] = next;
    if (next) hdr(p, next)->link.prev = prev;
}

namespace {
// A FREE block of ours whose size is plausible (its run: [*rb, *re)), or mark for recovery.
bool free_ok(cxk_pool *p, uint64_t off, uint64_t *rb, uint64_t *re) {
    if (own_block(p, off, rb, re) && ld(&hdr(p, off)->state) == kFree &&
        hdr(p, off)->block_bytes >= kMinBlock && hdr(p, off)->block_bytes <= *re - off)
        return true;
    p->needs_recover = true;
    return false;
}

// own_block and free_ok for a neighbour of a block of our run [rb, re) that lies inside
// it: the map is ours and we hold the host lock, so the run that holds the block holds its
// neighbour too, and the map is not read again.
bool own_in_run(const cxk_pool *p, uint64_t off, uint64_t rb, uint64_t re) {
    return off >= rb && off % kLine == 0 && off <= re - kMinBlock &&
           hdr(p, off)->magic == kObjMagic;
}
bool free_in_run(cxk_pool *p, uint64_t off, uint64_t rb, uint64_t re) {
    if (own_in_run(p, off, rb, re) && ld(&hdr(p, off)->state) == kFree &&
        hdr(p, off)->block_bytes >= kMinBlock && hdr(p, off)->block_bytes <= re - off)
        return true;
    p->needs_recover = true;
    return false;
}

}  // namespace

void write_free_header(cxk_pool *p, uint64_t off, uint64_t bytes, uint64_t prev_bytes) {
    ObjHeader *b = hdr(p, off);
    std::memset(static_cast<void *>(b), 0, kLine);
    b->magic = kObjMagic;
    b->block_bytes = bytes;
    b->prev_bytes = prev_bytes;
    st(&b->state, uint32_t(kFree));
    sync_out(p, b, kLine);  // other hosts' walks read it once the chain reaches it
}

void free_list_push(cxk_pool *p, HostSlot *s, uint64_t off) {
    ObjHeader *b = hdr(p, off);
    uint32_t c = size_class(b->block_bytes);
    b->link.prev = 0;
    b->link.next = s->free_head[c];
    if (s->free_head[c] && link_ok(p, s->free_head[c])) hdr(p, s->free_head[c])->link.prev = off;
    s->free_head[c] = off;
}

int64_t alloc_block(cxk_pool *p, uint64_t need) {
    HostSlot *s = slot(p, p->host);
    if (need > p->geo.data_bytes) return -ENOSPC;
    uint64_t found = 0, rb = 0, end = 0;
    const uint32_t c0 = size_class(need);
    // first fit in need's own class (bounded walk), else the head of any larger class,
    // every block of which is big enough
    uint64_t off = s->free_head[c0];
    for (int n = 0; off && n < 64 && free_ok(p, off, &rb, &end); ++n, off = hdr(p, off)->link.next)
        if (hdr(p, off)->block_bytes >= need) {
            found = off;
            break;
        }
    for (uint32_t c = c0 + 1; !found && c < kClasses; ++c)
        if (s->free_head[c] && free_ok(p, s->free_head[c], &rb, &end)) found = s->free_head[c];
    if (!found) return p->needs_recover ? -EBADMSG : -ENOSPC;

    ObjHeader *b = hdr(p, found);
    const uint64_t have = b->block_bytes;
    free_list_remove(p, s, found);
    if (have - need >= kMinBlock) {
        // The rest becomes a free block: its header is written before the store of
        // block_bytes that makes it reachable. free_ok found it in our run [rb, end).
        const uint64_t rest = found + need;
        write_free_header(p, rest, have - need, need);
        st(&b->block_bytes, need);
        sync_out(p, b, kLine);
        if (rest + (have - need) < end) hdr(p, rest + (have - need))->prev_bytes = have - need;
        free_list_push(p, s, rest);
        s->used_bytes += need;
        s->free_bytes -= need;
    } else {
        s->used_bytes += have;
        s->free_bytes -= have;
    }
    return int64_t(found);
}

void free_block(cxk_pool *p, uint64_t off) {
    HostSlot *s = slot(p, p->host);
    uint64_t begin = 0, end = 0;
    ObjHeader *b = hdr(p, off);
    uint64_t bytes = b->block_bytes;
    if (!own_block(p, off, &begin, &end) || bytes < kMinBlock || bytes % kLine ||
        bytes > end - off) {
        p->needs_recover = true;  // not a block of our chain: recovery decides
        return;
    }
    s->used_bytes -= bytes;
    s->free_bytes += bytes;
    st(&b->state, uint32_t(kFree));
    const uint64_t next = off + bytes;
    if (next < end && ld(&hdr(p, next)->state) == kFree && free_in_run(p, next, begin, end)) {
        free_list_remove(p, s, next);
        bytes += hdr(p, next)->block_bytes;
        st(&b->block_bytes, bytes);
    }
    // prev_bytes is derived: trust it only when the block it names ends where we begin. A
    // held neighbour is the common case, not a corruption: free_in_run (which marks the
    // pool for recovery) is asked only about a block that says it is FREE.
    const uint64_t pb = b->prev_bytes;
    if (off > begin && pb && pb <= off - begin && own_in_run(p, off - pb, begin, end) &&
        ld(&hdr(p, off - pb)->state) == kFree && free_in_run(p, off - pb, begin, end) &&
        hdr(p, off - pb)->block_bytes == pb) {
        const uint64_t prev = off - b->prev_bytes;
        free_list_remove(p, s, prev);
        bytes += hdr(p, prev)->block_bytes;
        st(&hdr(p, prev)->block_bytes, bytes);
        off = prev;
    }
    if (off + bytes < end) hdr(p, off + bytes)->prev_bytes = bytes;
    free_list_push(p, s, off);
    sync_out(p, hdr(p, off), kLine);
    // whole extents go back: a free tail, or those inside a free block within the run
    if (off + bytes == end) extent_trim(p, off, begin, end);
    else if (bytes >= p->geo.extent_bytes) extent_return_gap(p, off, begin, end);
}

bool walk(const cxk_pool *p, uint32_t h, std::vector<WalkBlock> *out) {
    std::vector<Run> runs;
    runs_of(p, h, &runs);
    for (const Run &r : runs) {
        const uint64_t begin = ext_off(p, r.first), end = ext_off(p, r.first + r.count);
        uint64_t off = begin;
        while (off < end) {
            ObjHeader *b = hdr(p, off);
            if (h != p->host) sync_in(p, b, kLine);
            const uint64_t bytes = ld(&b->block_bytes);
            if (b->magic != kObjMagic || bytes < kMinBlock || bytes % kLine || bytes > end - off)
                return false;
            out->push_back({off, ld(&b->state), b->gen, off == begin});
            off += bytes;
        }
    }
    return true;
}

}  // namespace cxk::pool
