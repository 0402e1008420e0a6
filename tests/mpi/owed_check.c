/* owed_check.c — 2 ranks: a rank that owes its peer a control cell (the FIN of a rendezvous
 * receive, the ACK of a synchronous send) when it enters a collective must still deliver it.
 * The bibw hang of bench/osu (about 2 runs in 12 under the shim with Open MPI), made
 * deterministic: when the receiver copies a rendezvous message out, the FIN goes back on the
 * receiver's own ring to the sender; if that ring is full of the receiver's messages not yet
 * read, the FIN is queued in the engine and pushed at the receiver's next progress. A rank
 * blocked in MPI_Barrier never made that progress, while the sender, waiting for the FIN
 * before it could reach the barrier, drained the ring in vain: both waited forever.
 *
 * Legal MPI, so any MPI completes it:
 *   rank 0: Isend(64 KiB, rendezvous) to 1; Barrier; Wait; <collective>; Recv the small ones
 *   rank 1: Isend(NSMALL small) to 0 (more than a ring holds: rank 0 reads none before its
 *           Wait); Recv(64 KiB) (its FIN finds the ring full); Barrier; <collective>; Waitall
 * once per blocking collective that has a nonblocking form (the shim polls all of them:
 * native/mpi/coll.c), and once with a synchronous send (Issend: the receiver owes an ACK);
 * each collective's result is checked. A rank stuck SECS seconds prints
 * where and exits 2 (so a regression fails instead of hanging the suite). Prints "owed: ok". */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BIG (64 * 1024)   /* above the engine's eager limit (one cell): rendezvous */
#define NSMALL 200        /* more 8-byte messages than a 64-cell ring holds */
#define SECS 30

static int me;
static const char *volatile phase = "start";

static void on_alarm(int sig) {
    (void)sig;
    char line[160];
    int n = snprintf(line, sizeof line, "owed_check: rank %d stuck for %d s in %s\n", me, SECS,
                     phase);
    if (write(2, line, (size_t)n) < 0) _exit(3);
    _exit(2);
}

static void ok(int rc, const char *what) {
    if (rc == MPI_SUCCESS) return;
    fprintf(stderr, "owed_check: rank %d: %s failed (%d)\n", me, what, rc);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* The collective under test; every rank calls the same one (2 ranks, so 2-element buffers;
 * the results are checked, each rank contributing me + 1). The rooted ones are rooted where
 * rank 1, the one owing the cell, must wait for rank 0 (a non-root of Gather or a root of
 * Scatter may send its part and leave, and would not show the hang). */
enum { NCOLL = 17 };
static const char *const names[NCOLL] = {
    "MPI_Barrier", "MPI_Bcast", "MPI_Allreduce", "MPI_Reduce", "MPI_Gather", "MPI_Gatherv",
    "MPI_Scatter", "MPI_Scatterv", "MPI_Allgather", "MPI_Allgatherv", "MPI_Alltoall",
    "MPI_Alltoallv", "MPI_Alltoallw", "MPI_Reduce_scatter", "MPI_Reduce_scatter_block",
    "MPI_Scan", "MPI_Exscan"};

static void expect(int which, const int *got, const int *want, int n) {
    for (int i = 0; i < n; ++i)
        if (got[i] != want[i]) {
            fprintf(stderr, "owed_check: rank %d: %s: element %d is %d, not %d\n", me,
                    names[which], i, got[i], want[i]);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
}

static void collective(int which) {
    const MPI_Comm w = MPI_COMM_WORLD;
    const int one[2] = {1, 1}, at[2] = {0, 1}, bytes_at[2] = {0, sizeof(int)};
    const MPI_Datatype ints[2] = {MPI_INT, MPI_INT};
    const int x = me + 1, pair[2] = {10 * me + 1, 10 * me + 2}; /* pair[j]: to rank j */
    const int both[2] = {1, 2}, xx[2] = {x, x}, sums[2] = {3, 3}; /* sums: 1 + 2 */
    const int scat[2] = {1, 2}, to_me[2] = {1 + me, 11 + me};    /* alltoall: from 0, 1 */
    int v = 0, out[2] = {0, 0};
    const char *n = names[which];
    switch (which) {
    case 0: ok(MPI_Barrier(w), n); break;
    case 1:
        v = me == 0 ? 7 : 0;
        ok(MPI_Bcast(&v, 1, MPI_INT, 0, w), n);
        expect(which, &v, &(int){7}, 1);
        break;
    case 2:
        ok(MPI_Allreduce(&x, &v, 1, MPI_INT, MPI_SUM, w), n);
        expect(which, &v, &(int){3}, 1);
        break;
    case 3:
        ok(MPI_Reduce(&x, &v, 1, MPI_INT, MPI_SUM, 0, w), n);
        if (me == 0) expect(which, &v, &(int){3}, 1);
        break;
    case 4:
        ok(MPI_Gather(&x, 1, MPI_INT, out, 1, MPI_INT, 1, w), n);
        if (me == 1) expect(which, out, both, 2);
        break;
    case 5:
        ok(MPI_Gatherv(&x, 1, MPI_INT, out, one, at, MPI_INT, 1, w), n);
        if (me == 1) expect(which, out, both, 2);
        break;
    case 6:
        ok(MPI_Scatter(scat, 1, MPI_INT, &v, 1, MPI_INT, 0, w), n);
        expect(which, &v, &x, 1);
        break;
    case 7:
        ok(MPI_Scatterv(scat, one, at, MPI_INT, &v, 1, MPI_INT, 0, w), n);
        expect(which, &v, &x, 1);
        break;
    case 8:
        ok(MPI_Allgather(&x, 1, MPI_INT, out, 1, MPI_INT, w), n);
        expect(which, out, both, 2);
        break;
    case 9:
        ok(MPI_Allgatherv(&x, 1, MPI_INT, out, one, at, MPI_INT, w), n);
        expect(which, out, both, 2);
        break;
    case 10:
        ok(MPI_Alltoall(pair, 1, MPI_INT, out, 1, MPI_INT, w), n);
        expect(which, out, to_me, 2);
        break;
    case 11:
        ok(MPI_Alltoallv(pair, one, at, MPI_INT, out, one, at, MPI_INT, w), n);
        expect(which, out, to_me, 2);
        break;
    case 12:
        ok(MPI_Alltoallw(pair, one, bytes_at, ints, out, one, bytes_at, ints, w), n);
        expect(which, out, to_me, 2);
        break;
    case 13:
        ok(MPI_Reduce_scatter(xx, &v, one, MPI_INT, MPI_SUM, w), n);
        expect(which, &v, &sums[me], 1);
        break;
    case 14:
        ok(MPI_Reduce_scatter_block(xx, &v, 1, MPI_INT, MPI_SUM, w), n);
        expect(which, &v, &sums[me], 1);
        break;
    case 15:
        ok(MPI_Scan(&x, &v, 1, MPI_INT, MPI_SUM, w), n);
        expect(which, &v, &(int){me ? 3 : 1}, 1);
        break;
    default:
        ok(MPI_Exscan(&x, &v, 1, MPI_INT, MPI_SUM, w), n);
        if (me == 1) expect(which, &v, &(int){1}, 1);  /* rank 0's result is undefined */
        break;
    }
}

/* One round: rank 1 owes rank 0 the FIN (sync 0) or the ACK (sync 1) of message `big`. */
static void round_(int which, int sync, unsigned char *big, long *small, MPI_Request *reqs) {
    const int peer = 1 - me;
    char where[80];
    snprintf(where, sizeof where, "round %s%s", names[which], sync ? " (Issend)" : "");
    phase = where;
    alarm(SECS);
    if (me == 0) {
        MPI_Request r;
        for (int i = 0; i < BIG; ++i) big[i] = (unsigned char)(i * 7 + which + sync);
        if (sync) ok(MPI_Issend(big, 8, MPI_BYTE, peer, 1, MPI_COMM_WORLD, &r), "MPI_Issend");
        else ok(MPI_Isend(big, BIG, MPI_BYTE, peer, 1, MPI_COMM_WORLD, &r), "MPI_Isend");
        ok(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
        ok(MPI_Wait(&r, MPI_STATUS_IGNORE), "MPI_Wait");  /* needs rank 1's FIN / ACK */
        collective(which);
        for (int i = 0; i < NSMALL; ++i) {
            long v = -1;
            ok(MPI_Recv(&v, 1, MPI_LONG, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv");
            if (v != i * 3 + which) {
                fprintf(stderr, "owed_check: small message %d: %ld\n", i, v);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        }
    } else {
        for (int i = 0; i < NSMALL; ++i) {
            small[i] = i * 3 + which;
            ok(MPI_Isend(&small[i], 1, MPI_LONG, peer, 2, MPI_COMM_WORLD, &reqs[i]), "MPI_Isend");
        }
        memset(big, 0, BIG);
        ok(MPI_Recv(big, sync ? 8 : BIG, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
           "MPI_Recv");
        for (int i = 0; i < (sync ? 8 : BIG); ++i)
            if (big[i] != (unsigned char)(i * 7 + which + sync)) {
                fprintf(stderr, "owed_check: byte %d of the big message wrong\n", i);
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        ok(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
        collective(which);  /* rank 0 reaches it only once the FIN / ACK arrived */
        ok(MPI_Waitall(NSMALL, reqs, MPI_STATUSES_IGNORE), "MPI_Waitall");
    }
    alarm(0);
}

int main(int argc, char **argv) {
    int size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        if (me == 0) fprintf(stderr, "owed_check: needs 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    signal(SIGALRM, on_alarm);
    unsigned char *big = malloc(BIG);
    long *small = malloc(sizeof *small * NSMALL);
    MPI_Request *reqs = malloc(sizeof *reqs * NSMALL);
    if (!big || !small || !reqs) MPI_Abort(MPI_COMM_WORLD, 1);
    for (int which = 0; which < NCOLL; ++which)
        for (int sync = 0; sync < 2; ++sync) round_(which, sync, big, small, reqs);
    phase = "MPI_Finalize";
    alarm(SECS);
    free(big);
    free(small);
    free(reqs);
    if (me == 0) printf("owed: ok\n");
    MPI_Finalize();
    return 0;
}
