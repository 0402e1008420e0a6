/* msg_ctx.c — message contexts (cxk_msg_*_ctx: the PMPI shim gives each
 * communicator one): a message matches only receives and probes of its own context, also
 * through ANY_SOURCE / ANY_TAG; order per (source, tag) is kept within a context while a
 * receive on another context takes a later message first; the library's own contexts
 * (1..CXK_MSG_CTX_FIRST-1) are refused. Two ranks, each a forked process on its own host. */
#include <errno.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "child.h"
#include "cxlkit.h"
#include "msg_pair.h"
#include "pool_open.h"

static char path[256];

static cxk_pool *open_host(int host, unsigned flags) {
    return test_pool_open(path, host, flags, 32u << 20, 2, CXK_COHERENCE_HOST);
}

enum { CA = CXK_MSG_CTX_FIRST, CB = CXK_MSG_CTX_FIRST + 7 };

static int sender(cxk_comm *c) {
    int v[4] = {100, 200, 300, 400};
    /* same tag on three contexts, then a rendezvous-sized one on CB */
    CHECK_EQ(cxk_msg_send(c, &v[0], 4, 1, 5, 0), 0);
    cxk_msg_req *q;
    CHECK_EQ(cxk_msg_isend_ctx(c, &v[1], 4, 1, 5, CA, 0, &q), 0);
    CHECK_EQ(cxk_msg_wait(c, q, NULL), 0);
    CHECK_EQ(cxk_msg_isend_ctx(c, &v[2], 4, 1, 5, CB, 0, &q), 0);
    CHECK_EQ(cxk_msg_wait(c, q, NULL), 0);
    static unsigned char big[300000];
    for (size_t i = 0; i < sizeof big; ++i) big[i] = (unsigned char)(i * 7);
    CHECK_EQ(cxk_msg_isend_ctx(c, big, sizeof big, 1, 6, CB, 0, &q), 0);
    CHECK_EQ(cxk_msg_wait(c, q, NULL), 0);
    CHECK_EQ(cxk_msg_isend_ctx(c, &v[3], 4, 1, 5, CA, CXK_MSG_SYNC, &q), 0);
    CHECK_EQ(cxk_msg_wait(c, q, NULL), 0);
    /* the library's own contexts are not the caller's */
    CHECK_EQ(cxk_msg_isend_ctx(c, &v[0], 4, 1, 5, 1, 0, &q), -EINVAL);
    CHECK_EQ(cxk_msg_isend_ctx(c, &v[0], 4, 1, 5, CXK_MSG_CTX_FIRST - 1, 0, &q), -EINVAL);
    return 0;
}

static int receiver(cxk_comm *c) {
    struct cxk_msg_status st;
    int x = 0, flag = 0;
    /* wait until all of the first three are here, then take them out of order */
    CHECK_EQ(cxk_msg_probe_ctx(c, CXK_ANY_SOURCE, CXK_ANY_TAG, CB, &st), 0);
    CHECK(st.source == 0 && st.tag == 5 && st.count == 4);
    CHECK_EQ(cxk_msg_iprobe_ctx(c, 0, 6, CA, &flag, &st), 0);
    CHECK_EQ(flag, 0);                       /* tag 6 exists on CB only */
    CHECK_EQ(cxk_msg_recv(c, &x, 4, 0, 5, NULL), 0);
    CHECK_EQ(x, 100);                        /* context 0 */
    cxk_msg_req *q;
    CHECK_EQ(cxk_msg_irecv_ctx(c, &x, 4, CXK_ANY_SOURCE, CXK_ANY_TAG, CB, &q), 0);
    CHECK_EQ(cxk_msg_wait(c, q, &st), 0);
    CHECK(x == 300 && st.tag == 5);          /* CB's first, past CA's earlier one */
    CHECK_EQ(cxk_msg_irecv_ctx(c, &x, 4, 0, 5, CA, &q), 0);
    CHECK_EQ(cxk_msg_wait(c, q, &st), 0);
    CHECK_EQ(x, 200);
    static unsigned char big[300000];
    CHECK_EQ(cxk_msg_irecv_ctx(c, big, sizeof big, 0, CXK_ANY_TAG, CB, &q), 0);
    CHECK_EQ(cxk_msg_wait(c, q, &st), 0);
    CHECK(st.count == sizeof big && st.tag == 6);
    for (size_t i = 0; i < sizeof big; ++i) CHECK(big[i] == (unsigned char)(i * 7));
    CHECK_EQ(cxk_msg_irecv_ctx(c, &x, 4, 0, 5, CA, &q), 0);
    CHECK_EQ(cxk_msg_wait(c, q, &st), 0);
    CHECK_EQ(x, 400);
    CHECK_EQ(cxk_msg_iprobe(c, CXK_ANY_SOURCE, CXK_ANY_TAG, &flag, &st), 0);
    CHECK_EQ(flag, 0);                       /* nothing left on context 0 */
    CHECK_EQ(cxk_msg_irecv_ctx(c, &x, 4, 0, 5, 3, &q), -EINVAL);
    CHECK_EQ(cxk_msg_iprobe_ctx(c, 0, 5, 2, &flag, &st), -EINVAL);
    return 0;
}

int main(void) {
    snprintf(path, sizeof path, "/dev/shm/cxk-test-msgctx-%d", (int)getpid());
    test_pool_remove_at_exit(path);
    unlink(path);
    cxk_pool *p0 = open_host(0, CXK_POOL_CREATE | CXK_POOL_EXCL);
    CHECK(p0 != NULL);
    cxk_pool_close(p0);
    pid_t pids[2];
    for (int r = 0; r < 2; ++r) {
        pids[r] = fork();
        CHECK(pids[r] >= 0);
        if (pids[r] == 0) {
            _exit(msg_pair_rank(open_host(r, 0), "ctx", r, sender, receiver));
        }
    }
    for (int r = 0; r < 2; ++r) {
        int st;
        st = child_wait(pids[r], 120);
        if (!WIFEXITED(st) || WEXITSTATUS(st)) fprintf(stderr, "rank %d: status %d\n", r, st);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    unlink(path);
    return 0;
}
