// adam.h — private: the per-ISA Adam kernels behind cxk_adam_step (adam.cpp validates,
// picks the level and splits the work) and the one element recipe they all follow.
#pragma once
#include <cstddef>
#include <cstdint>

struct cxk_adam_tensor;
struct cxk_adam_out;
struct cxk_sum_parts;

namespace cxk::kv {
struct SumParts;
}

namespace cxk::adam {

// Per-step constants, fp32 as the kernels use them (derived in double in adam.cpp).
struct Coeffs {
    float scale;       // grad_scale
    float neg_step;    // -lr * sqrt(bc2) / bc1, bc = 1 - beta^step
    float eps;         // eps * sqrt(bc2)
    float omb1;        // 1 - beta1
    float b2, omb2;    // beta2, 1 - beta2
    float wd;          // L2 weight decay added to the gradient (0 when decoupled)
    float decay;       // 1 - lr*wd when decoupled, else 1
    bool maximize, l2, decoupled;  // l2 and decoupled never both (coeffs_of)
    bool nt_state, nt_copy;
    bool resync;       // CXK_ADAM_RESYNC: a copy element that is not the rounded master wins
    bool traffic;      // CXK_ADAM_TRAFFIC: x += g*scale for p, m, v (benchmarks' bound)
};

// One contiguous run of elements of a cxk_adam_tensor (dtypes: enum cxk_dtype). The kernels
// read p, m, v and write the updated values to po, mo, vo: the same arrays for the in-place
// step (cxk_adam_step), another set for cxk_adam_step_into (each either equal to its input
// or overlapping nothing, checked in adam.cpp).
struct Span {
    float *p, *m, *v;
    float *po, *mo, *vo;
    const void *g;
    void *copy;
    size_t n;
    int gdt, cdt;
};

// A kernel returns how many elements it re-read from the copy (c.resync), else 0.
using Kernel = uint64_t (*)(const Coeffs &, const Span &);
uint64_t step_scalar(const Coeffs &c, const Span &s);
uint64_t step_avx2(const Coeffs &c, const Span &s);    // pre: AVX2 + F16C
uint64_t step_avx512(const Coeffs &c, const Span &s);  // pre: AVX-512F
uint64_t step_avx512bf16(const Coeffs &c, const Span &s);  // pre: AVX-512F + BW + AVX512_BF16

// The recipe in scalar form; every SIMD variant performs these operations in this order
// (no FMA), so their results are bitwise those of step_scalar. torch divides by
// sqrt(v)/sqrt(bc2) + eps; multiplying numerator and denominator by sqrt(bc2) (folded into
// neg_step and eps) saves a division per element, which is what bounds the kernel when
// memory is fast, at the cost of a few ulp against torch.
inline void element(const Coeffs &c, float gin, float &p, float &m, float &v) {
    float g = gin * c.scale;
    if (c.maximize) g = -g;
    if (c.l2) g = g + c.wd * p;
    if (c.decoupled) p = p * c.decay;
    m = m + c.omb1 * (g - m);
    v = c.b2 * v + c.omb2 * (g * g);
    float d = __builtin_sqrtf(v) + c.eps;
    p = p + (c.neg_step * m) / d;
}

// bf16 / fp16 <-> fp32, round to nearest even; NaN becomes the quiet NaN torch writes.
inline float bf16_to_f32(uint16_t h) {
    uint32_t u = uint32_t(h) << 16;
    float f;
    __builtin_memcpy(&f, &u, 4);
    return f;
}
inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    __builtin_memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
    return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// adam_into.cpp: what cxk_adam_step_into(_sum) and the teams share with adam.cpp.
// Elements [begin, begin+n) of t, the updated p, m, v going to o's arrays (o NULL: in place).
Span span_of(const cxk_adam_tensor &t, const cxk_adam_out *o, uint64_t begin, uint64_t n);
// The kernel over that span; in / out (NULL: none) gain the checksum parts of the bytes it
// reads / writes at image offsets off[0..2] (param, exp_avg, exp_avg_sq), tile by tile.
uint64_t run_span(Kernel k, const Coeffs &c, const cxk_adam_tensor &t, const cxk_adam_out *o,
                  uint64_t begin, uint64_t n, const uint64_t *off, kv::SumParts *in,
                  kv::SumParts *out);
int check_outs(const cxk_adam_tensor *t, const cxk_adam_out *o, size_t nt);  // 0 or -EINVAL
int check_offs(const uint64_t *off, size_t nt);                              // 0 or -EINVAL
kv::SumParts parts_of(const cxk_sum_parts &p);
void store_parts(cxk_sum_parts &p, const kv::SumParts &s);

}  // namespace cxk::adam
