// wait.cpp — the one wait policy of every polling wait over the pool (rings, messaging, RPC):
// spin for a bounded time measured on the clock, then (optionally) yield the CPU between
// polls, then sleep between polls, each sleep a share of the time waited so far (short
// after the spin, up to sleep_us after a long idle) with the thread's timer slack lowered so
// that a short sleep stays short. docs/msg.md ("Waiting") has the measurements behind the
// defaults.
#include <sched.h>
#include <time.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "cxlkit.h"
#include "ring/wait.h"
#include "sys/config.h"
#include "sys/sys.h"

namespace {

// Defaults (docs/msg.md, "Waiting", measured with background load and without): spinning
// covers a message exchange between two running processes many times over, and must outlast
// the partner's sleep granularity, else two ranks that both fell asleep answer each other
// one sleep at a time. No yields by default: on a loaded machine a sched_yield hands the CPU
// to another task for its whole slice (milliseconds), where a short sleep leaves the run
// queue and comes back when its timer fires. The sleeps then grow with the idle time, so an
// idle server or a rank blocked on a slow peer costs next to no CPU.
constexpr uint32_t kSpinUs = 200;
constexpr uint32_t kYieldUs = 0;
constexpr uint32_t kSleepUs = 50;
constexpr uint32_t kSleepMaxUs = 1000000;
// A sleep lasts 1/kSleepShare of the time waited so far (at least kSleepMinNs, at most
// sleep_us): a message that arrives during a sleep waits at most ~6 % longer than it already
// had, and the number of wake-ups grows only with the log of the idle time until the cap.
constexpr int64_t kSleepShare = 16;
constexpr int64_t kSleepMinNs = 2000;
// The timer slack of the sleeping thread (Linux's default is 50 us, as long as the sleep
// itself): set around each sleep and put back after it, so the caller's own timers keep
// the slack it chose.
constexpr unsigned long kSlackNs = 1000;
// While spinning the clock is read every kClockEvery polls: a poll of a ring is a few tens of
// ns, a clock read (vDSO) about as long, so this keeps the spin phase's cost in time (not
// polls) within a few percent.
constexpr uint64_t kClockEvery = 8;
// An overcommitted wait (CXK_WAIT_ADAPT_YIELD) spins without yielding this long first: a
// back-to-back answer (a round trip is ~0.3 us) still comes without a syscall.
constexpr int64_t kHardSpinNs = 2000;

int64_t mono_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// A microsecond count from the CXLKIT_* table (forever: CXK_WAIT_FOREVER); a refused value
// keeps dflt here, where nothing can fail: cxk_msg_init and cxk_rpc_* refuse it up front.
uint32_t env_us(cxk::config::Id id, uint32_t dflt) { return cxk::config::u32_or(id, dflt); }

int64_t phase_ns(uint32_t us) { return us == CXK_WAIT_FOREVER ? INT64_MAX : int64_t(us) * 1000; }

// The sleep after el ns of waiting: a share of el, within [kSleepMinNs, sleep_us].
int64_t sleep_ns(int64_t el, uint32_t sleep_us) {
    const int64_t cap = int64_t(sleep_us) * 1000;
    int64_t ns = el / kSleepShare;
    if (ns < kSleepMinNs) ns = kSleepMinNs;
    return ns < cap ? ns : cap;
}

void timed_sleep(void *, int64_t ns) { cxk::wait::sleep_precise(ns); }

// The futex sleep's safety net: a publish wakes the sleeper, so this bounds only
// a lost wake-up (a peer that is not what the pool's coherence says) and how often a blocked
// call looks at its deadline and its peer's liveness (every 1 ms, kCheckNs in rpc.cpp).
constexpr uint32_t kWakeUs = 1000;

}  // namespace

namespace cxk::wait {

// nanosleep with the thread's timer slack lowered for its duration (prctl fails only on an
// old kernel or under a seccomp filter; the sleep is then merely less precise).
void sleep_precise(int64_t ns) {
    const long old = cxk::sys_timerslack_get();
    const bool lowered = old > 0 && (unsigned long)old > kSlackNs &&
                         cxk::sys_timerslack_set(kSlackNs) == 0;
    timespec ts{time_t(ns / 1000000000), long(ns % 1000000000)};
    nanosleep(&ts, nullptr);
    if (lowered) cxk::sys_timerslack_set((unsigned long)old);
}

int64_t wake_timeout_ns() {
    // read at each sleep (a getenv is ~100 ns beside a syscall), so a test or a benchmark
    // may set it per process; a bad value keeps the default
    const uint32_t us = env_us(cxk::config::Id::MSG_WAKE_US, kWakeUs);
    return us > kSleepMaxUs ? int64_t(kWakeUs) * 1000 : int64_t(us) * 1000;
}

int64_t idle_with(cxk_wait *w, SleepFn sleep, void *ctx) {
    if (!w) return 0;
    ++w->polls;
    int64_t spin = phase_ns(w->opts.spin_us);
    // the adaptive spin (spin.cpp) may shorten this wait's spin, and make it yield
    const uint32_t adapt = w->adapt & ~CXK_WAIT_ADAPT_YIELD;
    if (adapt && int64_t(adapt - 1) * 1000 < spin) spin = int64_t(adapt - 1) * 1000;
    int64_t el = w->now_ns - w->start_ns;
    if (el < spin && (w->adapt & CXK_WAIT_ADAPT_YIELD) && el >= kHardSpinNs) {
        // overcommitted: a runnable peer may be queued behind us on this CPU; let it run
        // (sched_yield returns at once when nothing else waits for this CPU)
        sched_yield();
        w->now_ns = mono_ns();
        w->phase = CXK_WAIT_SPUN;
        return w->now_ns - w->start_ns;
    }
    if (el < spin) {
        // spinning: back to the poll at once (no PAUSE: in a virtual machine a PAUSE loop can
        // make the hypervisor deschedule the vCPU, the very thing spinning avoids)
        if (w->polls % kClockEvery == 0 || spin < 1000) w->now_ns = mono_ns();
        w->phase = CXK_WAIT_SPUN;
        return w->now_ns - w->start_ns;
    }
    const int64_t yield = phase_ns(w->opts.yield_us);
    if (el - spin < yield || w->opts.sleep_us == 0) {
        sched_yield();
        w->phase = CXK_WAIT_YIELDED;
    } else {
        sleep(ctx, sleep_ns(el, w->opts.sleep_us));
        w->phase = CXK_WAIT_SLEPT;
    }
    w->now_ns = mono_ns();
    return w->now_ns - w->start_ns;
}

}  // namespace cxk::wait

extern "C" {

void cxk_wait_opts_init(cxk_wait_opts *o) {
    if (!o) return;
    std::memset(o, 0, sizeof *o);
    o->spin_us = env_us(cxk::config::Id::MSG_SPIN_US, kSpinUs);
    o->yield_us = env_us(cxk::config::Id::MSG_YIELD_US, kYieldUs);
    o->sleep_us = env_us(cxk::config::Id::MSG_SLEEP_US, kSleepUs);
    if (o->sleep_us > kSleepMaxUs) o->sleep_us = kSleepUs;
}

int cxk_wait_opts_check(const cxk_wait_opts *o) {
    if (!o || o->reserved || o->sleep_us > kSleepMaxUs) return -EINVAL;
    return 0;
}

int cxk_wait_begin(cxk_wait *w, const cxk_wait_opts *o) {
    if (!w) return -EINVAL;
    const int rc = o ? cxk_wait_opts_check(o) : 0;
    if (o && rc == 0) w->opts = *o;
    else cxk_wait_opts_init(&w->opts);  // NULL or bad: the wait still works, on the defaults
    w->start_ns = mono_ns();
    w->now_ns = w->start_ns;
    w->polls = 0;
    w->phase = CXK_WAIT_SPUN;
    w->adapt = 0;
    return rc;
}

int64_t cxk_wait_idle(cxk_wait *w) { return cxk::wait::idle_with(w, timed_sleep, nullptr); }

}  // extern "C"
