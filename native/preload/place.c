/* place.c — software stripes by mbind(2): chunk c of a range goes to the node whose weight
 * slot holds c mod round (the rule of cxlkit.policy.stripe), one MPOL_BIND per run of chunks
 * on one node. Also the mbind fault hook the tests use. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "preload.h"

#define MPOL_BIND 2
#define MPOL_F_MEMS_ALLOWED (1 << 2)
#define MPOL_MF_MOVE (1 << 1)
#define MASK_WORDS ((CXP_MAX_NODE_ID + 1) / (8 * sizeof(unsigned long)))
/* the kernel reads maxnode - 1 bits */
#define MAXNODE (CXP_MAX_NODE_ID + 2)

/* CXLKIT_PRELOAD_FAULT=mbind:N:errno — the Nth mbind fails with errno. Written once at init
 * (before any thread the program starts), read after; the count is atomic. */
static unsigned long fault_nth;
static int fault_errno;
static unsigned long mbind_calls;

int cxp_fault_parse(const char *spec) {
    if (!spec || !*spec) return 0;
    if (strncmp(spec, "mbind:", 6) != 0) return -1;
    char *end;
    unsigned long nth = strtoul(spec + 6, &end, 10);
    if (end == spec + 6 || *end != ':' || nth == 0) return -1;
    const char *e = end + 1;
    long err = strtol(e, &end, 10);
    if (end == e || *end || err <= 0 || err > 4095) return -1;
    fault_nth = nth;
    fault_errno = (int)err;
    return 0;
}

int cxp_mbind(void *addr, size_t len, int mode, const unsigned long *mask,
              unsigned long maxnode, unsigned flags) {
    unsigned long k = __atomic_add_fetch(&mbind_calls, 1, __ATOMIC_RELAXED);
    if (fault_nth && k == fault_nth) return -fault_errno;
    int saved = errno;
    long r = syscall(SYS_mbind, addr, len, mode, mask, maxnode, flags);
    int e = errno;
    errno = saved;
    return r < 0 ? -e : 0;
}

int cxp_node_allowed(int node) {
    unsigned long mask[MASK_WORDS];
    memset(mask, 0, sizeof mask);
    int saved = errno;
    long r = syscall(SYS_get_mempolicy, NULL, mask, (unsigned long)MAXNODE, NULL,
                     (unsigned long)MPOL_F_MEMS_ALLOWED);
    int e = errno;
    errno = saved;
    if (r < 0) return -e;
    const size_t bits = 8 * sizeof(unsigned long);
    return (mask[(size_t)node / bits] >> ((size_t)node % bits)) & 1 ? 1 : 0;
}

long cxp_place(const struct cxp_config *c, void *addr, size_t len, int move_first, int move_all,
               size_t *per_node) {
    const size_t bits = 8 * sizeof(unsigned long);
    size_t nchunks = (len + c->chunk_bytes - 1) / c->chunk_bytes;
    size_t chunk = 0;  /* first chunk of the run */
    unsigned slot = 0; /* chunk mod round */
    int i = 0;         /* node index of slot */
    long runs = 0;
    for (int j = 0; j < c->nnodes; j++) per_node[j] = 0;
    while (chunk < nchunks) {
        /* this node's slots run from cum(i) to cum(i+1); a one-node stripe is one run */
        unsigned end_slot = 0;
        for (int j = 0; j <= i; j++) end_slot += c->weights[j];
        size_t take = c->nnodes == 1 ? nchunks - chunk : end_slot - slot;
        if (take > nchunks - chunk) take = nchunks - chunk;
        char *start = (char *)addr + chunk * c->chunk_bytes;
        size_t n = (chunk + take == nchunks) ? len - chunk * c->chunk_bytes
                                             : take * c->chunk_bytes;
        unsigned long mask[MASK_WORDS];
        memset(mask, 0, sizeof mask);
        mask[(size_t)c->nodes[i] / bits] |= 1ul << ((size_t)c->nodes[i] % bits);
        unsigned flags = (move_all || (move_first && runs == 0)) ? MPOL_MF_MOVE : 0;
        int r = cxp_mbind(start, n, MPOL_BIND, mask, MAXNODE, flags);
        if (r < 0) return r;
        runs++;
        per_node[i] += n;
        chunk += take;
        slot = (unsigned)((slot + take) % c->round);
        i = (i + 1) % c->nnodes;
        if (slot == 0) i = 0;
    }
    return runs;
}
