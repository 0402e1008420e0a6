/* boot.c — MPI_Init / MPI_Init_thread / MPI_Finalize: the configuration (rank 0's
 * environment, broadcast so every rank decides alike), the pool and the engine's job over
 * PMPI (ranks and size of the world, the job id from PMPI_Bcast, agreement by
 * PMPI_Allreduce), the banner, the counters, and the error helpers. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE  /* dladdr */
#endif
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "mpi/shim.h"

/* How long a rank other than 0 of an Open MPI program running the MPICH build waits for
 * Open MPI's launcher to end the job once rank 0 has said so (check_mpi). */
#define WRONG_MPI_WAIT_S 20
/* The head start rank 0 gets under other launchers. */
#define WRONG_MPI_LEAD_S 2

#if defined(OPEN_MPI)
#define SHIM_MPI "Open MPI"
#define SHIM_LIB "libcxlkit_mpi_openmpi.so"
#define OTHER_MPI "MPICH"
#define OTHER_LIB "libcxlkit_mpi_mpich.so"
#elif defined(MPI_ABI_VERSION)
#define SHIM_MPI "MPI (standard ABI)"
#elif defined(MPICH)
#define SHIM_MPI "MPICH"
#define SHIM_LIB "libcxlkit_mpi_mpich.so"
#define OTHER_MPI "Open MPI"
#define OTHER_LIB "libcxlkit_mpi_openmpi.so"
#else
#define SHIM_MPI "MPI"
#endif

struct shim_state g = {.next_ctx = CXK_MSG_CTX_FIRST};

/* Rank 0's view of the environment; every rank uses it (one decision for the job). */
struct shim_config {
    int enabled;             /* CXLKIT_MPI (default 1; 0 = route nothing) */
    int comms;               /* CXLKIT_MPI_COMMS bits: 1 world, 2 derived; all (default) 3,
                                world 1, derived 2 (world stays on MPI), none 0 */
    int verbose;             /* CXLKIT_MPI_VERBOSE: banner on rank 0 */
    int stats;               /* CXLKIT_MPI_STATS: counters of every rank at MPI_Finalize */
    int coherence;           /* CXLKIT_MPI_COHERENCE host|none; -1 auto */
    int same_host;           /* CXLKIT_MPI_SAME_HOST pool 1, mpi 0; -1 auto (pool if coherent) */
    int explicit_pool;       /* CXLKIT_MPI_POOL given */
    uint64_t eager;          /* CXLKIT_MPI_EAGER bytes; 0 the engine's default */
    uint64_t mib_per_rank;   /* CXLKIT_MPI_POOL_MB: pool bytes per rank (created pools) */
    uint64_t host_hash;      /* rank 0's host */
    char hosts[1024];        /* CXLKIT_MPI_HOSTS: a host label per world rank, or "rank" */
    char nopool[256];        /* CXLKIT_MPI_NOPOOL: host labels whose ranks map no pool */
    char pool[256];
    char job[CXK_MSG_JOB_MAX + 1];
    char refused[192];       /* the first malformed CXLKIT_MPI* value (the table's message) */
};

static uint64_t env_u64(const char *name, uint64_t dflt) {
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    char *end;
    unsigned long long x = strtoull(v, &end, 0);
    return *end ? dflt : (uint64_t)x;
}

static uint64_t fnv(uint64_t x, const char *p) {
    for (; *p; ++p) x = (x ^ (uint8_t)*p) * 1099511628211ull;  /* FNV-1a */
    return x;
}

static uint64_t host_hash(void) {
    char h[256] = {0};
    gethostname(h, sizeof h - 1);
    return fnv(1469598103934665603ull, h);
}

/* Entry k of a comma-separated list into out ("" past its end). */
static void list_at(const char *list, int k, char *out, size_t n) {
    const char *p = list;
    for (; k > 0 && p; --k) p = (p = strchr(p, ',')) ? p + 1 : NULL;
    out[0] = 0;
    if (!p) return;
    size_t len = strcspn(p, ",");
    if (len >= n) len = n - 1;
    memcpy(out, p, len);
    out[len] = 0;
}

static int list_has(const char *list, const char *x) {
    char e[64];
    for (int k = 0;; ++k) {
        list_at(list, k, e, sizeof e);
        if (!e[0]) return 0;
        if (!strcmp(e, x)) return 1;
    }
}

/* This rank's host label (CXLKIT_MPI_HOSTS, which lets one machine stand for several hosts
 * in tests; "rank": every rank a host of its own) into label; its hash. */
static uint64_t my_host(const struct shim_config *c, char *label, size_t n) {
    if (!strcmp(c->hosts, "rank")) snprintf(label, n, "%d", g.rank);
    else if (c->hosts[0]) list_at(c->hosts, g.rank, label, n);
    else {
        /* the hostname, as the MPI's launchers (Hydra, ORTE) tell nodes apart: two network
         * namespaces with their own hostnames are two hosts to the MPI and to the shim */
        label[0] = 0;
        gethostname(label, n - 1);
        return host_hash();
    }
    return fnv(1469598103934665603ull ^ 0x5a, label);
}

/* The list names a host for every rank (the same answer on every rank). */
static int hosts_cover(const char *hosts) {
    char e[64];
    if (!hosts[0] || !strcmp(hosts, "rank")) return 1;
    list_at(hosts, g.size - 1, e, sizeof e);
    return e[0] != 0;
}

/* Every variable of the shim through libcxlkit's table: a malformed one turns the shim off
 * (one line on rank 0) rather than running on its default. */
static void check_config(struct shim_config *c) {
    static const char *const names[] = {"CXLKIT_MPI", "CXLKIT_MPI_COMMS", "CXLKIT_MPI_VERBOSE",
                                        "CXLKIT_MPI_STATS", "CXLKIT_MPI_COHERENCE",
                                        "CXLKIT_MPI_EAGER", "CXLKIT_MPI_POOL_MB",
                                        "CXLKIT_MPI_POOL", "CXLKIT_MPI_RMA",
                                        "CXLKIT_MPI_SAME_HOST"};
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !c->refused[0]; i++)
        if (cxk_config_check(names[i], c->refused, sizeof c->refused) != -EINVAL)
            c->refused[0] = 0;
}

static void read_config(struct shim_config *c) {
    memset(c, 0, sizeof *c);
    check_config(c);
    c->enabled = env_u64("CXLKIT_MPI", 1) != 0;
    const char *comms = getenv("CXLKIT_MPI_COMMS");
    c->comms = !comms || !strcmp(comms, "all") ? 3 : !strcmp(comms, "world") ? 1
               : !strcmp(comms, "derived")     ? 2 : 0;
    c->verbose = env_u64("CXLKIT_MPI_VERBOSE", 0) != 0;
    c->stats = env_u64("CXLKIT_MPI_STATS", 0) != 0;
    const char *coh = getenv("CXLKIT_MPI_COHERENCE");
    c->coherence = !coh || !*coh || !strcmp(coh, "auto") ? -1
                   : !strcmp(coh, "none")                 ? CXK_COHERENCE_NONE
                                                          : CXK_COHERENCE_HOST;
    const char *same = getenv("CXLKIT_MPI_SAME_HOST");
    c->same_host = !same || !*same || !strcmp(same, "auto") ? -1 : !strcmp(same, "pool");
    c->eager = env_u64("CXLKIT_MPI_EAGER", 0);
    /* rendezvous buffers come out of a rank's part: OSU bw at 4 MiB (64 in flight) ran at
     * ~410 MB/s with 256 MiB a rank (buffers exhausted, sends waiting), 1400-2700 with 1024 */
    c->mib_per_rank = env_u64("CXLKIT_MPI_POOL_MB", 1024);
    c->host_hash = host_hash();
    const char *hosts = getenv("CXLKIT_MPI_HOSTS"), *nopool = getenv("CXLKIT_MPI_NOPOOL");
    snprintf(c->hosts, sizeof c->hosts, "%s", hosts ? hosts : "");
    snprintf(c->nopool, sizeof c->nopool, "%s", nopool ? nopool : "");
    /* a job id nobody else has: the pid and the clock of rank 0 */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(c->job, sizeof c->job, "mpi-%d-%llx", (int)getpid(),
             (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec);
    const char *pool = getenv("CXLKIT_MPI_POOL");
    c->explicit_pool = pool && *pool;
    if (c->explicit_pool && strlen(pool) >= sizeof c->pool) c->enabled = 0;
    /* default: anonymous memory of rank 0 (a memfd the others open through /proc), so a
     * job leaves no file behind however it ends */
    if (c->explicit_pool) snprintf(c->pool, sizeof c->pool, "%s", pool);
    else snprintf(c->pool, sizeof c->pool, "memfd:cxlkit-%s", c->job);
}

static void off(const char *why, int loud) {
    g.on = 0;
    snprintf(g.why_off, sizeof g.why_off, "%s", why);
    if (g.rank == 0 && (loud || g.verbose)) fprintf(stderr, "cxlkit-mpi: off: %s\n", why);
}

/* MIN over the world of ok (1/0): every rank learns whether all could. */
static int all_ok(int ok) {
    int all = 0;
    if (PMPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD) != MPI_SUCCESS) return 0;
    return all;
}

static int open_pool(const struct shim_config *c, const char *path, int coherence, int create) {
    struct cxk_pool_opts o;
    cxk_pool_opts_init(&o);
    o.host_id = g.rank;
    o.coherence = coherence;
    if (create) {
        /* Pods are known only once every pool is open, so the size covers every rank of the
         * job; overcommitted, the file stays sparse and each extent is reserved when the
         * engine claims it: a pod's pool takes the memory its own ranks' rings use. */
        o.flags = CXK_POOL_CREATE | CXK_POOL_OVERCOMMIT;
        o.max_hosts = (uint32_t)(g.size < 2 ? 2 : g.size);
        o.size = c->mib_per_rank * o.max_hosts << 20;
    }
    return cxk_pool_open(path, &o, &g.pool);
}

/* The path this rank opens: its own CXLKIT_MPI_POOL when rank 0 named one and this rank's
 * environment has one too (hosts may see one device under different names), else rank 0's;
 * without a name, the memfd of the rank that created it (bpath). */
static void pool_path(const struct shim_config *c, const char *bpath, char *out, size_t n) {
    const char *mine = getenv("CXLKIT_MPI_POOL");
    if (c->explicit_pool && mine && *mine && strlen(mine) < n) snprintf(out, n, "%s", mine);
    else snprintf(out, n, "%s", bpath);
}

/* Open the pool this rank's host maps. One path may name a different pool in each pod, so
 * ranks open in rounds: the lowest rank still to open creates its host's (or opens it), then
 * every rank still to open tries its path without creating: the ranks of the leader's pod find
 * that pool, those of other pods whose pool is not there yet (-ENOENT) wait for a round led by
 * one of theirs. Each round takes at least its leader out, so there are at most as many rounds
 * as ranks. A rank whose pool cannot be opened goes to the MPI's network for every other
 * host (one line with CXLKIT_MPI_VERBOSE). 0, or -errno of this rank's failure. */
static int open_rounds(const struct shim_config *c, int coherence, int maps_pool) {
    int todo = maps_pool, rc = -ENOENT;
    char bpath[sizeof c->pool], path[sizeof c->pool];
    pool_path(c, c->pool, path, sizeof path);
    for (int round = 0; round < g.size; ++round) {
        int want = todo ? g.rank : g.size, lead = g.size;
        PMPI_Allreduce(&want, &lead, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
        if (lead == g.size) break;
        snprintf(bpath, sizeof bpath, "%s", c->pool);
        if (g.rank == lead) {
            pool_path(c, c->pool, path, sizeof path);
            rc = open_pool(c, path, coherence, 1), todo = 0;
            if (!rc && !c->explicit_pool)
                snprintf(bpath, sizeof bpath, "/proc/%d/fd/%d", (int)getpid(), cxk_pool_fd(g.pool));
        }
        PMPI_Bcast(bpath, (int)sizeof bpath, MPI_CHAR, lead, MPI_COMM_WORLD);
        if (todo) {
            pool_path(c, bpath, path, sizeof path);
            rc = open_pool(c, path, coherence, 0);
            todo = rc == -ENOENT && c->explicit_pool;
        }
    }
    if (rc && maps_pool && g.verbose)
        fprintf(stderr, "cxlkit-mpi: rank %d: pool %s: %s: MPI's network to every other host\n",
                g.rank, path, strerror(-rc));
    return maps_pool ? rc : -ENOENT;
}

/* The pools: every rank that maps one opens its host's (open_rounds); ranks learn which pool
 * each opened from its uuid (routes.c: pods), and the ranks of each pod join one engine job
 * on their pool, all pods at once (each join waits only for its own pod's ranks, within
 * join_ms). NULL or a reason (off). */
static const char *join(const struct shim_config *c, int coherence, int maps_pool, char *why,
                        size_t n) {
    const int rc0 = open_rounds(c, coherence, maps_pool);
    struct cxk_pool_stat ps;
    memset(&ps, 0, sizeof ps);
    const int opened = rc0 == 0 && cxk_pool_stat(g.pool, &ps) == 0;
    const int erank = shim_engine_ranks(ps.uuid, opened);
    if (erank < 0 && g.pool) cxk_pool_close(g.pool), g.pool = NULL;  /* no peer through it */
    if (!all_ok(g.w2e != NULL) || !shim_pool_pairs()) {
        if (maps_pool && rc0) snprintf(why, n, "pool %s: %s", c->pool, strerror(-rc0));
        else snprintf(why, n, "pool %s: no two hosts could open one pool", c->pool);
        return why;
    }
    int rc = 0;
    if (erank >= 0) {
        struct cxk_msg_opts mo;
        cxk_msg_opts_init(&mo);
        mo.eager_bytes = c->eager;
        mo.join_ms = 30000;
        mo.domain = shim_domain();
        rc = cxk_msg_init(g.pool, c->job, erank, g.esize, &mo, &g.eng);
    }
    if (!all_ok(rc == 0)) {
        if (g.eng) cxk_msg_finalize(g.eng), g.eng = NULL;
        if (g.pool) cxk_pool_close(g.pool), g.pool = NULL;
        snprintf(why, n, "joining job %s on %s failed%s%s", c->job, c->pool, rc ? ": " : "",
                 rc ? strerror(-rc) : "");
        return why;
    }
    return NULL;
}

static int world_maps(void) {
    g.world.comm = MPI_COMM_WORLD;
    g.world.held = MPI_COMM_NULL;
    g.world.ctx = 0;
    g.world.size = g.size;
    g.world.to_world = malloc(sizeof(int) * (size_t)g.size);
    g.world.from_world = malloc(sizeof(int) * (size_t)g.size);
    if (!g.world.to_world || !g.world.from_world) return 0;
    for (int i = 0; i < g.size; ++i) g.world.to_world[i] = g.world.from_world[i] = i;
    return shim_routes_fill(&g.world);
}

/* Every rank of the job started on this node, by the count of this MPI's own launcher (Open
 * MPI's OMPI_COMM_WORLD_LOCAL_SIZE, Hydra's MPI_LOCALNRANKS equal to the job's size; the
 * launcher sets it in every rank it starts, over what the rank inherited), and no host labels
 * (CXLKIT_MPI_HOSTS) to say otherwise: the same answer on every rank, known without a
 * message. */
static int one_node_by_launcher(void) {
    const char *labels = getenv("CXLKIT_MPI_HOSTS");
    if (g.size < 2 || (labels && *labels)) return 0;
#if defined(OPEN_MPI)
    static const char *const names[] = {"OMPI_COMM_WORLD_LOCAL_SIZE"};
#elif defined(MPICH) && !defined(MPI_ABI_VERSION)
    static const char *const names[] = {"MPI_LOCALNRANKS"};
#else
    static const char *const names[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"};
#endif
    for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i) {
        const char *v = getenv(names[i]);
        if (!v || *v < '0' || *v > '9') continue;
        char *end;
        errno = 0;
        const long n = strtol(v, &end, 10);
        return !*end && !errno && n == g.size;
    }
    return 0;
}

static void boot(int provided) {
    struct shim_config c;
    PMPI_Comm_rank(MPI_COMM_WORLD, &g.rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &g.size);
    /* One node: the shim routes nothing, so it sends nothing either. Every rank reads its own
     * environment (a launcher gives every rank the same) instead of rank 0's broadcast: one
     * message at start shifts the MPI's own shared-memory queues, and Open MPI's 2-rank
     * barrier then ran 0.02-0.07 us (12-18 %) slower for the whole job. */
    const int one_node = one_node_by_launcher();
    if (one_node) read_config(&c);
    else {
        if (g.rank == 0) read_config(&c);
        PMPI_Bcast(&c, (int)sizeof c, MPI_BYTE, 0, MPI_COMM_WORLD);
    }
    g.verbose = c.verbose, g.stats = c.stats;
    g.route_world = (c.comms & 1) != 0, g.route_derived = (c.comms & 2) != 0;
    snprintf(g.job, sizeof g.job, "%s", c.job);
    snprintf(g.pool_path, sizeof g.pool_path, "%s", c.pool);
    if (c.refused[0]) {
        off(c.refused, 1);
        return;
    }
    if (!c.enabled) {
        off("CXLKIT_MPI=0: every call goes to " SHIM_MPI, 0);
        return;
    }
    if (!c.comms) {
        off("CXLKIT_MPI_COMMS=none: every call goes to " SHIM_MPI, 0);
        return;
    }
    if (provided == MPI_THREAD_MULTIPLE) {  /* the same on every rank: the same Init_thread */
        off("MPI_THREAD_MULTIPLE: the shim serves one thread at a time, so every call goes "
            "to " SHIM_MPI, 1);
        return;
    }
    if (!hosts_cover(c.hosts)) {
        off("CXLKIT_MPI_HOSTS names fewer hosts than there are ranks", 1);
        return;
    }
    if (one_node) {
        off("no two ranks on different hosts share the pool: every peer stays on " SHIM_MPI
            "'s own path", 0);
        return;
    }
    char label[64];
    const uint64_t host = my_host(&c, label, sizeof label);
    const int maps_pool = !list_has(c.nopool, label);
    if (!shim_topology(host, maps_pool)) {
        shim_routes_free();
        off("no two ranks on different hosts share the pool: every peer stays on " SHIM_MPI
            "'s own path", 0);
        return;
    }
    if (g.size > CXK_POOL_MAX_HOSTS) {
        char why[96];
        snprintf(why, sizeof why, "%d ranks: a pool has at most %d hosts", g.size,
                 CXK_POOL_MAX_HOSTS);
        shim_routes_free();
        off(why, 1);
        return;
    }
    const int one_host = all_ok(host_hash() == c.host_hash);
    if (!one_host && !c.explicit_pool) {
        shim_routes_free();
        off("ranks on several hosts and CXLKIT_MPI_POOL unset: no pool they share", 1);
        return;
    }
    const int coherence = c.coherence >= 0 ? c.coherence
                          : one_host        ? CXK_COHERENCE_HOST
                                            : CXK_COHERENCE_NONE;
    /* peers of one host through the pool where it is coherent: there it beat the MPI's own
     * shared memory (no rank waits on two transports); on coherence none the MPI's path
     * did (docs/mpi-shim.md, "Peers on one host") */
    shim_routes_same_host(c.same_host >= 0 ? c.same_host : coherence == CXK_COHERENCE_HOST);
    char why[sizeof g.why_off];
    const char *fail = join(&c, coherence, maps_pool, why, sizeof why);
    if (!fail && !all_ok(world_maps())) fail = "out of memory";
    if (fail) {
        if (g.eng) cxk_msg_finalize(g.eng), g.eng = NULL;
        if (g.pool) cxk_pool_close(g.pool), g.pool = NULL;
        shim_routes_free();
        off(fail, 1);
        return;
    }
    g.on = 1;
    int on_pools = 0;
    const int pods = shim_pods(&on_pools);
    char where[48];
    if (pods == 1) snprintf(where, sizeof where, "%d on the pool", on_pools);
    else snprintf(where, sizeof where, "%d on the pools of %d pods", on_pools, pods);
    if (g.rank == 0 && g.verbose)
        fprintf(stderr,
                "cxlkit-mpi: on: %s, %d ranks (%s), pool %s (coherence %s), job %s, "
                "eager %llu B, communicators %s\n",
                SHIM_MPI, g.size, where, c.pool,
                coherence == CXK_COHERENCE_NONE ? "none" : "host", c.job,
                (unsigned long long)(g.eng ? cxk_msg_eager_bytes(g.eng) : 0),
                g.route_world && g.route_derived ? "world and derived"
                : g.route_world                  ? "world only"
                                                 : "derived only (world on " SHIM_MPI ")");
}

/* The shim was built against one MPI's mpi.h (MPICH's handles are integers, Open MPI's
 * pointers): preloaded into a program of the other, its first PMPI call would pass handles of
 * the wrong kind (a segfault in MPI_Init, or "Invalid communicator"), and no call of it can
 * step aside safely (its Fortran bindings and status layout are the other MPI's). So before
 * anything reaches the MPI: the library that serves PMPI_Init to this process is Open MPI's
 * when it defines ompi_mpi_comm_world; on a mismatch one line (from the launcher's rank 0)
 * says which build to preload, and the process exits with status 1. The standard-ABI build
 * serves any MPI that implements the ABI: nothing to check. */
static void check_mpi(void) {
#if defined(SHIM_LIB)
    Dl_info di;
    void *f = dlsym(RTLD_DEFAULT, "PMPI_Init");
    if (!f || !dladdr(f, &di) || !di.dli_fname) return;
    void *h = dlopen(di.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
    if (!h) return;
    const int ompi = dlsym(h, "ompi_mpi_comm_world") != NULL;
    dlclose(h);
#if defined(OPEN_MPI)
    if (ompi) return;
#else
    if (!ompi) return;
#endif
    const char *r = getenv("PMI_RANK");
    if (!r) r = getenv("OMPI_COMM_WORLD_RANK");
    if (!r || !strcmp(r, "0")) {
        fprintf(stderr,
                "cxlkit-mpi: wrong MPI: this is the shim built for " SHIM_MPI " (" SHIM_LIB
                ") but the program runs " OTHER_MPI " (%s); preload " OTHER_LIB
                " instead (exiting)\n",
                di.dli_fname);
        exit(1);
    }
    /* Another rank leaves the saying to rank 0, and waits (bounded) before it exits, so that
     * its exit does not end the job before rank 0 has said why (seen on a loaded machine:
     * the job failed without a word). Open MPI's launcher ends the whole job when any rank
     * exits non-zero: there the others wait for it to end them once rank 0 has exited with
     * its line. MPICH's Hydra forwards rank 0's line and waits for every rank, but it can
     * die of SIGPIPE when the ranks' exits race its forwarding: there they give rank 0 a
     * head start. */
    const int tenths = 10 * (getenv("OMPI_COMM_WORLD_RANK") ? WRONG_MPI_WAIT_S : WRONG_MPI_LEAD_S);
    for (int i = 0; i < tenths; ++i) {
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    exit(1);
#endif
}

int MPI_Init(int *argc, char ***argv) {
    check_mpi();
    int rc = PMPI_Init(argc, argv);
    if (rc == MPI_SUCCESS) boot(MPI_THREAD_SINGLE);
    return rc;
}

int MPI_Init_thread(int *argc, char ***argv, int required, int *provided) {
    check_mpi();
    int rc = PMPI_Init_thread(argc, argv, required, provided);
    if (rc == MPI_SUCCESS) boot(*provided);
    return rc;
}

/* Traffic per route (CXLKIT_MPI_STATS): what a measurement across hosts reads to see that
 * each route carried what it should. */
static void print_stats(void) {
    const struct shim_stats *s = &g.st;
    fprintf(stderr,
            "cxlkit-mpi: rank %d: %s: pool %llu sends %llu B, %llu receives %llu B; " SHIM_MPI
            "'s path %llu sends, %llu receives (peers on this host or off the pool, "
            "communicators not routed); %llu packed; collectives %llu through the pool, %llu "
            "polled\n",
            g.rank, g.on ? "on" : "off", (unsigned long long)s->pool_sends,
            (unsigned long long)s->pool_send_bytes, (unsigned long long)s->pool_recvs,
            (unsigned long long)s->pool_recv_bytes, (unsigned long long)s->mpi_sends,
            (unsigned long long)s->mpi_recvs, (unsigned long long)s->packed,
            (unsigned long long)s->coll_pool, (unsigned long long)s->coll_mpi);
    fprintf(stderr,
            "cxlkit-mpi: rank %d: sends by route: self-MPI %llu messages %llu B, pool %llu "
            "messages %llu B, network %llu messages %llu B, not routed %llu\n",
            g.rank, (unsigned long long)s->host_sends, (unsigned long long)s->host_send_bytes,
            (unsigned long long)s->pool_sends, (unsigned long long)s->pool_send_bytes,
            (unsigned long long)s->net_sends, (unsigned long long)s->net_send_bytes,
            (unsigned long long)s->unrouted_sends);
    fprintf(stderr,
            "cxlkit-mpi: rank %d: pool memory: %llu MPI_Alloc_mem blocks (%llu from the MPI: "
            "partition full), %llu one-copy sends\n",
            g.rank, (unsigned long long)s->mem_blocks, (unsigned long long)s->mem_fallbacks,
            (unsigned long long)s->one_copy_sends);
    shim_rma_print_stats();
}

int MPI_Finalize(void) {
    if (g.on) {
        slots_drain_detached(1);
        shim_mpi_copies_drain(1);
        if (g.stats) print_stats();
        int rc = g.eng ? cxk_msg_finalize(g.eng) : 0;
        if (rc) shim_err(rc, "finalize");
        if (g.pool) cxk_pool_close(g.pool);
        g.eng = NULL, g.pool = NULL, g.on = 0;
        shim_comms_free_all();
        free(g.world.to_world), free(g.world.from_world), free(g.world.route), free(g.world.q);
        g.world.to_world = g.world.from_world = NULL, g.world.route = NULL, g.world.q = NULL;
        shim_routes_free();
    } else if (g.stats) {
        print_stats();
    }
    return PMPI_Finalize();
}

int shim_err(int neg, const char *what) {
    switch (neg) {
        case 0: return MPI_SUCCESS;
        case -EMSGSIZE: return MPI_ERR_TRUNCATE;
        case -ENOMEM: return MPI_ERR_NO_MEM;
        default: break;
    }
    const int peer = g.eng ? cxk_msg_failed_rank(g.eng) : -1;
    fprintf(stderr, "cxlkit-mpi: rank %d: %s: %s", g.rank, what, strerror(-neg));
    if (peer >= 0) fprintf(stderr, " (rank %d of MPI_COMM_WORLD)", peer);
    fputc('\n', stderr);
    return neg == -EINVAL ? MPI_ERR_ARG : MPI_ERR_OTHER;
}

int shim_fail(MPI_Comm comm, int err) {
    if (err != MPI_SUCCESS) PMPI_Comm_call_errhandler(comm, err);
    return err;
}
