/* be_mpi.c — the osu.h backend on plain MPI (MPICH or Open MPI: build with that MPI's mpicc,
 * start with its mpiexec; which transport it uses is the launcher's choice, printed by the
 * run script beside the table). */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#include "osu.h"

static int rank_, size_;
static char name_[MPI_MAX_LIBRARY_VERSION_STRING + 16];

void be_abort(const char *what, int err) {
    fprintf(stderr, "osu (MPI) rank %d: %s (%d)\n", rank_, what, err);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static void ok(int rc, const char *what) {
    if (rc != MPI_SUCCESS) be_abort(what, rc);
}

int be_init(int *argc, char ***argv) {
    ok(MPI_Init(argc, argv), "MPI_Init");
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    char v[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(v, &len);
    char *nl = strchr(v, '\n');
    if (nl) *nl = 0;
    snprintf(name_, sizeof name_, "%s", v);
    return rank_;
}

void be_finalize(void) { MPI_Finalize(); }
int be_rank(void) { return rank_; }
int be_size(void) { return size_; }
const char *be_name(void) { return name_; }
double be_wtime(void) { return MPI_Wtime(); }

void be_send(const void *buf, size_t n, int dest, int tag) {
    ok(MPI_Send(buf, (int)n, MPI_BYTE, dest, tag, MPI_COMM_WORLD), "MPI_Send");
}

void be_recv(void *buf, size_t n, int src, int tag) {
    ok(MPI_Recv(buf, (int)n, MPI_BYTE, src, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv");
}

_Static_assert(sizeof(MPI_Request) <= BE_REQ_BYTES, "request slot");

void be_isend(const void *buf, size_t n, int dest, int tag, void *req) {
    MPI_Request q;
    ok(MPI_Isend(buf, (int)n, MPI_BYTE, dest, tag, MPI_COMM_WORLD, &q), "MPI_Isend");
    memcpy(req, &q, sizeof q);
}

void be_irecv(void *buf, size_t n, int src, int tag, void *req) {
    MPI_Request q;
    ok(MPI_Irecv(buf, (int)n, MPI_BYTE, src, tag, MPI_COMM_WORLD, &q), "MPI_Irecv");
    memcpy(req, &q, sizeof q);
}

void be_waitall(int n, void *reqs) {
    for (int i = 0; i < n; ++i) {
        MPI_Request q;
        memcpy(&q, (char *)reqs + (size_t)i * BE_REQ_BYTES, sizeof q);
        ok(MPI_Wait(&q, MPI_STATUS_IGNORE), "MPI_Wait");
    }
}

void be_barrier(void) { ok(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

struct be_win {
    MPI_Win win;
    MPI_Group peer;  /* PSCW: the group of the one peer */
    int peer_rank;
};

static struct be_win the_win;

be_win *be_win_create(size_t nbytes, void **base) {
    ok(MPI_Win_allocate((MPI_Aint)nbytes, 1, MPI_INFO_NULL, MPI_COMM_WORLD, base, &the_win.win),
       "MPI_Win_allocate");
    memset(*base, 0, nbytes);
    the_win.peer_rank = -1;
    return &the_win;
}

void be_win_free(be_win *w) {
    if (w->peer_rank >= 0) MPI_Group_free(&w->peer);
    ok(MPI_Win_free(&w->win), "MPI_Win_free");
}

static MPI_Group group_of(be_win *w, int peer) {
    if (w->peer_rank != peer) {
        MPI_Group world;
        if (w->peer_rank >= 0) MPI_Group_free(&w->peer);
        MPI_Comm_group(MPI_COMM_WORLD, &world);
        MPI_Group_incl(world, 1, &peer, &w->peer);
        MPI_Group_free(&world);
        w->peer_rank = peer;
    }
    return w->peer;
}

void be_put(be_win *w, const void *buf, size_t n, int target, size_t off) {
    ok(MPI_Put(buf, (int)n, MPI_BYTE, target, (MPI_Aint)off, (int)n, MPI_BYTE, w->win), "MPI_Put");
}

void be_get(be_win *w, void *buf, size_t n, int target, size_t off) {
    ok(MPI_Get(buf, (int)n, MPI_BYTE, target, (MPI_Aint)off, (int)n, MPI_BYTE, w->win), "MPI_Get");
}

void be_fence(be_win *w) { ok(MPI_Win_fence(0, w->win), "MPI_Win_fence"); }
void be_post(be_win *w, int peer) { ok(MPI_Win_post(group_of(w, peer), 0, w->win), "MPI_Win_post"); }
void be_start(be_win *w, int peer) { ok(MPI_Win_start(group_of(w, peer), 0, w->win), "MPI_Win_start"); }
void be_complete(be_win *w) { ok(MPI_Win_complete(w->win), "MPI_Win_complete"); }
void be_wait(be_win *w) { ok(MPI_Win_wait(w->win), "MPI_Win_wait"); }

void *be_alloc_mem(size_t n) {
    void *p = NULL;
    ok(MPI_Alloc_mem((MPI_Aint)(n ? n : 1), MPI_INFO_NULL, &p), "MPI_Alloc_mem");
    return p;
}

void be_free_mem(void *p) { ok(MPI_Free_mem(p), "MPI_Free_mem"); }
