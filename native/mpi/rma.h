/* rma.h — private to native/mpi/rma*.c: the routed windows (rma.c: creation, free,
 * attributes, counters, polling collectives; rma_ops.c: put, get, accumulates, atomics and
 * every synchronisation call). */
#ifndef CXLKIT_MPI_RMA_H
#define CXLKIT_MPI_RMA_H
#include "mpi/shim.h"

#pragma GCC visibility push(hidden)

/* A window carried by a pool window (cxk_win) of the engine's whole job. */
struct shim_win {
    MPI_Win win;             /* MPI's handle (a dynamic window with nothing attached) */
    MPI_Comm comm;
    struct shim_comm *sc;    /* its communicator: every world rank, comm rank -> world rank */
    cxk_win *cw;
    void *base;
    MPI_Aint size;           /* this rank's bytes; the attributes point at these fields */
    int disp_unit, flavor, model;
    int *disp_units;         /* [comm size] */
    MPI_Aint *sizes;         /* [comm size] bytes of each rank's window */
    int *ranks;              /* [comm size] scratch: a group's world ranks (post/start) */
    int lock_all;            /* inside MPI_Win_lock_all */
    int nlocked;             /* targets locked by MPI_Win_lock */
    int post_empty;          /* exposure epoch to an empty group (the engine has none) */
    int start_empty;         /* access epoch to an empty group */
    struct shim_win *next;
};

enum { RMA_PUT, RMA_GET, RMA_ACC, RMA_ATOMIC, RMA_KINDS };
struct rma_count {
    uint64_t ops, bytes;
};
/* Counters of this rank: operations on pool windows and on windows left to MPI. */
struct shim_rma_stats {
    uint64_t pool_wins, mpi_wins;
    struct rma_count pool[RMA_KINDS], mpi[RMA_KINDS];
};
extern struct shim_rma_stats shim_rma_st;

/* The routed window of handle win, or NULL (MPI's own). */
struct shim_win *shim_win_of(MPI_Win win);
/* Hand err to win's error handler, return it. */
int shim_win_fail(MPI_Win win, int err);
/* -errno of cxk_win_* -> MPI error class. */
int shim_win_err(int neg, const char *what);

/* ---- rma_types.c: the datatypes of the one-sided calls ---- */
/* One contiguous run of a target datatype: bytes [off, off + len) from the target address,
 * holding bytes [pos, pos + len) of the packed data. */
struct rma_run {
    int64_t off;
    uint64_t pos, len;
};
/* The runs of count elements of dt (merged where adjacent), *n of them, in *out (malloc'd,
 * the caller frees), *nbytes in all. MPI error code. */
int rma_runs(MPI_Datatype dt, int count, struct rma_run **out, int *n, uint64_t *nbytes);
/* The engine's element type of a predefined MPI type (accumulates), or -1; *es its bytes. */
int rma_elem_type(MPI_Datatype dt, int *es);
/* The one predefined type dt is built of, or MPI_DATATYPE_NULL (mixed, or unknown). */
MPI_Datatype rma_basic_type(MPI_Datatype dt);
/* The engine op of an MPI op for accumulates, or -1. */
int rma_op(MPI_Op op);

#pragma GCC visibility pop
#endif
