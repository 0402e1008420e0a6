/* rpc.c — the RPC channel through the C ABI: a server process on its own host answering
 * echo / sum / error methods, blocking calls, 128 batched requests answered in order with
 * batched replies, oversize and bad arguments, two clients, a client closing, and a server
 * killed under a waiting client (-EPIPE, no hang); under coherence host, none and sim (the
 * non-coherence simulator with its random evictions). */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "child.h"
#include "pool_open.h"
#include "cxlkit.h"
#include "simdir.h"

static char path[256];
static int coherence;

static cxk_pool *open_host(int host, unsigned flags) {
    return test_pool_open(path, host, flags, 16u << 20, 3, coherence);
}

/* method 1: echo; 2: sum of uint64s; 3: fail with -ENOENT; 4: never answered (server exits) */
static void serve(int stop_after_kill_method) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  /* a failed CHECK in the parent ends the server too */
    cxk_pool *p = open_host(1, 0);
    if (!p) _exit(2);
    cxk_rpc_server *s = NULL;
    if (cxk_rpc_server_create(p, "svc", 4, 256, 128, &s)) _exit(3);
    for (;;) {
        struct cxk_rpc_req q;
        int n = 0, rc;
        while ((rc = cxk_rpc_server_next(s, &q)) == 0) {
            if (q.method == 1) {
                rc = cxk_rpc_server_reply(s, q.client, q.id, 0, q.data, q.nbytes, CXK_RPC_DEFER);
            } else if (q.method == 2) {
                uint64_t sum = 0, v;
                for (uint32_t i = 0; i + 8 <= q.nbytes; i += 8) {
                    memcpy(&v, (const char *)q.data + i, 8);
                    sum += v;
                }
                rc = cxk_rpc_server_reply(s, q.client, q.id, 0, &sum, 8, CXK_RPC_DEFER);
            } else if (q.method == 3) {
                rc = cxk_rpc_server_reply(s, q.client, q.id, -ENOENT, NULL, 0, 0);
            } else if (q.method == 4 && stop_after_kill_method) {
                raise(SIGKILL);
            } else if (q.method == 9) {
                cxk_rpc_server_reply(s, q.client, q.id, 0, NULL, 0, 0);
                cxk_rpc_server_close(s);
                cxk_pool_close(p);
                _exit(0);
            }
            if (rc) _exit(4);
            if (++n == 64) break;  /* one batch */
        }
        cxk_rpc_server_flush(s);
        if (rc != 0 && rc != -EAGAIN) _exit(5);
    }
}

static pid_t start_server(int killable) {
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) serve(killable);
    return pid;
}

static void calls(cxk_pool *p) {
    cxk_rpc_client *c = NULL, *c2 = NULL;
    CHECK_EQ(cxk_rpc_connect(p, "bad name", 100, &c), -EINVAL);
    CHECK_EQ(cxk_rpc_connect(p, "svc", 5000, &c), 0);
    CHECK_EQ(cxk_rpc_payload_max(c), 256 - 16 - 16);
    char buf[256];
    uint32_t n;
    int32_t st;
    CHECK_EQ(cxk_rpc_call(c, 1, "hello", 6, buf, sizeof buf, &n, &st), 0);
    CHECK_EQ(n, 6);
    CHECK(strcmp(buf, "hello") == 0);
    uint64_t v[4] = {1, 2, 3, 1000}, sum = 0;
    CHECK_EQ(cxk_rpc_call(c, 2, v, sizeof v, &sum, 8, &n, &st), 0);
    CHECK_EQ(sum, 1006);
    CHECK_EQ(cxk_rpc_call(c, 3, NULL, 0, buf, sizeof buf, &n, &st), -ENOENT);
    CHECK_EQ(st, -ENOENT);
    CHECK_EQ(cxk_rpc_call(c, 1, buf, 225, buf, sizeof buf, &n, &st), -EMSGSIZE);
    /* 128 requests published with one fence, replies in order */
    for (uint64_t i = 0; i < 128; ++i) {
        uint64_t id;
        CHECK_EQ(cxk_rpc_submit(c, 2, &i, 8, CXK_RPC_DEFER, &id), 0);
    }
    uint64_t id;
    CHECK_EQ(cxk_rpc_submit(c, 2, v, 8, 0, &id), -EAGAIN); /* depth reached */
    CHECK_EQ(cxk_rpc_call(c, 1, "x", 1, buf, sizeof buf, &n, &st), -EPROTO);
    CHECK_EQ(cxk_rpc_flush(c), 0);
    for (uint64_t i = 0; i < 128;) {
        uint64_t got;
        int rc = cxk_rpc_poll(c, &id, &st, &got, 8, &n);
        if (rc == -EAGAIN) continue;
        CHECK_EQ(rc, 0);
        CHECK_EQ(got, i);
        ++i;
    }
    /* a second client */
    CHECK_EQ(cxk_rpc_connect(p, "svc", 5000, &c2), 0);
    CHECK_EQ(cxk_rpc_call(c2, 1, "two", 4, buf, sizeof buf, &n, &st), 0);
    CHECK(strcmp(buf, "two") == 0);
    cxk_rpc_close(c2);
    CHECK_EQ(cxk_rpc_call(c, 1, "one", 4, buf, sizeof buf, &n, &st), 0);
    CHECK_EQ(cxk_rpc_call(c, 9, NULL, 0, buf, sizeof buf, &n, &st), 0); /* stop */
    cxk_rpc_close(c);
}

struct connecting {
    cxk_pool *p;
    cxk_rpc_client *c;
};

static void *connect_thread(void *arg) {
    struct connecting *a = arg;
    if (cxk_rpc_connect(a->p, "lag", 5000, &a->c)) a->c = NULL;
    return NULL;
}

/* A client that took replies and sends more before its reply ring's head was published (the
 * ring publishes consumed cells in batches): the server must still find room for each reply.
 * Driven step by step in one thread so the interleaving that once failed is the one tested. */
static void consumed_replies_are_room(cxk_pool *p) {
    cxk_pool *sp = open_host(1, 0);
    CHECK(sp != NULL);
    cxk_rpc_server *s = NULL;
    CHECK_EQ(cxk_rpc_server_create(sp, "lag", 1, 256, 128, &s), 0);
    struct connecting a = {p, NULL};
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, connect_thread, &a), 0);
    struct cxk_rpc_req q;
    while (cxk_rpc_server_clients(s) == 0) CHECK_EQ(cxk_rpc_server_next(s, &q), -EAGAIN);
    CHECK_EQ(pthread_join(t, NULL), 0);
    cxk_rpc_client *c = a.c;
    CHECK(c != NULL);
    uint64_t id, got;
    uint32_t n;
    int32_t st;
    for (uint64_t i = 0; i < 128; ++i) CHECK_EQ(cxk_rpc_submit(c, 1, &i, 8, 0, &id), 0);
    for (int i = 0; i < 128; ++i) {  /* every reply cell now full */
        CHECK_EQ(cxk_rpc_server_next(s, &q), 0);
        CHECK_EQ(cxk_rpc_server_reply(s, q.client, q.id, 0, q.data, q.nbytes, 0), 0);
    }
    for (uint64_t i = 128; i < 1000; ++i) {  /* one in, one out, at full depth */
        CHECK_EQ(cxk_rpc_poll(c, &id, &st, &got, 8, &n), 0);
        CHECK_EQ(got, i - 128);
        CHECK_EQ(cxk_rpc_submit(c, 1, &i, 8, 0, &id), 0);
        CHECK_EQ(cxk_rpc_server_next(s, &q), 0);
        CHECK_EQ(cxk_rpc_server_reply(s, q.client, q.id, 0, q.data, q.nbytes, 0), 0);
    }
    for (uint64_t i = 1000 - 128; i < 1000; ++i) {
        CHECK_EQ(cxk_rpc_poll(c, &id, &st, &got, 8, &n), 0);
        CHECK_EQ(got, i);
    }
    cxk_rpc_close(c);
    while (cxk_rpc_server_clients(s) != 0) CHECK_EQ(cxk_rpc_server_next(s, &q), -EAGAIN);
    /* a client that breaks the protocol (more than depth requests unanswered in its view:
     * it never takes its replies) is dropped with -EPIPE; the server goes on */
    cxk_ring *rogue = NULL;
    CHECK_EQ(cxk_ring_create(p, "rpc.lag.0.req", 256, 128, CXK_RING_PRODUCER, &rogue), 0);
    while (cxk_rpc_server_clients(s) == 0) CHECK_EQ(cxk_rpc_server_next(s, &q), -EAGAIN);
    uint64_t hdr[2] = {0, 1};
    int dropped = 0;
    for (uint64_t i = 1; i <= 200 && !dropped; ++i) {
        hdr[0] = i;
        int rc;
        while ((rc = cxk_ring_push(rogue, hdr, sizeof hdr, 0)) == -EAGAIN)
            CHECK_EQ(cxk_rpc_server_next(s, &q), -EAGAIN);  /* the server publishes its head */
        CHECK_EQ(rc, 0);
        CHECK_EQ(cxk_rpc_server_next(s, &q), 0);
        CHECK_EQ(q.id, i);
        rc = cxk_rpc_server_reply(s, q.client, q.id, 0, NULL, 0, 0);
        if (rc == -EPIPE) dropped = 1;
        else CHECK_EQ(rc, 0);
    }
    CHECK(dropped);
    CHECK_EQ(hdr[0], 129);  /* the first reply with no room */
    CHECK_EQ(cxk_rpc_server_clients(s), 0);
    cxk_ring_close(rogue);
    cxk_obj_destroy(p, "rpc.lag.0.req");
    cxk_rpc_server_close(s);
    cxk_pool_close(sp);
}

int main(void) {
    simdir_make("rpc");
    for (coherence = 0; coherence <= CXK_COHERENCE_SIM; ++coherence) {
        snprintf(path, sizeof path, "/dev/shm/cxk-test-rpc-%d", (int)getpid());
        test_pool_remove_at_exit(path);
        unlink(path);
        cxk_pool *p = open_host(0, CXK_POOL_CREATE | CXK_POOL_EXCL);
        CHECK(p != NULL);
        cxk_rpc_client *c = NULL;
        CHECK_EQ(cxk_rpc_connect(p, "svc", 50, &c), -ETIMEDOUT); /* no server yet */
        consumed_replies_are_room(p);
        pid_t srv = start_server(0);
        calls(p);
        int ws;
        ws = child_wait(srv, 120);
        CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
        /* a server killed while we wait: the call fails, never hangs; a new server takes
         * the service over */
        srv = start_server(1);
        CHECK_EQ(cxk_rpc_connect(p, "svc", 5000, &c), 0);
        char buf[8];
        uint32_t n;
        int32_t st;
        CHECK_EQ(cxk_rpc_call(c, 4, NULL, 0, buf, sizeof buf, &n, &st), -EPIPE);
        ws = child_wait(srv, 120);
        CHECK(WIFSIGNALED(ws));
        cxk_rpc_close(c);
        srv = start_server(0);
        calls(p);
        ws = child_wait(srv, 120);
        CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 0);
        cxk_pool_close(p);
        unlink(path);
    }
    return 0;
}
