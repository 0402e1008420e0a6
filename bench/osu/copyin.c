/* copyin.c — where a two-copy transport's time goes (docs/msg.md): a sender
 * thread on one CPU copies its cached n-byte buffer into one of `slots` shared buffers (as
 * cxlkit's rendezvous sender copies into its pool buffers), a receiver thread on another CPU
 * copies each out (as the receiver does), `window` messages per window as osu bw sends them;
 * each side times its own copies. Varied: n, the number of shared buffers the messages
 * rotate over (1: the sender writes lines the receiver read a moment ago; 64: what cxlkit's
 * rendezvous does, a buffer per message of the window) and the sender's stores (ordinary
 * memcpy or non-temporal, cxk_nt_copy). One line per configuration:
 *   n slots stores  total_MBps  sender_copy_MBps  receiver_copy_MBps
 * Usage: copyin [-m max_bytes] [-w window] [-r MiB per configuration] */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cxlkit.h"

struct run {
    unsigned char *src, *dst, *shared;  /* shared: slots * n bytes */
    size_t n;
    int slots, window, windows, nt;
    int cpu_send, cpu_recv;
    _Atomic long *ready;  /* [slots]: message number the slot holds (written by the sender) */
    _Atomic long *freed;  /* [slots]: message number the receiver finished (by the receiver) */
    double send_copy_s, recv_copy_s, total_s;
};

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void pin(int cpu) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    pthread_setaffinity_np(pthread_self(), sizeof one, &one);
}

static void *sender(void *arg) {
    struct run *x = arg;
    pin(x->cpu_send);
    const long msgs = (long)x->window * x->windows;
    for (long m = 1; m <= msgs; ++m) {
        const int s = (int)(m % x->slots);
        /* acquire pairs with the receiver's release of freed: the slot's last message is out */
        while (m > x->slots && atomic_load_explicit(&x->freed[s], memory_order_acquire) < m - x->slots) {
        }
        unsigned char *d = x->shared + (size_t)s * x->n;
        const double t = now_s();
        if (x->nt) cxk_nt_copy(d, x->src, x->n);
        else memcpy(d, x->src, x->n);
        if (m > x->window) x->send_copy_s += now_s() - t;  /* window 1 warms up */
        atomic_store_explicit(&x->ready[s], m, memory_order_release);
    }
    return NULL;
}

static void *receiver(void *arg) {
    struct run *x = arg;
    pin(x->cpu_recv);
    const long msgs = (long)x->window * x->windows;
    double t0 = 0;
    for (long m = 1; m <= msgs; ++m) {
        const int s = (int)(m % x->slots);
        while (atomic_load_explicit(&x->ready[s], memory_order_acquire) < m) {
        }
        if (m == x->window + 1) t0 = now_s();
        const double t = now_s();
        memcpy(x->dst, x->shared + (size_t)s * x->n, x->n);
        if (m > x->window) x->recv_copy_s += now_s() - t;
        atomic_store_explicit(&x->freed[s], m, memory_order_release);
    }
    x->total_s = now_s() - t0;
    return NULL;
}

static void one(size_t n, int slots, int nt, int window, size_t budget, int cpus[2]) {
    struct run x = {0};
    x.n = n, x.slots = slots, x.nt = nt, x.window = window;
    x.windows = (int)(budget / (n * (size_t)window)) + 2;
    x.cpu_send = cpus[0], x.cpu_recv = cpus[1];
    if (posix_memalign((void **)&x.src, 4096, n) || posix_memalign((void **)&x.dst, 4096, n) ||
        posix_memalign((void **)&x.shared, 4096, n * (size_t)slots)) {
        fprintf(stderr, "copyin: out of memory\n");
        exit(1);
    }
    x.ready = calloc((size_t)slots, sizeof *x.ready);
    x.freed = calloc((size_t)slots, sizeof *x.freed);
    for (size_t i = 0; i < n; ++i) x.src[i] = (unsigned char)(i * 31 + 7);
    memset(x.shared, 0, n * (size_t)slots);  /* faulted in before timing */
    memset(x.dst, 0, n);
    pthread_t ts, tr;
    if (pthread_create(&tr, NULL, receiver, &x) || pthread_create(&ts, NULL, sender, &x)) exit(1);
    pthread_join(ts, NULL);
    pthread_join(tr, NULL);
    if (memcmp(x.dst, x.src, n)) {
        fprintf(stderr, "copyin: %zu bytes: the received copy differs\n", n);
        exit(3);
    }
    const double bytes = (double)n * window * (x.windows - 1);
    printf("%-9zu %-5d %-9s %10.0f %10.0f %10.0f\n", n, slots, nt ? "nt" : "memcpy",
           bytes / 1e6 / x.total_s, bytes / 1e6 / x.send_copy_s, bytes / 1e6 / x.recv_copy_s);
    fflush(stdout);
    free(x.src), free(x.dst), free(x.shared), free(x.ready), free(x.freed);
}

int main(int argc, char **argv) {
    size_t max = 4u << 20, budget = 256u << 20;
    int window = 64;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-m")) max = strtoull(argv[i + 1], NULL, 0);
        else if (!strcmp(argv[i], "-w")) window = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-r")) budget = strtoull(argv[i + 1], NULL, 0) << 20;
        else {
            fprintf(stderr, "usage: copyin [-m max_bytes] [-w window] [-r MiB]\n");
            return 2;
        }
    }
    cpu_set_t all;
    int cpus[2] = {-1, -1}, k = 0;
    if (sched_getaffinity(0, sizeof all, &all) == 0)
        for (int c = 0; c < CPU_SETSIZE && k < 2; ++c)
            if (CPU_ISSET(c, &all)) cpus[k++] = c;
    if (k < 2) {
        fprintf(stderr, "copyin: needs two CPUs\n");
        return 77;
    }
    printf("# copyin: sender CPU %d, receiver CPU %d, window %d\n", cpus[0], cpus[1], window);
    printf("# n       slots stores    total_MBps sender_MBps receiver_MBps\n");
    for (size_t n = 65536; n <= max; n *= 4)
        for (int slots = 1; slots <= 64; slots *= 8)
            for (int nt = 0; nt < 2; ++nt) one(n, slots, nt, window, budget, cpus);
    return 0;
}
