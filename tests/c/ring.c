/* ring.c — rings through the C ABI: geometry checks, push/pop in order with wrap-around,
 * full and empty, close -> EPIPE, a producer and a consumer process on two hosts streaming
 * 200000 messages under both coherence modes and the non-coherence simulator (each
 * host on a simulated cache, with random evictions), forged stamps, lengths and heads ->
 * EBADMSG. */
#include <errno.h>
#include <stdint.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "child.h"
#include "pool_open.h"
#include "cxlkit.h"
#include "simdir.h"

static char path[256];

static cxk_pool *open_host(int host, int coherence, unsigned flags) {
    return test_pool_open(path, host, flags, 16u << 20, 2, coherence);
}

static void geometry(cxk_pool *p) {
    CHECK_EQ(cxk_ring_bytes(64, 2), CXK_RING_HDR_BYTES + 128);
    CHECK_EQ(cxk_ring_bytes(63, 2), 0);
    CHECK_EQ(cxk_ring_bytes(64, 3), 0);
    CHECK_EQ(cxk_ring_bytes(64, 1), 0);
    CHECK_EQ(cxk_ring_bytes(2u << 20, 2), 0);
    cxk_ring *r = NULL;
    CHECK_EQ(cxk_ring_create(p, "g.bad", 100, 4, CXK_RING_PRODUCER, &r), -EINVAL);
    CHECK_EQ(cxk_ring_create(p, "g.bad", 128, 4, 7, &r), -EINVAL);
    CHECK_EQ(cxk_ring_open(p, "g.none", CXK_RING_CONSUMER, &r), -ENOENT);
    /* an object that is not a ring */
    uint64_t off;
    CHECK_EQ(cxk_obj_create(p, "g.plain", 4096, &off), 0);
    CHECK_EQ(cxk_obj_publish(p, off, 0), 0);
    CHECK_EQ(cxk_ring_open(p, "g.plain", CXK_RING_CONSUMER, &r), -EBADMSG);
    /* a ring whose geometry claims more cells than the object holds */
    CHECK_EQ(cxk_ring_format(p, off, 4096, 128, 16), 0);
    CHECK_EQ(cxk_ring_attach(p, off, 4096, CXK_RING_CONSUMER, &r), 0);
    cxk_ring_close(r);
    CHECK_EQ(cxk_ring_attach(p, off, 1024, CXK_RING_CONSUMER, &r), -EBADMSG);
    CHECK_EQ(cxk_ring_attach(p, off + 8, 1024, CXK_RING_CONSUMER, &r), -ERANGE);
    CHECK_EQ(cxk_ring_attach(p, 1ull << 40, 1024, CXK_RING_CONSUMER, &r), -ERANGE);
    CHECK_EQ(cxk_obj_close(p, off), 0);
    CHECK_EQ(cxk_obj_destroy(p, "g.plain"), 0);
}

static void basics(cxk_pool *p, const char *name) {
    cxk_ring *pr = NULL, *cr = NULL;
    CHECK_EQ(cxk_ring_create(p, name, 128, 4, CXK_RING_PRODUCER, &pr), 0);
    CHECK_EQ(cxk_ring_open(p, name, CXK_RING_CONSUMER, &cr), 0);
    CHECK_EQ(cxk_ring_payload_max(pr), 112);
    CHECK_EQ(cxk_ring_ncells(cr), 4);
    char buf[200];
    uint32_t n = 0, kind = 0;
    const void *pl;
    CHECK_EQ(cxk_ring_pop(cr, buf, sizeof buf, &n, &kind), -EAGAIN);
    CHECK_EQ(cxk_ring_push(pr, buf, 113, 0), -EMSGSIZE);
    CHECK_EQ(cxk_ring_push(cr, buf, 1, 0), -EPROTO);      /* wrong role */
    CHECK_EQ(cxk_ring_peek(pr, &pl, &n, &kind), -EPROTO);
    CHECK_EQ(cxk_ring_release(cr), -EPROTO);              /* nothing peeked */
    for (int lap = 0; lap < 5; ++lap) {
        uint32_t space = 0;
        CHECK_EQ(cxk_ring_space(pr, &space), 0);
        CHECK_EQ(space, 4);
        for (int i = 0; i < 4; ++i) {
            int v = lap * 10 + i;
            CHECK_EQ(cxk_ring_push(pr, &v, sizeof v, 7 + i), 0);
        }
        CHECK_EQ(cxk_ring_push(pr, buf, 1, 0), -EAGAIN);  /* full */
        int v;
        CHECK_EQ(cxk_ring_pop(cr, &v, 2, &n, &kind), -EMSGSIZE);  /* cell kept */
        CHECK_EQ(n, sizeof v);
        for (int i = 0; i < 4; ++i) {
            CHECK_EQ(cxk_ring_pop(cr, &v, sizeof v, &n, &kind), 0);
            CHECK_EQ(v, lap * 10 + i);
            CHECK_EQ(kind, 7 + i);
        }
        CHECK_EQ(cxk_ring_pop(cr, &v, sizeof v, &n, &kind), -EAGAIN);
    }
    /* reserve/commit in place, the largest payload */
    void *dst;
    CHECK_EQ(cxk_ring_commit(pr, 1, 0), -EPROTO);
    CHECK_EQ(cxk_ring_reserve(pr, &dst), 0);
    CHECK_EQ(cxk_ring_reserve(pr, &dst), -EPROTO);
    memset(dst, 0x5a, 112);
    CHECK_EQ(cxk_ring_commit(pr, 113, 0), -EMSGSIZE);
    CHECK_EQ(cxk_ring_commit(pr, 112, 1), 0);
    CHECK_EQ(cxk_ring_peek(cr, &pl, &n, &kind), 0);
    CHECK_EQ(n, 112);
    CHECK_EQ(((const unsigned char *)pl)[111], 0x5a);
    CHECK_EQ(cxk_ring_release(cr), 0);
    /* deferred commits stay invisible until one publish stamps them all, in order */
    for (int i = 0; i < 3; ++i) {
        CHECK_EQ(cxk_ring_reserve(pr, &dst), 0);
        memset(dst, 'a' + i, 100);
        CHECK_EQ(cxk_ring_commit_ex(pr, 100, 20 + i, CXK_RING_DEFER), 0);
    }
    CHECK_EQ(cxk_ring_commit_ex(pr, 1, 0, 8), -EINVAL);
    CHECK_EQ(cxk_ring_peek(cr, &pl, &n, &kind), -EAGAIN);
    CHECK_EQ(cxk_ring_publish(pr), 0);
    CHECK_EQ(cxk_ring_publish(cr), -EPROTO);
    for (int i = 0; i < 3; ++i) {
        CHECK_EQ(cxk_ring_peek(cr, &pl, &n, &kind), 0);
        CHECK_EQ(kind, 20 + i);
        CHECK_EQ(n, 100);
        CHECK_EQ(((const char *)pl)[99], 'a' + i);
        CHECK_EQ(cxk_ring_release(cr), 0);
    }
    /* a plain commit after deferred ones publishes them first */
    CHECK_EQ(cxk_ring_reserve(pr, &dst), 0);
    CHECK_EQ(cxk_ring_commit_ex(pr, 0, 30, CXK_RING_DEFER), 0);
    CHECK_EQ(cxk_ring_push(pr, "z", 1, 31), 0);
    CHECK_EQ(cxk_ring_pop(cr, buf, sizeof buf, &n, &kind), 0);
    CHECK_EQ(kind, 30);
    CHECK_EQ(cxk_ring_pop(cr, buf, sizeof buf, &n, &kind), 0);
    CHECK_EQ(kind, 31);
    /* close: the consumer drains what was written, then EPIPE */
    int v = 99;
    CHECK_EQ(cxk_ring_push(pr, &v, sizeof v, 0), 0);
    cxk_ring_close(pr);
    CHECK_EQ(cxk_ring_pop(cr, &v, sizeof v, &n, &kind), 0);
    CHECK_EQ(v, 99);
    CHECK_EQ(cxk_ring_pop(cr, &v, sizeof v, &n, &kind), -EPIPE);
    cxk_ring_close(cr);
    CHECK_EQ(cxk_obj_destroy(p, name), 0);
}

/* Bytes the ring's peer could have written: each forged value is refused, never followed. */
static void forged(cxk_pool *p) {
    cxk_ring *pr = NULL, *cr = NULL;
    CHECK_EQ(cxk_ring_create(p, "f.ring", 128, 4, CXK_RING_PRODUCER, &pr), 0);
    CHECK_EQ(cxk_ring_open(p, "f.ring", CXK_RING_CONSUMER, &cr), 0);
    unsigned char *ring = (unsigned char *)cxk_pool_base(p) + cxk_ring_offset(pr);
    uint64_t *head = (uint64_t *)(ring + 64);
    uint64_t *stamp0 = (uint64_t *)(ring + CXK_RING_HDR_BYTES);
    uint32_t *len0 = (uint32_t *)(ring + CXK_RING_HDR_BYTES + 8);
    char buf[128];
    uint32_t n, kind;
    int v = 1;
    CHECK_EQ(cxk_ring_push(pr, &v, sizeof v, 0), 0);
    *len0 = 4000; /* longer than a cell */
    CHECK_EQ(cxk_ring_pop(cr, buf, sizeof buf, &n, &kind), -EBADMSG);
    *len0 = 4;
    *stamp0 = 77; /* neither this lap's nor the last one's */
    CHECK_EQ(cxk_ring_pop(cr, buf, sizeof buf, &n, &kind), -EBADMSG);
    *stamp0 = 1;
    CHECK_EQ(cxk_ring_pop(cr, buf, sizeof buf, &n, &kind), 0);
    CHECK_EQ(cxk_ring_sync(cr), 0);
    for (int i = 0; i < 2; ++i) CHECK_EQ(cxk_ring_push(pr, &v, sizeof v, 0), 0);
    *head = 1000; /* ahead of anything written */
    CHECK_EQ(cxk_ring_push(pr, &v, sizeof v, 0), 0);     /* credit still cached */
    CHECK_EQ(cxk_ring_push(pr, &v, sizeof v, 0), -EBADMSG); /* full: reads the forged head */
    cxk_ring_close(pr);
    cxk_ring_close(cr);
    CHECK_EQ(cxk_obj_destroy(p, "f.ring"), 0);
}

enum { NMSG = 50000 };

/* One process per side, each its own host: sizes cycle 0..112 bytes, each payload filled
 * from its sequence number; the consumer checks every byte and the order. */
static void stream(int coherence) {
    unlink(path);
    cxk_pool *p = open_host(0, coherence, CXK_POOL_CREATE | CXK_POOL_EXCL);
    CHECK(p != NULL);
    cxk_ring *pr = NULL;
    CHECK_EQ(cxk_ring_create(p, "s.ring", 128, 64, CXK_RING_PRODUCER, &pr), 0);
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        cxk_pool *q = open_host(1, coherence, 0);
        if (!q) _exit(2);
        cxk_ring *cr = NULL;
        if (cxk_ring_open(q, "s.ring", CXK_RING_CONSUMER, &cr)) _exit(3);
        unsigned char buf[128];
        for (uint32_t i = 0; i < NMSG;) {
            uint32_t n, kind;
            int rc = cxk_ring_pop(cr, buf, sizeof buf, &n, &kind);
            if (rc == -EAGAIN) { sched_yield(); continue; }
            if (rc) _exit(4);
            if (kind != i || n != i % 113) _exit(5);
            for (uint32_t k = 0; k < n; ++k)
                if (buf[k] != (unsigned char)(i + k)) _exit(6);
            ++i;
        }
        uint32_t n, kind;
        while (cxk_ring_pop(cr, buf, sizeof buf, &n, &kind) == -EAGAIN) {}
        if (cxk_ring_pop(cr, buf, sizeof buf, &n, &kind) != -EPIPE) _exit(7);
        cxk_ring_close(cr);
        cxk_pool_close(q);
        _exit(0);
    }
    unsigned char buf[128];
    for (uint32_t i = 0; i < NMSG;) {
        uint32_t n = i % 113;
        for (uint32_t k = 0; k < n; ++k) buf[k] = (unsigned char)(i + k);
        int rc = cxk_ring_push(pr, buf, n, i);
        if (rc == -EAGAIN) { sched_yield(); continue; }
        CHECK_EQ(rc, 0);
        ++i;
    }
    cxk_ring_close(pr);
    int st;
    st = child_wait(child, 120);
    CHECK(WIFEXITED(st));
    CHECK_EQ(WEXITSTATUS(st), 0);
    CHECK_EQ(cxk_obj_destroy(p, "s.ring"), 0);
    cxk_pool_close(p);
}

int main(void) {
    snprintf(path, sizeof path, "/dev/shm/cxk-test-ring-%d", (int)getpid());
    test_pool_remove_at_exit(path);
    unlink(path);
    for (int coh = 0; coh < 2; ++coh) {
        cxk_pool *p = open_host(0, coh, CXK_POOL_CREATE);
        CHECK(p != NULL);
        geometry(p);
        basics(p, "b.ring");
        forged(p);
        cxk_pool_close(p);
        unlink(path);
    }
    stream(CXK_COHERENCE_HOST);
    stream(CXK_COHERENCE_NONE);
    simdir_make("ring");
    stream(CXK_COHERENCE_SIM);
    unlink(path);
    return 0;
}
