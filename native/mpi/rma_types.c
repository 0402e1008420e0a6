/* rma_types.c — the datatypes of the one-sided calls on routed windows: the contiguous runs
 * a target datatype covers (so a strided or struct target is written run by run, never by
 * read-modify-write of its holes, which other origins may own), the predefined element type
 * an accumulate works on, and the ops the pool window's target applies. */
#include <stdlib.h>
#include <string.h>

#include "mpi/rma.h"

_Static_assert(sizeof(long) == 8 && sizeof(int) == 4, "LP64: MPI_LONG is 8 bytes");

/* Bytes above which a non-dense target datatype is refused (the map below costs ~13 bytes
 * of scratch per byte of its span). */
#define RUNS_MAX_SPAN (1ll << 28)

/* Where each packed byte of count x dt lands: unpack a stream whose byte i is byte k of i
 * (k = 0..3) into zeroed scratch, and a stream of ones into a marker buffer; then byte o of
 * the span holds packed byte idx(o) when marked. Any datatype MPI can unpack works, without
 * walking its constructors. */
static int map_runs(MPI_Datatype dt, int count, uint64_t n, struct rma_run **out, int *nruns) {
    MPI_Aint lb, ext, tlb, text;
    if (PMPI_Type_get_extent(dt, &lb, &ext) != MPI_SUCCESS ||
        PMPI_Type_get_true_extent(dt, &tlb, &text) != MPI_SUCCESS)
        return MPI_ERR_TYPE;
    const int64_t first = (int64_t)tlb, last = (int64_t)(count - 1) * ext + tlb;
    const int64_t lo = first < last ? first : last;
    const int64_t hi = (first > last ? first : last) + text;
    if (n > 0xffffffffull || hi - lo > RUNS_MAX_SPAN || hi < lo) return MPI_ERR_TYPE;
    const size_t span = (size_t)(hi - lo);
    const int nb = n <= 0x100 ? 1 : n <= 0x10000 ? 2 : n <= 0x1000000 ? 3 : 4;
    uint8_t *stream = malloc(n ? n : 1), *mark = calloc(span ? span : 1, 1);
    uint8_t *idx = calloc((span ? span : 1) * (size_t)nb, 1);
    int64_t *where = malloc(sizeof(int64_t) * (n ? n : 1));
    struct rma_run *runs = malloc(sizeof *runs * (n ? n : 1));
    int rc = stream && mark && idx && where && runs ? MPI_SUCCESS : MPI_ERR_NO_MEM;
    for (int k = -1; rc == MPI_SUCCESS && k < nb; ++k) {  /* k = -1: the marker pass */
        for (uint64_t i = 0; i < n; ++i) stream[i] = k < 0 ? 1 : (uint8_t)(i >> (8 * k));
        uint8_t *dst = k < 0 ? mark : idx + (size_t)k * span;
        int pos = 0;
        if (PMPI_Unpack(stream, (int)n, &pos, dst - lo, count, dt, MPI_COMM_SELF) !=
                MPI_SUCCESS || (uint64_t)pos != n)
            rc = MPI_ERR_TYPE;
    }
    for (uint64_t i = 0; rc == MPI_SUCCESS && i < n; ++i) where[i] = -1;
    for (size_t o = 0; rc == MPI_SUCCESS && o < span; ++o) {
        if (!mark[o]) continue;
        uint64_t i = 0;
        for (int k = 0; k < nb; ++k) i |= (uint64_t)idx[(size_t)k * span + o] << (8 * k);
        if (i >= n || where[i] != -1) rc = MPI_ERR_TYPE;  /* a byte written twice */
        else where[i] = (int64_t)o + lo;
    }
    int nr = 0;
    for (uint64_t i = 0; rc == MPI_SUCCESS && i < n; ++i) {
        if (where[i] < 0) rc = MPI_ERR_TYPE;
        else if (nr && runs[nr - 1].off + (int64_t)runs[nr - 1].len == where[i]) runs[nr - 1].len++;
        else runs[nr++] = (struct rma_run){where[i], i, 1};
    }
    free(stream), free(mark), free(idx), free(where);
    if (rc != MPI_SUCCESS) {
        free(runs);
        return rc;
    }
    *out = runs;
    *nruns = nr;
    return MPI_SUCCESS;
}

int rma_runs(MPI_Datatype dt, int count, struct rma_run **out, int *n, uint64_t *nbytes) {
    if (count < 0) return MPI_ERR_COUNT;
    int tsize = 0;
    const int dense = shim_dense(dt, count, nbytes, &tsize);
    if (dense < 0) return MPI_ERR_TYPE;
    if (dense || !*nbytes) {
        *out = malloc(sizeof **out);
        if (!*out) return MPI_ERR_NO_MEM;
        **out = (struct rma_run){0, 0, *nbytes};
        *n = *nbytes ? 1 : 0;
        return MPI_SUCCESS;
    }
    return map_runs(dt, count, *nbytes, out, n);
}

int rma_elem_type(MPI_Datatype dt, int *es) {
    int t = -1;
    if (dt == MPI_INT || dt == MPI_INT32_T) t = CXK_MSG_INT32;
    else if (dt == MPI_UNSIGNED || dt == MPI_UINT32_T) t = CXK_MSG_UINT32;
    else if (dt == MPI_LONG || dt == MPI_LONG_LONG || dt == MPI_LONG_LONG_INT ||
             dt == MPI_INT64_T || dt == MPI_AINT || dt == MPI_OFFSET || dt == MPI_COUNT)
        t = CXK_MSG_INT64;
    else if (dt == MPI_UNSIGNED_LONG || dt == MPI_UNSIGNED_LONG_LONG || dt == MPI_UINT64_T)
        t = CXK_MSG_UINT64;
    else if (dt == MPI_FLOAT) t = CXK_MSG_FLOAT;
    else if (dt == MPI_DOUBLE) t = CXK_MSG_DOUBLE;
    if (t >= 0) *es = (int)cxk_msg_type_size(t);
    return t;
}

/* Recursion depth: MPI types nest shallowly; a deeper one is called mixed. */
static MPI_Datatype basic(MPI_Datatype dt, int depth) {
    int ni, na, nd, comb;
    if (depth > 16 || PMPI_Type_get_envelope(dt, &ni, &na, &nd, &comb) != MPI_SUCCESS)
        return MPI_DATATYPE_NULL;
    if (comb == MPI_COMBINER_NAMED) return dt;
    int *ints = malloc(sizeof(int) * (size_t)(ni + 1));
    MPI_Aint *aints = malloc(sizeof(MPI_Aint) * (size_t)(na + 1));
    MPI_Datatype *types = malloc(sizeof(MPI_Datatype) * (size_t)(nd + 1));
    MPI_Datatype found = MPI_DATATYPE_NULL;
    int mixed = !ints || !aints || !types ||
                PMPI_Type_get_contents(dt, ni, na, nd, ints, aints, types) != MPI_SUCCESS;
    const int got = !mixed;
    for (int i = 0; got && i < nd; ++i) {
        MPI_Datatype b = mixed ? MPI_DATATYPE_NULL : basic(types[i], depth + 1);
        if (b == MPI_DATATYPE_NULL || (found != MPI_DATATYPE_NULL && b != found)) mixed = 1;
        found = b;
        int a, c, d, k;  /* derived types handed out by get_contents are the caller's */
        if (PMPI_Type_get_envelope(types[i], &a, &c, &d, &k) == MPI_SUCCESS &&
            k != MPI_COMBINER_NAMED)
            PMPI_Type_free(&types[i]);
    }
    free(ints), free(aints), free(types);
    return mixed ? MPI_DATATYPE_NULL : found;
}

MPI_Datatype rma_basic_type(MPI_Datatype dt) { return basic(dt, 0); }

int rma_op(MPI_Op op) {
    if (op == MPI_SUM) return CXK_OP_SUM;
    if (op == MPI_MIN) return CXK_OP_MIN;
    if (op == MPI_MAX) return CXK_OP_MAX;
    if (op == MPI_REPLACE) return CXK_OP_REPLACE;
    if (op == MPI_NO_OP) return CXK_OP_NO_OP;
    return -1;
}
