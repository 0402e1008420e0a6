/* msg_rdv_done.c — when a rendezvous send completes: a standard send as soon as its bytes are
 * in the sender's rendezvous buffer (before the receiver has even posted its receive: the
 * caller may then rewrite its buffer, and the receiver still gets the bytes sent), a
 * synchronous one only once the receive has matched it; the FIN of a send already complete
 * frees its buffer without breaking the ring (the ranks go on exchanging and finalize
 * cleanly). Two forked ranks on two pool hosts, under both coherence modes; the receiver
 * posts its receives only after the sender said, through a pipe, what its test saw. */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "child.h"
#include "pool_open.h"
#include "cxlkit.h"
#include "msg_pair.h"

#define BIG (300u * 1024) /* above the eager limit: rendezvous */
#define ROUNDS 8

static char path[256];
static int coherence;
static int said[2]; /* pipe: rank 0 -> rank 1, one byte per round (what its test saw) */

static cxk_pool *open_host(int host, unsigned flags) {
    return test_pool_open(path, host, flags, 64u << 20, 4, coherence);
}

#define T(cond)                                                                     \
    do {                                                                            \
        if (!(cond)) {                                                              \
            fprintf(stderr, "rank %d line %d: %s\n", rank, __LINE__, #cond);        \
            return 1;                                                               \
        }                                                                           \
    } while (0)


/* Rank 0: a standard rendezvous send is done at its first test, its buffer then rewritten;
 * a synchronous one is not done before rank 1 receives. */
static int sender(cxk_comm *c) {
    const int rank = 0;
    static unsigned char buf[BIG];
    for (unsigned k = 0; k < ROUNDS; ++k) {
        cxk_msg_req *rq;
        int done = 0;
        fill(buf, BIG, k);
        T(cxk_msg_isend(c, buf, BIG, 1, (int)k, 0, &rq) == 0);
        T(cxk_msg_test(c, rq, &done, NULL) == 0 || !done);
        const char what = done ? 'd' : 'p';
        T(write(said[1], &what, 1) == 1);
        if (!done) T(cxk_msg_wait(c, rq, NULL) == 0);
        T(done);
        memset(buf, 0xee, BIG);  /* the caller's buffer is free once the send is done */
    }
    cxk_msg_req *rq;
    int done = 1;
    fill(buf, BIG, 99);
    T(cxk_msg_isend(c, buf, BIG, 1, 99, CXK_MSG_SYNC, &rq) == 0);
    T(cxk_msg_test(c, rq, &done, NULL) == 0 || !done);
    const char what = done ? 'd' : 'p';
    T(write(said[1], &what, 1) == 1);
    if (!done) T(cxk_msg_wait(c, rq, NULL) == 0);
    T(!done);
    T(cxk_msg_barrier(c) == 0);
    return 0;
}

static int receiver(cxk_comm *c) {
    const int rank = 1;
    static unsigned char buf[BIG];
    struct cxk_msg_status st;
    for (unsigned k = 0; k <= ROUNDS; ++k) {
        const unsigned tag = k < ROUNDS ? k : 99;
        char what = 0;
        T(read(said[0], &what, 1) == 1);  /* the sender's test came first */
        memset(buf, 0, BIG);
        T(cxk_msg_recv(c, buf, BIG, 0, (int)tag, &st) == 0);
        T(st.source == 0 && st.tag == (int)tag && st.count == BIG);
        T(same(buf, BIG, tag));
    }
    T(cxk_msg_barrier(c) == 0);
    return 0;
}

static void run(void) {
    snprintf(path, sizeof path, "/dev/shm/cxk-test-rdvdone-%d-%d", (int)getpid(), coherence);
    test_pool_remove_at_exit(path);
    unlink(path);
    cxk_pool *p0 = open_host(0, CXK_POOL_CREATE | CXK_POOL_EXCL);
    CHECK(p0 != NULL);
    cxk_pool_close(p0);
    CHECK(pipe(said) == 0);
    pid_t pids[2];
    for (int r = 0; r < 2; ++r) {
        pids[r] = fork();
        CHECK(pids[r] >= 0);
        if (pids[r] == 0) {
            close(said[r == 0 ? 0 : 1]);
            _exit(msg_pair_rank(open_host(r, 0), "rdvdone", r, sender, receiver));
        }
    }
    close(said[0]), close(said[1]);
    for (int r = 0; r < 2; ++r) {
        int st = child_wait(pids[r], 120);
        if (!WIFEXITED(st) || WEXITSTATUS(st)) fprintf(stderr, "rank %d: status %d\n", r, st);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    unlink(path);
}

int main(void) {
    for (coherence = CXK_COHERENCE_HOST; coherence <= CXK_COHERENCE_NONE; ++coherence) run();
    return 0;
}
