// sys.h — private: the fault-injection check used by every syscall wrapper in sys.cpp
// and by other native files that make a syscall of their own (open, ftruncate, ...).
#pragma once
#include <pthread.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include <cerrno>

namespace cxk {

enum class Sys : int {
    mbind, set_mempolicy, get_mempolicy, move_pages, migrate_pages, memfd_create,
    mmap, munmap, madvise, open, ftruncate, fstat, prctl, fcntl, pthread_create,
    sched_setaffinity, sched_getaffinity,
    // ---- aio (native/sys/sys_aio.cpp) ----
    pread, pwrite, fdatasync, io_uring_setup, io_uring_enter,
    fchmod, fstatvfs, link, unlink, kill, getrandom,  // the pool's
    read_small,  // sys_read_small: procfs / sysfs attributes (boot_id, /proc/PID/stat)
    futex,       // sys_futex_*: the rings' same-host wake-up (native/sys/sys_futex.cpp)
    fallocate,   // sys_fallocate: a pool file's blocks reserved before they are touched
    count_
};

// Counts the call; returns -errno when an armed fault fires for it, else 0.
// Thread-safe (atomics). pre: s < Sys::count_.
int fault_check(Sys s) noexcept;

// "" when spec is a well-formed CXLKIT_FAULT (name:nth:errno[,...]), else what is wrong.
std::string fault_spec_check(const char *spec);

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
// lstat(2) (Sys::fstat's hook): what is at path itself, a symbolic link not followed.
int sys_lstat(const char *path, struct stat *st) noexcept;
int sys_madvise(void *addr, size_t nbytes, int advice) noexcept;

// ---- the one aligned reservation, affinity, and the one sysfs reader ----------
// An anonymous private mapping of nbytes (page-rounded) whose start is a multiple of align (a
// power of two >= the page size): align more bytes are mapped (one Sys::mmap), the slop before
// and after is unmapped. prot PROT_NONE reserves address space for a MAP_FIXED mapping to
// replace (MAP_NORESERVE either way). Returns 0 or -errno (-EINVAL for a bad align, -ENOMEM
// when nbytes + align overflows).
int sys_map_aligned(size_t nbytes, size_t align, int prot, void **out) noexcept;
// munmap(2) with the fault hook (Sys::munmap); 0 or -errno.
int sys_munmap(void *addr, size_t nbytes) noexcept;
// The calling thread's CPU affinity (pid 0), with the fault hooks; 0 or -errno.
int sys_setaffinity_self(size_t setsize, const cpu_set_t *set) noexcept;
int sys_getaffinity_self(size_t setsize, cpu_set_t *set) noexcept;
// Another thread's affinity (Sys::sched_setaffinity); 0 or -errno.
int sys_setaffinity_thread(pthread_t t, size_t setsize, const cpu_set_t *set) noexcept;
// The text of a sysfs file named relative to the sysfs root: $CXLKIT_SYSFS_ROOT (tests point
// it at a fixture tree), else /sys; e.g. "devices/system/node/node0/cpulist". Opened through
// the fault hook (Sys::open). 0 and *out, or -errno (-ENOENT when absent).
int sys_read_sysfs(const char *rel, std::string *out) noexcept;
// The sysfs root itself (no trailing slash): what sys_read_sysfs prefixes.
std::string sysfs_root();
// ---- the pool's syscalls: each 0 (or a count) or -errno, through the hook ----
int sys_fchmod(int fd, unsigned mode) noexcept;
int sys_fstatvfs(int fd, struct statvfs *st) noexcept;
int sys_link(const char *from, const char *to) noexcept;
int sys_unlink(const char *path) noexcept;
int sys_kill(int pid, int sig) noexcept;                  // sig 0: does pid exist (-ESRCH)
// The calling thread's timer slack in ns (prctl PR_GET/SET_TIMERSLACK), with the fault hook
// (Sys::prctl): the slack (> 0) or -errno; 0 or -errno.
long sys_timerslack_get() noexcept;
int sys_timerslack_set(unsigned long ns) noexcept;
long sys_getrandom(void *buf, size_t n) noexcept;         // bytes or -errno
// fcntl(F_OFD_SETLK) of one byte: type F_WRLCK, F_RDLCK or F_UNLCK. 0 or -errno (-EAGAIN: held).
int sys_ofd_lock(int fd, long long at, int type) noexcept;
// fcntl(F_OFD_GETLK) of one byte (Sys::fcntl): would a lock of `type` on it conflict? 1 when
// some open file description holds a conflicting lock, 0 when none does, or -errno. fd may be
// read-only (the probe takes no lock).
int sys_ofd_held(int fd, long long at, int type) noexcept;
// fallocate(2) mode 0 of [off, off + len): the blocks exist afterwards, so touching them
// through a mapping cannot fault for want of space. 0 or -errno (-ENOSPC / -EDQUOT: no room,
// -EOPNOTSUPP: the filesystem cannot reserve).
int sys_fallocate(int fd, long long off, long long len) noexcept;
// mmap / munmap as the kernel has them (the caller computes the placement): the address or
// -errno through *out; 0 or -errno.
int sys_mmap(void *want, size_t n, int prot, int flags, int fd, long long off, void **out) noexcept;
int sys_close(int fd) noexcept;
// A small file read whole (procfs, sysfs: boot_id, /proc/PID/stat, a dax attribute) through
// its own fault hook (Sys::read_small, so injecting "open" still reaches the pool file's open):
// at most cap - 1 bytes into buf, NUL-terminated. The byte count or -errno (-ENOENT: absent).
long sys_read_small(const char *path, char *buf, size_t cap) noexcept;

// ---- the rings' same-host wake-up (native/sys/sys_futex.cpp) -------------------
// Shared futexes (no FUTEX_PRIVATE_FLAG: the word is in a MAP_SHARED pool mapping that other
// processes map too), each call through the fault hook (Sys::futex). timeout_ns > 0 always:
// a word in pool memory is untrusted, so no wait may last for ever.
// Wait while *word == val: 0 woken, -EAGAIN *word != val already, -ETIMEDOUT, -EINTR, or the
// kernel's -errno (-ENOSYS, -EFAULT: the mapping cannot hold a futex, e.g. some devdax).
int sys_futex_wait(const uint32_t *word, uint32_t val, int64_t timeout_ns) noexcept;
// Wake up to n waiters of word: the number woken, or -errno.
int sys_futex_wake(uint32_t *word, int n) noexcept;
// futex_waitv (Linux 5.16): wait while every *words[i] == vals[i], n in 1..128; the index of
// the word that woke us, or -errno as sys_futex_wait (-ENOSYS on an older kernel).
int sys_futex_waitv(const uint32_t *const *words, const uint32_t *vals, unsigned n,
                    int64_t timeout_ns) noexcept;
constexpr unsigned kFutexWaitvMax = 128;

// ---- the AdamW kernel's SIGBUS guard over a range (native/aio/guarded_copy.cpp) --
// Map private zero-filled anonymous memory at [page, page + n) in place of what was mapped
// there (MAP_FIXED): the SIGBUS handler's answer to a fault in a guarded file mapping whose
// file was truncated under it. Async-signal-safe (one mmap system call, errno kept); no
// fault hook (a failure here turns a guarded fault back into a crash). 0 or -errno.
int sys_map_zero_in_handler(void *page, size_t n) noexcept;

}  // namespace cxk
