// sys.cpp — the one place for raw syscalls (mempolicy family, memfd, mmap helpers), cpuid
// feature detection, and the fault-injection hook that lets tests fail any of them.
#include "sys/sys.h"

#include <cpuid.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/statvfs.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "cxlkit.h"
#include "sys/config.h"

namespace cxk {
namespace {

const char *const kSysNames[] = {"mbind", "set_mempolicy", "get_mempolicy", "move_pages",
                                 "migrate_pages", "memfd_create", "mmap", "munmap",
                                 "madvise", "open", "ftruncate", "fstat", "prctl", "fcntl",
                                 "pthread_create", "sched_setaffinity", "sched_getaffinity",
                                 // ---- aio (native/sys/sys_aio.cpp) ----
                                 "pread", "pwrite", "fdatasync", "io_uring_setup",
                                 "io_uring_enter",
                                 "fchmod", "fstatvfs", "link", "unlink", "kill", "getrandom",
                                 "read_small",
                                 "futex",  // sys_futex.cpp
                                 "fallocate"};
static_assert(sizeof(kSysNames) / sizeof(kSysNames[0]) == size_t(Sys::count_), "names");

struct Fault {
    std::atomic<int64_t> calls{0};
    std::atomic<int64_t> fire_at{0};  // absolute call number that fails; 0 = disarmed
    std::atomic<int> err{0};
};
Fault g_faults[size_t(Sys::count_)];

int sys_index(const char *name) {
    if (!name) return -1;
    for (size_t i = 0; i < size_t(Sys::count_); ++i)
        if (std::strcmp(name, kSysNames[i]) == 0) return int(i);
    return -1;
}

struct ErrnoName { const char *name; int value; };
const ErrnoName kErrnoNames[] = {
    {"EPERM", EPERM},   {"ENOENT", ENOENT}, {"ESRCH", ESRCH},   {"EINTR", EINTR},
    {"EIO", EIO},       {"ENXIO", ENXIO},   {"EBADF", EBADF},   {"EAGAIN", EAGAIN},
    {"ENOMEM", ENOMEM}, {"EACCES", EACCES}, {"EFAULT", EFAULT}, {"EBUSY", EBUSY},
    {"EEXIST", EEXIST}, {"ENODEV", ENODEV}, {"EINVAL", EINVAL}, {"ENFILE", ENFILE},
    {"EMFILE", EMFILE}, {"EFBIG", EFBIG},   {"ENOSPC", ENOSPC}, {"EROFS", EROFS},
    {"ENOSYS", ENOSYS}, {"EOPNOTSUPP", EOPNOTSUPP}, {"ETIMEDOUT", ETIMEDOUT},
    {"EDQUOT", EDQUOT},
};

int parse_errno(const std::string &s) {
    for (const auto &e : kErrnoNames)
        if (s == e.name) return e.value;
    char *end = nullptr;
    long v = std::strtol(s.c_str(), &end, 10);
    if (end == s.c_str() || *end != '\0' || v <= 0 || v > 4095) return -1;
    return int(v);
}

// Each item of a CXLKIT_FAULT spec (name:nth:errno[,...]) in turn: "" when every item is
// well-formed (and, with arm, armed), else what is wrong with the first bad one.
std::string fault_items(const std::string &all, bool arm) {
    size_t pos = 0;
    while (pos <= all.size()) {
        const size_t comma = all.find(',', pos);
        const std::string item = all.substr(pos, comma == std::string::npos ? std::string::npos
                                                                            : comma - pos);
        const size_t c1 = item.find(':'), c2 = item.rfind(':');
        if (c1 == std::string::npos || c2 == c1) return "item '" + item + "' is not name:nth:errno";
        const std::string name = item.substr(0, c1), nth_s = item.substr(c1 + 1, c2 - c1 - 1);
        char *end = nullptr;
        const long nth = std::strtol(nth_s.c_str(), &end, 10);
        const int err = parse_errno(item.substr(c2 + 1));
        if (sys_index(name.c_str()) < 0) return "item '" + item + "': no syscall wrapper " + name;
        if (nth_s.empty() || *end || nth <= 0 || nth > INT32_MAX)
            return "item '" + item + "': nth is not a positive count";
        if (err <= 0) return "item '" + item + "': errno is not a number 1..4095 or a name (ENOMEM)";
        if (arm) cxk_fault_inject(name.c_str(), int(nth), err);
        if (comma == std::string::npos) break;
        pos = comma + 1;
    }
    return "";
}

// CXLKIT_FAULT, armed when the library loads, whole or not at all: a malformed spec arms
// nothing (a library must not abort its host process); the table reports it refused
// (cxk_config_check, `cxlkit config`).
__attribute__((constructor)) void arm_faults_from_env() {
    std::string spec;
    if (config::get_text(config::Id::FAULT, &spec) != 0) {
        cxk_config_error();  // no call of this thread's asked for it: not its error to report
        return;
    }
    if (!spec.empty()) fault_items(spec, true);
}

long ret(long r) { return r < 0 ? -errno : r; }

}  // namespace

std::string fault_spec_check(const char *spec) { return fault_items(spec ? spec : "", false); }

int fault_check(Sys s) noexcept {
    Fault &f = g_faults[size_t(s)];
    int64_t n = f.calls.fetch_add(1, std::memory_order_relaxed) + 1;
    int64_t at = f.fire_at.load(std::memory_order_acquire);
    // acquire pairs with the release in cxk_fault_inject: err is visible once fire_at is
    if (at != 0 && at == n && f.fire_at.compare_exchange_strong(at, 0))
        return -f.err.load(std::memory_order_relaxed);
    return 0;
}

Fd &Fd::operator=(Fd &&o) noexcept {
    if (this != &o) {
        if (fd >= 0) ::close(fd);
        fd = o.fd;
        o.fd = -1;
    }
    return *this;
}
Fd::~Fd() {
    if (fd >= 0) ::close(fd);
}

int sys_open(const char *path, int flags, unsigned mode) noexcept {
    if (int e = fault_check(Sys::open)) return e;
    return int(ret(::open(path, flags | O_CLOEXEC, mode)));
}
int sys_ftruncate(int fd, long long len) noexcept {
    if (int e = fault_check(Sys::ftruncate)) return e;
    return int(ret(::ftruncate(fd, off_t(len))));
}
int sys_fstat(int fd, struct stat *st) noexcept {
    if (int e = fault_check(Sys::fstat)) return e;
    return int(ret(::fstat(fd, st)));
}
int sys_lstat(const char *path, struct stat *st) noexcept {
    if (int e = fault_check(Sys::fstat)) return e;
    return int(ret(::lstat(path, st)));
}

int sys_madvise(void *addr, size_t nbytes, int advice) noexcept {
    if (int e = fault_check(Sys::madvise)) return e;
    return int(ret(::madvise(addr, nbytes, advice)));
}

// ---- the one aligned reservation, affinity, and the one sysfs reader ----------
int sys_map_aligned(size_t nbytes, size_t align, int prot, void **out) noexcept {
    const size_t ps = cxk_page_size();
    if (!out || nbytes == 0 || align < ps || (align & (align - 1)) != 0) return -EINVAL;
    if (nbytes > SIZE_MAX - align - ps) return -ENOMEM;
    const size_t len = (nbytes + ps - 1) & ~(ps - 1);
    if (int e = fault_check(Sys::mmap)) return e;
    void *raw = ::mmap(nullptr, len + align, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                       -1, 0);
    if (raw == MAP_FAILED) return -errno;
    const uintptr_t base = uintptr_t(raw);
    const uintptr_t start = (base + align - 1) & ~uintptr_t(align - 1);
    // the slop is ours and page-aligned: these munmaps cannot fail, and are not hooked
    if (start > base) ::munmap(raw, start - base);
    const size_t after = base + len + align - (start + len);
    if (after) ::munmap(reinterpret_cast<void *>(start + len), after);
    *out = reinterpret_cast<void *>(start);
    return 0;
}

int sys_munmap(void *addr, size_t nbytes) noexcept {
    if (int e = fault_check(Sys::munmap)) return e;
    return int(ret(::munmap(addr, nbytes)));
}

int sys_setaffinity_self(size_t setsize, const cpu_set_t *set) noexcept {
    if (int e = fault_check(Sys::sched_setaffinity)) return e;
    return int(ret(::sched_setaffinity(0, setsize, set)));  // pid 0: the calling thread only
}

int sys_getaffinity_self(size_t setsize, cpu_set_t *set) noexcept {
    if (int e = fault_check(Sys::sched_getaffinity)) return e;
    return int(ret(::sched_getaffinity(0, setsize, set)));
}

int sys_setaffinity_thread(pthread_t t, size_t setsize, const cpu_set_t *set) noexcept {
    if (int e = fault_check(Sys::sched_setaffinity)) return e;
    return -::pthread_setaffinity_np(t, setsize, set);  // returns the error number itself
}

std::string sysfs_root() {
    std::string root;
    config::get_text(config::Id::SYSFS_ROOT, &root);  // a path: any text is well-formed
    while (root.size() > 1 && root.back() == '/') root.pop_back();
    return root;
}

int sys_read_sysfs(const char *rel, std::string *out) noexcept {
    if (!rel || !out) return -EINVAL;
    try {
        const std::string path = sysfs_root() + "/" + rel;
        Fd fd(sys_open(path.c_str(), O_RDONLY, 0));
        if (fd.fd < 0) return fd.release();
        out->clear();
        char buf[4096];
        for (;;) {
            ssize_t got = ::read(fd.fd, buf, sizeof buf);
            if (got < 0 && errno == EINTR) continue;
            if (got < 0) return -errno;
            if (got == 0) return 0;
            out->append(buf, size_t(got));
            if (out->size() > (1u << 20)) return -EFBIG;  // no sysfs attribute is this long
        }
    } catch (const std::bad_alloc &) {
        return -ENOMEM;
    }
}
// ---- the pool's syscalls ------------------------------------------------------
int sys_fchmod(int fd, unsigned mode) noexcept {
    if (int e = fault_check(Sys::fchmod)) return e;
    return int(ret(::fchmod(fd, mode_t(mode))));
}
int sys_fstatvfs(int fd, struct statvfs *st) noexcept {
    if (int e = fault_check(Sys::fstatvfs)) return e;
    return int(ret(::fstatvfs(fd, st)));
}
int sys_link(const char *from, const char *to) noexcept {
    if (int e = fault_check(Sys::link)) return e;
    return int(ret(::link(from, to)));
}
int sys_unlink(const char *path) noexcept {
    if (int e = fault_check(Sys::unlink)) return e;
    return int(ret(::unlink(path)));
}
int sys_kill(int pid, int sig) noexcept {
    if (int e = fault_check(Sys::kill)) return e;
    return int(ret(::kill(pid_t(pid), sig)));
}
long sys_getrandom(void *buf, size_t n) noexcept {
    if (int e = fault_check(Sys::getrandom)) return e;
    return ret(::getrandom(buf, n, 0));
}

long sys_timerslack_get() noexcept {
    if (int e = fault_check(Sys::prctl)) return e;
    return ret(prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0));
}

int sys_timerslack_set(unsigned long ns) noexcept {
    if (int e = fault_check(Sys::prctl)) return e;
    return int(ret(prctl(PR_SET_TIMERSLACK, ns, 0, 0, 0)));
}

// One byte at `at`, locked (or asked about) as `type`: the lock records of the two OFD calls.
static struct flock ofd_byte(long long at, int type) noexcept {
    struct flock l {};
    l.l_type = short(type);
    l.l_whence = SEEK_SET;
    l.l_start = off_t(at);
    l.l_len = 1;
    return l;
}
int sys_ofd_lock(int fd, long long at, int type) noexcept {
    if (int e = fault_check(Sys::fcntl)) return e;
    struct flock l = ofd_byte(at, type);
    return int(ret(::fcntl(fd, F_OFD_SETLK, &l)));
}
int sys_ofd_held(int fd, long long at, int type) noexcept {
    if (int e = fault_check(Sys::fcntl)) return e;
    struct flock l = ofd_byte(at, type);
    if (::fcntl(fd, F_OFD_GETLK, &l) != 0) return -errno;
    return l.l_type == F_UNLCK ? 0 : 1;
}
int sys_fallocate(int fd, long long off, long long len) noexcept {
    if (int e = fault_check(Sys::fallocate)) return e;
    int r;
    do r = ::fallocate(fd, 0, off_t(off), off_t(len));
    while (r != 0 && errno == EINTR);
    return r == 0 ? 0 : -errno;
}
int sys_mmap(void *want, size_t n, int prot, int flags, int fd, long long off,
             void **out) noexcept {
    if (int e = fault_check(Sys::mmap)) return e;
    void *p = ::mmap(want, n, prot, flags, fd, off_t(off));
    if (p == MAP_FAILED) return -errno;
    *out = p;
    return 0;
}
int sys_close(int fd) noexcept { return int(ret(::close(fd))); }

long sys_read_small(const char *path, char *buf, size_t cap) noexcept {
    if (!path || !buf || cap == 0) return -EINVAL;
    if (int e = fault_check(Sys::read_small)) return e;
    Fd fd(::open(path, O_RDONLY | O_CLOEXEC));
    if (fd.fd < 0) return -errno;
    size_t n = 0;
    while (n + 1 < cap) {
        ssize_t got = ::read(fd.fd, buf + n, cap - 1 - n);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return -errno;
        if (got == 0) break;
        n += size_t(got);
    }
    buf[n] = 0;
    return long(n);
}

// ---- the AdamW kernel's SIGBUS guard over a range -------------------------------
int sys_map_zero_in_handler(void *page, size_t n) noexcept {
    const int saved = errno;  // a signal handler leaves the interrupted code's errno alone
    void *p = ::mmap(page, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                     -1, 0);
    const int rc = p == MAP_FAILED ? -errno : 0;
    errno = saved;
    return rc;
}

}  // namespace cxk

using cxk::fault_check;
using cxk::Sys;

extern "C" {

const char *cxk_version(void) { return CXLKIT_VERSION_STRING; }

int cxk_fault_inject(const char *name, int nth, int err) {
    int i = cxk::sys_index(name);
    if (i < 0 || nth < 0 || (nth > 0 && err <= 0)) return -EINVAL;
    cxk::Fault &f = cxk::g_faults[i];
    if (nth == 0) {
        f.fire_at.store(0, std::memory_order_release);
        return 0;
    }
    f.err.store(err, std::memory_order_relaxed);
    // release pairs with the acquire in fault_check
    f.fire_at.store(f.calls.load(std::memory_order_relaxed) + nth, std::memory_order_release);
    return 0;
}

void cxk_fault_clear(void) {
    for (auto &f : cxk::g_faults) f.fire_at.store(0, std::memory_order_release);
}

int64_t cxk_fault_calls(const char *name) {
    int i = cxk::sys_index(name);
    if (i < 0) return -EINVAL;
    return cxk::g_faults[i].calls.load(std::memory_order_relaxed);
}

long cxk_mbind(void *addr, unsigned long len, int mode, const unsigned long *nodemask,
               unsigned long maxnode, unsigned flags) {
    if (int e = fault_check(Sys::mbind)) return e;
    return cxk::ret(syscall(SYS_mbind, addr, len, mode, nodemask, maxnode, flags));
}

long cxk_set_mempolicy(int mode, const unsigned long *nodemask, unsigned long maxnode) {
    if (int e = fault_check(Sys::set_mempolicy)) return e;
    return cxk::ret(syscall(SYS_set_mempolicy, mode, nodemask, maxnode));
}

long cxk_get_mempolicy(int *mode, unsigned long *nodemask, unsigned long maxnode, void *addr,
                       unsigned long flags) {
    if (int e = fault_check(Sys::get_mempolicy)) return e;
    return cxk::ret(syscall(SYS_get_mempolicy, mode, nodemask, maxnode, addr, flags));
}

long cxk_move_pages(int pid, unsigned long count, void **pages, const int *nodes, int *status,
                    int flags) {
    if (int e = fault_check(Sys::move_pages)) return e;
    return cxk::ret(syscall(SYS_move_pages, pid, count, pages, nodes, status, flags));
}

long cxk_migrate_pages(int pid, unsigned long maxnode, const unsigned long *old_nodes,
                       const unsigned long *new_nodes) {
    if (int e = fault_check(Sys::migrate_pages)) return e;
    return cxk::ret(syscall(SYS_migrate_pages, pid, maxnode, old_nodes, new_nodes));
}

int cxk_memfd_create(const char *name, unsigned flags) {
    if (int e = fault_check(Sys::memfd_create)) return e;
    return int(cxk::ret(syscall(SYS_memfd_create, name, flags)));
}

size_t cxk_page_size(void) {
    static const size_t ps = size_t(sysconf(_SC_PAGESIZE));
    return ps;
}

int cxk_map_anon(size_t nbytes, void **out) {
    if (!out || nbytes == 0) return -EINVAL;
    size_t ps = cxk_page_size();
    if (nbytes > SIZE_MAX - ps) return -ENOMEM;
    if (int e = fault_check(Sys::mmap)) return e;
    void *p = mmap(nullptr, (nbytes + ps - 1) & ~(ps - 1), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return -errno;
    *out = p;
    return 0;
}

int cxk_map_fd(int fd, size_t nbytes, uint64_t offset, size_t align, int writable, void **out) {
    size_t ps = cxk_page_size();
    if (!out || nbytes == 0 || fd < 0) return -EINVAL;
    if (align == 0) align = ps;
    if ((align & (align - 1)) != 0 || align < ps || offset % ps != 0) return -EINVAL;
    if (nbytes > SIZE_MAX - align) return -ENOMEM;
    int prot = PROT_READ | (writable ? PROT_WRITE : 0);
    if (align == ps) {
        if (int e = fault_check(Sys::mmap)) return e;
        void *p = mmap(nullptr, nbytes, prot, MAP_SHARED, fd, off_t(offset));
        if (p == MAP_FAILED) return -errno;
        *out = p;
        return 0;
    }
    // Reserve an aligned range of address space (the one aligned-reservation helper), then
    // place the mapping on it: MAP_FIXED replaces the reservation.
    void *res = nullptr;
    if (int e = cxk::sys_map_aligned(nbytes, align, PROT_NONE, &res)) return e;
    void *p = mmap(res, nbytes, prot, MAP_SHARED | MAP_FIXED, fd, off_t(offset));
    if (p == MAP_FAILED) {
        int e = errno;
        munmap(res, (nbytes + ps - 1) & ~(ps - 1));
        return -e;
    }
    *out = p;
    return 0;
}

int cxk_unmap(void *addr, size_t nbytes) {
    if (!addr || nbytes == 0) return -EINVAL;
    if (int e = fault_check(Sys::munmap)) return e;
    return munmap(addr, nbytes) == 0 ? 0 : -errno;
}

int cxk_populate(void *addr, size_t nbytes) {
    if (!addr || nbytes == 0) return -EINVAL;
    if (int e = fault_check(Sys::madvise)) return e;
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
    if (madvise(addr, nbytes, MADV_POPULATE_WRITE) == 0) return 0;
    if (errno != EINVAL) return -errno;
    // Kernel before 5.14: touch every page; the write faults it in under the range policy.
    size_t ps = cxk_page_size();
    auto *p = static_cast<volatile unsigned char *>(addr);
    for (size_t off = 0; off < nbytes; off += ps) p[off] = p[off];
    return 0;
}

int cxk_thp_disable(int disable) {
    if (int e = fault_check(Sys::prctl)) return e;
    return prctl(PR_SET_THP_DISABLE, disable ? 1 : 0, 0, 0, 0) == 0 ? 0 : -errno;
}

uint32_t cxk_cpu_features(void) {
    static const uint32_t features = [] {
        uint32_t f = 0;
        unsigned a, b, c, d;
        if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
        const bool osxsave = c & (1u << 27);
        uint64_t xcr0 = 0;
        if (osxsave) {
            unsigned lo, hi;
            __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
            xcr0 = (uint64_t(hi) << 32) | lo;
        }
        const bool ymm = (xcr0 & 0x6) == 0x6;     // SSE + AVX state saved by the OS
        const bool zmm = (xcr0 & 0xe6) == 0xe6;   // + opmask, ZMM_Hi256, Hi16_ZMM
        if (ymm && (c & (1u << 12))) f |= CXK_CPU_FMA;
        if (ymm && (c & (1u << 29))) f |= CXK_CPU_F16C;
        if (c & (1u << 20)) f |= CXK_CPU_SSE42;
        if (__get_cpuid_max(0, nullptr) < 7) return f;
        __cpuid_count(7, 0, a, b, c, d);
        if (b & (1u << 23)) f |= CXK_CPU_CLFLUSHOPT;
        if (b & (1u << 24)) f |= CXK_CPU_CLWB;
        if (ymm && (b & (1u << 5))) f |= CXK_CPU_AVX2;
        if (zmm && (b & (1u << 16))) f |= CXK_CPU_AVX512F;
        if (zmm && (b & (1u << 30))) f |= CXK_CPU_AVX512BW;
        if (c & (1u << 28)) f |= CXK_CPU_MOVDIR64B;
        unsigned a1, b1, c1, d1;
        __cpuid_count(7, 1, a1, b1, c1, d1);
        if (zmm && (a1 & (1u << 5))) f |= CXK_CPU_AVX512BF16;
        return f;
    }();
    return features;
}

}  // extern "C"
