/* shim.h — private to native/mpi/ (the PMPI shim libcxlkit_mpi_<mpi>.so): the process state,
 * the communicators the shim routes through the pool, the request/message handle table and
 * the helpers the shim's files share (boot.c: init, config, finalize, counters; comms.c:
 * communicators and datatypes; reqs.c: requests and every Wait/Test; p2p.c: sends, receives,
 * probes; coll.c: the blocking collectives). Built once per MPI against that MPI's mpi.h
 * (handles are ints in MPICH, pointers in Open MPI). A rank uses the shim from one thread at
 * a time (MPI_THREAD_SERIALIZED). */
#ifndef CXLKIT_MPI_SHIM_H
#define CXLKIT_MPI_SHIM_H
#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include "cxlkit.h"

/* Only the MPI_* functions are exported (MPICH's mpi.h gives them no visibility of its own,
 * so the library is built without -fvisibility=hidden and hides its internals here). */
#pragma GCC visibility push(hidden)

/* A communicator routed through the pool: every rank of it is a rank of the pool job (the
 * world), and every point-to-point message of it travels on context ctx of the engine.
 * Communicators not in the table go to PMPI entirely, so no communicator's order is ever
 * split between two routes. */
struct shim_comm {
    MPI_Comm comm;
    uint32_t ctx;        /* engine context: 0 for MPI_COMM_WORLD, >= CXK_MSG_CTX_FIRST else */
    int size;
    int *to_world;       /* [size]: comm rank -> world rank */
    int *from_world;     /* [world size]: world rank -> comm rank, -1 when not a member */
    /* routes.c: this rank's route to each member (1 pool, 0 the MPI's own path); npool
     * members through the pool; mixed: both routes (ANY_SOURCE receives are queued, anysrc.c);
     * coll: how its blocking collectives run, the same on every member (enum shim_coll) */
    uint8_t *route;
    int npool, mixed, coll;
    int *q, nq, capq;    /* queued receive slots in posted order (anysrc.c) */
    MPI_Comm held;       /* freed by the program while receives were queued: the MPI's
                            handle, freed once the queue is empty (else MPI_COMM_NULL) */
    struct shim_comm *next;  /* freed ones, kept for their requests until MPI_Finalize */
};
enum shim_coll { COLL_MPI = 0, COLL_POLLED = 1, COLL_POOL = 2 };

/* Counters of this rank (printed at MPI_Finalize when CXLKIT_MPI_STATS is set). */
struct shim_stats {
    uint64_t pool_sends, pool_send_bytes, pool_recvs, pool_recv_bytes;
    uint64_t mpi_sends, mpi_recvs;   /* point-to-point calls that went to the MPI: to peers
                                        on this host or off the pool, or on communicators not
                                        routed */
    /* the MPI's sends by route (shim_count_mpi_send): to a peer on this host (the MPI's own
     * shared memory), to one on another host (its network), on a communicator not routed */
    uint64_t host_sends, host_send_bytes, net_sends, net_send_bytes, unrouted_sends;
    uint64_t coll_pool, coll_mpi;    /* blocking collectives through the pool / the MPI */
    uint64_t packed;                 /* messages packed / unpacked (derived datatypes) */
    uint64_t mem_blocks;             /* MPI_Alloc_mem blocks from the pool (mem.c) */
    uint64_t mem_fallbacks;          /* ... given by the MPI: the partition was full */
    uint64_t one_copy_sends;         /* sends from such a block above the eager limit */
};

struct shim_state {
    int on;                  /* routing through the pool is live */
    int rank, size;          /* in MPI_COMM_WORLD */
    int route_world;         /* MPI_COMM_WORLD routed (CXLKIT_MPI_COMMS all or world) */
    int route_derived;       /* dup/split/create... routed (CXLKIT_MPI_COMMS all or derived) */
    int verbose, stats;
    uint32_t next_ctx;       /* the next engine context a new communicator may take */
    cxk_pool *pool;
    cxk_comm *eng;
    struct shim_comm world;
    uint64_t inflight;       /* engine operations started and not yet completed, and
                                queued receives (anysrc.c) */
    /* routes.c: the job's topology, the same on every rank */
    uint64_t *host;          /* [size]: host of each world rank (its hostname's hash) */
    int *w2e, *e2w;          /* world rank -> rank in this rank's engine (-1: not of its
                                pod) and back */
    int esize;               /* ranks in this rank's engine: its pod's (0: on no pool) */
    struct shim_stats st;
    char pool_path[256];
    char job[CXK_MSG_JOB_MAX + 1];
    char why_off[400];       /* why routing is off (banner) */
};
extern struct shim_state g;

/* ---- routes.c: which peer goes which way ---- */
/* Allgather every rank's host and whether it maps the pool; 0 when no two ranks on different
 * hosts share the pool (every peer then stays on the MPI's own path: routing off). */
int shim_topology(uint64_t my_host, int maps_pool);
/* Peers of one host talk through the pool too when their pool spans hosts (on: decided from
 * rank 0's CXLKIT_MPI_SAME_HOST and the pool's coherence, the same on every rank). Before the
 * engine's join. */
void shim_routes_same_host(int on);
/* This rank's coherence domain for the engine (cxk_msg_opts.domain): 1 + the lowest world
 * rank on its host, the same on every rank of one host. */
uint32_t shim_domain(void);
/* Allgather the uuid of the pool each rank opened (ok: it did) and make the pods: this rank's
 * engine ranks (g.w2e, g.e2w, g.esize) are the ranks with its pool's uuid when some of them are
 * on another host. This rank's engine rank, -1 when it talks through no pool (or out of
 * memory: then g.w2e is NULL on every rank). */
int shim_engine_ranks(const uint8_t uuid[16], int ok);
/* Some two ranks on different hosts share a pool. */
int shim_pool_pairs(void);
/* Pods of the job and, in *ranks, the ranks on them. */
int shim_pods(int *ranks);
/* Count a point-to-point send that goes to the MPI by its route (g.on). */
void shim_count_mpi_send(MPI_Comm comm, int dest, int count, MPI_Datatype dt);
/* Fill sc->route, npool, mixed, coll from the topology (to_world set). 0: out of memory. */
int shim_routes_fill(struct shim_comm *sc);
void shim_routes_free(void);
static inline int shim_eng(const struct shim_comm *sc, int r) { return g.w2e[sc->to_world[r]]; }
/* comm rank of engine rank e, -1 when none */
int shim_comm_rank_of_eng(const struct shim_comm *sc, int e);
/* Drive the engine (its queued cells) and every queued receive. */
void shim_progress(void);

/* ---- cpus.c ---- */
/* Rank 0 names, in one line, two ranks of different hosts on one machine (boots: every
 * rank's cxk_boot_hash) bound to the same CPUs while the machine has others to spare.
 * Collective over the world (g.host set). */
void shim_cpus_check(const uint64_t *boots);

/* ---- anysrc.c: receives on a communicator with both routes ---- */
/* The receive in slot i must wait in the communicator's queue (an ANY_SOURCE receive, or one
 * posted behind such a one): 1. */
int shim_must_queue(const struct shim_comm *sc, int source);
int shim_queue_add(struct shim_comm *sc, int i);  /* MPI error code */
/* Withdraw a queued slot (cancel): 1 when it was queued. */
int shim_queue_remove(struct shim_comm *sc, int i);
/* Probe both routes for a message matching (source, tag) of sc: *flag, *st; MPI error code.
 * msg (may be NULL): take it as a matched message. */
int shim_mixed_iprobe(struct shim_comm *sc, int source, int tag, int *flag, MPI_Message *msg,
                      MPI_Status *st);

/* ---- comms.c ---- */
/* The routed communicator comm is, or NULL (go to PMPI). */
struct shim_comm *shim_comm_of(MPI_Comm comm);
void shim_comms_free_all(void);
/* Bytes of count elements of dt when they lie dense at buf (no holes, lower bound 0): 1 and
 * *nbytes; 0 when they must be packed. *tsize gets the type's size. */
int shim_dense(MPI_Datatype dt, int count, uint64_t *nbytes, int *tsize);
/* -1 for a datatype MPI does not know (MPI_ERR_TYPE). */

/* ---- reqs.c: one table for the requests and matched messages the shim owns ---- */
enum slot_kind { SLOT_SEND = 1, SLOT_RECV = 2, SLOT_MESSAGE = 3 };
struct slot {
    uint8_t used, kind, persistent, active, done, cancelled, detached;
    uint8_t sync;            /* send: synchronous (Ssend) */
    uint8_t buffered;        /* send: copied out at the start (Bsend, Sendrecv_replace) */
    uint8_t counted;         /* counted in g.inflight */
    uint8_t queued;          /* receive waiting in sc's queue (anysrc.c) */
    uint8_t via_mpi;         /* receive handed to the MPI (mreq, or done: mst) */
    MPI_Request mreq;        /* the MPI's request of a receive handed to it */
    int mpi_err;             /* its error code */
    struct shim_comm *sc;
    MPI_Comm comm;
    cxk_msg_req *req;        /* the engine's request while in flight */
    /* the call's arguments (persistent requests start them again) */
    const void *sbuf;
    void *rbuf;
    int count, peer, tag;    /* peer: comm rank, or MPI_ANY_SOURCE */
    MPI_Datatype dt;
    void *tmp;               /* packed bytes (derived datatypes, buffered sends, messages) */
    uint64_t tmp_bytes;
    /* the result once done */
    int src, rtag, err;
    uint64_t nbytes;         /* bytes of the message */
    int next_free;
};
/* New slot (zeroed, used), index >= 0, or -1 when the table is full. */
int slot_new(void);
/* The table index of s, -1 for a slot on the stack. */
int slot_index(const struct slot *s);
struct slot *slot_at(int i);
void slot_release(int i);
MPI_Request slot_request(int i);
int slot_of_request(MPI_Request r);      /* -1: not the shim's */
MPI_Message slot_message(int i);
int slot_of_message(MPI_Message m);
#if defined(OPEN_MPI)
/* The slot a handle points at, in use or not (-1: not into the table): a freed request of
 * the shim must never reach Open MPI's own handle functions (fortran.c). */
int slot_index_of_ptr(const void *p);
#endif
/* Start slot i's operation in the engine (its arguments set). MPI error code. */
int slot_start(int i);
/* Drive slot i (block: until done). 1 once done (or inactive). */
int slot_poll(int i, int block);
/* The same for a slot of a blocking call (on the stack, never in the table). */
int slot_drive(struct slot *s, int block);
/* Progress every detached slot (buffered sends, freed requests); block: until none left. */
void slots_drain_detached(int block);
/* Nobody will wait for slot i (a buffered send): drain it later, then free it. */
void shim_detach_slot(int i);

/* ---- p2p.c ---- */
int shim_send_start(struct slot *s);    /* engine send of s (packs); MPI error code */
int shim_recv_start(struct slot *s);
/* The engine's receive of s from engine rank esrc with tag etag (CXK_ANY_*). MPI error code. */
int shim_recv_post(struct slot *s, int esrc, int etag);
/* Fill a status from a finished receive slot (unpacking into rbuf): MPI error code. */
int shim_recv_finish(struct slot *s, MPI_Status *st);

/* ---- coll.c: the blocking collectives, nonblocking and polled while routing is on ---- */
/* rc of a PMPI nonblocking call that started *r: on success, test *r and drive the engine in
 * turn until it completes. MPI error code. */
int shim_poll_mpi(int rc, MPI_Request *r);

/* ---- collpool.c: collectives through the pool (me: this rank in sc); -errno or 0 ---- */
int shim_pool_barrier(const struct shim_comm *sc, int me);
int shim_pool_bcast(const struct shim_comm *sc, int me, void *buf, uint64_t nbytes, int root);
int shim_pool_reduce(const struct shim_comm *sc, int me, const void *sbuf, void *rbuf, int count,
                     MPI_Datatype dt, MPI_Op op, uint64_t nbytes, int root);
int shim_pool_allreduce(const struct shim_comm *sc, int me, const void *sbuf, void *rbuf,
                        int count, MPI_Datatype dt, MPI_Op op, uint64_t nbytes);
int shim_pool_allgather(const struct shim_comm *sc, int me, uint8_t *wire, uint64_t block);

/* ---- rma.c: one-sided windows (rma.h) ---- */
/* The RMA counters' line of this rank (CXLKIT_MPI_STATS). */
void shim_rma_print_stats(void);

/* ---- mpi4.c ---- */
/* Complete the MPI's sends from the shim's copies (Isendrecv to a peer on the MPI's path);
 * block: all of them. */
void shim_mpi_copies_drain(int block);

/* ---- helpers ---- */
void shim_status_set(MPI_Status *st, int src, int tag, uint64_t nbytes, int cancelled);
void shim_status_empty(MPI_Status *st);
/* -errno of the engine -> MPI error class; a failure other than truncation is reported on
 * stderr once, naming the rank and the peer (MPI codes cannot carry the text). */
int shim_err(int neg, const char *what);
/* Hand err to comm's error handler (MPI_ERRORS_ARE_FATAL aborts), return it. */
int shim_fail(MPI_Comm comm, int err);
int shim_rank_to_world(struct shim_comm *sc, int r);

/* handles as integers for hashing and printing */
uint64_t shim_key_comm(MPI_Comm c);
uint64_t shim_key_type(MPI_Datatype d);
#pragma GCC visibility pop
#endif
