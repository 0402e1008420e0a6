// crash.cpp — testing builds only: crash points. Tests arm one by name (cxk_pool_crash_at)
// and the process exits at its nth passage, as a SIGKILL would stop it there; or
// (cxk_pool_stop_at) it stops itself there (SIGSTOP) at each of its next passages, so that a
// test interleaves processes step by step (the slot claims).
#include "pool/crash.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "cxlkit_testing.h"

namespace cxk::pool {

namespace {
const char *const kCrashNames[] = {"create.alloc", "create.entry", "publish.header",
                                   "destroy.header", "destroy.free", "locked", "takeover",
                                   "claim.reserved", "claim.formatted", "claim.committed",
                                   "trim.split", "trim.cleared", "slot.claimed", "slot.x",
                                   "gap.split", "gap.started", "gap.cleared",
                                   "upgrade.split", "upgrade.staged", "upgrade.committed",
                                   "upgrade.rewriting", "fsck.entries"};
static_assert(sizeof(kCrashNames) / sizeof(kCrashNames[0]) == size_t(Crash::count_), "names");
std::atomic<int> g_crash_left[size_t(Crash::count_)];
std::atomic<int> g_stop_left[size_t(Crash::count_)];

int point_of(const char *name) {
    for (size_t i = 0; i < size_t(Crash::count_); ++i)
        if (std::strcmp(name, kCrashNames[i]) == 0) return int(i);
    return -1;
}
}  // namespace

void crash_point(Crash c) {
    std::atomic<int> &stop = g_stop_left[size_t(c)];
    if (stop.load(std::memory_order_relaxed) > 0 && stop.fetch_sub(1) > 0) raise(SIGSTOP);
    std::atomic<int> &left = g_crash_left[size_t(c)];
    if (left.load(std::memory_order_relaxed) == 0) return;
    if (left.fetch_sub(1) == 1) _exit(137);
}

}  // namespace cxk::pool

using namespace cxk::pool;

extern "C" {

int cxk_pool_crash_at(const char *name, int nth) {
    if (!name || nth < 0) return -EINVAL;
    const int i = point_of(name);
    if (i < 0) return -EINVAL;
    g_crash_left[i].store(nth);
    return 0;
}

int cxk_pool_stop_at(const char *name, int count) {
    if (!name || count < 0) return -EINVAL;
    const int i = point_of(name);
    if (i < 0) return -EINVAL;
    g_stop_left[i].store(count);
    return 0;
}

}  // extern "C"
