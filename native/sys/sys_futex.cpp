// sys_futex.cpp — shared futexes for the rings' same-host wake-up: wait on one
// word, wait on many (futex_waitv), wake. Each through the fault hook (Sys::futex), so tests
// reach the callers' fallbacks (timed sleeps) with an injected -ENOSYS or -EINTR.
#include "sys/sys.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>

namespace cxk {
namespace {

long ret(long r) { return r < 0 ? -errno : r; }

timespec to_ts(int64_t ns) { return timespec{time_t(ns / 1000000000), long(ns % 1000000000)}; }

}  // namespace

int sys_futex_wait(const uint32_t *word, uint32_t val, int64_t timeout_ns) noexcept {
    if (int e = fault_check(Sys::futex)) return e;
    if (!word || timeout_ns <= 0) return -EINVAL;
    // FUTEX_WAIT's timeout is relative (CLOCK_MONOTONIC); no FUTEX_PRIVATE_FLAG: the key is
    // the page of the shared mapping, the same in every process that maps the pool
    const timespec ts = to_ts(timeout_ns);
    return int(ret(::syscall(SYS_futex, word, FUTEX_WAIT, val, &ts, nullptr, 0)));
}

int sys_futex_wake(uint32_t *word, int n) noexcept {
    if (int e = fault_check(Sys::futex)) return e;
    if (!word || n <= 0) return -EINVAL;
    return int(ret(::syscall(SYS_futex, word, FUTEX_WAKE, n, nullptr, nullptr, 0)));
}

int sys_futex_waitv(const uint32_t *const *words, const uint32_t *vals, unsigned n,
                    int64_t timeout_ns) noexcept {
    if (int e = fault_check(Sys::futex)) return e;
    if (!words || !vals || n == 0 || n > kFutexWaitvMax || timeout_ns <= 0) return -EINVAL;
#ifdef SYS_futex_waitv
    futex_waitv v[kFutexWaitvMax] = {};
    for (unsigned i = 0; i < n; ++i) {
        v[i].val = vals[i];
        v[i].uaddr = uint64_t(reinterpret_cast<uintptr_t>(words[i]));
        v[i].flags = FUTEX_32;  // shared (no FUTEX_PRIVATE_FLAG)
    }
    // futex_waitv's timeout is absolute, on the clock named
    timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    const timespec until = to_ts(int64_t(now.tv_sec) * 1000000000 + now.tv_nsec + timeout_ns);
    return int(ret(::syscall(SYS_futex_waitv, v, n, 0, &until, CLOCK_MONOTONIC)));
#else
    return -ENOSYS;
#endif
}

}  // namespace cxk
