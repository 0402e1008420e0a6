/* xcore.c — the cross-core copy baseline of osu memcpy: a sender thread on one CPU holds (or
 * rewrites) a buffer, a receiver thread on another CPU copies it out window by window, so
 * every byte crosses from one core's caches to the other's as a message's must. The two CPUs
 * are the first two the process may run on. Flags in ordinary memory hand the windows over
 * (release / acquire), as a transport's ready counts do. */
#define _GNU_SOURCE
#include "xcore.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct xc {
    unsigned char *src, *dst;
    size_t n;
    int window, windows, written;
    int cpu_send, cpu_recv;
    _Atomic long go, done;   /* go: windows the sender handed over; done: the receiver's */
    double secs;             /* the receiver's time for windows 2..windows */
};

static int cpus[2] = {-1, -1};
static char cpus_text[64];

static void pick_cpus(void) {
    if (cpus_text[0]) return;
    cpu_set_t all;
    int k = 0;
    if (sched_getaffinity(0, sizeof all, &all) == 0)
        for (int c = 0; c < CPU_SETSIZE && k < 2; ++c)
            if (CPU_ISSET(c, &all)) cpus[k++] = c;
    if (k < 2) snprintf(cpus_text, sizeof cpus_text, "none (one CPU allowed)");
    else snprintf(cpus_text, sizeof cpus_text, "%d,%d", cpus[0], cpus[1]);
}

const char *xcore_cpus(void) {
    pick_cpus();
    return cpus_text;
}

static void pin(int cpu) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    pthread_setaffinity_np(pthread_self(), sizeof one, &one);
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void *sender(void *arg) {
    struct xc *x = arg;
    pin(x->cpu_send);
    for (long w = 1; w <= x->windows; ++w) {
        if (x->written || w == 1) memset(x->src, (int)(w * 7 + 1), x->n);
        /* release pairs with the receiver's acquire of go: the bytes are written */
        atomic_store_explicit(&x->go, w, memory_order_release);
        while (atomic_load_explicit(&x->done, memory_order_acquire) < w) {
        }
    }
    return NULL;
}

static void *receiver(void *arg) {
    struct xc *x = arg;
    pin(x->cpu_recv);
    double t0 = 0;
    for (long w = 1; w <= x->windows; ++w) {
        while (atomic_load_explicit(&x->go, memory_order_acquire) < w) {
        }
        if (w == 2) t0 = now_s();  /* window 1 warms up */
        for (int j = 0; j < x->window; ++j) {
            memcpy(x->dst, x->src, x->n);
            __asm__ volatile("" ::"r"(x->dst) : "memory");  /* keep every copy */
        }
        /* release pairs with the sender's acquire of done: it may rewrite the buffer */
        atomic_store_explicit(&x->done, w, memory_order_release);
    }
    x->secs = now_s() - t0;
    return NULL;
}

double xcore_rate(size_t n, int window, int written) {
    pick_cpus();
    if (cpus[1] < 0 || n == 0 || window <= 0) return 0;
    struct xc x = {0};
    x.n = n, x.window = window, x.written = written;
    x.windows = (int)((64ul << 20) / (n * (size_t)window)) + 3;  /* ~64 MiB per size */
    if (posix_memalign((void **)&x.src, 4096, n) || posix_memalign((void **)&x.dst, 4096, n)) {
        fprintf(stderr, "memcpy: cross-core: out of memory\n");
        exit(3);
    }
    memset(x.dst, 0, n);
    atomic_init(&x.go, 0);
    atomic_init(&x.done, 0);
    x.cpu_send = cpus[0], x.cpu_recv = cpus[1];
    pthread_t ts, tr;
    if (pthread_create(&tr, NULL, receiver, &x) || pthread_create(&ts, NULL, sender, &x)) {
        fprintf(stderr, "memcpy: cross-core: pthread_create failed\n");
        exit(3);
    }
    pthread_join(ts, NULL);
    pthread_join(tr, NULL);
    if (memcmp(x.dst, x.src, n)) {
        fprintf(stderr, "memcpy: cross-core: %zu bytes: the copy differs from its source\n", n);
        exit(3);
    }
    free(x.src);
    free(x.dst);
    return (double)n * window * (x.windows - 1) / 1e6 / x.secs;
}
