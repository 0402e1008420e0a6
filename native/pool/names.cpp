// pool_names.cpp — the per-host name table: a fixed-capacity multi-level hash (prime bucket
// count per level, buckets of kBucketSlots entries; the last level probes linearly so an
// insert fails only when the table is really full), seqlocked entries, and the name hash.
#include <sched.h>
#include <time.h>

#include <cstring>

#include "pool/pool.h"

namespace cxk::pool {
namespace {

bool is_prime(uint64_t n) {
    if (n < 2) return false;
    for (uint64_t d = 2; d * d <= n; ++d)
        if (n % d == 0) return false;
    return true;
}
uint64_t next_prime(uint64_t n) {
    while (!is_prime(n)) ++n;
    return n;
}

}  // namespace

uint64_t name_hash(const char *name, size_t len) {
    uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a, then the murmur3 finaliser to spread bits
    for (size_t i = 0; i < len; ++i) h = (h ^ uint8_t(name[i])) * 0x100000001b3ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h;
}

void names_geometry(uint64_t max_objects, Superblock *sb) {
    // 25% slack over max_objects; levels take 1/2, 1/4, 1/8, 1/8 of the buckets.
    uint64_t buckets = (max_objects + max_objects / 4 + kBucketSlots - 1) / kBucketSlots + 1;
    const uint64_t share[kLevels] = {buckets / 2, buckets / 4, buckets / 8, buckets / 8};
    sb->levels = kLevels;
    sb->bucket_slots = kBucketSlots;
    uint64_t total = 0;
    for (uint32_t l = 0; l < kLevels; ++l) {
        sb->level_buckets[l] = uint32_t(next_prime(share[l] < 2 ? 2 : share[l]));
        total += sb->level_buckets[l];
    }
    sb->name_slots = total * kBucketSlots;
    sb->max_objects = max_objects;
}

uint64_t level_base(const Superblock &g, uint32_t level) {
    uint64_t b = 0;
    for (uint32_t l = 0; l < level; ++l) b += uint64_t(g.level_buckets[l]) * g.bucket_slots;
    return b;
}

int64_t names_slot(const cxk_pool *p, uint64_t hash) {
    const Superblock &g = p->geo;
    NameEntry *t = names(p, p->host);
    auto usable = [&](uint64_t i) {
        uint32_t s = ldr(&t[i].state);
        return s == kEmpty || s == kTomb;
    };
    for (uint32_t l = 0; l + 1 < g.levels; ++l) {
        uint64_t first = level_base(g, l) + (hash % g.level_buckets[l]) * g.bucket_slots;
        for (uint32_t s = 0; s < g.bucket_slots; ++s)
            if (usable(first + s)) return int64_t(first + s);
    }
    const uint32_t l = g.levels - 1;
    const uint64_t nb = g.level_buckets[l], b0 = hash % nb, base = level_base(g, l);
    for (uint64_t i = 0; i < nb; ++i) {
        uint64_t first = base + ((b0 + i) % nb) * g.bucket_slots;
        for (uint32_t s = 0; s < g.bucket_slots; ++s)
            if (usable(first + s)) return int64_t(first + s);
    }
    return -ENOSPC;
}

void entry_write(const cxk_pool *p, NameEntry *e, uint64_t hash, uint64_t block, uint64_t gen,
                 uint32_t state) {
    uint32_t s = ldr(&e->seq);
    if (s & 1) ++s;  // a writer died mid-write; recovery calls us to fix the entry
    str(&e->seq, s + 1);
    // release fence: the odd seq is ordered before the field stores; pairs with the
    // reader's acquire fence before it re-reads seq
    __atomic_thread_fence(__ATOMIC_RELEASE);
    str(&e->hash, hash);
    str(&e->block, block);
    str(&e->gen, gen);
    str(&e->state, state);
    // release: the fields are visible before the even seq; pairs with the reader's
    // acquire load of seq
    st(&e->seq, s + 2);
    sync_out(p, e, sizeof *e);
}

bool entry_read(const cxk_pool *p, uint32_t h, uint64_t i, EntryView *v) {
    NameEntry *e = &names(p, h)[i];
    // A writer holds its host lock for microseconds; one that stays odd for 100 ms has died
    // mid-write, or the word was written by someone else (its host's recovery rewrites the
    // entry). Bounded by time, not by tries: on a loaded machine every sched_yield may give
    // the CPU away for a whole time slice, and 200,000 of them were minutes.
    struct timespec t0 = {0, 0}, now;
    for (int tries = 0;; ++tries) {
        if (tries == 64) clock_gettime(CLOCK_MONOTONIC, &t0);
        if (tries > 64) {
            clock_gettime(CLOCK_MONOTONIC, &now);
            if ((now.tv_sec - t0.tv_sec) * 1000000000ll + (now.tv_nsec - t0.tv_nsec) >
                100000000ll)
                return false;
            sched_yield();
        }
        if (h != p->host) sync_in(p, e, sizeof *e);
        uint32_t s1 = ld(&e->seq);  // acquire pairs with the writer's release store of seq
        if (s1 & 1) continue;
        v->hash = ldr(&e->hash);
        v->block = ldr(&e->block);
        v->gen = ldr(&e->gen);
        v->state = ldr(&e->state);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);  // pairs with the writer's release fence
        if (ldr(&e->seq) == s1) {
            v->index = i;
            return true;
        }
    }
}

}  // namespace cxk::pool
