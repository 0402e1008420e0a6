/* ref_chase.c — an independent pointer chase, the reference cxlkit's latency is checked
 * against (tests/bench/test_bench.py and bench/memory.py build it with cc): its own Sattolo shuffle
 * (xorshift64), its own loop and timer, no libcxlkit.
 *   ref_chase SIZE LOADS REPS CPU [HUGEPAGES]
 * pins itself to CPU, chases a random cycle over SIZE bytes in 64-byte slots and prints one
 * line per repetition: ns per load from the thread's on-CPU time, then from wall time.
 * Without arguments (as a ctest program) it checks that the cycle visits every slot.
 * Built as a shared library (cc -shared -fPIC), ref_chase_in() lays its cycle into memory the
 * caller owns and chases it on the calling thread: tests/bench/test_bench.py hands it the very buffer
 * cxlkit's chase uses, so both walk the same pages (in a VM a fresh mapping's backing, huge or
 * not on the host, moved a fresh process's figure by up to 1.75x from one run to the next). */
#define _GNU_SOURCE
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

static double ns_between(struct timespec a, struct timespec b) {
    return (double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec);
}

static int lay_into(char *b, size_t size) {
    size_t n = size / 64;
    size_t *perm = malloc(n * sizeof *perm);
    if (!perm) return -1;
    for (size_t i = 0; i < n; ++i) perm[i] = i;
    uint64_t x = 88172645463325252ull;
    for (size_t i = n - 1; i > 0; --i) { /* Sattolo: j < i gives a single cycle */
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        size_t j = (size_t)(x % i), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (size_t i = 0; i < n; ++i) *(char **)(b + i * 64) = b + perm[i] * 64;
    free(perm);
    return 0;
}

static char *lay_cycle(size_t size, int hugepages) {
    char *b = mmap(0, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (b == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
    if (hugepages) madvise(b, size, MADV_HUGEPAGE);
#endif
    return lay_into(b, size) ? NULL : b;
}

/* One warm pass, then reps timed runs of loads dependent loads: ns per load from the thread's
 * on-CPU time into ns_cpu[r], from wall time into ns_wall[r]. Returns 0, or -1 when size holds
 * fewer than two slots or the shuffle's memory cannot be had. */
int ref_chase_in(char *b, size_t size, long loads, long reps, double *ns_cpu, double *ns_wall) {
    if (!b || size / 64 < 2 || loads <= 0 || lay_into(b, size)) return -1;
    char **p = (char **)b;
    for (size_t i = 0; i < size / 64; ++i) p = (char **)*p; /* warm: one pass */
    for (long r = 0; r < reps; ++r) {
        struct timespec t0, t1, w0, w1;
        clock_gettime(CLOCK_MONOTONIC, &w0);
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
        for (long i = 0; i < loads; ++i) p = (char **)*p;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
        clock_gettime(CLOCK_MONOTONIC, &w1);
        ns_cpu[r] = ns_between(t0, t1) / (double)loads;
        ns_wall[r] = ns_between(w0, w1) / (double)loads;
    }
    return p == NULL; /* the chain is used, so the loop is not dropped */
}

int main(int argc, char **argv) {
    if (argc < 5) { /* self-check: one cycle through all slots */
        size_t size = 1 << 16, n = size / 64, steps = 0;
        char *b = lay_cycle(size, 0);
        if (!b) return 1;
        char **p = (char **)b;
        do {
            p = (char **)*p;
            ++steps;
        } while ((char *)p != b && steps <= n);
        return steps == n ? 0 : 1;
    }
    size_t size = strtoull(argv[1], 0, 0);
    long loads = atol(argv[2]), reps = atol(argv[3]);
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(atoi(argv[4]), &set);
    if (sched_setaffinity(0, sizeof set, &set)) return 2;
    char *b = lay_cycle(size, argc > 5 && atoi(argv[5]));
    double *ns = b && reps > 0 ? malloc(2 * (size_t)reps * sizeof *ns) : NULL;
    if (!ns) return 3;
    if (ref_chase_in(b, size, loads, reps, ns, ns + reps)) return 3;
    for (long r = 0; r < reps; ++r) printf("%.4f %.4f\n", ns[r], ns[reps + r]);
    return 0;
}
