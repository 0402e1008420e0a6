/* comms.c — which communicators the shim routes through the pool: MPI_COMM_WORLD, and every
 * intracommunicator of world ranks made by the calls below (dup, split, create, topologies),
 * each on an engine context of its own that all its ranks agree on at creation; plus the
 * cache that says which datatypes lie dense in memory (sent as they are, others packed). */
#include <stdlib.h>
#include <string.h>

#include "mpi/shim.h"

static struct shim_comm **tab;
static int ntab, captab;
static struct shim_comm *mru;  /* the last one looked up: programs use one comm in bursts */

uint64_t shim_key_comm(MPI_Comm c) {
    uint64_t k = 0;
    memcpy(&k, &c, sizeof c < sizeof k ? sizeof c : sizeof k);
    return k;
}

uint64_t shim_key_type(MPI_Datatype d) {
    uint64_t k = 0;
    memcpy(&k, &d, sizeof d < sizeof k ? sizeof d : sizeof k);
    return k;
}

struct shim_comm *shim_comm_of(MPI_Comm comm) {
    if (!g.on) return NULL;
    if (comm == MPI_COMM_WORLD) return g.route_world ? &g.world : NULL;
    if (mru && mru->comm == comm) return mru;
    for (int i = 0; i < ntab; ++i)
        if (tab[i]->comm == comm) return mru = tab[i];
    return NULL;
}

int shim_rank_to_world(struct shim_comm *sc, int r) { return sc->to_world[r]; }

/* Freed communicators: MPI lets requests started on a communicator outlive MPI_Comm_free,
 * and their slots still point here, so the entries stay until MPI_Finalize. */
static struct shim_comm *retired;

/* 1 when the MPI's communicator must outlive the program's free: receives of it wait in
 * its queue, not yet handed to the MPI (so the MPI holds no reference for them). */
static int drop(MPI_Comm comm) {
    for (int i = 0; i < ntab; ++i)
        if (tab[i]->comm == comm) {
            struct shim_comm *sc = tab[i];
            const int hold = sc->nq > 0;
            if (hold) sc->held = comm;
            if (mru == sc) mru = NULL;
            tab[i] = tab[--ntab];
            sc->comm = MPI_COMM_NULL;
            sc->next = retired;
            retired = sc;
            return hold;
        }
    return 0;
}

static void free_comm(struct shim_comm *sc) {
    free(sc->to_world);
    free(sc->from_world);
    free(sc->route);
    free(sc->q);
    free(sc);
}

void shim_comms_free_all(void) {
    for (int i = 0; i < ntab; ++i) free_comm(tab[i]);
    while (retired) {
        struct shim_comm *next = retired->next;
        free_comm(retired);
        retired = next;
    }
    free(tab);
    tab = NULL, ntab = captab = 0, mru = NULL;
}

/* newcomm was just made by PMPI on every one of its ranks: route it when all its ranks are
 * world ranks. Collective over newcomm (one PMPI_Allreduce): the ranks agree on a context
 * above every context any of them uses, so two communicators sharing a rank never share a
 * context, and on whether to route it (any rank may veto). */
static void adopt(MPI_Comm newcomm) {
    if (!g.on || !g.route_derived || newcomm == MPI_COMM_NULL) return;
    int inter = 0, n = 0;
    if (PMPI_Comm_test_inter(newcomm, &inter) != MPI_SUCCESS || inter) return;
    if (PMPI_Comm_size(newcomm, &n) != MPI_SUCCESS) return;
    struct shim_comm *sc = calloc(1, sizeof *sc);
    if (sc) sc->held = MPI_COMM_NULL;
    int *ids = malloc(sizeof(int) * (size_t)n);
    int ok = sc && ids;
    if (ok) {
        sc->to_world = malloc(sizeof(int) * (size_t)n);
        sc->from_world = malloc(sizeof(int) * (size_t)g.size);
        ok = sc->to_world && sc->from_world;
    }
    if (ok) {
        MPI_Group grp, wg;
        for (int i = 0; i < n; ++i) ids[i] = i;
        ok = PMPI_Comm_group(newcomm, &grp) == MPI_SUCCESS &&
             PMPI_Comm_group(MPI_COMM_WORLD, &wg) == MPI_SUCCESS &&
             PMPI_Group_translate_ranks(grp, n, ids, wg, sc->to_world) == MPI_SUCCESS;
        PMPI_Group_free(&grp);
        PMPI_Group_free(&wg);
        for (int i = 0; ok && i < g.size; ++i) sc->from_world[i] = -1;
        for (int i = 0; ok && i < n; ++i) {
            int w = sc->to_world[i];
            if (w < 0 || w >= g.size) ok = 0;  /* MPI_UNDEFINED: a process outside the job */
            else sc->from_world[w] = i;
        }
    }
    if (ok) sc->size = n, ok = shim_routes_fill(sc);
    if (ok && ntab == captab) {
        int ncap = captab ? 2 * captab : 16;
        struct shim_comm **nt = realloc(tab, sizeof *nt * (size_t)ncap);
        if (nt) tab = nt, captab = ncap;
        else ok = 0;
    }
    int v[2] = {(int)g.next_ctx, ok ? 0 : 1}, out[2] = {0, 1};
    if (PMPI_Allreduce(v, out, 2, MPI_INT, MPI_MAX, newcomm) != MPI_SUCCESS) out[1] = 1;
    free(ids);
    if (out[1]) {  /* some rank could not: the whole communicator stays on PMPI */
        if (sc) free(sc->to_world), free(sc->from_world), free(sc->route);
        free(sc);
        return;
    }
    g.next_ctx = (uint32_t)out[0] + 1;
    sc->comm = newcomm;
    sc->ctx = (uint32_t)out[0];
    sc->size = n;
    tab[ntab++] = sc;
}

int MPI_Comm_dup(MPI_Comm comm, MPI_Comm *newcomm) {
    int rc = PMPI_Comm_dup(comm, newcomm);
    if (rc == MPI_SUCCESS) adopt(*newcomm);
    return rc;
}

int MPI_Comm_dup_with_info(MPI_Comm comm, MPI_Info info, MPI_Comm *newcomm) {
    int rc = PMPI_Comm_dup_with_info(comm, info, newcomm);
    if (rc == MPI_SUCCESS) adopt(*newcomm);
    return rc;
}

int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm *newcomm) {
    int rc = PMPI_Comm_split(comm, color, key, newcomm);
    if (rc == MPI_SUCCESS) adopt(*newcomm);
    return rc;
}

int MPI_Comm_split_type(MPI_Comm comm, int type, int key, MPI_Info info, MPI_Comm *newcomm) {
    int rc = PMPI_Comm_split_type(comm, type, key, info, newcomm);
    if (rc == MPI_SUCCESS) adopt(*newcomm);
    return rc;
}

int MPI_Comm_create(MPI_Comm comm, MPI_Group group, MPI_Comm *newcomm) {
    int rc = PMPI_Comm_create(comm, group, newcomm);
    if (rc == MPI_SUCCESS) adopt(*newcomm);
    return rc;
}

int MPI_Comm_create_group(MPI_Comm comm, MPI_Group group, int tag, MPI_Comm *newcomm) {
    int rc = PMPI_Comm_create_group(comm, group, tag, newcomm);
    if (rc == MPI_SUCCESS) adopt(*newcomm);
    return rc;
}

int MPI_Cart_create(MPI_Comm comm, int ndims, const int dims[], const int periods[],
                    int reorder, MPI_Comm *newcomm) {
    int rc = PMPI_Cart_create(comm, ndims, dims, periods, reorder, newcomm);
    if (rc == MPI_SUCCESS) adopt(*newcomm);
    return rc;
}

int MPI_Cart_sub(MPI_Comm comm, const int remain_dims[], MPI_Comm *newcomm) {
    int rc = PMPI_Cart_sub(comm, remain_dims, newcomm);
    if (rc == MPI_SUCCESS) adopt(*newcomm);
    return rc;
}

int MPI_Comm_free(MPI_Comm *comm) {
    if (g.on && comm && drop(*comm)) {
        *comm = MPI_COMM_NULL;
        return MPI_SUCCESS;
    }
    return PMPI_Comm_free(comm);
}

int MPI_Comm_disconnect(MPI_Comm *comm) {
    if (g.on && comm && drop(*comm)) {
        *comm = MPI_COMM_NULL;
        return MPI_SUCCESS;
    }
    return PMPI_Comm_disconnect(comm);
}

/* ---- datatypes: dense or packed ---- */
struct dt_ent {
    uint64_t key;
    int used, dense, size;
};
#define DT_CACHE 128
static struct dt_ent dtc[DT_CACHE];

static int describe(MPI_Datatype dt, uint64_t key, struct dt_ent *x) {
    MPI_Count sz;
    MPI_Aint lb, ext, tlb, text;
    if (PMPI_Type_size_x(dt, &sz) != MPI_SUCCESS || sz < 0 || sz > 0x7fffffff ||
        PMPI_Type_get_extent(dt, &lb, &ext) != MPI_SUCCESS ||
        PMPI_Type_get_true_extent(dt, &tlb, &text) != MPI_SUCCESS)
        return -1;
    /* no holes (true extent = size) and elements back to back (extent = size) */
    x->dense = tlb == 0 && text == sz && lb == 0 && ext == sz;
    x->size = (int)sz;
    x->key = key;
    x->used = 1;
    return 0;
}

int shim_dense(MPI_Datatype dt, int count, uint64_t *nbytes, int *tsize) {
    const uint64_t k = shim_key_type(dt);
    const unsigned h = (unsigned)(((k >> 4) ^ (k >> 20)) * 0x9e3779b1u) % DT_CACHE;
    struct dt_ent one, *e = NULL;
    for (unsigned i = 0; i < 8 && !e; ++i) {
        struct dt_ent *x = &dtc[(h + i) % DT_CACHE];
        if (x->used && x->key == k) e = x;
        else if (!x->used) {
            if (describe(dt, k, x)) return -1;
            e = x;
        }
    }
    if (!e) {  /* this part of the cache is full: ask MPI each time */
        if (describe(dt, k, &one)) return -1;
        e = &one;
    }
    *tsize = e->size;
    *nbytes = (uint64_t)e->size * (uint64_t)(count < 0 ? 0 : count);
    return e->dense;
}

/* A freed handle may come back naming another type: forget them all (frees are rare). */
int MPI_Type_free(MPI_Datatype *dt) {
    memset(dtc, 0, sizeof dtc);
    return PMPI_Type_free(dt);
}
