// wait.h — private: the wait policy's phases with a pluggable sleep (wake.cpp sleeps on a
// futex where cxk_wait_idle sleeps on the timer).
#pragma once
#include <cstdint>

#include "cxlkit.h"

namespace cxk::wait {

// The sleep phase's sleeper: sleep up to ns (returning early is fine: the caller re-polls).
using SleepFn = void (*)(void *ctx, int64_t ns);
// cxk_wait_idle with sleep(ctx, ns) in place of the timed sleep.
int64_t idle_with(cxk_wait *w, SleepFn sleep, void *ctx);
// nanosleep with the thread's timer slack lowered for its duration.
void sleep_precise(int64_t ns);
// CXLKIT_MSG_WAKE_US in ns: a futex sleep's safety-net timeout; 0: the wake-up is off.
int64_t wake_timeout_ns();

}  // namespace cxk::wait
