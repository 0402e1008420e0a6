// wait.cpp — the one wait policy of every polling wait over the pool (rings, messaging, RPC):
// spin for a bounded time measured on the clock, then yield the CPU between polls, then
// sleep between polls. docs/msg.md ("Waiting") has the measurements behind the defaults.
#include <sched.h>
#include <time.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "cxlkit.h"

namespace {

// Defaults (docs/msg.md, "Waiting"): spinning 50 us covers a message exchange between two
// running processes many times over, and bounds what a wait burns when its peer is not
// running; 2 ms of yields then let a peer that shares our core finish its turn; after that
// the wait sleeps, so an idle server or a rank blocked on a slow peer costs no CPU.
constexpr uint32_t kSpinUs = 50;
constexpr uint32_t kYieldUs = 2000;
constexpr uint32_t kSleepUs = 50;
constexpr uint32_t kSleepMaxUs = 1000000;
// While spinning the clock is read every kClockEvery polls: a poll of a ring is a few tens of
// ns, a clock read (vDSO) about as long, so this keeps the spin phase's cost in time (not
// polls) within a few percent.
constexpr uint64_t kClockEvery = 8;

int64_t mono_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// A microsecond count from the environment: decimal, or "forever"; anything else keeps dflt
// (the Python layer validates the same variables and says what is wrong).
uint32_t env_us(const char *name, uint32_t dflt, bool forever_ok) {
    const char *v = std::getenv(name);
    if (!v || !*v) return dflt;
    if (forever_ok && std::strcmp(v, "forever") == 0) return CXK_WAIT_FOREVER;
    char *end;
    errno = 0;
    unsigned long long x = std::strtoull(v, &end, 10);
    if (*end || errno || x >= CXK_WAIT_FOREVER || v[0] == '-') return dflt;
    return uint32_t(x);
}

int64_t phase_ns(uint32_t us) { return us == CXK_WAIT_FOREVER ? INT64_MAX : int64_t(us) * 1000; }

}  // namespace

extern "C" {

void cxk_wait_opts_init(cxk_wait_opts *o) {
    if (!o) return;
    std::memset(o, 0, sizeof *o);
    o->spin_us = env_us("CXLKIT_MSG_SPIN_US", kSpinUs, true);
    o->yield_us = env_us("CXLKIT_MSG_YIELD_US", kYieldUs, true);
    o->sleep_us = env_us("CXLKIT_MSG_SLEEP_US", kSleepUs, false);
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
    w->reserved = 0;
    return rc;
}

int64_t cxk_wait_idle(cxk_wait *w) {
    if (!w) return 0;
    ++w->polls;
    const int64_t spin = phase_ns(w->opts.spin_us);
    int64_t el = w->now_ns - w->start_ns;
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
        timespec ts{0, long(w->opts.sleep_us) * 1000};
        nanosleep(&ts, nullptr);
        w->phase = CXK_WAIT_SLEPT;
    }
    w->now_ns = mono_ns();
    return w->now_ns - w->start_ns;
}

}  // extern "C"
