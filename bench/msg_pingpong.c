/* msg_pingpong.c — the messaging layer's one-way time between two processes on a pool of
 * coherence "none" (as between hosts), next to the floor of bench/nc_floor.c: what the
 * ring and msg layers cost above the flush handshake itself. 8-byte ping-pong and 1 MiB
 * one-way streams through cxk_msg_send / cxk_msg_recv, SCHED_FIFO when allowed (the figure
 * is the protocol's, not the scheduler's on a shared machine), each rank on its own CPU.
 * Build: cc -O2 -Iinclude -o build/c/msg_pingpong bench/msg_pingpong.c -Lbuild/c -lcxlkit
 *   -Wl,-rpath,$PWD/build/c      Run: build/c/msg_pingpong [iters] [rounds]
 * (LD_LIBRARY_PATH=DIR runs it on the libcxlkit.so in DIR: another build, same rounds.)
 * One JSON line per round: lat8_us (round trip / 2), bw1m_MBps (1 MiB sends, one way). */
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_rt.h"
#include "cxlkit.h"

enum { kBig = 1 << 20, kBigIters = 200 };

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Rank 0 writes "lat bw" to fd; the peer echoes. -errno of the library, or 0. */
static int rank_run(cxk_comm *c, int rank, long iters, int fd) {
    uint64_t v = 0;
    static char big[kBig];
    int rc = 0;
    for (int warm = 0; warm < 2; ++warm) {  /* rings and rendezvous buffers made first */
        const long n = warm ? iters : 100;
        const int64_t t0 = now_ns();
        for (long i = 0; i < n && !rc; ++i) {
            if (rank == 0) {
                rc = cxk_msg_send(c, &v, 8, 1, 1, 0);
                if (!rc) rc = cxk_msg_recv(c, &v, 8, 1, 1, NULL);
            } else {
                rc = cxk_msg_recv(c, &v, 8, 0, 1, NULL);
                if (!rc) rc = cxk_msg_send(c, &v, 8, 0, 1, 0);
            }
        }
        const double lat = (double)(now_ns() - t0) / 2e3 / (double)n;
        const int64_t t1 = now_ns();
        const long m = warm ? kBigIters : 4;
        for (long i = 0; i < m && !rc; ++i)
            rc = rank == 0 ? cxk_msg_send(c, big, kBig, 1, 2, 0)
                           : cxk_msg_recv(c, big, kBig, 0, 2, NULL);
        if (!rc)
            rc = rank == 0 ? cxk_msg_recv(c, &v, 8, 1, 3, NULL) : cxk_msg_send(c, &v, 8, 0, 3, 0);
        const double bw = (double)kBig * (double)m / ((double)(now_ns() - t1) / 1e3);
        if (warm && rank == 0 && !rc) dprintf(fd, "%.3f %.1f\n", lat, bw);
    }
    return rc;
}

static int rank_main(const char *path, int rank, long iters, int fd) {
    struct cxk_pool_opts o;
    cxk_pool_opts_init(&o);
    o.host_id = rank;
    o.coherence = CXK_COHERENCE_NONE;
    cxk_pool *p = NULL;
    int rc = cxk_pool_open(path, &o, &p);
    if (rc) return fprintf(stderr, "msg_pingpong: open %s: %s\n", path, strerror(-rc)), 1;
    struct cxk_msg_opts mo;
    cxk_msg_opts_init(&mo);
    mo.join_ms = 20000;
    mo.timeout_ms = 20000;
    cxk_comm *c = NULL;
    rc = cxk_msg_init(p, "pingpong", rank, 2, &mo, &c);
    if (!rc) rc = rank_run(c, rank, iters, fd);
    if (c) cxk_msg_finalize(c);
    cxk_pool_close(p);
    if (rc) fprintf(stderr, "msg_pingpong: rank %d: %s\n", rank, strerror(-rc));
    return rc ? 1 : 0;
}

int main(int argc, char **argv) {
    const long iters = argc > 1 ? atol(argv[1]) : 20000;
    const int rounds = argc > 2 ? atoi(argv[2]) : 3;
    if (iters < 1 || rounds < 1)
        return fprintf(stderr, "usage: msg_pingpong [iters] [rounds]\n"), 2;
    char path[96];
    snprintf(path, sizeof path, "/dev/shm/cxk-msg-pingpong-%d.pool", (int)getpid());
    struct cxk_pool_opts o;
    cxk_pool_opts_init(&o);
    o.flags = CXK_POOL_CREATE | CXK_POOL_EXCL;
    o.size = 256u << 20;
    o.host_id = 2;
    o.coherence = CXK_COHERENCE_NONE;
    cxk_pool *p = NULL;
    int rc = cxk_pool_open(path, &o, &p);
    if (rc) return fprintf(stderr, "msg_pingpong: create %s: %s\n", path, strerror(-rc)), 1;
    cxk_pool_close(p);
    const int fifo = bench_rt_start();
    const double load = bench_load();
    int bad = 0;
    for (int r = 0; r < rounds && !bad; ++r) {
        int fds[2];
        if (pipe(fds)) return perror("msg_pingpong: pipe"), 1;
        pid_t pid[2];
        for (int k = 0; k < 2; ++k) {
            bench_pin(0, -1);  /* a child may start on any CPU; the parent places it below */
            pid[k] = fork();
            if (pid[k] == 0) _exit(rank_main(path, k, iters, fds[1]));
            bench_pin(pid[k], k);
        }
        close(fds[1]);
        char line[128] = "";
        FILE *in = fdopen(fds[0], "r");
        const int got = in && fgets(line, sizeof line, in) != NULL;
        if (in) fclose(in);
        for (int k = 0; k < 2; ++k) {
            int st = 0;
            waitpid(pid[k], &st, 0);
            bad |= !WIFEXITED(st) || WEXITSTATUS(st);
        }
        double lat = 0, bw = 0;
        if (!got || sscanf(line, "%lf %lf", &lat, &bw) != 2) bad = 1;
        if (!bad)
            printf("{\"what\": \"msg_pingpong\", \"round\": %d, \"load\": %.2f, \"fifo\": %d, "
                   "\"lat8_us\": %.3f, \"bw1m_MBps\": %.0f}\n", r, load, fifo, lat, bw);
        fflush(stdout);
    }
    unlink(path);
    return bad;
}
