/* rma_check.c — the PMPI shim's one-sided suite: a plain MPI program (built with either MPI's
 * mpicc, run with and without LD_PRELOAD=libcxlkit_mpi_<mpi>.so) checking every RMA call the
 * shim takes over against a reference each rank computes itself: put / get / accumulate /
 * get_accumulate / fetch_and_op / compare_and_swap (dense and strided datatypes, int, long,
 * double; SUM, MIN, MAX, REPLACE, NO_OP), Rput / Rget / Raccumulate, in fence, post-start-
 * complete-wait and lock epochs; contention (every rank accumulating into one target, every
 * rank incrementing one counter under an exclusive lock: the sum must be exact), lock_all with
 * flushes and MPI_Win_sync, a window of a dup with reversed ranks, one of half the ranks and
 * one on the user's memory (both stay on MPI under the shim), and an access outside the
 * target's window (MPI_ERRORS_RETURN: the error class is printed). Rank 0 prints the
 * transcript; it must be the same with and without the shim. Needs >= 2 ranks.
 * Exit 0 when every check passed; a failed one prints its line and aborts. */
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 64        /* ints of each rank's window */
#define ITERS 64    /* exclusive-lock increments per rank */

static int rank, size;

#define FAIL(...)                                                       \
    do {                                                                \
        fprintf(stderr, "rma_check rank %d line %d: ", rank, __LINE__); \
        fprintf(stderr, __VA_ARGS__);                                   \
        fputc('\n', stderr);                                            \
        MPI_Abort(MPI_COMM_WORLD, 2);                                   \
    } while (0)
#define CHECK(c) do { if (!(c)) FAIL("check failed: %s", #c); } while (0)
#define OK(call) do { int rc_ = (call); if (rc_ != MPI_SUCCESS) FAIL("%s: error %d", #call, rc_); } while (0)

__attribute__((format(printf, 1, 2))) static void say(const char *fmt, ...) {
    if (rank != 0) return;
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
}

static int val(int r, int i) { return r * 1000 + i; }

static MPI_Win alloc_win(MPI_Comm comm, int **base) {
    MPI_Win win;
    OK(MPI_Win_allocate(N * sizeof(int), sizeof(int), MPI_INFO_NULL, comm, base, &win));
    for (int i = 0; i < N; ++i) (*base)[i] = -1;
    return win;
}

/* Window attributes as MPI defines them for MPI_Win_allocate. */
static void attributes(void) {
    int *base, *du, *flavor, flag = 0;
    MPI_Aint *sz;
    void *b;
    MPI_Win win = alloc_win(MPI_COMM_WORLD, &base);
    OK(MPI_Win_get_attr(win, MPI_WIN_BASE, &b, &flag));
    CHECK(flag && b == base);
    OK(MPI_Win_get_attr(win, MPI_WIN_SIZE, &sz, &flag));
    CHECK(flag && *sz == N * (MPI_Aint)sizeof(int));
    OK(MPI_Win_get_attr(win, MPI_WIN_DISP_UNIT, &du, &flag));
    CHECK(flag && *du == (int)sizeof(int));
    OK(MPI_Win_get_attr(win, MPI_WIN_CREATE_FLAVOR, &flavor, &flag));
    CHECK(flag && *flavor == MPI_WIN_FLAVOR_ALLOCATE);
    MPI_Group wg, g2;
    int cmp;
    OK(MPI_Win_get_group(win, &g2));
    OK(MPI_Comm_group(MPI_COMM_WORLD, &wg));
    OK(MPI_Group_compare(wg, g2, &cmp));
    CHECK(cmp == MPI_IDENT);
    MPI_Group_free(&wg), MPI_Group_free(&g2);
    OK(MPI_Win_free(&win));
    CHECK(win == MPI_WIN_NULL);
    say("attributes: base, size %d, disp_unit %d, flavor allocate, group: ok",
        N * (int)sizeof(int), (int)sizeof(int));
}

/* Fence epochs: puts to the right neighbour, gets from the left, dense and strided. */
static void fence_put_get(MPI_Comm comm, const char *name) {
    int cr, cs, *base;
    MPI_Comm_rank(comm, &cr), MPI_Comm_size(comm, &cs);
    MPI_Win win = alloc_win(comm, &base);
    const int right = (cr + 1) % cs, left = (cr + cs - 1) % cs;
    int src[N], got[N];
    for (int i = 0; i < N; ++i) src[i] = val(cr, i);
    OK(MPI_Win_fence(0, win));
    OK(MPI_Put(src, 16, MPI_INT, right, 4, 16, MPI_INT, win));
    MPI_Datatype vec;  /* every other int: 8 of them, into slots 32, 34, ... 46 */
    MPI_Type_vector(8, 1, 2, MPI_INT, &vec);
    MPI_Type_commit(&vec);
    OK(MPI_Put(src + 20, 8, MPI_INT, right, 32, 1, vec, win));
    OK(MPI_Win_fence(0, win));
    for (int i = 0; i < N; ++i) {
        int want = -1;
        if (i >= 4 && i < 20) want = val(left, i - 4);
        if (i >= 32 && i < 48 && i % 2 == 0) want = val(left, 20 + (i - 32) / 2);
        if (base[i] != want) FAIL("%s: slot %d is %d, want %d", name, i, base[i], want);
    }
    /* gets: a strided origin from a dense target, then dense */
    memset(got, 0, sizeof got);
    OK(MPI_Get(got, 1, vec, left, 4, 8, MPI_INT, win));
    OK(MPI_Get(got + 40, 16, MPI_INT, right, 4, 16, MPI_INT, win));
    OK(MPI_Win_fence(0, win));
    const int lleft = (cr + cs - 2) % cs;
    for (int k = 0; k < 8; ++k) CHECK(got[2 * k] == val(lleft, k) && got[2 * k + 1] == 0);
    for (int k = 0; k < 16; ++k) CHECK(got[40 + k] == val(cr, k));
    MPI_Type_free(&vec);
    OK(MPI_Win_free(&win));
    say("fence put/get on %s (%d ranks), dense and strided: ok", name, cs);
}

/* Every rank accumulates into rank 0 and the last rank: SUM, MIN, MAX, REPLACE, strided. */
static void fence_accumulate(void) {
    int *base;
    MPI_Win win = alloc_win(MPI_COMM_WORLD, &base);
    for (int i = 0; i < N; ++i) base[i] = 0;
    int src[N];
    for (int i = 0; i < N; ++i) src[i] = (rank + 1) * (i + 1) * ((i % 3) ? 1 : -1);
    MPI_Datatype vec;
    MPI_Type_vector(4, 1, 3, MPI_INT, &vec);
    MPI_Type_commit(&vec);
    OK(MPI_Win_fence(0, win));
    OK(MPI_Accumulate(src, 16, MPI_INT, 0, 0, 16, MPI_INT, MPI_SUM, win));
    OK(MPI_Accumulate(src, 8, MPI_INT, 0, 16, 8, MPI_INT, MPI_MIN, win));
    OK(MPI_Accumulate(src, 8, MPI_INT, 0, 24, 8, MPI_INT, MPI_MAX, win));
    OK(MPI_Accumulate(src, 4, MPI_INT, size - 1, 40, 1, vec, MPI_SUM, win));
    OK(MPI_Win_fence(0, win));
    if (rank == 0) {
        for (int i = 0; i < 32; ++i) {
            long want = i < 16 ? 0 : i < 24 ? 0 : 0;
            for (int r = 0; r < size; ++r) {
                int j = i < 16 ? i : i < 24 ? i - 16 : i - 24;
                int v = (r + 1) * (j + 1) * ((j % 3) ? 1 : -1);
                if (i < 16) want += v;
                else if (i < 24) want = v < want ? v : want;
                else want = v > want ? v : want;
            }
            if (base[i] != want) FAIL("accumulate: slot %d is %d, want %ld", i, base[i], want);
        }
    }
    if (rank == size - 1)
        for (int k = 0; k < 4; ++k) {
            int want = 0;
            for (int r = 0; r < size; ++r) want += (r + 1) * (k + 1) * ((k % 3) ? 1 : -1);
            CHECK(base[40 + 3 * k] == want && base[41 + 3 * k] == 0);
        }
    /* REPLACE from one origin, then doubles on a window of their own */
    OK(MPI_Win_fence(0, win));
    if (rank == 1) OK(MPI_Accumulate(src, 4, MPI_INT, 0, 60, 4, MPI_INT, MPI_REPLACE, win));
    OK(MPI_Win_fence(0, win));
    if (rank == 0)
        for (int k = 0; k < 4; ++k) CHECK(base[60 + k] == 2 * (k + 1) * ((k % 3) ? 1 : -1));
    MPI_Type_free(&vec);
    OK(MPI_Win_free(&win));

    double *d, x[4] = {0.5, 1.25, -2.0, 3.0};
    MPI_Win dw;
    OK(MPI_Win_allocate(4 * sizeof(double), sizeof(double), MPI_INFO_NULL, MPI_COMM_WORLD, &d, &dw));
    for (int k = 0; k < 4; ++k) d[k] = 0;
    OK(MPI_Win_fence(0, dw));
    OK(MPI_Accumulate(x, 4, MPI_DOUBLE, 0, 0, 4, MPI_DOUBLE, MPI_SUM, dw));
    OK(MPI_Win_fence(0, dw));
    if (rank == 0)
        for (int k = 0; k < 4; ++k) CHECK(d[k] == x[k] * size);
    OK(MPI_Win_free(&dw));
    say("fence accumulate: SUM, MIN, MAX, REPLACE, strided target, double SUM from %d ranks: ok",
        size);
}

/* Get_accumulate, Fetch_and_op, Compare_and_swap on one counter of rank 0, all at once. */
static void atomics(void) {
    long *base;
    MPI_Win win;
    OK(MPI_Win_allocate(8 * sizeof(long), sizeof(long), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win));
    for (int i = 0; i < 8; ++i) base[i] = 0;
    OK(MPI_Win_fence(0, win));
    long one = 1, old = -1, mine[3] = {rank + 1, 10 * (rank + 1), 100}, before[3];
    OK(MPI_Fetch_and_op(&one, &old, MPI_LONG, 0, 0, MPI_SUM, win));
    OK(MPI_Get_accumulate(mine, 3, MPI_LONG, before, 3, MPI_LONG, 0, 1, 3, MPI_LONG, MPI_SUM, win));
    long cmp = 0, swap = rank + 1, was = -1;
    OK(MPI_Compare_and_swap(&swap, &cmp, &was, MPI_LONG, 0, 4, win));
    OK(MPI_Win_fence(0, win));
    CHECK(old >= 0 && old < size);
    long olds[64], wins = 0;
    MPI_Allgather(&old, 1, MPI_LONG, olds, 1, MPI_LONG, MPI_COMM_WORLD);
    for (int r = 0; r < size; ++r)  /* fetch-and-add: every old value 0..size-1 exactly once */
        for (int q = r + 1; q < size; ++q) CHECK(olds[r] != olds[q]);
    long won = was == 0;
    MPI_Allreduce(&won, &wins, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    CHECK(wins == 1);
    long fetched[3];
    OK(MPI_Fetch_and_op(NULL, &fetched[0], MPI_LONG, 0, 4, MPI_NO_OP, win));
    OK(MPI_Get_accumulate(NULL, 0, MPI_LONG, fetched, 3, MPI_LONG, 0, 1, 3, MPI_LONG, MPI_NO_OP, win));
    OK(MPI_Win_fence(0, win));
    long s = (long)size * (size + 1) / 2;
    CHECK(fetched[0] == s && fetched[1] == 10 * s && fetched[2] == 100L * size);
    OK(MPI_Win_fence(0, win));
    if (rank == 0) CHECK(base[0] == size && base[4] >= 1 && base[4] <= size);
    OK(MPI_Win_free(&win));
    say("atomics: fetch_and_op SUM gave %d distinct olds, one CAS winner of %d, "
        "get_accumulate SUM and NO_OP: ok", size, size);
}

/* Post-start-complete-wait: rank 0 exposes to all others; then a ring. */
static void pscw(void) {
    int *base;
    MPI_Win win = alloc_win(MPI_COMM_WORLD, &base);
    MPI_Group wg, g0, others;
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    int zero = 0;
    MPI_Group_incl(wg, 1, &zero, &g0);
    MPI_Group_excl(wg, 1, &zero, &others);
    if (rank == 0) {
        OK(MPI_Win_post(others, 0, win));
        OK(MPI_Win_wait(win));
        for (int r = 1; r < size; ++r) CHECK(base[r] == val(r, 0));
    } else {
        int v = val(rank, 0), one = 1;
        OK(MPI_Win_start(g0, 0, win));
        OK(MPI_Put(&v, 1, MPI_INT, 0, rank, 1, MPI_INT, win));
        OK(MPI_Accumulate(&one, 1, MPI_INT, 0, 0, 1, MPI_INT, MPI_SUM, win));
        OK(MPI_Win_complete(win));
    }
    if (rank == 0) CHECK(base[0] == -1 + size - 1);
    /* a ring: each exposes to its left and accesses its right */
    /* the next epochs only after every rank left these (MPICH 4.0.2 with 4 ranks on 2 cores
     * hung now and then without this barrier: one run in ~8) */
    MPI_Barrier(MPI_COMM_WORLD);
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    MPI_Group gl, gr;
    MPI_Group_incl(wg, 1, &left, &gl);
    MPI_Group_incl(wg, 1, &right, &gr);
    OK(MPI_Win_post(gl, 0, win));
    OK(MPI_Win_start(gr, 0, win));
    int v = val(rank, 7);
    OK(MPI_Put(&v, 1, MPI_INT, right, 50, 1, MPI_INT, win));
    OK(MPI_Win_complete(win));
    OK(MPI_Win_wait(win));  /* Win_test: tests/msg/test_mpi_shim.py (MPICH 4.0.2 hung polling it) */
    CHECK(base[50] == val(left, 7));
    MPI_Group_free(&gl), MPI_Group_free(&gr), MPI_Group_free(&g0), MPI_Group_free(&others);
    MPI_Group_free(&wg);
    OK(MPI_Win_free(&win));
    say("pscw: %d origins into rank 0, a ring over %d ranks: ok", size - 1, size);
}

/* Passive target: exclusive-lock increments that must sum exactly, shared-lock accumulates
 * from every rank into one target, lock_all with flushes, request forms, Win_sync. */
static void passive(void) {
    int *base;
    MPI_Win win = alloc_win(MPI_COMM_WORLD, &base);
    for (int i = 0; i < N; ++i) base[i] = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    for (int it = 0; it < ITERS; ++it) {
        int c;
        OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win));
        OK(MPI_Get(&c, 1, MPI_INT, 0, 0, 1, MPI_INT, win));
        OK(MPI_Win_flush(0, win));
        ++c;
        OK(MPI_Put(&c, 1, MPI_INT, 0, 0, 1, MPI_INT, win));
        OK(MPI_Win_unlock(0, win));
    }
    const int target = size - 1;
    int add[8];
    for (int k = 0; k < 8; ++k) add[k] = (rank + 1) * (k + 1);
    OK(MPI_Win_lock(MPI_LOCK_SHARED, target, 0, win));
    for (int it = 0; it < 10; ++it) OK(MPI_Accumulate(add, 8, MPI_INT, target, 8, 8, MPI_INT, MPI_SUM, win));
    OK(MPI_Win_unlock(target, win));
    MPI_Barrier(MPI_COMM_WORLD);
    OK(MPI_Win_lock(MPI_LOCK_SHARED, rank, 0, win));  /* MPI_Win_sync needs a passive epoch */
    OK(MPI_Win_sync(win));
    OK(MPI_Win_unlock(rank, win));
    if (rank == 0 && base[0] != size * ITERS)
        FAIL("exclusive increments: counter %d, want %d", base[0], size * ITERS);
    if (rank == target)
        for (int k = 0; k < 8; ++k) CHECK(base[8 + k] == 10 * (k + 1) * size * (size + 1) / 2);
    MPI_Barrier(MPI_COMM_WORLD);
    /* lock_all: put my slot at every rank, flush, read my right neighbour's back */
    int v = val(rank, 3), back = -7, r2 = -7;
    OK(MPI_Win_lock_all(0, win));
    for (int r = 0; r < size; ++r) OK(MPI_Put(&v, 1, MPI_INT, r, 20 + rank, 1, MPI_INT, win));
    OK(MPI_Win_flush_all(win));
    OK(MPI_Win_flush_local_all(win));
    MPI_Request rq[2];
    OK(MPI_Rget(&back, 1, MPI_INT, (rank + 1) % size, 20 + rank, 1, MPI_INT, win, &rq[0]));
    OK(MPI_Raccumulate(&v, 1, MPI_INT, (rank + 1) % size, 40 + rank, 1, MPI_INT, MPI_SUM, win, &rq[1]));
    OK(MPI_Waitall(2, rq, MPI_STATUSES_IGNORE));
    OK(MPI_Win_flush((rank + 1) % size, win));
    OK(MPI_Win_flush_local((rank + 1) % size, win));
    OK(MPI_Rput(&v, 1, MPI_INT, rank, 60, 1, MPI_INT, win, &rq[0]));
    OK(MPI_Wait(&rq[0], MPI_STATUS_IGNORE));
    OK(MPI_Get(&r2, 1, MPI_INT, (rank + 1) % size, 40 + rank, 1, MPI_INT, win));
    OK(MPI_Win_flush((rank + 1) % size, win));
    CHECK(back == v && r2 == v);
    MPI_Barrier(MPI_COMM_WORLD);
    OK(MPI_Win_sync(win));
    for (int r = 0; r < size; ++r) CHECK(base[20 + r] == val(r, 3));
    OK(MPI_Win_unlock_all(win));
    OK(MPI_Win_free(&win));
    say("passive: %ld exclusive increments sum exactly, shared accumulates from %d ranks, "
        "lock_all with flushes and request forms: ok", (long)size * ITERS, size);
}

/* Windows the shim leaves to MPI: half the ranks, and the user's own memory. */
static void mpi_windows(void) {
    MPI_Comm half;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
    fence_put_get(half, "split of half the ranks");
    MPI_Comm_free(&half);
    int mem[N];
    for (int i = 0; i < N; ++i) mem[i] = -1;
    MPI_Win win;
    OK(MPI_Win_create(mem, sizeof mem, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win));
    int v = val(rank, 9);
    OK(MPI_Win_fence(0, win));
    OK(MPI_Put(&v, 1, MPI_INT, (rank + 1) % size, 5, 1, MPI_INT, win));
    OK(MPI_Win_fence(0, win));
    CHECK(mem[5] == val((rank + size - 1) % size, 9));
    OK(MPI_Win_free(&win));
    say("win_create on user memory: put under fence: ok");

    /* shared memory: each writes its slot, reads its right neighbour's through the pointer */
    int *mine, *theirs, du;
    MPI_Aint sz;
    OK(MPI_Win_allocate_shared(sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &mine, &win));
    OK(MPI_Win_fence(0, win));
    *mine = val(rank, 11);
    OK(MPI_Win_fence(0, win));
    OK(MPI_Win_shared_query(win, (rank + 1) % size, &sz, &du, &theirs));
    CHECK(sz == sizeof(int) && du == sizeof(int) && *theirs == val((rank + 1) % size, 11));
    OK(MPI_Win_free(&win));
    /* dynamic: memory attached after creation, reached by its address */
    int dyn[4] = {-1, -1, -1, -1};
    MPI_Aint at, *ats = malloc(sizeof(MPI_Aint) * (size_t)size);
    OK(MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &win));
    OK(MPI_Win_attach(win, dyn, sizeof dyn));
    MPI_Get_address(dyn, &at);
    MPI_Allgather(&at, 1, MPI_AINT, ats, 1, MPI_AINT, MPI_COMM_WORLD);
    OK(MPI_Win_fence(0, win));
    v = val(rank, 12);
    OK(MPI_Put(&v, 1, MPI_INT, (rank + 1) % size, ats[(rank + 1) % size] + 2 * (MPI_Aint)sizeof(int),
               1, MPI_INT, win));
    OK(MPI_Win_fence(0, win));
    CHECK(dyn[2] == val((rank + size - 1) % size, 12) && dyn[0] == -1);
    OK(MPI_Win_detach(win, dyn));
    OK(MPI_Win_free(&win));
    free(ats);
    say("win_allocate_shared (load/store) and win_create_dynamic (put to an attached buffer): ok");
}

static const char *class_name(int rc) {
    int cls = -1;
    MPI_Error_class(rc, &cls);
    return cls == MPI_SUCCESS         ? "no error"
           : cls == MPI_ERR_RMA_RANGE ? "MPI_ERR_RMA_RANGE"
           : cls == MPI_ERR_DISP      ? "MPI_ERR_DISP"
           : cls == MPI_ERR_ARG       ? "MPI_ERR_ARG"
                                      : "another class";
}

/* Accesses outside the target's window, with MPI_ERRORS_RETURN on the window: a negative
 * displacement (both MPIs check it), and with RMA_CHECK_BEYOND=1 (under the shim only:
 * MPICH and Open MPI do not check the end of a window and would write past it) a put that
 * runs past the end. Nothing may be written. */
static void out_of_range(void) {
    int *base;
    MPI_Win win = alloc_win(MPI_COMM_WORLD, &base);
    MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);
    int v[4] = {1, 2, 3, 4};
    const char *beyond = getenv("RMA_CHECK_BEYOND");
    OK(MPI_Win_fence(0, win));
    int neg = MPI_Put(v, 4, MPI_INT, (rank + 1) % size, -1, 4, MPI_INT, win);
    int past = beyond && *beyond == '1'
                   ? MPI_Put(v, 4, MPI_INT, (rank + 1) % size, N - 2, 4, MPI_INT, win)
                   : MPI_ERR_RMA_RANGE;
    int get = beyond && *beyond == '1'
                  ? MPI_Get(v, 1, MPI_INT, (rank + 1) % size, N, 1, MPI_INT, win)
                  : MPI_ERR_RMA_RANGE;
    OK(MPI_Win_fence(0, win));
    CHECK(neg != MPI_SUCCESS && past != MPI_SUCCESS && get != MPI_SUCCESS);
    for (int i = 0; i < N; ++i) CHECK(base[i] == -1);
    OK(MPI_Win_free(&win));
    say("out of range: put at displacement -1: %s", class_name(neg));
    if (beyond && *beyond == '1')
        say("out of range: put of 4 ints at %d of %d: %s; get at %d: %s", N - 2, N,
            class_name(past), N, class_name(get));
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 2 || size > 64) FAIL("needs 2..64 ranks, has %d", size);
    attributes();
    fence_put_get(MPI_COMM_WORLD, "MPI_COMM_WORLD");
    MPI_Comm rev;  /* every rank, reversed: ranks of the window are not world ranks */
    MPI_Comm_split(MPI_COMM_WORLD, 0, size - rank, &rev);
    fence_put_get(rev, "split with reversed ranks");
    MPI_Comm_free(&rev);
    fence_accumulate();
    atomics();
    pscw();
    passive();
    mpi_windows();
    out_of_range();
    say("rma_check: all passed");
    MPI_Finalize();
    return 0;
}
