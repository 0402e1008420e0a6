/* clock.h — the two clocks of bench/preload's programs: wall time (what the user waits for)
 * and this process's CPU time (user + system, every thread; on a shared machine it leaves
 * out the time the program sat runnable behind other engineers' jobs, which wall time adds
 * to one variant or the other at random). */
#pragma once
#include <time.h>

static double clock_s(clockid_t id) {
    struct timespec t;
    clock_gettime(id, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static double now(void) { return clock_s(CLOCK_MONOTONIC); }
static double cpu_now(void) { return clock_s(CLOCK_PROCESS_CPUTIME_ID); }
