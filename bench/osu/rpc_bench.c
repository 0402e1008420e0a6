/* rpc_bench.c — RPC ping-pong and throughput, OSU-style table: a server process and a client
 * process, requests of -p bytes (default 64) answered by an echo of the same size, at queue
 * depth 1 (one call at a time) and -q (default 128: requests pipelined, each burst published
 * together). Two transports of the same shape:
 *   cxk  cxk_rpc_* over a pool file (fixed 16-byte slot header, batched fences);
 *   tcp  TCP loopback, the same 16-byte header + payload per request, TCP_NODELAY, the server
 *        answering every whole request it has read in one send (the batched analogue).
 * Usage: rpc_bench cxk|tcp [-n calls] [-p payload] [-q depth] */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cxlkit.h"

#define HDR 16

static long ncalls = 200000;
static uint32_t payload = 64, qd = 128;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void die(const char *what, int err) {
    fprintf(stderr, "rpc_bench: %s: %s\n", what, strerror(err < 0 ? -err : err));
    exit(1);
}

/* ---- cxlkit ---------------------------------------------------------------------------- */
static char pool_path[128];

static cxk_pool *cxk_open(int host, unsigned flags) {
    struct cxk_pool_opts o;
    cxk_pool_opts_init(&o);
    o.flags = flags, o.host_id = host, o.max_hosts = 2, o.size = 64u << 20;
    cxk_pool *p = NULL;
    int rc = cxk_pool_open(pool_path, &o, &p);
    if (rc) die(pool_path, rc);
    return p;
}

/* The same-host wake-up's counters (cxk_ring_wake_stats), as a comment line of the table. */
static void print_wake(const char *who, const struct cxk_ring_wake_stats *w) {
    printf("# %s wake-up: %s, futex waits %llu (woken %llu, timeouts %llu), rechecks %llu, "
           "wakes sent %llu, fallbacks %llu\n", who, w->enabled ? "on" : "off",
           (unsigned long long)w->futex_waits, (unsigned long long)w->woken,
           (unsigned long long)w->timeouts, (unsigned long long)w->rechecks,
           (unsigned long long)w->wakes_sent, (unsigned long long)w->fallbacks);
    fflush(stdout);
}

static void cxk_server(void) {
    cxk_pool *p = cxk_open(1, 0);
    cxk_rpc_server *s = NULL;
    int rc = cxk_rpc_server_create(p, "bench", 1, 256, qd < 4 ? 4 : qd, &s);
    if (rc) die("cxk_rpc_server_create", rc);
    struct cxk_wait w; /* the library's wait policy (CXLKIT_MSG_SPIN_US & co), as cxk_rpc_call */
    cxk_wait_begin(&w, NULL);
    for (;;) {
        struct cxk_rpc_req q;
        int n = 0;
        while ((rc = cxk_rpc_server_next(s, &q)) == 0) {
            if (q.method == 0) {  /* stop */
                struct cxk_ring_wake_stats ws;
                if (cxk_rpc_server_wake_stats(s, &ws) == 0)
                    print_wake("server", &ws);
                cxk_rpc_server_reply(s, q.client, q.id, 0, NULL, 0, 0);
                cxk_rpc_server_close(s);
                cxk_pool_close(p);
                _exit(0);
            }
            rc = cxk_rpc_server_reply(s, q.client, q.id, 0, q.data, q.nbytes, CXK_RPC_DEFER);
            if (rc) die("reply", rc);
            if (++n == 64) break;
        }
        cxk_rpc_server_flush(s);
        if (n) cxk_wait_begin(&w, &w.opts);
        else cxk_rpc_server_wait_idle(s, &w); /* a client's publish ends its sleeps */
    }
}

static void cxk_run(double *rt1, double *ops1, double *opsq) {
    snprintf(pool_path, sizeof pool_path, "/dev/shm/cxk-rpcbench-%d", (int)getpid());
    unlink(pool_path);
    cxk_pool *p = cxk_open(0, CXK_POOL_CREATE | CXK_POOL_EXCL);
    pid_t srv = fork();
    if (srv == 0) cxk_server();
    cxk_rpc_client *c = NULL;
    int rc = cxk_rpc_connect(p, "bench", 10000, &c);
    if (rc) die("cxk_rpc_connect", rc);
    char req[4096], rep[4096];
    memset(req, 7, sizeof req);
    uint32_t n;
    int32_t st;
    for (int i = 0; i < 1000; ++i) cxk_rpc_call(c, 1, req, payload, rep, sizeof rep, &n, &st);
    double t0 = now();
    for (long i = 0; i < ncalls; ++i) {
        rc = cxk_rpc_call(c, 1, req, payload, rep, sizeof rep, &n, &st);
        if (rc || n != payload) die("cxk_rpc_call", rc ? rc : EPROTO);
    }
    double t = now() - t0;
    *rt1 = t * 1e6 / ncalls, *ops1 = ncalls / t;
    long sent = 0, got = 0;
    struct cxk_wait w;
    cxk_wait_begin(&w, NULL);
    t0 = now();
    while (got < ncalls) {
        int burst = 0;
        while (sent < ncalls && sent - got < qd &&
               cxk_rpc_submit(c, 1, req, payload, CXK_RPC_DEFER, NULL) == 0)
            ++sent, ++burst;
        if (burst) cxk_rpc_flush(c);
        long before = got;
        while ((rc = cxk_rpc_poll(c, NULL, &st, rep, sizeof rep, &n)) == 0) ++got;
        if (rc != -EAGAIN) die("cxk_rpc_poll", rc);
        if (got != before) cxk_wait_begin(&w, &w.opts);
        else cxk_rpc_wait_idle(c, &w); /* the server's publish ends its sleeps */
    }
    *opsq = ncalls / (now() - t0);
    struct cxk_ring_wake_stats ws;
    if (cxk_rpc_wake_stats(c, &ws) == 0) print_wake("client", &ws);
    cxk_rpc_call(c, 0, NULL, 0, rep, sizeof rep, &n, &st);
    cxk_rpc_close(c);
    waitpid(srv, NULL, 0);
    cxk_pool_close(p);
    unlink(pool_path);
}

/* ---- TCP loopback ---------------------------------------------------------------------- */
static void full_write(int fd, const char *b, size_t n) {
    while (n) {
        ssize_t w = send(fd, b, n, 0);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) die("send", errno);
        b += w, n -= (size_t)w;
    }
}

static void tcp_server(int lfd) {
    int fd = accept(lfd, NULL, NULL);
    if (fd < 0) die("accept", errno);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    const size_t slot = HDR + payload;
    static char in[1 << 20];
    size_t have = 0;
    for (;;) {
        ssize_t r = recv(fd, in + have, sizeof in - have, 0);
        if (r <= 0) _exit(0);
        have += (size_t)r;
        size_t whole = have / slot * slot;
        if (whole) {  /* answer every whole request read, in one send: echo the slots */
            full_write(fd, in, whole);
            memmove(in, in + whole, have - whole);
            have -= whole;
        }
    }
}

static void tcp_run(double *rt1, double *ops1, double *opsq) {
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET, a.sin_addr.s_addr = htonl(INADDR_LOOPBACK), a.sin_port = 0;
    socklen_t al = sizeof a;
    if (bind(lfd, (struct sockaddr *)&a, sizeof a) || listen(lfd, 1) ||
        getsockname(lfd, (struct sockaddr *)&a, &al))
        die("bind/listen", errno);
    pid_t srv = fork();
    if (srv == 0) tcp_server(lfd);
    close(lfd);
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    if (connect(fd, (struct sockaddr *)&a, sizeof a)) die("connect", errno);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    const size_t slot = HDR + payload;
    char *out = calloc(qd, slot), *in = calloc(qd + 1, slot);
    size_t have = 0;
    for (long i = -1000; i < ncalls; ++i) {
        if (i == 0) *rt1 = now();
        full_write(fd, out, slot);
        for (have = 0; have < slot;) {
            ssize_t r = recv(fd, in + have, slot - have, 0);
            if (r <= 0) die("recv", errno);
            have += (size_t)r;
        }
    }
    double t = now() - *rt1;
    *rt1 = t * 1e6 / ncalls, *ops1 = ncalls / t;
    long sent = 0, got = 0;
    double t0 = now();
    have = 0;
    while (got < ncalls) {
        long k = ncalls - sent < qd - (sent - got) ? ncalls - sent : qd - (sent - got);
        if (k > 0) full_write(fd, out, (size_t)k * slot), sent += k;  /* one burst, one send */
        ssize_t r = recv(fd, in + have, (qd + 1) * slot - have, 0);
        if (r <= 0) die("recv", errno);
        have += (size_t)r;
        got += (long)(have / slot);
        have %= slot;  /* the bytes of a partial reply stay at the front (all slots alike) */
    }
    *opsq = ncalls / (now() - t0);
    close(fd);
    waitpid(srv, NULL, 0);
    free(out);
    free(in);
}

int main(int argc, char **argv) {
    if (argc < 2 || (strcmp(argv[1], "cxk") && strcmp(argv[1], "tcp"))) {
        fprintf(stderr, "usage: rpc_bench cxk|tcp [-n calls] [-p payload] [-q depth]\n");
        return 2;
    }
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-n")) ncalls = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "-p")) payload = (uint32_t)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "-q")) qd = (uint32_t)atoi(argv[i + 1]);
    }
    if (ncalls <= 0 || payload > 224 || qd < 1 || qd > 4096 || (qd & (qd - 1))) {
        fprintf(stderr, "rpc_bench: -n > 0, -p <= 224, -q a power of two <= 4096\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    double rt1, ops1, opsq;
    const int cxk = !strcmp(argv[1], "cxk");
    (cxk ? cxk_run : tcp_run)(&rt1, &ops1, &opsq);
    printf("# OSU MPI RPC Test\n# Transport: %s\n# Payload %u B, %ld calls per depth\n"
           "# Size  QD    Avg Latency(us)  Throughput(Mops/s)\n",
           cxk ? "cxlkit cxk_rpc_* over a pool file" : "TCP loopback (TCP_NODELAY)", payload,
           ncalls);
    printf("%-6u%-6d%16.2f%20.3f\n", payload, 1, rt1, ops1 / 1e6);
    printf("%-6u%-6u%16.2f%20.3f\n", payload, qd, qd * 1e6 / opsq, opsq / 1e6);
    return 0;
}
