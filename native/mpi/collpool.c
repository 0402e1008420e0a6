/* collpool.c — the collectives coll.c runs through the pool, built on the engine's
 * nonblocking point-to-point on a context of the communicator's own (ctx | COLL_CTX, never a
 * point-to-point context). Every wait polls the engine and pokes the MPI's progress in turn:
 * a rank inside a collective may be the one that must answer a peer on the MPI's path (a
 * rendezvous send to it from a rank of its host, a lock request on a window the MPI keeps),
 * and that peer may be what the collective waits for. Reductions fold in rank order
 * (PMPI_Reduce_local), so every run gives the same result. Each message of a collective is
 * received in that collective, and one sender's messages arrive in order, so successive
 * collectives never take each other's messages. -errno of the engine, or 0. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mpi/shim.h"

#define COLL_CTX 0x80000000u
enum { TAG_BARRIER = 1, TAG_BCAST = 2, TAG_REDUCE = 3, TAG_GATHER = 4, TAG_ALLREDUCE = 5 };
/* Up to this many ranks an Allreduce is one exchange (each rank sends n - 1 messages and
 * receives n - 1 at once: one message latency); past it a reduce, then a bcast. */
#define EXCHANGE_RANKS 4

static uint32_t cctx(const struct shim_comm *sc) { return sc->ctx | COLL_CTX; }

/* Wait for n engine requests (NULL entries done), the MPI kept moving meanwhile. */
static int wait_all(cxk_msg_req **r, int n) {
    int rc = 0;
    for (int left = n; left > 0;) {
        left = 0;
        for (int k = 0; k < n; ++k) {
            if (!r[k]) continue;
            int done = 0, e = cxk_msg_test(g.eng, r[k], &done, NULL);
            if (e || done) {
                r[k] = NULL;
                if (e && !rc) rc = e;
            } else {
                ++left;
            }
        }
        if (left) {
            int flag = 0;
            PMPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
            shim_mpi_copies_drain(0);
        }
    }
    return rc;
}

static int xfer(const struct shim_comm *sc, const void *sbuf, uint64_t sn, int to, void *rbuf,
                uint64_t rn, int from, int tag) {
    cxk_msg_req *r[2] = {NULL, NULL};
    int rc = 0;
    if (from >= 0) rc = cxk_msg_irecv_ctx(g.eng, rn ? rbuf : NULL, (int64_t)rn, shim_eng(sc, from), tag, cctx(sc), &r[0]);
    if (!rc && to >= 0)
        rc = cxk_msg_isend_ctx(g.eng, sn ? sbuf : NULL, (int64_t)sn, shim_eng(sc, to), tag, cctx(sc), 0, &r[1]);
    const int w = wait_all(r, 2);
    return rc ? rc : w;
}

int shim_pool_barrier(const struct shim_comm *sc, int me) {
    const int n = sc->size;
    for (int k = 1; k < n; k <<= 1) {  /* dissemination: log2(n) rounds */
        int rc = xfer(sc, NULL, 0, (me + k) % n, NULL, 0, (me - k + n) % n, TAG_BARRIER);
        if (rc) return rc;
    }
    return 0;
}

int shim_pool_bcast(const struct shim_comm *sc, int me, void *buf, uint64_t nbytes, int root) {
    const int n = sc->size, vr = (me - root + n) % n;
    int mask = 1, rc = 0;
    for (; mask < n; mask <<= 1)  /* binomial tree: from the parent first */
        if (vr & mask) {
            if ((rc = xfer(sc, NULL, 0, -1, buf, nbytes, (vr - mask + root) % n, TAG_BCAST))) return rc;
            break;
        }
    for (mask >>= 1; mask > 0; mask >>= 1)
        if (vr + mask < n && (rc = xfer(sc, buf, nbytes, (vr + mask + root) % n, NULL, 0, -1, TAG_BCAST)))
            return rc;
    return 0;
}

/* rbuf = the fold of all[0..n) in rank order, as the root of shim_pool_reduce folds. */
static void fold(const uint8_t *all, int n, void *rbuf, int count, MPI_Datatype dt, MPI_Op op,
                 uint64_t nbytes) {
    memcpy(rbuf, all, nbytes);
    for (int k = 1; k < n; ++k) PMPI_Reduce_local(all + nbytes * (uint64_t)k, rbuf, count, dt, op);
}

/* Every rank's nbytes of sbuf to root, which folds them in rank order into rbuf. */
int shim_pool_reduce(const struct shim_comm *sc, int me, const void *sbuf, void *rbuf, int count,
                     MPI_Datatype dt, MPI_Op op, uint64_t nbytes, int root) {
    if (me != root) return xfer(sc, sbuf, nbytes, root, NULL, 0, -1, TAG_REDUCE);
    const int n = sc->size;
    uint8_t *all = malloc(nbytes * (uint64_t)n + 1);
    if (!all) return -ENOMEM;
    cxk_msg_req **r = calloc((size_t)n, sizeof *r);
    int rc = r ? 0 : -ENOMEM;
    for (int k = 0; !rc && k < n; ++k)
        if (k != me)
            rc = cxk_msg_irecv_ctx(g.eng, nbytes ? all + nbytes * (uint64_t)k : NULL, (int64_t)nbytes,
                                   shim_eng(sc, k), TAG_REDUCE, cctx(sc), &r[k]);
    const int w = r ? wait_all(r, n) : 0;
    if (!rc) rc = w;
    if (!rc && nbytes) {
        memcpy(all + nbytes * (uint64_t)me, sbuf, nbytes);
        fold(all, n, rbuf, count, dt, op, nbytes);  /* rank 0's, then 1, 2, ... folded in */
    }
    free(r);
    free(all);
    return rc;
}

/* Every rank's nbytes of sbuf to every other rank, each folding all of them in rank order:
 * every rank gets the bits a reduce to one rank then its bcast would give, in one message
 * latency instead of two (and log2(n) more for the bcast's tree). Past EXCHANGE_RANKS: that
 * reduce and bcast. sbuf may be rbuf (MPI_IN_PLACE): it is read before rbuf is written. */
int shim_pool_allreduce(const struct shim_comm *sc, int me, const void *sbuf, void *rbuf,
                        int count, MPI_Datatype dt, MPI_Op op, uint64_t nbytes) {
    const int n = sc->size;
    if (n > EXCHANGE_RANKS) {
        int rc = shim_pool_reduce(sc, me, sbuf, rbuf, count, dt, op, nbytes, 0);
        return rc ? rc : shim_pool_bcast(sc, me, rbuf, nbytes, 0);
    }
    uint8_t *all = malloc(nbytes * (uint64_t)n + 1);
    cxk_msg_req **r = calloc(2 * (size_t)n, sizeof *r);
    int rc = all && r ? 0 : -ENOMEM;
    for (int k = 0; !rc && k < n; ++k)
        if (k != me)
            rc = cxk_msg_irecv_ctx(g.eng, nbytes ? all + nbytes * (uint64_t)k : NULL, (int64_t)nbytes,
                                   shim_eng(sc, k), TAG_ALLREDUCE, cctx(sc), &r[k]);
    for (int k = 0; !rc && k < n; ++k)
        if (k != me)
            rc = cxk_msg_isend_ctx(g.eng, nbytes ? sbuf : NULL, (int64_t)nbytes, shim_eng(sc, k),
                                   TAG_ALLREDUCE, cctx(sc), 0, &r[n + k]);
    const int w = r ? wait_all(r, 2 * n) : 0;
    if (!rc) rc = w;
    if (!rc && nbytes) {
        memcpy(all + nbytes * (uint64_t)me, sbuf, nbytes);
        fold(all, n, rbuf, count, dt, op, nbytes);
    }
    free(r);
    free(all);
    return rc;
}

/* Every rank's block (block bytes at wire + me * block) to every other rank. */
int shim_pool_allgather(const struct shim_comm *sc, int me, uint8_t *wire, uint64_t block) {
    const int n = sc->size;
    cxk_msg_req **r = calloc(2 * (size_t)n, sizeof *r);
    if (!r) return -ENOMEM;
    int rc = 0;
    for (int k = 0; !rc && k < n; ++k)
        if (k != me)
            rc = cxk_msg_irecv_ctx(g.eng, block ? wire + block * (uint64_t)k : NULL, (int64_t)block,
                                   shim_eng(sc, k), TAG_GATHER, cctx(sc), &r[k]);
    for (int k = 0; !rc && k < n; ++k)
        if (k != me)
            rc = cxk_msg_isend_ctx(g.eng, block ? wire + block * (uint64_t)me : NULL, (int64_t)block,
                                   shim_eng(sc, k), TAG_GATHER, cctx(sc), 0, &r[n + k]);
    const int w = wait_all(r, 2 * n);
    free(r);
    return rc ? rc : w;
}
