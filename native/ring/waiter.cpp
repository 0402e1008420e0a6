// waiter.cpp — the cxk_waiter_* calls: one way to set a waiting party's policy and read its
// counters, whatever owns it (comm, RPC client or server, ring handle).
#include "ring/waiter.h"

#include <cerrno>

#include "ring/ring.h"
#include "sys/config.h"

namespace cxk::ring {

int waiter_spin(const cxk_waiter *w, struct cxk_spin *st) {
    if (!w || !st) return -EINVAL;
    *st = w->spin ? *w->spin : cxk_spin{};
    return 0;
}

int waiter_wake(const cxk_waiter *w, struct cxk_ring_wake_stats *st) {
    if (!w || !st) return -EINVAL;
    *st = {};
    if (w->wake) w->wake(w->owner, st);
    return 0;
}

}  // namespace cxk::ring

extern "C" {

cxk_waiter *cxk_ring_waiter(cxk_ring *r) { return r ? &r->waiter : nullptr; }

int cxk_waiter_set_wait(cxk_waiter *w, const struct cxk_wait_opts *o) {
    if (!w) return -EINVAL;
    if (!w->wait) return -ENOTSUP;
    if (!o) {
        using cxk::config::Id;
        // the defaults come from the environment, where a wait cannot refuse them
        if (int rc = cxk::config::check({Id::MSG_SPIN_US, Id::MSG_YIELD_US, Id::MSG_SLEEP_US}))
            return rc;
        return cxk_wait_opts_init(w->wait), 0;
    }
    if (int rc = cxk_wait_opts_check(o)) return rc;
    *w->wait = *o;
    return 0;
}

int cxk_waiter_get_wait(const cxk_waiter *w, struct cxk_wait_opts *o) {
    if (!w || !o) return -EINVAL;
    if (!w->wait) return -ENOTSUP;
    *o = *w->wait;
    return 0;
}

int cxk_waiter_stats(const cxk_waiter *w, struct cxk_waiter_stats *st) {
    if (!w || !st || st->struct_size < sizeof *st) return -EINVAL;
    st->reserved = 0;
    if (int rc = cxk::ring::waiter_spin(w, &st->spin)) return rc;
    return cxk::ring::waiter_wake(w, &st->wake);
}

}  // extern "C"
