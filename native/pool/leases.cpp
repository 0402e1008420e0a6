// leases.cpp — reader leases: an entry in the reader's host table names the (block, gen) it
// reads; a destroyer frees a block only when no live process of a live host leases it.
#include "pool/leases.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "pool/hosts.h"
#include "sys/sys.h"

namespace cxk::pool {

namespace {
// getpid() enters the kernel on every call (glibc no longer caches it), and a create +
// publish + close + destroy asked for it four times: the pid is kept here, and the child of
// a fork forgets it (pthread_atfork) before it runs any code of ours, so a child that uses
// an inherited handle still leases under its own pid.
std::atomic<uint32_t> g_pid{0};
void forget_pid() { g_pid.store(0, std::memory_order_relaxed); }
}  // namespace

uint32_t self_pid() {
    static const bool cached = pthread_atfork(nullptr, nullptr, forget_pid) == 0;
    uint32_t pid = g_pid.load(std::memory_order_relaxed);
    if (pid) return pid;
    pid = uint32_t(getpid());
    if (cached) g_pid.store(pid, std::memory_order_relaxed);
    return pid;
}

// ---- leases ---------------------------------------------------------------------------
// Does any live reader lease (block, gen)? An entry still being claimed (kClaiming) leases
// nothing: a reader publishes block and gen with its pid (release, then a full fence) before
// it re-validates the object, and the destroyer stores DEAD and fences before this scan, so
// a reader we miss here sees DEAD and backs off. (Counting claiming entries as leases on
// every block stalled all reclamation while any process was opening or creating.) A creator
// sets its lease under the host lock, before a destroy of its CREATING object can run.
bool leased(const cxk_pool *p, uint64_t block, uint64_t gen) {
    for (uint32_t h = 0; h < p->geo.max_hosts; ++h) {
        if (!host_used(p, h) || !host_alive(p, h)) continue;
        HostSlot *s = slot(p, h);
        const uint64_t hwm = std::min<uint64_t>(ld(&s->lease_hwm), p->geo.lease_slots);
        Lease *t = leases(p, h);
        if (h != p->host) sync_in(p, t, hwm * sizeof(Lease));
        for (uint64_t i = 0; i < hwm; ++i) {
            const uint32_t pid = ld(&t[i].pid);
            if (pid == 0) continue;
            if (pid & kClaiming) continue;
            // acquire load of pid pairs with lease_set's release store: block and gen are its
            if (ldr(&t[i].block) != block || ldr(&t[i].gen) != gen) continue;
            if (h != p->host || pid_alive(pid)) return true;
        }
    }
    return false;
}

// Clear this host's lease entries whose process is gone; returns how many.
uint64_t clean_leases(cxk_pool *p) {
    Lease *t = leases(p, p->host);
    const uint64_t hwm = std::min<uint64_t>(ld(&slot(p, p->host)->lease_hwm), p->geo.lease_slots);
    uint64_t n = 0;
    for (uint64_t i = 0; i < hwm; ++i) {
        uint32_t pid = ld(&t[i].pid);
        if (pid == 0 || pid_alive(pid & ~kClaiming)) continue;
        // CAS: a live process may have claimed the entry since we read it
        if (__atomic_compare_exchange_n(&t[i].pid, &pid, 0u, false, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED)) {
            sync_out(p, &t[i], sizeof(Lease));
            ++n;
        }
    }
    return n;
}

int64_t lease_claim(cxk_pool *p) {
    Lease *t = leases(p, p->host);
    HostSlot *s = slot(p, p->host);
    const uint32_t want = self_pid() | kClaiming;
    for (uint64_t i = 0; i < p->geo.lease_slots; ++i) {
        uint32_t z = 0;
        if (ldr(&t[i].pid) != 0) continue;
        // acq_rel CAS among this host's processes: the entry is ours alone from here
        if (!__atomic_compare_exchange_n(&t[i].pid, &z, want, false, __ATOMIC_ACQ_REL,
                                         __ATOMIC_RELAXED))
            continue;
        uint64_t hwm = ld(&s->lease_hwm);
        while (hwm < i + 1 && !__atomic_compare_exchange_n(&s->lease_hwm, &hwm, i + 1, false,
                                                           __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        }
        sync_out(p, s, kLine);
        return int64_t(i);
    }
    return -EMFILE;
}

// Fill a claimed entry and make it visible; the full fence in sync_out orders it before
// the reader's re-validation of the object (pairs with the destroyer's fence between
// marking the header DEAD and scanning leases).
void lease_set(cxk_pool *p, uint64_t i, uint64_t block, uint64_t gen, uint32_t obj_host) {
    Lease *e = &leases(p, p->host)[i];
    str(&e->block, block);
    str(&e->gen, gen);
    str(&e->obj_host, obj_host);
    st(&e->pid, self_pid());
    sync_out(p, e, sizeof *e);
}

void lease_free(cxk_pool *p, uint64_t i) {
    Lease *e = &leases(p, p->host)[i];
    // a child of fork inherits the handle's list but not the leases: they are the parent's
    if ((ldr(&e->pid) & ~kClaiming) != self_pid()) return;
    str(&e->block, uint64_t(0));
    st(&e->pid, 0u);
    sync_out(p, e, sizeof *e);
}

}  // namespace cxk::pool
