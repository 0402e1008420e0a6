/* adam_util.h — what the AdamW C tests (adam.c, adam_into.c) share: a seeded generator of
 * floats in [-1, 1), fp32 -> bf16 rounded to nearest even (torch's rounding; no NaN input),
 * and a tensor over arrays of a test's state. */
#ifndef CXK_TESTS_ADAM_UTIL_H
#define CXK_TESTS_ADAM_UTIL_H

#include <stdint.h>
#include <string.h>

#include "cxlkit.h"

static inline float rnd(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((int32_t)(*s >> 8) - (1 << 23)) / (float)(1 << 23);
}

static inline uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* n elements from p, m, v; the grad from g32 or g16 by gdt; the copy (cdt) in c32 or c16. */
static inline struct cxk_adam_tensor adam_tensor(float *p, float *m, float *v, const float *g32,
                                                 const uint16_t *g16, float *c32, uint16_t *c16,
                                                 int gdt, int cdt, uint64_t n) {
    struct cxk_adam_tensor t;
    memset(&t, 0, sizeof t);
    t.param = p;
    t.exp_avg = m;
    t.exp_avg_sq = v;
    t.grad = gdt == CXK_DTYPE_F32 ? (const void *)g32 : (const void *)g16;
    t.grad_dtype = gdt;
    t.copy_dtype = cdt;
    t.param_copy = cdt == CXK_DTYPE_NONE ? NULL : cdt == CXK_DTYPE_F32 ? (void *)c32 : (void *)c16;
    t.n = n;
    return t;
}

#endif
