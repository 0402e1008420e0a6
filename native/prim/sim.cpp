// sim.cpp — the non-coherence simulator (coherence "sim"): per-host views of a pool,
// 64-byte line transfers between a view and the pool under cross-process line locks, and
// seeded random evictions. Costs here are the simulator's: production only tests g_on.
#include "prim/sim.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

#include "cxlkit.h"
#include "sys/config.h"
#include "sys/sys.h"

namespace cxk::sim {

std::atomic<bool> g_on{false};

namespace {

constexpr uint64_t kLine = 64;
constexpr uint64_t kLocks = 1u << 16;          // line-lock stripes shared by every host of a pool
constexpr uint64_t kMetaBytes = 4096;          // after the view and its shadow in the view file
constexpr uint64_t kMetaMagic = 0x4d49534b584c43ull;  // "CLXKSIM"
constexpr uint32_t kRecent = 64;               // lines of recent calls: eviction candidates
constexpr uint32_t kMaxMaps = 64;

// The view file: [view: size][synced: size][Meta]. Written under the file's init lock.
struct Meta {
    uint64_t magic;
    uint64_t size;
    uint64_t ready;                            // 1 once view and synced hold the pool's copy
};

}  // namespace

struct Map {
    uint8_t *view = nullptr, *synced = nullptr, *pool = nullptr;
    uint64_t size = 0, nlines = 0;
    uint32_t *locks = nullptr;                 // kLocks words: the owner's pid, 0 = free
    int view_fd = -1, locks_fd = -1;
    std::string view_path, locks_path;
    pid_t pid = 0;
    std::atomic<uint64_t> recent[kRecent] = {};  // line + 1 (0 = none)
    std::atomic<uint32_t> recent_pos{0};
};

namespace {

std::shared_mutex g_mu;                        // exclusive: attach/detach; shared: the hooks
std::atomic<Map *> g_maps[kMaxMaps];
std::atomic<uint64_t> g_ctr{0};
uint64_t g_seed = 1;
uint32_t g_evict = 16384;                      // eviction chance per hooked call, of 65536
std::atomic<uint64_t> g_wb{0}, g_fetch{0}, g_evicted{0}, g_nt{0};
thread_local std::vector<std::pair<Map *, uint64_t>> t_nt;  // streaming lines before a fence

uint64_t rnd() {
    uint64_t z = g_seed + g_ctr.fetch_add(0x9e3779b97f4a7c15ull, std::memory_order_relaxed);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

Map *find(const void *a) {
    const uintptr_t x = uintptr_t(a);
    for (auto &slot : g_maps) {
        Map *m = slot.load(std::memory_order_acquire);
        if (m && x >= uintptr_t(m->view) && x < uintptr_t(m->view) + m->size) return m;
    }
    return nullptr;
}

// ---- cross-process line locks (a process killed holding one is detected by its pid) ----
// This process's pid for the lock words, without a syscall per line (reset in a child of fork).
std::atomic<int> g_pid{0};
uint32_t my_pid() {
    int v = g_pid.load(std::memory_order_relaxed);
    if (v == 0) g_pid.store(v = getpid(), std::memory_order_relaxed);
    return uint32_t(v);
}

void lock_line(Map *m, uint64_t i) {
    uint32_t *w = &m->locks[i & (kLocks - 1)];
    const uint32_t me = my_pid();
    for (uint64_t spin = 1;; ++spin) {
        uint32_t want = 0;
        // acquire pairs with the release in unlock_line: the previous holder's copies are seen
        if (__atomic_compare_exchange_n(w, &want, me, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
            return;
        if (spin % 64 == 0) sched_yield();
        if (spin % 4096 == 0 && want != me && sys_kill(int(want), 0) == -ESRCH)
            __atomic_compare_exchange_n(w, &want, 0u, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    }
}
void unlock_line(Map *m, uint64_t i) { __atomic_store_n(&m->locks[i & (kLocks - 1)], 0u, __ATOMIC_RELEASE); }

void load_line(const uint8_t *src, uint64_t out[8]) {
    const uint64_t *s = reinterpret_cast<const uint64_t *>(src);
    for (int k = 0; k < 8; ++k) out[k] = __atomic_load_n(&s[k], __ATOMIC_RELAXED);
}

// Under the line's lock. Dirty = the view differs from what the host last exchanged: the
// line goes to the pool whole (a write-back writes all 64 bytes).
bool write_back(Map *m, uint64_t i) {
    uint64_t v[8];
    load_line(m->view + i * kLine, v);
    uint8_t *s = m->synced + i * kLine;
    if (std::memcmp(v, s, kLine) == 0) return false;
    std::memcpy(m->pool + i * kLine, v, kLine);
    std::memcpy(s, v, kLine);
    g_wb.fetch_add(1, std::memory_order_relaxed);
    return true;
}

// Under the line's lock, for a clean line: take the pool's words that changed since the last
// exchange. A word another process of the host stores meanwhile keeps that store (the CAS
// fails): the line is then dirty and goes out at its next write-back.
void fetch(Map *m, uint64_t i) {
    uint64_t p[8];
    load_line(m->pool + i * kLine, p);
    uint64_t *s = reinterpret_cast<uint64_t *>(m->synced + i * kLine);
    if (std::memcmp(p, s, kLine) == 0) return;
    uint64_t *v = reinterpret_cast<uint64_t *>(m->view + i * kLine);
    for (int k = 0; k < 8; ++k) {
        uint64_t old = s[k];
        if (p[k] != old)
            __atomic_compare_exchange_n(&v[k], &old, p[k], false, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED);
    }
    std::memcpy(s, p, kLine);
    g_fetch.fetch_add(1, std::memory_order_relaxed);
}

void evict_line(Map *m, uint64_t i) {
    lock_line(m, i);
    if (!write_back(m, i)) fetch(m, i);
    unlock_line(m, i);
}

// Evictions nobody controls: with probability g_evict/65536 per call, one line near the
// range, or one a recent call named, leaves the cache (written back if dirty, else dropped
// and fetched again). The range's lines become candidates of later calls.
void maybe_evict(Map *m, uint64_t lo, uint64_t hi) {
    const uint64_t r = rnd();
    m->recent[m->recent_pos.fetch_add(1, std::memory_order_relaxed) % kRecent].store(
        lo + (r >> 40) % (hi - lo) + 1, std::memory_order_relaxed);
    if ((r & 0xffff) >= g_evict) return;
    uint64_t line;
    if (r >> 16 & 1) {
        const uint64_t a = lo > 8 ? lo - 8 : 0, b = std::min(hi + 8, m->nlines);
        line = a + (r >> 17) % (b - a);
    } else {
        line = m->recent[(r >> 17) % kRecent].load(std::memory_order_relaxed);
        if (line-- == 0) return;
    }
    evict_line(m, line);
    g_evicted.fetch_add(1, std::memory_order_relaxed);
}

void lines_of(const Map *m, const void *a, size_t n, uint64_t *lo, uint64_t *hi) {
    const uint64_t off = uint64_t(uintptr_t(a) - uintptr_t(m->view));
    *lo = off / kLine;
    *hi = std::min((off + n + kLine - 1) / kLine, m->nlines);
}

void drain_nt() {
    for (auto &[m, i] : t_nt) {
        bool live = false;
        for (auto &slot : g_maps) live |= slot.load(std::memory_order_acquire) == m;
        if (!live) continue;  // its pool was closed meanwhile
        lock_line(m, i);
        write_back(m, i);
        unlock_line(m, i);
    }
    t_nt.clear();
}

// ---- the files: shared by every process that uses them, removed by the last ----
// Byte 0 carries a read lock per user (OFD locks: per open file, dropped by the kernel when
// the process dies); byte 1 is the init lock.
int lock_wait(int fd, long long at, int type) {
    for (int tries = 0;; ++tries) {
        const int r = sys_ofd_lock(fd, at, type);
        if (r != -EAGAIN && r != -EACCES && r != -EINTR) return r;
        if (tries > 300000) return -ETIMEDOUT;  // ~30 s of 100 us naps
        usleep(100);
    }
}

// Open path with a user's read lock, sized bytes; init(fd, fresh) runs under the init lock
// (fresh: the file was just made). Retries when a last user removed the file meanwhile.
template <class Init> int shared_open(const std::string &path, uint64_t bytes, int *fd_out,
                                      Init init) {
    for (;;) {
        const int fd = sys_open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (fd < 0) return fd;
        int r = lock_wait(fd, 0, F_RDLCK);
        if (r == 0) r = lock_wait(fd, 1, F_WRLCK);
        struct stat st {};
        if (r == 0) r = sys_fstat(fd, &st);
        if (r == 0 && st.st_nlink == 0) {  // removed by its last user: make a new one
            sys_close(fd);
            continue;
        }
        const bool fresh = r == 0 && uint64_t(st.st_size) < bytes;
        if (r == 0 && fresh) r = sys_ftruncate(fd, (long long)bytes);
        if (r == 0) r = init(fd, fresh);
        sys_ofd_lock(fd, 1, F_UNLCK);
        if (r) {
            sys_close(fd);
            return r;
        }
        *fd_out = fd;
        return 0;
    }
}

// The last user (no other read lock) runs fini and removes the file; every user closes it.
template <class Fini> void shared_close(const std::string &path, int fd, bool owner, Fini fini) {
    if (owner && sys_ofd_lock(fd, 0, F_WRLCK) == 0) {
        fini();
        sys_unlink(path.c_str());
    }
    sys_close(fd);
}

std::string file_name(const uint8_t uuid[16], const char *what) {
    static const char hex[] = "0123456789abcdef";
    std::string s;
    cxk::config::get_text(cxk::config::Id::SIM_DIR, &s);  // a path: any text is well-formed
    s += "/.cxlkit-sim-";
    for (int i = 0; i < 16; ++i) {
        s += hex[uuid[i] >> 4];
        s += hex[uuid[i] & 15];
    }
    return s + "-" + what;
}

// CXLKIT_SIM_SEED and CXLKIT_SIM_EVICT: 0, or -EINVAL for a malformed one (nothing changed).
int read_env() {
    uint64_t seed = 0;
    double f = 0;
    if (int e = cxk::config::get_u64(cxk::config::Id::SIM_SEED, &seed)) return e;
    if (int e = cxk::config::get_fraction(cxk::config::Id::SIM_EVICT, &f)) return e;
    g_seed = seed;
    g_evict = uint32_t(f * 65536);  // f within [0, 1]
    return 0;
}

void unmap_all(Map *m) {
    if (m->view) cxk_unmap(m->view, 2 * m->size + kMetaBytes);
    if (m->locks) cxk_unmap(m->locks, kLocks * sizeof(uint32_t));
    m->view = m->synced = nullptr;
    m->locks = nullptr;
}

int map_files(Map *m, uint8_t *pool, uint64_t size, uint64_t align, const uint8_t uuid[16],
              const char *key) {
    m->locks_path = file_name(uuid, "locks");
    m->view_path = file_name(uuid, key);
    const uint64_t lock_bytes = kLocks * sizeof(uint32_t);
    int r = shared_open(m->locks_path, lock_bytes, &m->locks_fd, [&](int fd, bool) {
        void *a = nullptr;
        if (int e = cxk_map_fd(fd, lock_bytes, 0, 0, 1, &a)) return e;
        m->locks = static_cast<uint32_t *>(a);
        return 0;
    });
    if (r) return r;
    const uint64_t bytes = 2 * size + kMetaBytes;
    // a view and its shadow are written whole: refuse what would fill the filesystem (a
    // tmpfs full under a mapping is SIGBUS, for every user of it)
    struct statvfs vs {};
    if ((r = sys_fstatvfs(m->locks_fd, &vs)) != 0) return r;
    if (bytes > uint64_t(vs.f_bavail) * vs.f_frsize) return -ENOSPC;
    return shared_open(m->view_path, bytes, &m->view_fd, [&](int fd, bool) {
        void *a = nullptr;
        if (int e = cxk_map_fd(fd, bytes, 0, align, 1, &a)) return e;
        m->view = static_cast<uint8_t *>(a);
        m->synced = m->view + size;
        Meta *meta = reinterpret_cast<Meta *>(m->synced + size);
        if (meta->magic != kMetaMagic || meta->size != size || !meta->ready) {
            // a new host cache: every line cached and clean, as the pool is now. The view is
            // copied from the shadow, not from the pool again: other hosts write lines back
            // meanwhile, and a line that differed would pass for dirty and go back stale.
            std::memcpy(m->synced, pool, size);
            std::memcpy(m->view, m->synced, size);
            meta->magic = kMetaMagic;
            meta->size = size;
            __atomic_store_n(&meta->ready, uint64_t(1), __ATOMIC_RELEASE);
        }
        return 0;
    });
}

}  // namespace

int attach(uint8_t *pool, uint64_t size, uint64_t align, const uint8_t uuid[16], const char *key,
           Map **out, uint8_t **view) {
    if (!pool || !size || size % kLine || !key || !*key || !out || !view) return -EINVAL;
    for (const char *c = key; *c; ++c)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9')))
            return -EINVAL;
    auto *m = new (std::nothrow) Map;
    if (!m) return -ENOMEM;
    m->pool = pool;
    m->size = size;
    m->nlines = size / kLine;
    m->pid = getpid();
    std::unique_lock<std::shared_mutex> lk(g_mu);
    if (int e = read_env()) {  // tests change them between opens
        delete m;
        return e;
    }
    // fork while another thread (a pool's heartbeat) is inside a hook would hand the child a
    // g_mu held by a thread it does not have (ctest ring hung about 1 run in 3 in its forked
    // reader). Take g_mu exclusively around fork; the child makes its copy anew rather than
    // unlocking it (glibc matches a writer's unlock by tid, and the child's tid differs).
    static const int atfork = pthread_atfork(
        [] { g_mu.lock(); }, [] { g_mu.unlock(); },
        [] { new (&g_mu) std::shared_mutex; g_pid.store(0); });
    (void)atfork;
    uint32_t at = kMaxMaps;
    for (uint32_t k = 0; k < kMaxMaps && at == kMaxMaps; ++k)
        if (!g_maps[k].load(std::memory_order_relaxed)) at = k;
    int r = at == kMaxMaps ? -EMFILE : map_files(m, pool, size, align, uuid, key);
    if (r) {
        unmap_all(m);
        if (m->view_fd >= 0) sys_close(m->view_fd);
        if (m->locks_fd >= 0) sys_close(m->locks_fd);
        delete m;
        return r;
    }
    g_maps[at].store(m, std::memory_order_release);
    g_on.store(true, std::memory_order_release);
    *out = m;
    *view = m->view;
    return 0;
}

void detach(Map *m) {
    if (!m) return;
    std::unique_lock<std::shared_mutex> lk(g_mu);
    bool any = false;
    for (auto &slot : g_maps) {
        if (slot.load(std::memory_order_relaxed) == m) slot.store(nullptr, std::memory_order_release);
        any |= slot.load(std::memory_order_relaxed) != nullptr;
    }
    g_on.store(any, std::memory_order_release);
    const bool owner = getpid() == m->pid;
    shared_close(m->view_path, m->view_fd, owner, [m] {
        for (uint64_t i = 0; i < m->nlines; ++i) {
            // no other process of the host is left: a line equal to its shadow stays clean
            if (std::memcmp(m->view + i * kLine, m->synced + i * kLine, kLine) == 0) continue;
            lock_line(m, i);
            write_back(m, i);
            unlock_line(m, i);
        }
    });
    if (m->view) cxk_unmap(m->view, 2 * m->size + kMetaBytes);
    m->view = nullptr;
    shared_close(m->locks_path, m->locks_fd, owner, [] {});
    unmap_all(m);
    delete m;
}

bool flush(const void *a, size_t n) {
    std::shared_lock<std::shared_mutex> lk(g_mu);
    Map *m = find(a);
    if (!m) return false;
    uint64_t lo, hi;
    lines_of(m, a, n, &lo, &hi);
    for (uint64_t i = lo; i < hi; ++i) {
        lock_line(m, i);
        write_back(m, i);
        unlock_line(m, i);
    }
    maybe_evict(m, lo, hi);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    return true;
}

bool invalidate(const void *a, size_t n) {
    std::shared_lock<std::shared_mutex> lk(g_mu);
    Map *m = find(a);
    if (!m) return false;
    drain_nt();  // the invalidate's mfence
    uint64_t lo, hi;
    lines_of(m, a, n, &lo, &hi);
    for (uint64_t i = lo; i < hi; ++i) evict_line(m, i);
    maybe_evict(m, lo, hi);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    return true;
}

bool nt_stored(const void *a, size_t n) {
    std::shared_lock<std::shared_mutex> lk(g_mu);
    Map *m = find(a);
    if (!m) return false;
    uint64_t lo, hi;
    lines_of(m, a, n, &lo, &hi);
    for (uint64_t i = lo; i < hi; ++i) t_nt.emplace_back(m, i);
    g_nt.fetch_add(hi - lo, std::memory_order_relaxed);
    maybe_evict(m, lo, hi);
    return true;
}

void fence() {
    if (t_nt.empty()) return;
    std::shared_lock<std::shared_mutex> lk(g_mu);
    drain_nt();
}

Counts counts() {
    return Counts{g_wb.load(), g_fetch.load(), g_evicted.load(), g_nt.load()};
}

}  // namespace cxk::sim

extern "C" void cxk_sim_counts(uint64_t out[4]) {
    if (!out) return;
    const cxk::sim::Counts c = cxk::sim::counts();
    out[0] = c.writebacks;
    out[1] = c.fetches;
    out[2] = c.evictions;
    out[3] = c.nt_lines;
}
