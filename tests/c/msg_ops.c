/* msg_ops.c — what one small message costs in cache-line operations on coherence "none",
 * counted by wrappers of the library's cxk_flush / cxk_invalidate / fences (this program's
 * definitions come first for the library's calls; each forwards to the real one): an 8-byte
 * send flushes one line, its receive invalidates that one line and flushes none (the
 * receive returns without another look; the consumer's head is published every few cells,
 * not when the ring runs empty), and a poll of an idle ring invalidates one line (its next
 * stamp's: not the producer's closed flag, not my own directory). Counted per thread: the
 * heartbeat thread's flushes are not the message's. Ranks are forked processes, in step
 * through pipes. Prints the counts of each step. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "child.h"
#include "pool_open.h"
#include "cxlkit.h"

struct ops {
    long flush_lines, inval_lines, sfences, mfences;
};
static __thread struct ops t_ops;

static long lines(const void *a, size_t n) {
    if (n == 0) return 0;
    const uintptr_t lo = (uintptr_t)a & ~(uintptr_t)63, hi = (uintptr_t)a + n;
    return (long)((hi - lo + 63) / 64);
}

typedef void (*range_fn)(const void *, size_t);
typedef void (*fence_fn)(void);
#define REAL(name, type) \
    static type real; \
    if (!real) real = (type)dlsym(RTLD_NEXT, name)

void cxk_flush(const void *a, size_t n) {
    REAL("cxk_flush", range_fn);
    t_ops.flush_lines += lines(a, n);
    real(a, n);
}
void cxk_invalidate(const void *a, size_t n) {
    REAL("cxk_invalidate", range_fn);
    t_ops.inval_lines += lines(a, n);
    real(a, n);
}
void cxk_sfence(void) {
    REAL("cxk_sfence", fence_fn);
    ++t_ops.sfences;
    real();
}
void cxk_mfence(void) {
    REAL("cxk_mfence", fence_fn);
    ++t_ops.mfences;
    real();
}

static char path[256];
static int to_peer[2][2];  /* to_peer[r]: rank r's pipe to the other rank */

static void say(int rank) {
    char b = 1;
    CHECK(write(to_peer[rank][1], &b, 1) == 1);
}
static void hear(int rank) {  /* the other rank's word; bounded by child_join's deadline */
    char b;
    CHECK(read(to_peer[1 - rank][0], &b, 1) == 1);
}

static void show(const char *what, const struct ops *o) {
    printf("%s: flushed %ld lines, invalidated %ld, sfence %ld, mfence %ld\n", what,
           o->flush_lines, o->inval_lines, o->sfences, o->mfences);
}

/* Rank 0 receives, rank 1 sends; both rings exist after a first exchange. */
static int rank_body(cxk_comm *c, int rank) {
    uint64_t v = 42, got = 0;
    if (rank == 0) {
        CHECK_EQ(cxk_msg_recv(c, &got, 8, 1, 1, NULL), 0);
        CHECK_EQ(cxk_msg_send(c, &v, 8, 1, 1, 0), 0);
        cxk_msg_req *r;
        CHECK_EQ(cxk_msg_irecv(c, &got, 8, 1, 2, &r), 0);
        int done = 0;
        for (int i = 0; i < 32; ++i) CHECK_EQ(cxk_msg_test(c, r, &done, NULL), 0);
        t_ops = (struct ops){0};
        enum { kPolls = 64 };
        for (int i = 0; i < kPolls && !done; ++i) CHECK_EQ(cxk_msg_test(c, r, &done, NULL), 0);
        CHECK(!done);
        const struct ops idle = t_ops;
        show("64 polls of an idle ring", &idle);
        say(rank);
        hear(rank);  /* the 8-byte message is in the ring */
        t_ops = (struct ops){0};
        CHECK_EQ(cxk_msg_wait(c, r, NULL), 0);
        show("receive of 8 bytes", &t_ops);
        CHECK_EQ(got, 7);
        CHECK_EQ(idle.inval_lines, kPolls);
        CHECK_EQ(idle.flush_lines, 0);
        CHECK_EQ(t_ops.inval_lines, 1);
        CHECK_EQ(t_ops.flush_lines, 0);
        return 0;
    }
    CHECK_EQ(cxk_msg_send(c, &v, 8, 0, 1, 0), 0);
    CHECK_EQ(cxk_msg_recv(c, &got, 8, 0, 1, NULL), 0);
    hear(rank);  /* rank 0 is done polling */
    v = 7;
    t_ops = (struct ops){0};
    CHECK_EQ(cxk_msg_send(c, &v, 8, 0, 2, 0), 0);
    const struct ops send = t_ops;
    show("send of 8 bytes", &send);
    say(rank);
    CHECK_EQ(send.flush_lines, 1);
    CHECK_EQ(send.inval_lines, 0);
    return 0;
}

static void rank_main(int rank) {
    close(to_peer[rank][0]);  /* the peer's end gives EOF once this rank is gone */
    close(to_peer[1 - rank][1]);
    cxk_pool *p = test_pool_open(path, rank, 0, 32u << 20, 4, CXK_COHERENCE_NONE);
    if (!p) _exit(99);
    struct cxk_msg_opts o;
    cxk_msg_opts_init(&o);
    o.join_ms = 20000;
    o.timeout_ms = 20000;
    cxk_comm *c = NULL;
    if (cxk_msg_init(p, "ops", rank, 2, &o, &c)) _exit(98);
    int rc = rank_body(c, rank);
    fflush(stdout);
    if (!rc) rc = cxk_msg_finalize(c) ? 97 : 0;
    cxk_pool_close(p);
    _exit(rc);
}

int main(void) {
    snprintf(path, sizeof path, "/dev/shm/cxk-test-msg_ops-%d", (int)getpid());
    test_pool_remove_at_exit(path);
    unlink(path);
    cxk_pool *p = test_pool_open(path, 3, CXK_POOL_CREATE | CXK_POOL_EXCL, 32u << 20, 4,
                                 CXK_COHERENCE_NONE);
    CHECK(p != NULL);
    cxk_pool_close(p);
    CHECK(pipe(to_peer[0]) == 0 && pipe(to_peer[1]) == 0);
    pid_t pid[2];
    for (int r = 0; r < 2; ++r) {
        pid[r] = fork();
        CHECK(pid[r] >= 0);
        if (pid[r] == 0) rank_main(r);
    }
    for (int r = 0; r < 2; ++r) close(to_peer[r][0]), close(to_peer[r][1]);
    int bad = 0;
    for (int r = 0; r < 2; ++r) bad |= child_join(pid[r], 60) != 0;
    CHECK(!bad);
    printf("msg_ops: all passed\n");
    return 0;
}
