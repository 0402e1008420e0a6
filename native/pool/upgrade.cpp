// upgrade.cpp — `cxlkit pool upgrade`: a version 1 pool (fixed per-host partitions) becomes a
// version 2 pool in place. No object moves: each v1 partition is already one block chain, so
// it becomes one run of its host's extent map (extents of the largest power of two dividing the
// partition size). The claim lines and extent maps go after the data region, into the pool's
// tail (or the free tail of the last partition). Everything is staged where v1 reads nothing,
// then one store of the version word commits (docs/pool-format.md, "Upgrading").
#include "pool/upgrade.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "pool/checksum.h"
#include "pool/crash.h"
#include "pool/hosts.h"
#include "pool/pool.h"
#include "pool/superblock.h"
#include "sys/sys.h"

namespace cxk::pool {
namespace {

constexpr uint64_t kV1ChecksumOff = kSbV1ChecksumOff;  // 200: crc32c of [0, 200) | 1<<32

void persist(const void *a, uint64_t n) {
    cxk_flush(a, n);
    cxk_sfence();
}

// The v1 superblock: its first 200 bytes are v2's (data_bytes holds partition_bytes). Every
// field is checked against the mapping before use; sizes are at most the pool before any
// product with max_hosts (<= 64), so nothing overflows.
int v1_read(const uint8_t *base, uint64_t mapped, Superblock *sb) {
    std::memset(sb, 0, sizeof *sb);
    std::memcpy(sb, base, kV1ChecksumOff);
    uint64_t sum;
    std::memcpy(&sum, base + kV1ChecksumOff, 8);
    if (sb->magic != kMagic) return -EMEDIUMTYPE;
    if (sb->version != kVersion1) return -EPROTONOSUPPORT;
    if (sum != ((1ull << 32) | crc32c(base, kV1ChecksumOff))) return -EBADMSG;
    const uint64_t T = sb->total_bytes, H = sb->max_hosts, P = sb->data_bytes;
    if (T > mapped) return -ENXIO;
    const bool small = sb->names_bytes <= T && sb->leases_bytes <= T && sb->names_off <= T &&
                       sb->leases_off <= T && sb->data_off <= T && P <= T &&
                       sb->name_slots <= T && sb->lease_slots <= T;
    const bool sane = small && T >= kSbBytes && sb->sb_bytes == kSbBytes &&
                      sb->host_slot_bytes == kHostSlotBytes && H >= 1 && H <= kMaxHosts &&
                      sb->levels == kLevels && sb->bucket_slots == kBucketSlots &&
                      sb->host_table_off == kSbBytes &&
                      sb->names_off >= kSbBytes + H * kHostSlotBytes &&
                      sb->names_bytes >= sb->name_slots * sizeof(NameEntry) &&
                      sb->leases_off >= sb->names_off + H * sb->names_bytes &&
                      sb->leases_bytes >= sb->lease_slots * sizeof(Lease) &&
                      sb->data_off >= sb->leases_off + H * sb->leases_bytes &&
                      sb->data_off % kLine == 0 && P >= kMinExtent && P % kMinExtent == 0 &&
                      sb->data_off + H * P <= T && sb->lease_timeout_ns > 0 &&
                      sb->nbackings == 1 && sb->stripe_bytes == 0;
    if (!sane) return -EBADMSG;
    uint64_t buckets = 0;
    for (uint32_t l = 0; l < kLevels; ++l) {
        if (sb->level_buckets[l] == 0) return -EBADMSG;
        buckets += sb->level_buckets[l];
    }
    if (sb->name_slots != buckets * kBucketSlots || sb->max_objects == 0 ||
        sb->max_objects > sb->name_slots)
        return -EBADMSG;
    return 0;
}

struct Part {
    bool used = false;        // a process attached once, or the chain holds a non-FREE block
    uint64_t live = 0;        // LIVE objects
    uint64_t free_from = 0;   // start of the trailing run of FREE blocks (== end: none)
};

// Walk partition h's chain read-only: every header checked before its size is followed.
int walk_part(const uint8_t *base, const Superblock &sb, uint32_t h, Part *out) {
    const uint64_t start = sb.data_off + h * sb.data_bytes, end = start + sb.data_bytes;
    out->free_from = end;
    for (uint64_t off = start; off < end;) {
        const ObjHeader *b = reinterpret_cast<const ObjHeader *>(base + off);
        const uint32_t magic = ldr(&b->magic), state = ldr(&b->state);
        const uint64_t bb = ldr(&b->block_bytes);
        if (magic != kObjMagic || state > kDead || bb < kMinBlock || bb % kLine ||
            bb > end - off)
            return -EBADMSG;  // a broken chain: v2 could not walk it either
        if (state == kFree) {
            if (out->free_from == end) out->free_from = off;
        } else {
            out->free_from = end;
            out->used = true;
            if (state == kLive) out->live++;
        }
        off += bb;
    }
    return 0;
}

// The block of partition h containing byte `at` (a chain already walked by walk_part).
uint64_t block_at(const uint8_t *base, const Superblock &sb, uint32_t h, uint64_t at) {
    uint64_t off = sb.data_off + h * sb.data_bytes;
    for (;;) {
        const uint64_t bb = ldr(&reinterpret_cast<const ObjHeader *>(base + off)->block_bytes);
        if (at < off + bb) return off;
        off += bb;
    }
}

struct Plan {
    Superblock v2;
    uint64_t cut = 0;           // the last partition ends here in v2 (0: whole)
    uint64_t split_block = 0;   // the FREE block the cut splits (0: the cut is a boundary)
    uint64_t claims_bytes = 0;  // page-rounded claim lines
};

uint64_t meta_bytes(uint64_t H, uint64_t n, uint64_t *claims, uint64_t *map) {
    *claims = round_up(H * kSlotClaimBytes, 4096);
    *map = round_up((n + 31) / 32 * 8, kLine);
    return *claims + H * *map;
}

// The v2 superblock of a plan: n extents of E bytes from data_off, the claim lines at
// claims_off and the maps after them, all below total.
int finish_plan(const Superblock &sb, uint64_t n, uint64_t E, uint64_t claims_off,
                uint64_t total, Plan *pl) {
    const uint64_t H = sb.max_hosts;
    if (n < 1) return -ENOSPC;
    if (n > kMaxExtents) return -EFBIG;
    uint64_t claims, map;
    meta_bytes(H, n, &claims, &map);
    Superblock &v = pl->v2;
    std::memcpy(&v, &sb, kV1ChecksumOff);
    v.version = kVersion;
    v.total_bytes = total;
    v.extent_bytes = E;
    v.nextents = n;
    v.data_bytes = n * E;
    v.claims_off = claims_off;
    v.extmap_bytes = map;
    v.extmap_off = claims_off + claims;
    pl->claims_bytes = claims;
    if (v.extmap_off + H * map > total) return -ENOSPC;
    v.checksum = (1ull << 32) | crc32c(&v, offsetof(Superblock, checksum));
    return 0;
}

// Extents of E = the largest power of two dividing a partition (<= kMaxExtent): each partition
// is a whole number of them. The claim lines and maps go after the partitions when the tail
// holds them, else after a cut through the last partition's free tail (a page kept for the
// FREE header v1 sees there, so staging never writes over a header v1 follows).
int plan(const uint8_t *base, const Superblock &sb, const std::vector<Part> &parts, Plan *pl) {
    const uint64_t T = sb.total_bytes, H = sb.max_hosts, P = sb.data_bytes;
    const uint64_t E = std::min<uint64_t>(P & (~P + 1), kMaxExtent), per = P / E;
    const uint64_t parts_end = sb.data_off + H * P;
    uint64_t claims, map, n = H * per;
    if (parts_end + meta_bytes(H, n, &claims, &map) <= T) {
        pl->v2.claims_off = parts_end;
    } else {
        const uint64_t need = meta_bytes(H, n, &claims, &map) + 4096;
        const uint64_t last = sb.data_off + (H - 1) * P;
        const Part &lp = parts[H - 1];
        if (need > T - last) return -ENOSPC;
        uint64_t c = std::min((T - need - sb.data_off) / E, n - 1);
        for (;; --c) {
            const uint64_t cut = sb.data_off + c * E;
            if (cut < lp.free_from || cut < last) return -ENOSPC;  // objects lie past the cut
            const uint64_t b = block_at(base, sb, uint32_t(H - 1), cut);
            if (b == cut || cut - b >= kMinBlock) {
                pl->cut = cut;
                pl->split_block = b == cut ? 0 : b;
                break;
            }
            if (c == 0) return -ENOSPC;
        }
        n = c;
        pl->v2.claims_off = pl->cut + 4096;
    }
    return finish_plan(sb, n, E, pl->v2.claims_off, T, pl);
}

// Host h's run in the v2 map: START at its first extent, CONT after (built word by word;
// the region was zeroed, and nothing reads it before the commit).
void write_run(uint8_t *base, const Superblock &v, uint32_t h, uint64_t first, uint64_t k) {
    uint64_t *m = reinterpret_cast<uint64_t *>(base + v.extmap_off + h * v.extmap_bytes);
    for (uint64_t e = first; e < first + k; ++e)
        m[e / 32] |= (e == first ? uint64_t(kExtStart) : uint64_t(kExtCont)) << (2 * (e % 32));
}

// Everything before the commit: nothing here changes what a v1 reader sees (the split keeps a
// valid v1 chain: two FREE blocks where there was one).
int stage(uint8_t *base, const Superblock &sb, const std::vector<Part> &parts, const Plan &pl) {
    const Superblock &v = pl.v2;
    const uint64_t H = sb.max_hosts, per = sb.data_bytes / v.extent_bytes;
    if (pl.split_block) {
        ObjHeader *b = reinterpret_cast<ObjHeader *>(base + pl.split_block);
        ObjHeader *t = reinterpret_cast<ObjHeader *>(base + pl.cut);
        const uint64_t end = pl.split_block + ldr(&b->block_bytes);
        std::memset(static_cast<void *>(t), 0, kObjHeaderBytes);
        t->magic = kObjMagic;
        t->block_bytes = end - pl.cut;
        t->prev_bytes = pl.cut - pl.split_block;
        persist(t, kObjHeaderBytes);  // the new header first, then the one store that exposes it
        st(&b->block_bytes, pl.cut - pl.split_block);
        persist(&b->block_bytes, 8);
        crash_point(Crash::upgrade_split);
    }
    const uint64_t meta_end = v.extmap_off + H * v.extmap_bytes;
    std::memset(base + v.claims_off, 0, meta_end - v.claims_off);
    const uint64_t now = uint64_t(now_ns()) | 1;
    for (uint32_t h = 0; h < H; ++h) {
        HostSlot *s = reinterpret_cast<HostSlot *>(base + sb.host_table_off + h * kHostSlotBytes);
        // no v1 process is alive (checked): every lock is re-created, and a used slot is
        // marked busy so its next opener takes it over and rebuilds its lists and counters
        if (int r = init_mutex(&s->mutex)) return r;
        s->opener_pid = 0;
        if (!parts[h].used && ldr(&s->boot) == kBootFresh) continue;
        st(&s->boot, kBootBusy);
        SlotClaim *c = reinterpret_cast<SlotClaim *>(base + v.claims_off + h * kSlotClaimBytes);
        c->door = now;  // claimed: a named newcomer skips it
        uint64_t k = per;
        if (pl.cut && h == H - 1) k = (pl.cut - sb.data_off) / v.extent_bytes - h * per;
        write_run(base, v, h, h * per, k);
    }
    std::memcpy(base + kSbCopyOff, &v, sizeof v);
    persist(base, v.data_off);                       // slots and the staged superblock
    persist(base + v.claims_off, meta_end - v.claims_off);
    crash_point(Crash::upgrade_staged);
    return 0;
}

// After the commit: the superblock at 0 becomes the staged one. A crash midway leaves offset
// 0 failing its checksum with version 2 at 8: validate() reads the staged copy then.
void rewrite_primary(uint8_t *base, const Superblock &v) {
    std::memcpy(base + 16, reinterpret_cast<const uint8_t *>(&v) + 16, 112);
    persist(base, 128);
    crash_point(Crash::upgrade_rewriting);
    std::memcpy(base + 128, reinterpret_cast<const uint8_t *>(&v) + 128, sizeof v - 128);
    persist(base, sizeof v);
}

}  // namespace

int upgrade_mapped(uint8_t *base, uint64_t size, struct cxk_pool_upgrade_info *info) {
    std::memset(info, 0, sizeof *info);
    if (size < kSbBytes) return -EMEDIUMTYPE;
    uint32_t version;
    std::memcpy(&version, base + 8, 4);
    if (version == kVersion && ldr(reinterpret_cast<const uint64_t *>(base)) == kMagic) {
        Superblock v;
        if (int r = validate(base, size, 1, &v)) return r;
        info->from_version = kVersion;
        info->extent_bytes = v.extent_bytes;
        info->nextents = v.nextents;
        Superblock at0;
        std::memcpy(&at0, base, sizeof at0);
        if (std::memcmp(&at0, &v, sizeof v) != 0) rewrite_primary(base, v);  // finish
        return 0;
    }
    Superblock sb;
    if (int r = v1_read(base, size, &sb)) return r;
    info->from_version = kVersion1;
    const int64_t now = now_ns();
    for (uint32_t h = 0; h < sb.max_hosts; ++h) {
        const HostSlot *s =
            reinterpret_cast<const HostSlot *>(base + sb.host_table_off + h * kHostSlotBytes);
        if (ldr(&s->boot) != kBootFresh && now - ldr(&s->heartbeat_ns) < int64_t(sb.lease_timeout_ns)) {
            info->busy_host = h;
            std::memcpy(info->busy_tag, s->tag, kTagMax);
            info->busy_tag[kTagMax] = 0;
            return -EBUSY;
        }
    }
    std::vector<Part> parts(sb.max_hosts);
    for (uint32_t h = 0; h < sb.max_hosts; ++h) {
        if (int r = walk_part(base, sb, h, &parts[h])) return r;
        info->objects += parts[h].live;
    }
    Plan pl;
    if (int r = plan(base, sb, parts, &pl)) {
        const uint64_t last = sb.data_off + (sb.max_hosts - 1) * sb.data_bytes;
        info->busy_host = sb.max_hosts - 1;  // -ENOSPC: the partition whose tail is needed
        const HostSlot *s = reinterpret_cast<const HostSlot *>(
            base + sb.host_table_off + (sb.max_hosts - 1) * kHostSlotBytes);
        std::memcpy(info->busy_tag, s->tag, kTagMax);
        info->busy_tag[kTagMax] = 0;
        info->cut_bytes = last + sb.data_bytes - parts[sb.max_hosts - 1].free_from;
        return r;
    }
    info->extent_bytes = pl.v2.extent_bytes;
    info->nextents = pl.v2.nextents;
    info->meta_off = pl.v2.claims_off;
    info->cut_bytes = pl.cut ? sb.data_off + sb.max_hosts * sb.data_bytes - pl.cut : 0;
    if (int r = stage(base, sb, parts, pl)) return r;
    // the commit: one aligned store of the version word, after everything it exposes is in
    // the pool (a v1 reader now sees version 2 and refuses; a v2 reader sees it whole)
    st(reinterpret_cast<uint32_t *>(base + 8), kVersion);
    persist(base + 8, 4);
    crash_point(Crash::upgrade_committed);
    rewrite_primary(base, pl.v2);
    return 0;
}

// A read-only view of a version 1 pool: the file mapped copy-on-write (MAP_PRIVATE: nothing
// written here reaches it) with anonymous memory after it for the claim lines and maps, made
// version 2 in memory exactly as upgrade would (no cut needed: the metadata has its own room).
int v1_private_view(int fd, uint64_t size, uint8_t **out, uint64_t *mapped) {
    const uint64_t page = 4096, file_span = round_up(size, page);
    void *m = nullptr;
    if (int e = sys_mmap(nullptr, file_span, PROT_READ, MAP_SHARED, fd, 0, &m)) return e;
    Superblock sb;
    int r = v1_read(static_cast<uint8_t *>(m), size, &sb);
    sys_munmap(m, file_span);
    if (r) return r;
    const uint64_t P = sb.data_bytes, H = sb.max_hosts;
    const uint64_t E = std::min<uint64_t>(P & (~P + 1), kMaxExtent), n = H * (P / E);
    uint64_t claims, map;
    const uint64_t total = file_span + round_up(meta_bytes(H, n, &claims, &map), page);
    void *res = nullptr;
    if (int e = sys_mmap(nullptr, total, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0, &res))
        return e;
    if (int e = sys_mmap(res, file_span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, fd, 0,
                         &m)) {
        sys_munmap(res, total);
        return e;
    }
    uint8_t *base = static_cast<uint8_t *>(res);
    std::vector<Part> parts(H);
    Plan pl;
    for (uint32_t h = 0; h < H && r == 0; ++h) r = walk_part(base, sb, h, &parts[h]);
    if (r == 0) r = finish_plan(sb, n, E, file_span, total, &pl);
    if (r == 0) r = stage(base, sb, parts, pl);
    if (r) {
        sys_munmap(res, total);
        return r;
    }
    std::memcpy(base, &pl.v2, sizeof pl.v2);
    *out = base;
    *mapped = total;
    return 0;
}

}  // namespace cxk::pool

using namespace cxk::pool;

extern "C" int cxk_pool_upgrade(const char *path, unsigned flags,
                                struct cxk_pool_upgrade_info *info) {
    if (!path || !*path || !info || (flags & ~unsigned(CXK_POOL_SHARED))) return -EINVAL;
    std::vector<Backing> bs(1);
    bs[0].path = path;
    int r = backing_open(&bs[0], false, flags, 0, 0);
    if (r == 0 && bs[0].size < kSbBytes) r = -EMEDIUMTYPE;
    uint8_t *base = nullptr;
    if (r == 0) r = backings_map(bs, bs[0].size, bs[0].align, &base);
    if (r) {
        backings_discard(bs);
        return r;
    }
    // one upgrader at a time on this machine: an OFD lock on the version word's byte (a
    // second waits, then finds version 2 and has nothing to do)
    r = backing_lock(bs[0].fd, 8, 30 * 1000000000ll);
    if (r == 0) {
        r = upgrade_mapped(base, bs[0].size, info);
        backing_unlock(bs[0].fd, 8);
    }
    cxk_unmap(base, bs[0].size);
    backings_discard(bs);
    return r;
}
