/* malloc_loop.c — a malloc-heavy program for bench/preload_overhead.py: ITERS rounds over 4096
 * slots, each freeing a random slot and refilling it with malloc (16 B .. 4 KiB, skewed
 * small), one in 8 through realloc of the old block; every LARGE_EVERY-th allocation is a
 * 4 MiB block instead (0: never), the size the preload library places. Each block gets one
 * byte written per 4 KiB page it spans up to 16 KiB (TOUCH_LARGE 1: every page of a 4 MiB
 * block, as a program that uses it would), so allocations are used, not only made.
 * SLOTS (default 4096, at most 4096): fewer slots with LARGE_EVERY 1 make the loop that frees
 * and reallocates 4 MiB blocks only.
 * Prints "allocs N seconds S allocs_per_s R cpu_seconds C allocs_per_cpu_s Q instructions I"
 * (C: the loop's CPU time, clock.h; I: user-space instructions of the loop from a hardware
 * counter, -1 where there is none: insn.h).
 * LARGE_KIB (default 4096): the size of the large blocks, KiB (1024: the 1 MiB blocks between
 * glibc's default mmap threshold and the library's minimum, which come from the heap).
 * Usage: malloc_loop ITERS SEED LARGE_EVERY [TOUCH_LARGE [SLOTS [LARGE_KIB]]] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "insn.h"

#define MAX_SLOTS 4096

static uint64_t rng;
static uint64_t next(void) {  /* xorshift64 */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static char *slot[MAX_SLOTS];
static size_t large = 4u << 20;

/* The loop alone (noinline: callgrind can be pointed at it, --toggle-collect=run_loop). */
__attribute__((noinline)) static int run_loop(long iters, size_t slots, long large_every,
                                              int touch_large) {
    for (long i = 1; i <= iters; i++) {
        size_t k = next() % slots;
        size_t n = (size_t)16 << (next() % 9);  /* 16 B .. 4 KiB */
        n += next() % n;
        if (large_every && i % large_every == 0) n = large;
        char *p;
        if (slot[k] && next() % 8 == 0) {
            p = realloc(slot[k], n);
        } else {
            free(slot[k]);
            p = malloc(n);
        }
        if (!p) return 1;
        size_t touch = n < (16u << 10) || (touch_large && n >= large) ? n : (16u << 10);
        for (size_t o = 0; o < touch; o += 4096) p[o] = (char)i;
        slot[k] = p;
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 4 || argc > 7) {
        fprintf(stderr, "usage: malloc_loop ITERS SEED LARGE_EVERY [TOUCH_LARGE [SLOTS "
                "[LARGE_KIB]]]\n");
        return 2;
    }
    size_t slots = argc >= 6 ? (size_t)atol(argv[5]) : MAX_SLOTS;
    if (argc == 7) large = (size_t)atol(argv[6]) << 10;
    if (large < (16u << 10)) {
        fprintf(stderr, "malloc_loop: LARGE_KIB must be at least 16\n");
        return 2;
    }
    if (slots < 1 || slots > MAX_SLOTS) {
        fprintf(stderr, "malloc_loop: SLOTS must be 1..%d\n", MAX_SLOTS);
        return 2;
    }
    long iters = atol(argv[1]);
    rng = (uint64_t)atoll(argv[2]) | 1;
    long large_every = atol(argv[3]);
    int touch_large = argc >= 5 && atoi(argv[4]);
    double t0 = now(), c0 = cpu_now();
    insn_start();
    if (run_loop(iters, slots, large_every, touch_large)) return 1;
    long long insns = insn_stop();
    double dt = now() - t0, ct = cpu_now() - c0;
    for (size_t k = 0; k < slots; k++) free(slot[k]);
    printf("allocs %ld seconds %.6f allocs_per_s %.1f cpu_seconds %.6f allocs_per_cpu_s %.1f "
           "instructions %lld\n", iters, dt, iters / dt, ct, iters / ct, insns);
    return 0;
}
