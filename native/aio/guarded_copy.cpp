// guarded_copy.cpp — cxk_aio_copy: a memcpy that survives SIGBUS. A copy to or from a shared
// file mapping faults with SIGBUS when the file was truncated under the mapping (by another
// process, between any size check and the copy: a window no check closes) or a mapped page
// cannot be read back. The copying thread marks itself guarded; the SIGBUS handler jumps back
// to the guard of the faulting thread, which returns -EFAULT; a SIGBUS on any thread that is
// not copying goes on to the handler that was there before (Python's faulthandler, the
// default action), so a real crash stays a crash. The handler is installed once, on the first
// copy: a handler installed after it (faulthandler.enable() called later) runs first and
// would take a guarded fault for a crash.
#include <atomic>
#include <cerrno>
#include <csetjmp>
#include <csignal>
#include <cstring>
#include <mutex>

#include "cxlkit.h"
#include "kv/kv.h"

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

void on_sigbus(int sig, siginfo_t *si, void *uc) {
    sigjmp_buf *j = t_guard;
    if (j != nullptr && si != nullptr && si->si_code > 0) {  // a fault of this thread, not kill()
        t_guard = nullptr;
        siglongjmp(*j, 1);  // restores the signal mask saved by sigsetjmp(.., 1)
    }
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
    std::call_once(g_once, install);
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
