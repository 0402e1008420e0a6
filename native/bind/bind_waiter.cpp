// bind_waiter.cpp — cxlkit.msg.WaiterStats: cxk_waiter_stats bound as it is, the one record of
// a waiting party's adaptive spin and same-host wake-up counters, whatever owns the waiter
// (a comm, an RPC client or server, a ring: their waiter_stats() methods). Read-only; the
// old dict callers' rec["field"] reads warn (one release), and it pickles (queues, pipes).
#include <string>

#include "bind/bind_msg.h"
#include "bind/bind_record.h"

namespace cxk::py {

struct cxk_waiter_stats waiter_stats(const cxk_waiter *w, const std::string &what) {
    struct cxk_waiter_stats st {};
    st.struct_size = sizeof st;
    check(cxk_waiter_stats(w, &st), what);
    return st;
}

namespace {

using W = struct cxk_waiter_stats;
using S = struct cxk_spin;
using K = struct cxk_ring_wake_stats;

nb::object budget_us(const W &w) {  // CXK_SPIN_FULL: the cap
    return nb::int_(w.spin.budget_us == CXK_SPIN_FULL ? w.spin.cap_us : w.spin.budget_us);
}

void bind_spin(Record<W> &r) {
    r.field("budget_us", &budget_us)
        .member<&W::spin, &S::cap_us>("cap_us")
        .field("overcommitted", [](const W &w) -> nb::object {
            return nb::bool_(w.spin.overcommitted != 0);
        })
        .member<&W::spin, &S::waits>("waits")
        .member<&W::spin, &S::hits>("hits")
        .member<&W::spin, &S::slept>("slept")
        .member<&W::spin, &S::restores>("restores")
        .member<&W::spin, &S::shrinks>("shrinks")
        .member<&W::spin, &S::woke_skips>("woke_skips")
        .member<&W::spin, &S::yield_waits>("yield_waits");
}

void bind_wake(Record<W> &r) {
    r.field("enabled", [](const W &w) -> nb::object { return nb::bool_(w.wake.enabled != 0); })
        .member<&W::wake, &K::futex_waits>("futex_waits")
        .member<&W::wake, &K::woken>("woken")
        .member<&W::wake, &K::timeouts>("timeouts")
        .member<&W::wake, &K::interrupted>("interrupted")
        .member<&W::wake, &K::fallbacks>("fallbacks")
        .member<&W::wake, &K::rechecks>("rechecks")
        .member<&W::wake, &K::wakes_sent>("wakes_sent");
}

}  // namespace
}  // namespace cxk::py

CXK_BIND(waiter) {
    using namespace cxk::py;
    Record<W> r(m, "WaiterStats",
                "A waiting party's counters (Comm, rpc.Server and rpc.Client spin_stats() and "
                "wake_stats(), a ring's waiter): read-only. The adaptive spin (docs/msg.md, "
                "\"Adaptive spin\"; all 0 for a ring, whose waits do not adapt): budget_us "
                "(the next wait's spin before the woke rule), cap_us, overcommitted, waits, "
                "hits (answered while spinning), slept, restores, shrinks, woke_skips, "
                "yield_waits. The same-host wake-up (\"Same-host wake-up\"): enabled, "
                "futex_waits, woken, timeouts, interrupted, fallbacks, rechecks (of the rings "
                "it reads), wakes_sent (of those it writes).");
    bind_spin(r);
    bind_wake(r);
    r.finish().deprecated_mapping().pickle_bytes();
}
