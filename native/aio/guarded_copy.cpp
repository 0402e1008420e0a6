// guarded_copy.cpp — cxk_aio_copy: a memcpy that survives SIGBUS. A copy to or from a shared
// file mapping faults with SIGBUS when the file was truncated under the mapping (by another
// process, between any size check and the copy: a window no check closes) or a mapped page
// cannot be read back. The copying thread marks itself guarded; the SIGBUS handler jumps back
// to the guard of the faulting thread, which returns -EFAULT; a SIGBUS on any thread that is
// not copying goes on to the handler that was there before (Python's faulthandler, the
// default action), so a real crash stays a crash. The handler is installed once, on the first
// copy: a handler installed after it (faulthandler.enable() called later) runs first and
// would take a guarded fault for a crash.
// Guarded ranges: the AdamW kernel updates a subgroup where it lies in a mapped
// file, on this thread or on a team's, so no one thread's jump target can cover it. A fault
// at an address inside a range registered by cxk_aio_guard_range, on any thread, maps a
// private zero page over the faulting page and counts the fault; the instruction runs again
// on that page and the kernel finishes; its caller reads the count and discards the range.
#include <atomic>
#include <cerrno>
#include <csetjmp>
#include <csignal>
#include <cstring>
#include <mutex>

#include "cxlkit.h"
#include "kv/kv.h"
#include "sys/sys.h"

namespace {

// the faulting thread's jump target while it copies under the guard, else null; touched by
// the thread before it copies, so the handler never allocates this TLS slot first. volatile:
// memcpy is a builtin that reads no global, so without it the compiler drops the store
// before the copy as dead (the store after it overwrites it) and the handler sees null
thread_local sigjmp_buf *volatile t_guard = nullptr;
struct sigaction g_prev;   // SIGBUS's handler before ours; written once under g_once
std::once_flag g_once;
int g_install_rc = 0;

void pass_on(int sig, siginfo_t *si, void *uc) {
    if (g_prev.sa_flags & SA_SIGINFO) {
        if (g_prev.sa_sigaction) g_prev.sa_sigaction(sig, si, uc);
        return;
    }
    // ignored: a kill() is dropped; a fault would re-execute and fault forever, so it takes
    // the default action, as the kernel does for a fault whose SIGBUS is ignored
    if (g_prev.sa_handler == SIG_IGN && (si == nullptr || si->si_code <= 0)) return;
    if (g_prev.sa_handler == SIG_DFL || g_prev.sa_handler == SIG_IGN) {
        // the default action (core dump): reset, then re-raise; a fault re-executes anyway
        struct sigaction dfl{};
        dfl.sa_handler = SIG_DFL;
        sigemptyset(&dfl.sa_mask);
        sigaction(sig, &dfl, nullptr);
        raise(sig);
        return;
    }
    g_prev.sa_handler(sig);
}

// A guarded range: written by the thread that registers it (lo, then hi with release; hi = 0
// first on removal), read by the SIGBUS handler on any thread; faults by the handler only.
struct Range {
    std::atomic<int> used{0};         // claimed by cxk_aio_guard_range (CAS), freed by unguard
    std::atomic<uintptr_t> lo{0};
    std::atomic<uintptr_t> hi{0};     // 0: not guarding (yet, or any more)
    std::atomic<uint64_t> faults{0};  // pages replaced by the handler while guarded
};
constexpr int kRanges = 64;
Range g_ranges[kRanges];
size_t g_page = 0;  // the page size, read once outside the handler (sysconf is not signal-safe)

// A fault at addr inside a guarded range: a zero page in place of the faulting page. False:
// not in any range, or the page could not be replaced (the fault stays a crash).
bool replace_in_range(uintptr_t addr) {
    for (Range &r : g_ranges) {
        // acquire pairs with the release store of hi in cxk_aio_guard_range: lo is set
        const uintptr_t hi = r.hi.load(std::memory_order_acquire);
        if (hi == 0 || addr >= hi || addr < r.lo.load(std::memory_order_relaxed)) continue;
        const uintptr_t page = addr & ~uintptr_t(g_page - 1);
        if (cxk::sys_map_zero_in_handler(reinterpret_cast<void *>(page), g_page) != 0)
            return false;
        r.faults.fetch_add(1, std::memory_order_relaxed);  // lock-free on every Linux target
        return true;
    }
    return false;
}

void on_sigbus(int sig, siginfo_t *si, void *uc) {
    sigjmp_buf *j = t_guard;
    if (j != nullptr && si != nullptr && si->si_code > 0) {  // a fault of this thread, not kill()
        t_guard = nullptr;
        siglongjmp(*j, 1);  // restores the signal mask saved by sigsetjmp(.., 1)
    }
    if (si != nullptr && si->si_code > 0 &&
        replace_in_range(reinterpret_cast<uintptr_t>(si->si_addr)))
        return;  // the faulting access runs again, on the zero page
    pass_on(sig, si, uc);
}

void install() {
    struct sigaction sa{};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGBUS, &sa, &g_prev) != 0) g_install_rc = -errno;
}

// Kept out of line so that the compiler does not keep dst/src/n in registers across the
// jump (they are not used after it anyway: the failure path only returns). c: also fold the
// bytes into that checksum as they move (kv/copy_sum.cpp); nullptr: a plain memcpy.
__attribute__((noinline)) int copy_guarded(void *dst, const void *src, size_t n,
                                           cxk::kv::Checksum *c) {
    sigjmp_buf env;
    if (sigsetjmp(env, 1) != 0) return -EFAULT;  // came back from the handler
    t_guard = &env;
    std::atomic_signal_fence(std::memory_order_seq_cst);  // the guard is set before any byte moves
    if (c) cxk::kv::copy_fold(*c, dst, src, n);
    else std::memcpy(dst, src, n);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    t_guard = nullptr;
    return 0;
}

// Arguments checked and the handler installed (once per process), then the guarded copy.
int guarded(void *dst, const void *src, uint64_t nbytes, cxk::kv::Checksum *c) {
    if (dst == nullptr || src == nullptr) return -EINVAL;
    std::call_once(g_once, [] {
        g_page = cxk_page_size();
        install();
    });
    if (g_install_rc != 0) return g_install_rc;
    t_guard = nullptr;  // first touch of the TLS slot, outside any handler
    return copy_guarded(dst, src, size_t(nbytes), c);
}

}  // namespace

extern "C" int cxk_aio_copy(void *dst, const void *src, uint64_t nbytes) {
    return nbytes == 0 ? 0 : guarded(dst, src, nbytes, nullptr);
}

extern "C" int cxk_aio_copy_sum(void *dst, const void *src, uint64_t nbytes, uint64_t *sum) {
    if (sum == nullptr) return -EINVAL;
    cxk::kv::Checksum c;
    if (nbytes != 0) {
        if (int rc = guarded(dst, src, nbytes, &c)) return rc;
    }
    *sum = c.finish();
    return 0;
}

extern "C" int cxk_aio_guard_range(void *addr, uint64_t nbytes, int *id) {
    if (addr == nullptr || id == nullptr || nbytes == 0) return -EINVAL;
    const uintptr_t lo = reinterpret_cast<uintptr_t>(addr);
    if (nbytes > UINTPTR_MAX - lo) return -EINVAL;
    std::call_once(g_once, [] {
        g_page = cxk_page_size();
        install();
    });
    if (g_install_rc != 0) return g_install_rc;
    for (int i = 0; i < kRanges; i++) {
        int free = 0;
        if (!g_ranges[i].used.compare_exchange_strong(free, 1, std::memory_order_acquire))
            continue;
        g_ranges[i].faults.store(0, std::memory_order_relaxed);
        g_ranges[i].lo.store(lo, std::memory_order_relaxed);
        // release pairs with the handler's acquire of hi: it sees lo whenever it sees hi
        g_ranges[i].hi.store(lo + uintptr_t(nbytes), std::memory_order_release);
        *id = i;
        return 0;
    }
    return -ENOSPC;
}

extern "C" int cxk_aio_unguard_range(int id, uint64_t *faults) {
    if (id < 0 || id >= kRanges || faults == nullptr) return -EINVAL;
    Range &r = g_ranges[id];
    if (r.used.load(std::memory_order_acquire) == 0) return -EINVAL;
    r.hi.store(0, std::memory_order_seq_cst);  // the handler stops matching it first
    *faults = r.faults.load(std::memory_order_relaxed);
    r.lo.store(0, std::memory_order_relaxed);
    r.used.store(0, std::memory_order_release);  // pairs with the CAS of the next claimer
    return 0;
}
