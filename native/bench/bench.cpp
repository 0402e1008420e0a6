// bench.cpp — the measuring kernels of `cxlkit bench`: dependent pointer chasing over a random
// cyclic permutation (latency), read / write / copy / non-temporal-write sweeps by pinned
// thread teams (bandwidth), both at once with throttled load generators (loaded latency), and
// the copy paths of memops.cpp timed per size. Memory is the caller's; placing it is not ours.
#include "bench/bench.h"

#include <immintrin.h>
#include <sched.h>
#include <sys/mman.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <new>
#include <system_error>
#include <thread>
#include <vector>

#include "cxlkit.h"
#include "sys/sys.h"

namespace cxk::bench {
namespace {

// The read kernels fold what they load into this, so the loads cannot be elided.
std::atomic<uint64_t> g_sink{0};

constexpr size_t kMaxCpu = 8192;          // CPU ids a pin request may name
constexpr size_t kLoadChunk = 16 << 10;   // generator work between two throttle checks
constexpr uint64_t kWarmupNs = 5000000;   // loaded latency: generators reach pace first

__attribute__((target("avx512f"))) uint64_t read_avx512(const char *p, size_t n) {
    __m512i a = _mm512_setzero_si512(), b = a, c = a, d = a;
    size_t i = 0;
    for (; i + 256 <= n; i += 256) {  // four independent chains keep several loads in flight
        a = _mm512_xor_si512(a, _mm512_load_si512(p + i));
        b = _mm512_xor_si512(b, _mm512_load_si512(p + i + 64));
        c = _mm512_xor_si512(c, _mm512_load_si512(p + i + 128));
        d = _mm512_xor_si512(d, _mm512_load_si512(p + i + 192));
    }
    for (; i < n; i += 64) a = _mm512_xor_si512(a, _mm512_load_si512(p + i));
    a = _mm512_xor_si512(_mm512_xor_si512(a, b), _mm512_xor_si512(c, d));
    alignas(64) uint64_t lanes[8];  // not _mm512_reduce_add_epi64: GCC 12 warns inside it
    _mm512_store_si512(lanes, a);
    return lanes[0] ^ lanes[1] ^ lanes[2] ^ lanes[3] ^ lanes[4] ^ lanes[5] ^ lanes[6] ^ lanes[7];
}
__attribute__((target("avx2"))) uint64_t read_avx2(const char *p, size_t n) {
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    size_t i = 0;
    for (; i + 128 <= n; i += 128) {
        a = _mm256_xor_si256(a, _mm256_load_si256(reinterpret_cast<const __m256i *>(p + i)));
        b = _mm256_xor_si256(b, _mm256_load_si256(reinterpret_cast<const __m256i *>(p + i + 32)));
        c = _mm256_xor_si256(c, _mm256_load_si256(reinterpret_cast<const __m256i *>(p + i + 64)));
        d = _mm256_xor_si256(d, _mm256_load_si256(reinterpret_cast<const __m256i *>(p + i + 96)));
    }
    for (; i < n; i += 64) {
        a = _mm256_xor_si256(a, _mm256_load_si256(reinterpret_cast<const __m256i *>(p + i)));
        b = _mm256_xor_si256(b, _mm256_load_si256(reinterpret_cast<const __m256i *>(p + i + 32)));
    }
    a = _mm256_xor_si256(_mm256_xor_si256(a, b), _mm256_xor_si256(c, d));
    return uint64_t(_mm256_extract_epi64(a, 0) ^ _mm256_extract_epi64(a, 3));
}
uint64_t read_sse2(const char *p, size_t n) {
    __m128i a = _mm_setzero_si128(), b = a, c = a, d = a;
    for (size_t i = 0; i < n; i += 64) {
        a = _mm_xor_si128(a, _mm_load_si128(reinterpret_cast<const __m128i *>(p + i)));
        b = _mm_xor_si128(b, _mm_load_si128(reinterpret_cast<const __m128i *>(p + i + 16)));
        c = _mm_xor_si128(c, _mm_load_si128(reinterpret_cast<const __m128i *>(p + i + 32)));
        d = _mm_xor_si128(d, _mm_load_si128(reinterpret_cast<const __m128i *>(p + i + 48)));
    }
    a = _mm_xor_si128(_mm_xor_si128(a, b), _mm_xor_si128(c, d));
    return uint64_t(_mm_cvtsi128_si64(a));
}

__attribute__((target("avx512f"))) void write_avx512(char *p, size_t n, bool nt) {
    const __m512i v = _mm512_set1_epi64(0x5a5a5a5a5a5a5a5all);
    if (nt)
        for (size_t i = 0; i < n; i += 64) _mm512_stream_si512(reinterpret_cast<__m512i *>(p + i), v);
    else
        for (size_t i = 0; i < n; i += 64) _mm512_store_si512(p + i, v);
}
__attribute__((target("avx2"))) void write_avx2(char *p, size_t n, bool nt) {
    const __m256i v = _mm256_set1_epi64x(0x5a5a5a5a5a5a5a5all);
    for (size_t i = 0; i < n; i += 32) {
        auto *q = reinterpret_cast<__m256i *>(p + i);
        if (nt) _mm256_stream_si256(q, v);
        else _mm256_store_si256(q, v);
    }
}
void write_sse2(char *p, size_t n, bool nt) {
    const __m128i v = _mm_set1_epi64x(0x5a5a5a5a5a5a5a5all);
    for (size_t i = 0; i < n; i += 16) {
        auto *q = reinterpret_cast<__m128i *>(p + i);
        if (nt) _mm_stream_si128(q, v);
        else _mm_store_si128(q, v);
    }
}

enum class Isa { avx512, avx2, sse2 };
Isa isa() {
    static const Isa k = [] {
        uint32_t f = cxk_cpu_features();
        if (f & CXK_CPU_AVX512F) return Isa::avx512;
        if (f & CXK_CPU_AVX2) return Isa::avx2;
        return Isa::sse2;
    }();
    return k;
}

// A spinning barrier: timed phases must not include a futex wake-up. Yields while waiting
// so that more threads than CPUs still make progress.
class Barrier {
public:
    explicit Barrier(unsigned n) : n_(n) {}
    void wait() {
        unsigned gen = gen_.load(std::memory_order_acquire);
        // acq_rel pairs with the other arrivals: the last one sees every write made before
        // the barrier, and its release of gen_ publishes them to the waiters' acquire
        if (count_.fetch_add(1, std::memory_order_acq_rel) + 1 == n_) {
            count_.store(0, std::memory_order_relaxed);
            gen_.store(gen + 1, std::memory_order_release);
            return;
        }
        for (unsigned spins = 0; gen_.load(std::memory_order_acquire) == gen; ++spins) {
            if (spins < 2000) _mm_pause();
            else std::this_thread::yield();
        }
    }

private:
    const unsigned n_;
    std::atomic<unsigned> count_{0};
    std::atomic<unsigned> gen_{0};
};

const void *chase_n(const void *p, uint64_t n) {
    uint64_t i = 0;
    for (; i + 8 <= n; i += 8) {  // unrolled: the loop branch is off the dependent path anyway
        p = *static_cast<const void *const *>(p);
        p = *static_cast<const void *const *>(p);
        p = *static_cast<const void *const *>(p);
        p = *static_cast<const void *const *>(p);
        p = *static_cast<const void *const *>(p);
        p = *static_cast<const void *const *>(p);
        p = *static_cast<const void *const *>(p);
        p = *static_cast<const void *const *>(p);
    }
    for (; i < n; ++i) p = *static_cast<const void *const *>(p);
    return p;
}

// Runs fn(i) on n threads, thread i pinned to cpus[i % ncpus] (unpinned without cpus).
// Every thread is created and pinned before any runs fn, so a failure leaves nothing behind.
template <class Fn>
int run_team(uint32_t n, const int32_t *cpus, uint32_t ncpus, Fn fn) {
    std::atomic<int> err{0};
    std::atomic<uint32_t> pinned{0};
    std::atomic<int> go{0};  // 1 = run fn, -1 = something failed: leave
    std::vector<std::thread> threads;
    try {
        threads.reserve(n);
        for (uint32_t i = 0; i < n; ++i)
            threads.emplace_back([&, i] {
                if (int e = pin_self(cpus && ncpus ? cpus[i % ncpus] : -1)) err.store(e);
                pinned.fetch_add(1, std::memory_order_release);
                int g;
                while ((g = go.load(std::memory_order_acquire)) == 0) std::this_thread::yield();
                if (g > 0) fn(i);
            });
    } catch (const std::system_error &) {
        err.store(-EAGAIN);
    } catch (const std::bad_alloc &) {
        err.store(-ENOMEM);
    }
    // acquire pairs with each thread's release of pinned: every pin result is in err now
    while (pinned.load(std::memory_order_acquire) < threads.size()) std::this_thread::yield();
    go.store(err.load() ? -1 : 1, std::memory_order_release);
    for (auto &t : threads) t.join();
    return err.load();
}

}  // namespace

uint64_t now_ns() noexcept {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

uint64_t thread_cpu_ns() noexcept {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

int pin_self(int cpu) noexcept {
    if (cpu < 0) return 0;
    if (size_t(cpu) >= kMaxCpu) return -EINVAL;
    cpu_set_t *set = CPU_ALLOC(kMaxCpu);
    if (!set) return -ENOMEM;
    const size_t sz = CPU_ALLOC_SIZE(kMaxCpu);
    CPU_ZERO_S(sz, set);
    CPU_SET_S(size_t(cpu), sz, set);
    int e = cxk::sys_setaffinity_self(sz, set);
    CPU_FREE(set);
    return e;
}

int check_cpus(const int32_t *cpus, uint32_t ncpus) noexcept {
    if (!cpus || ncpus == 0) return 0;
    cpu_set_t *set = CPU_ALLOC(kMaxCpu);
    if (!set) return -ENOMEM;
    const size_t sz = CPU_ALLOC_SIZE(kMaxCpu);
    CPU_ZERO_S(sz, set);
    int e = cxk::sys_getaffinity_self(sz, set);
    for (uint32_t i = 0; e == 0 && i < ncpus; ++i)
        if (cpus[i] < 0 || size_t(cpus[i]) >= kMaxCpu || !CPU_ISSET_S(size_t(cpus[i]), sz, set))
            e = -EINVAL;
    CPU_FREE(set);
    return e;
}

size_t sweep(int kind, char *dst, const char *src, size_t n) noexcept {
    const Isa k = isa();
    switch (kind) {
        case CXK_BENCH_READ: {
            uint64_t s = k == Isa::avx512 ? read_avx512(dst, n)
                         : k == Isa::avx2 ? read_avx2(dst, n) : read_sse2(dst, n);
            g_sink.fetch_xor(s, std::memory_order_relaxed);
            return n;
        }
        case CXK_BENCH_WRITE:
        case CXK_BENCH_NT_WRITE: {
            const bool nt = kind == CXK_BENCH_NT_WRITE;
            if (k == Isa::avx512) write_avx512(dst, n, nt);
            else if (k == Isa::avx2) write_avx2(dst, n, nt);
            else write_sse2(dst, n, nt);
            if (nt) _mm_sfence();  // streaming stores drain before the pass counts as done
            return n;
        }
        case CXK_BENCH_COPY:
            std::memcpy(dst, src, n);
            asm volatile("" ::: "memory");
            return 2 * n;
    }
    return 0;
}

}  // namespace cxk::bench

namespace {

using namespace cxk::bench;

bool valid_kind(int k) { return k >= CXK_BENCH_READ && k <= CXK_BENCH_NT_WRITE; }

// Runs fn on a thread pinned to cpu, or inline for cpu < 0.
template <class Fn>
int run_on(int cpu, Fn fn) {
    if (cpu < 0) {
        fn();
        return 0;
    }
    int32_t c = cpu;
    if (int e = check_cpus(&c, 1)) return e;
    return run_team(1, &c, 1, [&](uint32_t) { fn(); });
}

uint64_t next_rand(uint64_t &s) {  // splitmix64
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

}  // namespace

extern "C" {

int cxk_bench_chase_init(void *buf, size_t nbytes, size_t stride, uint64_t seed) {
    if (!buf || (uintptr_t(buf) & 7) || stride < 8 || (stride & (stride - 1)) ||
        nbytes / 2 < stride)
        return -EINVAL;
    const size_t n = nbytes / stride;
    if (n > UINT32_MAX) return -EINVAL;
    std::vector<uint32_t> next;
    try {
        next.resize(n);
    } catch (const std::bad_alloc &) {
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; ++i) next[i] = uint32_t(i);
    // Sattolo: swapping only with j < i yields a single cycle through all n slots, so the
    // chain from slot 0 never settles into a short loop that would fit in a cache.
    uint64_t s = seed;
    for (size_t i = n - 1; i > 0; --i) {
        size_t j = size_t((unsigned __int128)next_rand(s) * i >> 64);
        std::swap(next[i], next[j]);
    }
    char *base = static_cast<char *>(buf);
    for (size_t i = 0; i < n; ++i)
        *reinterpret_cast<void **>(base + i * stride) = base + size_t(next[i]) * stride;
    return 0;
}

int cxk_bench_chase_from(const void *buf, size_t nbytes, const void **cursor, uint64_t nloads,
                         int cpu, double *ns_per_load, double *wall_ns_per_load) {
    if (!buf || !cursor || nloads == 0 || !ns_per_load) return -EINVAL;
    const void *start = *cursor ? *cursor : buf;
    const uintptr_t off = uintptr_t(start) - uintptr_t(buf);  // wraps when start < buf
    if (off >= nbytes || (off & 7)) return -EINVAL;
    uint64_t t0 = 0, t1 = 0, c0 = 0, c1 = 0;
    const void *end = nullptr;
    int e = run_on(cpu, [&] {
        t0 = now_ns();
        c0 = thread_cpu_ns();
        end = chase_n(start, nloads);
        c1 = thread_cpu_ns();
        t1 = now_ns();
    });
    if (e) return e;
    *cursor = end;
    *ns_per_load = double(c1 - c0) / double(nloads);
    if (wall_ns_per_load) *wall_ns_per_load = double(t1 - t0) / double(nloads);
    return 0;
}

int cxk_bench_chase(const void *buf, uint64_t nloads, int cpu, double *ns_per_load,
                    double *wall_ns_per_load) {
    if (!buf || nloads == 0 || !ns_per_load) return -EINVAL;
    const void *cursor = buf;
    int e = cxk_bench_chase_from(buf, SIZE_MAX, &cursor, nloads, cpu, ns_per_load,
                                 wall_ns_per_load);
    if (e) return e;
    g_sink.fetch_xor(uint64_t(uintptr_t(cursor)), std::memory_order_relaxed);
    return 0;
}

int cxk_bench_bandwidth(void *dst, const void *src, size_t nbytes, const struct cxk_bench_bw *o,
                        double *bytes_per_s) {
    return cxk_bench_bandwidth_ex(dst, src, nbytes, o, bytes_per_s, nullptr);
}

int cxk_bench_bandwidth_ex(void *dst, const void *src, size_t nbytes,
                           const struct cxk_bench_bw *o, double *bytes_per_s,
                           double *cpu_bytes_per_s) {
    if (!dst || !o || !bytes_per_s || !valid_kind(o->kind) || o->nthreads == 0 ||
        o->nthreads > CXK_BENCH_MAX_THREADS || o->reps == 0 || o->passes == 0 ||
        (uintptr_t(dst) & 63) || (nbytes & 63) || nbytes < 64ull * o->nthreads)
        return -EINVAL;
    if (o->kind == CXK_BENCH_COPY && (!src || (uintptr_t(src) & 63))) return -EINVAL;
    if (int e = check_cpus(o->cpus, o->ncpus)) return e;
    const uint32_t nt = o->nthreads, reps = o->reps + 1;  // repetition 0 warms up
    const size_t lines = nbytes / 64;
    std::vector<uint64_t> start, end, oncpu;  // [thread * reps + rep]
    try {
        start.assign(size_t(nt) * reps, 0);
        end.assign(size_t(nt) * reps, 0);
        oncpu.assign(size_t(nt) * reps, 0);
    } catch (const std::bad_alloc &) {
        return -ENOMEM;
    }
    std::vector<size_t> moved(nt, 0);
    Barrier bar(nt);
    int e = run_team(nt, o->cpus, o->ncpus, [&](uint32_t t) {
        const size_t lo = lines * t / nt * 64, hi = lines * (t + 1) / nt * 64;
        char *d = static_cast<char *>(dst) + lo;
        const char *s = o->kind == CXK_BENCH_COPY ? static_cast<const char *>(src) + lo : nullptr;
        for (uint32_t r = 0; r < reps; ++r) {
            bar.wait();
            start[size_t(t) * reps + r] = now_ns();
            const uint64_t c0 = thread_cpu_ns();
            size_t b = 0;
            for (uint32_t p = 0; p < o->passes; ++p) b += sweep(o->kind, d, s, hi - lo);
            oncpu[size_t(t) * reps + r] = thread_cpu_ns() - c0;
            end[size_t(t) * reps + r] = now_ns();
            if (r == 1) moved[t] = b;
        }
    });
    if (e) return e;
    size_t total = 0;
    for (size_t b : moved) total += b;
    for (uint32_t r = 1; r < reps; ++r) {
        uint64_t t0 = UINT64_MAX, t1 = 0;
        for (uint32_t t = 0; t < nt; ++t) {
            t0 = std::min(t0, start[size_t(t) * reps + r]);
            t1 = std::max(t1, end[size_t(t) * reps + r]);
        }
        bytes_per_s[r - 1] = double(total) * 1e9 / double(t1 > t0 ? t1 - t0 : 1);
        if (cpu_bytes_per_s) {
            double sum = 0;
            for (uint32_t t = 0; t < nt; ++t)
                sum += double(moved[t]) * 1e9 / double(std::max<uint64_t>(oncpu[size_t(t) * reps + r], 1));
            cpu_bytes_per_s[r - 1] = sum;
        }
    }
    return 0;
}

int cxk_bench_loaded_latency(const void *chase_buf, void *gen_buf, size_t gen_nbytes,
                             const struct cxk_bench_loaded *o, double *ns_per_load,
                             double *gen_bytes_per_s) {
    if (!chase_buf || !gen_buf || !o || !ns_per_load || !gen_bytes_per_s ||
        !valid_kind(o->kind) || o->ngen == 0 || o->ngen > CXK_BENCH_MAX_THREADS ||
        !(o->rate >= 0) || o->duration_ns < 1000000 || (uintptr_t(gen_buf) & 63) ||
        gen_nbytes / o->ngen < 2 * kLoadChunk)
        return -EINVAL;
    if (int e = check_cpus(o->gen_cpus, o->ngen_cpus)) return e;
    if (o->chase_cpu >= 0) {
        int32_t c = o->chase_cpu;
        if (int e = check_cpus(&c, 1)) return e;
    }
    const uint32_t ng = o->ngen;
    // Team member 0 chases; 1..ng generate. Its CPU list is built to match.
    std::vector<int32_t> cpus(ng + 1);
    const bool pinned = o->chase_cpu >= 0 || (o->gen_cpus && o->ngen_cpus);
    cpus[0] = o->chase_cpu;
    for (uint32_t i = 0; i < ng; ++i)
        cpus[i + 1] = o->gen_cpus && o->ngen_cpus ? o->gen_cpus[i % o->ngen_cpus] : -1;
    std::atomic<uint32_t> ready{0};
    std::atomic<int> phase{0};  // 0 warm-up, 1 measuring, 2 stop
    std::vector<uint64_t> counted(ng, 0);
    uint64_t t0 = 0, t1 = 0, loads = 0, chase_cpu_ns = 0;
    const void *last = nullptr;
    const double per_gen_rate = o->rate / ng;  // bytes per second per generator
    const size_t part = gen_nbytes / ng / 64 * 64;
    int e = run_team(ng + 1, pinned ? cpus.data() : nullptr, pinned ? ng + 1 : 0,
                     [&](uint32_t t) {
        if (t == 0) {
            while (ready.load(std::memory_order_acquire) < ng) std::this_thread::yield();
            const void *p = chase_buf;
            const uint64_t w0 = now_ns();
            while (now_ns() - w0 < kWarmupNs) p = chase_n(p, 256);
            phase.store(1, std::memory_order_release);
            t0 = now_ns();
            const uint64_t c0 = thread_cpu_ns();
            uint64_t n = 0, now;
            do {
                p = chase_n(p, 256);
                n += 256;
                now = now_ns();
            } while (now - t0 < o->duration_ns);
            t1 = now;
            chase_cpu_ns = thread_cpu_ns() - c0;
            // release pairs with the generators' acquire: they stop counting after t1
            phase.store(2, std::memory_order_release);
            loads = n;
            last = p;
            return;
        }
        char *base = static_cast<char *>(gen_buf) + size_t(t - 1) * part;
        // COPY reads the first half of the part and writes the second.
        const bool copy = o->kind == CXK_BENCH_COPY;
        const size_t span = copy ? part / 2 / 64 * 64 : part;
        size_t off = 0;
        uint64_t sent = 0, mine = 0;
        bool announced = false, paced_window = false;
        uint64_t g0 = now_ns();
        int ph;
        while ((ph = phase.load(std::memory_order_acquire)) != 2) {
            if (ph == 1 && !paced_window) {
                // The pace restarts with the window: a generator starved during warm-up must
                // not catch up inside it at full speed.
                g0 = now_ns();
                sent = 0;
                paced_window = true;
            }
            size_t n = std::min(kLoadChunk, span - off);
            size_t b = copy ? sweep(o->kind, base + span + off, base + off, n)
                            : sweep(o->kind, base + off, nullptr, n);
            off = off + n == span ? 0 : off + n;
            sent += b;
            if (ph == 1) mine += b;
            // Counted as ready once a chunk is done: the window then opens on generators that
            // are running, not merely created (a busy shared CPU may start them late).
            if (!announced) {
                ready.fetch_add(1, std::memory_order_release);
                announced = true;
            }
            // Throttle: stay at or under the pace since the start. The clock read is the
            // wait; no PAUSE, which under KVM's pause-loop exiting hands the core away.
            if (per_gen_rate > 0)
                while (double(sent) > per_gen_rate * double(now_ns() - g0) * 1e-9 &&
                       phase.load(std::memory_order_relaxed) != 2) {
                }
        }
        counted[t - 1] = mine;
    });
    if (e) return e;
    g_sink.fetch_xor(uint64_t(uintptr_t(last)), std::memory_order_relaxed);
    uint64_t total = 0;
    for (uint64_t c : counted) total += c;
    *ns_per_load = double(chase_cpu_ns) / double(loads);
    *gen_bytes_per_s = double(total) * 1e9 / double(t1 - t0);
    return 0;
}

int cxk_bench_copy(void *dst, const void *src, size_t span, size_t size, int method,
                   uint64_t ncopies, int cpu, double *ns_total) {
    if (!dst || !src || !ns_total || size == 0 || size > span || ncopies == 0) return -EINVAL;
    void (*fn)(void *, const void *, size_t);
    switch (method) {
        case CXK_COPY_MEMCPY: fn = [](void *d, const void *s, size_t n) { std::memcpy(d, s, n); }; break;
        case CXK_COPY_NT: fn = cxk_nt_copy; break;
        case CXK_COPY_FLUSH: fn = cxk_copy_flush; break;
        case CXK_COPY_INVALIDATE: fn = cxk_copy_invalidate; break;
        default: return -EINVAL;
    }
    const uint64_t slots = span / size;
    uint64_t t0 = 0, t1 = 0;
    int e = run_on(cpu, [&] {
        char *d = static_cast<char *>(dst);
        const char *s = static_cast<const char *>(src);
        uint64_t slot = 0;
        t0 = now_ns();
        for (uint64_t i = 0; i < ncopies; ++i) {
            fn(d + slot * size, s + slot * size, size);
            asm volatile("" ::: "memory");  // every copy happens, in order
            if (++slot == slots) slot = 0;
        }
        t1 = now_ns();
    });
    if (e) return e;
    *ns_total = double(t1 - t0);
    return 0;
}

int cxk_bench_hugepages(void *addr, size_t nbytes) {
    const size_t ps = cxk_page_size();
    if (!addr || nbytes == 0 || (uintptr_t(addr) & (ps - 1))) return -EINVAL;
    return cxk::sys_madvise(addr, nbytes, MADV_HUGEPAGE);
}

}  // extern "C"
