// pool.h — private: the pool handle and what every file of native/pool shares: shared-memory
// access helpers (atomics + flush/invalidate for the non-coherent mode), the allocator, the
// name table and the backings. Each job's own declarations are in its own header.
#pragma once
#include <pthread.h>
#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "cxlkit.h"
#include "pool/format.h"
#include "prim/sim.h"

struct cxk_pool {
    uint8_t *base = nullptr;
    uint64_t size = 0;             // bytes mapped
    uint64_t align = 0;
    char kind[16] = {};
    int memfd = -1;                // kept open for memfd pools (closing it would free them)
    int file_fd = -1;              // backing 0 of a file pool: fsck checks its size (truncation)
    bool needs_recover = false;    // under the host lock: an op found derived state corrupt
    bool nc = false;               // coherence "none" (or "sim")
    bool read_only_v1 = false;     // a private view of a version 1 pool: writes -EROFS
    uint64_t epoch = 0;            // our slot's epoch since attach: a release bumps it (fence)
    // coherence "sim": base is this host's simulated view; the pool's own mapping
    cxk::sim::Map *sim = nullptr;
    uint8_t *sim_pool = nullptr;
    uint32_t host = 0;
    uint64_t boot = 0;
    pid_t pid = 0;                 // the opener (leases use the caller's pid: fork works)
    cxk::pool::Superblock geo{};   // validated copy of the superblock
    std::mutex lease_mu;           // guards my_leases
    std::vector<uint32_t> my_leases;  // this handle's lease entries (indices in our table)
    pthread_t heart{};             // heartbeat: keeps this host's leases alive for others
    bool heart_started = false;
    std::mutex heart_mu;
    std::condition_variable heart_cv;
    bool heart_go = false;         // under heart_mu: attached, start beating
    bool heart_stop = false;       // under heart_mu
    bool heart_ready = false;      // under heart_mu: the thread started and waits
};

namespace cxk::pool {

// ---- shared-memory access -------------------------------------------------------
template <class T> inline T ld(const T *a) { return __atomic_load_n(a, __ATOMIC_ACQUIRE); }
template <class T> inline T ldr(const T *a) { return __atomic_load_n(a, __ATOMIC_RELAXED); }
template <class T> inline void st(T *a, T v) { __atomic_store_n(a, v, __ATOMIC_RELEASE); }
template <class T> inline void str(T *a, T v) { __atomic_store_n(a, v, __ATOMIC_RELAXED); }

// Make our writes to [a, a+n) visible to other hosts (coherence "none": write back the
// lines), then a full fence so later stores and loads stay behind them.
void sync_out(const cxk_pool *p, const void *a, size_t n);
// Drop cached copies of [a, a+n) so the next loads see other hosts' writes.
void sync_in(const cxk_pool *p, const void *a, size_t n);

inline HostSlot *slot(const cxk_pool *p, uint32_t h) {
    return reinterpret_cast<HostSlot *>(p->base + p->geo.host_table_off + h * kHostSlotBytes);
}
inline NameEntry *names(const cxk_pool *p, uint32_t h) {
    return reinterpret_cast<NameEntry *>(p->base + p->geo.names_off + h * p->geo.names_bytes);
}
inline Lease *leases(const cxk_pool *p, uint32_t h) {
    return reinterpret_cast<Lease *>(p->base + p->geo.leases_off + h * p->geo.leases_bytes);
}
inline ObjHeader *hdr(const cxk_pool *p, uint64_t block) {
    return reinterpret_cast<ObjHeader *>(p->base + block);
}

// ---- extents (extents.cpp): the data region is claimed by hosts extent by extent ------
inline uint64_t *extmap(const cxk_pool *p, uint32_t h) {
    return reinterpret_cast<uint64_t *>(p->base + p->geo.extmap_off + h * p->geo.extmap_bytes);
}
inline SlotClaim *slot_claim(const cxk_pool *p, uint32_t h) {
    return reinterpret_cast<SlotClaim *>(p->base + p->geo.claims_off + h * kSlotClaimBytes);
}
inline uint64_t ext_off(const cxk_pool *p, uint64_t e) {
    return p->geo.data_off + e * p->geo.extent_bytes;
}
// State of extent e in host h's map (lines of another host's map are synced in first).
uint32_t ext_state(const cxk_pool *p, uint32_t h, uint64_t e);
// The run of host h that holds byte off: [*begin, *end) in pool offsets; false when off is
// in no run of h (outside the data region, a free, reserved or orphan extent).
bool run_at(const cxk_pool *p, uint32_t h, uint64_t off, uint64_t *begin, uint64_t *end);
// Is off a plausible block of this host's runs (a header fits, aligned, magic)? Every
// offset read from our slot's lists or a header's links is checked with it before use.
bool own_block(const cxk_pool *p, uint64_t off);
// The same, giving the run that holds it: [*begin, *end).
bool own_block(const cxk_pool *p, uint64_t off, uint64_t *begin, uint64_t *end);

uint64_t name_hash(const char *name, size_t len);
int64_t now_ns();
bool pid_alive(uint32_t pid);

// ---- allocator (alloc.cpp): this host's runs, caller holds the host lock -----------
// A run of extents is a chain of blocks, each starting with an ObjHeader; block_bytes links
// the chain and is only ever changed by one 8-byte store, so a crash at any point leaves a
// walkable chain. Free lists and counters are derived and rebuilt by recovery.
// block offset or -ENOSPC (no free block in our runs: the caller claims extents); corrupt
// free lists set p->needs_recover (the caller recovers)
int64_t alloc_block(cxk_pool *p, uint64_t need);
void free_block(cxk_pool *p, uint64_t block);      // block is CREATING or DEAD
// Push FREE block off on its size-class list of slot s (the one list push: alloc, recovery).
void free_list_push(cxk_pool *p, HostSlot *s, uint64_t off);
void free_list_remove(cxk_pool *p, HostSlot *s, uint64_t off);
// A FREE header of `bytes` at off (flushed: other hosts' walks read it).
void write_free_header(cxk_pool *p, uint64_t off, uint64_t bytes, uint64_t prev_bytes);
inline uint64_t block_need(uint64_t nbytes) {
    return (kObjHeaderBytes + nbytes + kLine - 1) & ~(kLine - 1);
}

struct WalkBlock {
    uint64_t off;
    uint32_t state;
    uint64_t gen;
    bool run_start;                // the first block of a run (coalescing stops here)
};
// Visit every block of host h's runs in order; returns false on a broken chain.
// Read-only (for other hosts' runs); the caller syncs in as needed.
bool walk(const cxk_pool *p, uint32_t h, std::vector<WalkBlock> *out);

// ---- name table (pool_names.cpp) ------------------------------------------------
// Geometry for max_objects names: prime bucket counts per level, written to the superblock.
void names_geometry(uint64_t max_objects, Superblock *sb);
// Slot for a new name in our table (first EMPTY or TOMB in probe order) or -ENOSPC.
int64_t names_slot(const cxk_pool *p, uint64_t hash);
// Seqlocked entry write by the owner host (under its lock).
void entry_write(const cxk_pool *p, NameEntry *e, uint64_t hash, uint64_t block, uint64_t gen,
                 uint32_t state);
struct EntryView {
    uint64_t hash, block, gen;
    uint32_t state;
    uint64_t index;
};
// Consistent snapshot of entry i of host h; false if it kept changing (a writer died
// mid-write: recovery fixes it) — treat as absent.
bool entry_read(const cxk_pool *p, uint32_t h, uint64_t i, EntryView *v);
// Call fn(view) for every CREATING/LIVE entry of host h whose hash matches, in probe order;
// fn returns true to stop.
template <class Fn> void names_probe(const cxk_pool *p, uint32_t h, uint64_t hash, Fn fn);
uint64_t level_base(const Superblock &g, uint32_t level);

template <class Fn> void names_probe(const cxk_pool *p, uint32_t h, uint64_t hash, Fn fn) {
    const Superblock &g = p->geo;
    EntryView v;
    for (uint32_t l = 0; l + 1 < g.levels; ++l) {
        uint64_t first = level_base(g, l) + (hash % g.level_buckets[l]) * g.bucket_slots;
        for (uint32_t s = 0; s < g.bucket_slots; ++s)
            if (entry_read(p, h, first + s, &v) && v.hash == hash &&
                (v.state == kEntCreating || v.state == kEntLive) && fn(v))
                return;
    }
    // last level: linear probing, ends at the first bucket holding an EMPTY entry
    const uint32_t l = g.levels - 1;
    const uint64_t nb = g.level_buckets[l], b0 = hash % nb, base = level_base(g, l);
    for (uint64_t i = 0; i < nb; ++i) {
        uint64_t first = base + ((b0 + i) % nb) * g.bucket_slots;
        bool empty_seen = false;
        for (uint32_t s = 0; s < g.bucket_slots; ++s) {
            if (!entry_read(p, h, first + s, &v)) continue;
            if (v.state == kEmpty) empty_seen = true;
            else if (v.hash == hash && (v.state == kEntCreating || v.state == kEntLive) && fn(v))
                return;
        }
        if (empty_seen) return;
    }
}

// ---- backings (pool_backing.cpp) ---------------------------------------------------
struct Backing {
    std::string path;
    int fd = -1;
    bool devdax = false;
    bool memfd = false;
    bool created = false;          // we made the file (tmp name, linked into place later)
    std::string tmp;               // temporary name while formatting
    uint64_t size = 0;
    uint64_t align = 0;
};
// Open or create one backing; size is the wanted size when creating (0: must exist). flags:
// CXK_POOL_EXCL (-EEXIST if it exists), CXK_POOL_SHARED (accept another owner or a
// group-writable file), CXK_POOL_OVERCOMMIT (no free-space check). Refuses with -EPERM a file
// of another owner (unless shared) or writable by every user; with -ENOENT a path directly
// under /dev (or /dev/dax*) that is not an existing device; with -ENOSPC a new file larger
// than its filesystem's free space.
int backing_open(Backing *b, bool create, unsigned flags, uint64_t size, uint32_t mode);
// Map the backings as one range (striped at CXK_POOL_STRIPE_BYTES when there are several).
int backings_map(std::vector<Backing> &bs, uint64_t total, uint64_t align, uint8_t **out);
// Publish created files under their real names (first the stripes, backing 0 last):
// -EEXIST when another process created the pool first.
int backings_link(std::vector<Backing> &bs);
void backings_discard(std::vector<Backing> &bs);
// An exclusive OFD lock on byte `at` of fd: it serialises the processes of one host (each
// host's kernel keeps its own locks) and the kernel drops it when its holder dies. Waits up
// to timeout_ns: 0, -ETIMEDOUT, or fcntl's -errno. Unlock by byte, or by closing fd.
int backing_lock(int fd, uint64_t at, int64_t timeout_ns);
void backing_unlock(int fd, uint64_t at);

}  // namespace cxk::pool
