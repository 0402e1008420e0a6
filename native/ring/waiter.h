// waiter.h — private: struct cxk_waiter, what one waiting party (a comm, an RPC client or
// server, a ring handle) owns for its waits: its policy, its adaptive spin, its rings'
// wake-up counters. The cxk_waiter_* calls (waiter.cpp) treat every owner alike.
#pragma once
#include "cxlkit.h"

struct cxk_waiter {
    cxk_wait_opts *wait = nullptr;   // the owner's policy; nullptr: its waits take one per call
    const cxk_spin *spin = nullptr;  // the owner's adaptive spin; nullptr: none
    const void *owner = nullptr;
    // adds the wake-up counters of the owner's rings to *sum
    void (*wake)(const void *owner, struct cxk_ring_wake_stats *sum) = nullptr;
};

namespace cxk::ring {

// The parts of cxk_waiter_stats the per-owner calls of the C ABI return. 0 or -EINVAL.
int waiter_spin(const cxk_waiter *w, struct cxk_spin *st);
int waiter_wake(const cxk_waiter *w, struct cxk_ring_wake_stats *st);

}  // namespace cxk::ring
