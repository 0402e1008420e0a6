/* msg_rma.c — one-sided windows, 4 ranks as forked processes on their own pool hosts: every
 * operation (put, get, accumulate, fetch-and-op, CAS on each type) against a reference
 * computed locally, puts across partial and whole lines, fence, PSCW, exclusive locks under
 * contention (no lost update), shared readers beside exclusive writers (never a torn pair),
 * 20 PSCW epochs in a row (nothing leaks across epochs), fetch-and-add under contention,
 * bad input; both coherence modes. */
#include <errno.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "child.h"
#include "pool_open.h"
#include "cxlkit.h"

static char path[256];
static int coherence;
enum { NR = 4, WIN = 4096 };

#define T(cond) do { if (!(cond)) { fprintf(stderr, "rank %d line %d: %s\n", rank, __LINE__, #cond); return 1; } } while (0)

static int fence_ops(cxk_comm *c, cxk_win *w, int rank) {
    int64_t *mine = cxk_win_base(w);
    uint64_t sz;
    T(cxk_win_size(w, (rank + 1) % NR, &sz) == 0 && sz == WIN);
    T(cxk_win_fence(w) == 0);
    /* put my rank into slot [rank] of every window; accumulate into slots 16.. of rank 0 */
    for (int t = 0; t < NR; ++t) {
        int64_t v = 1000 + rank;
        T(cxk_win_put(w, &v, 8, t, 8u * rank) == 0);
    }
    int64_t one[3] = {rank + 1, -(rank + 1), 7};
    T(cxk_win_accumulate(w, one, 3, CXK_MSG_INT64, 0, 16 * 8, CXK_OP_SUM) == 0);
    int64_t mm = 10 * rank - 5;
    T(cxk_win_accumulate(w, &mm, 1, CXK_MSG_INT64, 0, 20 * 8, CXK_OP_MIN) == 0);
    T(cxk_win_accumulate(w, &mm, 1, CXK_MSG_INT64, 0, 21 * 8, CXK_OP_MAX) == 0);
    double d = 0.25 * (rank + 1);
    T(cxk_win_accumulate(w, &d, 1, CXK_MSG_DOUBLE, 0, 22 * 8, CXK_OP_SUM) == 0);
    float f = (float)rank;
    T(cxk_win_accumulate(w, &f, 1, CXK_MSG_FLOAT, 0, 23 * 8, CXK_OP_MAX) == 0);
    uint32_t u = 3u + (uint32_t)rank;
    T(cxk_win_accumulate(w, &u, 1, CXK_MSG_UINT32, 0, 24 * 8, CXK_OP_SUM) == 0);
    int32_t r32 = 42;
    if (rank == 2) T(cxk_win_accumulate(w, &r32, 1, CXK_MSG_INT32, 0, 25 * 8, CXK_OP_REPLACE) == 0);
    T(cxk_win_fence(w) == 0);
    for (int s = 0; s < NR; ++s) T(mine[s] == 1000 + s);
    if (rank == 0) {
        int64_t sum = NR * (NR + 1) / 2;
        T(mine[16] == sum && mine[17] == -sum && mine[18] == 7 * NR);
        T(mine[20] == -5 && mine[21] == 10 * (NR - 1) - 5);
        double ds;
        memcpy(&ds, &mine[22], 8);
        T(ds == 0.25 * sum);
        float fm;
        memcpy(&fm, &mine[23], 4);
        T(fm == (float)(NR - 1));
        uint32_t us;
        memcpy(&us, &mine[24], 4);
        T(us == 3u * NR + (uint32_t)(NR * (NR - 1) / 2));
        int32_t rr;
        memcpy(&rr, &mine[25], 4);
        T(rr == 42);
    }
    /* gets: every window's slot [rank] as put above */
    for (int t = 0; t < NR; ++t) {
        int64_t v;
        T(cxk_win_get(w, &v, 8, t, 8u * rank) == 0 && v == 1000 + rank);
    }
    /* a put over partial and whole lines at an odd offset, into the next rank */
    unsigned char big[300], back[300];
    for (int i = 0; i < 300; ++i) big[i] = (unsigned char)(rank * 7 + i);
    T(cxk_win_put(w, big, sizeof big, (rank + 1) % NR, 1001) == 0);
    T(cxk_win_fence(w) == 0);
    unsigned char *mb = (unsigned char *)mine;
    int from = (rank + NR - 1) % NR;
    for (int i = 0; i < 300; ++i) T(mb[1001 + i] == (unsigned char)(from * 7 + i));
    T(cxk_win_get(w, back, sizeof back, (rank + 1) % NR, 1001) == 0);
    T(memcmp(back, big, sizeof big) == 0);
    T(mb[1000] == 0 && mb[1301] == 0);  /* neighbours untouched */
    /* fetch-and-op and CAS, one element each type */
    T(cxk_win_fence(w) == 0);
    int64_t old, add = 1;
    int64_t seen[1000];
    for (int i = 0; i < 200; ++i) {
        T(cxk_win_fetch_and_op(w, &add, &old, CXK_MSG_INT64, 0, 30 * 8, CXK_OP_SUM) == 0);
        seen[i] = old;
        if (i) T(seen[i] > seen[i - 1]);  /* each fetch sees a new value */
    }
    T(cxk_win_fence(w) == 0);
    int64_t total;
    T(cxk_win_fetch_and_op(w, NULL, &total, CXK_MSG_INT64, 0, 30 * 8, CXK_OP_NO_OP) == 0);
    T(total == 200 * NR);
    T(cxk_win_fence(w) == 0);
    /* CAS: only one rank wins slot 31 */
    int64_t cmp = 0, swp = 100 + rank, res = -1;
    T(cxk_win_compare_and_swap(w, &cmp, &swp, &res, CXK_MSG_INT64, 0, 31 * 8) == 0);
    int64_t won = res == 0, nwon = 0;
    T(cxk_msg_allreduce(c, &won, &nwon, 1, CXK_MSG_INT64, CXK_OP_SUM) == 0);
    T(nwon == 1);
    uint32_t ucmp = 0, uswp = 9, ures;
    if (rank == 1) {
        T(cxk_win_compare_and_swap(w, &ucmp, &uswp, &ures, CXK_MSG_UINT32, 2, 32 * 8) == 0 && ures == 0);
        T(cxk_win_compare_and_swap(w, &ucmp, &uswp, &ures, CXK_MSG_UINT32, 2, 32 * 8) == 0 && ures == 9);
        double dv = 1.5, dres;
        T(cxk_win_fetch_and_op(w, &dv, &dres, CXK_MSG_DOUBLE, 3, 33 * 8, CXK_OP_REPLACE) == 0 && dres == 0.0);
        T(cxk_win_fetch_and_op(w, &dv, &dres, CXK_MSG_DOUBLE, 3, 33 * 8, CXK_OP_SUM) == 0 && dres == 1.5);
    }
    T(cxk_win_fence(w) == 0);
    if (rank == 3) {
        double dv;
        memcpy(&dv, &mine[33], 8);
        T(dv == 3.0);
    }
    return 0;
}

static int pscw(cxk_comm *c, cxk_win *w, int rank) {
    int64_t *mine = cxk_win_base(w);
    int others[NR - 1], zero = 0;
    for (int i = 1; i < NR; ++i) others[i - 1] = i;
    if (rank == 0) {
        mine[40] = 0;
        T(cxk_win_post(w, others, NR - 1) == 0);
        T(cxk_win_wait(w) == 0);
        for (int i = 1; i < NR; ++i) T(mine[40 + i] == 500 + i);
        T(mine[40] == NR - 1);
    } else {
        int64_t v = 500 + rank, one = 1;
        T(cxk_win_start(w, &zero, 1) == 0);
        T(cxk_win_put(w, &v, 8, 0, 8u * (40 + rank)) == 0);
        T(cxk_win_accumulate(w, &one, 1, CXK_MSG_INT64, 0, 40 * 8, CXK_OP_SUM) == 0);
        T(cxk_win_complete(w) == 0);
    }
    T(cxk_win_complete(w) == -EPROTO);
    T(cxk_win_wait(w) == -EPROTO);
    return cxk_msg_barrier(c) == 0 ? 0 : 1;
}

/* Read-modify-write of one counter under an exclusive lock by three ranks at once: a lock
 * that let two in would lose updates. Rank 0 (the target) serves the locks from barrier. */
static int locks(cxk_comm *c, cxk_win *w, int rank) {
    enum { ITERS = 150 };
    int64_t *mine = cxk_win_base(w);
    if (rank == 0) mine[50] = 0;
    T(cxk_msg_barrier(c) == 0);
    if (rank != 0) {
        for (int i = 0; i < ITERS; ++i) {
            int64_t v;
            T(cxk_win_lock(w, CXK_LOCK_EXCLUSIVE, 0) == 0);
            T(cxk_win_get(w, &v, 8, 0, 50 * 8) == 0);
            ++v;
            T(cxk_win_put(w, &v, 8, 0, 50 * 8) == 0);
            T(cxk_win_unlock(w, 0) == 0);
        }
        T(cxk_win_lock(w, CXK_LOCK_SHARED, 0) == 0);
        T(cxk_win_lock(w, CXK_LOCK_SHARED, 0) == -EPROTO);  /* already held */
        T(cxk_win_unlock(w, 0) == 0);
    }
    T(cxk_win_unlock(w, 0) == -EPROTO);
    T(cxk_msg_barrier(c) == 0);
    if (rank == 0) T(mine[50] == ITERS * (NR - 1));
    return 0;
}

/* Lock epochs under contention, shared and exclusive mixed: ranks 1 and 2 bump a pair of
 * words of rank 0's window (two separate puts) under exclusive locks, rank 3 reads the pair
 * under shared locks and must never see it torn (a shared lock granted beside an exclusive
 * one would show a != b). */
static int readers_writers(cxk_comm *c, cxk_win *w, int rank) {
    enum { ITERS = 50 };
    int64_t *mine = cxk_win_base(w);
    if (rank == 0) mine[60] = mine[61] = 0;
    T(cxk_msg_barrier(c) == 0);
    if (rank == 1 || rank == 2) {
        for (int i = 0; i < ITERS; ++i) {
            int64_t v;
            T(cxk_win_lock(w, CXK_LOCK_EXCLUSIVE, 0) == 0);
            T(cxk_win_get(w, &v, 8, 0, 60 * 8) == 0);
            ++v;
            T(cxk_win_put(w, &v, 8, 0, 60 * 8) == 0);
            T(cxk_win_flush(w, 0) == 0);  /* a reader between the puts would see a != b */
            T(cxk_win_put(w, &v, 8, 0, 61 * 8) == 0);
            T(cxk_win_unlock(w, 0) == 0);
        }
    } else if (rank == 3) {
        int64_t last = 0;
        for (int i = 0; i < 3 * ITERS; ++i) {
            int64_t ab[2];
            T(cxk_win_lock(w, CXK_LOCK_SHARED, 0) == 0);
            T(cxk_win_get(w, ab, 16, 0, 60 * 8) == 0);
            T(cxk_win_unlock(w, 0) == 0);
            T(ab[0] == ab[1]);       /* never torn */
            T(ab[0] >= last);        /* never going back */
            last = ab[0];
        }
    }
    T(cxk_msg_barrier(c) == 0);
    if (rank == 0) T(mine[60] == 2 * ITERS && mine[61] == 2 * ITERS);
    return 0;
}

/* Many PSCW epochs in a row, every origin hitting the same words: after each wait the
 * target sees exactly that epoch's contributions (no operation leaks into the next epoch). */
static int pscw_rounds(cxk_comm *c, cxk_win *w, int rank) {
    enum { ROUNDS = 20 };
    int64_t *mine = cxk_win_base(w);
    int others[NR - 1], zero = 0;
    for (int i = 1; i < NR; ++i) others[i - 1] = i;
    for (int r = 0; r < ROUNDS; ++r) {
        if (rank == 0) {
            mine[70] = 0, mine[71] = INT64_MIN;
            T(cxk_win_post(w, others, NR - 1) == 0);
            T(cxk_win_wait(w) == 0);
            int64_t want = 0;
            for (int o = 1; o < NR; ++o) want += (int64_t)o * (r + 1);
            T(mine[70] == want);
            T(mine[71] == (int64_t)(NR - 1) * (r + 1));  /* the largest contribution */
        } else {
            int64_t v = (int64_t)rank * (r + 1);
            T(cxk_win_start(w, &zero, 1) == 0);
            T(cxk_win_accumulate(w, &v, 1, CXK_MSG_INT64, 0, 70 * 8, CXK_OP_SUM) == 0);
            T(cxk_win_accumulate(w, &v, 1, CXK_MSG_INT64, 0, 71 * 8, CXK_OP_MAX) == 0);
            T(cxk_win_complete(w) == 0);
        }
    }
    return cxk_msg_barrier(c) == 0 ? 0 : 1;
}

/* cxk_win_test. The origins complete only after a barrier that the target enters
 * after its first test, so that test must say 0; then the target tests until 1 and sees every
 * contribution; a test outside an exposure epoch is -EPROTO. */
static int pscw_test(cxk_comm *c, cxk_win *w, int rank) {
    int64_t *mine = cxk_win_base(w);
    int others[NR - 1], zero = 0, flag = -1;
    for (int i = 1; i < NR; ++i) others[i - 1] = i;
    if (rank == 0) {
        mine[80] = 0;
        T(cxk_win_test(w, &flag) == -EPROTO);
        T(cxk_win_post(w, others, NR - 1) == 0);
        T(cxk_win_test(w, &flag) == 0 && flag == 0);
        T(cxk_win_test(w, NULL) == -EINVAL);
        T(cxk_msg_barrier(c) == 0);
        while (flag != 1) T(cxk_win_test(w, &flag) == 0);
        T(mine[80] == (int64_t)(NR - 1) * NR / 2);
        T(cxk_win_test(w, &flag) == -EPROTO);  /* the epoch ended with the last test */
    } else {
        int64_t v = rank;
        T(cxk_win_start(w, &zero, 1) == 0);
        T(cxk_win_accumulate(w, &v, 1, CXK_MSG_INT64, 0, 80 * 8, CXK_OP_SUM) == 0);
        T(cxk_msg_barrier(c) == 0);
        T(cxk_win_complete(w) == 0);
    }
    return cxk_msg_barrier(c) == 0 ? 0 : 1;
}

static int bad_input(cxk_win *w, int rank) {
    char b[16] = {0};
    int64_t r;
    T(cxk_win_put(w, b, 16, 1, WIN - 8) == -ERANGE);
    T(cxk_win_get(w, b, 1, 1, WIN) == -ERANGE);
    T(cxk_win_get(w, b, 8, NR, 0) == -EINVAL);
    T(cxk_win_accumulate(w, b, 2, CXK_MSG_INT64, 1, WIN - 8, CXK_OP_SUM) == -ERANGE);
    T(cxk_win_accumulate(w, b, 1, 99, 1, 0, CXK_OP_SUM) == -EINVAL);
    T(cxk_win_accumulate(w, b, 1, CXK_MSG_INT64, 1, 0, CXK_OP_NO_OP) == -EINVAL);
    T(cxk_win_fetch_and_op(w, b, &r, CXK_MSG_INT64, 1, WIN - 4, CXK_OP_SUM) == -ERANGE);
    T(cxk_win_lock(w, 9, 1) == -EINVAL);
    int bad = NR;
    T(cxk_win_post(w, &bad, 1) == -EINVAL);
    return 0;
}

static int rank_main(int rank) {
    struct cxk_pool_opts o;
    cxk_pool_opts_init(&o);
    o.host_id = rank;
    o.coherence = coherence;
    cxk_pool *p = NULL;
    if (cxk_pool_open(path, &o, &p)) return 99;
    cxk_comm *c = NULL;
    struct cxk_msg_opts mo;
    cxk_msg_opts_init(&mo);
    mo.timeout_ms = 60000;
    if (cxk_msg_init(p, "rma", rank, NR, &mo, &c)) return 98;
    cxk_win *w = NULL;
    T(cxk_win_create(c, WIN, &w) == 0);
    int rc = fence_ops(c, w, rank);
    if (!rc) rc = pscw(c, w, rank);
    if (!rc) rc = locks(c, w, rank);
    if (!rc) rc = readers_writers(c, w, rank);
    if (!rc) rc = pscw_rounds(c, w, rank);
    if (!rc) rc = pscw_test(c, w, rank);
    if (!rc) rc = bad_input(w, rank);
    if (!rc) T(cxk_win_free(w) == 0);
    if (!rc) T(cxk_msg_finalize(c) == 0);
    cxk_pool_close(p);
    return rc;
}

int main(void) {
    for (coherence = 0; coherence < 2; ++coherence) {
        snprintf(path, sizeof path, "/dev/shm/cxk-test-rma-%d", (int)getpid());
        test_pool_remove_at_exit(path);
        unlink(path);
        struct cxk_pool_opts o;
        cxk_pool_opts_init(&o);
        o.flags = CXK_POOL_CREATE | CXK_POOL_EXCL;
        o.size = 32u << 20;
        o.max_hosts = NR;
        o.host_id = 0;
        o.coherence = coherence;
        cxk_pool *p = NULL;
        CHECK_EQ(cxk_pool_open(path, &o, &p), 0);
        cxk_pool_close(p);
        pid_t pids[NR];
        for (int r = 0; r < NR; ++r) {
            pids[r] = fork();
            CHECK(pids[r] >= 0);
            if (pids[r] == 0) _exit(rank_main(r));
        }
        for (int r = 0; r < NR; ++r) {
            int st;
            st = child_wait(pids[r], 120);
            if (!WIFEXITED(st) || WEXITSTATUS(st)) fprintf(stderr, "rank %d status %d\n", r, st);
            CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
        }
        unlink(path);
    }
    return 0;
}
