// copy_sum.cpp — a copy that folds the bytes it moves into the block checksum (kv.h's
// Checksum) in the same pass: each 32-byte block is loaded once, stored, and added to the
// four lanes from the register, so a checksummed copy reads its source once instead of twice
// (a memcpy, then cxk_kv_checksum over the result). The sum equals cxk_kv_checksum of the
// bytes stored. And SumParts (kv.h): the checksum as parts that add, which the AdamW kernel's
// out-of-place step folds from the arrays it reads and writes, tile by tile.
#include <immintrin.h>

#include <cerrno>
#include <cstring>

#include "cxlkit.h"
#include "kv/kv.h"

namespace cxk::kv {

void copy_fold(Checksum &c, void *dst, const void *src, size_t n) noexcept {
    auto *d = static_cast<uint8_t *>(dst);
    auto *s = static_cast<const uint8_t *>(src);
    if (c.ncarry == 0 && (c.words & 3) == 0 && n >= 32) {
        // the same lane order as Checksum::update's wide loop: word i feeds lane i % 4
        uint64_t la[4] = {c.a[0], c.a[1], c.a[2], c.a[3]};
        uint64_t lb[4] = {c.b[0], c.b[1], c.b[2], c.b[3]};
        size_t chunks = n / 32;
        for (size_t i = 0; i < chunks; ++i) {
            uint64_t w[4];
            std::memcpy(w, s + 32 * i, 32);
            std::memcpy(d + 32 * i, w, 32);
            for (int l = 0; l < 4; ++l) {
                la[l] += w[l];
                lb[l] += la[l];
            }
        }
        for (int l = 0; l < 4; ++l) {
            c.a[l] = la[l];
            c.b[l] = lb[l];
        }
        c.words += 4 * chunks;
        c.nbytes += 32 * chunks;
        d += 32 * chunks;
        s += 32 * chunks;
        n -= 32 * chunks;
    }
    // the tail (and any state a previous call left mid-word): copy, then fold what was stored
    std::memcpy(d, s, n);
    c.update(d, n);
}

namespace {

// Fletcher sums of whole 32-byte rows from a fresh state (lane l: a += w_l, b += a), the
// Checksum::update loop in AVX2 registers: the folded AdamW step sums each tile from L1, where
// the plain loop's scalar adds were most of the fold's cost.
__attribute__((target("avx2"))) void rows_avx2(const uint8_t *s, size_t rows, uint64_t *a,
                                              uint64_t *b) noexcept {
    __m256i va = _mm256_setzero_si256(), vb = _mm256_setzero_si256();
    for (size_t r = 0; r < rows; ++r) {
        va = _mm256_add_epi64(va, _mm256_loadu_si256(reinterpret_cast<const __m256i *>(s) + r));
        vb = _mm256_add_epi64(vb, va);
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(a), va);
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(b), vb);
}

bool have_avx2() noexcept {
    static const bool yes = (cxk_cpu_features() & CXK_CPU_AVX2) != 0;
    return yes;
}

inline void add_u32(SumParts &s, uint64_t off, uint32_t v) noexcept {
    const uint64_t word = off / 8;
    const uint64_t w = uint64_t(v) << (32 * ((off / 4) & 1));  // low or high half
    s.a[word & 3] += w;
    s.c[word & 3] += (word / 4 + 1) * w;
}

}  // namespace

void SumParts::add(const void *p, uint64_t off, size_t n) noexcept {
    auto *s = static_cast<const uint8_t *>(p);
    for (; n >= 4 && (off & 31); off += 4, s += 4, n -= 4) {
        uint32_t v;
        std::memcpy(&v, s, 4);
        add_u32(*this, off, v);
    }
    if (const size_t rows = n / 32) {
        // whole 32-byte rows, row r0 + r holding words 4(r0 + r) .. +3: the plain (vectorized)
        // Fletcher pass over them gives A = sum w and B = sum (rows - r) w per lane, and
        // sum (r0 + r + 1) w = (r0 + rows + 1) A - B
        Checksum t;
        if (have_avx2()) rows_avx2(s, rows, t.a, t.b);
        else t.update(s, rows * 32);
        const uint64_t r0 = off / 32;
        for (int l = 0; l < 4; ++l) {
            a[l] += t.a[l];
            c[l] += (r0 + rows + 1) * t.a[l] - t.b[l];
        }
        off += rows * 32, s += rows * 32, n -= rows * 32;
    }
    for (; n >= 4; off += 4, s += 4, n -= 4) {
        uint32_t v;
        std::memcpy(&v, s, 4);
        add_u32(*this, off, v);
    }
}

void SumParts::merge(const SumParts &o) noexcept {
    for (int l = 0; l < 4; ++l) a[l] += o.a[l], c[l] += o.c[l];
}

uint64_t SumParts::finish(uint64_t nbytes) const noexcept {
    Checksum ck;
    const uint64_t words = (nbytes + 7) / 8;  // the last one zero-padded, as finish() pads
    for (int l = 0; l < 4; ++l) {
        const uint64_t k = words / 4 + (uint64_t(l) < words % 4 ? 1 : 0);
        ck.a[l] = a[l];
        ck.b[l] = (k + 1) * a[l] - c[l];
    }
    ck.words = words;
    ck.nbytes = nbytes;
    return ck.finish();
}

}  // namespace cxk::kv

extern "C" int cxk_kv_copy_sum(void *dst, const void *src, size_t nbytes, uint64_t *sum) {
    if (sum == nullptr || (nbytes != 0 && (dst == nullptr || src == nullptr))) return -EINVAL;
    cxk::kv::Checksum c;
    if (nbytes) cxk::kv::copy_fold(c, dst, src, nbytes);
    *sum = c.finish();
    return 0;
}
