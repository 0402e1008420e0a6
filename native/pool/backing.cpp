// pool_backing.cpp — the memory under a pool: files on tmpfs/hugetlbfs (created under a
// temporary name and linked into place once formatted, so a half-formatted pool is never
// seen), devdax devices (size and alignment from sysfs), memfd, and several backings
// striped into one contiguous range at CXK_POOL_STRIPE_BYTES; and the OFD lock on a backing
// that serialises one host's processes while they take a host slot over.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "pool/pool.h"
#include "sys/sys.h"

namespace cxk::pool {
namespace {

int read_u64(const std::string &path, uint64_t *v) {
    char buf[64];
    const long got = sys_read_small(path.c_str(), buf, sizeof buf);
    if (got < 0) return int(got);
    char *end = nullptr;
    errno = 0;
    const unsigned long long x = std::strtoull(buf, &end, 0);
    if (end == buf || errno == ERANGE || buf[0] == '-') return -EINVAL;
    *v = x;
    return 0;
}

std::string base_name(const std::string &path) {
    size_t s = path.rfind('/');
    return s == std::string::npos ? path : path.substr(s + 1);
}

}  // namespace

namespace {
// Paths where only devices live: a regular file there would pass for memory it is not.
bool device_path(const std::string &path) {
    return path.compare(0, 8, "/dev/dax") == 0 ||
           (path.compare(0, 5, "/dev/") == 0 && path.find('/', 5) == std::string::npos);
}

// An existing pool file is trusted only when its owner is us (or the caller shares it with
// a group) and no other user can write it: any byte of a pool steers our reads and writes.
int check_owner(const struct stat &st, unsigned flags) {
    // a memfd reached through /proc/PID/fd/N has no name (and mode 0777): /proc already
    // limits who can open it, so only its owner is checked
    const bool anonymous = st.st_nlink == 0;
    if ((st.st_mode & S_IWOTH) && !anonymous) return -EPERM;
    if (flags & CXK_POOL_SHARED) return 0;
    if (st.st_uid != geteuid() || ((st.st_mode & S_IWGRP) && !anonymous)) return -EPERM;
    return 0;
}
// The whole of a new pool file reserved: -ENOSPC when the filesystem has no room. The free
// space is checked first: on a tmpfs with more room than free memory, a reservation past
// the room fills the memory (and the OOM killer ends processes) before it fails; a
// filesystem that cannot reserve is trusted with what it said.
int reserve_file(int fd, uint64_t size) {
    struct statvfs vs;
    if (int e = sys_fstatvfs(fd, &vs)) return e;
    if (size > uint64_t(vs.f_bavail) * vs.f_frsize) return -ENOSPC;
    const int r = sys_fallocate(fd, 0, (long long)size);
    return r == -EOPNOTSUPP ? 0 : r;
}
}  // namespace

int backing_open(Backing *b, bool create, unsigned flags, uint64_t size, uint32_t mode) {
    const bool excl = flags & CXK_POOL_EXCL;
    if (b->path.compare(0, 6, "memfd:") == 0) {
        if (!create || size == 0) return -EINVAL;  // anonymous memory exists only once made
        int fd = cxk_memfd_create(b->path.c_str() + 6, 1u /* MFD_CLOEXEC */);
        if (fd < 0) return fd;
        b->fd = fd;
        b->memfd = b->created = true;
        b->size = size;
        if (int r = sys_ftruncate(fd, (long long)size)) return r;
        return 0;
    }
    struct stat st;
    int fd = sys_open(b->path.c_str(), O_RDWR, 0);
    if (fd == -ENOENT && device_path(b->path)) return -ENOENT;  // never create one there
    if (fd == -ENOENT && create) {
        static std::atomic<unsigned> seq{0};
        b->tmp = b->path + ".tmp." + std::to_string(getpid()) + "." + std::to_string(seq++);
        fd = sys_open(b->tmp.c_str(), O_RDWR | O_CREAT | O_EXCL, mode);
        if (fd < 0) {
            b->tmp.clear();
            return fd;
        }
        b->fd = fd;
        b->created = true;
        // the umask must not widen or narrow what the caller asked for
        if (int r = sys_fchmod(fd, mode)) return r;
        b->size = size;
        if (int r = sys_ftruncate(fd, (long long)size)) return r;
        // a page the filesystem cannot back is a SIGBUS at its first touch, whenever that
        // is: every block is reserved now (overcommit: the metadata only, when formatted,
        // and each extent when a host claims it; space.h)
        return (flags & CXK_POOL_OVERCOMMIT) ? 0 : reserve_file(fd, size);
    }
    if (fd < 0) return fd;
    b->fd = fd;
    if (int r = sys_fstat(fd, &st)) return r;
    // a file that exists is a pool (files appear only whole); a device is one only if
    // formatted, which the caller checks
    if (create && excl && S_ISREG(st.st_mode)) return -EEXIST;
    if (S_ISREG(st.st_mode) && device_path(b->path)) return -ENODEV;
    if (S_ISREG(st.st_mode))
        if (int r = check_owner(st, flags)) return r;
    if (S_ISCHR(st.st_mode)) {
        b->devdax = true;
        const std::string name = base_name(b->path);
        const int r = cxk_pool_dax_geometry("/sys", name.c_str(), &b->size, &b->align);
        // a character device sysfs knows no dax device by (/dev/zero, or a link's name)
        return r == -ENOENT && name.compare(0, 3, "dax") != 0 ? -ENODEV : r;
    }
    if (!S_ISREG(st.st_mode)) return -ENODEV;
    b->size = uint64_t(st.st_size);
    return 0;
}

int backings_map(std::vector<Backing> &bs, uint64_t total, uint64_t align, uint8_t **out) {
    void *p = nullptr;
    if (bs.size() == 1) {
        int r = cxk_map_fd(bs[0].fd, total, 0, align, 1, &p);
        if (r == 0) *out = static_cast<uint8_t *>(p);
        return r;
    }
    const uint64_t g = CXK_POOL_STRIPE_BYTES, n = bs.size();
    if (align > g || total % (g * n)) return -EINVAL;
    // Reserve the whole range (aligned to the granule), then place each granule of each
    // backing over it with MAP_FIXED: granule k comes from backing k % n at (k / n) * g.
    const size_t span = total + g;
    void *res = nullptr;
    if (int e = sys_mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                         -1, 0, &res))
        return e;
    const uintptr_t base = (uintptr_t(res) + g - 1) & ~uintptr_t(g - 1);
    for (uint64_t k = 0; k < total / g; ++k) {
        void *m = nullptr;
        if (int e = sys_mmap(reinterpret_cast<void *>(base + k * g), g, PROT_READ | PROT_WRITE,
                             MAP_SHARED | MAP_FIXED, bs[k % n].fd, (long long)((k / n) * g), &m)) {
            sys_munmap(res, span);
            return e;
        }
    }
    const size_t head = base - uintptr_t(res), tail = span - head - total;
    if (head) sys_munmap(res, head);
    if (tail) sys_munmap(reinterpret_cast<void *>(base + total), tail);
    *out = reinterpret_cast<uint8_t *>(base);
    return 0;
}

int backings_link(std::vector<Backing> &bs) {
    // backing 0 holds the superblock: linking it last makes the pool appear whole
    for (size_t k = bs.size(); k-- > 0;) {
        Backing &b = bs[k];
        if (!b.created || b.memfd) continue;
        if (int e = sys_link(b.tmp.c_str(), b.path.c_str())) {
            for (size_t j = k + 1; j < bs.size(); ++j)
                if (bs[j].created && !bs[j].memfd) sys_unlink(bs[j].path.c_str());
            return e;
        }
    }
    for (auto &b : bs)
        if (!b.tmp.empty()) {
            sys_unlink(b.tmp.c_str());
            b.tmp.clear();
        }
    return 0;
}

void backings_discard(std::vector<Backing> &bs) {
    for (auto &b : bs) {
        if (!b.tmp.empty()) sys_unlink(b.tmp.c_str());
        b.tmp.clear();
        if (b.fd >= 0) sys_close(b.fd);
        b.fd = -1;
    }
}

int backing_lock(int fd, uint64_t at, int64_t timeout_ns) {
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long nap_us = 50;; nap_us = std::min(nap_us * 2, 10000L)) {
        const int r = sys_ofd_lock(fd, (long long)at, F_WRLCK);
        if (r == 0) return 0;
        if (r != -EAGAIN && r != -EACCES && r != -EINTR) return r;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((now.tv_sec - t0.tv_sec) * 1000000000ll + (now.tv_nsec - t0.tv_nsec) > timeout_ns)
            return -ETIMEDOUT;
        usleep(useconds_t(nap_us));  // the holder is busy for milliseconds
    }
}

void backing_unlock(int fd, uint64_t at) { sys_ofd_lock(fd, (long long)at, F_UNLCK); }

}  // namespace cxk::pool

extern "C" int cxk_pool_dax_geometry(const char *sysfs_root, const char *name, uint64_t *size,
                                     uint64_t *align) {
    if (!sysfs_root || !name || !*name || !size || !align || std::strchr(name, '/'))
        return -EINVAL;
    const std::string dir = std::string(sysfs_root) + "/bus/dax/devices/" + name + "/";
    if (int r = cxk::pool::read_u64(dir + "size", size)) return r;
    // kernels before 5.10 have no align attribute: devdax then maps at 2 MiB
    if (cxk::pool::read_u64(dir + "align", align) != 0) *align = 2u << 20;
    if (*align == 0 || (*align & (*align - 1))) return -EINVAL;
    return 0;
}
