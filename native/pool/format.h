// pool_format.h — private: the on-media layout of a pool, version 2 (docs/pool-format.md).
// Every struct here lives in shared memory; each field says who writes it. All offsets are
// u64 bytes from the pool base. Changing any layout means a new kVersion.
#pragma once
#include <pthread.h>

#include "cxlkit.h"

#include <cstddef>
#include <cstdint>

namespace cxk::pool {

constexpr uint64_t kMagic = 0x4c4f4f504b4c5843ull;  // "CXLKPOOL" little-endian
constexpr uint32_t kVersion = 2;
static_assert(kVersion == CXK_POOL_FORMAT_VERSION, "the C ABI names the version");
constexpr uint32_t kVersion1 = 1;      // fixed per-host partitions: refused (never misread)
constexpr uint32_t kObjMagic = 0x4f4b5843u;           // "CXKO"
constexpr uint64_t kLine = 64;
constexpr uint64_t kSbBytes = 4096;
constexpr uint64_t kHostSlotBytes = 4096;
constexpr uint32_t kMaxHosts = 64;
constexpr uint32_t kLevels = 4;        // name-table levels
constexpr uint32_t kBucketSlots = 4;   // entries per bucket (two cache lines)
constexpr uint32_t kNameMax = 255;
constexpr uint32_t kTagMax = 31;
constexpr uint64_t kObjHeaderBytes = 320;
constexpr uint64_t kMinBlock = kObjHeaderBytes + kLine;
constexpr uint64_t kMinExtent = 64 * 1024;        // extent size bounds (a power of two)
constexpr uint64_t kMaxExtent = 64ull << 20;
constexpr uint64_t kExtentsTarget = 4096;         // extent size: pow2 >= data / this
constexpr uint64_t kMaxExtents = 1ull << 22;
constexpr uint64_t kSlotClaimBytes = 128;          // per-slot claim lines (door, x)
constexpr uint32_t kClasses = 64;      // allocator size classes: floor(log2(block bytes))
constexpr uint32_t kPendingMax = 128;  // destroyed objects waiting for readers' leases
constexpr uint32_t kCreatingMax = 288; // objects created but not yet published

// The largest bakery ticket a host can draw: a ticket is max(the others' tickets) + 1, so
// the largest grows by one per bakery entry at most and only while the bakery never drains;
// 2^56 entries take over 2000 years at one a microsecond. A larger number is no host's: it
// is skipped (not waited for, not drawn past), so a stray write cannot wrap tickets to 0.
constexpr uint64_t kTicketMax = 1ull << 56;

// Host slot boot word: the boot that last used the slot, or one of these.
constexpr uint64_t kBootFresh = 1;  // formatted: mutex initialised, never used
constexpr uint64_t kBootBusy = 2;   // a process is re-initialising the slot

enum ObjState : uint32_t { kFree = 0, kCreating = 1, kLive = 2, kDead = 3 };
enum EntryState : uint32_t { kEmpty = 0, kEntCreating = 1, kEntLive = 2, kTomb = 3 };

// Written once, when the pool is formatted; read-only afterwards (never modified by an open).
struct Superblock {
    uint64_t magic;
    uint32_t version;
    uint32_t sb_bytes;
    uint64_t total_bytes;          // bytes of the whole pool (all backings)
    uint8_t uuid[16];
    uint32_t max_hosts;
    uint32_t host_slot_bytes;
    uint32_t levels;
    uint32_t bucket_slots;
    uint32_t level_buckets[8];     // prime bucket count of each name-table level
    uint64_t name_slots;           // entries per host table = bucket_slots * sum(level_buckets)
    uint64_t max_objects;          // names per host (<= name_slots)
    uint64_t lease_slots;          // lease entries per host
    uint64_t host_table_off;
    uint64_t names_off;            // host h's table at names_off + h * names_bytes
    uint64_t names_bytes;
    uint64_t leases_off;           // host h's leases at leases_off + h * leases_bytes
    uint64_t leases_bytes;
    uint64_t data_off;             // extent e at data_off + e * extent_bytes
    uint64_t data_bytes;           // nextents * extent_bytes
    uint64_t stripe_bytes;         // 0 = one backing, else the interleave granule
    uint32_t nbackings;
    uint32_t reserved0;
    uint64_t lease_timeout_ns;     // a host whose heartbeat is older is dead
    int64_t created_ns;
    // version 2: extents claimed on demand, per-slot claim lines
    uint64_t extent_bytes;         // a power of two, kMinExtent..kMaxExtent
    uint64_t nextents;
    uint64_t extmap_off;           // host h's extent map at extmap_off + h * extmap_bytes
    uint64_t extmap_bytes;         // 2 bits per extent, whole lines
    uint64_t claims_off;           // slot h's claim lines at claims_off + h * kSlotClaimBytes
    uint64_t checksum;             // crc32c of the bytes before this field, | 1<<32
};
static_assert(sizeof(Superblock) == 248, "superblock layout");
static_assert(offsetof(Superblock, version) == 8, "version where v1 has it");
static_assert(offsetof(Superblock, extent_bytes) == 200, "v2 fields after v1's");
static_assert(offsetof(Superblock, checksum) == 240, "superblock checksum offset");
constexpr size_t kSbV1ChecksumOff = 200;  // where a v1 superblock keeps its checksum

// Extent map of one host: 2 bits per extent, 32 extents per u64 word, written by that host's
// processes only (under its lock; one 8-byte store per word). A run is a START followed by
// CONTs; its blocks form one chain. RESERVED is a claim not yet checked against the other
// hosts' maps (part of no run); a CONT not preceded by START/CONT is an orphan (a crash
// mid-change) and part of no run. Recovery clears both.
enum ExtState : uint64_t { kExtFree = 0, kExtReserved = 1, kExtCont = 2, kExtStart = 3 };

// Claim lines of one host slot, written by any newcomer that tries to claim the slot (the
// one exception to one writer per line: each is alone in its line, and every write is
// flushed at once and every read invalidated first). A splitter behind Fischer's delay
// (hosts.cpp): door 0 = the slot is free.
struct alignas(64) SlotClaim {
    uint64_t x;                    // the last claimer's random nonce
    uint64_t pad0[7];
    uint64_t door;                 // 0 = open; else CLOCK_REALTIME ns when a claimer closed it
    uint64_t pad1[7];
};
static_assert(sizeof(SlotClaim) == kSlotClaimBytes, "two lines");

// One per host, written by that host's processes only (they share a coherence domain and
// may use atomics on it). Other hosts read lines 0 and 1.
struct alignas(64) HostSlot {
    // line 0: identity and liveness, read by every host
    char tag[kTagMax + 1];         // the host's name ("" = never used)
    uint64_t boot;                 // atomic: boot hash of the host's current boot, kBoot*
    int64_t heartbeat_ns;          // CLOCK_REALTIME of the last heartbeat
    uint64_t epoch;                // boots seen (incremented at each slot re-initialisation)
    uint64_t lease_hwm;            // lease entries [0, lease_hwm) may be in use
    // line 1: Lamport's bakery registers for cross-host creation (single-writer registers):
    // choosing is 0 or 1, number 0 or a ticket <= kTicketMax, and both are 0 whenever no
    // process of the host is inside bakery_lock..bakery_unlock (the host lock is held there,
    // so a process that holds it clears what a crash or a stray write left; hosts.cpp).
    // Other hosts skip registers outside these ranges and wait a bounded time on the rest.
    uint64_t choosing;
    uint64_t number;
    uint64_t opener_pid;           // the process that last attached (for `pool hosts`)
    uint64_t pad1[5];
    // line 2: the robust process-shared lock of this host's processes
    union {
        pthread_mutex_t mutex;
        uint8_t mutex_bytes[64];
    };
    // line 3: allocator accounting (under the lock; derived from the block chain, rebuilt by
    // recovery when they are impossible (lock_host), when a create finds the name table full
    // by them but not by the chain, and by fsck --repair; fsck compares every host's)
    uint64_t used_bytes;           // blocks not FREE, headers included
    uint64_t free_bytes;
    uint64_t nlive;
    uint64_t ncreating;
    uint64_t ndead;
    uint64_t next_gen;             // generations are unique per host
    uint32_t npending;
    uint32_t ncreating_list;
    uint64_t ops;                  // mutations, for periodic sweeps
    // lines 4..11: free-list heads per size class (block offsets, 0 = empty)
    uint64_t free_head[kClasses];
    uint64_t pending[kPendingMax];     // DEAD blocks that readers still lease
    uint64_t creating[kCreatingMax];   // CREATING blocks, to reclaim those of dead creators
};
static_assert(sizeof(pthread_mutex_t) <= 64, "mutex fits one line");
static_assert(offsetof(HostSlot, choosing) == 64, "bakery line");
static_assert(offsetof(HostSlot, mutex) == 128, "mutex line");
static_assert(offsetof(HostSlot, used_bytes) == 192, "accounting line");
static_assert(offsetof(HostSlot, free_head) == 256, "free lists");
static_assert(sizeof(HostSlot) == kHostSlotBytes, "host slot is one page");

// Name-table entry, written by the owner host only under its lock; seq is odd while the
// entry changes (a seqlock for readers on every host).
struct NameEntry {
    uint64_t hash;
    uint64_t block;                // block offset (the object header)
    uint64_t gen;
    uint32_t seq;
    uint32_t state;                // EntryState
};
static_assert(sizeof(NameEntry) == 32, "two entries per line");

// Lease entry: a process of the table's host reads an object (which may be another host's).
// pid is claimed with a CAS among the host's processes; kClaiming marks it half-written.
struct Lease {
    uint64_t block;
    uint64_t gen;
    uint32_t pid;                  // 0 = free
    uint32_t obj_host;
    uint64_t pad;
};
static_assert(sizeof(Lease) == 32, "two leases per line");
constexpr uint32_t kClaiming = 0x80000000u;

// Object header = allocator block header; the payload follows at +kObjHeaderBytes.
// Written by the owner host only. Line 0 holds everything a reader validates.
struct ObjHeader {
    uint32_t magic;
    uint32_t state;                // atomic ObjState
    uint64_t block_bytes;          // this block, header included: the allocator chain
    uint64_t prev_bytes;           // boundary tag (derived)
    uint64_t nbytes;               // payload bytes
    uint64_t gen;
    uint64_t checksum;             // crc32c of the payload | 1<<32, 0 = none
    int64_t created_ns;
    uint32_t creator_pid;
    uint16_t name_len;
    uint16_t flags;                // kObj* bits
    union {
        struct {
            uint64_t next, prev;   // FREE blocks: the size-class list
        } link;
        char name[kNameMax + 1];
    };
};
// ObjHeader.flags: the payload was published with a checksum. A header whose checksum field
// is 0 while this is set has lost its checksum (reads and verify refuse it).
constexpr uint16_t kObjChecksummed = 1;
static_assert(offsetof(ObjHeader, name) == 64, "name starts on line 1");
static_assert(sizeof(ObjHeader) == kObjHeaderBytes, "object header is 5 lines");

}  // namespace cxk::pool
