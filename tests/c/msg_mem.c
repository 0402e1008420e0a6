/* msg_mem.c — one copy through the pool (cxk_msg_alloc_mem): sends from pool-resident memory
 * and from the heap side by side (posted and unexpected receives, wildcards, truncation,
 * offsets up to the block's last byte), free while a send is in flight, a receiver or a
 * sender killed mid-rendezvous, and forged request-to-send cells and block headers (random
 * and boundary offsets, lengths, indexes; drop cells naming random blocks before them): each
 * refused with -EBADMSG naming the sender, never a read outside the block; under both
 * coherence modes. */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "child.h"
#include "cxlkit.h"
#include "pool_open.h"

static char path[256];
static int coherence;

#define BIG (300u * 1024)  /* above the eager limit: rendezvous */

static cxk_pool *open_host(int host, unsigned flags) {
    return test_pool_open(path, host, flags, 96u << 20, 6, coherence);
}

static cxk_pool *child_pool;  /* the forked rank's pool (forged cells go through it) */

typedef int (*rank_fn)(cxk_comm *c, int rank, int n, long arg);

/* Fork n ranks of job (hosts 0..n-1) running fn; exit code fn's, or 98 when finalize failed
 * and fin_ok is 0. */
static void spawn(const char *job, int n, rank_fn fn, long arg, int fin_ok, pid_t *pids) {
    for (int r = 0; r < n; ++r) {
        pids[r] = fork();
        CHECK(pids[r] >= 0);
        if (pids[r]) continue;
        cxk_pool *p = open_host(r, 0);
        if (!p) _exit(99);
        child_pool = p;
        struct cxk_msg_opts o;
        cxk_msg_opts_init(&o);
        o.join_ms = 20000;
        o.timeout_ms = 60000;
        o.dead_ms = 2000;
        cxk_comm *c = NULL;
        int rc = cxk_msg_init(p, job, r, n, &o, &c);
        if (rc) _exit(100 + (-rc & 0xff));
        int res = fn(c, r, n, arg);
        if (res == 0 && cxk_msg_finalize(c) && !fin_ok) res = 98;
        cxk_pool_close(p);
        _exit(res);
    }
}

static void expect(pid_t *pids, int n, const int *codes) {
    for (int r = 0; r < n; ++r) {
        int st;
        st = child_wait(pids[r], 120);
        int want = codes ? codes[r] : 0;
        if (want < 0 ? !(WIFSIGNALED(st) && WTERMSIG(st) == -want)
                     : !(WIFEXITED(st) && WEXITSTATUS(st) == want)) {
            fprintf(stderr, "rank %d: %s %d\n", r, WIFEXITED(st) ? "exit" : "signal",
                    WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
            CHECK(0);
        }
    }
}

static void run(const char *job, int n, rank_fn fn, long arg) {
    pid_t pids[4];
    spawn(job, n, fn, arg, 0, pids);
    expect(pids, n, NULL);
}

#define T(cond) do { if (!(cond)) { fprintf(stderr, "rank %d line %d: %s\n", rank, __LINE__, #cond); return 1; } } while (0)

static void fill(unsigned char *b, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; ++i) b[i] = (unsigned char)(seed * 131 + i * 7 + 1);
}
static int same(const unsigned char *b, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; ++i)
        if (b[i] != (unsigned char)(seed * 131 + i * 7 + 1)) return 0;
    return 1;
}

/* Ranks 1 and 2 send to rank 0 from pool memory (at the block's start and ending at its last
 * byte) and from the heap; rank 0 receives them posted, unexpected and by wildcards, and one
 * truncated. */
static int both_paths(cxk_comm *c, int rank, int n, long arg) {
    (void)n, (void)arg;
    const size_t blk = 2 * BIG + 64;
    unsigned char *heap = malloc(BIG);
    unsigned char *r = malloc(BIG);
    void *m = NULL;
    T(heap && r);
    T(cxk_msg_alloc_mem(c, 0, &m) == -EINVAL);
    T(cxk_msg_alloc_mem(c, blk, &m) == 0 && ((uintptr_t)m & 63) == 0);
    unsigned char *pm = m;
    T(cxk_msg_is_pool_mem(c, pm, blk) == 1 && cxk_msg_is_pool_mem(c, pm + 1, blk) == 0);
    T(cxk_msg_is_pool_mem(c, heap, BIG) == 0);
    struct cxk_msg_status st;
    if (rank > 0) {
        fill(pm, BIG, 10u + (unsigned)rank);
        fill(pm + blk - BIG, BIG, 20u + (unsigned)rank);  /* ends at the block's last byte */
        fill(heap, BIG, 30u + (unsigned)rank);
        T(cxk_msg_send(c, pm, BIG, 0, 1, 0) == 0);              /* posted */
        T(cxk_msg_send(c, heap, BIG, 0, 2, 0) == 0);
        cxk_msg_req *q;
        T(cxk_msg_isend(c, pm + blk - BIG, BIG, 0, 3, 0, &q) == 0);  /* unexpected */
        T(cxk_msg_free_mem(c, pm) == -EBUSY);  /* rank 0 receives it after the barrier */
        T(cxk_msg_barrier(c) == 0);
        T(cxk_msg_wait(c, q, NULL) == 0);
        T(cxk_msg_send(c, pm, BIG, 0, 4, 0) == 0);  /* truncated at rank 0 */
    } else {
        /* tags 1 and 2 of both senders, by wildcards: (any, 1) twice, then (s, any) takes
         * each sender's tag 2 (non-overtaking: its tag 3 comes after it) */
        for (int k = 0; k < 4; ++k) {
            const int src = k < 2 ? CXK_ANY_SOURCE : k - 1, tag = k < 2 ? 1 : CXK_ANY_TAG;
            T(cxk_msg_recv(c, r, BIG, src, tag, &st) == 0);
            T(k < 2 ? st.tag == 1 : st.tag == 2 && st.source == src);
            T(st.count == BIG && (st.source == 1 || st.source == 2));
            unsigned seed = (st.tag == 1 ? 10u : 30u) + (unsigned)st.source;
            T(same(r, BIG, seed));
        }
        T(cxk_msg_barrier(c) == 0);
        for (int s = 1; s <= 2; ++s) {
            int flag = 0;
            while (!flag) T(cxk_msg_iprobe(c, s, 3, &flag, &st) == 0);  /* queued as unexpected */
            memset(r, 0, BIG);
            T(cxk_msg_recv(c, r, BIG, s, 3, &st) == 0 && same(r, BIG, 20u + (unsigned)s));
        }
        for (int s = 1; s <= 2; ++s) {
            memset(r, 0, BIG);
            T(cxk_msg_recv(c, r, 1000, s, 4, &st) == -EMSGSIZE && st.count == BIG);
            T(same(r, 1000, 10u + (unsigned)s) && r[1000] == 0);
        }
    }
    T(cxk_msg_free_mem(c, heap) == -EINVAL && cxk_msg_free_mem(c, pm) == 0);
    T(cxk_msg_free_mem(c, pm) == -EINVAL);
    /* a new block after the free (the same index): its views are fresh at the peers */
    T(cxk_msg_alloc_mem(c, BIG, &m) == 0);
    pm = m;
    if (rank == 1) {
        fill(pm, BIG, 77);
        T(cxk_msg_send(c, pm, BIG, 0, 5, 0) == 0);
    } else if (rank == 0) {
        T(cxk_msg_recv(c, r, BIG, 1, 5, &st) == 0 && same(r, BIG, 77));
    }
    free(heap);
    free(r);
    return 0;  /* the second block is removed by finalize */
}

/* arg 0: the receiver (rank 1) dies before it receives; the sender's wait fails naming it.
 * arg 1: the sender (rank 0) dies right after its request-to-send; the receiver gets the
 * bytes (the block outlives its writer) or fails naming rank 0 — never a hang or garbage. */
static int killed(cxk_comm *c, int rank, int n, long arg) {
    (void)n;
    void *m;
    T(cxk_msg_alloc_mem(c, BIG, &m) == 0);
    fill(m, BIG, 5);
    unsigned char *r = malloc(BIG);
    struct cxk_msg_status st;
    if (rank == 0) {
        cxk_msg_req *q;
        T(cxk_msg_isend(c, m, BIG, 1, 7, 0, &q) == 0);
        T(cxk_msg_barrier(c) == 0);
        if (arg == 1) raise(SIGKILL);
        T(cxk_msg_wait(c, q, NULL) == -ETIMEDOUT && cxk_msg_failed_rank(c) == 1);
        return 0;
    }
    T(cxk_msg_barrier(c) == 0);
    if (arg == 0) raise(SIGKILL);
    usleep(100000);
    int rc = cxk_msg_recv(c, r, BIG, 0, 7, &st);
    T(rc == 0 ? same(r, BIG, 5) : rc == -ETIMEDOUT && cxk_msg_failed_rank(c) == 0);
    free(r);
    return 0;
}

/* The layout of a message header cell (native/msg/msg.h), as a forging peer writes it. */
struct rts {
    uint32_t ctx;
    int32_t tag;
    uint64_t len, cookie;
    uint32_t flags, ncells;
    uint64_t off;
    uint32_t index, reserved;
};

static uint64_t rnd(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 11;
}

/* Forged case `arg`: rank 0 writes a request-to-send naming its block (or none) with an
 * offset / length outside it, or corrupts the block's header; rank 1 must get -EBADMSG with
 * rank 0 as the failed rank. */
static int forged(cxk_comm *c, int rank, int n, long arg) {
    (void)n;
    const uint64_t blk = 4 * BIG;
    void *m;
    T(cxk_msg_alloc_mem(c, blk, &m) == 0);
    char one = 1;
    if (rank == 1) {
        unsigned char *r = malloc(blk);
        struct cxk_msg_status st;
        T(cxk_msg_recv(c, &one, 1, 0, 0, &st) == 0);  /* the ring exists */
        /* the forged cell may arrive while the barrier waits (having entered it, so rank 0's
         * barrier completes); its progress reads the cell and fails as the receive would */
        int rc = cxk_msg_barrier(c);
        if (rc == 0) rc = cxk_msg_recv(c, r, blk, 0, 9, &st);
        if (rc != -EBADMSG || cxk_msg_failed_rank(c) != 0)
            fprintf(stderr, "forged case %ld: rc %d failed rank %d\n", arg, rc, cxk_msg_failed_rank(c));
        T(rc == -EBADMSG && cxk_msg_failed_rank(c) == 0);
        free(r);
        return 0;
    }
    T(cxk_msg_send(c, &one, 1, 1, 0, 0) == 0);
    uint64_t s = 0x9e3779b97f4a7c15ull ^ (uint64_t)arg * 0x100000001b3ull;
    struct rts h = {0, 9, BIG, 12345, 2 /* in pool */, 1, 0, 0, 0};
    uint64_t *hdr = (uint64_t *)((unsigned char *)m - 64);  /* magic, nbytes */
    switch (arg % 8) {
    case 0: h.off = blk - BIG + 1; break;                     /* one byte past the end */
    case 1: h.off = UINT64_MAX - 100, h.len = 1000; break;    /* off + len wraps */
    case 2: h.len = blk + 1; break;
    case 3: h.index = 1 + (uint32_t)(rnd(&s) % 70000); break; /* no such block */
    case 4: hdr[1] = UINT64_MAX / 2; break;                   /* header: nbytes past the pool */
    case 5: hdr[0] ^= 1; break;                               /* header: bad magic */
    case 6: h.flags = 2 | 0x80; break;                        /* unknown flag */
    default:                                                  /* random, always outside */
        h.len = 1 + rnd(&s) % (2 * blk);
        h.off = blk - (h.len > blk ? 0 : h.len) + 1 + rnd(&s) % (1ull << (rnd(&s) % 63));
        break;
    }
    if (coherence) cxk_flush(hdr, 64);
    char name[96];
    snprintf(name, sizeof name, "msg.forge%ld.0.ring.1", arg);
    cxk_ring *ring;  /* a second producer handle on my ring to rank 1: it writes after mine */
    T(cxk_ring_open(child_pool, name, CXK_RING_PRODUCER, &ring) == 0);
    if (arg >= 24) {  /* first a drop cell (kind 8) naming a random block or buffer */
        uint64_t drop[2] = {rnd(&s) % 70000, rnd(&s) % 4 == 3 ? rnd(&s) : rnd(&s) % 3};
        T(cxk_ring_push(ring, drop, sizeof drop, 8) == 0);
    }
    T(cxk_ring_push(ring, &h, sizeof h, 3 /* RTS */) == 0);
    T(cxk_msg_barrier(c) == 0);
    cxk_ring_close(ring);
    return 0;
}

int main(int argc, char **argv) {
    for (coherence = 0; coherence < 2; ++coherence) {
        if (argc > 1 && atoi(argv[1]) != coherence) continue;
        snprintf(path, sizeof path, "/dev/shm/cxk-test-msgmem-%d", (int)getpid());
        test_pool_remove_at_exit(path);
        unlink(path);
        cxk_pool *p = open_host(5, CXK_POOL_CREATE | CXK_POOL_EXCL);
        CHECK(p != NULL);
        cxk_pool_close(p);
        run("paths", 3, both_paths, 0);
        pid_t k[2];
        spawn("killrecv", 2, killed, 0, 1, k);
        int want0[2] = {0, -SIGKILL};
        expect(k, 2, want0);
        spawn("killsend", 2, killed, 1, 1, k);
        int want1[2] = {-SIGKILL, 0};
        expect(k, 2, want1);
        for (long i = 0; i < 40; ++i) {  /* 24..39: a forged drop cell first */
            char job[32];
            snprintf(job, sizeof job, "forge%ld", i);
            pid_t f[2];
            spawn(job, 2, forged, i, 1, f);
            expect(f, 2, NULL);
        }
        unlink(path);
    }
    return 0;
}
