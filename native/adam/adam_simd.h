// adam_simd.h — private: the loop shared by the SIMD Adam kernels (adam_avx2.cpp,
// adam_avx512.cpp): aligned-body peeling for non-temporal stores, the vector recipe of
// adam.h's element(), and tails through a zero-padded stack block.
// Everything here has internal linkage: each ISA file compiles its own copy with its own
// flags, so the linker can never hand one file's AVX-512 code to another.
#pragma once
#include <cstring>

#include "adam/adam.h"
#include "cxlkit.h"

namespace cxk::adam {
namespace {

constexpr size_t dtype_size(int dt) { return dt == CXK_DTYPE_F32 ? 4 : dt == CXK_DTYPE_NONE ? 0 : 2; }

inline bool aligned_to(const void *p, uintptr_t a) { return (uintptr_t(p) & (a - 1)) == 0; }

// The per-step flags as template arguments (Coeffs::maximize, l2, decoupled; l2 and
// decoupled never both): one loop per combination, so a loop carries only the tests and the
// arithmetic its step does. GCC unswitched them out of the fp32 loop by itself but left them
// inside the longer bf16 loops.
enum : unsigned { kMaximize = 1, kL2 = 2, kDecoupled = 4 };

inline unsigned mode_of(const Coeffs &c) {
    return (c.maximize ? kMaximize : 0u) | (c.l2 ? kL2 : 0u) | (c.decoupled ? kDecoupled : 0u);
}

// The resync test of V's copy at index i against the master pv (adam.h's Coeffs::resync), in
// V's generic lane ops: widen the copy, round pv, compare, blend the changed lanes.
template <class V, int CDT>
inline typename V::F reread_lanes(const void *copy, size_t i, typename V::F pv,
                                  uint64_t &changed) {
    auto old = V::template load_copy<CDT>(copy, i);
    auto ne = V::ne(old, V::template copy_bits<CDT>(pv));
    if (const unsigned k = V::count(ne)) {
        pv = V::blend(pv, V::template widen<CDT>(old), ne);
        changed += k;
    }
    return pv;
}

// Elements a SIMD loop prefetches ahead: 1 KiB of fp32 per stream.
constexpr size_t kPrefetch = 256;

// Into L2 (hint T1); the address goes through an integer so that running past the end of
// the array is no out-of-bounds pointer arithmetic.
inline void prefetch_l2(const void *base, size_t byte_offset) {
    __builtin_prefetch(reinterpret_cast<const void *>(uintptr_t(base) + byte_offset), 0, 2);
}

// V: the ISA's traits: W lanes of fp32 in V::F; loads/stores of each dtype; arithmetic.
template <class V, int GDT, int CDT>
struct Loop {
    using F = typename V::F;
    F scale, neg_step, eps, omb1, b2, omb2, wd, decay;

    explicit Loop(const Coeffs &c)
        : scale(V::set1(c.scale)), neg_step(V::set1(c.neg_step)), eps(V::set1(c.eps)),
          omb1(V::set1(c.omb1)), b2(V::set1(c.b2)),
          omb2(V::set1(c.omb2)), wd(V::set1(c.wd)), decay(V::set1(c.decay)) {}

    // W elements at index i; NTP / NTC: stream the state / the copy (aligned there);
    // RS: re-read the master from every copy element that is not its rounding (adam.h's
    // Coeffs::resync, V::reread), counted in `changed`; FL: the step's flags (mode_of).
    // TR (CXK_ADAM_TRAFFIC): the same loads and stores, the values stored back as they were
    // read. The empty asm makes each value opaque, so the compiler can neither drop the grad's
    // load nor a store of what was just loaded.
    // Reads p, m, v at i and stores to po, mo, vo (the same pointers in place).
    template <bool NTP, bool NTC, bool RS, bool TR, unsigned FL>
    inline void block(const float *p, const float *m, const float *v, float *po, float *mo,
                      float *vo, const void *g, void *copy, size_t i, uint64_t &changed) const {
        if constexpr (TR) {
            F gv = V::template load_grad<GDT>(g, i), pv = V::load(p + i);
            asm volatile("" : "+v"(gv), "+v"(pv));
            V::template store<NTP>(po + i, pv);
            F mv = V::load(m + i);
            asm volatile("" : "+v"(mv));
            V::template store<NTP>(mo + i, mv);
            F vv = V::load(v + i);
            asm volatile("" : "+v"(vv));
            V::template store<NTP>(vo + i, vv);
            if constexpr (CDT != CXK_DTYPE_NONE) {
                auto cv = V::template load_copy<CDT>(copy, i);
                asm volatile("" : "+v"(cv));
                V::template store_bits<CDT, NTC>(copy, i, cv);
            }
            return;
        }
        F gv = V::mul(V::template load_grad<GDT>(g, i), scale);
        if constexpr (FL & kMaximize) gv = V::neg(gv);
        F pv = V::load(p + i);
        if constexpr (RS && CDT != CXK_DTYPE_NONE)
            pv = V::template reread<CDT>(copy, i, pv, changed);
        pv = update<NTP, FL>(gv, pv, m, v, po, mo, vo, i);
        if constexpr (CDT != CXK_DTYPE_NONE) V::template store_copy<CDT, NTC>(copy, i, pv);
    }

    // The update of W elements at i from the scaled grad gv and the (re-read) master pv:
    // decay, moments, the new master; stores p, m, v and returns the new master.
    template <bool NTP, unsigned FL>
    __attribute__((always_inline)) inline F update(F gv, F pv, const float *m, const float *v,
                                                   float *po, float *mo, float *vo,
                                                   size_t i) const {
        if constexpr (FL & kL2) gv = V::add(gv, V::mul(wd, pv));
        if constexpr (FL & kDecoupled) pv = V::mul(pv, decay);
        F mv = V::load(m + i);
        mv = V::add(mv, V::mul(omb1, V::sub(gv, mv)));
        F vv = V::load(v + i);
        vv = V::add(V::mul(b2, vv), V::mul(omb2, V::mul(gv, gv)));
        F d = V::add(V::sqrt(vv), eps);
        pv = V::add(pv, V::div(V::mul(neg_step, mv), d));
        V::template store<NTP>(po + i, pv);
        V::template store<NTP>(mo + i, mv);
        V::template store<NTP>(vo + i, vv);
        return pv;
    }

    // block at i and i + W with a bf16 copy through V's pair ops (V::kPair): the same
    // arithmetic per lane in the same order; the re-read and the rounded copy take one
    // 32-lane test each instead of two 16-lane ones (V512<true>: reread2, store_copy2).
    template <bool NTP, bool NTC, bool RS, unsigned FL>
    inline void block2(const float *p, const float *m, const float *v, float *po, float *mo,
                       float *vo, const void *g, void *copy, size_t i, uint64_t &changed) const {
        F g0 = V::mul(V::template load_grad<GDT>(g, i), scale);
        F g1 = V::mul(V::template load_grad<GDT>(g, i + V::W), scale);
        if constexpr (FL & kMaximize) {
            g0 = V::neg(g0);
            g1 = V::neg(g1);
        }
        F p0 = V::load(p + i), p1 = V::load(p + i + V::W);
        if constexpr (RS) V::template reread2<CDT>(copy, i, p0, p1, changed);
        p0 = update<NTP, FL>(g0, p0, m, v, po, mo, vo, i);
        p1 = update<NTP, FL>(g1, p1, m, v, po, mo, vo, i + V::W);
        V::template store_copy2<CDT, NTC>(copy, i, p0, p1);
    }

    // Fewer than W elements: run one block on a zero-padded copy (zeros are harmless:
    // v = 0 gives d = eps) and copy the results back.
    template <bool RS, bool TR, unsigned FL>
    void tail(const Span &s, size_t i, size_t k, uint64_t &changed) const {
        alignas(64) float pb[V::W] = {}, mb[V::W] = {}, vb[V::W] = {};
        alignas(64) unsigned char gb[V::W * 4] = {}, cb[V::W * 4] = {};
        constexpr size_t gs = dtype_size(GDT), cs = dtype_size(CDT);
        std::memcpy(pb, s.p + i, k * 4);
        std::memcpy(mb, s.m + i, k * 4);
        std::memcpy(vb, s.v + i, k * 4);
        std::memcpy(gb, static_cast<const unsigned char *>(s.g) + i * gs, k * gs);
        if constexpr ((RS || TR) && CDT != CXK_DTYPE_NONE)  // padding: 0 rounds to 0
            std::memcpy(cb, static_cast<const unsigned char *>(s.copy) + i * cs, k * cs);
        block<false, false, RS, TR, FL>(pb, mb, vb, pb, mb, vb, gb, cb, 0, changed);
        std::memcpy(s.po + i, pb, k * 4);
        std::memcpy(s.mo + i, mb, k * 4);
        std::memcpy(s.vo + i, vb, k * 4);
        if constexpr (CDT != CXK_DTYPE_NONE)
            std::memcpy(static_cast<unsigned char *>(s.copy) + i * cs, cb, k * cs);
    }

    template <bool NTP, bool NTC, bool RS, bool TR, unsigned FL>
    uint64_t body(const Span &s, size_t i, size_t end) const {
        // Local copies: stores through float* could alias *this and s, and the compiler
        // would reload every constant and pointer per block; locals cannot be aliased.
        const Loop k(*this);
        const float *p = s.p, *m = s.m, *v = s.v;
        float *po = s.po, *mo = s.mo, *vo = s.vo;
        const void *g = s.g;
        void *copy = s.copy;
        // One 64-byte line of p, m, v (and g's matching bytes) per group, each group
        // prefetching the lines kPrefetch elements ahead into L2 (prefetcht1). The hardware
        // prefetchers alone leave the 4 streams per thread short of bandwidth, most with 2
        // threads (8 streams); T0 or a longer distance measured slower (the A/B
        // in docs/train.md). Prefetch never faults, so running past the end is harmless.
        // With a 16-bit grad or copy a group is 32 elements, two lines of each fp32 stream and
        // one of each 16-bit one, so each line is prefetched once (the same distance in
        // elements: 1 KiB ahead for the 16-bit streams measured slower, docs/train.md round
        // 11), and a pair-capable V (kPair) reads and writes the 16-bit copy a line at a time.
        uint64_t changed = 0;
        constexpr size_t kLine = 16, gs = dtype_size(GDT), cs = dtype_size(CDT);
        static_assert(kLine % V::W == 0, "a group is whole vectors");
        constexpr bool kReadCopy = (RS || TR) && CDT != CXK_DTYPE_NONE;
        constexpr size_t kGroup = (gs == 2 || cs == 2) ? 2 * kLine : kLine;
        constexpr bool kPairs = V::kPair && cs == 2 && !TR && kGroup % (2 * V::W) == 0;
        for (; i + kGroup <= end; i += kGroup) {
#pragma GCC unroll 4
            for (size_t l = 0; l < kGroup; l += kLine) {
                prefetch_l2(p, (i + l + kPrefetch) * 4);
                prefetch_l2(m, (i + l + kPrefetch) * 4);
                prefetch_l2(v, (i + l + kPrefetch) * 4);
                if constexpr (gs == 4) prefetch_l2(g, (i + l + kPrefetch) * 4);
                // the re-read makes the copy a fifth read stream: without its prefetch the
                // step measured 1.3-1.5x slower on one thread (10M params, bf16 copy)
                if constexpr (kReadCopy && cs == 4) prefetch_l2(copy, (i + l + kPrefetch) * 4);
            }
            if constexpr (gs == 2) prefetch_l2(g, (i + kPrefetch) * 2);
            if constexpr (kReadCopy && cs == 2) prefetch_l2(copy, (i + kPrefetch) * 2);
            if constexpr (kPairs) {
#pragma GCC unroll 2
                for (size_t j = 0; j < kGroup; j += 2 * V::W)
                    k.template block2<NTP, NTC, RS, FL>(p, m, v, po, mo, vo, g, copy, i + j,
                                                       changed);
            } else {
#pragma GCC unroll 4
                for (size_t j = 0; j < kGroup; j += V::W)
                    k.template block<NTP, NTC, RS, TR, FL>(p, m, v, po, mo, vo, g, copy, i + j,
                                                          changed);
            }
        }
        for (; i < end; i += V::W)
            k.template block<NTP, NTC, RS, TR, FL>(p, m, v, po, mo, vo, g, copy, i, changed);
        return changed;
    }

    template <bool RS, bool TR, unsigned FL>
    uint64_t run(const Coeffs &c, const Span &s) const {
        uint64_t changed = 0;
        const size_t n = s.n;
        size_t head = 0;
        if (c.nt_state || c.nt_copy) {
            // Peel until the stored p (po) sits on a vector boundary; m, v and copy stream
            // only if that boundary is theirs too (page-aligned buffers always qualify).
            head = ((V::kAlign - (uintptr_t(s.po) & (V::kAlign - 1))) & (V::kAlign - 1)) / 4;
            if (head > n) head = n;
        }
        for (size_t i = 0; i < head; i += V::W)
            tail<RS, TR, FL>(s, i, head - i < V::W ? head - i : V::W, changed);
        const size_t end = head + (n - head) / V::W * V::W;
        const bool ntp = c.nt_state && aligned_to(s.po + head, V::kAlign) &&
                         aligned_to(s.mo + head, V::kAlign) && aligned_to(s.vo + head, V::kAlign);
        // A re-read brings the copy's lines into the cache already: a streaming store would
        // only evict them again (measured slower), so the copy is stored normally then; with
        // no copy there is nothing to stream. Such loops are not compiled at all.
        constexpr bool kCanNtc = !((RS || TR) && CDT != CXK_DTYPE_NONE) && CDT != CXK_DTYPE_NONE;
        bool ntc = false;
        if constexpr (kCanNtc)
            ntc = c.nt_copy &&
                  aligned_to(static_cast<unsigned char *>(s.copy) + head * dtype_size(CDT),
                             V::kAlign * dtype_size(CDT) / 4);
        if constexpr (kCanNtc) {
            if (ntp && ntc) changed += body<true, true, RS, TR, FL>(s, head, end);
            else if (ntc) changed += body<false, true, RS, TR, FL>(s, head, end);
        }
        if (!ntc) {
            if (ntp) changed += body<true, false, RS, TR, FL>(s, head, end);
            else changed += body<false, false, RS, TR, FL>(s, head, end);
        }
        if (end < n) tail<RS, TR, FL>(s, end, n - end, changed);
        if (ntp || ntc) V::sfence();  // streaming stores are weakly ordered: drain them
        return changed;
    }
};

template <class V, int GDT, int CDT, bool RS>
uint64_t run_m(const Loop<V, GDT, CDT> &loop, const Coeffs &c, const Span &s) {
    switch (mode_of(c)) {  // coeffs_of never sets both kL2 and kDecoupled
        case 0: return loop.template run<RS, false, 0>(c, s);
        case kMaximize: return loop.template run<RS, false, kMaximize>(c, s);
        case kL2: return loop.template run<RS, false, kL2>(c, s);
        case kL2 | kMaximize: return loop.template run<RS, false, kL2 | kMaximize>(c, s);
        case kDecoupled: return loop.template run<RS, false, kDecoupled>(c, s);
        default: return loop.template run<RS, false, kDecoupled | kMaximize>(c, s);
    }
}

template <class V, int GDT, int CDT>
uint64_t run_c(const Coeffs &c, const Span &s) {
    const Loop<V, GDT, CDT> loop(c);
    if (c.traffic) return loop.template run<false, true, 0>(c, s);
    if constexpr (CDT != CXK_DTYPE_NONE)
        if (c.resync) return run_m<V, GDT, CDT, true>(loop, c, s);
    return run_m<V, GDT, CDT, false>(loop, c, s);
}

template <class V, int GDT>
uint64_t run_g(const Coeffs &c, const Span &s) {
    switch (s.cdt) {
        case CXK_DTYPE_F32: return run_c<V, GDT, CXK_DTYPE_F32>(c, s);
        case CXK_DTYPE_BF16: return run_c<V, GDT, CXK_DTYPE_BF16>(c, s);
        case CXK_DTYPE_F16: return run_c<V, GDT, CXK_DTYPE_F16>(c, s);
        default: return run_c<V, GDT, CXK_DTYPE_NONE>(c, s);
    }
}

template <class V>
uint64_t run_simd(const Coeffs &c, const Span &s) {
    switch (s.gdt) {
        case CXK_DTYPE_BF16: return run_g<V, CXK_DTYPE_BF16>(c, s);
        case CXK_DTYPE_F16: return run_g<V, CXK_DTYPE_F16>(c, s);
        default: return run_g<V, CXK_DTYPE_F32>(c, s);
    }
}

}  // namespace
}  // namespace cxk::adam
