/* nc_floor.c — the floor of a flush-based handshake on this machine: two processes, one line
 * each way, ping-pong. What a message between hosts over non-coherent shared memory cannot
 * beat, whatever the layers above do (docs/mpi-shim.md, "What the pool costs across hosts").
 * Build: cc -O2 -o build/c/nc_floor bench/nc_floor.c   Run: build/c/nc_floor [iters] [rounds]
 * Both processes run SCHED_FIFO when allowed (root): on a machine whose CPUs other work
 * shares, the two spinning sides would otherwise rarely run at once and the figure would be
 * the scheduler's (each variant is over in well under a second; "fifo" in the output says
 * which it was). One JSON line per variant and round: one-way ns (round trip / 2), the cost
 * of one empty poll and of one publish, each alone; and the 1 MiB copies of a rendezvous,
 * each side alone.
 *
 * Variants (publish / poll):
 *   coherent    plain store          / plain load (what coherence "host" pays)
 *   clwb        store, clwb, sfence  / clflushopt, mfence, load (the pool's protocol)
 *   clflushopt  store, clflushopt, sfence / as clwb
 *   nt          movnti, sfence       / as clwb
 *   lock_poll   as clwb              / clflushopt, locked or, load
 * Polling with a plain load and invalidating only once the stamp changed is not a variant: on
 * memory no coherence keeps, a cached copy of the stamp's line never changes, so the plain
 * load would read the old stamp until the line happens to be evicted (unbounded, maybe
 * never); the change it waits for could not be seen. Every poll must evict before it loads. */
#define _GNU_SOURCE
#include <immintrin.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_rt.h"

enum { PUB_STORE, PUB_CLWB, PUB_CLFLUSHOPT, PUB_NT };
enum { POLL_LOAD, POLL_MFENCE, POLL_LOCK };
struct variant {
    const char *name;
    int pub, poll;
};
static const struct variant variants[] = {
    {"coherent", PUB_STORE, POLL_LOAD},
    {"clwb", PUB_CLWB, POLL_MFENCE},
    {"clflushopt", PUB_CLFLUSHOPT, POLL_MFENCE},
    {"nt", PUB_NT, POLL_MFENCE},
    {"lock_poll", PUB_CLWB, POLL_LOCK},
};

static const int64_t kDeadlineNs = 20LL * 1000000000;  /* a peer that never answers */

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

__attribute__((target("clwb,clflushopt"))) static void publish(volatile uint64_t *w, uint64_t v,
                                                               int how) {
    switch (how) {
        case PUB_STORE: __atomic_store_n(w, v, __ATOMIC_RELEASE); return;
        case PUB_CLWB: *w = v; _mm_clwb((void *)w); break;
        case PUB_CLFLUSHOPT: *w = v; _mm_clflushopt((void *)w); break;
        default: _mm_stream_si64((long long *)w, (long long)v); break;
    }
    _mm_sfence();
}

__attribute__((target("clflushopt"))) static uint64_t poll_once(volatile uint64_t *w, int how) {
    if (how == POLL_LOAD) return __atomic_load_n(w, __ATOMIC_ACQUIRE);
    _mm_clflushopt((void *)w);
    if (how == POLL_MFENCE) _mm_mfence();
    else __asm__ __volatile__("lock orq $0, (%%rsp)" ::: "memory", "cc");
    return *w;
}

/* Spin until *w == v; 0, or -1 past the deadline (the clock read every 4096 polls). */
static int await(volatile uint64_t *w, uint64_t v, int how, int64_t deadline) {
    for (uint32_t n = 1; poll_once(w, how) != v; ++n)
        if ((n & 4095) == 0 && now_ns() > deadline) return -1;
    return 0;
}

/* Round trips of one variant: the parent pings on line a, the child answers on line b (a
 * page apart: no adjacent-line prefetch couples them). The child's answer to ping i is i. */
static double oneway_ns(volatile uint64_t *a, volatile uint64_t *b, const struct variant *v,
                        long iters) {
    publish(a, 0, v->pub);
    publish(b, 0, v->pub);
    bench_pin(0, -1);  /* the child may start on any CPU */
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        const int64_t deadline = now_ns() + kDeadlineNs;
        for (long i = 1; i <= iters; ++i) {
            if (await(a, (uint64_t)i, v->poll, deadline)) _exit(1);
            publish(b, (uint64_t)i, v->pub);
        }
        _exit(0);
    }
    bench_pin(pid, 1);
    bench_pin(0, 0);
    const int64_t t0 = now_ns(), deadline = t0 + kDeadlineNs;
    int bad = 0;
    for (long i = 1; i <= iters && !bad; ++i) {
        publish(a, (uint64_t)i, v->pub);
        bad = await(b, (uint64_t)i, v->poll, deadline);
    }
    const int64_t t1 = now_ns();
    if (bad) kill(pid, SIGKILL);
    int st = 0;
    waitpid(pid, &st, 0);
    if (bad || !WIFEXITED(st) || WEXITSTATUS(st)) return -1;
    return (double)(t1 - t0) / (2.0 * (double)iters);
}

/* One process alone: an empty poll (a line nobody writes) and a publish, each n times. */
static void alone_ns(volatile uint64_t *w, const struct variant *v, long n, double *poll,
                     double *pub) {
    int64_t t0 = now_ns();
    uint64_t sink = 0;
    for (long i = 0; i < n; ++i) sink += poll_once(w, v->poll);
    int64_t t1 = now_ns();
    for (long i = 0; i < n; ++i) publish(w, (uint64_t)i + sink * 0, v->pub);
    int64_t t2 = now_ns();
    *poll = (double)(t1 - t0) / (double)n;
    *pub = (double)(t2 - t1) / (double)n;
    __asm__ __volatile__("" ::"r"(sink));
}

/* 1 MiB copies, each way of the rendezvous alone (one process), in GB/s: into the pool by
 * memcpy then clwb of every line then sfence, or by streaming stores then sfence; out of
 * it by clflushopt of every line, mfence, memcpy (a reader must evict what it may hold). */
enum { kCopyBytes = 1 << 20 };
__attribute__((target("clwb"))) static void copy_clwb(uint8_t *d, const uint8_t *s) {
    memcpy(d, s, kCopyBytes);
    for (size_t i = 0; i < kCopyBytes; i += 64) _mm_clwb(d + i);
    _mm_sfence();
}
__attribute__((target("avx2"))) static void copy_nt(uint8_t *d, const uint8_t *s) {
    for (size_t i = 0; i < kCopyBytes; i += 32)
        _mm256_stream_si256((__m256i *)(d + i), _mm256_loadu_si256((const __m256i *)(s + i)));
    _mm_sfence();
}
__attribute__((target("clflushopt"))) static void copy_out(uint8_t *d, const uint8_t *s) {
    for (size_t i = 0; i < kCopyBytes; i += 64) _mm_clflushopt((void *)(s + i));
    _mm_mfence();
    memcpy(d, s, kCopyBytes);
}
static void copies(int round, double load, int reps) {
    static const char *names[] = {"in_memcpy_clwb", "in_nt", "out_clflushopt_memcpy"};
    uint8_t *pool = aligned_alloc(64, kCopyBytes), *user = aligned_alloc(64, kCopyBytes);
    if (!pool || !user) return;
    memset(pool, 1, kCopyBytes);
    memset(user, 2, kCopyBytes);
    for (int k = 0; k < 3; ++k) {
        const int64_t t0 = now_ns();
        for (int i = 0; i < reps; ++i) {
            if (k == 0) copy_clwb(pool, user);
            else if (k == 1) copy_nt(pool, user);
            else copy_out(user, pool);
        }
        const double gbs = (double)kCopyBytes * reps / (double)(now_ns() - t0);
        printf("{\"what\": \"copy1m\", \"variant\": \"%s\", \"round\": %d, \"load\": %.2f, "
               "\"GB_per_s\": %.2f}\n", names[k], round, load, gbs);
    }
    free(pool);
    free(user);
}

int main(int argc, char **argv) {
    const long iters = argc > 1 ? atol(argv[1]) : 100000;
    const int rounds = argc > 2 ? atoi(argv[2]) : 3;
    if (iters < 1 || rounds < 1) {
        fprintf(stderr, "usage: nc_floor [iters >= 1] [rounds >= 1]\n");
        return 2;
    }
    uint8_t *m = mmap(NULL, 3 * 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        perror("nc_floor: mmap");
        return 1;
    }
    volatile uint64_t *a = (volatile uint64_t *)m, *b = (volatile uint64_t *)(m + 4096);
    volatile uint64_t *quiet = (volatile uint64_t *)(m + 8192);
    const double load = bench_load();
    const int fifo = bench_rt_start();
    for (int r = 0; r < rounds; ++r) {  /* rounds interleave the variants */
        copies(r, load, 200);
        for (size_t k = 0; k < sizeof variants / sizeof *variants; ++k) {
            const struct variant *v = &variants[k];
            double poll, pub, ow = oneway_ns(a, b, v, iters);
            alone_ns(quiet, v, iters, &poll, &pub);
            if (ow < 0) {
                fprintf(stderr, "nc_floor: %s: the peer process did not answer\n", v->name);
                return 1;
            }
            printf("{\"what\": \"floor\", \"variant\": \"%s\", \"round\": %d, \"load\": %.2f, "
                   "\"oneway_ns\": %.1f, \"poll_ns\": %.1f, \"publish_ns\": %.1f, "
                   "\"fifo\": %d}\n",
                   v->name, r, load, ow, poll, pub, fifo);
            fflush(stdout);
        }
    }
    return 0;
}
