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
 * once per collective the shim intercepts (Barrier, Bcast, Allreduce, Reduce), and once with
 * a synchronous send (Issend: the receiver owes an ACK). A rank stuck SECS seconds prints
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

/* The collective under test; every rank calls the same one. */
static void collective(int which) {
    int x = me + 1, sum = 0;
    switch (which) {
    case 0: ok(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); break;
    case 1: ok(MPI_Bcast(&x, 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Bcast"); break;
    case 2: ok(MPI_Allreduce(&x, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce"); break;
    default: ok(MPI_Reduce(&x, &sum, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD), "MPI_Reduce"); break;
    }
}

static const char *const names[] = {"MPI_Barrier", "MPI_Bcast", "MPI_Allreduce", "MPI_Reduce"};

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
    for (int which = 0; which < 4; ++which)
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
