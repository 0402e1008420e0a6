/* be_cxk.c — the osu.h backend on cxlkit's C API (cxk_msg_*, cxk_win_*). Without
 * CXLKIT_RANK in the environment the program launches its own ranks: it creates the pool
 * (CXLKIT_POOL, else /dev/shm/cxk-osu-<pid>; CXLKIT_SIZE ranks, default 2; CXLKIT_COHERENCE
 * host|none), forks one process per rank (each its own pool host), waits for them and
 * removes the pool. With CXLKIT_RANK/CXLKIT_SIZE set (e.g. one process per guest), it runs
 * as that rank on an existing CXLKIT_POOL. CXLKIT_OSU_BIND=core pins rank r to the r-th CPU
 * it may run on (modulo their count), as `mpiexec -bind-to core` does; unset, no pinning. */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cxlkit.h"
#include "osu.h"

static cxk_pool *pool;
static cxk_comm *comm;
static int rank_, size_;
static char name_[160];

void be_abort(const char *what, int err) {
    fprintf(stderr, "osu (cxlkit) rank %d: %s: %s\n", rank_, what, strerror(err < 0 ? -err : err));
    exit(1);
}

static void ok(int rc, const char *what) {
    if (rc) be_abort(what, rc);
}

static int env_int(const char *name, int dflt) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : dflt;
}

static int coherence(void) {
    const char *v = getenv("CXLKIT_COHERENCE");
    return v && !strcmp(v, "none") ? CXK_COHERENCE_NONE : CXK_COHERENCE_HOST;
}

static cxk_pool *open_pool(const char *path, int host, int nhosts, unsigned flags) {
    struct cxk_pool_opts o;
    cxk_pool_opts_init(&o);
    o.flags = flags;
    o.host_id = host;
    o.max_hosts = (uint32_t)(nhosts < 2 ? 2 : nhosts);
    o.size = (uint64_t)env_int("CXLKIT_POOL_MB", 256 * nhosts) << 20;
    o.coherence = coherence();
    cxk_pool *p = NULL;
    ok(cxk_pool_open(path, &o, &p), path);
    return p;
}

/* CXLKIT_OSU_BIND=core: this rank on one CPU of those allowed (the rank-th, modulo). */
static void bind_rank(int rank) {
    const char *b = getenv("CXLKIT_OSU_BIND");
    if (!b || !*b || !strcmp(b, "none")) return;
    if (strcmp(b, "core")) be_abort("CXLKIT_OSU_BIND: expected core or none", EINVAL);
    cpu_set_t all, one;
    if (sched_getaffinity(0, sizeof all, &all)) be_abort("sched_getaffinity", errno);
    int n = CPU_COUNT(&all), k = rank % (n ? n : 1);
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
        if (!CPU_ISSET(cpu, &all) || k--) continue;
        CPU_ZERO(&one);
        CPU_SET(cpu, &one);
        if (sched_setaffinity(0, sizeof one, &one)) be_abort("sched_setaffinity", errno);
        return;
    }
}

/* The launcher: make the pool, fork the ranks, exit with the first failure. */
static void launch(int nranks) {
    if (nranks < 1 || nranks > CXK_MSG_MAX_RANKS) be_abort("CXLKIT_SIZE out of range", EINVAL);
    char path[128];
    const char *given = getenv("CXLKIT_POOL");
    snprintf(path, sizeof path, "%s", given ? given : "");
    if (!given) snprintf(path, sizeof path, "/dev/shm/cxk-osu-%d", (int)getpid());
    unlink(path);
    cxk_pool_close(open_pool(path, 0, nranks, CXK_POOL_CREATE | CXK_POOL_EXCL));
    fflush(stdout);
    pid_t pids[CXK_MSG_MAX_RANKS];
    for (int r = 0; r < nranks; ++r) {
        pids[r] = fork();
        if (pids[r] < 0) be_abort("fork", errno);
        if (pids[r] == 0) {
            rank_ = r, size_ = nranks;
            pool = open_pool(path, r, nranks, 0);
            return;  /* the child goes on as rank r */
        }
    }
    int status = 0;
    for (int r = 0; r < nranks; ++r) {
        int ws;
        if (waitpid(pids[r], &ws, 0) < 0) be_abort("waitpid", errno);
        if (!status && !(WIFEXITED(ws) && WEXITSTATUS(ws) == 0))
            status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
    }
    unlink(path);
    exit(status);
}

int be_init(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *r = getenv("CXLKIT_RANK");
    if (!r) {
        launch(env_int("CXLKIT_SIZE", 2));
    } else {
        rank_ = atoi(r), size_ = env_int("CXLKIT_SIZE", 2);
        const char *path = getenv("CXLKIT_POOL");
        if (!path) be_abort("CXLKIT_POOL unset", EINVAL);
        pool = open_pool(path, rank_, size_, 0);
    }
    bind_rank(rank_);
    const char *job = getenv("CXLKIT_JOB");
    ok(cxk_msg_init(pool, job ? job : "osu", rank_, size_, NULL, &comm), "cxk_msg_init");
    /* CXLKIT_OSU_CHECKSUM=1: every rank in checksum mode (per-message crc32c), for its cost */
    const int crc = env_int("CXLKIT_OSU_CHECKSUM", 0) != 0;
    if (crc) ok(cxk_msg_set_checksum(comm, 1), "cxk_msg_set_checksum");
    snprintf(name_, sizeof name_, "cxlkit %s (cxk_msg_*, pool coherence %s, eager %llu B%s)",
             cxk_version(), coherence() == CXK_COHERENCE_NONE ? "none" : "host",
             (unsigned long long)cxk_msg_eager_bytes(comm), crc ? ", checksum" : "");
    return rank_;
}

void be_finalize(void) {
    ok(cxk_msg_finalize(comm), "cxk_msg_finalize");
    cxk_pool_close(pool);
}

int be_rank(void) { return rank_; }
int be_size(void) { return size_; }
const char *be_name(void) { return name_; }

double be_wtime(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void be_send(const void *buf, size_t n, int dest, int tag) {
    ok(cxk_msg_send(comm, buf, (int64_t)n, dest, tag, 0), "send");
}

void be_recv(void *buf, size_t n, int src, int tag) {
    ok(cxk_msg_recv(comm, buf, (int64_t)n, src, tag, NULL), "recv");
}

void be_isend(const void *buf, size_t n, int dest, int tag, void *req) {
    cxk_msg_req *q = NULL;
    ok(cxk_msg_isend(comm, buf, (int64_t)n, dest, tag, 0, &q), "isend");
    memcpy(req, &q, sizeof q);
}

void be_irecv(void *buf, size_t n, int src, int tag, void *req) {
    cxk_msg_req *q = NULL;
    ok(cxk_msg_irecv(comm, buf, (int64_t)n, src, tag, &q), "irecv");
    memcpy(req, &q, sizeof q);
}

void be_waitall(int n, void *reqs) {
    cxk_msg_req *q[256];
    for (int done = 0; done < n;) {
        int k = n - done < 256 ? n - done : 256;
        for (int i = 0; i < k; ++i)
            memcpy(&q[i], (char *)reqs + (size_t)(done + i) * BE_REQ_BYTES, sizeof q[i]);
        ok(cxk_msg_waitall(comm, (size_t)k, q, NULL), "waitall");
        done += k;
    }
}

void be_barrier(void) { ok(cxk_msg_barrier(comm), "barrier"); }

be_win *be_win_create(size_t nbytes, void **base) {
    cxk_win *w = NULL;
    ok(cxk_win_create(comm, nbytes, &w), "cxk_win_create");
    *base = cxk_win_base(w);
    return (be_win *)w;
}

void be_win_free(be_win *w) { ok(cxk_win_free((cxk_win *)w), "cxk_win_free"); }

void be_put(be_win *w, const void *buf, size_t n, int target, size_t off) {
    ok(cxk_win_put((cxk_win *)w, buf, n, target, off), "put");
}

void be_get(be_win *w, void *buf, size_t n, int target, size_t off) {
    ok(cxk_win_get((cxk_win *)w, buf, n, target, off), "get");
}

void be_fence(be_win *w) { ok(cxk_win_fence((cxk_win *)w), "fence"); }
void be_post(be_win *w, int peer) { ok(cxk_win_post((cxk_win *)w, &peer, 1), "post"); }
void be_start(be_win *w, int peer) { ok(cxk_win_start((cxk_win *)w, &peer, 1), "start"); }
void be_complete(be_win *w) { ok(cxk_win_complete((cxk_win *)w), "complete"); }
void be_wait(be_win *w) { ok(cxk_win_wait((cxk_win *)w), "wait"); }

void *be_alloc_mem(size_t n) {
    void *p = NULL;
    ok(cxk_msg_alloc_mem(comm, n ? n : 1, &p), "cxk_msg_alloc_mem");
    return p;
}

void be_free_mem(void *p) { ok(cxk_msg_free_mem(comm, p), "cxk_msg_free_mem"); }
