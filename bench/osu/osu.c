/* osu.c — OSU-style micro-benchmarks (the OSU suite is not in Debian; these follow its loops
 * and print its table format) over the backend of osu.h:
 *   latency, bw, bibw, multi_lat (pairs r <-> r + size/2), mbw_mr (pairs r -> r + size/2:
 *   aggregate bandwidth and message rate), put_lat, get_lat, put_bw, get_bw
 *   (one-sided, -s fence|pscw), memcpy (the copy baselines of this machine: one thread,
 *   and a copy between two cores, xcore.c).
 * Usage: osu_<backend> BENCH [-n min_bytes] [-m max_bytes] [-i iters] [-w window]
 *        [-s fence|pscw] [-b heap|pool]
 * -b pool: the message buffers of latency, bw, bibw, multi_lat and mbw_mr come from the
 * transport (be_alloc_mem: cxk_msg_alloc_mem / MPI_Alloc_mem), else from the heap.
 * Every message of the last iteration of each size is checked on the receiving side
 * (pattern by size and iteration), so a transport that loses or corrupts data fails (exit 3). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "osu.h"
#include "xcore.h"

static size_t max_bytes = 8u << 20;
static size_t min_bytes = 1;  /* -n: the first size (a power of two) */
static int iters_small = 2000, iters_large = 200;  /* large: above 8 KiB (OSU's split) */
static int window = 64;
static int pscw;  /* one-sided synchronisation: 0 fence, 1 post-start-complete-wait */
static int pool_bufs;  /* -b pool: message buffers from be_alloc_mem */

static int iters_for(size_t n) { return n > 8192 ? iters_large : iters_small; }
static int skip_for(size_t n) { return n > 8192 ? 2 : 20; }

static void fill(unsigned char *b, size_t n, size_t seed) {
    for (size_t i = 0; i < n; ++i) b[i] = (unsigned char)(i * 31 + seed * 7 + 1);
}

static void check(const unsigned char *b, size_t n, size_t seed, const char *what) {
    for (size_t i = 0; i < n; ++i)
        if (b[i] != (unsigned char)(i * 31 + seed * 7 + 1)) {
            fprintf(stderr, "%s: %zu bytes: byte %zu wrong (rank %d)\n", what, n, i, be_rank());
            exit(3);
        }
}

static void *xalloc(size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, 4096, n ? n : 1)) be_abort("posix_memalign", 12);
    memset(p, 0, n ? n : 1);
    return p;
}

/* A message buffer: the transport's memory with -b pool, else the heap. */
static unsigned char *msgbuf(size_t n) {
    if (!pool_bufs) return xalloc(n);
    unsigned char *p = be_alloc_mem(n ? n : 1);
    memset(p, 0, n ? n : 1);
    return p;
}

static void msgfree(unsigned char *p) {
    if (pool_bufs) be_free_mem(p);
    else free(p);
}

static void header(const char *title, const char *cols) {
    if (be_rank() != 0) return;
    printf("# OSU MPI %s\n# Library: %s\n# Ranks: %d\n", title, be_name(), be_size());
    if (pool_bufs) printf("# Buffers: the transport's memory (-b pool)\n");
    printf("%s\n", cols);
    fflush(stdout);
}

static void row(size_t n, double v) {
    printf("%-10zu%18.2f\n", n, v);
    fflush(stdout);
}

/* ping-pong between rank a and b = a + half; returns one-way latency in us (a's view) */
static double pingpong(unsigned char *s, unsigned char *r, size_t n, int a, int b) {
    const int me = be_rank(), iters = iters_for(n), skip = skip_for(n);
    double t0 = 0;
    for (int i = 0; i < iters + skip; ++i) {
        if (i == skip) t0 = be_wtime();
        const int last = i == iters + skip - 1;
        if (last) fill(s, n, n);
        if (me == a) {
            be_send(s, n, b, 1);
            be_recv(r, n, b, 1);
        } else {
            be_recv(r, n, a, 1);
            be_send(s, n, a, 1);
        }
        if (last) check(r, n, n, "latency");
    }
    return (be_wtime() - t0) * 1e6 / (2.0 * iters);
}

static void latency(int multi) {
    const int half = be_size() / 2, me = be_rank();
    if (!multi && be_size() != 2) be_abort("latency needs 2 ranks", 22);
    if (be_size() % 2) be_abort("multi_lat needs an even number of ranks", 22);
    header(multi ? "Multi Latency Test" : "Latency Test", "# Size          Avg Latency(us)");
    unsigned char *s = msgbuf(max_bytes), *r = msgbuf(max_bytes);
    for (size_t n = min_bytes; n <= max_bytes; n *= 2) {
        be_barrier();
        const int a = me < half ? me : me - half;
        double lat = pingpong(s, r, n, a, a + half);
        if (multi) {  /* the average over pairs, gathered at rank 0 */
            if (me != 0 && me < half) be_send(&lat, sizeof lat, 0, 2);
            if (me == 0)
                for (int p = 1; p < half; ++p) {
                    double o;
                    be_recv(&o, sizeof o, p, 2);
                    lat += o;
                }
            lat /= half;
        }
        if (me == 0) row(n, lat);
    }
    msgfree(s);
    msgfree(r);
}

static void bandwidth(int bidir) {
    if (be_size() != 2) be_abort("bw/bibw need 2 ranks", 22);
    header(bidir ? "Bi-Directional Bandwidth Test" : "Bandwidth Test",
           "# Size      Bandwidth (MB/s)");
    const int me = be_rank(), peer = 1 - me;
    unsigned char *s = msgbuf(max_bytes), *r = msgbuf(max_bytes);
    unsigned char *reqs = xalloc((size_t)window * 2 * BE_REQ_BYTES);
    char ack[4] = {0};
    for (size_t n = min_bytes; n <= max_bytes; n *= 2) {
        const int iters = iters_for(n) / 10 + 1, skip = 1;
        double t0 = 0;
        be_barrier();
        for (int i = 0; i < iters + skip; ++i) {
            if (i == skip) t0 = be_wtime();
            const int last = i == iters + skip - 1;
            if (last) fill(s, n, n + 1);
            int k = 0;
            /* every message of a window lands in one buffer (OSU does the same) */
            if (me == 0 || bidir)
                for (int j = 0; j < window; ++j) be_isend(s, n, peer, 3, reqs + BE_REQ_BYTES * k++);
            if (me == 1 || bidir)
                for (int j = 0; j < window; ++j) be_irecv(r, n, peer, 3, reqs + BE_REQ_BYTES * k++);
            be_waitall(k, reqs);
            if (!bidir) {
                if (me == 0) be_recv(ack, sizeof ack, peer, 4);
                else be_send(ack, sizeof ack, peer, 4);
            }
            if (last && (me == 1 || bidir)) check(r, n, n + 1, "bandwidth");
        }
        const double t = be_wtime() - t0;
        const double mb = (double)n * window * iters * (bidir ? 2 : 1) / 1e6;
        if (me == 0) row(n, mb / t);
    }
    msgfree(s);
    msgfree(r);
    free(reqs);
}

/* osu_mbw_mr's loop: pairs r -> r + size/2 stream windows of messages at once; rank 0 prints
 * the aggregate bandwidth and message rate (each pair's bytes over the slowest pair's time). */
static void multi_bw(void) {
    const int half = be_size() / 2, me = be_rank();
    if (be_size() < 2 || be_size() % 2) be_abort("mbw_mr needs an even number of ranks", 22);
    header("Multiple Bandwidth / Message Rate Test",
           "# Size                  MB/s        Messages/s");
    if (me == 0) printf("# Pairs: %d\n", half), fflush(stdout);
    const int sender = me < half, peer = sender ? me + half : me - half;
    unsigned char *s = msgbuf(max_bytes), *r = msgbuf(max_bytes);
    unsigned char *reqs = xalloc((size_t)window * BE_REQ_BYTES);
    char ack[4] = {0};
    for (size_t n = min_bytes; n <= max_bytes; n *= 2) {
        const int iters = iters_for(n) / 10 + 1, skip = 1;
        double t0 = 0;
        be_barrier();
        for (int i = 0; i < iters + skip; ++i) {
            if (i == skip) t0 = be_wtime();
            const int last = i == iters + skip - 1;
            if (last && sender) fill(s, n, n + 3);
            for (int j = 0; j < window; ++j) {
                if (sender) be_isend(s, n, peer, 5, reqs + BE_REQ_BYTES * j);
                else be_irecv(r, n, peer, 5, reqs + BE_REQ_BYTES * j);
            }
            be_waitall(window, reqs);
            if (sender) be_recv(ack, sizeof ack, peer, 6);
            else be_send(ack, sizeof ack, peer, 6);
            if (last && !sender) check(r, n, n + 3, "mbw_mr");
        }
        double t = be_wtime() - t0;
        if (me != 0 && sender) be_send(&t, sizeof t, 0, 7);
        if (me == 0)
            for (int p = 1; p < half; ++p) {
                double o;
                be_recv(&o, sizeof o, p, 7);
                if (o > t) t = o;
            }
        const double msgs = (double)window * iters * half;
        if (me == 0) printf("%-10zu%18.2f%18.2f\n", n, msgs * (double)n / 1e6 / t, msgs / t), fflush(stdout);
    }
    msgfree(s);
    msgfree(r);
    free(reqs);
}

static void epoch_open(be_win *w, int origin) {
    if (pscw) origin ? be_start(w, 1) : be_post(w, 0);
}

static void epoch_close(be_win *w, int origin) {
    if (pscw) origin ? be_complete(w) : be_wait(w);
    else be_fence(w);
}

/* rank 0 puts into / gets from rank 1's window; latency: one op per epoch, bw: window ops */
static void one_sided(int get, int bw) {
    if (be_size() != 2) be_abort("one-sided benchmarks need 2 ranks", 22);
    char title[96];
    snprintf(title, sizeof title, "%s %s Test", get ? "Get" : "Put", bw ? "Bandwidth" : "Latency");
    header(title, bw ? "# Size      Bandwidth (MB/s)" : "# Size          Avg Latency(us)");
    if (be_rank() == 0)
        printf("# Window creation: allocate\n# Synchronization: %s\n",
               pscw ? "post-start-complete-wait" : "fence"), fflush(stdout);
    void *base = NULL;
    be_win *w = be_win_create(max_bytes, &base);
    unsigned char *buf = xalloc(max_bytes);
    const int me = be_rank(), origin = me == 0;
    if (!pscw) be_fence(w);
    for (size_t n = min_bytes; n <= max_bytes; n *= 2) {
        const int iters = bw ? iters_for(n) / 10 + 1 : iters_for(n), skip = bw ? 1 : skip_for(n);
        const int ops = bw ? window : 1;
        /* the target's window holds the pattern for gets; a put's arrives there */
        if (get && !origin) fill(base, n, n + 2);
        be_barrier();
        double t0 = 0;
        for (int i = 0; i < iters + skip; ++i) {
            if (i == skip) t0 = be_wtime();
            const int last = i == iters + skip - 1;
            if (last && !get && origin) fill(buf, n, n + 2);
            epoch_open(w, origin);
            if (origin)
                for (int j = 0; j < ops; ++j)
                    get ? be_get(w, buf, n, 1, 0) : be_put(w, buf, n, 1, 0);
            epoch_close(w, origin);
        }
        const double t = be_wtime() - t0;
        if (get && origin) check(buf, n, n + 2, "get");
        if (!get && !origin) check(base, n, n + 2, "put");
        if (me == 0) row(n, bw ? (double)n * ops * iters / 1e6 / t : t * 1e6 / iters);
    }
    be_barrier();
    be_win_free(w);
    free(buf);
}

/* The copy baselines: column 2 copies n bytes from and to buffers rotating over a span of
 * more than four times the last-level cache (what a message's copy into the pool meets: its
 * lines are not in the cache), column 3 copies one buffer to another again and again (in the
 * cache up to its size, inside one core). Columns 4 and 5 copy between two cores, window by
 * window as osu bw does (xcore.c): the receiver thread copies the sender thread's buffer out
 * `window` times per window; in column 4 the sender wrote it once and holds it (osu bw's own
 * condition), in column 5 it rewrites it before every window (the lines come from the other
 * core every window). */
static size_t copy_span(void) {
    long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (llc <= 0) llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
    if (llc <= 0) llc = 32l << 20;  /* unknown: assume a large one */
    size_t span = 4 * (size_t)llc;
    if (span < (64u << 20)) span = 64u << 20;
    return span < max_bytes ? max_bytes : span;
}

static double copy_rate(unsigned char *d, const unsigned char *s, size_t n, size_t span) {
    const size_t slots = span / n;  /* span is a multiple of n: both powers of two */
    const int iters = (int)((64u << 20) / n) + 10;  /* about 64 MiB copied per size */
    double t0 = be_wtime();
    for (int i = 0; i < iters; ++i) {
        const size_t off = (size_t)i % slots * n;
        memcpy(d + off, s + off, n);
        __asm__ volatile("" ::"r"(d) : "memory");  /* keep every copy */
    }
    return (double)n * iters / 1e6 / (be_wtime() - t0);
}

static void copy_baseline(void) {
    header("memcpy Bandwidth (baseline, one thread; then two cores)",
           "# Size      Out-of-cache (MB/s)  In-cache (MB/s)  Cross-core held (MB/s)  "
           "Cross-core written (MB/s)");
    if (be_rank() == 0) printf("# Cross-core CPUs: %s\n", xcore_cpus()), fflush(stdout);
    size_t span = copy_span();
    span = (span + max_bytes - 1) / max_bytes * max_bytes;
    unsigned char *s = xalloc(span), *d = xalloc(span);
    fill(s, span, 5);
    for (size_t n = min_bytes; n <= max_bytes; n *= 2) {
        const double ooc = copy_rate(d, s, n, span), hot = copy_rate(d, s, n, n);
        size_t done = ((64u << 20) / n + 10) * n;  /* what copy_rate's loop wrote */
        if (done > span) done = span;
        if (memcmp(d, s, done)) {
            fprintf(stderr, "memcpy: %zu bytes: the copies differ from their source\n", n);
            exit(3);
        }
        if (be_rank() != 0) continue;
        const double held = xcore_rate(n, window, 0), written = xcore_rate(n, window, 1);
        printf("%-10zu  %-19.2f  %-15.2f  %-22.2f  %.2f\n", n, ooc, hot, held, written);
        fflush(stdout);
    }
    fflush(stdout);
    free(s);
    free(d);
}

static void usage(void) {
    fprintf(stderr, "usage: osu BENCH [-n min_bytes] [-m max_bytes] [-i iters] [-w window] [-s fence|pscw] [-b heap|pool]\n"
                    "BENCH: latency bw bibw multi_lat mbw_mr put_lat get_lat put_bw get_bw memcpy\n");
    exit(2);
}

int main(int argc, char **argv) {
    be_init(&argc, &argv);
    if (argc < 2) usage();
    const char *bench = argv[1];
    for (int i = 2; i < argc; ++i) {
        if (i + 1 >= argc) usage();
        const char *v = argv[++i];
        switch (argv[i - 1][1]) {
        case 'n': min_bytes = strtoull(v, NULL, 0); break;
        case 'm': max_bytes = strtoull(v, NULL, 0); break;
        case 'i': iters_small = atoi(v), iters_large = iters_small / 10 + 1; break;
        case 'w': window = atoi(v); break;
        case 's': pscw = strcmp(v, "pscw") == 0; break;
        case 'b':
            if (strcmp(v, "pool") && strcmp(v, "heap")) usage();
            pool_bufs = strcmp(v, "pool") == 0;
            break;
        default: usage();
        }
    }
    if (max_bytes == 0 || min_bytes == 0 || (min_bytes & (min_bytes - 1)) || window <= 0 ||
        iters_small <= 0)
        usage();
    if (!strcmp(bench, "latency")) latency(0);
    else if (!strcmp(bench, "multi_lat")) latency(1);
    else if (!strcmp(bench, "bw")) bandwidth(0);
    else if (!strcmp(bench, "bibw")) bandwidth(1);
    else if (!strcmp(bench, "mbw_mr")) multi_bw();
    else if (!strcmp(bench, "put_lat")) one_sided(0, 0);
    else if (!strcmp(bench, "get_lat")) one_sided(1, 0);
    else if (!strcmp(bench, "put_bw")) one_sided(0, 1);
    else if (!strcmp(bench, "get_bw")) one_sided(1, 1);
    else if (!strcmp(bench, "memcpy")) copy_baseline();
    else usage();
    be_finalize();
    return 0;
}
