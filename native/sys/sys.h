// sys.h — private: the fault-injection check used by every syscall wrapper in sys.cpp
// and by other native files that make a syscall of their own (open, ftruncate, ...).
#pragma once
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <cstddef>

#include <cerrno>

namespace cxk {

enum class Sys : int {
    mbind, set_mempolicy, get_mempolicy, move_pages, migrate_pages, memfd_create,
    mmap, munmap, madvise, open, ftruncate, fstat, prctl, fcntl, pthread_create,
    fchmod, fstatvfs, link, unlink, kill, getrandom,  // the pool's (issue 10)
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

// ---- the pool's syscalls (issue 10): each 0 (or a count) or -errno, through the hook ----
int sys_fchmod(int fd, unsigned mode) noexcept;
int sys_fstatvfs(int fd, struct statvfs *st) noexcept;
int sys_link(const char *from, const char *to) noexcept;
int sys_unlink(const char *path) noexcept;
int sys_kill(int pid, int sig) noexcept;                  // sig 0: does pid exist (-ESRCH)
long sys_getrandom(void *buf, size_t n) noexcept;         // bytes or -errno
// fcntl(F_OFD_SETLK) of one byte: type F_WRLCK or F_UNLCK. 0 or -errno (-EAGAIN: held).
int sys_ofd_lock(int fd, long long at, int type) noexcept;
// mmap / munmap as the kernel has them (the caller computes the placement): the address or
// -errno through *out; 0 or -errno.
int sys_mmap(void *want, size_t n, int prot, int flags, int fd, long long off, void **out) noexcept;
int sys_munmap(void *addr, size_t n) noexcept;
int sys_close(int fd) noexcept;

}  // namespace cxk
