// wake.h — private: the same-host wake-up of rings (wake.cpp has the protocol).
#pragma once
#include <cstddef>
#include <cstdint>

#include "cxlkit.h"

namespace cxk::ring {

// Attach: whether this handle may use the wake-up (the pool is coherent: one host).
void wake_attach(cxk_ring *r, bool coherent);
// A word beside the rings that a sleep may also wait on (the messaging barrier's): sleep
// while *word holds its value and *seq < want, with *sleeping = 1 (the caller's own flag, its
// only writer) while asleep; the word's owner stores *seq, fences, and when the flag is set
// bumps *word and wakes it (the Dekker pair of the rings, wake.cpp).
struct Extra {
    const uint32_t *word;
    uint32_t *sleeping;
    const uint64_t *seq;
    uint64_t want;
};
// cxk_wait_idle_rings with extra's word among those slept on (extra NULL: the same call).
int64_t wait_idle_rings_extra(cxk_wait *w, cxk_ring *const *rings, size_t n, const Extra *extra);

// Producer, right after a publish (stamps or the closed flag stored): wake the consumer if
// it said it sleeps. A fence and one load when it does not; no syscall.
void wake_notify(cxk_ring *r);

// Add r's wake-up counters into *sum (enabled: or-ed); a null r adds nothing. The messaging
// layer and the RPC server report the sum over their rings.
void wake_stats_add(const cxk_ring *r, struct cxk_ring_wake_stats *sum);

}  // namespace cxk::ring
