// spin.cpp — the adaptive spin of every party that waits on rings (RPC client and server,
// messaging comm): how long each wait spins before it sleeps, from what the party's recent
// waits saw. include/cxlkit.h ("Adaptive spin") has the rules, docs/msg.md the convergence
// argument and the measurements.
#include "ring/spin.h"

#include <atomic>
#include <cerrno>
#include <cstdlib>

#include "sys/sys.h"

namespace {

// An exchange is sporadic when its waits last, or its waits begin apart, more than
// kSporadic times the cap (800 us at the default 200): only then do the woke and outcome
// rules depart from a fixed spin of the cap. The margin over 1 is what keeps two parties
// that wake each other in a back-to-back exchange from locking in: their round trip, two
// wake-ups included, must stay under it (docs/msg.md, "Adaptive spin").
constexpr int64_t kSporadic = 4;
// The outcome rule's shrink: a wait that slept longer than the cap spins a quarter as long
// the next time (200, 50, 12, 3, 0 us): four sporadic waits in a row stop the spin.
constexpr uint32_t kShrink = 4;
// How often the thread's affinity is looked at (one sched_getaffinity, under a us): at most
// once per 10 ms per party, at a wait's begin.
constexpr int64_t kProbeNs = 10 * 1000000;
// The most ranks per host a launcher's count is believed for (a larger or malformed value
// is ignored: the environment is the user's, not ours to trust).
constexpr long kMaxLocalRanks = 1 << 16;

// Ranks of the job that share this kernel's CPUs, as the job counted them itself
// (cxk_spin_set_local_ranks: hosts that are containers or namespaces of one machine share
// its CPUs though the launcher counts them apart); 0: not counted.
std::atomic<long> counted_ranks{0};

// How many ranks of this process's job the launcher started on this host, from the
// variables MPICH's Hydra (MPI_LOCALNRANKS) and Open MPI (OMPI_COMM_WORLD_LOCAL_SIZE) set
// in every rank, or the job's own count when larger; 0 when none holds a count. Read at each
// probe (at most every kProbeNs).
long launcher_ranks() {
    for (const char *name : {"MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE"}) {
        const char *v = std::getenv(name);
        if (!v || *v < '0' || *v > '9') continue;
        char *end;
        errno = 0;
        const long n = std::strtol(v, &end, 10);
        if (!*end && !errno && n > 0 && n <= kMaxLocalRanks) return n;
    }
    return 0;
}

long local_ranks() {
    const long counted = counted_ranks.load(std::memory_order_relaxed);
    const long launched = launcher_ranks();
    return counted > launched ? counted : launched;
}

}  // namespace

extern "C" {

void cxk_spin_init(cxk_spin *s) {
    if (!s) return;
    *s = cxk_spin{};
    s->budget_us = CXK_SPIN_FULL;
}

uint32_t cxk_spin_begin(cxk_spin *s, uint32_t cap_us, int64_t start_ns, int woke_peer,
                        int overcommitted) {
    if (!s) return cap_us;
    const int64_t period = s->last_start_ns ? start_ns - s->last_start_ns : INT64_MAX;
    s->last_start_ns = start_ns;
    s->cur_start_ns = start_ns;
    s->cur_slept = 0;
    s->cap_us = cap_us;
    s->overcommitted = overcommitted ? 1 : 0;
    ++s->waits;
    if (cap_us == CXK_WAIT_FOREVER || cap_us == 0) return cap_us;  // nothing to adapt
    uint32_t spin = s->budget_us < cap_us ? s->budget_us : cap_us;
    // woke rule: the peer was asleep and the exchange is sporadic: its answer needs its
    // wake-up first, and our spin would hold a CPU it may need (docs/msg.md)
    if (woke_peer && period > kSporadic * int64_t(cap_us) * 1000) {
        ++s->woke_skips;
        spin = 0;
    }
    if (overcommitted && spin) ++s->yield_waits;
    return spin;
}

void cxk_spin_slept(cxk_spin *s) {
    if (s && s->cur_start_ns) s->cur_slept = 1;
}

void cxk_spin_end(cxk_spin *s, int64_t end_ns) {
    if (!s || !s->cur_start_ns) return;
    const int64_t waited = end_ns - s->cur_start_ns;
    s->cur_start_ns = 0;
    if (s->cur_slept) ++s->slept;
    else ++s->hits;
    const uint32_t cap = s->cap_us;
    if (cap == CXK_WAIT_FOREVER || cap == 0) return;
    const uint32_t now = s->budget_us < cap ? s->budget_us : cap;
    if (waited <= kSporadic * int64_t(cap) * 1000) {
        // not sporadic (whether this wait spun or slept): the full spin
        if (now < cap) ++s->restores;
        s->budget_us = CXK_SPIN_FULL;
    } else if (s->cur_slept && now > 0) {
        s->budget_us = now / kShrink;
        ++s->shrinks;
    }
}

void cxk_spin_set_local_ranks(long n) {
    counted_ranks.store(n > 0 && n <= kMaxLocalRanks ? n : 0, std::memory_order_relaxed);
}

int cxk_spin_overcommitted(void) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (int rc = cxk::sys_getaffinity_self(sizeof set, &set)) return rc;
    // A machine merely busier than its CPUs does not count: there a yield hands the CPU to
    // another user's job for its whole slice, not to our peer (docs/msg.md, "Adaptive
    // spin": yielding on /proc/loadavg's runnable count, one run at load 5-6 gave a third
    // of before's QD128 RPC throughput). A job that put more of its own ranks on this host
    // than the CPUs they may use does: the task queued behind a spin is then likely a
    // job-mate, the very peer the spin waits for.
    const int cpus = CPU_COUNT(&set);
    return cpus <= 1 || local_ranks() > cpus ? 1 : 0;
}

}  // extern "C"

namespace cxk::ring {

int64_t adapt_idle(cxk_spin *s, cxk_wait *w, uint64_t wakes_sent, cxk_ring *const *rings,
                   size_t n, const Extra *extra) {
    if (!s || !w) return n ? wait_idle_rings_extra(w, rings, n, extra) : cxk_wait_idle(w);
    const uint32_t cap = w->opts.spin_us;
    if (w->polls == 0 && cap != 0 && cap < 0x7fffffffu) {
        // the wait's first idle poll: it begins here
        if (!s->probe_ns || w->start_ns - s->probe_ns >= kProbeNs) {
            s->probe_ns = w->start_ns;
            s->overcommitted = cxk_spin_overcommitted() == 1 ? 1 : 0;
        }
        const bool woke = wakes_sent != s->wakes_seen;
        s->wakes_seen = wakes_sent;
        const uint32_t spin = cxk_spin_begin(s, cap, w->start_ns, woke, s->overcommitted);
        w->adapt = (spin + 1) | (s->overcommitted ? CXK_WAIT_ADAPT_YIELD : 0u);
    }
    const int64_t el = n ? wait_idle_rings_extra(w, rings, n, extra) : cxk_wait_idle(w);
    if (w->phase == CXK_WAIT_SLEPT) cxk_spin_slept(s);
    s->seen_ns = w->now_ns;
    return el;
}

void adapt_end(cxk_spin *s) {
    // the wait's last clock reading stands for its end: it is at most kClockEvery polls (or
    // one sleep, whose end read the clock) old, nothing beside the 4 x cap the rules compare
    // with, and the answer's path reads no clock
    if (s && s->cur_start_ns) cxk_spin_end(s, s->seen_ns > s->cur_start_ns ? s->seen_ns : s->cur_start_ns);
}

}  // namespace cxk::ring
