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

#include "pool/hosts.h"
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
    names_probe(p, p->host, name_hash(o->name, o->name_len), [&](const EntryView &v) {
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
        if (!pid_alive(hdr(p, b)->creator_pid)) reclaim_creating(p, b);  // moves the last here
        else ++i;
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
            if (!leased(p, b, hdr(p, b)->gen)) {
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

// Rebuild this host's derived state from its block chain (the truth): free lists and
// counters, name entries, pending and creating lists; reclaim objects of dead creators and
// dead objects nobody leases; reset our bakery registers; clear dead processes' leases.
int recover(cxk_pool *p, cxk_fsck_report *r) {
    HostSlot *s = slot(p, p->host);
    cxk_fsck_report local{};
    if (!r) r = &local;
    st(&s->choosing, uint64_t(0));
    st(&s->number, uint64_t(0));
    sync_out(p, &s->choosing, kLine);
    r->leases_expired += clean_leases(p);

    std::vector<WalkBlock> blocks;
    if (!walk(p, p->host, &blocks)) {
        r->errors++;
        return -EBADMSG;
    }
    // Blocks to reclaim become FREE first; then one pass coalesces runs of free blocks
    // (each merge is one store of block_bytes, so a crash here is recovered the same way).
    for (auto &b : blocks) {
        ObjHeader *o = hdr(p, b.off);
        if (b.state == kCreating && !pid_alive(o->creator_pid)) {
            r->reclaimed_objects++;
            r->reclaimed_bytes += o->block_bytes;
            st(&o->state, uint32_t(kFree));
            b.state = kFree;
        } else if (b.state == kDead && !leased(p, b.off, b.gen)) {
            r->reclaimed_objects++;
            r->reclaimed_bytes += o->block_bytes;
            st(&o->state, uint32_t(kFree));
            b.state = kFree;
        }
    }
    std::memset(s->free_head, 0, sizeof s->free_head);
    s->used_bytes = s->free_bytes = s->nlive = s->ncreating = s->ndead = 0;
    s->npending = s->ncreating_list = 0;
    uint64_t max_gen = s->next_gen;
    std::unordered_map<uint64_t, const WalkBlock *> held;  // CREATING/LIVE by offset
    std::vector<WalkBlock> kept;
    uint64_t prev_bytes = 0, run = 0;
    auto close_run = [&] {
        if (!run) return;
        ObjHeader *o = hdr(p, run);
        uint32_t c = 63u - uint32_t(__builtin_clzll(o->block_bytes));
        o->link.prev = 0;
        o->link.next = s->free_head[c];
        if (s->free_head[c]) hdr(p, s->free_head[c])->link.prev = run;
        s->free_head[c] = run;
        s->free_bytes += o->block_bytes;
        prev_bytes = o->block_bytes;
        run = 0;
    };
    for (auto &b : blocks) {
        ObjHeader *o = hdr(p, b.off);
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
        if (b.state == kLive) s->nlive++;
        else if (b.state == kCreating) {
            s->ncreating++;
            if (s->ncreating_list < kCreatingMax) s->creating[s->ncreating_list++] = b.off;
        } else if (b.state == kDead) {
            s->ndead++;
            if (s->npending < kPendingMax) s->pending[s->npending++] = b.off;
        }
    }
    close_run();
    s->next_gen = max_gen;
    for (auto &b : kept)
        if (b.state == kLive || b.state == kCreating) held[b.off] = &b;

    // Name entries: keep those that match a held block, drop the rest, re-enter held
    // blocks that lost theirs.
    NameEntry *t = names(p, p->host);
    std::unordered_set<uint64_t> entered;
    for (uint64_t i = 0; i < p->geo.name_slots; ++i) {
        NameEntry *e = &t[i];
        const uint32_t state = ldr(&e->state);
        const bool torn = ldr(&e->seq) & 1;
        if (!torn && (state == kEmpty || state == kTomb)) continue;
        auto it = held.find(ldr(&e->block));
        const bool ok = !torn && it != held.end() && it->second->gen == ldr(&e->gen) &&
                        !entered.count(it->first) &&
                        (state == kEntLive) == (it->second->state == kLive);
        if (ok) {
            entered.insert(it->first);
            continue;
        }
        entry_write(p, e, ldr(&e->hash), 0, 0, kTomb);
        r->repaired_entries++;
    }
    for (auto &kv : held) {
        if (entered.count(kv.first)) continue;
        ObjHeader *o = hdr(p, kv.first);
        const uint64_t hash = name_hash(o->name, o->name_len);
        int64_t slot_i = names_slot(p, hash);
        if (slot_i < 0) {
            r->errors++;
            continue;
        }
        entry_write(p, &t[slot_i], hash, kv.first, kv.second->gen,
                    kv.second->state == kLive ? kEntLive : kEntCreating);
        r->repaired_entries++;
    }
    sync_out(p, s, kHostSlotBytes);
    return 0;
}

}  // namespace cxk::pool

using namespace cxk::pool;

extern "C" {

int cxk_pool_fsck(cxk_pool *p, unsigned flags, struct cxk_fsck_report *r) {
    if (!p || !r || (flags & ~CXK_FSCK_REPAIR)) return -EINVAL;
    std::memset(r, 0, sizeof *r);
    if (flags & CXK_FSCK_REPAIR) {
        HostLock lk(p);
        if (lk.err) return lk.err;
        recover(p, r);
    }
    std::unordered_map<std::string, int> seen;
    std::vector<WalkBlock> blocks;
    for (uint32_t h = 0; h < p->geo.max_hosts; ++h) {
        if (!host_used(p, h)) continue;
        blocks.clear();
        if (!walk(p, h, &blocks)) r->errors++;
        std::unordered_map<uint64_t, uint64_t> gens;  // held block -> gen
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
            if (b.state == kLive || b.state == kCreating) gens[b.off] = b.gen;
            if (b.state == kLive) {
                if (h != p->host) sync_in(p, o, kObjHeaderBytes);
                if (seen[std::string(o->name, o->name_len)]++) r->duplicate_names++;
            }
        }
        // every entry must point at a held block of its generation
        EntryView v;
        for (uint64_t i = 0; i < p->geo.name_slots; ++i) {
            if (!entry_read(p, h, i, &v)) {
                r->errors++;
                continue;
            }
            if (v.state != kEntLive && v.state != kEntCreating) continue;
            auto it = gens.find(v.block);
            if (it == gens.end() || it->second != v.gen) {
                // a live host may have changed it since our walk: read it once more
                ObjHeader *o = hdr(p, v.block);
                if (h != p->host && host_alive(p, h) && v.block >= part_begin(p, h) &&
                    v.block < part_end(p, h) && ld(&o->gen) != v.gen)
                    continue;
                r->errors++;
            }
        }
        // leases held by this host's processes
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
    return 0;
}

}  // extern "C"
