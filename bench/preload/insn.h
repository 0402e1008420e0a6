/* insn.h — user-space instructions retired between insn_start() and insn_stop(), from a
 * perf_event_open counter on this thread: the noise-free half of bench/preload_overhead.py
 * (time on a shared machine drifts; the instruction count of a deterministic loop does not).
 * insn_stop() returns -1 where the kernel or the VM gives no hardware counter (ENOENT,
 * EOPNOTSUPP, EACCES under perf_event_paranoid): the bench then counts under callgrind. */
#pragma once
#include <linux/perf_event.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

static int insn_fd = -1;

static void insn_start(void) {
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.type = PERF_TYPE_HARDWARE;
    a.size = sizeof a;
    a.config = PERF_COUNT_HW_INSTRUCTIONS;
    a.disabled = 1;
    a.exclude_kernel = 1;
    a.exclude_hv = 1;
    insn_fd = (int)syscall(SYS_perf_event_open, &a, 0, -1, -1, 0);
    if (insn_fd < 0) return;
    ioctl(insn_fd, PERF_EVENT_IOC_RESET, 0);
    ioctl(insn_fd, PERF_EVENT_IOC_ENABLE, 0);
}

static long long insn_stop(void) {
    if (insn_fd < 0) return -1;
    ioctl(insn_fd, PERF_EVENT_IOC_DISABLE, 0);
    uint64_t v;
    long long r = read(insn_fd, &v, sizeof v) == (ssize_t)sizeof v ? (long long)v : -1;
    close(insn_fd);
    insn_fd = -1;
    return r;
}
