// sys_aio.h — private: the raw syscalls of native/aio (pread/pwrite, fdatasync, OFD locks
// and io_uring through liburing when the build found it), each behind the fault hook.
#pragma once
#include <cstddef>
#include <cstdint>

namespace cxk {

// pread/pwrite of up to n bytes at off; the byte count (> 0, maybe short) or -errno.
// EINTR is retried here. A read at end of file returns 0.
long sys_pread(int fd, void *buf, size_t n, uint64_t off) noexcept;
long sys_pwrite(int fd, const void *buf, size_t n, uint64_t off) noexcept;
int sys_fdatasync(int fd) noexcept;

// OFD lock of byte `at` of fd (kind: 0 unlock, 1 shared, 2 exclusive); wait = block until
// granted. -EAGAIN when held by another open file description and !wait. The lock belongs
// to the open file description, so it goes away when the last fd of it closes (a dead
// process's locks go with it). A wait a signal interrupts returns -EINTR.
int sys_ofd_lock(int fd, int kind, bool wait, uint64_t at) noexcept;

// One io_uring (liburing). Without liburing at build time every call returns -ENOSYS.
// Not thread-safe: one thread owns a ring.
struct UringCqe {
    uint64_t user;
    int res;
};
class Uring {
   public:
    Uring() = default;
    Uring(const Uring &) = delete;
    Uring &operator=(const Uring &) = delete;
    ~Uring();
    static bool built_in() noexcept;
    int init(unsigned entries) noexcept;
    // Queue one read or write; -EBUSY when the submission queue is full. The fault hook
    // counts it as a pread/pwrite: an armed fault returns its -errno and queues nothing.
    int prep(int fd, bool write, void *buf, unsigned n, uint64_t off, uint64_t user) noexcept;
    int submit() noexcept;               // submitted count or -errno (io_uring_enter)
    int wait(UringCqe *out) noexcept;    // blocks for one completion; 0 or -errno
   private:
    void *ring_ = nullptr;  // struct io_uring *, owned
};

}  // namespace cxk
