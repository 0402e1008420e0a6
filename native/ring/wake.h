// wake.h — private: the same-host wake-up of rings (wake.cpp has the protocol).
#pragma once
#include <cstddef>

#include "cxlkit.h"

namespace cxk::ring {

// Attach: whether this handle may use the wake-up (the pool is coherent: one host).
void wake_attach(cxk_ring *r, bool coherent);
// Producer, right after a publish (stamps or the closed flag stored): wake the consumer if
// it said it sleeps. A fence and one load when it does not; no syscall.
void wake_notify(cxk_ring *r);

}  // namespace cxk::ring
