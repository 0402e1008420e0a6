/* routes.c — the route to each peer, decided once at MPI_Init from the job's topology:
 *  - a peer on this host (same hostname, as the MPI's launcher tells nodes apart) stays on the
 *    MPI's own path (its single-copy shared memory);
 *  - a peer on another host that maps the same pool goes through the pool;
 *  - any other peer uses the MPI's network.
 * A pair of ranks always uses one route, so non-overtaking per pair is each transport's own;
 * matching across routes (ANY_SOURCE, probes) is anysrc.c's. Every rank computes the same
 * tables from two PMPI_Allgathers, so decisions that must agree (how a collective runs) do. */
#include <stdlib.h>
#include <string.h>

#include "mpi/shim.h"

static uint8_t *maps;  /* [size]: the rank opened the pool */

int shim_topology(uint64_t my_host, int maps_pool) {
    g.host = malloc(sizeof *g.host * (size_t)g.size);
    maps = malloc((size_t)g.size);
    int ok = g.host && maps, all = 0;
    PMPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all) return 0;
    uint8_t mine = (uint8_t)(maps_pool != 0);
    PMPI_Allgather(&my_host, 1, MPI_UINT64_T, g.host, 1, MPI_UINT64_T, MPI_COMM_WORLD);
    PMPI_Allgather(&mine, 1, MPI_UINT8_T, maps, 1, MPI_UINT8_T, MPI_COMM_WORLD);
    for (int i = 0; i < g.size; ++i)
        for (int j = i + 1; j < g.size; ++j)
            if (maps[i] && maps[j] && g.host[i] != g.host[j]) return 1;
    return 0;
}

int shim_engine_ranks(int ok) {
    uint8_t mine = (uint8_t)(ok != 0);
    PMPI_Allgather(&mine, 1, MPI_UINT8_T, maps, 1, MPI_UINT8_T, MPI_COMM_WORLD);
    g.w2e = malloc(sizeof(int) * (size_t)g.size);
    g.e2w = malloc(sizeof(int) * (size_t)g.size);
    if (!g.w2e || !g.e2w) return -1;
    g.esize = 0;
    for (int i = 0; i < g.size; ++i) {
        g.w2e[i] = maps[i] ? g.esize : -1;
        if (maps[i]) g.e2w[g.esize++] = i;
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

void shim_routes_free(void) {
    free(g.host), free(g.w2e), free(g.e2w), free(maps);
    g.host = NULL, g.w2e = g.e2w = NULL, maps = NULL;
    g.esize = 0;
}

/* World ranks a and b talk through the pool. */
static int pool_pair(int a, int b) {
    return a != b && g.w2e[a] >= 0 && g.w2e[b] >= 0 && g.host[a] != g.host[b];
}

/* How comm's collectives run, the same on every member: through the pool when the
 * communicator is the whole engine job (the engine's collectives span its job); polled when
 * some pair of it talks through the pool (a member may owe a peer a control cell, coll.c);
 * else straight to the MPI. */
static int coll_mode(const struct shim_comm *sc) {
    int pairs = 0;
    for (int i = 0; i < sc->size && !pairs; ++i)
        for (int j = i + 1; j < sc->size && !pairs; ++j)
            pairs = pool_pair(sc->to_world[i], sc->to_world[j]);
    if (!pairs) return COLL_MPI;
    return sc->size == g.size && g.esize == g.size ? COLL_POOL : COLL_POLLED;
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

int shim_comm_rank_of_eng(const struct shim_comm *sc, int e) {
    if (e < 0 || e >= g.esize) return -1;
    return sc->from_world[g.e2w[e]];
}
