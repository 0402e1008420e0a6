// docs/results/pool-perf/pbench.c: the native create+publish+close+destroy and open+close
// latency used to profile issue 18 (no Python around the calls). Build against a tree:
//   gcc -O2 -o pbench pbench.c -I<tree>/include -L<libdir> -lcxlkit -Wl,-rpath,<libdir> -lpthread
// usage: pbench NPROC(1|2) OPS REPEAT [NBYTES]; two processes = two hosts (ids 0, 1)
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>
#include <pthread.h>
#include <sys/mman.h>
#include "cxlkit.h"

static long long nsnow(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000ll + t.tv_nsec;
}
static int cmp(const void *a, const void *b) {
    long long x = *(const long long *)a, y = *(const long long *)b;
    return x < y ? -1 : x > y;
}
static pthread_barrier_t *bar;

static void worker(const char *path, int host, int ops, int reps, unsigned long nbytes, int out_fd) {
    struct cxk_pool_opts o;
    cxk_pool_opts_init(&o);
    o.host_id = host;
    cxk_pool *p;
    int r = cxk_pool_open(path, &o, &p);
    if (r) { fprintf(stderr, "open %d\n", r); exit(1); }
    char name[64];
    uint64_t off;
    snprintf(name, sizeof name, "t%d-target", host);
    if ((r = cxk_obj_create(p, name, nbytes, &off)) || (r = cxk_obj_publish(p, off, 0)) ||
        (r = cxk_obj_close(p, off))) { fprintf(stderr, "target %d\n", r); exit(1); }
    long long *cd = malloc(sizeof(long long) * ops), *op = malloc(sizeof(long long) * ops);
    double mcd = 0, mop = 0;
    for (int rep = 0; rep < reps; ++rep) {
        pthread_barrier_wait(bar);
        for (int i = 0; i < ops; ++i) {
            snprintf(name, sizeof name, "r%dh%d-%d", rep, host, i);
            long long t0 = nsnow();
            if ((r = cxk_obj_create(p, name, nbytes, &off)) || (r = cxk_obj_publish(p, off, 0)) ||
                (r = cxk_obj_close(p, off)) || (r = cxk_obj_destroy(p, name))) {
                fprintf(stderr, "cd %d\n", r); exit(1);
            }
            cd[i] = nsnow() - t0;
        }
        pthread_barrier_wait(bar);
        snprintf(name, sizeof name, "t%d-target", host);
        for (int i = 0; i < ops; ++i) {
            struct cxk_obj_stat st;
            long long t0 = nsnow();
            if ((r = cxk_obj_open(p, name, &st)) || (r = cxk_obj_close(p, st.off))) {
                fprintf(stderr, "op %d\n", r); exit(1);
            }
            op[i] = nsnow() - t0;
        }
        qsort(cd, ops, sizeof *cd, cmp);
        qsort(op, ops, sizeof *op, cmp);
        mcd += cd[ops / 2];
        mop += op[ops / 2];
    }
    char buf[128];
    int n = snprintf(buf, sizeof buf, "host %d: create+publish+close+destroy %.0f ns, open+close %.0f ns\n",
                     host, mcd / reps, mop / reps);
    if (write(out_fd, buf, n) < 0) exit(1);
    cxk_pool_close(p);
}

int main(int argc, char **argv) {
    int nproc = argc > 1 ? atoi(argv[1]) : 1, ops = argc > 2 ? atoi(argv[2]) : 20000,
        reps = argc > 3 ? atoi(argv[3]) : 5;
    unsigned long nbytes = argc > 4 ? strtoul(argv[4], 0, 0) : 4096;
    char path[64];
    snprintf(path, sizeof path, "/dev/shm/pbench-%d", getpid());
    struct cxk_pool_opts o;
    cxk_pool_opts_init(&o);
    o.flags = CXK_POOL_CREATE;
    o.host_id = 0;
    o.size = 64 << 20;
    o.max_hosts = 2;
    cxk_pool *p;
    int r = cxk_pool_open(path, &o, &p);
    if (r) { fprintf(stderr, "create %d\n", r); return 1; }
    cxk_pool_close(p);
    bar = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    pthread_barrierattr_t a;
    pthread_barrierattr_init(&a);
    pthread_barrierattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_barrier_init(bar, &a, nproc);
    for (int k = 0; k < nproc; ++k)
        if (fork() == 0) { worker(path, k, ops, reps, nbytes, 1); _exit(0); }
    int st, bad = 0;
    for (int k = 0; k < nproc; ++k) { wait(&st); bad |= !WIFEXITED(st) || WEXITSTATUS(st); }
    unlink(path);
    return bad;
}
