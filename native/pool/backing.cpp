// pool_backing.cpp — the memory under a pool: files on tmpfs/hugetlbfs (created under a
// temporary name and linked into place once formatted, so a half-formatted pool is never
// seen), devdax devices (size and alignment from sysfs), memfd, and several backings
// striped into one contiguous range at CXK_POOL_STRIPE_BYTES; and the OFD lock on a backing
// that serialises one host's processes while they take a host slot over.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
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
    FILE *f = std::fopen(path.c_str(), "re");
    if (!f) return -errno;
    unsigned long long x = 0;
    int n = std::fscanf(f, "%llu", &x);
    std::fclose(f);
    if (n != 1) return -EINVAL;
    *v = x;
    return 0;
}

std::string base_name(const std::string &path) {
    size_t s = path.rfind('/');
    return s == std::string::npos ? path : path.substr(s + 1);
}

}  // namespace

int backing_open(Backing *b, bool create, bool excl, uint64_t size, uint32_t mode) {
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
        if (fchmod(fd, mode) != 0) return -errno;
        b->size = size;
        return sys_ftruncate(fd, (long long)size);
    }
    if (fd < 0) return fd;
    b->fd = fd;
    if (int r = sys_fstat(fd, &st)) return r;
    // a file that exists is a pool (files appear only whole); a device is one only if
    // formatted, which the caller checks
    if (create && excl && S_ISREG(st.st_mode)) return -EEXIST;
    if (S_ISCHR(st.st_mode)) {
        b->devdax = true;
        return cxk_pool_dax_geometry("/sys", base_name(b->path).c_str(), &b->size, &b->align);
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
    if (int e = fault_check(Sys::mmap)) return e;
    // Reserve the whole range (aligned to the granule), then place each granule of each
    // backing over it with MAP_FIXED: granule k comes from backing k % n at (k / n) * g.
    const size_t span = total + g;
    void *res = mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (res == MAP_FAILED) return -errno;
    const uintptr_t base = (uintptr_t(res) + g - 1) & ~uintptr_t(g - 1);
    for (uint64_t k = 0; k < total / g; ++k) {
        void *want = reinterpret_cast<void *>(base + k * g);
        void *m = mmap(want, g, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, bs[k % n].fd,
                       off_t((k / n) * g));
        if (m == MAP_FAILED) {
            int e = errno;
            munmap(res, span);
            return -e;
        }
    }
    const size_t head = base - uintptr_t(res), tail = span - head - total;
    if (head) munmap(res, head);
    if (tail) munmap(reinterpret_cast<void *>(base + total), tail);
    *out = reinterpret_cast<uint8_t *>(base);
    return 0;
}

int backings_link(std::vector<Backing> &bs) {
    // backing 0 holds the superblock: linking it last makes the pool appear whole
    for (size_t k = bs.size(); k-- > 0;) {
        Backing &b = bs[k];
        if (!b.created || b.memfd) continue;
        if (link(b.tmp.c_str(), b.path.c_str()) != 0) {
            int e = errno;
            for (size_t j = k + 1; j < bs.size(); ++j)
                if (bs[j].created && !bs[j].memfd) unlink(bs[j].path.c_str());
            return -e;
        }
    }
    for (auto &b : bs)
        if (!b.tmp.empty()) {
            unlink(b.tmp.c_str());
            b.tmp.clear();
        }
    return 0;
}

void backings_discard(std::vector<Backing> &bs) {
    for (auto &b : bs) {
        if (!b.tmp.empty()) unlink(b.tmp.c_str());
        b.tmp.clear();
        if (b.fd >= 0) close(b.fd);
        b.fd = -1;
    }
}

int backing_lock(int fd, uint64_t at, int64_t timeout_ns) {
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long nap_us = 50;; nap_us = std::min(nap_us * 2, 10000L)) {
        if (int e = fault_check(Sys::fcntl)) return e;
        struct flock l {};
        l.l_type = F_WRLCK;
        l.l_whence = SEEK_SET;
        l.l_start = off_t(at);
        l.l_len = 1;
        if (fcntl(fd, F_OFD_SETLK, &l) == 0) return 0;
        if (errno != EAGAIN && errno != EACCES && errno != EINTR) return -errno;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((now.tv_sec - t0.tv_sec) * 1000000000ll + (now.tv_nsec - t0.tv_nsec) > timeout_ns)
            return -ETIMEDOUT;
        usleep(useconds_t(nap_us));  // the holder is busy for milliseconds
    }
}

void backing_unlock(int fd, uint64_t at) {
    struct flock l {};
    l.l_type = F_UNLCK;
    l.l_whence = SEEK_SET;
    l.l_start = off_t(at);
    l.l_len = 1;
    fcntl(fd, F_OFD_SETLK, &l);
}

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
