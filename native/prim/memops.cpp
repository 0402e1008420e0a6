// memops.cpp — cache-line flush / invalidate, non-temporal copies and fences: the publish
// and read halves of the pool protocol and the copy paths the workloads use.
#include <immintrin.h>

#include <cstring>

#include "cxlkit.h"
#include "prim/memops_raw.h"
#include "prim/sim.h"

namespace cxk {
namespace {

enum class FlushKind { clwb, clflushopt, clflush };

FlushKind flush_kind() {
    static const FlushKind k = [] {
        uint32_t f = cxk_cpu_features();
        if (f & CXK_CPU_CLWB) return FlushKind::clwb;
        if (f & CXK_CPU_CLFLUSHOPT) return FlushKind::clflushopt;
        return FlushKind::clflush;
    }();
    return k;
}

// The target attributes let one binary carry the instructions; they run only when cpuid
// said the CPU has them.
__attribute__((target("clwb"))) void flush_clwb(uintptr_t p, uintptr_t end) {
    for (; p < end; p += CXK_CACHELINE) _mm_clwb(reinterpret_cast<void *>(p));
}
__attribute__((target("clflushopt"))) void flush_clflushopt(uintptr_t p, uintptr_t end) {
    for (; p < end; p += CXK_CACHELINE) _mm_clflushopt(reinterpret_cast<void *>(p));
}
void flush_clflush(uintptr_t p, uintptr_t end) {
    for (; p < end; p += CXK_CACHELINE) _mm_clflush(reinterpret_cast<void *>(p));
}

void lines(const void *addr, size_t nbytes, uintptr_t *lo, uintptr_t *hi) {
    *lo = uintptr_t(addr) & ~uintptr_t(CXK_CACHELINE - 1);
    *hi = uintptr_t(addr) + nbytes;
}

__attribute__((target("avx512f"))) void nt_body_avx512(char *d, const char *s, size_t n) {
    for (size_t i = 0; i < n; i += 64)
        _mm512_stream_si512(reinterpret_cast<__m512i *>(d + i),
                            _mm512_loadu_si512(reinterpret_cast<const void *>(s + i)));
}
__attribute__((target("avx2"))) void nt_body_avx2(char *d, const char *s, size_t n) {
    for (size_t i = 0; i < n; i += 64) {
        __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(s + i));
        __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(s + i + 32));
        _mm256_stream_si256(reinterpret_cast<__m256i *>(d + i), a);
        _mm256_stream_si256(reinterpret_cast<__m256i *>(d + i + 32), b);
    }
}
void nt_body_sse2(char *d, const char *s, size_t n) {
    for (size_t i = 0; i < n; i += 16)
        _mm_stream_si128(reinterpret_cast<__m128i *>(d + i),
                         _mm_loadu_si128(reinterpret_cast<const __m128i *>(s + i)));
}

// The simulator's one cost in production: a relaxed load of a flag that stays false there,
// behind a branch predicted not taken (bench: cxk_bench_memops_sim_branch).
inline bool sim_on() { return __builtin_expect(sim::g_on.load(std::memory_order_relaxed), 0); }

}  // namespace

namespace prim {
void flush_raw(const void *addr, size_t nbytes) {
    uintptr_t lo, hi;
    lines(addr, nbytes, &lo, &hi);
    switch (flush_kind()) {
        case FlushKind::clwb: flush_clwb(lo, hi); break;
        case FlushKind::clflushopt: flush_clflushopt(lo, hi); break;
        case FlushKind::clflush: flush_clflush(lo, hi); break;
    }
}
void sfence_raw() { _mm_sfence(); }
}  // namespace prim
}  // namespace cxk

extern "C" {

void cxk_flush(const void *addr, size_t nbytes) {
    if (nbytes == 0) return;
    if (cxk::sim_on() && cxk::sim::flush(addr, nbytes)) return;
    cxk::prim::flush_raw(addr, nbytes);
}

void cxk_invalidate(const void *addr, size_t nbytes) {
    if (cxk::sim_on()) {
        if (nbytes == 0) cxk::sim::fence();
        else if (cxk::sim::invalidate(addr, nbytes)) return;
    }
    if (nbytes != 0) {
        uintptr_t lo, hi;
        cxk::lines(addr, nbytes, &lo, &hi);
        // clwb would keep the (possibly stale) line cached: evict instead
        if (cxk_cpu_features() & CXK_CPU_CLFLUSHOPT) cxk::flush_clflushopt(lo, hi);
        else cxk::flush_clflush(lo, hi);
    }
    _mm_mfence();  // later loads must not pass the evictions
}

void cxk_sfence(void) {
    if (cxk::sim_on()) cxk::sim::fence();
    cxk::prim::sfence_raw();
}
void cxk_mfence(void) {
    if (cxk::sim_on()) cxk::sim::fence();
    _mm_mfence();
}

const char *cxk_flush_kind(void) {
    switch (cxk::flush_kind()) {
        case cxk::FlushKind::clwb: return "clwb";
        case cxk::FlushKind::clflushopt: return "clflushopt";
        default: return "clflush";
    }
}

void cxk_nt_copy(void *dst, const void *src, size_t nbytes) {
    auto *d = static_cast<char *>(dst);
    auto *s = static_cast<const char *>(src);
    size_t head = (CXK_CACHELINE - (uintptr_t(d) & (CXK_CACHELINE - 1))) & (CXK_CACHELINE - 1);
    if (nbytes < head + CXK_CACHELINE) {
        std::memcpy(d, s, nbytes);
        return;
    }
    std::memcpy(d, s, head);
    size_t body = (nbytes - head) & ~size_t(CXK_CACHELINE - 1);
    if (cxk::sim_on() && cxk::sim::nt_stored(d + head, body)) {
        // a view is ordinary memory: the streamed lines land there and reach the pool at
        // the fence below; head and tail are ordinary (cached) stores, as on hardware
        std::memcpy(d + head, s + head, nbytes - head);
        cxk_sfence();
        return;
    }
    uint32_t f = cxk_cpu_features();
    if (f & CXK_CPU_AVX512F) cxk::nt_body_avx512(d + head, s + head, body);
    else if (f & CXK_CPU_AVX2) cxk::nt_body_avx2(d + head, s + head, body);
    else cxk::nt_body_sse2(d + head, s + head, body);
    std::memcpy(d + head + body, s + head + body, nbytes - head - body);
    _mm_sfence();  // streaming stores are weakly ordered: order them before what follows
}

void cxk_copy_flush(void *dst, const void *src, size_t nbytes) {
    std::memcpy(dst, src, nbytes);
    cxk_flush(dst, nbytes);
    _mm_sfence();
}

void cxk_copy_invalidate(void *dst, const void *src, size_t nbytes) {
    cxk_invalidate(src, nbytes);
    std::memcpy(dst, src, nbytes);
}

void cxk_nt_store64(uint64_t *dst, uint64_t value) {
    if (cxk::sim_on() && cxk::sim::nt_stored(dst, sizeof *dst)) {
        __atomic_store_n(dst, value, __ATOMIC_RELAXED);
        cxk_sfence();
        return;
    }
    _mm_stream_si64(reinterpret_cast<long long *>(dst), static_cast<long long>(value));
    _mm_sfence();
}

}  // extern "C"
