// adam_scalar.cpp — the reference Adam kernel (plain C++, any x86-64) and the fp16
// conversions every level shares; the SIMD kernels must reproduce its bits.
#include <cstring>

#include "adam/adam.h"
#include "cxlkit.h"

namespace cxk::adam {

float f16_to_f32(uint16_t h) {
    const uint32_t sign = uint32_t(h & 0x8000u) << 16;
    const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    uint32_t u;
    if (e == 0) {
        // zero or subnormal: m * 2^-24 is exact in fp32
        float f = float(m) * 0x1p-24f;
        std::memcpy(&u, &f, 4);
        u |= sign;
    } else if (e == 31) {
        u = sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0u);  // NaN comes out quiet
    } else {
        u = sign | ((e + 112) << 23) | (m << 13);
    }
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

uint16_t f32_to_f16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // quiet NaN
    const int e = int(a >> 23) - 127 + 15;  // half exponent
    if (e >= 31) return uint16_t(sign | 0x7c00u);  // inf, or too large: rounds to inf
    if (e <= 0) {
        if (e < -10) return sign;  // below half the smallest subnormal: rounds to zero
        const uint32_t m = (a & 0x7fffffu) | 0x800000u;
        const int shift = 14 - e;  // 14..24
        uint32_t h = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1u))) ++h;  // a carry makes it normal: right
        return uint16_t(sign | h);
    }
    uint32_t h = (uint32_t(e) << 10) | ((a >> 13) & 0x3ffu);
    const uint32_t rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // a carry to 0x7c00 is inf: right
    return uint16_t(sign | h);
}

namespace {

template <int GDT>
inline float load_grad(const void *g, size_t i) {
    if constexpr (GDT == CXK_DTYPE_F32) {
        return static_cast<const float *>(g)[i];
    } else if constexpr (GDT == CXK_DTYPE_BF16) {
        return bf16_to_f32(static_cast<const uint16_t *>(g)[i]);
    } else {
        return f16_to_f32(static_cast<const uint16_t *>(g)[i]);
    }
}

template <int CDT>
inline uint32_t copy_bits(float p) {
    if constexpr (CDT == CXK_DTYPE_F32) {
        uint32_t u;
        std::memcpy(&u, &p, 4);
        return u;
    } else if constexpr (CDT == CXK_DTYPE_BF16) {
        return f32_to_bf16(p);
    } else {
        return f32_to_f16(p);
    }
}

template <int CDT>
inline uint32_t load_copy(const void *c, size_t i) {
    if constexpr (CDT == CXK_DTYPE_F32) {
        uint32_t u;
        std::memcpy(&u, static_cast<const float *>(c) + i, 4);
        return u;
    } else {
        return static_cast<const uint16_t *>(c)[i];
    }
}

template <int CDT>
inline float widen(uint32_t b) {
    if constexpr (CDT == CXK_DTYPE_F32) {
        float f;
        std::memcpy(&f, &b, 4);
        return f;
    } else if constexpr (CDT == CXK_DTYPE_BF16) {
        return bf16_to_f32(uint16_t(b));
    } else {
        return f16_to_f32(uint16_t(b));
    }
}

template <int CDT>
inline void store_copy(void *c, size_t i, float p) {
    if constexpr (CDT == CXK_DTYPE_F32) {
        static_cast<float *>(c)[i] = p;
    } else if constexpr (CDT == CXK_DTYPE_BF16) {
        static_cast<uint16_t *>(c)[i] = f32_to_bf16(p);
    } else if constexpr (CDT == CXK_DTYPE_F16) {
        static_cast<uint16_t *>(c)[i] = f32_to_f16(p);
    }
}

// CXK_ADAM_TRAFFIC: the step's reads and writes, in its order, values stored back as read;
// the empty asm makes each value opaque so that no load or store is optimised away.
template <int GDT, int CDT>
void traffic(const Span &s) {
    for (size_t i = 0; i < s.n; ++i) {
        float g = load_grad<GDT>(s.g, i), p = s.p[i], m = s.m[i], v = s.v[i];
        asm volatile("" : "+x"(g), "+x"(p), "+x"(m), "+x"(v));
        s.po[i] = p;
        s.mo[i] = m;
        s.vo[i] = v;
        if constexpr (CDT != CXK_DTYPE_NONE) {
            uint32_t b = load_copy<CDT>(s.copy, i);
            asm volatile("" : "+r"(b));
            if constexpr (CDT == CXK_DTYPE_F32) std::memcpy(static_cast<float *>(s.copy) + i, &b, 4);
            else static_cast<uint16_t *>(s.copy)[i] = uint16_t(b);
        }
    }
}

template <int GDT, int CDT>
uint64_t run(const Coeffs &c, const Span &s) {
    if (c.traffic) {
        traffic<GDT, CDT>(s);
        return 0;
    }
    uint64_t changed = 0;
    for (size_t i = 0; i < s.n; ++i) {
        float p = s.p[i], m = s.m[i], v = s.v[i];
        if constexpr (CDT != CXK_DTYPE_NONE) {
            // the copy is what the user sees: one that is not our rounding was written by
            // someone else since our last step, and its value replaces the master
            const uint32_t old = load_copy<CDT>(s.copy, i);
            if (c.resync && old != copy_bits<CDT>(p)) p = widen<CDT>(old), ++changed;
        }
        element(c, load_grad<GDT>(s.g, i), p, m, v);
        s.po[i] = p;
        s.mo[i] = m;
        s.vo[i] = v;
        store_copy<CDT>(s.copy, i, p);
    }
    return changed;
}

template <int GDT>
uint64_t run_g(const Coeffs &c, const Span &s) {
    switch (s.cdt) {
        case CXK_DTYPE_F32: return run<GDT, CXK_DTYPE_F32>(c, s);
        case CXK_DTYPE_BF16: return run<GDT, CXK_DTYPE_BF16>(c, s);
        case CXK_DTYPE_F16: return run<GDT, CXK_DTYPE_F16>(c, s);
        default: return run<GDT, CXK_DTYPE_NONE>(c, s);
    }
}

}  // namespace

uint64_t step_scalar(const Coeffs &c, const Span &s) {
    switch (s.gdt) {
        case CXK_DTYPE_BF16: return run_g<CXK_DTYPE_BF16>(c, s);
        case CXK_DTYPE_F16: return run_g<CXK_DTYPE_F16>(c, s);
        default: return run_g<CXK_DTYPE_F32>(c, s);
    }
}

}  // namespace cxk::adam
