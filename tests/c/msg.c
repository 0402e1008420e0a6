/* msg.c — messaging through the C ABI, each rank a forked process on its own pool host:
 * ping-pong over eager, multi-cell and rendezvous sizes, a 4-rank stress of random sizes and
 * tags received by wildcards with per-(source, tag) sequence checks, wildcard order,
 * truncation, synchronous sends, collectives, bad input, two jobs at once on one pool, a
 * killed rank making its peers fail with -ETIMEDOUT naming it, and a crashed job's
 * leftovers not blocking the next run; under both coherence modes. */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "child.h"
#include "pool_open.h"
#include "cxlkit.h"
#include "msg_pair.h"

static char path[256];
static int coherence;
static uint64_t eager_opt;  /* the ranks' eager_bytes (0: the default, one cell) */

static cxk_pool *open_host(int host, unsigned flags) {
    return test_pool_open(path, host, flags, 96u << 20, 6, coherence);
}

typedef int (*rank_fn)(cxk_comm *c, int rank, int n);

/* Each rank: open the pool as host `host0 + rank`, join `job`, run fn, finalize. The exit
 * code is fn's (0 = pass), 100 + -errno of a failed join. */
static void spawn(const char *job, int n, int host0, rank_fn fn, pid_t *pids) {
    for (int r = 0; r < n; ++r) {
        pids[r] = fork();
        CHECK(pids[r] >= 0);
        if (pids[r] == 0) {
            cxk_pool *p = open_host(host0 + r, 0);
            if (!p) _exit(99);
            cxk_comm *c = NULL;
            struct cxk_msg_opts o;
            cxk_msg_opts_init(&o);
            o.join_ms = 20000;
            o.timeout_ms = 60000;
            o.eager_bytes = eager_opt;
            int rc = cxk_msg_init(p, job, r, n, &o, &c);
            if (rc) _exit(100 + (-rc & 0xff));
            int res = fn(c, r, n);
            if (res == 0) {
                int frc = cxk_msg_finalize(c);
                if (frc) {
                    fprintf(stderr, "rank %d of %s: finalize %d\n", r, job, frc);
                    res = 98;
                }
            }
            cxk_pool_close(p);
            _exit(res);
        }
    }
}

static void expect_exit(pid_t *pids, int n, const int *codes) {
    for (int r = 0; r < n; ++r) {
        int st;
        st = child_wait(pids[r], 120);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != (codes ? codes[r] : 0)) {
            fprintf(stderr, "rank %d: %s %d\n", r, WIFEXITED(st) ? "exit" : "signal",
                    WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
            CHECK(0);
        }
    }
}

static void run(const char *job, int n, rank_fn fn) {
    pid_t pids[8];
    spawn(job, n, 0, fn, pids);
    expect_exit(pids, n, NULL);
}

#define T(cond) do { if (!(cond)) { fprintf(stderr, "rank %d line %d: %s\n", rank, __LINE__, #cond); return 1; } } while (0)


static int pingpong(cxk_comm *c, int rank, int n) {
    (void)n;
    static const size_t sizes[] = {0, 1, 8, 100, 4000, 4050, 9000, 65536, 65537, 300000, 3u << 20};
    static unsigned char buf[3u << 20];
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; ++i) {
        size_t len = sizes[i];
        struct cxk_msg_status st;
        for (int rep = 0; rep < 3; ++rep) {
            if (rank == 0) {
                fill(buf, len, (unsigned)(i + rep));
                T(cxk_msg_send(c, buf, (int64_t)len, 1, 7, 0) == 0);
                memset(buf, 0, len);
                T(cxk_msg_recv(c, buf, sizeof buf, 1, 8, &st) == 0);
                T(st.source == 1 && st.tag == 8 && st.count == len);
                T(same(buf, len, (unsigned)(i + rep + 1)));
            } else {
                memset(buf, 0, len);
                T(cxk_msg_recv(c, buf, sizeof buf, 0, 7, &st) == 0);
                T(st.count == len && same(buf, len, (unsigned)(i + rep)));
                fill(buf, len, (unsigned)(i + rep + 1));
                T(cxk_msg_send(c, buf, (int64_t)len, 0, 8, 0) == 0);
            }
        }
    }
    return 0;
}

/* Every rank derives every rank's send plan from the same seeds, so it knows what to expect. */
enum { NSTRESS = 3000, NTAGS = 4, NR = 4 };
static uint32_t rnd(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*s >> 33);
}
struct plan { int dest, tag; uint32_t len; };
/* CXK_MSG_STRESS_ROUNDS=R runs the stress R times (R * 4 * NSTRESS messages, new plans each
 * round): the long run of the report; the suite runs one round. */
static uint64_t stress_seed;
static void make_plan(int src, struct plan *pl) {
    uint64_t s = 0x9e3779b97f4a7c15ull * (uint64_t)(src + 1) + stress_seed;
    for (int i = 0; i < NSTRESS; ++i) {
        pl[i].dest = (int)(rnd(&s) % NR);
        pl[i].tag = (int)(rnd(&s) % NTAGS);
        uint32_t k = rnd(&s) % 100;
        pl[i].len = k < 80 ? rnd(&s) % 600 : k < 97 ? 8 + rnd(&s) % 20000 : 65536 + rnd(&s) % 200000;
    }
}

static int stress_round(cxk_comm *c, int rank);

static int stress(cxk_comm *c, int rank, int n) {
    (void)n;
    const char *env = getenv("CXK_MSG_STRESS_ROUNDS");
    const int rounds = env && atoi(env) > 0 ? atoi(env) : 1;
    for (int r = 0; r < rounds; ++r) {
        stress_seed = (uint64_t)r * 0x632be59bd9b4e019ull;
        if (stress_round(c, rank)) return 1;
    }
    return 0;
}

static int stress_round(cxk_comm *c, int rank) {
    static struct plan plans[NR][NSTRESS];
    for (int s = 0; s < NR; ++s) make_plan(s, plans[s]);
    int expect_total = 0;
    uint32_t next_seq[NR][NTAGS] = {{0}};   /* per (source, tag): the next sequence number */
    for (int s = 0; s < NR; ++s)
        for (int i = 0; i < NSTRESS; ++i) expect_total += plans[s][i].dest == rank;
    /* sends: non-blocking, the payload starts with (seq per (me, dest, tag), index) */
    static unsigned char *sbufs[NSTRESS];
    static cxk_msg_req *sreq[NSTRESS];
    uint32_t seq[NR][NTAGS] = {{0}};
    static unsigned char rbuf[300000];
    int got = 0, sent = 0;
    while (got < expect_total || sent < NSTRESS) {
        if (sent < NSTRESS) {
            struct plan *p = &plans[rank][sent];
            uint32_t len = p->len < 8 ? 8 : p->len;
            sbufs[sent] = malloc(len);
            uint32_t hdr[2] = {seq[p->dest][p->tag]++, (uint32_t)sent};
            fill(sbufs[sent], len, (unsigned)(rank * 100000 + sent));
            memcpy(sbufs[sent], hdr, 8);
            T(cxk_msg_isend(c, sbufs[sent], len, p->dest, p->tag, sent % 17 == 0 ? CXK_MSG_SYNC : 0,
                            &sreq[sent]) == 0);
            ++sent;
        }
        int flag = 0;
        struct cxk_msg_status st;
        T(cxk_msg_iprobe(c, CXK_ANY_SOURCE, CXK_ANY_TAG, &flag, &st) == 0);
        if (!flag && sent < NSTRESS) continue;
        if (got == expect_total) continue;
        T(cxk_msg_recv(c, rbuf, sizeof rbuf, CXK_ANY_SOURCE, CXK_ANY_TAG, &st) == 0);
        uint32_t hdr[2];
        T(st.count >= 8);
        memcpy(hdr, rbuf, 8);
        T(st.source >= 0 && st.source < NR && st.tag >= 0 && st.tag < NTAGS);
        T(hdr[0] == next_seq[st.source][st.tag]);  /* no loss, no duplicate, order kept */
        next_seq[st.source][st.tag]++;
        struct plan *p = &plans[st.source][hdr[1]];
        T(p->dest == rank && p->tag == st.tag && st.count == (p->len < 8 ? 8 : p->len));
        unsigned char *b = rbuf + 8;
        for (size_t k = 8; k < st.count; ++k, ++b)
            T(*b == (unsigned char)((unsigned)(st.source * 100000 + hdr[1]) * 131 + k * 7));
        ++got;
    }
    T(cxk_msg_waitall(c, NSTRESS, sreq, NULL) == 0);
    for (int i = 0; i < NSTRESS; ++i) free(sbufs[i]);
    T(cxk_msg_barrier(c) == 0);
    int flag = 1;
    T(cxk_msg_iprobe(c, CXK_ANY_SOURCE, CXK_ANY_TAG, &flag, NULL) == 0 && flag == 0);
    T(cxk_msg_barrier(c) == 0);  /* nobody sends the next round's messages before that check */
    return 0;
}

static int semantics(cxk_comm *c, int rank, int n) {
    char buf[64];
    struct cxk_msg_status st;
    cxk_msg_req *rq;
    T(cxk_msg_rank(c) == rank && cxk_msg_size(c) == n);
    /* bad input */
    T(cxk_msg_send(c, buf, -1, 0, 0, 0) == -EINVAL);
    T(cxk_msg_send(c, buf, 1, n, 0, 0) == -EINVAL);
    T(cxk_msg_send(c, buf, 1, CXK_ANY_SOURCE, 0, 0) == -EINVAL);
    T(cxk_msg_send(c, buf, 1, 0, -5, 0) == -EINVAL);
    T(cxk_msg_irecv(c, buf, 1, 99, 0, &rq) == -EINVAL);
    T(cxk_msg_irecv(c, buf, -3, 0, 0, &rq) == -EINVAL);
    T(cxk_msg_allreduce(c, buf, buf, 1, 77, CXK_OP_SUM) == -EINVAL);
    T(cxk_msg_allreduce(c, buf, buf, 1, CXK_MSG_INT32, CXK_OP_REPLACE) == -EINVAL);
    if (rank == 1) {
        /* wildcard order: tags 5 then 6; rank 0 takes 6 first */
        T(cxk_msg_send(c, "five", 5, 0, 5, 0) == 0);
        T(cxk_msg_send(c, "six", 4, 0, 6, 0) == 0);
        /* truncation */
        T(cxk_msg_send(c, "0123456789", 10, 0, 9, 0) == 0);
        /* synchronous: completes once rank 0 matched it (after the barrier) */
        T(cxk_msg_isend(c, "sync", 5, 0, 10, CXK_MSG_SYNC, &rq) == 0);
        int done = 0;
        T(cxk_msg_test(c, rq, &done, NULL) == 0 && done == 0);
        T(cxk_msg_barrier(c) == 0);
        T(cxk_msg_wait(c, rq, &st) == 0);
    } else if (rank == 0) {
        T(cxk_msg_probe(c, 1, CXK_ANY_TAG, &st) == 0 && st.tag == 5 && st.count == 5);
        T(cxk_msg_recv(c, buf, sizeof buf, CXK_ANY_SOURCE, 6, &st) == 0);
        T(st.source == 1 && st.tag == 6 && strcmp(buf, "six") == 0);
        T(cxk_msg_recv(c, buf, sizeof buf, 1, CXK_ANY_TAG, &st) == 0);
        T(st.tag == 5 && strcmp(buf, "five") == 0);
        T(cxk_msg_recv(c, buf, 4, 1, 9, &st) == -EMSGSIZE);
        T(st.count == 10 && memcmp(buf, "0123", 4) == 0);
        /* a posted receive withdrawn */
        T(cxk_msg_irecv(c, buf, sizeof buf, 1, 1234, &rq) == 0);
        T(cxk_msg_cancel(c, rq) == 0);
        T(cxk_msg_barrier(c) == 0);
        T(cxk_msg_recv(c, buf, sizeof buf, 1, 10, &st) == 0 && strcmp(buf, "sync") == 0);
    } else {
        T(cxk_msg_barrier(c) == 0);
    }
    /* collectives */
    int64_t v[3] = {rank, 10 * rank, -rank}, out[3];
    T(cxk_msg_allreduce(c, v, out, 3, CXK_MSG_INT64, CXK_OP_SUM) == 0);
    T(out[0] == n * (n - 1) / 2 && out[1] == 10 * out[0] && out[2] == -out[0]);
    double d = rank + 0.5, dm;
    T(cxk_msg_allreduce(c, &d, &dm, 1, CXK_MSG_DOUBLE, CXK_OP_MAX) == 0 && dm == n - 0.5);
    T(cxk_msg_allreduce(c, &d, &dm, 1, CXK_MSG_DOUBLE, CXK_OP_MIN) == 0 && dm == 0.5);
    char bc[16] = {0};
    if (rank == n - 1) strcpy(bc, "from-last");
    T(cxk_msg_bcast(c, bc, sizeof bc, n - 1) == 0 && strcmp(bc, "from-last") == 0);
    /* self send */
    T(cxk_msg_sendrecv(c, "me", 3, rank, 3, buf, sizeof buf, rank, 3, &st) == 0);
    T(strcmp(buf, "me") == 0 && st.source == rank);
    return 0;
}

/* Two jobs at once, same tags, same ranks: each sees only its own messages. */
static int isolated(cxk_comm *c, int rank, int n) {
    (void)n;
    int64_t mine = (int64_t)getpid(), got = 0;
    struct cxk_msg_status st;
    for (int i = 0; i < 200; ++i) {
        if (rank == 0) {
            T(cxk_msg_send(c, &mine, 8, 1, 1, 0) == 0);
            T(cxk_msg_recv(c, &got, 8, 1, 1, &st) == 0);
        } else {
            T(cxk_msg_recv(c, &got, 8, 0, 1, &st) == 0);
            T(cxk_msg_send(c, &got, 8, 0, 1, 0) == 0);
        }
    }
    if (rank == 0) T(got == mine);  /* our own pid came back: no message of the other job */
    return 0;
}

/* Rank 2 dies without finalizing; rank 0 waits on it, rank 1 waits on anyone: both fail with
 * -ETIMEDOUT naming rank 2, well before the 60 s timeout. */
static int dying(cxk_comm *c, int rank, int n) {
    (void)n;
    char b[8];
    struct cxk_msg_status st;
    T(cxk_msg_barrier(c) == 0);
    if (rank == 2) raise(SIGKILL);
    if (rank == 0) {
        T(cxk_msg_recv(c, b, sizeof b, 2, 0, &st) == -ETIMEDOUT);
    } else {
        T(cxk_msg_recv(c, b, sizeof b, CXK_ANY_SOURCE, 0, &st) == -ETIMEDOUT);
    }
    T(cxk_msg_failed_rank(c) == 2);
    T(cxk_msg_barrier(c) == -ETIMEDOUT && cxk_msg_failed_rank(c) == 2);
    return 0;
}

static int crash_midway(cxk_comm *c, int rank, int n) {
    (void)n;
    char big[200000];
    memset(big, 1, sizeof big);
    T(cxk_msg_send(c, "x", 1, 1 - rank, 0, 0) == 0);          /* rings made */
    cxk_msg_req *rq;
    T(cxk_msg_isend(c, big, sizeof big, 1 - rank, 1, 0, &rq) == 0);  /* rendezvous buffer made */
    T(cxk_msg_barrier(c) == 0);
    raise(SIGKILL);  /* both die: every object stays behind */
    return 1;
}

static void dead_peer(void) {
    pid_t pids[3];
    spawn("dead", 3, 0, dying, pids);
    int st;
    st = child_wait(pids[2], 120);
    CHECK(WIFSIGNALED(st));
    int codes[2] = {0, 0};
    /* rank 0/1 finalize fails (barrier with a dead rank): exit 98 */
    codes[0] = codes[1] = 98;
    expect_exit(pids, 2, codes);
}

static int join_timeout(void) {
    cxk_pool *p = open_host(0, 0);
    CHECK(p != NULL);
    struct cxk_msg_opts o;
    cxk_msg_opts_init(&o);
    o.join_ms = 200;
    cxk_comm *c = NULL;
    CHECK_EQ(cxk_msg_init(p, "lonely", 0, 2, &o, &c), -ETIMEDOUT);
    CHECK_EQ(cxk_msg_init(p, "bad job", 0, 2, &o, &c), -EINVAL);
    CHECK_EQ(cxk_msg_init(p, "ok", 2, 2, &o, &c), -EINVAL);
    CHECK_EQ(cxk_msg_init(p, "ok", 0, 0, &o, &c), -EINVAL);
    o.cell_bytes = 100;
    CHECK_EQ(cxk_msg_init(p, "ok", 0, 1, &o, &c), -EINVAL);
    o.cell_bytes = 0;
    o.eager_bytes = 1u << 30;
    CHECK_EQ(cxk_msg_init(p, "ok", 0, 1, &o, &c), -EINVAL);
    /* nothing of the failed joins is left */
    size_t nobj = 0;
    CHECK_EQ(cxk_obj_list(p, NULL, 0, &nobj), 0);
    CHECK_EQ(nobj, 0);
    cxk_pool_close(p);
    return 0;
}

/* The per-thread interrupt hook: a probe nothing answers ends when the hook says so, as a
 * timeout (-ETIMEDOUT, failed rank -1); without the hook the comm works on. */
static int interrupt_calls;
static int interrupt_after_3(void *arg) {
    CHECK(arg == (void *)&interrupt_calls);
    return ++interrupt_calls >= 3;
}

static int interrupt_hook(void) {
    cxk_pool *p = open_host(0, 0);
    CHECK(p != NULL);
    cxk_comm *c = NULL;
    CHECK_EQ(cxk_msg_init(p, "intr", 0, 1, NULL, &c), 0);
    struct cxk_msg_status st;
    interrupt_calls = 0;
    cxk_msg_set_interrupt(interrupt_after_3, &interrupt_calls);
    CHECK_EQ(cxk_msg_probe(c, 0, 9, &st), -ETIMEDOUT);
    CHECK_EQ(interrupt_calls, 3);
    CHECK_EQ(cxk_msg_failed_rank(c), -1);
    cxk_msg_set_interrupt(NULL, NULL);
    char b[4] = "abc", r[4] = {0};
    CHECK_EQ(cxk_msg_send(c, b, 4, 0, 9, 0), 0);
    CHECK_EQ(cxk_msg_recv(c, r, 4, 0, 9, &st), 0);
    CHECK(memcmp(b, r, 4) == 0 && interrupt_calls == 3);
    CHECK_EQ(cxk_msg_finalize(c), 0);
    cxk_pool_close(p);
    return 0;
}

int main(int argc, char **argv) {
    for (coherence = 0; coherence < 2; ++coherence) {
        if (argc > 1 && atoi(argv[1]) != coherence) continue;
        snprintf(path, sizeof path, "/dev/shm/cxk-test-msg-%d", (int)getpid());
        test_pool_remove_at_exit(path);
        unlink(path);
        cxk_pool *p = open_host(5, CXK_POOL_CREATE | CXK_POOL_EXCL);
        CHECK(p != NULL);
        cxk_pool_close(p);
        join_timeout();
        interrupt_hook();
        run("pp", 2, pingpong);
        /* eager up to 64 KiB: messages of many cells (the default sends them by rendezvous) */
        eager_opt = 65536;
        run("ppm", 2, pingpong);
        run("sem", 3, semantics);
        run("stress", NR, stress);
        eager_opt = 0;
        pid_t a[2], b[2];
        spawn("jobA", 2, 0, isolated, a);
        spawn("jobB", 2, 2, isolated, b);
        expect_exit(a, 2, NULL);
        expect_exit(b, 2, NULL);
        dead_peer();
        /* a crashed run leaves its objects; the same job runs again on the same hosts */
        pid_t cr[2];
        spawn("again", 2, 0, crash_midway, cr);
        for (int r = 0; r < 2; ++r) {
            int st;
            st = child_wait(cr[r], 120);
            CHECK(WIFSIGNALED(st));
        }
        run("again", 2, pingpong);
        unlink(path);
    }
    return 0;
}
