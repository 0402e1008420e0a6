// release.cpp — host slots as a user sees them (cxk_pool_host_info: `cxlkit pool hosts`) and
// freeing a dead host's slot (cxk_pool_release: `cxlkit pool release`): its objects adopted
// by this host or dropped, its extents, names and leases freed, its slot claimable again.
// The one writer of another host's structures: a host declared dead never writes again.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "pool/extents.h"
#include "pool/hosts.h"
#include "pool/recovery.h"

namespace cxk::pool {
namespace {

uint32_t host_state(const cxk_pool *p, uint32_t h, int64_t *age) {
    HostSlot *s = slot(p, h);
    SlotClaim *c = slot_claim(p, h);
    sync_in(p, s, kLine);
    sync_in(p, &c->door, kLine);
    const uint64_t door = ld(&c->door);
    *age = -1;
    if (h == p->host) {
        *age = 0;
        return CXK_HOST_LIVE;
    }
    if (ld(&s->boot) == kBootFresh) {
        if (!door) return CXK_HOST_FREE;
        *age = now_ns() - int64_t(door);
        return CXK_HOST_CLAIMED;
    }
    *age = now_ns() - ld(&s->heartbeat_ns);
    return host_alive(p, h) ? CXK_HOST_LIVE : CXK_HOST_DEAD;
}

// Does a live reader (any live host's process) lease a block of host h's runs?
bool leases_on(const cxk_pool *p, uint32_t h) {
    for (uint32_t r = 0; r < p->geo.max_hosts; ++r) {
        if (r == h || !host_used(p, r) || !host_alive(p, r)) continue;
        HostSlot *s = slot(p, r);
        const uint64_t hwm = std::min<uint64_t>(ld(&s->lease_hwm), p->geo.lease_slots);
        Lease *t = leases(p, r);
        if (r != p->host) sync_in(p, t, hwm * sizeof(Lease));
        for (uint64_t i = 0; i < hwm; ++i) {
            const uint32_t pid = ld(&t[i].pid);
            if (!pid || (pid & kClaiming) || (r == p->host && !pid_alive(pid))) continue;
            uint64_t b, e;
            if (run_at(p, h, ldr(&t[i].block), &b, &e)) return true;
        }
    }
    return false;
}

// Host h's slot as formatting left it: no extents, names, leases or tag; a new mutex; the
// door opened last, when everything else is in the pool.
int reset_slot(cxk_pool *p, uint32_t h) {
    extmap_clear(p, h);
    std::memset(names(p, h), 0, p->geo.names_bytes);
    sync_out(p, names(p, h), p->geo.names_bytes);
    std::memset(leases(p, h), 0, p->geo.leases_bytes);
    sync_out(p, leases(p, h), p->geo.leases_bytes);
    HostSlot *s = slot(p, h);
    const uint64_t epoch = s->epoch;
    std::memset(static_cast<void *>(s), 0, sizeof *s);
    if (int r = init_mutex(&s->mutex)) return r;
    s->epoch = epoch + 1;
    st(&s->boot, kBootFresh);
    sync_out(p, s, kHostSlotBytes);
    SlotClaim *c = slot_claim(p, h);
    st(&c->x, uint64_t(0));
    sync_out(p, &c->x, kLine);
    st(&c->door, uint64_t(0));
    sync_out(p, &c->door, kLine);
    return 0;
}

// Host h's runs become ours: its CREATING objects (their creator died with it) are marked
// DEAD, then our recovery rebuilds lists and names from our chain, which now includes them.
int adopt(cxk_pool *p, uint32_t h) {
    // Our cache may hold lines of h's runs from before h wrote them (coherence "none": a
    // block we read, or extents we held once): take the pool's bytes before walking them and
    // before our recovery reads them as ours (found under --coherence-sim: the adopted
    // objects' headers were read stale and their names were lost).
    std::vector<Run> runs;
    runs_of(p, h, &runs);
    for (const Run &r : runs)
        sync_in(p, p->base + ext_off(p, r.first), r.count * p->geo.extent_bytes);
    std::vector<WalkBlock> blocks;
    if (!walk(p, h, &blocks)) return -EBADMSG;
    HostSlot *me = slot(p, p->host);
    uint64_t live = 0;
    for (const auto &b : blocks) live += b.state == kLive;
    if (me->nlive + me->ncreating + live > p->geo.max_objects) return -ENOSPC;
    extents_adopt(p, h);
    for (const auto &b : blocks)
        if (b.state == kCreating) {
            st(&hdr(p, b.off)->state, uint32_t(kDead));
            sync_out(p, hdr(p, b.off), kLine);
        }
    return recover(p, nullptr);
}

}  // namespace
}  // namespace cxk::pool

using namespace cxk::pool;

extern "C" {

int cxk_pool_host_info(cxk_pool *p, uint32_t h, struct cxk_pool_host *out) {
    if (!p || !out) return -EINVAL;
    if (h >= p->geo.max_hosts) return -EDOM;
    std::memset(out, 0, sizeof *out);
    out->slot = h;
    out->state = host_state(p, h, &out->heartbeat_age_ns);
    HostSlot *s = slot(p, h);
    if (h != p->host) sync_in(p, s, 4 * kLine);
    for (uint32_t i = 0; i < kTagMax && s->tag[i]; ++i) out->tag[i] = s->tag[i];
    out->pid = ld(&s->opener_pid);
    out->extents = extents_held(p, h);
    out->held_bytes = out->extents * p->geo.extent_bytes;
    out->used_bytes = std::min(ld(&s->used_bytes), out->held_bytes);
    out->objects = ld(&s->nlive);
    return 0;
}

int cxk_pool_release(cxk_pool *p, uint32_t h, unsigned flags) {
    if (!p || (flags & ~CXK_RELEASE_DROP)) return -EINVAL;
    if (p->read_only_v1) return -EROFS;  // a private view of a version 1 pool
    if (h >= p->geo.max_hosts) return -EDOM;
    if (h == p->host) return -EINVAL;
    HostLock lk(p);
    if (lk.err) return lk.err;
    if (int e = bakery_lock(p)) return e;  // no host claims extents while maps change hands
    int64_t age;
    const uint32_t state = host_state(p, h, &age);
    int r = 0;
    if (state == CXK_HOST_FREE) r = -ENOENT;
    else if (state == CXK_HOST_LIVE) r = -EBUSY;
    else if (state == CXK_HOST_CLAIMED && age < int64_t(p->geo.lease_timeout_ns)) r = -EBUSY;
    else if (state == CXK_HOST_DEAD && (flags & CXK_RELEASE_DROP) && leases_on(p, h)) r = -EBUSY;
    else if (state == CXK_HOST_DEAD && !(flags & CXK_RELEASE_DROP)) r = adopt(p, h);
    if (!r) r = reset_slot(p, h);
    bakery_unlock(p);
    return r;
}

}  // extern "C"
