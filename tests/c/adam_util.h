/* adam_util.h — what the AdamW C tests (adam.c, adam_into.c) share: a seeded generator of
 * floats in [-1, 1) and fp32 -> bf16 rounded to nearest even (torch's rounding; no NaN input). */
#ifndef CXK_TESTS_ADAM_UTIL_H
#define CXK_TESTS_ADAM_UTIL_H

#include <stdint.h>
#include <string.h>

static inline float rnd(uint32_t *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((int32_t)(*s >> 8) - (1 << 23)) / (float)(1 << 23);
}

static inline uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

#endif
