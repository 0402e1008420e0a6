// spin.h — private: the adaptive spin (spin.cpp) around one idle poll of a party's wait.
#pragma once
#include <cstddef>
#include <cstdint>

#include "cxlkit.h"
#include "ring/wake.h"

namespace cxk::ring {

// One idle poll of a wait of the party whose adaptive state is s: at the wait's first idle
// (w->polls == 0) it begins the wait in s (its spin, whether the spin yields) and sets
// w->adapt; then idles as cxk_wait_idle_rings(w, rings, n) (n == 0: cxk_wait_idle), and notes
// a sleep in s. wakes_sent: the wake-ups the party's publishes sent so far (a running count).
// extra: a word slept on beside the rings (ring/wake.h; NULL: none).
int64_t adapt_idle(cxk_spin *s, cxk_wait *w, uint64_t wakes_sent, cxk_ring *const *rings,
                   size_t n, const Extra *extra = nullptr);
// The wait in progress (if any) got its answer (at its last idle poll's clock reading).
void adapt_end(cxk_spin *s);

}  // namespace cxk::ring
