// sys_aio.cpp — the raw syscalls of the async I/O engine (native/aio): positional reads and
// writes, fdatasync, OFD byte locks and io_uring (liburing, when the build found it).
#include "sys/sys_aio.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "sys/sys.h"

#ifdef CXLKIT_HAVE_LIBURING
#include <liburing.h>
#endif

namespace cxk {

long sys_pread(int fd, void *buf, size_t n, uint64_t off) noexcept {
    if (int e = fault_check(Sys::pread)) return e;
    for (;;) {
        ssize_t r = ::pread(fd, buf, n, off_t(off));
        if (r >= 0) return long(r);
        if (errno != EINTR) return -errno;
    }
}

long sys_pwrite(int fd, const void *buf, size_t n, uint64_t off) noexcept {
    if (int e = fault_check(Sys::pwrite)) return e;
    for (;;) {
        ssize_t r = ::pwrite(fd, buf, n, off_t(off));
        if (r >= 0) return long(r);
        if (errno != EINTR) return -errno;
    }
}

int sys_fdatasync(int fd) noexcept {
    if (int e = fault_check(Sys::fdatasync)) return e;
    for (;;) {
        if (::fdatasync(fd) == 0) return 0;
        if (errno != EINTR) return -errno;
    }
}

int sys_ofd_lock(int fd, int kind, bool wait, uint64_t at) noexcept {
    if (int e = fault_check(Sys::fcntl)) return e;
    struct flock l;
    std::memset(&l, 0, sizeof l);  // OFD locks require l_pid == 0
    l.l_type = short(kind == 0 ? F_UNLCK : kind == 1 ? F_RDLCK : F_WRLCK);
    l.l_whence = SEEK_SET;
    l.l_start = off_t(at);
    l.l_len = 1;
    for (;;) {
        if (::fcntl(fd, wait ? F_OFD_SETLKW : F_OFD_SETLK, &l) == 0) return 0;
        if (errno == EACCES) return -EAGAIN;  // some kernels say EACCES for "held"
        // A wait a signal interrupts goes back to the caller, which may have to act on the
        // signal (Python's handlers run only between its calls: SIGTERM or Ctrl-C could not
        // stop a process waiting for another's lock); a try that does not wait is retried.
        if (errno != EINTR || wait) return -errno;
    }
}

#ifdef CXLKIT_HAVE_LIBURING

bool Uring::built_in() noexcept { return true; }

Uring::~Uring() {
    if (ring_) {
        io_uring_queue_exit(static_cast<io_uring *>(ring_));
        delete static_cast<io_uring *>(ring_);
    }
}

int Uring::init(unsigned entries) noexcept {
    if (ring_) return -EBUSY;
    if (int e = fault_check(Sys::io_uring_setup)) return e;
    auto *r = new (std::nothrow) io_uring;
    if (!r) return -ENOMEM;
    int rc = io_uring_queue_init(entries, r, 0);  // returns -errno (seccomp: -EPERM/-ENOSYS)
    if (rc < 0) {
        delete r;
        return rc;
    }
    ring_ = r;
    return 0;
}

int Uring::prep(int fd, bool write, void *buf, unsigned n, uint64_t off,
                uint64_t user) noexcept {
    if (int e = fault_check(write ? Sys::pwrite : Sys::pread)) return e;
    io_uring_sqe *sqe = io_uring_get_sqe(static_cast<io_uring *>(ring_));
    if (!sqe) return -EBUSY;
    if (write)
        io_uring_prep_write(sqe, fd, buf, n, off);
    else
        io_uring_prep_read(sqe, fd, buf, n, off);
    io_uring_sqe_set_data64(sqe, user);
    return 0;
}

int Uring::submit() noexcept {
    if (int e = fault_check(Sys::io_uring_enter)) return e;
    for (;;) {
        int r = io_uring_submit(static_cast<io_uring *>(ring_));
        if (r != -EINTR) return r;
    }
}

int Uring::wait(UringCqe *out) noexcept {
    io_uring *r = static_cast<io_uring *>(ring_);
    io_uring_cqe *cqe = nullptr;
    for (;;) {
        int rc = io_uring_wait_cqe(r, &cqe);
        if (rc == -EINTR) continue;
        if (rc < 0) return rc;
        break;
    }
    out->user = io_uring_cqe_get_data64(cqe);
    out->res = cqe->res;
    io_uring_cqe_seen(r, cqe);
    return 0;
}

#else  // no liburing at build time: the engine runs its thread pool

bool Uring::built_in() noexcept { return false; }
Uring::~Uring() = default;
int Uring::init(unsigned) noexcept { return -ENOSYS; }
int Uring::prep(int, bool, void *, unsigned, uint64_t, uint64_t) noexcept { return -ENOSYS; }
int Uring::submit() noexcept { return -ENOSYS; }
int Uring::wait(UringCqe *) noexcept { return -ENOSYS; }

#endif

}  // namespace cxk
