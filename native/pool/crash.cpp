// crash.cpp — crash points: tests arm one by name (cxk_pool_crash_at) and the process exits
// at its nth passage, as a SIGKILL would stop it there.
#include "pool/crash.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "cxlkit.h"

namespace cxk::pool {

namespace {
const char *const kCrashNames[] = {"create.alloc", "create.entry", "publish.header",
                                   "destroy.header", "destroy.free", "locked", "takeover",
                                   "claim.reserved", "claim.formatted", "claim.committed",
                                   "trim.split", "trim.cleared", "slot.claimed",
                                   "gap.split", "gap.started", "gap.cleared",
                                   "upgrade.split", "upgrade.staged", "upgrade.committed",
                                   "upgrade.rewriting"};
static_assert(sizeof(kCrashNames) / sizeof(kCrashNames[0]) == size_t(Crash::count_), "names");
std::atomic<int> g_crash_left[size_t(Crash::count_)];
}  // namespace

void crash_point(Crash c) {
    std::atomic<int> &left = g_crash_left[size_t(c)];
    if (left.load(std::memory_order_relaxed) == 0) return;
    if (left.fetch_sub(1) == 1) _exit(137);
}

}  // namespace cxk::pool

using namespace cxk::pool;

extern "C" {

int cxk_pool_crash_at(const char *name, int nth) {
    if (!name || nth < 0) return -EINVAL;
    for (size_t i = 0; i < size_t(Crash::count_); ++i)
        if (std::strcmp(name, kCrashNames[i]) == 0) {
            g_crash_left[i].store(nth);
            return 0;
        }
    return -EINVAL;
}

}  // extern "C"
