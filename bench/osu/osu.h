/* osu.h — the benchmarks of bench/osu/osu.c over one of two backends: be_cxk.c (cxlkit's C
 * API, cxk_msg_* / cxk_win_*) or be_mpi.c (plain MPI, built with MPICH's or Open MPI's mpicc).
 * The benchmarks are written once against this interface, so both measure the same loop. */
#ifndef CXLKIT_OSU_H
#define CXLKIT_OSU_H
#include <stddef.h>

/* Start this rank (the cxlkit backend launches its own ranks: see be_cxk.c). */
int be_init(int *argc, char ***argv);
void be_finalize(void);
int be_rank(void);
int be_size(void);
const char *be_name(void);   /* printed in the header: which library and transport */
double be_wtime(void);       /* seconds */
void be_abort(const char *what, int err);

void be_send(const void *buf, size_t n, int dest, int tag);
void be_recv(void *buf, size_t n, int src, int tag);
typedef struct be_req be_req;  /* opaque; arrays of BE_REQ_BYTES each */
#define BE_REQ_BYTES 16
void be_isend(const void *buf, size_t n, int dest, int tag, void *req);
void be_irecv(void *buf, size_t n, int src, int tag, void *req);
void be_waitall(int n, void *reqs);
void be_barrier(void);
/* Message buffers of the transport's own memory (osu -b pool): cxk_msg_alloc_mem, whose
 * blocks a send leaves in place for the receiver to copy out (one copy), or MPI_Alloc_mem
 * (under the cxlkit shim the same blocks; under a plain MPI whatever it gives). */
void *be_alloc_mem(size_t n);
void be_free_mem(void *p);

/* One-sided: every rank exposes nbytes; *base is this rank's window memory. */
typedef struct be_win be_win;
be_win *be_win_create(size_t nbytes, void **base);
void be_win_free(be_win *w);
void be_put(be_win *w, const void *buf, size_t n, int target, size_t off);
void be_get(be_win *w, void *buf, size_t n, int target, size_t off);
void be_fence(be_win *w);
void be_post(be_win *w, int peer);
void be_start(be_win *w, int peer);
void be_complete(be_win *w);
void be_wait(be_win *w);
#endif
