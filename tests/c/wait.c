/* wait.c — the wait policy (cxk_wait_*): defaults and the environment, bad options, the
 * phases measured on the clock (spin, then yield, then sleep), cxk_ring_wait for both roles
 * (data, room, timeout, closed, a producer thread waking a waiting consumer), and the comm's
 * and RPC client's setters. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "cxlkit.h"

static char path[256];

static int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void env_defaults(void) {
    struct cxk_wait_opts o;
    unsetenv("CXLKIT_MSG_SPIN_US"), unsetenv("CXLKIT_MSG_YIELD_US"), unsetenv("CXLKIT_MSG_SLEEP_US");
    cxk_wait_opts_init(&o);
    CHECK_EQ(o.spin_us, 200);
    CHECK_EQ(o.yield_us, 0);
    CHECK_EQ(o.sleep_us, 50);
    CHECK_EQ(o.reserved, 0);
    setenv("CXLKIT_MSG_SPIN_US", "forever", 1);
    setenv("CXLKIT_MSG_YIELD_US", "7", 1);
    setenv("CXLKIT_MSG_SLEEP_US", "0", 1);
    cxk_wait_opts_init(&o);
    CHECK_EQ(o.spin_us, CXK_WAIT_FOREVER);
    CHECK_EQ(o.yield_us, 7);
    CHECK_EQ(o.sleep_us, 0);
    /* what is not a count keeps the default (sleep has no "forever"; over 1 s is refused) */
    setenv("CXLKIT_MSG_SPIN_US", "-3", 1);
    setenv("CXLKIT_MSG_YIELD_US", "12abc", 1);
    setenv("CXLKIT_MSG_SLEEP_US", "2000000", 1);
    cxk_wait_opts_init(&o);
    CHECK_EQ(o.spin_us, 200);
    CHECK_EQ(o.yield_us, 0);
    CHECK_EQ(o.sleep_us, 50);
    setenv("CXLKIT_MSG_SLEEP_US", "forever", 1);
    cxk_wait_opts_init(&o);
    CHECK_EQ(o.sleep_us, 50);
    unsetenv("CXLKIT_MSG_SPIN_US"), unsetenv("CXLKIT_MSG_YIELD_US"), unsetenv("CXLKIT_MSG_SLEEP_US");
}

static void bad_options(void) {
    struct cxk_wait_opts o = {1, 2, 1000001, 0};
    CHECK_EQ(cxk_wait_opts_check(&o), -EINVAL);
    CHECK_EQ(cxk_wait_opts_check(NULL), -EINVAL);
    o.sleep_us = 1000000;
    CHECK_EQ(cxk_wait_opts_check(&o), 0);
    o.reserved = 1;
    CHECK_EQ(cxk_wait_opts_check(&o), -EINVAL);
    struct cxk_wait w;
    CHECK_EQ(cxk_wait_begin(&w, &o), -EINVAL);
    CHECK_EQ(w.opts.spin_us, 200);  /* the wait still works, on the defaults */
    CHECK_EQ(w.opts.reserved, 0);
    CHECK_EQ(cxk_wait_begin(NULL, NULL), -EINVAL);
    CHECK_EQ(cxk_wait_begin(&w, NULL), 0);
    CHECK_EQ(w.polls, 0);
}

/* The phases follow the clock, not a poll count: every idle poll spins while the time read
 * before it is under spin_us, yields until spin_us + yield_us, then sleeps; a sleep lasts
 * 1/16 of the time waited (at least 2 us), at most sleep_us. Checked call by call against
 * the times the wait returns, so a preemption of this test (a loaded machine) cannot make it
 * fail: a sleep is checked to last at least its share, never at most (the scheduler may
 * always run us later). The sleeps grow until they reach the cap. */
static int64_t share_ns(int64_t el, int64_t cap_ns) {
    int64_t ns = el / 16;
    if (ns < 2000) ns = 2000;
    return ns < cap_ns ? ns : cap_ns;
}

static void phases(void) {
    struct cxk_wait_opts o = {2000, 3000, 1000, 0};
    struct cxk_wait w;
    CHECK_EQ(cxk_wait_begin(&w, &o), 0);
    int64_t prev = 0;  /* what the last call returned: the time this call decides on */
    uint64_t spun = 0, yielded = 0, slept = 0;
    for (;;) {
        const int64_t t = mono_ns();
        const int64_t el = cxk_wait_idle(&w);
        CHECK(el >= prev);
        if (prev < 2000000) {
            CHECK_EQ(w.phase, CXK_WAIT_SPUN);
            ++spun;
        } else if (prev < 5000000) {
            CHECK_EQ(w.phase, CXK_WAIT_YIELDED);
            ++yielded;
        } else {
            CHECK_EQ(w.phase, CXK_WAIT_SLEPT);
            ++slept;
            CHECK(mono_ns() - t >= share_ns(prev, 1000000));
            if (share_ns(prev, 1000000) == 1000000) break;  /* reached the cap (16 ms) */
        }
        prev = el;
    }
    /* a preemption longer than the 3 ms yield phase can skip it (the scheduler's choice, on
     * a loaded machine): yields are checked for certain below (yield forever) */
    CHECK(slept >= 1 && spun > 0);
    CHECK_EQ(w.polls, spun + yielded + slept);
    /* from a 0 us spin and no yields the sleeps start at 2 us and grow to the cap (1 ms once
     * 16 ms were waited); each lasts at least its share */
    struct cxk_wait_opts g = {0, 0, 1000, 0};
    CHECK_EQ(cxk_wait_begin(&w, &g), 0);
    prev = 0, slept = 0;
    for (;;) {
        const int64_t t = mono_ns();
        const int64_t el = cxk_wait_idle(&w);
        CHECK_EQ(w.phase, CXK_WAIT_SLEPT);
        ++slept;
        CHECK(mono_ns() - t >= share_ns(prev, 1000000));
        if (share_ns(prev, 1000000) == 1000000) break;
        prev = el;
    }
    CHECK(slept > 1);  /* the first sleep (at 0 us waited) is 2 us, not the cap */
    /* a short wait's first sleep is short: straight after a 0 us spin, 2 us (not the cap) */
    struct cxk_wait_opts s = {0, 0, 1000000, 0};
    CHECK_EQ(cxk_wait_begin(&w, &s), 0);
    int64_t t0 = mono_ns();
    cxk_wait_idle(&w);
    CHECK_EQ(w.phase, CXK_WAIT_SLEPT);
    const int64_t first = mono_ns() - t0;
    CHECK(first >= 2000);
    CHECK(first < 500000000);  /* the cap would be 1 s; a 2 us sleep overruns it by far less */
    /* spin 0, yield forever: never sleeps */
    struct cxk_wait_opts y = {0, CXK_WAIT_FOREVER, 1000000, 0};
    CHECK_EQ(cxk_wait_begin(&w, &y), 0);
    for (int i = 0; i < 200; ++i) {
        cxk_wait_idle(&w);
        CHECK_EQ(w.phase, CXK_WAIT_YIELDED);
    }
    /* sleep 0 after the yields: keeps yielding */
    struct cxk_wait_opts z = {0, 0, 0, 0};
    CHECK_EQ(cxk_wait_begin(&w, &z), 0);
    for (int i = 0; i < 200; ++i) {
        cxk_wait_idle(&w);
        CHECK_EQ(w.phase, CXK_WAIT_YIELDED);
    }
    /* spin forever: never leaves the spin */
    struct cxk_wait_opts f = {CXK_WAIT_FOREVER, 0, 1000, 0};
    CHECK_EQ(cxk_wait_begin(&w, &f), 0);
    for (int i = 0; i < 100000; ++i) {
        cxk_wait_idle(&w);
        CHECK_EQ(w.phase, CXK_WAIT_SPUN);
    }
    CHECK_EQ(w.polls, 100000);
}

/* A sleep lowers the thread's timer slack for itself only: the caller's slack is back after
 * it, and a slack already below the wait's (1 us) is left alone. */
static void timer_slack(void) {
    struct cxk_wait_opts o = {0, 0, 100, 0};
    struct cxk_wait w;
    const int orig = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    CHECK(orig > 0);
    const unsigned long vals[] = {123456, 500};
    for (int k = 0; k < 2; ++k) {
        CHECK_EQ(prctl(PR_SET_TIMERSLACK, vals[k], 0, 0, 0), 0);
        CHECK_EQ(cxk_wait_begin(&w, &o), 0);
        for (int i = 0; i < 5; ++i) {
            cxk_wait_idle(&w);
            CHECK_EQ(w.phase, CXK_WAIT_SLEPT);
        }
        CHECK_EQ(prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0), (int)vals[k]);
    }
    CHECK_EQ(prctl(PR_SET_TIMERSLACK, (unsigned long)orig, 0, 0, 0), 0);
}

static cxk_pool *open_pool(int host, unsigned flags) {
    struct cxk_pool_opts o;
    cxk_pool_opts_init(&o);
    o.flags = flags, o.size = 16u << 20, o.host_id = host, o.max_hosts = 2;
    cxk_pool *p = NULL;
    CHECK_EQ(cxk_pool_open(path, &o, &p), 0);
    return p;
}

struct late_push { cxk_ring *pr; int delay_ms; };

static void *push_later(void *arg) {
    struct late_push *lp = arg;
    usleep((useconds_t)lp->delay_ms * 1000);
    int v = 42;
    CHECK_EQ(cxk_ring_push(lp->pr, &v, sizeof v, 3), 0);
    return NULL;
}

static void ring_wait(cxk_pool *p) {
    cxk_ring *pr = NULL, *cr = NULL;
    CHECK_EQ(cxk_ring_create(p, "w.ring", 128, 4, CXK_RING_PRODUCER, &pr), 0);
    CHECK_EQ(cxk_ring_open(p, "w.ring", CXK_RING_CONSUMER, &cr), 0);
    struct cxk_wait_opts bad = {0, 0, 5000000, 0}, fast = {0, 0, 100, 0};
    CHECK_EQ(cxk_ring_wait(cr, &bad, 1), -EINVAL);
    CHECK_EQ(cxk_ring_wait(NULL, NULL, 1), -EINVAL);
    int64_t t = mono_ns();
    CHECK_EQ(cxk_ring_wait(cr, &fast, 20), -ETIMEDOUT);  /* empty */
    CHECK(mono_ns() - t >= 20000000);
    /* a producer thread pushes while the consumer waits (no timeout) */
    struct late_push lp = {pr, 10};
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, push_later, &lp), 0);
    CHECK_EQ(cxk_ring_wait(cr, NULL, 0), 0);
    pthread_join(th, NULL);
    int v = 0;
    uint32_t n = 0, kind = 0;
    CHECK_EQ(cxk_ring_wait(cr, NULL, 5), 0);  /* still there: wait only looks */
    CHECK_EQ(cxk_ring_pop(cr, &v, sizeof v, &n, &kind), 0);
    CHECK_EQ(v, 42);
    CHECK_EQ(kind, 3);
    /* a peeked cell stays peeked across a wait */
    CHECK_EQ(cxk_ring_push(pr, &v, sizeof v, 4), 0);
    const void *pl;
    CHECK_EQ(cxk_ring_peek(cr, &pl, &n, &kind), 0);
    CHECK_EQ(cxk_ring_wait(cr, NULL, 5), 0);
    CHECK_EQ(cxk_ring_release(cr), 0);
    /* producer: room now; full -> timeout; room again once the consumer publishes */
    CHECK_EQ(cxk_ring_wait(pr, NULL, 5), 0);
    for (int i = 0; i < 4; ++i) CHECK_EQ(cxk_ring_push(pr, &i, sizeof i, 0), 0);
    CHECK_EQ(cxk_ring_wait(pr, &fast, 10), -ETIMEDOUT);
    CHECK_EQ(cxk_ring_pop(cr, &v, sizeof v, &n, &kind), 0);
    CHECK_EQ(cxk_ring_sync(cr), 0);
    CHECK_EQ(cxk_ring_wait(pr, &fast, 10), 0);
    /* closed and drained: the consumer's wait ends with EPIPE */
    for (int i = 0; i < 3; ++i) CHECK_EQ(cxk_ring_pop(cr, &v, sizeof v, &n, &kind), 0);
    cxk_ring_close(pr);
    CHECK_EQ(cxk_ring_wait(cr, &fast, 1000), -EPIPE);
    cxk_ring_close(cr);
    CHECK_EQ(cxk_obj_destroy(p, "w.ring"), 0);
}

/* Echo method 1 until method 2 (answered, then the server closes). */
static void *serve_echo(void *arg) {
    cxk_pool *p = arg;
    cxk_rpc_server *s = NULL;
    CHECK_EQ(cxk_rpc_server_create(p, "waitsvc", 1, 256, 4, &s), 0);
    struct cxk_wait w;
    cxk_wait_begin(&w, NULL);
    for (;;) {
        struct cxk_rpc_req q;
        int rc = cxk_rpc_server_next(s, &q);
        if (rc == -EAGAIN) {
            cxk_wait_idle(&w);
            continue;
        }
        CHECK_EQ(rc, 0);
        CHECK_EQ(cxk_rpc_server_reply(s, q.client, q.id, 0, q.data, q.nbytes, 0), 0);
        if (q.method == 2) break;
        cxk_wait_begin(&w, &w.opts);
    }
    cxk_rpc_server_close(s);
    return NULL;
}

static void setters(cxk_pool *p) {
    cxk_comm *c = NULL;
    CHECK_EQ(cxk_msg_init(p, "waitjob", 0, 1, NULL, &c), 0);
    struct cxk_wait_opts o, got;
    CHECK_EQ(cxk_msg_get_wait(c, &got), 0);
    CHECK_EQ(got.spin_us, 200);
    o = (struct cxk_wait_opts){7, 8, 9, 0};
    CHECK_EQ(cxk_msg_set_wait(c, &o), 0);
    CHECK_EQ(cxk_msg_get_wait(c, &got), 0);
    CHECK_EQ(got.spin_us, 7);
    CHECK_EQ(got.yield_us, 8);
    CHECK_EQ(got.sleep_us, 9);
    o.sleep_us = 2000000;
    CHECK_EQ(cxk_msg_set_wait(c, &o), -EINVAL);
    CHECK_EQ(cxk_msg_get_wait(c, &got), 0);
    CHECK_EQ(got.sleep_us, 9);  /* unchanged */
    CHECK_EQ(cxk_msg_set_wait(c, NULL), 0);
    CHECK_EQ(cxk_msg_get_wait(c, &got), 0);
    CHECK_EQ(got.spin_us, 200);
    CHECK_EQ(cxk_msg_set_wait(NULL, &o), -EINVAL);
    CHECK_EQ(cxk_msg_get_wait(c, NULL), -EINVAL);
    /* a self-send under a yield-only policy still completes */
    o = (struct cxk_wait_opts){0, 0, 0, 0};
    CHECK_EQ(cxk_msg_set_wait(c, &o), 0);
    char m[8] = "abcdefg", r[8] = {0};
    cxk_msg_req *q = NULL;
    CHECK_EQ(cxk_msg_irecv(c, r, sizeof r, 0, 1, &q), 0);
    CHECK_EQ(cxk_msg_send(c, m, sizeof m, 0, 1, 0), 0);
    CHECK_EQ(cxk_msg_wait(c, q, NULL), 0);
    CHECK(memcmp(m, r, sizeof m) == 0);
    CHECK_EQ(cxk_msg_finalize(c), 0);

    /* an RPC client under a yield-only policy, its server in a thread */
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, serve_echo, p), 0);
    cxk_rpc_client *cl = NULL;
    CHECK_EQ(cxk_rpc_connect(p, "waitsvc", 10000, &cl), 0);
    o = (struct cxk_wait_opts){1, 2, 3000000, 0};
    CHECK_EQ(cxk_rpc_set_wait(cl, &o), -EINVAL);
    CHECK_EQ(cxk_rpc_set_wait(NULL, NULL), -EINVAL);
    o = (struct cxk_wait_opts){0, 0, 0, 0};
    CHECK_EQ(cxk_rpc_set_wait(cl, &o), 0);
    char rep[16];
    uint32_t n = 0;
    int32_t st = -1;
    for (int i = 0; i < 50; ++i) {
        CHECK_EQ(cxk_rpc_call(cl, 1, m, sizeof m, rep, sizeof rep, &n, &st), 0);
        CHECK_EQ(n, sizeof m);
        CHECK(memcmp(rep, m, sizeof m) == 0);
    }
    CHECK_EQ(cxk_rpc_set_wait(cl, NULL), 0);
    CHECK_EQ(cxk_rpc_call(cl, 2, NULL, 0, rep, sizeof rep, &n, &st), 0);  /* stop */
    pthread_join(th, NULL);
    cxk_rpc_close(cl);
}

int main(void) {
    snprintf(path, sizeof path, "/dev/shm/cxk-test-wait-%d", (int)getpid());
    unlink(path);
    env_defaults();
    bad_options();
    phases();
    timer_slack();
    cxk_pool *p = open_pool(0, CXK_POOL_CREATE | CXK_POOL_EXCL);
    ring_wait(p);
    setters(p);
    cxk_pool_close(p);
    unlink(path);
    return 0;
}
