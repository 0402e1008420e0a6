/* routes.c — the route to each peer, decided once at MPI_Init from the job's topology:
 *  - a peer on another host that maps the same pool goes through the pool;
 *  - a peer on this host (same hostname, as the MPI's launcher tells nodes apart) goes through
 *    the pool too when this rank's pool spans hosts and is coherent, or with
 *    CXLKIT_MPI_SAME_HOST=pool (its rings skip the flushes: one machine's caches agree), else
 *    it stays on the MPI's own path (its single-copy shared memory);
 *  - any other peer uses the MPI's network.
 * A job may span several pods, each with a pool of its own at one path (the same
 * CXLKIT_MPI_POOL names a different pool on each pod's hosts): ranks tell pools apart by the
 * uuid in the pool's header, and a rank's engine spans its pod's ranks (boot.c joins one per
 * pool). A pair of ranks always uses one route, so non-overtaking per pair is each transport's own;
 * matching across routes (ANY_SOURCE, probes) is anysrc.c's. Every rank computes the same
 * tables from three PMPI_Allgathers, so decisions that must agree (how a collective runs) do. */
#include <stdlib.h>
#include <string.h>

#include "mpi/shim.h"

static uint8_t *maps;  /* [size]: the rank means to map a pool (its host is not NOPOOL) */
static int *pod;       /* [size]: the lowest world rank of the rank's pod (the ranks on other
                          hosts that opened a pool of the same uuid), -1: on no pool */
static int same_host;  /* peers of one host and pod talk through the pool (shim_routes_same_host) */

/* The identity of the pool a rank opened, as every rank gathers it. */
struct pool_id {
    uint8_t uuid[16];
    uint8_t open;
    uint8_t pad[7];
};

/* Tell the wait policy how many of the job's ranks share this kernel's CPUs: a launcher
 * counts ranks per hostname, so hosts that are namespaces of one machine would each look
 * uncrowded while their ranks together outnumber the CPUs (spins then hold the CPU a
 * job-mate needs). One more Allgather at start-up. */
static void count_kernel_ranks(uint64_t *all) {
    uint64_t mine = cxk_boot_hash();
    PMPI_Allgather(&mine, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD);
    long same = 0;
    for (int i = 0; i < g.size; ++i) same += mine != 0 && all[i] == mine;
    cxk_spin_set_local_ranks(same);
    shim_cpus_check(all);
}

void shim_routes_same_host(int on) { same_host = on != 0; }

int shim_topology(uint64_t my_host, int maps_pool) {
    g.host = malloc(sizeof *g.host * (size_t)g.size);
    maps = malloc((size_t)g.size);
    uint64_t *boots = malloc(sizeof *boots * (size_t)g.size);
    int ok = g.host && maps && boots, all = 0;
    PMPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all) return free(boots), 0;
    uint8_t mine = (uint8_t)(maps_pool != 0);
    PMPI_Allgather(&my_host, 1, MPI_UINT64_T, g.host, 1, MPI_UINT64_T, MPI_COMM_WORLD);
    PMPI_Allgather(&mine, 1, MPI_UINT8_T, maps, 1, MPI_UINT8_T, MPI_COMM_WORLD);
    count_kernel_ranks(boots);
    free(boots);
    for (int i = 0; i < g.size; ++i)
        for (int j = i + 1; j < g.size; ++j)
            if (maps[i] && maps[j] && g.host[i] != g.host[j]) return 1;
    return 0;
}

/* pod[] from every rank's pool identity: ranks that opened pools of one uuid form a pod when
 * two of them are on different hosts (a pool only one host maps carries nothing: its ranks
 * talk to each other on the MPI's own path). The uuid is the pool header's, untrusted: two
 * pools claiming one uuid make one pod whose engine cannot assemble, and joining it gives up
 * after its bound (boot.c turns routing off). */
static void find_pods(const struct pool_id *id) {
    for (int i = 0; i < g.size; ++i) {
        pod[i] = -1;
        for (int j = 0; j < g.size && pod[i] < 0 && id[i].open; ++j)
            if (id[j].open && !memcmp(id[i].uuid, id[j].uuid, sizeof id[i].uuid))
                pod[i] = j;  /* the lowest rank of its pool */
    }
    for (int i = 0; i < g.size; ++i) {
        int spans = 0;
        for (int j = 0; j < g.size && !spans && pod[i] >= 0; ++j)
            spans = pod[j] == pod[i] && g.host[j] != g.host[i];
        if (!spans) pod[i] = -2;  /* its pool's ranks are all on its host */
    }
    for (int i = 0; i < g.size; ++i)
        if (pod[i] < -1) pod[i] = -1;
}

int shim_engine_ranks(const uint8_t uuid[16], int ok) {
    struct pool_id mine = {{0}, (uint8_t)(ok != 0), {0}};
    if (ok) memcpy(mine.uuid, uuid, sizeof mine.uuid);
    struct pool_id *id = malloc(sizeof *id * (size_t)g.size);
    if (!pod) pod = malloc(sizeof *pod * (size_t)g.size);
    g.w2e = malloc(sizeof(int) * (size_t)g.size);
    g.e2w = malloc(sizeof(int) * (size_t)g.size);
    const int fine = id && pod && g.w2e && g.e2w;
    int all = 0;
    PMPI_Allreduce(&fine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all) {
        free(id), free(g.w2e), free(g.e2w);
        g.w2e = g.e2w = NULL;
        return -1;
    }
    PMPI_Allgather(&mine, (int)sizeof mine, MPI_BYTE, id, (int)sizeof mine, MPI_BYTE,
                   MPI_COMM_WORLD);
    find_pods(id);
    free(id);
    /* this rank's engine: the ranks of its pod, in world order */
    g.esize = 0;
    for (int i = 0; i < g.size; ++i) {
        const int in = pod[g.rank] >= 0 && pod[i] == pod[g.rank];
        g.w2e[i] = in ? g.esize : -1;
        if (in) g.e2w[g.esize++] = i;
    }
    return g.w2e[g.rank];
}

/* World ranks a and b talk through the pool. */
static int pool_pair(int a, int b);

int shim_pool_pairs(void) {
    for (int i = 0; i < g.size; ++i)
        for (int j = i + 1; j < g.size; ++j)
            if (pool_pair(i, j)) return 1;
    return 0;
}

int shim_pods(int *ranks) {
    int pods = 0;
    *ranks = 0;
    for (int i = 0; pod && i < g.size; ++i) {
        pods += pod[i] == i;
        *ranks += pod[i] >= 0;
    }
    return pods;
}

void shim_routes_free(void) {
    free(g.host), free(g.w2e), free(g.e2w), free(maps), free(pod);
    g.host = NULL, g.w2e = g.e2w = NULL, maps = NULL, pod = NULL;
    g.esize = 0;
}

/* World ranks a and b talk through the pool: one pool's, on different hosts, or on one host
 * when same_host (a pod's ranks then all talk through it: no rank waits on two transports,
 * and the engine's rings between ranks of one host skip the flushes, cxk_msg_opts.domain). */
static int pool_pair(int a, int b) {
    return a != b && pod[a] >= 0 && pod[a] == pod[b] && (same_host || g.host[a] != g.host[b]);
}

uint32_t shim_domain(void) {
    int first = g.rank;
    for (int i = 0; i < g.size && first == g.rank; ++i)
        if (g.host[i] == g.host[g.rank]) first = i;
    return (uint32_t)first + 1;
}

/* How comm's collectives run, the same on every member (pod[] and host[] are the same on
 * every rank): through the pool when every member is of one pod (so every member is in one
 * engine); polled when some pair of it talks through a pool (a member may owe a peer a
 * control cell, coll.c); else straight to the MPI. */
static int coll_mode(const struct shim_comm *sc) {
    int pairs = 0, one_pod = 1;
    for (int i = 0; i < sc->size && !pairs; ++i)
        for (int j = i + 1; j < sc->size && !pairs; ++j)
            pairs = pool_pair(sc->to_world[i], sc->to_world[j]);
    if (!pairs) return COLL_MPI;
    const int p = pod[sc->to_world[0]];
    for (int i = 1; i < sc->size; ++i) one_pod &= pod[sc->to_world[i]] == p;
    return one_pod ? COLL_POOL : COLL_POLLED;
}

int shim_routes_fill(struct shim_comm *sc) {
    sc->route = calloc((size_t)sc->size, 1);
    if (!sc->route) return 0;
    int others = 0, me = -1;
    sc->npool = 0;
    for (int r = 0; r < sc->size; ++r) {
        const int w = sc->to_world[r];
        if (w == g.rank) me = r;
        else if (pool_pair(g.rank, w)) sc->route[r] = 1, ++sc->npool, ++others;
    }
    /* messages to oneself go with the others when they all take the pool (one route: the
     * communicator is the pool's alone, as before there were routes per peer) */
    if (me >= 0 && sc->size > 1 && others == sc->size - 1) sc->route[me] = 1, ++sc->npool;
    sc->mixed = sc->npool > 0 && sc->npool < sc->size;
    sc->coll = coll_mode(sc);
    return 1;
}

/* The MPI's sends by the peer's route, so CXLKIT_MPI_STATS shows which way each pair went:
 * the MPI's own path on this host, or its network to another host (off this rank's pod). */
void shim_count_mpi_send(MPI_Comm comm, int dest, int count, MPI_Datatype dt) {
    const struct shim_comm *sc = shim_comm_of(comm);
    int tsize = 0;
    ++g.st.mpi_sends;
    if (dest == MPI_PROC_NULL) return;
    if (!sc || dest < 0 || dest >= sc->size) {
        ++g.st.unrouted_sends;
        return;
    }
    if (count > 0 && PMPI_Type_size(dt, &tsize) != MPI_SUCCESS) tsize = 0;
    const uint64_t bytes = count > 0 && tsize > 0 ? (uint64_t)count * (uint64_t)tsize : 0;
    if (g.host[sc->to_world[dest]] == g.host[g.rank]) {
        ++g.st.host_sends;
        g.st.host_send_bytes += bytes;
    } else {
        ++g.st.net_sends;
        g.st.net_send_bytes += bytes;
    }
}

int shim_comm_rank_of_eng(const struct shim_comm *sc, int e) {
    if (e < 0 || e >= g.esize) return -1;
    return sc->from_world[g.e2w[e]];
}
