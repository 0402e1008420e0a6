// recovery.cpp — this host's derived state rebuilt from its block chain (recover), the sweeps
// that reclaim objects of dead creators and dead objects nobody leases, and fsck over every
// host's part.
#include "pool/recovery.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <sys/stat.h>

#include "pool/checksum.h"
#include "pool/crash.h"
#include "pool/extents.h"
#include "pool/hosts.h"
#include "pool/objects.h"
#include "sys/sys.h"
#include "pool/leases.h"

namespace cxk::pool {

// ---- mutations of this host's tables (caller holds the host lock) ---------------------
void list_del(uint64_t *arr, uint32_t *n, uint64_t v) {
    for (uint32_t i = 0; i < *n; ++i)
        if (arr[i] == v) {
            arr[i] = arr[--*n];
            return;
        }
}

// The own-table entry that points at block (by the name in its header).
bool own_entry_of(const cxk_pool *p, uint64_t block, uint64_t *entry) {
    ObjHeader *o = hdr(p, block);
    bool hit = false;
    names_probe(p, p->host, name_hash(o->name, std::min<size_t>(o->name_len, kNameMax)), [&](const EntryView &v) {
        if (v.block != block) return false;
        *entry = v.index;
        hit = true;
        return true;
    });
    return hit;
}

// Remove a CREATING object whose creator died: entry, creating list, block.
void reclaim_creating(cxk_pool *p, uint64_t block) {
    HostSlot *s = slot(p, p->host);
    ObjHeader *o = hdr(p, block);
    uint64_t e;
    if (own_entry_of(p, block, &e)) {
        NameEntry *ne = &names(p, p->host)[e];
        entry_write(p, ne, ne->hash, 0, 0, kTomb);
    }
    st(&o->state, uint32_t(kDead));
    list_del(s->creating, &s->ncreating_list, block);
    s->ncreating--;
    free_block(p, block);
}

void sweep_creating(cxk_pool *p) {
    HostSlot *s = slot(p, p->host);
    for (uint32_t i = 0; i < s->ncreating_list;) {
        uint64_t b = s->creating[i];
        if (!own_block(p, b) || ld(&hdr(p, b)->state) != kCreating) {
            s->creating[i] = s->creating[--s->ncreating_list];  // not ours: recovery relists
            p->needs_recover = true;
        } else if (!pid_alive(hdr(p, b)->creator_pid)) {
            reclaim_creating(p, b);  // moves the last here
        } else {
            ++i;
        }
    }
}

// DEAD blocks that found the pending list full are known to the chain only: bring them into
// the list once it has room, else they would stay DEAD until a repair.
void refill_pending(cxk_pool *p) {
    HostSlot *s = slot(p, p->host);
    std::vector<WalkBlock> blocks;
    if (!walk(p, p->host, &blocks)) return;  // recovery's business
    std::unordered_set<uint64_t> listed(s->pending, s->pending + s->npending);
    for (const auto &b : blocks)
        if (b.state == kDead && s->npending < kPendingMax && !listed.count(b.off))
            s->pending[s->npending++] = b.off;
}

// Free the DEAD blocks nobody leases any more. ndead counts every DEAD block, listed or not.
void sweep_pending(cxk_pool *p) {
    HostSlot *s = slot(p, p->host);
    for (;;) {
        if (s->ndead > s->npending && s->npending < kPendingMax) refill_pending(p);
        const uint64_t before = s->ndead;
        for (uint32_t i = 0; i < s->npending;) {
            uint64_t b = s->pending[i];
            if (!own_block(p, b) || ld(&hdr(p, b)->state) != kDead) {
                s->pending[i] = s->pending[--s->npending];  // not ours: recovery relists
                p->needs_recover = true;
            } else if (!leased(p, b, hdr(p, b)->gen)) {
                s->pending[i] = s->pending[--s->npending];
                s->ndead--;
                free_block(p, b);
            } else {
                ++i;
            }
        }
        // some were freed and more wait outside the list: another round
        if (s->ndead == before || s->ndead <= s->npending) return;
    }
}

namespace {
// What a host's counters (slot line 3) say, and what its block chain says they must be.
struct Counts {
    uint64_t nlive = 0, ncreating = 0, ndead = 0, used = 0, free = 0, next_gen = 0;
    bool matches(const Counts &o) const {
        return nlive == o.nlive && ncreating == o.ncreating && ndead == o.ndead &&
               used == o.used && free == o.free;
    }
    bool same(const Counts &o) const { return matches(o) && next_gen == o.next_gen; }
};

Counts counters_of(const cxk_pool *p, uint32_t h) {
    HostSlot *s = slot(p, h);
    if (h != p->host) sync_in(p, &s->used_bytes, kLine);
    Counts c;
    c.nlive = ld(&s->nlive), c.ncreating = ld(&s->ncreating), c.ndead = ld(&s->ndead);
    c.used = ld(&s->used_bytes), c.free = ld(&s->free_bytes), c.next_gen = ld(&s->next_gen);
    return c;
}

// The counts of a walked chain (the walk checked every block_bytes against its run).
Counts chain_counts(const cxk_pool *p, const std::vector<WalkBlock> &blocks) {
    Counts c;
    for (const auto &b : blocks) {
        const uint64_t bytes = ld(&hdr(p, b.off)->block_bytes);
        if (b.state == kFree) {
            c.free += bytes;
            continue;
        }
        c.used += bytes;
        if (b.state == kLive) c.nlive++;
        else if (b.state == kCreating) c.ncreating++;
        else if (b.state == kDead) c.ndead++;
    }
    return c;
}
}  // namespace

bool counters_impossible(const cxk_pool *p) {
    const HostSlot *s = slot(p, p->host);
    const uint64_t names = p->geo.max_objects, data = p->geo.data_bytes;
    const uint64_t nlive = ldr(&s->nlive), ncreating = ldr(&s->ncreating), ndead = ldr(&s->ndead);
    const uint64_t used = ldr(&s->used_bytes), free_ = ldr(&s->free_bytes);
    if (nlive > names || ncreating > names || nlive + ncreating > names) return true;
    if (ncreating < ldr(&s->ncreating_list) || ndead < ldr(&s->npending)) return true;
    if (used > data || free_ > data || used + free_ > data) return true;
    // every held block has kMinBlock bytes at least (ndead first: a huge one wraps the sum)
    return ndead > data / kMinBlock || nlive + ncreating + ndead > used / kMinBlock;
}

int counters_heal(cxk_pool *p) {
    std::vector<WalkBlock> blocks;
    if (!walk(p, p->host, &blocks)) return -EBADMSG;
    if (chain_counts(p, blocks).matches(counters_of(p, p->host))) return 0;
    return recover(p, nullptr);
}

namespace {
// recover, phase 1: blocks nobody can own any more become FREE (objects of dead creators,
// DEAD objects nobody leases).
void reclaim_unowned(cxk_pool *p, std::vector<WalkBlock> &blocks, cxk_fsck_report *r) {
    for (auto &b : blocks) {
        ObjHeader *o = hdr(p, b.off);
        const bool orphan = b.state == kCreating && !pid_alive(o->creator_pid);
        if (!orphan && !(b.state == kDead && !leased(p, b.off, b.gen))) continue;
        r->reclaimed_objects++;
        r->reclaimed_bytes += o->block_bytes;
        st(&o->state, uint32_t(kFree));
        b.state = kFree;
    }
}

// recover, phase 2: coalesce runs of FREE blocks (each merge is one store of block_bytes, so
// a crash here is recovered the same way), rebuild the free lists, boundary tags, counters
// and the pending / creating lists. Returns the held (CREATING / LIVE / DEAD) blocks.
std::vector<WalkBlock> rebuild_lists(cxk_pool *p, const std::vector<WalkBlock> &blocks) {
    HostSlot *s = slot(p, p->host);
    std::memset(s->free_head, 0, sizeof s->free_head);
    s->used_bytes = s->free_bytes = s->nlive = s->ncreating = s->ndead = 0;
    s->npending = s->ncreating_list = 0;
    uint64_t max_gen = s->next_gen, prev_bytes = 0, run = 0;
    std::vector<WalkBlock> kept;
    auto close_run = [&] {
        if (!run) return;
        free_list_push(p, s, run);
        s->free_bytes += hdr(p, run)->block_bytes;
        prev_bytes = hdr(p, run)->block_bytes;
        run = 0;
    };
    for (const auto &b : blocks) {
        ObjHeader *o = hdr(p, b.off);
        if (b.run_start) {  // blocks of two runs never merge, and a run has no predecessor
            close_run();
            prev_bytes = 0;
        }
        if (b.state == kFree) {
            if (run) {
                st(&hdr(p, run)->block_bytes, hdr(p, run)->block_bytes + o->block_bytes);
            } else {
                run = b.off;
                o->prev_bytes = prev_bytes;
            }
            continue;
        }
        close_run();
        o->prev_bytes = prev_bytes;
        prev_bytes = o->block_bytes;
        s->used_bytes += o->block_bytes;
        max_gen = std::max(max_gen, b.gen);
        kept.push_back(b);
        if (b.state == kLive) {
            s->nlive++;
        } else if (b.state == kCreating) {
            s->ncreating++;
            if (s->ncreating_list < kCreatingMax) s->creating[s->ncreating_list++] = b.off;
        } else if (b.state == kDead) {
            s->ndead++;
            if (s->npending < kPendingMax) s->pending[s->npending++] = b.off;
        }
    }
    close_run();
    s->next_gen = max_gen;
    return kept;
}

// The hash a name entry of a held block must carry, or false when its header's name cannot be
// trusted (length out of range).
bool header_hash(const cxk_pool *p, uint64_t block, uint64_t *hash) {
    const ObjHeader *o = hdr(p, block);
    if (o->name_len == 0 || o->name_len > kNameMax) return false;
    *hash = name_hash(o->name, o->name_len);
    return true;
}

// recover, phase 3: keep the name entries that match a held block (offset, generation,
// state and the hash of its name), drop the rest, re-enter held blocks that lost theirs.
void rebuild_entries(cxk_pool *p, const std::vector<WalkBlock> &kept, cxk_fsck_report *r) {
    std::unordered_map<uint64_t, const WalkBlock *> held;  // CREATING/LIVE by offset
    for (const auto &b : kept)
        if (b.state == kLive || b.state == kCreating) held[b.off] = &b;
    NameEntry *t = names(p, p->host);
    std::unordered_set<uint64_t> entered;
    for (uint64_t i = 0; i < p->geo.name_slots; ++i) {
        NameEntry *e = &t[i];
        const uint32_t state = ldr(&e->state);
        const bool torn = ldr(&e->seq) & 1;
        if (!torn && (state == kEmpty || state == kTomb)) continue;
        auto it = held.find(ldr(&e->block));
        uint64_t hash = 0;
        const bool ok = !torn && it != held.end() && it->second->gen == ldr(&e->gen) &&
                        !entered.count(it->first) &&
                        (state == kEntLive) == (it->second->state == kLive) &&
                        header_hash(p, it->first, &hash) && hash == ldr(&e->hash);
        if (ok) {
            entered.insert(it->first);
            continue;
        }
        entry_write(p, e, ldr(&e->hash), 0, 0, kTomb);
        r->repaired_entries++;
    }
    for (auto &kv : held) {
        if (entered.count(kv.first)) continue;
        uint64_t hash;
        int64_t slot_i = header_hash(p, kv.first, &hash) ? names_slot(p, hash) : -EBADMSG;
        if (slot_i < 0) {
            r->errors++;  // a name we cannot read, or no room: the object stays unnamed
            continue;
        }
        entry_write(p, &t[slot_i], hash, kv.first, kv.second->gen,
                    kv.second->state == kLive ? kEntLive : kEntCreating);
        r->repaired_entries++;
    }
}
}  // namespace

// Rebuild this host's derived state from its block chain (the truth): clear dead
// processes' leases, then the three phases above. The bakery registers are not derived
// state: the lock clears stale ones (lock_host), and a caller may hold the bakery now.
int recover(cxk_pool *p, cxk_fsck_report *r) {
    HostSlot *s = slot(p, p->host);
    cxk_fsck_report local{};
    if (!r) r = &local;
    r->leases_expired += clean_leases(p);
    extmap_recover(p);  // claims and returns a crash cut short: the runs are whole again
    std::vector<WalkBlock> blocks;
    if (!walk(p, p->host, &blocks)) {
        r->errors++;
        return -EBADMSG;
    }
    if (!chain_counts(p, blocks).matches(counters_of(p, p->host))) r->counters_rebuilt++;
    reclaim_unowned(p, blocks, r);
    const std::vector<WalkBlock> kept = rebuild_lists(p, blocks);
    rebuild_entries(p, kept, r);
    // free blocks give their whole extents back, as a free would have: those inside a run
    // (which also finishes a return a crash cut short), then a run's free tail. The walk
    // above checked every block_bytes; a return only shortens the block it is at.
    std::vector<Run> runs;
    runs_of(p, p->host, &runs);
    for (const Run &run : runs) {
        const uint64_t end = ext_off(p, run.first + run.count);
        uint64_t off = ext_off(p, run.first);
        while (off + hdr(p, off)->block_bytes < end) {
            const uint64_t next = off + hdr(p, off)->block_bytes;
            if (ld(&hdr(p, off)->state) == kFree) extent_return_gap(p, off);
            off = next;
        }
        if (ld(&hdr(p, off)->state) == kFree) extent_trim(p, off);
    }
    p->needs_recover = false;
    sync_out(p, s, kHostSlotBytes);
    return 0;
}

namespace {
// A pool file cut shorter than the pool under us: report it instead of touching the missing
// pages (SIGBUS).
int fsck_backing_size(const cxk_pool *p) {
    if (p->file_fd < 0) return 0;
    struct stat st;
    if (int e = sys_fstat(p->file_fd, &st)) return e;
    const uint64_t need = p->geo.nbackings > 1 ? p->size / p->geo.nbackings : p->size;
    return uint64_t(st.st_size) < need ? -ENXIO : 0;
}

// A LIVE object's header as readers trust it: sane, a UTF-8 name, and a payload that matches
// its checksum when one is recorded (or claimed by the flags).
bool live_header_ok(const cxk_pool *p, uint32_t h, uint64_t block) {
    ObjHeader *o = hdr(p, block);
    if (!header_sane(p, h, block, o) || !utf8_valid(o->name, o->name_len)) return false;
    const int ck = checksum_state(o);
    if (ck == -EBADMSG) return false;
    if (ck == 0) {
        const uint8_t *payload = p->base + block + kObjHeaderBytes;
        if (h != p->host) sync_in(p, payload, o->nbytes);
        return ((1ull << 32) | crc32c(payload, o->nbytes)) == o->checksum;
    }
    return true;
}

void fsck_blocks(cxk_pool *p, uint32_t h, cxk_fsck_report *r,
                 std::unordered_map<std::string, int> *seen,
                 std::unordered_map<uint64_t, uint64_t> *gens) {
    std::vector<WalkBlock> blocks;
    if (!walk(p, h, &blocks)) r->errors++;
    for (const auto &b : blocks) {
        ObjHeader *o = hdr(p, b.off);
        switch (b.state) {
            case kFree:
                r->blocks_free++;
                r->bytes_free += o->block_bytes;
                r->largest_free = std::max<uint64_t>(r->largest_free, o->block_bytes);
                break;
            case kCreating: r->objects_creating++; break;
            case kLive: r->objects_live++; break;
            case kDead: r->objects_dead++; break;
            default: r->errors++;
        }
        if (b.state != kFree) r->bytes_used += o->block_bytes;
        if (b.state == kLive || b.state == kCreating) (*gens)[b.off] = b.gen;
        if (b.state == kLive) {
            if (h != p->host) sync_in(p, o, kObjHeaderBytes);
            if (!live_header_ok(p, h, b.off)) {
                r->errors++;
                continue;
            }
            if ((*seen)[std::string(o->name, o->name_len)]++) r->duplicate_names++;
        }
    }
}

// Every entry must point at a held block of its generation whose name has the entry's hash.
void fsck_entries(cxk_pool *p, uint32_t h, const std::unordered_map<uint64_t, uint64_t> &gens,
                  cxk_fsck_report *r) {
    EntryView v;
    for (uint64_t i = 0; i < p->geo.name_slots; ++i) {
        if (!entry_read(p, h, i, &v)) {
            r->errors++;
            continue;
        }
        if (v.state != kEntLive && v.state != kEntCreating) continue;
        auto it = gens.find(v.block);
        if (it == gens.end() || it->second != v.gen) {
            // a live host may have changed it since our walk: read its header once more. A
            // gen that differs from the entry's is a block reused since; the entry's gen on
            // a CREATING or LIVE header is an object created since (the two-guest claims test
            // counted one error: the other guest made its checked- marker between this walk
            // of its chain and this read of its table)
            if (h != p->host && host_alive(p, h) && block_run_end(p, h, v.block)) {
                const ObjHeader *o = hdr(p, v.block);
                sync_in(p, o, kLine);
                const uint32_t state = ld(&o->state);
                if (ld(&o->gen) != v.gen) continue;
                if ((state == kCreating || state == kLive) && header_sane(p, h, v.block, o))
                    continue;
            }
            r->errors++;
            continue;
        }
        const ObjHeader *o = hdr(p, v.block);
        // the walk synced in line 0 only (and fsck_blocks the headers of LIVE blocks): the
        // name of another host's CREATING block may be a stale copy of a former object's
        if (h != p->host) sync_in(p, o, kObjHeaderBytes);
        const uint16_t nl = o->name_len;
        if (nl == 0 || nl > kNameMax || name_hash(o->name, nl) != v.hash) {
            if (h != p->host && host_alive(p, h) && ld(&o->gen) != v.gen) continue;  // reused
            r->errors++;
        }
    }
}

// Host h's counters disagree with its chain. Another host (or another process of ours: fsck
// holds no lock here) changes both, the counters a moment later (under coherence "none" at
// its unlock): a walk counts only when the counters read the same before and after it,
// next_gen included (a create bumps it; every other change moves a count or the bytes one
// way), and the disagreement only when three such walks in a row find it.
bool counters_disagree(const cxk_pool *p, uint32_t h) {
    for (int i = 0; i < 3; ++i) {
        std::vector<WalkBlock> blocks;
        const Counts before = counters_of(p, h);
        if (!walk(p, h, &blocks)) return false;  // a broken chain: counted in errors
        if (chain_counts(p, blocks).matches(before) || !before.same(counters_of(p, h)))
            return false;
    }
    return true;
}

void fsck_registers(const cxk_pool *p, uint32_t h, cxk_fsck_report *r) {
    HostSlot *s = slot(p, h);
    if (h != p->host) sync_in(p, &s->choosing, kLine);
    if (!bakery_registers_legal(ld(&s->choosing), ld(&s->number))) r->registers_bad++;
}

void fsck_leases(cxk_pool *p, uint32_t h, cxk_fsck_report *r) {
    HostSlot *s = slot(p, h);
    const uint64_t hwm = std::min<uint64_t>(ld(&s->lease_hwm), p->geo.lease_slots);
    Lease *t = leases(p, h);
    if (h != p->host) sync_in(p, t, hwm * sizeof(Lease));
    const bool alive = host_alive(p, h);
    for (uint64_t i = 0; i < hwm; ++i) {
        const uint32_t pid = ld(&t[i].pid);
        if (!pid) continue;
        const bool live = h == p->host ? pid_alive(pid & ~kClaiming) : alive;
        (live ? r->leases_live : r->leases_expired)++;
    }
}
}  // namespace

}  // namespace cxk::pool

using namespace cxk::pool;

extern "C" {

int cxk_pool_fsck(cxk_pool *p, unsigned flags, struct cxk_fsck_report *r) {
    if (p && p->read_only_v1 && (flags & CXK_FSCK_REPAIR)) return -EROFS;  // version 1 view
    if (!p || !r || (flags & ~CXK_FSCK_REPAIR)) return -EINVAL;
    std::memset(r, 0, sizeof *r);
    if (int e = fsck_backing_size(p)) return e;
    if (flags & CXK_FSCK_REPAIR) {
        HostLock lk(p);
        if (lk.err) return lk.err;
        recover(p, r);  // a broken chain is counted in r->errors and reported below too
    }
    std::unordered_map<std::string, int> seen;
    r->errors += extents_overlapping(p);  // an extent in two hosts' runs
    for (uint32_t h = 0; h < p->geo.max_hosts; ++h) {
        if (!host_used(p, h)) continue;
        std::unordered_map<uint64_t, uint64_t> gens;  // held block -> gen
        const uint64_t named = r->objects_live + r->objects_creating;
        fsck_blocks(p, h, r, &seen, &gens);
        // more names than the superblock lets a host hold: the superblock and the tables
        // disagree (one was rewritten), and creates are refused as full
        if (r->objects_live + r->objects_creating - named > p->geo.max_objects) r->errors++;
        if (counters_disagree(p, h)) r->counters_wrong++;
        fsck_registers(p, h, r);
        crash_point(Crash::fsck_entries);  // tests stop here while another host creates
        fsck_entries(p, h, gens, r);
        fsck_leases(p, h, r);
    }
    return 0;
}

}  // extern "C"
