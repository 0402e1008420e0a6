// superblock.cpp — the pool's geometry: computing it for a size and options, formatting the
// metadata (the magic stored last), and validating a mapped superblock against the mapping.
#include "pool/superblock.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "pool/checksum.h"
#include "pool/hosts.h"
#include "pool/upgrade.h"
#include "prim/policy.h"
#include "sys/sys.h"

namespace cxk::pool {

// ---- format / validate ------------------------------------------------------------------
uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// The extent size: a power of two near data / kExtentsTarget, so that a host claims rarely
// (a few thousand claims fill the pool) and holds little it does not use (at most an extent
// of slack per run); kMinExtent..kMaxExtent (docs/pool-format.md, "Extents").
uint64_t extent_size(uint64_t total) {
    uint64_t e = kMinExtent;
    while (e < kMaxExtent && e * kExtentsTarget < total) e <<= 1;
    return e;
}

int geometry(uint64_t total, const cxk_pool_opts &o, uint32_t nbackings, Superblock *sb) {
    std::memset(sb, 0, sizeof *sb);
    const uint32_t hosts = o.max_hosts ? o.max_hosts : 4;
    if (hosts > kMaxHosts) return -EINVAL;
    const uint64_t lease_slots = o.lease_slots ? o.lease_slots : 1024;
    const uint64_t meta0 = kSbBytes + uint64_t(hosts) * kHostSlotBytes;
    const uint64_t E = extent_size(total);
    if (total < meta0 + E) return -ERANGE;
    uint64_t max_objects = o.max_objects;
    // names per host: one host may fill the whole data region, so twice version 1's share
    if (!max_objects) max_objects = std::max<uint64_t>(256, (total - meta0) / hosts / 8192);
    if (max_objects > (1ull << 30)) return -EINVAL;
    names_geometry(max_objects, sb);
    sb->magic = kMagic;
    sb->version = kVersion;
    sb->sb_bytes = kSbBytes;
    sb->total_bytes = total;
    sb->max_hosts = hosts;
    sb->host_slot_bytes = kHostSlotBytes;
    sb->lease_slots = lease_slots;
    sb->host_table_off = kSbBytes;
    sb->claims_off = meta0;
    sb->names_off = meta0 + round_up(hosts * kSlotClaimBytes, 4096);
    sb->names_bytes = round_up(sb->name_slots * sizeof(NameEntry), 4096);
    sb->leases_off = sb->names_off + hosts * sb->names_bytes;
    sb->leases_bytes = round_up(lease_slots * sizeof(Lease), 4096);
    sb->extmap_off = sb->leases_off + hosts * sb->leases_bytes;
    sb->extmap_bytes = round_up((total / E + 31) / 32 * 8, kLine);
    sb->data_off = round_up(sb->extmap_off + hosts * sb->extmap_bytes, kDataAlign);
    if (sb->data_off >= total) return -ERANGE;
    sb->extent_bytes = E;
    sb->nextents = (total - sb->data_off) / E;
    if (sb->nextents < 1) return -ERANGE;
    if (sb->nextents > kMaxExtents) return -EINVAL;
    sb->data_bytes = sb->nextents * E;
    sb->nbackings = nbackings;
    sb->stripe_bytes = nbackings > 1 ? CXK_POOL_STRIPE_BYTES : 0;
    sb->lease_timeout_ns = uint64_t(o.lease_timeout_ms ? o.lease_timeout_ms : 10000) * 1000000;
    sb->created_ns = now_ns();
    if (sys_getrandom(sb->uuid, sizeof sb->uuid) != long(sizeof sb->uuid)) {
        uint64_t a = uint64_t(now_ns()) ^ (uint64_t(getpid()) << 32), b = boot_hash();
        std::memcpy(sb->uuid, &a, 8);
        std::memcpy(sb->uuid + 8, &b, 8);
    }
    sb->checksum = (1ull << 32) | crc32c(sb, offsetof(Superblock, checksum));
    return 0;
}

// Write the layout; the magic is stored last, after everything else is flushed, so a
// pool whose formatting was interrupted reads as blank.
int format(cxk_pool *p, const Superblock &sb, bool dirty) {
    p->geo = sb;
    Superblock *dst = reinterpret_cast<Superblock *>(p->base);
    if (dirty) std::memset(p->base, 0, sb.data_off);  // a device may hold old bytes
    for (uint32_t h = 0; h < sb.max_hosts; ++h) {
        HostSlot *s = slot(p, h);
        if (int r = init_mutex(&s->mutex)) return r;
        s->boot = kBootFresh;  // extent maps and claim lines are zero: nothing held, doors open
    }
    Superblock tmp = sb;
    tmp.magic = 0;
    std::memcpy(dst, &tmp, sizeof tmp);
    cxk_flush(p->base, sb.data_off);  // always: the medium may be shared before anyone opens
    cxk_sfence();
    st(&dst->magic, kMagic);
    cxk_flush(&dst->magic, 8);
    cxk_sfence();
    return 0;
}

bool all_zero(const uint8_t *b, size_t n) {
    for (size_t i = 0; i < n; ++i)
        if (b[i]) return false;
    return true;
}

// The superblock's own checksum; an upgraded pool whose rewrite of offset 0 was interrupted
// has a whole copy at kSbCopyOff (upgrade.cpp), read only when the word at 8 says version 2.
bool sb_whole(const Superblock &sb) {
    return sb.magic == kMagic && sb.version == kVersion &&
           sb.checksum == ((1ull << 32) | crc32c(&sb, offsetof(Superblock, checksum)));
}

namespace {
// One rule of a superblock's geometry and what breaks it, for the caller's message.
struct Rule {
    bool ok;
    const char *why;
};

// The geometry's rules in order; the first broken one, or nullptr. pre: a whole superblock.
const char *broken_rule(const Superblock &sb) {
    const uint64_t T = sb.total_bytes, H = sb.max_hosts, E = sb.extent_bytes;
    // every size is at most the pool before it is multiplied by H (<= 64): no overflow
    const bool small = sb.names_bytes <= T && sb.leases_bytes <= T && sb.extmap_bytes <= T &&
                       sb.claims_off <= T && sb.names_off <= T && sb.leases_off <= T &&
                       sb.extmap_off <= T && sb.data_off <= T && sb.name_slots <= T &&
                       sb.lease_slots <= T;
    const uint64_t slots_end = kSbBytes + H * kHostSlotBytes;
    // a fresh pool: slots, claim lines, names, leases, maps, data; a pool upgraded from v1
    // keeps v1's regions and puts the claim lines and maps after the data (upgrade.cpp)
    const bool tail = sb.claims_off >= sb.data_off;
    const bool ordered =
        tail ? sb.names_off >= slots_end && sb.data_off >= sb.leases_off + H * sb.leases_bytes &&
                   sb.claims_off >= sb.data_off + sb.data_bytes &&
                   sb.extmap_off >= sb.claims_off + H * kSlotClaimBytes &&
                   sb.extmap_off + H * sb.extmap_bytes <= T
             : sb.claims_off >= slots_end && sb.names_off >= sb.claims_off + H * kSlotClaimBytes &&
                   sb.extmap_off >= sb.leases_off + H * sb.leases_bytes &&
                   sb.data_off >= sb.extmap_off + H * sb.extmap_bytes;
    const Rule rules[] = {
        {sb.sb_bytes == kSbBytes, "sb_bytes is not 4096"},
        {sb.host_slot_bytes == kHostSlotBytes, "host_slot_bytes is not 4096"},
        {H >= 1 && H <= kMaxHosts, "max_hosts is not 1..64"},
        {sb.levels == kLevels && sb.bucket_slots == kBucketSlots,
         "levels or bucket_slots is not this format's"},
        {small, "a region offset or size is larger than total_bytes"},
        {sb.host_table_off == kSbBytes, "host_table_off is not 4096"},
        {ordered, "the regions (claims, names, leases, extent maps, data) overlap or are out "
                  "of order"},
        {sb.claims_off % kLine == 0, "claims_off is not 64-byte aligned"},
        {sb.names_bytes >= sb.name_slots * sizeof(NameEntry), "names_bytes is below name_slots"},
        {sb.leases_off >= sb.names_off + H * sb.names_bytes, "leases_off overlaps the names"},
        {sb.leases_bytes >= sb.lease_slots * sizeof(Lease), "leases_bytes is below lease_slots"},
        {sb.extmap_off % kLine == 0 && sb.extmap_bytes % kLine == 0,
         "extmap_off or extmap_bytes is not 64-byte aligned"},
        {E >= kMinExtent && E <= kMaxExtent && (E & (E - 1)) == 0,
         "extent_bytes is not a power of two in 64 KiB..64 MiB"},
        {sb.nextents >= 1 && sb.nextents <= kMaxExtents, "nextents is 0 or too large"},
        {sb.extmap_bytes >= (sb.nextents + 31) / 32 * 8, "extmap_bytes is below nextents"},
        {sb.data_bytes == sb.nextents * E, "data_bytes is not nextents x extent_bytes"},
        {sb.data_bytes <= T - sb.data_off, "the data region ends past total_bytes"},
        // extents are claimed, reserved and mapped in 64 KiB units from data_off
        {sb.data_off % kDataAlign == 0, "data_off is not 64 KiB-aligned"},
        {sb.lease_timeout_ns > 0, "lease_timeout_ns is 0"},
    };
    for (const Rule &r : rules)
        if (!r.ok) return r.why;
    // the name table: every level has buckets (lookups divide by them) and the entries they
    // hold are the table's, which holds max_objects names
    uint64_t buckets = 0;
    for (uint32_t l = 0; l < kLevels; ++l) {
        if (sb.level_buckets[l] == 0) return "a name-table level has no buckets";
        buckets += sb.level_buckets[l];
    }
    if (sb.name_slots != buckets * kBucketSlots) return "name_slots does not match the buckets";
    if (sb.max_objects == 0 || sb.max_objects > sb.name_slots)
        return "max_objects is 0 or above name_slots";
    return nullptr;
}
}  // namespace

// Read-only checks of a mapped superblock against the mapping.
int validate(const uint8_t *base, uint64_t mapped, uint32_t nbackings, Superblock *out,
             const char **why) {
    Superblock sb;
    std::memcpy(&sb, base, sizeof sb);
    if (why) *why = nullptr;
    if (sb.magic != kMagic) return -EMEDIUMTYPE;
    if (sb.version != kVersion) return -EPROTONOSUPPORT;  // version 1 included: never misread
    if (!sb_whole(sb)) {
        std::memcpy(&sb, base + kSbCopyOff, sizeof sb);
        if (!sb_whole(sb)) {
            if (why) *why = "checksum does not match its bytes";
            return -EBADMSG;
        }
    }
    if (sb.total_bytes > mapped) return -ENXIO;  // the file was cut short (truncated)
    if (const char *w = broken_rule(sb)) {
        if (why) *why = w;
        return -EBADMSG;
    }
    if (sb.total_bytes < mapped && sb.nbackings != nbackings) {
        if (why) *why = "nbackings does not match the backings' size";
        return -EBADMSG;
    }
    if (sb.nbackings != nbackings) return -EINVAL;  // opened with the wrong backing list
    *out = sb;
    return 0;
}

}  // namespace cxk::pool
