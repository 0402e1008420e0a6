/* routes_check.c — a plain MPI program for a job whose peers take different routes under the
 * shim (CXLKIT_MPI_HOSTS / CXLKIT_MPI_NOPOOL make one machine several hosts): MPI_ANY_SOURCE
 * receives over both routes in order per sender, a receive posted behind an ANY_SOURCE one
 * never overtaking it, probes and matched probes across routes, sendrecv around a ring, and
 * the collectives (small and large, dense and packed datatypes, in place), on the world and
 * on a split with reversed ranks. World rank 0 prints a transcript that depends only on the
 * number of ranks: the same natively and under the shim. Exit 1 on any wrong value. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define K 24           /* messages per sender */
#define BIG 3000       /* ints: above the engine's eager size, a rendezvous message */

static int bad;
#define CHECK(c)                                                                     \
    do {                                                                             \
        if (!(c)) {                                                                  \
            ++bad;                                                                   \
            fprintf(stderr, "routes_check: %s:%d: %s failed\n", __FILE__, __LINE__, #c); \
        }                                                                            \
    } while (0)

static int wrank;

/* comm rank 0's line, printed by world rank 0 (one writer: a deterministic transcript) */
static void say(MPI_Comm comm, const char *what, const char *line) {
    char buf[160] = {0};
    snprintf(buf, sizeof buf, "%s", line);
    MPI_Bcast(buf, (int)sizeof buf, MPI_CHAR, 0, comm);
    if (wrank == 0) printf("%s: %s\n", what, buf);
}

/* Every rank but 0 sends K messages (small and rendezvous sizes, two tags) to rank 0, which
 * receives them all with ANY_SOURCE / ANY_TAG: each sender's sequence arrives in order. */
static void any_source_order(MPI_Comm comm, int r, int n) {
    static int buf[BIG];
    char line[96] = "";
    if (r != 0) {
        for (int i = 0; i < K; ++i) {
            const int len = i % 3 == 2 ? BIG : 2;
            for (int j = 0; j < len; ++j) buf[j] = r * 100000 + i;
            MPI_Send(buf, len, MPI_INT, 0, 1 + i % 2, comm);
        }
    } else {
        int next[64] = {0}, got = 0;
        for (int m = 0; m < K * (n - 1); ++m) {
            MPI_Status st;
            MPI_Recv(buf, BIG, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, comm, &st);
            const int s = st.MPI_SOURCE, i = buf[0] % 100000;
            CHECK(s > 0 && s < n && buf[0] / 100000 == s && i == next[s]);
            CHECK(st.MPI_TAG == 1 + i % 2);
            int cnt = -1;
            MPI_Get_count(&st, MPI_INT, &cnt);
            CHECK(cnt == (i % 3 == 2 ? BIG : 2));
            next[s] = i + 1, ++got;
        }
        snprintf(line, sizeof line, "%d messages from %d senders, each in order", got, n - 1);
    }
    say(comm, "any-source order", line);
}

/* An ANY_SOURCE receive, then one from sender s with the same tag: s's first message goes
 * to the first receive, its second to the second (no overtaking across the two). Then the
 * same with nonblocking receives posted before anything is sent. */
static void behind_any(MPI_Comm comm, int r, int n) {
    int ok = 0;
    for (int s = 1; s < n; ++s) {
        if (r == s) {
            int a = 1000 + s, b = 2000 + s;
            MPI_Send(&a, 1, MPI_INT, 0, 7, comm);
            MPI_Send(&b, 1, MPI_INT, 0, 7, comm);
        } else if (r == 0) {
            int x = -1, y = -1;
            MPI_Request q[2];
            MPI_Status st[2];
            MPI_Irecv(&x, 1, MPI_INT, MPI_ANY_SOURCE, 7, comm, &q[0]);
            MPI_Irecv(&y, 1, MPI_INT, s, 7, comm, &q[1]);
            MPI_Waitall(2, q, st);
            CHECK(x == 1000 + s && y == 2000 + s && st[0].MPI_SOURCE == s && st[1].MPI_SOURCE == s);
            ok += x == 1000 + s && y == 2000 + s;
        }
        MPI_Barrier(comm);
    }
    char line[64];
    snprintf(line, sizeof line, "%d of %d senders: first to the wildcard", ok, n - 1);
    say(comm, "behind any-source", line);
}

/* Probe / Iprobe / Mprobe with ANY_SOURCE: the message probed is the one received. */
static void probes(MPI_Comm comm, int r, int n) {
    char line[64] = "";
    if (r != 0) {
        int v = r * 3;
        MPI_Send(&v, 1, MPI_INT, 0, 9, comm);
        MPI_Send(&v, 1, MPI_INT, 0, 10, comm);
        MPI_Send(&v, 1, MPI_INT, 0, 11, comm);
    } else {
        int sum = 0;
        for (int k = 1; k < n; ++k) {
            MPI_Status st;
            int v = -1, flag = 0;
            MPI_Probe(MPI_ANY_SOURCE, 9, comm, &st);
            MPI_Recv(&v, 1, MPI_INT, st.MPI_SOURCE, 9, comm, MPI_STATUS_IGNORE);
            CHECK(v == st.MPI_SOURCE * 3);
            sum += v;
            while (!flag) MPI_Iprobe(MPI_ANY_SOURCE, 10, comm, &flag, &st);
            MPI_Recv(&v, 1, MPI_INT, st.MPI_SOURCE, 10, comm, MPI_STATUS_IGNORE);
            CHECK(v == st.MPI_SOURCE * 3);
            MPI_Message msg;
            MPI_Mprobe(MPI_ANY_SOURCE, 11, comm, &msg, &st);
            MPI_Mrecv(&v, 1, MPI_INT, &msg, MPI_STATUS_IGNORE);
            CHECK(v == st.MPI_SOURCE * 3);
        }
        snprintf(line, sizeof line, "probe, iprobe, mprobe from %d senders, sum %d", n - 1, sum);
    }
    say(comm, "probes", line);
}

/* Sendrecv and Sendrecv_replace around the ring, rendezvous-sized. */
static void ring(MPI_Comm comm, int r, int n) {
    static int a[BIG], b[BIG];
    const int right = (r + 1) % n, left = (r + n - 1) % n;
    for (int i = 0; i < BIG; ++i) a[i] = r * 7 + i;
    MPI_Status st;
    MPI_Sendrecv(a, BIG, MPI_INT, right, 3, b, BIG, MPI_INT, MPI_ANY_SOURCE, 3, comm, &st);
    CHECK(st.MPI_SOURCE == left && b[0] == left * 7 && b[BIG - 1] == left * 7 + BIG - 1);
    MPI_Sendrecv_replace(a, BIG, MPI_INT, left, 4, right, 4, comm, &st);
    CHECK(a[0] == right * 7 && a[BIG - 1] == right * 7 + BIG - 1);
    say(comm, "ring", "sendrecv and sendrecv_replace from both neighbours");
}

static void collectives(MPI_Comm comm, int r, int n) {
    int v[8], sum = 0, mx = 0;
    const int root = n > 1 ? 1 : 0;
    for (int i = 0; i < 8; ++i) v[i] = r == root ? 11 * i : -1;
    MPI_Barrier(comm);
    MPI_Bcast(v, 8, MPI_INT, root, comm);
    for (int i = 0; i < 8; ++i) CHECK(v[i] == 11 * i);
    /* a strided type at the root, plain ints elsewhere (the same type signature) */
    int w[16];
    MPI_Datatype vec;
    MPI_Type_vector(8, 1, 2, MPI_INT, &vec);
    MPI_Type_commit(&vec);
    for (int i = 0; i < 16; ++i) w[i] = r == root ? 5 * i : -1;
    if (r == root) MPI_Bcast(w, 1, vec, root, comm);
    else MPI_Bcast(w, 8, MPI_INT, root, comm);
    for (int i = 0; i < 8 && r != root; ++i) CHECK(w[i] == 10 * i);
    MPI_Type_free(&vec);
    static double big[20000];
    for (int i = 0; i < 20000; ++i) big[i] = r == 0 ? i * 0.5 : 0;
    MPI_Bcast(big, 20000, MPI_DOUBLE, 0, comm);
    CHECK(big[19999] == 19999 * 0.5);
    int one = r + 1;
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, comm);
    CHECK(sum == n * (n + 1) / 2);
    MPI_Allreduce(&one, &mx, 1, MPI_INT, MPI_MAX, comm);
    CHECK(mx == n);
    double d = r + 0.25, dmax = 0, dsum = 0;
    MPI_Allreduce(&d, &dmax, 1, MPI_DOUBLE, MPI_MAX, comm);
    CHECK(dmax == n - 1 + 0.25);
    MPI_Allreduce(&d, &dsum, 1, MPI_DOUBLE, MPI_SUM, comm);
    CHECK(dsum == n * (n - 1) / 2.0 + 0.25 * n);
    long long ll[2] = {r, -r};
    MPI_Allreduce(MPI_IN_PLACE, ll, 2, MPI_LONG_LONG, MPI_MIN, comm);
    CHECK(ll[0] == 0 && ll[1] == -(n - 1));
    MPI_Reduce(&one, &sum, 1, MPI_INT, MPI_SUM, n - 1, comm);
    if (r == n - 1) CHECK(sum == n * (n + 1) / 2);
    int mine[3] = {r, r * r, -r}, all[3 * 64];
    MPI_Allgather(mine, 3, MPI_INT, all, 3, MPI_INT, comm);
    for (int k = 0; k < n; ++k) CHECK(all[3 * k] == k && all[3 * k + 1] == k * k && all[3 * k + 2] == -k);
    for (int k = 0; k < n; ++k) all[k] = k == r ? 40 + r : -7;
    MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, all, 1, MPI_INT, comm);
    for (int k = 0; k < n; ++k) CHECK(all[k] == 40 + k);
    char bytes[2] = {(char)r, (char)(r + 1)}, allb[2 * 64];
    MPI_Allgather(bytes, 2, MPI_CHAR, allb, 2, MPI_CHAR, comm);
    for (int k = 0; k < n; ++k) CHECK(allb[2 * k] == k && allb[2 * k + 1] == k + 1);
    int gath[64];
    MPI_Gather(&one, 1, MPI_INT, gath, 1, MPI_INT, 0, comm);
    if (r == 0)
        for (int k = 0; k < n; ++k) CHECK(gath[k] == k + 1);
    char line[128];
    snprintf(line, sizeof line,
             "barrier, bcast (dense, strided, 160 KB), allreduce sum %d max %d, reduce, "
             "allgather, gather", sum, mx);
    say(comm, "collectives", line);
}

static void suite(MPI_Comm comm, const char *name) {
    int r, n;
    MPI_Comm_rank(comm, &r);
    MPI_Comm_size(comm, &n);
    if (wrank == 0) printf("== %s\n", name);
    any_source_order(comm, r, n);
    behind_any(comm, r, n);
    probes(comm, r, n);
    ring(comm, r, n);
    collectives(comm, r, n);
}

int main(int argc, char **argv) {
    int n;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (n > 64) MPI_Abort(MPI_COMM_WORLD, 2);
    suite(MPI_COMM_WORLD, "world");
    MPI_Comm rev;
    MPI_Comm_split(MPI_COMM_WORLD, 0, n - wrank, &rev);
    suite(rev, "split, ranks reversed");
    MPI_Comm_free(&rev);
    int all = 0;
    MPI_Allreduce(&bad, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (wrank == 0) printf("routes_check: %s\n", all ? "FAILED" : "all passed");
    MPI_Finalize();
    return all ? 1 : 0;
}
