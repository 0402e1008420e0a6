/* cpus.c — the job's ranks on one machine's CPUs. Hosts that are network namespaces or
 * containers of one machine each have a launcher of their own, and a launcher binds its ranks
 * from the first CPU on without knowing the other hosts' ranks: ranks of two such hosts then
 * share a CPU while the machine has others idle (a 2-rank job across two namespace hosts ran
 * on one CPU, twice as long as on one host). Rank 0 says so in one line at MPI_Init, naming
 * two such ranks; a launcher's own choice (ranks of one host sharing CPUs) is left alone. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mpi/shim.h"

/* What a rank tells rank 0 about its CPUs. */
struct rank_cpus {
    cpu_set_t set;    /* its affinity (empty when unknown) */
    int32_t online;   /* CPUs its machine has online (0: unknown) */
    int32_t pad;
};

static void mine(struct rank_cpus *rc) {
    memset(rc, 0, sizeof *rc);
    uint64_t mask[CPU_SETSIZE / 64];
    CPU_ZERO(&rc->set);  /* empty when unknown */
    if (cxk_cpu_affinity(mask, CPU_SETSIZE / 64) > 0)
        for (int c = 0; c < CPU_SETSIZE; ++c)
            if (mask[c / 64] >> (c % 64) & 1) CPU_SET(c, &rc->set);
    const long n = sysconf(_SC_NPROCESSORS_ONLN);
    rc->online = n > 0 && n < INT32_MAX ? (int32_t)n : 0;
}

/* Ranks a and b, of different hosts on one machine, are bound to CPUs they share. */
static int clash(const struct rank_cpus *all, const uint64_t *boots, int a, int b) {
    if (!boots[a] || boots[a] != boots[b] || g.host[a] == g.host[b]) return 0;
    cpu_set_t both;
    CPU_AND(&both, &all[a].set, &all[b].set);
    return CPU_COUNT(&both) > 0;
}

/* The first pair of clash(), when the job's ranks on that machine use fewer of its CPUs than
 * they could (fewer than they are, and than it has online): 1 and the line. */
static int report(const struct rank_cpus *all, const uint64_t *boots) {
    for (int a = 0; a < g.size; ++a)
        for (int b = a + 1; b < g.size; ++b) {
            if (!clash(all, boots, a, b)) continue;
            cpu_set_t used;
            CPU_ZERO(&used);
            int ranks = 0;
            for (int i = 0; i < g.size; ++i)
                if (boots[i] == boots[a]) CPU_OR(&used, &used, &all[i].set), ++ranks;
            const int n = CPU_COUNT(&used), online = all[a].online;
            if (n >= ranks || (online && n >= online)) continue;
            fprintf(stderr,
                    "cxlkit-mpi: ranks %d and %d: on different hosts but bound to the same CPUs "
                    "of one machine (each host's launcher placed its own ranks): the job's %d "
                    "ranks there run on %d of its %d CPUs; bind them apart (a rankfile) or not "
                    "at all (Open MPI: --bind-to none)\n",
                    a, b, ranks, n, online);
            return 1;
        }
    return 0;
}

void shim_cpus_check(const uint64_t *boots) {
    struct rank_cpus me, *all = NULL;
    int ok = 1;
    mine(&me);
    if (g.rank == 0) ok = (all = malloc(sizeof *all * (size_t)g.size)) != NULL;
    PMPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (ok && PMPI_Gather(&me, (int)sizeof me, MPI_BYTE, all, (int)sizeof me, MPI_BYTE, 0,
                          MPI_COMM_WORLD) == MPI_SUCCESS &&
        g.rank == 0)
        report(all, boots);
    free(all);
}
