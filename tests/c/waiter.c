/* waiter.c — one waiter per waiting party (cxk_waiter_*): a comm's policy set through its
 * waiter is the one its old per-comm calls return and the reverse, its stats are the per-comm
 * counters, an RPC server and a ring (policy per call) refuse a policy with -ENOTSUP, a
 * malformed CXLKIT_MSG_SPIN_US refuses the defaults, and a short struct_size is refused. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "pool_open.h"
#include "cxlkit.h"

static char path[256];

static void comm_waiter(cxk_pool *p) {
    struct cxk_msg_opts mo;
    cxk_msg_opts_init(&mo);
    cxk_comm *c = NULL;
    CHECK_EQ(cxk_msg_init(p, "waiter", 0, 1, &mo, &c), 0);
    cxk_waiter *w = cxk_msg_waiter(c);
    CHECK(w != NULL);
    CHECK(cxk_msg_waiter(NULL) == NULL);
    struct cxk_wait_opts o, got;
    cxk_wait_opts_init(&o);
    o.spin_us = 3, o.yield_us = 4, o.sleep_us = 5;
    CHECK_EQ(cxk_waiter_set_wait(w, &o), 0);
    CHECK_EQ(cxk_msg_get_wait(c, &got), 0);  /* the old name reads the waiter's */
    CHECK(got.spin_us == 3 && got.yield_us == 4 && got.sleep_us == 5);
    o.spin_us = 6;
    CHECK_EQ(cxk_msg_set_wait(c, &o), 0);    /* and sets it */
    CHECK_EQ(cxk_waiter_get_wait(w, &got), 0);
    CHECK_EQ(got.spin_us, 6);
    o.sleep_us = 2000000;                    /* over 1 s */
    CHECK_EQ(cxk_waiter_set_wait(w, &o), -EINVAL);
    setenv("CXLKIT_MSG_SPIN_US", "soon", 1); /* the defaults are refused, not half-taken */
    CHECK_EQ(cxk_waiter_set_wait(w, NULL), -EINVAL);
    CHECK(strstr(cxk_config_error(), "CXLKIT_MSG_SPIN_US=soon"));
    unsetenv("CXLKIT_MSG_SPIN_US");
    CHECK_EQ(cxk_waiter_set_wait(w, NULL), 0);
    CHECK_EQ(cxk_waiter_get_wait(w, &got), 0);
    CHECK_EQ(got.spin_us, 200);

    struct cxk_waiter_stats st;
    memset(&st, 0xff, sizeof st);
    st.struct_size = sizeof st;
    CHECK_EQ(cxk_waiter_stats(w, &st), 0);
    struct cxk_spin sp;
    struct cxk_ring_wake_stats ws;
    CHECK_EQ(cxk_msg_spin_stats(c, &sp), 0);
    CHECK_EQ(cxk_msg_wake_stats(c, &ws), 0);
    CHECK(memcmp(&sp, &st.spin, sizeof sp) == 0);
    CHECK(memcmp(&ws, &st.wake, sizeof ws) == 0);
    st.struct_size = 8;
    CHECK_EQ(cxk_waiter_stats(w, &st), -EINVAL);
    CHECK_EQ(cxk_msg_finalize(c), 0);
}

static void server_and_ring_waiters(cxk_pool *p) {
    cxk_rpc_server *s = NULL;
    CHECK_EQ(cxk_rpc_server_create(p, "wsvc", 2, 256, 8, &s), 0);
    cxk_waiter *w = cxk_rpc_server_waiter(s);
    CHECK(w != NULL);
    struct cxk_wait_opts o;
    cxk_wait_opts_init(&o);
    CHECK_EQ(cxk_waiter_set_wait(w, &o), -ENOTSUP);  /* its waits take one per call */
    CHECK_EQ(cxk_waiter_get_wait(w, &o), -ENOTSUP);
    struct cxk_waiter_stats st;
    st.struct_size = sizeof st;
    CHECK_EQ(cxk_waiter_stats(w, &st), 0);
    struct cxk_spin sp;
    CHECK_EQ(cxk_rpc_server_spin_stats(s, &sp), 0);
    CHECK(memcmp(&sp, &st.spin, sizeof sp) == 0);
    cxk_rpc_server_close(s);

    cxk_ring *r = NULL;
    CHECK_EQ(cxk_ring_create(p, "wring", 256, 8, CXK_RING_PRODUCER, &r), 0);
    w = cxk_ring_waiter(r);
    CHECK(w != NULL);
    CHECK_EQ(cxk_waiter_set_wait(w, &o), -ENOTSUP);
    CHECK_EQ(cxk_waiter_stats(w, &st), 0);
    struct cxk_ring_wake_stats ws;
    CHECK_EQ(cxk_ring_wake_stats(r, &ws), 0);
    CHECK(memcmp(&ws, &st.wake, sizeof ws) == 0);
    CHECK_EQ(st.spin.cap_us, 0);  /* no adaptive spin */
    cxk_ring_close(r);
}

int main(void) {
    snprintf(path, sizeof path, "/dev/shm/cxlkit-test-waiter-%d", (int)getpid());
    test_pool_remove_at_exit(path);
    cxk_pool *p = test_pool_open(path, 0, CXK_POOL_CREATE, 32u << 20, 2, CXK_COHERENCE_HOST);
    CHECK(p);
    comm_waiter(p);
    server_and_ring_waiters(p);
    cxk_pool_close(p);
    return 0;
}
