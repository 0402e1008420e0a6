// adam_avx512.h — private: the AVX-512 lane traits of the Adam loop (adam_simd.h), compiled
// twice: adam_avx512.cpp (AVX-512F, V512<false>) and adam_avx512bf16.cpp (AVX-512F + BW +
// AVX512_BF16, V512<true>, which also has the pair ops of Loop::block2). 16 fp32 lanes; bf16
// grads widened with vpmovzxwd + shift, fp16 with vcvtph2ps; fp16 copies rounded with
// vcvtps2ph; bf16 copies with integer ops (V512<false>) or vcvtneps2bf16 with an integer
// fix-up of the lanes it rounds unlike torch (V512<true>). Internal linkage, as adam_simd.h:
// each file keeps its own copy.
#pragma once
#include <immintrin.h>

#include <cfloat>

#include "adam/adam_simd.h"

namespace cxk::adam {
namespace {

template <bool BF>
struct V512 {
    using F = __m512;
    static constexpr size_t W = 16;
    static constexpr uintptr_t kAlign = 64;
    // Two vectors of a 16-bit copy at once (Loop::block2): V512<true> only (AVX512_BF16 + BW).
    static constexpr bool kPair = BF;
    static F set1(float x) { return _mm512_set1_ps(x); }
    static F load(const float *p) { return _mm512_loadu_ps(p); }
    template <bool NT>
    static void store(float *p, F x) {
        if constexpr (NT) _mm512_stream_ps(p, x);
        else _mm512_storeu_ps(p, x);
    }
    static F add(F a, F b) { return _mm512_add_ps(a, b); }
    static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
    static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
    static F div(F a, F b) { return _mm512_div_ps(a, b); }
    static F sqrt(F a) { return _mm512_sqrt_ps(a); }
    static F neg(F a) {  // flips the sign bit, as scalar -x does
        return _mm512_castsi512_ps(
            _mm512_xor_si512(_mm512_castps_si512(a), _mm512_set1_epi32(int(0x80000000u))));
    }
    static void sfence() { _mm_sfence(); }

    template <int GDT>
    static F load_grad(const void *g, size_t i) {
        if constexpr (GDT == CXK_DTYPE_F32) {
            return _mm512_loadu_ps(static_cast<const float *>(g) + i);
        } else {
            __m256i h = _mm256_loadu_si256(
                reinterpret_cast<const __m256i *>(static_cast<const uint16_t *>(g) + i));
            if constexpr (GDT == CXK_DTYPE_BF16)
                return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
            else
                return _mm512_cvtph_ps(h);
        }
    }

    // bf16 of p with integer ops, one per 32-bit lane: round to nearest even (u + 0x7fff +
    // lsb, high half), NaN -> 0x7fc0, subnormals kept: torch's .to(torch.bfloat16).
    static __m512i bf16_int(F p) {
        __m512i u = _mm512_castps_si512(p);
        __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
        __m512i r = _mm512_srli_epi32(
            _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
        __mmask16 nan = _mm512_cmp_ps_mask(p, p, _CMP_UNORD_Q);
        return _mm512_mask_mov_epi32(r, nan, _mm512_set1_epi32(0x7fc0));
    }

    // bf16 of p, 16 lanes of 16 bits, bitwise bf16_int's. vcvtneps2bf16 rounds to nearest
    // even too but reads a subnormal input as zero and keeps a NaN's payload (quieted) where
    // torch writes 0x7fc0: lanes that are NaN or nonzero with |p| < FLT_MIN (one unordered
    // not-greater-equal compare, masked by a not-equal-zero one) take the integer sequence.
    static __m256i bf16_narrow(F p) {
        if constexpr (BF) {
            __m256i h = (__m256i)_mm512_cvtneps_pbh(p);
            const __mmask16 tiny =
                _mm512_cmp_ps_mask(_mm512_abs_ps(p), _mm512_set1_ps(FLT_MIN), _CMP_NGE_UQ);
            if (__builtin_expect(
                    _mm512_mask_cmp_ps_mask(tiny, p, _mm512_setzero_ps(), _CMP_NEQ_UQ) != 0, 0))
                h = _mm512_cvtepi32_epi16(bf16_int(p));
            return h;
        } else {
            return _mm512_cvtepi32_epi16(bf16_int(p));
        }
    }

    // The copy's bits of p, one per 32-bit lane (fp16: vcvtps2ph).
    template <int CDT>
    static __m512i copy_bits(F p) {
        if constexpr (CDT == CXK_DTYPE_F32) {
            return _mm512_castps_si512(p);
        } else if constexpr (CDT == CXK_DTYPE_BF16) {
            return bf16_int(p);
        } else {
            return _mm512_cvtepu16_epi32(
                _mm512_cvtps_ph(p, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        }
    }

    template <int CDT>
    static __m512i load_copy(const void *c, size_t i) {
        if constexpr (CDT == CXK_DTYPE_F32)
            return _mm512_loadu_si512(static_cast<const float *>(c) + i);
        else
            return _mm512_cvtepu16_epi32(_mm256_loadu_si256(
                reinterpret_cast<const __m256i *>(static_cast<const uint16_t *>(c) + i)));
    }

    template <int CDT>
    static F widen(__m512i b) {
        if constexpr (CDT == CXK_DTYPE_F32) return _mm512_castsi512_ps(b);
        else if constexpr (CDT == CXK_DTYPE_BF16)
            return _mm512_castsi512_ps(_mm512_slli_epi32(b, 16));
        else return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(b));
    }

    static __mmask16 ne(__m512i a, __m512i b) { return _mm512_cmpneq_epi32_mask(a, b); }
    static unsigned count(__mmask16 k) { return unsigned(__builtin_popcount(k)); }
    static F blend(F a, F b, __mmask16 k) { return _mm512_mask_mov_ps(a, k, b); }

    // The resync test (adam_simd.h). A bf16 copy with V512<true>: the copy's 16-bit lanes
    // against bf16_narrow(p) with one AVX2 word compare; only a block with a changed lane
    // (rare: someone wrote the param) goes through the widening, counting reread_lanes.
    template <int CDT>
    static F reread(const void *c, size_t i, F p, uint64_t &changed) {
        if constexpr (BF && CDT == CXK_DTYPE_BF16) {
            const __m256i old = _mm256_loadu_si256(
                reinterpret_cast<const __m256i *>(static_cast<const uint16_t *>(c) + i));
            const __m256i eq = _mm256_cmpeq_epi16(old, bf16_narrow(p));
            if (__builtin_expect(_mm256_movemask_epi8(eq) == -1, 1)) return p;
        }
        return reread_lanes<V512, CDT>(c, i, p, changed);
    }

    // The pair path (BF only: vcvtne2ps2bf16 and 16-bit mask compares need AVX512_BF16 and
    // AVX512BW): a bf16 or fp16 copy of two vectors, 32 lanes of 16 bits, low half p0, in one
    // register. vcvtps2ph rounds as torch does, so every fp16 lane is exact. A lane
    // vcvtneps2bf16 may round unlike torch (a NaN or subnormal input) comes out with exponent
    // 0 (as +-0) or 0xff; exact_lanes finds the others: +0x0080 moves exponents 0xff and 0 to
    // 0 and 1, and a test of the exponent's upper 7 bits finds the rest. Zeros and infinities
    // count as not exact there; exact_or_zero takes the zeros back (infinities are rare and
    // take the per-vector path, as any lane that is not exact does).
    template <int CDT>
    static __m512i pair_bits(F p0, F p1) {
        if constexpr (CDT == CXK_DTYPE_BF16)
            return (__m512i)_mm512_cvtne2ps_pbh(p1, p0);
        else
            return _mm512_inserti64x4(
                _mm512_castsi256_si512(
                    _mm512_cvtps_ph(p0, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)),
                _mm512_cvtps_ph(p1, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), 1);
    }
    template <int CDT>
    static __mmask32 exact_lanes(__m512i h) {
        if constexpr (CDT == CXK_DTYPE_BF16)
            return _mm512_test_epi16_mask(_mm512_add_epi16(h, _mm512_set1_epi16(0x0080)),
                                          _mm512_set1_epi16(0x7f00));
        else
            return 0xffffffffu;
    }

    // exact_lanes, zeros added: +-0 rounds to +-0 in both. Off the fast path: a pair that
    // exact_lanes refuses pays these compares, so a tensor of zeros (a padding row, a param
    // no grad has moved) keeps the pair path.
    template <int CDT>
    static __mmask32 exact_or_zero(__m512i h, F p0, F p1) {
        const __mmask16 z0 = _mm512_cmp_ps_mask(p0, _mm512_setzero_ps(), _CMP_EQ_OQ);
        const __mmask16 z1 = _mm512_cmp_ps_mask(p1, _mm512_setzero_ps(), _CMP_EQ_OQ);
        return exact_lanes<CDT>(h) | _mm512_kunpackw(z1, z0);
    }

    // reread<CDT> of two vectors at i and i + W: one compare of 32 words when every lane of
    // the rounded masters is exact and equals the copy; else each vector through reread.
    template <int CDT>
    static void reread2(const void *c, size_t i, F &p0, F &p1, uint64_t &changed) {
        const __m512i old = _mm512_loadu_si512(static_cast<const uint16_t *>(c) + i);
        const __m512i h = pair_bits<CDT>(p0, p1);
        const __mmask32 ok = _mm512_mask_cmpeq_epi16_mask(exact_lanes<CDT>(h), old, h);
        if (__builtin_expect(ok == 0xffffffffu, 1)) return;
        if (_mm512_mask_cmpeq_epi16_mask(exact_or_zero<CDT>(h, p0, p1), old, h) == 0xffffffffu)
            return;
        p0 = reread<CDT>(c, i, p0, changed);
        p1 = reread<CDT>(c, i + W, p1, changed);
    }

    // store_copy<CDT> of two vectors: one 64-byte store (two 32-byte streaming stores for
    // NT, whose body is aligned to 32 bytes of copy only); a bf16 lane that is not exact sends
    // both halves through bf16_narrow.
    template <int CDT, bool NT>
    static void store_copy2(void *c, size_t i, F p0, F p1) {
        __m512i h = pair_bits<CDT>(p0, p1);
        if constexpr (CDT == CXK_DTYPE_BF16)
            if (__builtin_expect(exact_lanes<CDT>(h) != 0xffffffffu, 0) &&
                exact_or_zero<CDT>(h, p0, p1) != 0xffffffffu)
                h = _mm512_inserti64x4(_mm512_castsi256_si512(bf16_narrow(p0)), bf16_narrow(p1),
                                       1);
        if constexpr (NT) {
            store_half<true>(c, i, _mm512_castsi512_si256(h));
            store_half<true>(c, i + W, _mm512_extracti64x4_epi64(h, 1));
        } else {
            _mm512_storeu_si512(static_cast<uint16_t *>(c) + i, h);
        }
    }

    // The copy's bits, one per 32-bit lane as copy_bits / load_copy give them.
    template <int CDT, bool NT>
    static void store_bits(void *c, size_t i, __m512i b) {
        if constexpr (CDT == CXK_DTYPE_F32) {
            store<NT>(static_cast<float *>(c) + i, _mm512_castsi512_ps(b));
        } else {
            store_half<NT>(c, i, _mm512_cvtepi32_epi16(b));
        }
    }

    template <bool NT>
    static void store_half(void *c, size_t i, __m256i h) {
        auto *dst = reinterpret_cast<__m256i *>(static_cast<uint16_t *>(c) + i);
        if constexpr (NT) _mm256_stream_si256(dst, h);
        else _mm256_storeu_si256(dst, h);
    }

    template <int CDT, bool NT>
    static void store_copy(void *c, size_t i, F p) {
        if constexpr (CDT == CXK_DTYPE_BF16) store_half<NT>(c, i, bf16_narrow(p));
        else store_bits<CDT, NT>(c, i, copy_bits<CDT>(p));
    }
};

}  // namespace
}  // namespace cxk::adam
