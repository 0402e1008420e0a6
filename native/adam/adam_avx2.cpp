// adam_avx2.cpp — the AVX2 Adam kernel: 8 fp32 lanes; bf16 grads widened with vpmovzxwd +
// shift, fp16 with vcvtph2ps (F16C); bf16 copies rounded with integer ops, fp16 copies with
// vcvtps2ph. Built with -mavx2 -mf16c -ffp-contract=off (native/isa.cmake).
#include <immintrin.h>

#include "adam/adam_simd.h"

namespace cxk::adam {
namespace {

struct V256 {
    using F = __m256;
    static constexpr size_t W = 8;
    static constexpr uintptr_t kAlign = 32;
    static constexpr bool kPair = false;  // no pair path (adam_simd.h's block2)
    static F set1(float x) { return _mm256_set1_ps(x); }
    static F load(const float *p) { return _mm256_loadu_ps(p); }
    template <bool NT>
    static void store(float *p, F x) {
        if constexpr (NT) _mm256_stream_ps(p, x);
        else _mm256_storeu_ps(p, x);
    }
    static F add(F a, F b) { return _mm256_add_ps(a, b); }
    static F sub(F a, F b) { return _mm256_sub_ps(a, b); }
    static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
    static F div(F a, F b) { return _mm256_div_ps(a, b); }
    static F sqrt(F a) { return _mm256_sqrt_ps(a); }
    static F neg(F a) { return _mm256_xor_ps(a, _mm256_set1_ps(-0.0f)); }
    static void sfence() { _mm_sfence(); }

    template <int GDT>
    static F load_grad(const void *g, size_t i) {
        if constexpr (GDT == CXK_DTYPE_F32) {
            return _mm256_loadu_ps(static_cast<const float *>(g) + i);
        } else {
            __m128i h = _mm_loadu_si128(
                reinterpret_cast<const __m128i *>(static_cast<const uint16_t *>(g) + i));
            if constexpr (GDT == CXK_DTYPE_BF16)
                return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
            else
                return _mm256_cvtph_ps(h);
        }
    }

    // The copy's bits of p, one per 32-bit lane (bf16: round to nearest even with integer
    // ops, u + 0x7fff + lsb, high half, NaN -> 0x7fc0; fp16: vcvtps2ph).
    template <int CDT>
    static __m256i copy_bits(F p) {
        if constexpr (CDT == CXK_DTYPE_F32) {
            return _mm256_castps_si256(p);
        } else if constexpr (CDT == CXK_DTYPE_BF16) {
            __m256i u = _mm256_castps_si256(p);
            __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
            __m256i r = _mm256_srli_epi32(
                _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
            __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(p, p, _CMP_UNORD_Q));
            return _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7fc0), nan);
        } else {
            return _mm256_cvtepu16_epi32(
                _mm256_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        }
    }

    // 32-bit lanes < 0x10000 -> 16-bit lanes (the unsigned-saturating pack is exact then)
    static __m128i pack16(__m256i r) {
        return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    }

    template <int CDT>
    static __m256i load_copy(const void *c, size_t i) {
        if constexpr (CDT == CXK_DTYPE_F32)
            return _mm256_loadu_si256(
                reinterpret_cast<const __m256i *>(static_cast<const float *>(c) + i));
        else
            return _mm256_cvtepu16_epi32(_mm_loadu_si128(
                reinterpret_cast<const __m128i *>(static_cast<const uint16_t *>(c) + i)));
    }

    template <int CDT>
    static F widen(__m256i b) {
        if constexpr (CDT == CXK_DTYPE_F32) return _mm256_castsi256_ps(b);
        else if constexpr (CDT == CXK_DTYPE_BF16)
            return _mm256_castsi256_ps(_mm256_slli_epi32(b, 16));
        else return _mm256_cvtph_ps(pack16(b));
    }

    static __m256i ne(__m256i a, __m256i b) {
        return _mm256_xor_si256(_mm256_cmpeq_epi32(a, b), _mm256_set1_epi32(-1));
    }
    static unsigned count(__m256i k) {
        return unsigned(__builtin_popcount(_mm256_movemask_ps(_mm256_castsi256_ps(k))));
    }
    static F blend(F a, F b, __m256i k) { return _mm256_blendv_ps(a, b, _mm256_castsi256_ps(k)); }

    template <int CDT>
    static F reread(const void *c, size_t i, F p, uint64_t &changed) {
        return reread_lanes<V256, CDT>(c, i, p, changed);
    }

    // The copy's bits, one per 32-bit lane as copy_bits / load_copy give them.
    template <int CDT, bool NT>
    static void store_bits(void *c, size_t i, __m256i b) {
        if constexpr (CDT == CXK_DTYPE_F32) {
            store<NT>(static_cast<float *>(c) + i, _mm256_castsi256_ps(b));
        } else {
            __m128i h = pack16(b);
            auto *dst = reinterpret_cast<__m128i *>(static_cast<uint16_t *>(c) + i);
            if constexpr (NT) _mm_stream_si128(dst, h);
            else _mm_storeu_si128(dst, h);
        }
    }

    template <int CDT, bool NT>
    static void store_copy(void *c, size_t i, F p) {
        store_bits<CDT, NT>(c, i, copy_bits<CDT>(p));
    }
};

}  // namespace

uint64_t step_avx2(const Coeffs &c, const Span &s) { return run_simd<V256>(c, s); }

}  // namespace cxk::adam
