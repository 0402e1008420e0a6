/* bench.c — the benchmark kernels: the chase is one cycle through every slot; each
 * bandwidth kind and copy method leaves the bytes it should; loaded latency throttles to the
 * rate asked; CPUs outside the allowed set and malformed arguments give -EINVAL. */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdint.h>

#include "check.h"
#include "cxlkit.h"

static void *map(size_t n) {
    void *p = NULL;
    CHECK_EQ(cxk_map_anon(n, &p), 0);
    CHECK_EQ(cxk_populate(p, n), 0);
    return p;
}

/* A CPU id this thread may not run on (or -1 when every id up to 1023 is allowed). */
static int forbidden_cpu(void) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CHECK_EQ(sched_getaffinity(0, sizeof set, &set), 0);
    for (int c = 0; c < 1024; ++c)
        if (!CPU_ISSET(c, &set)) return c;
    return -1;
}

static int first_cpu(int skip) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CHECK_EQ(sched_getaffinity(0, sizeof set, &set), 0);
    for (int c = 0; c < 1024; ++c)
        if (CPU_ISSET(c, &set) && skip-- == 0) return c;
    return -1;
}

static void test_chase(void) {
    const size_t n = 1 << 20, stride = 64, slots = n / stride;
    char *buf = map(n);
    CHECK_EQ(cxk_bench_chase_init(buf, n, stride, 42), 0);
    /* Following the chain visits every slot exactly once and comes back to the start. */
    static unsigned char seen[(1 << 20) / 64];
    memset(seen, 0, sizeof seen);
    void *p = buf;
    for (size_t i = 0; i < slots; ++i) {
        size_t off = (size_t)((char *)p - buf);
        CHECK(off % stride == 0 && off < n);
        CHECK_EQ(seen[off / stride], 0);
        seen[off / stride] = 1;
        p = *(void **)p;
    }
    CHECK(p == (void *)buf);

    double ns = 0, wall = 0;
    CHECK_EQ(cxk_bench_chase(buf, 100000, -1, &ns, NULL), 0);
    CHECK(ns > 0);
    CHECK_EQ(cxk_bench_chase(buf, 100000, first_cpu(0), &ns, &wall), 0);
    CHECK(ns > 0 && wall > 0);
    int bad = forbidden_cpu();
    if (bad >= 0) CHECK_EQ(cxk_bench_chase(buf, 1000, bad, &ns, NULL), -EINVAL);
    CHECK_EQ(cxk_bench_chase(buf, 0, -1, &ns, NULL), -EINVAL);
    CHECK_EQ(cxk_bench_chase(NULL, 10, -1, &ns, NULL), -EINVAL);

    /* From a cursor: the walk goes on where the last call stopped, and slots - 1000 more loads
     * after 1000 close the cycle at buf; cursors outside the buffer or between slots' words
     * are refused, and so is a NULL cursor pointer. */
    const void *at = NULL;
    CHECK_EQ(cxk_bench_chase_from(buf, n, &at, 1000, -1, &ns, &wall), 0);
    CHECK(at != NULL && at != (void *)buf && (size_t)((const char *)at - buf) < n);
    CHECK_EQ(cxk_bench_chase_from(buf, n, &at, slots - 1000, -1, &ns, NULL), 0);
    CHECK(at == (void *)buf);
    at = buf + n;
    CHECK_EQ(cxk_bench_chase_from(buf, n, &at, 10, -1, &ns, NULL), -EINVAL);
    at = buf - 64;
    CHECK_EQ(cxk_bench_chase_from(buf, n, &at, 10, -1, &ns, NULL), -EINVAL);
    at = buf + 4;
    CHECK_EQ(cxk_bench_chase_from(buf, n, &at, 10, -1, &ns, NULL), -EINVAL);
    CHECK_EQ(cxk_bench_chase_from(buf, n, NULL, 10, -1, &ns, NULL), -EINVAL);

    CHECK_EQ(cxk_bench_chase_init(buf, n, 48, 1), -EINVAL);     /* not a power of two */
    CHECK_EQ(cxk_bench_chase_init(buf, n, 4, 1), -EINVAL);      /* smaller than a pointer */
    CHECK_EQ(cxk_bench_chase_init(buf, 100, 64, 1), -EINVAL);   /* fewer than 2 slots */
    CHECK_EQ(cxk_bench_chase_init(buf + 1, 4096, 64, 1), -EINVAL);  /* misaligned */
    CHECK_EQ(cxk_bench_chase_init(NULL, n, 64, 1), -EINVAL);
    /* The smallest chain: two slots pointing at each other. */
    CHECK_EQ(cxk_bench_chase_init(buf, 128, 64, 7), 0);
    CHECK(*(void **)buf == buf + 64 && *(void **)(buf + 64) == buf);
    CHECK_EQ(cxk_unmap(buf, n), 0);
}

static void test_bandwidth(void) {
    const size_t n = 4 << 20;
    unsigned char *dst = map(n), *src = map(n);
    for (size_t i = 0; i < n; ++i) src[i] = (unsigned char)(i * 7 + 3);
    int cpus[2] = {first_cpu(0), first_cpu(1) >= 0 ? first_cpu(1) : first_cpu(0)};
    double bps[3];
    for (int kind = CXK_BENCH_READ; kind <= CXK_BENCH_NT_WRITE; ++kind)
        for (uint32_t t = 1; t <= 2; ++t) {
            memset(dst, 0, n);
            struct cxk_bench_bw o = {kind, t, cpus, 2, 3, 1};
            CHECK_EQ(cxk_bench_bandwidth(dst, src, n, &o, bps), 0);
            for (int r = 0; r < 3; ++r) CHECK(bps[r] > 0);
            if (kind == CXK_BENCH_COPY) CHECK(memcmp(dst, src, n) == 0);
            if (kind == CXK_BENCH_WRITE || kind == CXK_BENCH_NT_WRITE)
                for (size_t i = 0; i < n; i += 4093) CHECK_EQ(dst[i], 0x5a);
            if (kind == CXK_BENCH_READ)
                for (size_t i = 0; i < n; i += 4093) CHECK_EQ(dst[i], 0);
        }
    /* Unpinned teams, more threads than CPUs; the on-CPU figure beside the wall one. */
    struct cxk_bench_bw o = {CXK_BENCH_READ, 5, NULL, 0, 1, 2};
    double oncpu[1] = {0};
    CHECK_EQ(cxk_bench_bandwidth_ex(dst, NULL, n, &o, bps, oncpu), 0);
    CHECK(bps[0] > 0 && oncpu[0] > 0);

    struct cxk_bench_bw bad = o;
    bad.kind = 9;
    CHECK_EQ(cxk_bench_bandwidth(dst, NULL, n, &bad, bps), -EINVAL);
    bad = o, bad.nthreads = 0;
    CHECK_EQ(cxk_bench_bandwidth(dst, NULL, n, &bad, bps), -EINVAL);
    bad = o, bad.reps = 0;
    CHECK_EQ(cxk_bench_bandwidth(dst, NULL, n, &bad, bps), -EINVAL);
    bad = o, bad.passes = 0;
    CHECK_EQ(cxk_bench_bandwidth(dst, NULL, n, &bad, bps), -EINVAL);
    CHECK_EQ(cxk_bench_bandwidth(dst + 8, NULL, n - 64, &o, bps), -EINVAL);  /* misaligned */
    CHECK_EQ(cxk_bench_bandwidth(dst, NULL, n - 8, &o, bps), -EINVAL);       /* not x64 */
    CHECK_EQ(cxk_bench_bandwidth(dst, NULL, 64 * 4, &o, bps), -EINVAL);      /* < 64/thread */
    bad = o, bad.kind = CXK_BENCH_COPY;
    CHECK_EQ(cxk_bench_bandwidth(dst, NULL, n, &bad, bps), -EINVAL);         /* copy, no src */
    int forbidden = forbidden_cpu();
    if (forbidden >= 0) {
        bad = o, bad.cpus = &forbidden, bad.ncpus = 1;
        CHECK_EQ(cxk_bench_bandwidth(dst, NULL, n, &bad, bps), -EINVAL);
    }
    CHECK_EQ(cxk_unmap(dst, n), 0);
    CHECK_EQ(cxk_unmap(src, n), 0);
}

static void test_loaded(void) {
    const size_t cn = 1 << 20, gn = 4 << 20;
    char *chase = map(cn), *gen = map(gn);
    CHECK_EQ(cxk_bench_chase_init(chase, cn, 64, 3), 0);
    int c0 = first_cpu(0), c1 = first_cpu(1) >= 0 ? first_cpu(1) : c0;
    double ns = 0, bps = 0;
    for (int kind = CXK_BENCH_READ; kind <= CXK_BENCH_NT_WRITE; ++kind) {
        struct cxk_bench_loaded o = {c0, kind, 1, &c1, 1, 0.0, 50000000};
        /* A CPU shared with other busy tasks can starve the generator for a whole window:
         * a few tries before calling zero bandwidth a failure. */
        for (int tries = 0; tries < 5; ++tries) {
            CHECK_EQ(cxk_bench_loaded_latency(chase, gen, gn, &o, &ns, &bps), 0);
            if (bps > 0) break;
        }
        CHECK(ns > 0 && bps > 0);
    }
    /* Throttled: never above the rate asked (the pace is enforced after every chunk). */
    struct cxk_bench_loaded o = {c0, CXK_BENCH_READ, 1, &c1, 1, 200e6, 50000000};
    CHECK_EQ(cxk_bench_loaded_latency(chase, gen, gn, &o, &ns, &bps), 0);
    CHECK(bps > 0 && bps < 1.25 * 200e6);

    struct cxk_bench_loaded bad = o;
    bad.duration_ns = 1000;
    CHECK_EQ(cxk_bench_loaded_latency(chase, gen, gn, &bad, &ns, &bps), -EINVAL);
    bad = o, bad.ngen = 0;
    CHECK_EQ(cxk_bench_loaded_latency(chase, gen, gn, &bad, &ns, &bps), -EINVAL);
    bad = o, bad.rate = -1;
    CHECK_EQ(cxk_bench_loaded_latency(chase, gen, gn, &bad, &ns, &bps), -EINVAL);
    CHECK_EQ(cxk_bench_loaded_latency(chase, gen, 16 << 10, &o, &ns, &bps), -EINVAL);
    int forbidden = forbidden_cpu();
    if (forbidden >= 0) {
        bad = o, bad.chase_cpu = forbidden;
        CHECK_EQ(cxk_bench_loaded_latency(chase, gen, gn, &bad, &ns, &bps), -EINVAL);
    }
    CHECK_EQ(cxk_unmap(chase, cn), 0);
    CHECK_EQ(cxk_unmap(gen, gn), 0);
}

static void test_copy(void) {
    const size_t span = 1 << 20;
    unsigned char *dst = map(span), *src = map(span);
    for (size_t i = 0; i < span; ++i) src[i] = (unsigned char)(i * 13 + 1);
    const size_t sizes[] = {64, 100, 4096, span};
    for (int m = CXK_COPY_MEMCPY; m <= CXK_COPY_INVALIDATE; ++m)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; ++s) {
            memset(dst, 0, span);
            size_t slots = span / sizes[s];
            double ns = 0;
            /* one walk through every slot: the whole covered span is copied */
            CHECK_EQ(cxk_bench_copy(dst, src, span, sizes[s], m, slots, -1, &ns), 0);
            CHECK(ns > 0);
            CHECK(memcmp(dst, src, slots * sizes[s]) == 0);
        }
    double ns;
    CHECK_EQ(cxk_bench_copy(dst, src, span, 64, CXK_COPY_NT, 10, first_cpu(0), &ns), 0);
    CHECK_EQ(cxk_bench_copy(dst, src, span, 64, 7, 10, -1, &ns), -EINVAL);
    CHECK_EQ(cxk_bench_copy(dst, src, span, 0, 0, 10, -1, &ns), -EINVAL);
    CHECK_EQ(cxk_bench_copy(dst, src, span, span + 1, 0, 10, -1, &ns), -EINVAL);
    CHECK_EQ(cxk_bench_copy(dst, src, span, 64, 0, 0, -1, &ns), -EINVAL);
    int forbidden = forbidden_cpu();
    if (forbidden >= 0) CHECK_EQ(cxk_bench_copy(dst, src, span, 64, 0, 1, forbidden, &ns), -EINVAL);
    CHECK_EQ(cxk_unmap(dst, span), 0);
    CHECK_EQ(cxk_unmap(src, span), 0);
}

static void test_hugepages(void) {
    const size_t n = 4 << 20;
    void *p = NULL;
    CHECK_EQ(cxk_map_anon(n, &p), 0);
    int r = cxk_bench_hugepages(p, n);
    CHECK(r == 0 || r == -EINVAL);  /* -EINVAL: a kernel without THP */
    CHECK_EQ(cxk_bench_hugepages((char *)p + 1, 4096), -EINVAL);
    CHECK_EQ(cxk_bench_hugepages(NULL, 4096), -EINVAL);
    CHECK_EQ(cxk_fault_inject("madvise", 1, ENOMEM), 0);
    CHECK_EQ(cxk_bench_hugepages(p, n), -ENOMEM);
    CHECK_EQ(cxk_unmap(p, n), 0);
}

int main(void) {
    test_chase();
    test_bandwidth();
    test_loaded();
    test_copy();
    test_hugepages();
    return 0;
}
