/* bench_rt.h — what the two-process latency benches (nc_floor.c, msg_pingpong.c) share:
 * the CPUs this program may use, pinning a process to one of them, SCHED_FIFO when allowed,
 * and the load average printed beside each figure. Header-only: each bench is one `cc`. */
#ifndef CXLKIT_BENCH_RT_H
#define CXLKIT_BENCH_RT_H

#include <sched.h>
#include <stdio.h>
#include <sys/types.h>

static cpu_set_t bench_cpus;  /* read by bench_rt_start before anything pins */

/* Run process pid (0: this one) on the k-th CPU of bench_cpus, k < 0: on all of them. The
 * parent sets its child's CPU itself: a SCHED_FIFO parent spinning on the child's only CPU
 * would never let the child run to move itself. One CPU: nothing to place. */
static inline void bench_pin(pid_t pid, int k) {
    cpu_set_t one = bench_cpus;
    if (CPU_COUNT(&bench_cpus) < 2) return;
    for (int c = 0, seen = 0; k >= 0 && c < CPU_SETSIZE; ++c)
        if (CPU_ISSET(c, &bench_cpus) && seen++ == k) {
            CPU_ZERO(&one);
            CPU_SET(c, &one);
            break;
        }
    sched_setaffinity(pid, sizeof one, &one);
}

/* Record the CPUs, then ask for SCHED_FIFO (children inherit it): on a machine whose CPUs
 * other work shares, two spinning sides would otherwise rarely run at once and the figure
 * would be the scheduler's. 1 when granted (root), 0 when not: the output says which. */
static inline int bench_rt_start(void) {
    if (sched_getaffinity(0, sizeof bench_cpus, &bench_cpus)) CPU_ZERO(&bench_cpus);
    struct sched_param sp = {.sched_priority = 1};
    return sched_setscheduler(0, SCHED_FIFO, &sp) == 0;
}

/* The 1-minute load average, or -1 when /proc/loadavg cannot be read. */
static inline double bench_load(void) {
    double load = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &load) != 1) load = -1;
        fclose(f);
    }
    return load;
}

#endif
