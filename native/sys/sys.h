// sys.h — private: the fault-injection check used by every syscall wrapper in sys.cpp
// and by other native files that make a syscall of their own (open, ftruncate, ...).
#pragma once
#include <sys/stat.h>

#include <cstddef>

#include <cerrno>

namespace cxk {

enum class Sys : int {
    mbind, set_mempolicy, get_mempolicy, move_pages, migrate_pages, memfd_create,
    mmap, munmap, madvise, open, ftruncate, fstat, prctl, fcntl, pthread_create,
    // ---- aio (native/sys/sys_aio.cpp) ----
    pread, pwrite, fdatasync, io_uring_setup, io_uring_enter,
    count_
};

// Counts the call; returns -errno when an armed fault fires for it, else 0.
// Thread-safe (atomics). pre: s < Sys::count_.
int fault_check(Sys s) noexcept;

// RAII file descriptor.
struct Fd {
    int fd = -1;
    Fd() = default;
    explicit Fd(int f) : fd(f) {}
    Fd(const Fd &) = delete;
    Fd &operator=(const Fd &) = delete;
    Fd(Fd &&o) noexcept : fd(o.fd) { o.fd = -1; }
    Fd &operator=(Fd &&o) noexcept;
    ~Fd();
    int release() noexcept { int f = fd; fd = -1; return f; }
};

// open(2) with the fault hook; returns fd or -errno.
int sys_open(const char *path, int flags, unsigned mode) noexcept;
int sys_ftruncate(int fd, long long len) noexcept;
int sys_fstat(int fd, struct stat *st) noexcept;
int sys_madvise(void *addr, size_t nbytes, int advice) noexcept;

}  // namespace cxk
