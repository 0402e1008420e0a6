/* cxlkit.h — the whole C ABI of libcxlkit.
 * Unless noted, calls return 0 or -errno; none print, none abort, none throw.
 * Out-parameters come last. Thread-safe unless a section says otherwise. */
#ifndef CXLKIT_H
#define CXLKIT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(CXLKIT_BUILDING)
#define CXK_API __attribute__((visibility("default")))
#else
#define CXK_API
#endif

#define CXK_VERSION_MAJOR 0
#define CXK_VERSION_MINOR 1
#define CXK_VERSION_PATCH 0
/* "0.1.0"; never NULL. */
CXK_API const char *cxk_version(void);

/* ---- Fault injection: make the Nth call of a named syscall fail ----------------
 * Names are the syscall wrappers of the sys section ("mbind", "set_mempolicy",
 * "get_mempolicy", "move_pages", "migrate_pages", "memfd_create", "mmap", "munmap",
 * "madvise", "open", "ftruncate", "fstat", "prctl"). The nth (1-based) call counted from this
 * call fails with -err, once. nth == 0 disarms the name. The environment variable
 * CXLKIT_FAULT=name:nth:errno[,name:nth:errno...] (errno as a number or a name such as
 * ENOMEM) arms faults when the library loads. -EINVAL for an unknown name, nth < 0
 * or err <= 0. */
CXK_API int cxk_fault_inject(const char *name, int nth, int err);
/* Disarm every fault. */
CXK_API void cxk_fault_clear(void);
/* Calls of `name` made since load (faulted ones included); -EINVAL for an unknown name. */
CXK_API int64_t cxk_fault_calls(const char *name);

/* ---- Configuration: the CXLKIT_* environment variables, one table ---------------
 * Every CXLKIT_* variable the native code reads (libcxlkit, the preload library, the PMPI
 * shim) is an entry of one table. A variable is read by the call that needs it (a process may
 * change its environment between calls); unset or empty means the default. A malformed or
 * out-of-range value is refused, never replaced by the default: the call that reads it fails
 * with -EINVAL and cxk_config_error() gives the one-line message naming the variable. */
enum cxk_config_type {
    CXK_CONFIG_STRING = 0,   /* any text */
    CXK_CONFIG_PATH = 1,     /* a file system path */
    CXK_CONFIG_UINT = 2,     /* decimal digits within [lo, hi] */
    CXK_CONFIG_BOOL = 3,     /* 0 or 1 */
    CXK_CONFIG_CHOICE = 4,   /* one of the words of range */
    CXK_CONFIG_MICROS = 5,   /* decimal microseconds within [lo, hi], or "forever" */
    CXK_CONFIG_FRACTION = 6, /* a decimal number within [0, 1] */
    CXK_CONFIG_SIZE = 7,     /* bytes: digits, then K/M/G (1024^n) optionally followed by iB or B */
    CXK_CONFIG_FAULTS = 8,   /* name:nth:errno[,...] (the fault-injection section) */
    CXK_CONFIG_STRIPE = 9,   /* node:weight[,...] (checked by the preload library) */
};
struct cxk_config_entry {
    uint32_t struct_size;      /* in: sizeof(struct cxk_config_entry) as the caller knows it */
    uint32_t type;             /* enum cxk_config_type */
    const char *name;          /* "CXLKIT_SIMD" */
    const char *default_value; /* what unset means, as a user writes it */
    const char *range;         /* "0..256", "auto|scalar|...", "" when any text goes */
    const char *reader;        /* "libcxlkit", "preload" or "mpi" */
    const char *doc;           /* one line */
    const char *value;         /* the environment's value now, NULL when unset or empty */
    int32_t valid;             /* 1: unset or well-formed; 0: refused (why says why) */
    char why[192];             /* when refused: the one-line message */
};
/* Entries in the table (> 0). */
CXK_API int cxk_config_count(void);
/* Entry i (0-based) with the environment's value now. -ERANGE past the end; -EINVAL for a
 * NULL out or a struct_size smaller than this version's. The strings are static. */
CXK_API int cxk_config_entry(int i, struct cxk_config_entry *out);
/* Is variable `name`'s value now well-formed? 0 yes (or unset); -EINVAL no (why, when not
 * NULL, receives the message, cut to cap); -ENOENT for a name not in the table. */
CXK_API int cxk_config_check(const char *name, char *why, size_t cap);
/* The message of the last value this thread refused, e.g. "CXLKIT_MSG_CELLS=64k: expected
 * decimal digits within 1..4294967295; unset it or fix it", handed out once: the next call
 * gives "" until the thread refuses another. Valid until this thread's next call. */
CXK_API const char *cxk_config_error(void);

/* ---- sys: raw syscalls, cpuid --------------------------------------------------
 * Thin wrappers: same arguments as the kernel's, -errno instead of errno. */
CXK_API long cxk_mbind(void *addr, unsigned long len, int mode, const unsigned long *nodemask,
                       unsigned long maxnode, unsigned flags);
CXK_API long cxk_set_mempolicy(int mode, const unsigned long *nodemask, unsigned long maxnode);
CXK_API long cxk_get_mempolicy(int *mode, unsigned long *nodemask, unsigned long maxnode,
                               void *addr, unsigned long flags);
/* status[i] receives the node of pages[i] (nodes == NULL) or a negative errno per page. */
CXK_API long cxk_move_pages(int pid, unsigned long count, void **pages, const int *nodes,
                            int *status, int flags);
/* Returns the number of pages that could not be moved (>= 0) or -errno. */
CXK_API long cxk_migrate_pages(int pid, unsigned long maxnode, const unsigned long *old_nodes,
                               const unsigned long *new_nodes);
/* Returns a file descriptor (>= 0) or -errno. */
CXK_API int cxk_memfd_create(const char *name, unsigned flags);

/* Anonymous private mapping of nbytes (rounded up to the page size), not populated.
 * -EINVAL for nbytes == 0, -ENOMEM when the kernel refuses. */
CXK_API int cxk_map_anon(size_t nbytes, void **out);
/* Shared mapping of [offset, offset+nbytes) of fd; align (a power of two, 0 = page size)
 * is the required alignment of the address (2 MiB for devdax). */
CXK_API int cxk_map_fd(int fd, size_t nbytes, uint64_t offset, size_t align, int writable,
                       void **out);
CXK_API int cxk_unmap(void *addr, size_t nbytes);
/* Fault in [addr, addr+nbytes) for writing under the range's memory policy
 * (MADV_POPULATE_WRITE, or touching each page on kernels before 5.14). */
CXK_API int cxk_populate(void *addr, size_t nbytes);
CXK_API size_t cxk_page_size(void);
/* prctl(PR_SET_THP_DISABLE): no transparent huge pages for this process; inherited by
 * children and kept across execve (how `cxlkit run` keeps an interleave ratio per page). */
CXK_API int cxk_thp_disable(int disable);

enum cxk_cpu_feature {
    CXK_CPU_CLFLUSHOPT = 1u << 0,
    CXK_CPU_CLWB = 1u << 1,
    CXK_CPU_AVX2 = 1u << 2,
    CXK_CPU_AVX512F = 1u << 3,
    CXK_CPU_AVX512BW = 1u << 4,
    CXK_CPU_AVX512BF16 = 1u << 5,
    CXK_CPU_MOVDIR64B = 1u << 6,
    CXK_CPU_FMA = 1u << 7,
    CXK_CPU_F16C = 1u << 8,
    CXK_CPU_SSE42 = 1u << 9,   /* crc32c in hardware (the pool checksum) */
};
/* Bit set of cxk_cpu_feature the CPU and the OS (XSAVE state) both support. */
CXK_API uint32_t cxk_cpu_features(void);

/* ---- Memory operations: flush, invalidate, non-temporal copy, fences -----------
 * The primitives of the pool's publish/read protocol (DESIGN.md principle 2) and of the
 * copy engines. Cache-line granularity is 64 bytes. Safe from any thread. */
#define CXK_CACHELINE 64
/* Write back the lines of [addr, addr+nbytes) (clwb, else clflushopt, else clflush);
 * the lines may stay cached (clwb). Follow with cxk_sfence before publishing. */
CXK_API void cxk_flush(const void *addr, size_t nbytes);
/* Write back and evict the lines (clflushopt/clflush), so the next read comes from memory:
 * the invalidate-before-read of a non-coherent pool. Ends with a full fence. */
CXK_API void cxk_invalidate(const void *addr, size_t nbytes);
CXK_API void cxk_sfence(void);
CXK_API void cxk_mfence(void);
/* memcpy with non-temporal stores for the 64-byte-aligned body of dst (AVX-512, AVX2 or
 * SSE2 streaming stores), ordinary stores for the edges; ends with sfence. */
CXK_API void cxk_nt_copy(void *dst, const void *src, size_t nbytes);
/* memcpy then flush of dst then sfence: the payload half of a publish. */
CXK_API void cxk_copy_flush(void *dst, const void *src, size_t nbytes);
/* invalidate src then memcpy: the read half on a non-coherent pool. */
CXK_API void cxk_copy_invalidate(void *dst, const void *src, size_t nbytes);
/* Store 8 bytes with a non-temporal store (movnti) then sfence: flags and headers that
 * another host polls. dst 8-byte aligned. */
CXK_API void cxk_nt_store64(uint64_t *dst, uint64_t value);
/* The instruction cxk_flush uses: "clwb", "clflushopt" or "clflush". */
CXK_API const char *cxk_flush_kind(void);

/* ---- Placement: memory policies on ranges, the task, and residency ------------ */
#define CXK_MAX_POLICY_NODES 64   /* nodes named by one policy */
#define CXK_MAX_NODE_ID 1023      /* highest node id a policy may name */

enum cxk_policy_mode {
    CXK_POLICY_DEFAULT = 0,    /* the task's policy (usually local) */
    CXK_POLICY_BIND = 1,       /* nodes[0..n) strictly (MPOL_BIND) */
    CXK_POLICY_PREFERRED = 2,  /* nodes[0] first, others on pressure (MPOL_PREFERRED) */
    CXK_POLICY_INTERLEAVE = 3, /* page-by-page round robin (MPOL_INTERLEAVE) */
    CXK_POLICY_WEIGHTED = 4,   /* kernel MPOL_WEIGHTED_INTERLEAVE (6.9+): system-wide sysfs
                                  weights; weights[] here are ignored by the kernel */
    CXK_POLICY_STRIPE = 5,     /* software interleave: chunk_bytes chunks bound in turn, node i
                                  taking weights[i] consecutive chunks per round */
};

struct cxk_policy {
    int32_t mode;                            /* enum cxk_policy_mode */
    uint32_t nnodes;                         /* entries used in nodes/weights */
    int32_t nodes[CXK_MAX_POLICY_NODES];     /* distinct node ids, 0..CXK_MAX_NODE_ID */
    uint32_t weights[CXK_MAX_POLICY_NODES];  /* STRIPE: >= 1 each; 0 means 1 */
    uint64_t chunk_bytes;                    /* STRIPE: multiple of the page size; 0 = 2 MiB */
};

/* Checks a policy: -EINVAL for a bad mode, nnodes out of range (DEFAULT: 0; PREFERRED: 1;
 * others 1..CXK_MAX_POLICY_NODES), a node id out of range or repeated, or a bad chunk. */
CXK_API int cxk_policy_check(const struct cxk_policy *pol);

#define CXK_APPLY_MIGRATE 1u  /* move pages that already exist (MPOL_MF_MOVE) */
#define CXK_APPLY_STRICT 2u   /* fail with -EIO if some page could not be moved */
/* Apply pol to [addr, addr+nbytes); addr page-aligned. -EINVAL for a bad policy,
 * -EOPNOTSUPP for WEIGHTED on a kernel without MPOL_WEIGHTED_INTERLEAVE, else the
 * kernel's -errno (-EIO: pages not moved under CXK_APPLY_STRICT). */
CXK_API int cxk_policy_apply(void *addr, size_t nbytes, const struct cxk_policy *pol,
                             unsigned flags);
/* Set the calling thread's policy (inherited by children and kept across execve);
 * STRIPE is a range policy and gives -EINVAL here. */
CXK_API int cxk_policy_set_task(const struct cxk_policy *pol);

/* Where the pages of [addr, addr+nbytes) are. pages_per_node[n] += pages on node n for
 * n < max_nodes; *not_present counts pages not faulted in (or on a node >= max_nodes
 * when they cannot be attributed). node_of_page, when not NULL, has one entry per page:
 * the node, or -ENOENT for a page not present. addr page-aligned. */
CXK_API int cxk_residency(const void *addr, size_t nbytes, uint64_t *pages_per_node,
                          uint32_t max_nodes, uint64_t *not_present, int32_t *node_of_page);

/* The node that the Nth page (0-based) of a range under pol is meant to be on, or -1 when
 * the policy does not fix it (DEFAULT, PREFERRED fallback, WEIGHTED/INTERLEAVE whose
 * phase the kernel picks). BIND to one node and STRIPE are exact. */
CXK_API int cxk_policy_intended_node(const struct cxk_policy *pol, uint64_t page_index,
                                     size_t page_size);

/* Allocation = page-aligned anonymous mapping + policy + (optionally) populate, so that
 * every page is first touched under the policy. Free with cxk_unmap(addr, nbytes). */
#define CXK_ALLOC_POPULATE 1u
/* madvise(MADV_NOHUGEPAGE) before first touch. With transparent huge pages the kernel
 * interleaves whole 2 MiB folios, one node per folio; this keeps INTERLEAVE/WEIGHTED at
 * page granularity, so small ranges get the intended ratio. */
#define CXK_ALLOC_NOHUGEPAGE 2u
/* Ask for transparent huge pages: the mapping starts on a 2 MiB boundary (so every whole
 * 2 MiB of it can be one folio) and gets madvise(MADV_HUGEPAGE) before first touch, which
 * THP's "madvise" mode needs. Streaming kernels over many arrays (the optimizer step) then
 * miss the TLB once per 2 MiB instead of once per 4 KiB. -EINVAL with NOHUGEPAGE. */
#define CXK_ALLOC_HUGEPAGE 4u
CXK_API int cxk_alloc(size_t nbytes, const struct cxk_policy *pol, unsigned flags, void **out);

/* ---- Pinning: page-lock host memory for a GPU (cudaHostRegister) --------------
 * The CUDA runtime is loaded with dlopen when first needed; -ENODEV when it is not
 * present or reports no device. */
CXK_API int cxk_pin_available(void);   /* 1 if pinning is possible, else -ENODEV */
CXK_API int cxk_pin(void *addr, size_t nbytes);
CXK_API int cxk_unpin(void *addr);

/* ---- Benchmarks: latency and bandwidth kernels over memory the caller placed ----
 * The measuring half of `cxlkit bench`. Callers place the memory (cxk_alloc with a BIND
 * policy) and name the CPUs; these calls run on threads of their own, each pinned with
 * sched_setaffinity, and never change the caller's affinity. Times are CLOCK_MONOTONIC.
 * A CPU outside the calling thread's allowed set gives -EINVAL; a thread that cannot be
 * created gives -EAGAIN. Buffers must stay mapped for the duration of a call. */
enum cxk_bench_kind {
    CXK_BENCH_READ = 0,     /* vector loads folded into a sum */
    CXK_BENCH_WRITE = 1,    /* vector stores (the CPU reads each line for ownership first) */
    CXK_BENCH_COPY = 2,     /* memcpy src -> dst; counts bytes read + bytes written */
    CXK_BENCH_NT_WRITE = 3, /* non-temporal stores (no read for ownership), then sfence */
};
#define CXK_BENCH_MAX_THREADS 1024

/* Lay a random cyclic permutation over the stride-sized slots of [buf, buf+nbytes): the
 * first 8 bytes of each slot hold the address of the next, and the chain from buf visits
 * every slot once before returning (Sattolo's shuffle seeded by seed). stride: a power of two
 * in 8..nbytes/2. -EINVAL for bad arguments or buf not 8-byte aligned, -ENOMEM. */
CXK_API int cxk_bench_chase_init(void *buf, size_t nbytes, size_t stride, uint64_t seed);

/* Follow the chain laid in buf for nloads dependent loads (nloads >= 1) on a thread pinned
 * to cpu (cpu < 0: on the calling thread, as it is pinned). *ns_per_load = the chasing
 * thread's on-CPU time (CLOCK_THREAD_CPUTIME_ID) / nloads: time it spent descheduled while
 * other tasks shared its CPU is not counted. *wall_ns_per_load (NULL: not wanted) = wall
 * time / nloads; the two agree on an idle machine. */
CXK_API int cxk_bench_chase(const void *buf, uint64_t nloads, int cpu, double *ns_per_load,
                            double *wall_ns_per_load);

/* cxk_bench_chase from *cursor (NULL: from buf) instead of from buf, leaving in *cursor the
 * slot where it stopped, so that successive calls walk on through the cycle: each call from
 * buf walks the same first nloads slots again, which after the first call are partly in the
 * last-level cache (a 64 MiB chase measured 80-200 ns per load on a machine where the whole
 * cycle takes 158). *cursor must lie in [buf, buf + nbytes), at a multiple of 8 bytes from buf:
 * -EINVAL otherwise (the chain itself is trusted as cxk_bench_chase_init laid it). */
CXK_API int cxk_bench_chase_from(const void *buf, size_t nbytes, const void **cursor,
                                 uint64_t nloads, int cpu, double *ns_per_load,
                                 double *wall_ns_per_load);

struct cxk_bench_bw {
    int32_t kind;         /* enum cxk_bench_kind */
    uint32_t nthreads;    /* 1..CXK_BENCH_MAX_THREADS */
    const int32_t *cpus;  /* thread i runs on cpus[i % ncpus]; NULL or ncpus 0: unpinned */
    uint32_t ncpus;
    uint32_t reps;        /* timed repetitions (>= 1), after one untimed warm-up pass */
    uint32_t passes;      /* passes over the buffer per repetition (>= 1) */
};
/* Bandwidth of opts->kind over [dst, dst+nbytes) (and [src, src+nbytes) for COPY; src is
 * ignored otherwise). The range is split into nthreads contiguous parts; in each repetition
 * every thread starts at one barrier and the time runs until the last one finishes.
 * bytes_per_s[0..reps) receives each repetition's bytes moved / elapsed (COPY counts
 * 2*nbytes per pass, the STREAM convention). dst and src 64-byte aligned, nbytes a
 * multiple of 64 and >= 64*nthreads; otherwise -EINVAL. */
CXK_API int cxk_bench_bandwidth(void *dst, const void *src, size_t nbytes,
                                const struct cxk_bench_bw *opts, double *bytes_per_s);
/* cxk_bench_bandwidth, and (cpu_bytes_per_s not NULL) per repetition the sum over threads
 * of bytes / that thread's on-CPU time: what the team would reach had no other task shared
 * its CPUs (an estimate — threads descheduled at different times overlap less than it
 * assumes). Equal to bytes_per_s on an idle machine. */
CXK_API int cxk_bench_bandwidth_ex(void *dst, const void *src, size_t nbytes,
                                   const struct cxk_bench_bw *opts, double *bytes_per_s,
                                   double *cpu_bytes_per_s);

struct cxk_bench_loaded {
    int32_t chase_cpu;        /* CPU of the latency thread (< 0: unpinned) */
    int32_t kind;             /* what each load generator does: enum cxk_bench_kind */
    uint32_t ngen;            /* load-generator threads, 1..CXK_BENCH_MAX_THREADS */
    const int32_t *gen_cpus;  /* generator i on gen_cpus[i % ngen_cpus]; NULL: unpinned */
    uint32_t ngen_cpus;
    double rate;              /* total target bytes/s of all generators; 0 = unthrottled */
    uint64_t duration_ns;     /* the measuring window, >= 1 ms */
};
/* Latency under load: generators sweep their parts of gen_buf (ngen parts; each part's two
 * halves for COPY), throttled to opts->rate by spinning between 16 KiB chunks, while the
 * latency thread follows the chain laid in chase_buf for duration_ns of wall time.
 * *ns_per_load gets the chase's mean over its on-CPU time (as cxk_bench_chase),
 * *gen_bytes_per_s the bandwidth the generators reached in the same wall-time window.
 * gen_buf 64-byte aligned, gen_nbytes >= 32 KiB per generator; otherwise -EINVAL. */
CXK_API int cxk_bench_loaded_latency(const void *chase_buf, void *gen_buf, size_t gen_nbytes,
                                     const struct cxk_bench_loaded *opts, double *ns_per_load,
                                     double *gen_bytes_per_s);

enum cxk_bench_copy_method {
    CXK_COPY_MEMCPY = 0,     /* memcpy */
    CXK_COPY_NT = 1,         /* cxk_nt_copy */
    CXK_COPY_FLUSH = 2,      /* cxk_copy_flush: the publish half of the pool protocol */
    CXK_COPY_INVALIDATE = 3, /* cxk_copy_invalidate: the read half on a non-coherent pool */
};
/* ncopies copies of size bytes by method on a thread pinned to cpu (< 0: calling thread).
 * Copy i reads src + o and writes dst + o, o = (i mod (span/size)) * size, so consecutive
 * copies walk through [0, span) of both buffers instead of re-reading one hot range.
 * *ns_total = elapsed for all copies. -EINVAL for size 0, size > span, ncopies 0, bad method. */
CXK_API int cxk_bench_copy(void *dst, const void *src, size_t span, size_t size, int method,
                           uint64_t ncopies, int cpu, double *ns_total);

/* Ask for transparent huge pages on [addr, addr+nbytes) (madvise MADV_HUGEPAGE) before
 * the range is populated, so a latency sweep measures caches and memory rather than TLB
 * reach. addr page-aligned. -EINVAL when THP is not built in; the kernel's -errno. */
CXK_API int cxk_bench_hugepages(void *addr, size_t nbytes);

/* ---- KV cache: scatter/gather between an engine's paged KV tensors and pool blocks ----
 * A block image is the KV of one block of tokens for all layers, laid out canonically as
 * [layers][K,V][tokens][kv_heads][head_dim]. A plan says where each contiguous run of an
 * image lives in the engine's tensors: run i copies nbytes between image offset img_off and
 * bases[base] + block_id * block_stride[base] + eng_off. Plans come from cxlkit.kv.layout
 * (strides of per-layer or all-layers-contiguous tensors); the calls only move bytes.
 * Thread-safe: plans and block lists are read-only; callers own the memory they name. */
struct cxk_kv_seg {
    uint32_t base;     /* index into the plan's bases */
    uint32_t reserved; /* 0 */
    int64_t eng_off;   /* bytes from bases[base] + block_id * block_stride[base] */
    uint64_t img_off;  /* bytes from the start of the block image */
    uint64_t nbytes;
};
struct cxk_kv_plan {
    uint32_t nbases;
    uint32_t nsegs;
    const uint64_t *bases;        /* engine tensor addresses */
    const int64_t *block_stride;  /* bytes between consecutive block ids, per base */
    const uint64_t *extent;       /* bytes addressable from each base: runs must stay inside */
    const struct cxk_kv_seg *segs;
    uint64_t image_bytes;         /* runs must stay inside [0, image_bytes) */
};
#define CXK_KV_FLUSH 1u       /* gather: write each image back (clwb/clflushopt) + sfence */
#define CXK_KV_NT 2u          /* gather: non-temporal stores into the images, then sfence */
#define CXK_KV_INVALIDATE 4u  /* scatter: evict the image lines before reading them */
/* Check a plan: -EINVAL for NULL arrays, a base index out of range, a run outside the image
 * or a reserved field not 0. */
CXK_API int cxk_kv_plan_check(const struct cxk_kv_plan *plan);
/* Engine -> images: for each i < nblocks copy block block_ids[i] into images[i]. The publish
 * half of a put: with CXK_KV_FLUSH or CXK_KV_NT the bytes are in memory when it returns.
 * -EINVAL for a bad plan or flags, -ERANGE for a block id whose runs leave a base's extent
 * (checked for every block before any byte moves). */
CXK_API int cxk_kv_gather(const struct cxk_kv_plan *plan, const int64_t *block_ids,
                          void *const *images, size_t nblocks, unsigned flags);
/* Images -> engine, the reverse; sums (NULL, or nblocks entries) receives cxk_kv_checksum of
 * each image as copied, computed over the destination bytes just written. */
CXK_API int cxk_kv_scatter(const struct cxk_kv_plan *plan, const int64_t *block_ids,
                           const void *const *images, size_t nblocks, unsigned flags,
                           uint64_t *sums);
/* 64-bit checksum of an image (Fletcher-style over 64-bit lanes, then mixed): cheap enough to
 * run at memory speed, meant to catch torn or stale copies, not adversaries. Never 0. */
CXK_API uint64_t cxk_kv_checksum(const void *image, size_t nbytes);
/* The same checksum over an image's runs in the engine (the plan's order), without copying. */
CXK_API int cxk_kv_checksum_engine(const struct cxk_kv_plan *plan, int64_t block_id,
                                   uint64_t *sum);
/* Copy nbytes from src to dst (not overlapping) and set *sum to cxk_kv_checksum of the bytes
 * copied, in one pass over them (each byte loaded once). -EINVAL for a NULL sum, or a NULL
 * buffer with nbytes > 0. */
CXK_API int cxk_kv_copy_sum(void *dst, const void *src, size_t nbytes, uint64_t *sum);

/* Blocks in a pool: each block is one pool object whose payload starts with this header,
 * followed by the image. The creating host writes it before cxk_obj_publish; it never
 * changes afterwards (objects are immutable; eviction destroys them). */
struct cxk_pool; /* declared in the Pools section */
#define CXK_KV_BLOCK_MAGIC 0x314b4c4256584b43ull /* "CKXVBLK1" in memory (little-endian) */
#define CXK_KV_HDR_BYTES 128
struct cxk_kv_block_hdr {
    uint64_t magic;
    uint8_t key[32];       /* the block's chain hash */
    uint8_t layout[32];    /* packed layout descriptor (cxlkit.kv.layout.BlockLayout.pack) */
    uint64_t image_bytes;
    uint64_t checksum;     /* cxk_kv_checksum of the image, 0 = not recorded */
    int64_t created_ns;    /* CLOCK_REALTIME */
    uint8_t reserved[32];
};
#define CXK_KV_CHECKSUM 8u  /* put: record the image checksum; get: verify it */
/* Put n blocks: create names[i] (nbytes CXK_KV_HDR_BYTES + image; not zeroed first when the
 * plan's runs cover the whole image, see CXK_OBJ_NOZERO), gather block_ids[i] into
 * it (CXK_KV_NT: with streaming stores), write the header (key keys[32*i..], layout), publish,
 * drop the creator's lease.
 * status[i]: 0 stored, -EEXIST already present (not an error: blocks are immutable),
 * -ENOSPC no room (the caller evicts and retries), else -errno; the call goes on after a
 * failed block. Returns -EINVAL for bad arguments, else the number stored (>= 0). */
CXK_API int cxk_kv_put(struct cxk_pool *p, const struct cxk_kv_plan *plan, const char *const *names,
                       const uint8_t *keys, const uint8_t *layout, const int64_t *block_ids,
                       size_t n, unsigned flags, int *status);
/* Get the leading blocks: for i = 0.. open names[i] (taking a lease), check its header (key,
 * layout, size), scatter the image into block_ids[i] (invalidating first on a non-coherent
 * pool), verify the checksum (CXK_KV_CHECKSUM), re-validate the object's generation, drop
 * the lease. Stops at the first block that fails; status[i] of the blocks tried: 0, or
 * -ENOENT missing, -EAGAIN not yet published, -ESTALE replaced or destroyed while copied,
 * -EBADMSG header or checksum mismatch. Bytes of a failed block in the engine are garbage:
 * only the first return-value blocks were loaded. Returns that count (>= 0) or -EINVAL. */
CXK_API int cxk_kv_get(struct cxk_pool *p, const struct cxk_kv_plan *plan, const char *const *names,
                       const uint8_t *keys, const uint8_t *layout, const int64_t *block_ids,
                       size_t n, unsigned flags, int *status);
/* With CXK_KV_CHECKSUM, a block put without one (checksum 0) stops the get with status
 * -ENODATA: it cannot be verified, so it is not loaded (nor called corrupt). */
/* Number of leading names that are published (no lease taken, nothing copied). */
CXK_API int cxk_kv_lookup(struct cxk_pool *p, const char *const *names, size_t n, size_t *nhits);

/* ---- Optimizer: mixed-precision CPU Adam / AdamW ---------------------------------
 * One pass over fp32 master params, exp_avg and exp_avg_sq per element: gradients in fp32,
 * bf16 or fp16 are upcast in registers, scaled by grad_scale, and an optional bf16, fp16 or
 * fp32 copy of the updated params is written in the same pass. Per element, in fp32:
 *   g = grad*grad_scale; if MAXIMIZE g = -g; if weight decay is L2 (no DECOUPLED) g += wd*p
 *   if DECOUPLED p *= 1 - lr*wd
 *   m += (1-beta1)*(g-m);  v = beta2*v + (1-beta2)*(g*g)
 *   p += ((-lr*sqrt(bc2)/bc1)*m) / (sqrt(v) + eps*sqrt(bc2))
 *   with bc = 1-beta^step (1 without BIAS_CORRECTION): torch's update with numerator and
 *   denominator multiplied by sqrt(bc2), one division per element fewer (a few ulp apart).
 * No fused multiply-add is used, so every SIMD level gives the bits of the scalar one.
 * The level is the best the CPU offers unless CXLKIT_SIMD (read once, at the first call)
 * or cxk_adam_hparams.simd forces one. */
enum cxk_dtype { CXK_DTYPE_NONE = -1, CXK_DTYPE_F32 = 0, CXK_DTYPE_BF16 = 1, CXK_DTYPE_F16 = 2 };
enum cxk_simd { CXK_SIMD_AUTO = 0, CXK_SIMD_SCALAR = 1, CXK_SIMD_AVX2 = 2, CXK_SIMD_AVX512 = 3,
                /* AVX-512F + BW + AVX512_BF16: bf16 copies rounded by vcvtneps2bf16, same bits */
                CXK_SIMD_AVX512BF16 = 4 };

#define CXK_ADAM_DECOUPLED 1u        /* AdamW: decay the params, not the gradient */
#define CXK_ADAM_MAXIMIZE 2u         /* ascend */
#define CXK_ADAM_BIAS_CORRECTION 4u  /* divide by 1-beta^step (torch always does) */
#define CXK_ADAM_NT_STATE 8u         /* non-temporal stores for p, m, v (aligned body) */
#define CXK_ADAM_NT_COPY 16u         /* non-temporal stores for param_copy (aligned body) */
/* param_copy holds the params as their owner sees them: before the update, an element whose
 * copy is not the master rounded to copy_dtype was written by someone else (a load, an init,
 * a write through .data) and the master takes the copy's value, widened; the _ex calls count
 * such elements. Costs the read of the copy (free unless NT_COPY saved it). */
#define CXK_ADAM_RESYNC 32u
/* Benchmarks only: the step's memory traffic without its arithmetic, the bandwidth bound a
 * step is judged against. Every element of param, exp_avg, exp_avg_sq and grad is read and
 * param, exp_avg, exp_avg_sq (and param_copy, read as RESYNC reads it) are written back
 * unchanged, bit for bit, through the step's own loop, vector width, prefetch and threads
 * (fp32: 4 arrays read, 3 written, 28 bytes per element). Nothing is re-read or counted. */
#define CXK_ADAM_TRAFFIC 64u

struct cxk_adam_hparams {
    double lr, beta1, beta2, eps, weight_decay, grad_scale;
    int64_t step;    /* 1 for the first step */
    uint32_t flags;  /* CXK_ADAM_* */
    int32_t simd;    /* enum cxk_simd; AUTO = CXLKIT_SIMD or the best available */
};

/* One tensor: n elements in each array; param, exp_avg, exp_avg_sq and param_copy must not
 * overlap one another; param 4-byte aligned. param_copy is NULL iff copy_dtype is NONE. */
struct cxk_adam_tensor {
    float *param;
    float *exp_avg;
    float *exp_avg_sq;
    const void *grad;   /* grad_dtype elements */
    void *param_copy;   /* copy_dtype elements or NULL */
    uint64_t n;
    int32_t grad_dtype; /* F32, BF16 or F16 */
    int32_t copy_dtype; /* NONE, F32, BF16 or F16 */
};

/* Update ntensors tensors on the calling thread. -EINVAL for bad hyperparameters
 * (lr, eps or weight_decay < 0, a beta outside [0,1), anything not finite, step < 1) or a
 * bad tensor (NULL array with n > 0, bad dtype, copy pointer/dtype mismatch) or an unknown
 * name in CXLKIT_SIMD; -ENOTSUP when the forced SIMD level is not available here.
 * Everything is checked before any element is written. */
CXK_API int cxk_adam_step(const struct cxk_adam_hparams *h, const struct cxk_adam_tensor *t,
                          size_t ntensors);
/* As cxk_adam_step; *resynced (if not NULL) = elements re-read from param_copy (RESYNC). */
CXK_API int cxk_adam_step_ex(const struct cxk_adam_hparams *h, const struct cxk_adam_tensor *t,
                             size_t ntensors, uint64_t *resynced);
/* The level AUTO resolves to here (CXLKIT_SIMD or the best available), or -errno as above. */
CXK_API int cxk_adam_simd(void);
/* "scalar", "avx2", "avx512", "avx512bf16", "auto"; "?" for anything else. */
CXK_API const char *cxk_simd_name(int simd);

/* Thread teams that follow memory: one team per memory node, its threads pinned to the
 * node's CPUs (a CPU-less node, e.g. CXL, uses the CPUs of the nearest node that has some).
 * A step cuts every tensor at chunk_bytes boundaries of the param address, asks the kernel
 * which node holds each chunk's first param page (move_pages) and lets that node's team
 * update the chunk; a chunk on a node without a team, or not faulted in, goes to the first
 * team. Teams never take each other's chunks. One step at a time per team object. */
typedef struct cxk_adam_team cxk_adam_team;
struct cxk_adam_team_opts {
    uint32_t nnodes;                         /* 0 = every memory node of this machine */
    int32_t nodes[CXK_MAX_POLICY_NODES];     /* distinct node ids */
    uint32_t threads[CXK_MAX_POLICY_NODES];  /* per node, <= 1024; 0 = the node's CPUs (a
                                                CPU-less node: half its nearest node's) */
    uint64_t chunk_bytes;                    /* of fp32 params, multiple of 64; 0 = 1 MiB */
    uint32_t pin;                            /* 1 = pin each team to its CPUs */
};
/* opts NULL = defaults. -EINVAL for a bad node list, thread count or chunk, -EAGAIN when a
 * thread cannot be started, the -errno of pinning otherwise. */
CXK_API int cxk_adam_team_create(const struct cxk_adam_team_opts *opts, cxk_adam_team **out);
CXK_API void cxk_adam_team_destroy(cxk_adam_team *team);
/* As cxk_adam_step, run by the teams while the caller waits; also the -errno of the
 * move_pages node query (nothing written then). */
CXK_API int cxk_adam_team_step(cxk_adam_team *team, const struct cxk_adam_hparams *h,
                               const struct cxk_adam_tensor *t, size_t ntensors);
CXK_API int cxk_adam_team_step_ex(cxk_adam_team *team, const struct cxk_adam_hparams *h,
                                  const struct cxk_adam_tensor *t, size_t ntensors,
                                  uint64_t *resynced);
/* A team that owns no threads: each step is one parallel region of the OpenMP runtime this
 * process has already loaded (GOMP_parallel: libgomp, or an LLVM/Intel runtime's GOMP entry
 * points), so it runs on the threads the process's other OpenMP work (e.g. PyTorch's
 * intra-op pool) uses and keeps warm, instead of competing with them for the cores.
 * runtime: the path (or a substring of it) of the loaded library; NULL = the first of
 * libgomp, libiomp5, libomp found. nthreads: per step; 0 = the runtime's default for the
 * calling thread (omp_set_num_threads, OMP_NUM_THREADS). Never loads a runtime: -ENOENT when
 * none is loaded, -ENOSYS when it has no GOMP_parallel. Chunks are not placed by node (one
 * team, node -1 in cxk_adam_team_info). */
CXK_API int cxk_adam_team_create_omp(const char *runtime, uint32_t nthreads,
                                     uint64_t chunk_bytes, cxk_adam_team **out);
/* For i < min(cap, *nteams): nodes[i], threads[i], cpus[i] (the first CPU the team may
 * run on, -1 unpinned) and chunks[i] = chunks team i updated in the last step. Output
 * arrays may be NULL. */
CXK_API int cxk_adam_team_info(const cxk_adam_team *team, uint32_t cap, int32_t *nodes,
                               uint32_t *threads, int32_t *cpus, uint64_t *chunks,
                               uint32_t *nteams);

/* ---- Out-of-place steps: the update read from one set of arrays, written to another ----
 * cxk_adam_step_into reads param / exp_avg / exp_avg_sq of t[i] and writes the updated values
 * to out[i]'s arrays (param_copy, grad and the flags as in cxk_adam_step); the inputs are not
 * written. Each output array is either exactly its input array (that array updated in place:
 * out[i] equal to t[i]'s three pointers is cxk_adam_step, bit for bit) or shares no byte with
 * any array of t[i] nor with the other two outputs; -EINVAL otherwise, for a NULL or
 * misaligned output array with n > 0, or out NULL with ntensors > 0. Every SIMD level gives
 * the bits of the in-place step. The update of a subgroup's state from the slot that holds
 * its committed generation straight into the other slot (docs/subgroups.md, run 7). */
struct cxk_adam_out {
    float *param;
    float *exp_avg;
    float *exp_avg_sq;
};
CXK_API int cxk_adam_step_into(const struct cxk_adam_hparams *h, const struct cxk_adam_tensor *t,
                               const struct cxk_adam_out *out, size_t ntensors,
                               uint64_t *resynced);
/* As cxk_adam_step_into, run by the team (chunks placed by the input param's node). */
CXK_API int cxk_adam_team_step_into(cxk_adam_team *team, const struct cxk_adam_hparams *h,
                                    const struct cxk_adam_tensor *t,
                                    const struct cxk_adam_out *out, size_t ntensors,
                                    uint64_t *resynced);
/* The payload checksum (cxk_kv_checksum) of an image as parts that add: over the
 * image's 64-bit little-endian words i, lane l = i % 4, a[l] = sum of w_i and c[l] = sum of
 * (i/4 + 1) * w_i, mod 2^64, so byte ranges fold in any order and by any thread.
 * cxk_adam_sum_add folds the image bytes [img_off, img_off + nbytes) held at p (-EINVAL for
 * NULL or offsets and sizes that are not multiples of 4); cxk_adam_sum_finish gives
 * cxk_kv_checksum of the image of image_nbytes (a multiple of 4) when every byte of it was
 * folded once. Zero-initialize a cxk_sum_parts to start. */
struct cxk_sum_parts {
    uint64_t a[4];
    uint64_t c[4];
};
CXK_API int cxk_adam_sum_add(struct cxk_sum_parts *s, const void *p, uint64_t img_off,
                             uint64_t nbytes);
CXK_API uint64_t cxk_adam_sum_finish(const struct cxk_sum_parts *s, uint64_t image_nbytes);
/* cxk_adam_step_into with the checksum folded into the kernel's pass: img_off gives per
 * tensor 3 byte offsets (param, exp_avg, exp_avg_sq element 0) in the image their bytes
 * belong to (the input and output images have the same layout); in_sum (NULL: none) gets the
 * parts of every byte the step reads from those arrays, taken before it writes them; out_sum
 * (NULL: none) of every byte it writes. Both are added to. The kernel runs in tiles of 1024
 * elements, each tile's sums taken from L1 beside it, NT_STATE ignored (the same bits).
 * -EINVAL as cxk_adam_step_into, or img_off NULL or not multiples of 4. */
CXK_API int cxk_adam_step_into_sum(const struct cxk_adam_hparams *h,
                                   const struct cxk_adam_tensor *t,
                                   const struct cxk_adam_out *out, size_t ntensors,
                                   const uint64_t *img_off, struct cxk_sum_parts *in_sum,
                                   struct cxk_sum_parts *out_sum, uint64_t *resynced);
CXK_API int cxk_adam_team_step_into_sum(cxk_adam_team *team, const struct cxk_adam_hparams *h,
                                        const struct cxk_adam_tensor *t,
                                        const struct cxk_adam_out *out, size_t ntensors,
                                        const uint64_t *img_off, struct cxk_sum_parts *in_sum,
                                        struct cxk_sum_parts *out_sum, uint64_t *resynced);

/* ---- One Adam step, every variant: a descriptor that grows by appending fields ----
 * cxk_adam_run is the step entry point; the cxk_adam_step / _ex / _into / _into_sum and
 * cxk_adam_team_step* calls above are thin wrappers over it, kept for one release.
 * struct_size = sizeof(struct cxk_adam_step_desc) as the caller was compiled: a shorter
 * descriptor (an older caller) reads its missing fields as zero; a longer one (a newer
 * caller) is accepted when every byte past the fields this library knows is zero, else
 * -E2BIG. Fields: hparams and tensors[ntensors] as in cxk_adam_step; team NULL = the calling
 * thread, else that team runs it; out NULL = in place, else out[ntensors] as in
 * cxk_adam_step_into; img_off with in_sum / out_sum (needs out; NULL: no checksums) as in
 * cxk_adam_step_into_sum. On return resynced = elements re-read from param_copy (RESYNC).
 * Errors as the calls above; -EINVAL also for d NULL or struct_size below
 * CXK_ADAM_STEP_DESC_MIN. */
struct cxk_adam_step_desc {
    uint32_t struct_size;
    uint32_t reserved;                       /* 0 */
    const struct cxk_adam_hparams *hparams;
    const struct cxk_adam_tensor *tensors;
    uint64_t ntensors;
    cxk_adam_team *team;
    const struct cxk_adam_out *out;
    const uint64_t *img_off;
    struct cxk_sum_parts *in_sum;
    struct cxk_sum_parts *out_sum;
    uint64_t resynced;                       /* out */
};
/* The smallest descriptor accepted: up to and including ntensors. */
#define CXK_ADAM_STEP_DESC_MIN 32u
CXK_API int cxk_adam_run(struct cxk_adam_step_desc *d);

/* ---- Pools: named objects in one memory range shared by processes and hosts ----
 * Shaped like POSIX shm: open a pool, create / open / close / destroy objects by name.
 * Layout and protocol: docs/pool-format.md. Offsets (off) are bytes from the pool base
 * (cxk_pool_base): they mean the same in every process and host; never store pointers in
 * a pool. A host writes only its own host slot, name table, lease table and partition, so
 * only the owner host may destroy an object. Handles are thread-safe. Errors beyond the
 * usual -errno: -EMEDIUMTYPE not a cxlkit pool (foreign or blank superblock),
 * -EPROTONOSUPPORT unsupported format version, -EBADMSG corrupt (checksum, geometry),
 * -ERANGE device or size too small, -ENAMETOOLONG name over CXK_POOL_NAME_MAX,
 * -EEXIST name taken, -ENOENT unknown name, -ENOSPC partition or name table full,
 * -EAGAIN object not yet published, -EPERM object of another host, -ESTALE object
 * destroyed or replaced under a reader, -EBUSY host slot owned by another host's tag. */
typedef struct cxk_pool cxk_pool;

#define CXK_POOL_NAME_MAX 255
#define CXK_POOL_TAG_MAX 31
#define CXK_POOL_MAX_HOSTS 64
#define CXK_POOL_MAX_BACKINGS 16
#define CXK_POOL_STRIPE_BYTES (2u << 20) /* interleave granule of several backings */

enum cxk_coherence {
    CXK_COHERENCE_HOST = 0, /* one coherence domain: flushes are no-ops, ordering kept */
    CXK_COHERENCE_NONE = 1, /* hosts without coherence: flush on publish, invalidate on read */
    /* ---- the non-coherence simulator ---- */
    CXK_COHERENCE_SIM = 2,  /* as NONE, on a simulated cache per host id (docs/pool-format.md):
                               tests only; $CXLKIT_SIM_SEED, $CXLKIT_SIM_EVICT, $CXLKIT_SIM_DIR */
};

#define CXK_POOL_CREATE 1u /* format the pool if it does not exist (files: atomically) */
#define CXK_POOL_EXCL 2u   /* with CREATE: -EEXIST if it exists */
#define CXK_POOL_FORCE 4u  /* with CREATE on a device: format over foreign data */
/* ---- pool open flags (pool reliability) ---- */
#define CXK_POOL_SHARED 8u      /* accept a pool file of another owner, or group-writable (a
                                   group-shared pool); world-writable files are always -EPERM */
#define CXK_POOL_OVERCOMMIT 16u /* CREATE: skip the free-space check of the filesystem */
#define CXK_POOL_REPAIR 32u     /* reset this host's lock when it is damaged (fsck --repair) */
#define CXK_POOL_READ_V1 64u    /* a version 1 pool file opens read-only (a private view;
                                   writes -EROFS; stat's version says 1) instead of failing */
#define CXK_POOL_LEASE_TIMEOUT_MIN_MS 1000u     /* lease_timeout_ms range: 4 heartbeats */
#define CXK_POOL_LEASE_TIMEOUT_MAX_MS 86400000u /* each at least 250 ms apart; at most a day */

struct cxk_pool_opts {
    uint32_t flags;            /* CXK_POOL_* */
    int32_t host_id;           /* host slot 0..max_hosts-1 (else -EDOM); -1: the slot
                                  tagged host_tag, else a free one */
    const char *host_tag;      /* this host's name (<= CXK_POOL_TAG_MAX bytes); NULL = "" */
    int32_t coherence;         /* enum cxk_coherence */
    int32_t numa_node;         /* >= 0: bind file/memfd backings to this node; -1: none */
    uint64_t size;             /* CREATE: total bytes (files, memfd); devices use their size */
    uint32_t max_hosts;        /* CREATE: 1..CXK_POOL_MAX_HOSTS; 0 = 4 */
    uint32_t mode;             /* CREATE: file mode; 0 = 0600 */
    uint64_t max_objects;      /* CREATE: names per host; 0 = one per 16 KiB, at least 256 */
    uint32_t lease_slots;      /* CREATE: lease entries per host; 0 = 1024 */
    uint32_t lease_timeout_ms; /* CREATE: a host silent this long is dead; 0 = 10000 */
};
/* Zeroes opts and sets host_id = -1, numa_node = -1. */
CXK_API void cxk_pool_opts_init(struct cxk_pool_opts *opts);

/* Open (or with CXK_POOL_CREATE create) the pool on path: a regular file (tmpfs or
 * hugetlbfs), a devdax character device (/dev/daxX.Y: size and alignment from sysfs),
 * or "memfd:NAME" (anonymous memory; other processes open /proc/PID/fd/N). A failed
 * open never writes to the pool. A child of fork may use and close an inherited handle
 * (leases carry the caller's pid; the heartbeat thread stays in the parent) but should open
 * its own for long use. */
CXK_API int cxk_pool_open(const char *path, const struct cxk_pool_opts *opts, cxk_pool **out);
/* The same over several backings of equal size striped at CXK_POOL_STRIPE_BYTES into one
 * contiguous range (backing i holds granules i, i+n, ...); every host lists them in the
 * same order. */
CXK_API int cxk_pool_open_striped(const char *const *paths, uint32_t npaths,
                                  const struct cxk_pool_opts *opts, cxk_pool **out);
/* Drops this handle's leases and unmaps. NULL is a no-op. */
CXK_API int cxk_pool_close(cxk_pool *p);
CXK_API void *cxk_pool_base(const cxk_pool *p);
/* memfd pools: the descriptor that holds the memory (other processes open the pool as
 * "/proc/PID/fd/FD"); -ENOENT for other backings. */
CXK_API int cxk_pool_fd(const cxk_pool *p);

struct cxk_pool_stat {
    uint64_t size;            /* bytes mapped */
    uint64_t partition_bytes; /* the data region, which any one host may fill (format v2) */
    uint64_t used_bytes;      /* this host: blocks in use, headers included */
    uint64_t free_bytes;      /* this host: used + free == the extents it holds */
    uint64_t objects;         /* published objects, every host */
    uint64_t objects_host;    /* published objects of this host */
    uint64_t max_objects;     /* names per host */
    uint64_t align;           /* mapping alignment */
    uint64_t lease_timeout_ns;
    uint64_t data_off;        /* extent e starts at data_off + e * extent_bytes */
    uint32_t version, max_hosts, host_id, hosts_active, coherence, nbackings;
    uint8_t uuid[16];
    char kind[16];            /* "file", "devdax", "memfd", "striped" */
    /* format v2: hosts claim extents of the data region on demand */
    uint64_t extent_bytes, nextents;
    uint64_t extents_held;    /* this host */
    uint64_t extents_free;    /* held by no host */
    uint64_t names_host;      /* this host's names in use (published and being created) */
};
CXK_API int cxk_pool_stat(cxk_pool *p, struct cxk_pool_stat *st);

enum cxk_obj_state { CXK_OBJ_CREATING = 1, CXK_OBJ_LIVE = 2, CXK_OBJ_DEAD = 3 };
struct cxk_obj_stat {
    char name[CXK_POOL_NAME_MAX + 1];
    uint64_t off;        /* payload offset from the pool base (64-byte aligned) */
    uint64_t nbytes;
    uint64_t generation; /* unique per host; changes when a name is re-created */
    uint64_t checksum;   /* crc32c of the payload | 1 << 32, or 0 when not computed */
    int64_t created_ns;  /* CLOCK_REALTIME */
    uint32_t host;       /* owner host slot */
    uint32_t state;      /* enum cxk_obj_state */
};

/* Reserve name and allocate nbytes (> 0) in this host's partition; *off is the zeroed,
 * writable payload. The object is invisible to cxk_obj_open until cxk_obj_publish; the
 * creator holds a lease until cxk_obj_close. If the creator dies first, the object is
 * reclaimed. */
CXK_API int cxk_obj_create(cxk_pool *p, const char *name, uint64_t nbytes, uint64_t *off);
/* Skip zeroing the payload: it holds whatever the block last held (a destroyed object's
 * bytes). Contract: the caller writes every byte of the payload before cxk_obj_publish.
 * Until then no reader can see it (open finds unpublished objects -EAGAIN, reads validate
 * LIVE), and a creator that dies first leaves the block to be reclaimed unread. */
#define CXK_OBJ_NOZERO 1u
/* cxk_obj_create with flags (CXK_OBJ_*); -EINVAL for unknown flags. */
CXK_API int cxk_obj_create_ex(cxk_pool *p, const char *name, uint64_t nbytes, unsigned flags,
                              uint64_t *off);
#define CXK_PUBLISH_CHECKSUM 1u /* record crc32c of the payload for readers to verify */
/* Publish the object at off (payload flushed, fenced, then the header): from now on
 * cxk_obj_open finds it. -EINVAL when off is not an unpublished object of this host. */
CXK_API int cxk_obj_publish(cxk_pool *p, uint64_t off, unsigned flags);
/* Find a published object by name on any host and take a lease on it (its memory is not
 * reused while the lease lives); st receives its description. */
CXK_API int cxk_obj_open(cxk_pool *p, const char *name, struct cxk_obj_stat *st);
/* Drop one lease this handle holds on off. -ENOENT if it holds none. */
CXK_API int cxk_obj_close(cxk_pool *p, uint64_t off);
/* Remove name (this host's objects only). Its memory is freed once no lease holds it. */
CXK_API int cxk_obj_destroy(cxk_pool *p, const char *name);
CXK_API int cxk_obj_stat(cxk_pool *p, const char *name, struct cxk_obj_stat *st);
/* The object whose payload is at off (any state but free); -EINVAL if none is there. */
CXK_API int cxk_obj_stat_at(cxk_pool *p, uint64_t off, struct cxk_obj_stat *st);
/* Up to cap published or reserved objects of every host; *n receives how many exist. */
CXK_API int cxk_obj_list(cxk_pool *p, struct cxk_obj_stat *out, size_t cap, size_t *n);
/* Seqlock read: invalidate (coherence "none"), copy [pos, pos+nbytes) of the payload at
 * off, then check that the object still has `generation` and is published: -ESTALE if not,
 * -ERANGE past its end. */
CXK_API int cxk_obj_read(cxk_pool *p, uint64_t off, uint64_t generation, uint64_t pos,
                         void *dst, size_t nbytes);
/* 0 while the object at off is published with `generation`, else -ESTALE. */
CXK_API int cxk_obj_validate(cxk_pool *p, uint64_t off, uint64_t generation);
/* Recompute the payload checksum: -EBADMSG on mismatch, -ENODATA if none was recorded,
 * -ESTALE when off no longer leads to an object (destroyed, or its extent claimed since). */
CXK_API int cxk_obj_verify(cxk_pool *p, uint64_t off);
/* Make [off, off+nbytes) written by this process visible to other hosts / drop stale
 * cached copies before reading; no-ops (fences only) under CXK_COHERENCE_HOST. */
CXK_API void cxk_pool_flush(cxk_pool *p, uint64_t off, uint64_t nbytes);
/* 0 when [off, off + nbytes) lies in one run of extents this host holds (the only bytes it
 * may write), else -EINVAL. */
CXK_API int cxk_pool_owns(cxk_pool *p, uint64_t off, uint64_t nbytes);
CXK_API void cxk_pool_invalidate(cxk_pool *p, uint64_t off, uint64_t nbytes);

/* -ETIMEDOUT from cxk_obj_create (and cxk_pool_release): a live host's bakery registers kept
 * this host waiting, unchanged, for longer than any holder holds them (a stopped process of
 * that host, or registers no host writes): nothing was created and nothing stays held. This
 * gives that host's slot (the calling thread's last such error on p), or -1. */
CXK_API int cxk_pool_wait_host(const cxk_pool *p);

struct cxk_fsck_report {
    uint64_t objects_live, objects_creating, objects_dead, blocks_free;
    uint64_t bytes_used, bytes_free;      /* all hosts */
    uint64_t largest_free;                /* largest free block of any host */
    uint64_t reclaimed_objects;           /* this host: half-created or unleased dead */
    uint64_t reclaimed_bytes;
    uint64_t repaired_entries;            /* this host: name entries rebuilt or removed */
    uint64_t leases_live, leases_expired; /* expired: dead process or silent host */
    uint64_t duplicate_names;             /* same name published by two hosts */
    uint64_t errors;                      /* broken block chains, entries without objects
                                             (other hosts) — data that cannot be trusted */
    uint64_t counters_wrong;              /* hosts whose counters (objects, bytes) disagree
                                             with their block chain; this host's are rebuilt
                                             by the repair and counted in counters_rebuilt */
    uint64_t counters_rebuilt;            /* this host: counters rebuilt from the chain */
    uint64_t registers_bad;               /* hosts whose bakery registers hold what no host
                                             writes (skipped by creates; the host's next lock
                                             or fsck --repair there clears them) */
};
#define CXK_FSCK_REPAIR 1u /* repair this host's part (takes its lock) */
CXK_API int cxk_pool_fsck(cxk_pool *p, unsigned flags, struct cxk_fsck_report *r);

/* ---- Host slots (format v2): who holds what, and freeing a dead host's ---- */
#define CXK_POOL_FORMAT_VERSION 2 /* the on-media version this library reads and writes */
enum cxk_host_state {
    CXK_HOST_FREE = 0,    /* never claimed (or released) */
    CXK_HOST_LIVE = 1,    /* heartbeat younger than the lease timeout (this host always) */
    CXK_HOST_DEAD = 2,    /* attached once, heartbeat stale */
    CXK_HOST_CLAIMED = 3  /* claimed, never attached: a claim in progress or interrupted */
};
struct cxk_pool_host {
    uint32_t slot, state;      /* CXK_HOST_* */
    char tag[CXK_POOL_TAG_MAX + 1];
    uint64_t pid;              /* the process that last attached (0: none) */
    int64_t heartbeat_age_ns;  /* since the last heartbeat or claim; -1: neither */
    uint64_t extents;          /* extents held */
    uint64_t held_bytes;       /* extents x extent_bytes */
    uint64_t used_bytes;       /* blocks in use, headers included (the host's own count) */
    uint64_t objects;          /* published objects (the host's own count) */
};
/* Slot `slot`'s state; -EDOM when it is not a slot of the pool. */
CXK_API int cxk_pool_host_info(cxk_pool *p, uint32_t slot, struct cxk_pool_host *out);
#define CXK_RELEASE_DROP 1u /* drop the host's objects instead of adopting them */
/* Free a dead host's slot: its published objects become this host's (readable by name as
 * before) or, with CXK_RELEASE_DROP, are dropped; its extents, names and leases are freed
 * and the slot can be claimed again. -EBUSY: the host is live (or its claim younger than the
 * lease timeout), or (DROP) a live reader leases one of its objects; -EINVAL: our own slot;
 * -ENOENT: the slot is free; -ENOSPC: our name table cannot take its objects (nothing
 * adopted is lost: rerun after destroying objects). A crash midway: run it again. */
/* The release fence: once a host's slot is released (its epoch bumped), every mutation by a
 * process of that host (create, publish, destroy, extent claims, sweeps) fails with
 * -EKEYREVOKED instead of writing, and its heartbeat stops; reopen to attach again. */
CXK_API int cxk_pool_release(cxk_pool *p, uint32_t slot, unsigned flags);

/* ---- Upgrading a version 1 pool in place ---- */
struct cxk_pool_upgrade_info {
    uint32_t from_version;     /* 1: upgraded now; 2: already version 2 (nothing to do) */
    uint32_t busy_host;        /* -EBUSY: the live v1 host's slot; -ENOSPC: the slot whose
                                  partition's tail the new metadata needs */
    char busy_tag[CXK_POOL_TAG_MAX + 1];
    uint64_t extent_bytes;     /* the v2 geometry: each v1 partition is one run of extents */
    uint64_t nextents;
    uint64_t objects;          /* published objects kept (readable by name, same bytes) */
    uint64_t meta_off;         /* where the claim lines and extent maps went (after the data) */
    uint64_t cut_bytes;        /* bytes of the last partition's free tail they took (0: none);
                                  -ENOSPC: the free tail that partition has */
};
/* Convert the version 1 pool file at path to version 2 in place: no object moves, every
 * published object stays readable by name with the same bytes. flags: CXK_POOL_SHARED.
 * 0 (also when already version 2); -EBUSY a v1 host is alive (heartbeat younger than the
 * lease timeout); -ENOSPC the metadata needs the end of the last partition, which holds
 * objects; -EFBIG more extents than a map holds; -EBADMSG a corrupt v1 pool (nothing
 * written); -EMEDIUMTYPE not a pool; -EPROTONOSUPPORT another version. A crash at any point
 * leaves a valid version 1 pool (run it again) or a valid version 2 pool. */
CXK_API int cxk_pool_upgrade(const char *path, unsigned flags, struct cxk_pool_upgrade_info *info);

/* ---- Probing a pool file without opening it (`cxlkit pool rm`) ---- */
struct cxk_pool_probe_info {
    uint32_t file_type;   /* S_IFMT bits of what is at the path itself (a link is a link) */
    int32_t superblock;   /* regular files: 0 a whole superblock (magic, checksum and geometry
                             checked); -EMEDIUMTYPE no pool magic; -EBADMSG a broken checksum
                             or geometry (why says which); -EPROTONOSUPPORT a version this
                             library cannot check (version says which); -ENXIO shorter than
                             the pool its superblock describes */
    uint32_t version;     /* the word at offset 8 (0: unread) */
    uint32_t max_hosts;   /* with superblock 0 */
    uint32_t hosts_live;  /* slots held open by a process of this machine (their user locks),
                             or of another boot with a heartbeat younger than the lease
                             timeout, or claimed that recently */
    uint32_t hosts_dead;  /* attached once and none of the above */
    uint64_t size;        /* the file's bytes */
    uint64_t dev, ino;    /* the file probed: remove it only while the path still names it */
    char why[96];         /* -EBADMSG: the broken field or rule ("data_off is not 64
                             KiB-aligned"), NUL-terminated */
};
/* Read the file at path with pread only (never mapped, never written, a final symbolic link
 * not followed, a FIFO or device never opened). 0 with *out filled for a regular file (its
 * superblock field says whether it is a pool); -ELOOP a symbolic link and -ENODEV anything
 * else that is not a regular file (file_type says what); open's or pread's -errno. */
CXK_API int cxk_pool_probe(const char *path, struct cxk_pool_probe_info *out);
/* Size and alignment of devdax device `name` ("dax0.0") under sysfs_root ("/sys"). */
CXK_API int cxk_pool_dax_geometry(const char *sysfs_root, const char *name, uint64_t *size,
                                  uint64_t *align);

/* ---- Benchmarks over a pool -------------------
 * Median nanoseconds of one cxk_obj_stat per name, timed around each call (CLOCK_MONOTONIC):
 * the name-table lookup cost as the pool fills; names may be present or absent (a miss probes
 * every host's table). *median_ns = 0 for n == 0. Returns 0 or -errno (-EINVAL for a NULL
 * argument, -ENOMEM). */
CXK_API int cxk_bench_pool_lookup(cxk_pool *p, const char *const *names, size_t n,
                                  double *median_ns);

/* ---- Async I/O: reads and writes of aligned buffers for optimizer-subgroup paths ----
 * An engine queues requests, cuts each into block_size chunks and keeps up to queue_depth
 * chunks in flight, through io_uring (liburing, when the build found it and the kernel
 * allows it) or a pool of worker threads. The caller keeps a request's buffer valid until
 * it waits for the request's ticket. Files opened with CXK_AIO_O_DIRECT bypass the page
 * cache: buf, nbytes and offset must then be multiples of the device's logical block size
 * (CXK_AIO_ALIGN always is). Every syscall goes through the fault hook ("pread", "pwrite",
 * "fdatasync", "io_uring_setup", "io_uring_enter", "open", "ftruncate", "fcntl"), so a
 * test can make a chunk fail with ENOSPC or EIO. Thread-safe: any thread may submit and
 * wait; a ticket is waited for once. */
#define CXK_AIO_ALIGN 4096
enum cxk_aio_backend { CXK_AIO_AUTO = 0, CXK_AIO_URING = 1, CXK_AIO_THREADS = 2 };
typedef struct cxk_aio cxk_aio;
struct cxk_aio_opts {
    int32_t backend;       /* enum cxk_aio_backend; AUTO = io_uring where it works, else threads */
    uint32_t queue_depth;  /* chunks in flight, 1..4096; 0 = 32 */
    uint64_t block_size;   /* bytes per chunk, a multiple of CXK_AIO_ALIGN up to 1 GiB; 0 = 1 MiB */
    uint32_t threads;      /* worker threads of the thread pool, 1..64; 0 = min(queue_depth, 4) */
};
struct cxk_aio_stats {
    uint64_t bytes_read, bytes_written;  /* completed successfully */
    uint64_t requests, chunks, errors;   /* submitted requests, chunks issued, failed chunks */
};
/* opts NULL = defaults. -EINVAL for a bad option, -ENOSYS for URING when io_uring is not
 * built in, the kernel's -errno when URING was asked for and the ring cannot be set up,
 * -EAGAIN when a thread cannot start. */
CXK_API int cxk_aio_create(const struct cxk_aio_opts *opts, cxk_aio **out);
/* Waits for every chunk in flight, then frees the engine; tickets not waited for are dropped. */
CXK_API void cxk_aio_destroy(cxk_aio *aio);
/* CXK_AIO_URING or CXK_AIO_THREADS: what the engine runs on. */
CXK_API int cxk_aio_backend(const cxk_aio *aio);
/* Queue a read (write == 0) or write of nbytes at offset of fd; *ticket names it.
 * -EINVAL for nbytes == 0, a NULL buf or fd < 0. */
CXK_API int cxk_aio_submit(cxk_aio *aio, int fd, int write, void *buf, uint64_t nbytes,
                           uint64_t offset, uint64_t *ticket);
/* Block until the request is done and forget it: 0 when every byte moved, else the -errno
 * of its first failed chunk (-EIO for a read past the end of the file). -ENOENT for an
 * unknown or already waited ticket. */
CXK_API int cxk_aio_wait(cxk_aio *aio, uint64_t ticket);
/* cxk_aio_wait that also gives the request's duration in ns, from its submit to the
 * completion of its last chunk (NULL: not wanted): the path's observed throughput. */
CXK_API int cxk_aio_wait_ex(cxk_aio *aio, uint64_t ticket, uint64_t *duration_ns);
/* Without blocking: 1 when the request is done (cxk_aio_wait then returns at once), 0 while
 * a chunk is in flight, -ENOENT for an unknown or already waited ticket. */
CXK_API int cxk_aio_done(cxk_aio *aio, uint64_t ticket);
CXK_API int cxk_aio_stats(const cxk_aio *aio, struct cxk_aio_stats *out);
#define CXK_AIO_O_WRITE 1u   /* read-write (else read-only) */
#define CXK_AIO_O_CREATE 2u  /* create if missing, mode 0600 */
#define CXK_AIO_O_DIRECT 4u  /* O_DIRECT; buffered where the filesystem refuses it (tmpfs) */
/* Returns an fd (>= 0, close-on-exec) or -errno; *direct (may be NULL) = 1 if the fd is
 * O_DIRECT. */
CXK_API int cxk_aio_open(const char *path, uint32_t flags, int *direct);
CXK_API int cxk_aio_close(int fd);
CXK_API int cxk_aio_sync(int fd);                     /* fdatasync */
CXK_API int cxk_aio_truncate(int fd, uint64_t nbytes);
/* OFD lock of byte `at` of fd: kind 0 unlock, 1 shared, 2 exclusive. wait == 0: -EAGAIN when
 * another open file description holds a conflicting lock. The lock belongs to the open file
 * description: it is released when its last fd closes, or when its process dies. A wait that
 * a signal interrupts returns -EINTR (handle the signal, then call again). */
CXK_API int cxk_aio_lock(int fd, int kind, int wait, uint64_t at);
/* Nonzero when this build has io_uring (liburing) support. */
CXK_API int cxk_aio_uring_built(void);
/* memcpy of nbytes that returns -EFAULT instead of dying of SIGBUS when dst or src lies in
 * a shared file mapping whose file was truncated under it (by any process, at any moment) or
 * whose page cannot be read: the bytes copied so far are undefined. Installs a SIGBUS handler
 * on first use that hands every other SIGBUS (a thread not in this call, a kill()) to the
 * handler installed before it. -EINVAL for a NULL buffer; 0 for nbytes == 0. Thread-safe. */
CXK_API int cxk_aio_copy(void *dst, const void *src, uint64_t nbytes);
/* cxk_aio_copy that also sets *sum to cxk_kv_checksum of the bytes copied, folded into the
 * copy's one pass (cxk_kv_copy_sum under the SIGBUS guard): a checksummed copy to or from a
 * mapping without a second read of the bytes. *sum is set only when it returns 0. -EINVAL
 * for a NULL sum or buffer; nbytes == 0 gives the empty image's sum. */
CXK_API int cxk_aio_copy_sum(void *dst, const void *src, uint64_t nbytes, uint64_t *sum);
/* ---- a SIGBUS guard over a range, for work on any thread (the AdamW kernel
 * updating a subgroup where it lies in a mapped file, on a team of threads) ----
 * While [addr, addr + nbytes) is guarded, a SIGBUS fault at an address inside it, on any
 * thread of the process (a shared file mapping whose file was truncated under it), maps a
 * private zero page over the faulting page and counts the fault, so the faulting access runs
 * again and the work goes on; every other SIGBUS goes where cxk_aio_copy sends it. After a
 * fault the range no longer shows its file: the caller must treat its bytes as lost and
 * unmap it. *id: the handle for cxk_aio_unguard_range. -EINVAL for a NULL or empty range,
 * -ENOSPC when 64 ranges are guarded at once. Thread-safe. */
CXK_API int cxk_aio_guard_range(void *addr, uint64_t nbytes, int *id);
/* Stop guarding range id; *faults: the faults taken in it while guarded. -EINVAL for an id
 * that is not guarding. */
CXK_API int cxk_aio_unguard_range(int id, uint64_t *faults);

/* ==== Rings: single-producer / single-consumer cells in a pool object ====
 * A ring is CXK_RING_HDR_BYTES of header lines then ncells cells of cell_bytes. Line 0
 * (geometry) is written once by the creator; line 1 (head, cells consumed) by the consumer
 * only; line 2 (closed flag) by the producer only; a cell by the producer only, its stamp
 * (ring index + 1) last: payload, flush, fence, then the stamp (DESIGN.md principle 2).
 * Under CXK_COHERENCE_NONE the consumer invalidates before each read and the producer
 * before reading head. Everything read from the ring is checked (-EBADMSG: a stamp, length
 * or head that no correct peer writes). A handle is used by one thread at a time; one
 * producer handle and one consumer handle per ring. Errors: -EAGAIN full (push) or empty
 * (peek/pop), -EMSGSIZE payload over cxk_ring_payload_max, -EPIPE producer closed and
 * drained, -EINVAL bad geometry or role, -EPROTO wrong call for the role or order. */
typedef struct cxk_ring cxk_ring;
#define CXK_RING_HDR_BYTES 192
#define CXK_RING_CELL_HDR 16    /* bytes of each cell before its payload */
enum cxk_ring_role { CXK_RING_PRODUCER = 1, CXK_RING_CONSUMER = 2 };
/* Bytes a ring of ncells cells of cell_bytes needs; 0 for a bad geometry (cell_bytes a
 * multiple of 64 in 64..1 MiB, ncells a power of two in 2..2^20). */
CXK_API uint64_t cxk_ring_bytes(uint32_t cell_bytes, uint32_t ncells);
/* Lay a fresh ring into [off, off + nbytes) of p: memory this process may write and that no
 * one uses yet (a new object's zeroed payload); flushed before returning. */
CXK_API int cxk_ring_format(cxk_pool *p, uint64_t off, uint64_t nbytes, uint32_t cell_bytes,
                            uint32_t ncells);
/* Attach to the ring at [off, off + nbytes) as role; the geometry is read once and checked
 * against nbytes (-EBADMSG when it does not fit or is not a ring). */
CXK_API int cxk_ring_attach(cxk_pool *p, uint64_t off, uint64_t nbytes, int role,
                            cxk_ring **out);
/* Create object `name` in this host's partition, format a ring in it, publish it and attach
 * as role (the handle keeps the creator's lease). Pool errors as cxk_obj_create. */
CXK_API int cxk_ring_create(cxk_pool *p, const char *name, uint32_t cell_bytes,
                            uint32_t ncells, int role, cxk_ring **out);
/* Open published ring object `name` (taking a lease) and attach as role. */
CXK_API int cxk_ring_open(cxk_pool *p, const char *name, int role, cxk_ring **out);
/* Producer: mark the ring closed (the consumer gets -EPIPE once drained). Then, any role:
 * drop the lease (if the handle took one) and free the handle. NULL is a no-op. */
CXK_API void cxk_ring_close(cxk_ring *r);
CXK_API uint32_t cxk_ring_payload_max(const cxk_ring *r);  /* cell_bytes - 16 */
CXK_API uint32_t cxk_ring_ncells(const cxk_ring *r);
/* The ring's offset in the pool (where cxk_ring_attach finds it). */
CXK_API uint64_t cxk_ring_offset(const cxk_ring *r);
/* Producer: the payload area of the next cell (*payload, cxk_ring_payload_max bytes) to be
 * filled in place, then cxk_ring_commit publishes it. -EAGAIN full. */
CXK_API int cxk_ring_reserve(cxk_ring *r, void **payload);
/* Producer: publish the reserved cell holding nbytes of payload and a caller-defined kind. */
CXK_API int cxk_ring_commit(cxk_ring *r, uint32_t nbytes, uint32_t kind);
/* Producer: reserve, copy nbytes from data, commit. */
CXK_API int cxk_ring_push(cxk_ring *r, const void *data, uint32_t nbytes, uint32_t kind);
/* Consumer: the next cell in place (valid until cxk_ring_release): payload, its length and
 * kind (either out-param may be NULL). -EAGAIN empty, -EPIPE closed and drained. */
CXK_API int cxk_ring_peek(cxk_ring *r, const void **payload, uint32_t *nbytes, uint32_t *kind);
/* Consumer: hand the peeked cell back to the producer. */
CXK_API int cxk_ring_release(cxk_ring *r);
/* Consumer: peek, copy up to cap bytes to dst, release. -EMSGSIZE (cell kept) when the
 * payload is longer than cap; *nbytes gets its length either way. */
CXK_API int cxk_ring_pop(cxk_ring *r, void *dst, uint32_t cap, uint32_t *nbytes, uint32_t *kind);
/* Producer: as cxk_ring_commit with flags; CXK_RING_DEFER writes the cell but not its stamp:
 * it stays invisible until cxk_ring_publish, which stamps every deferred cell behind one
 * fence (batched fences: one sfence for many cells on a non-coherent pool). */
#define CXK_RING_DEFER 1u
CXK_API int cxk_ring_commit_ex(cxk_ring *r, uint32_t nbytes, uint32_t kind, unsigned flags);
CXK_API int cxk_ring_publish(cxk_ring *r);
/* Cells the producer may still fill before the ring is full (producer; reads head). */
CXK_API int cxk_ring_space(cxk_ring *r, uint32_t *ncells);
/* Consumer: make the head published (it is published in batches and when the ring is
 * found empty); call before waiting elsewhere for a long time. */
CXK_API int cxk_ring_sync(cxk_ring *r);

/* ---- Waits: how every polling wait of rings, messaging and RPC spends its time ----
 * A wait polls pool memory. While polls find nothing it spins (polls back to back, keeping
 * the CPU) for spin_us, then yields the CPU (sched_yield) between polls for yield_us more,
 * then sleeps between polls (sleep_us 0: it keeps yielding): each sleep 1/16 of the time
 * waited so far, at least 2 us and at most sleep_us, with the thread's timer slack lowered
 * to 1 us for the sleep (and put back). Time is measured on the monotonic clock, not in
 * polls. Spinning answers fastest when every process has a core of its own; sleeps let a
 * peer that shares our core (or an idle server's neighbours) run. Defaults:
 * CXLKIT_MSG_SPIN_US, CXLKIT_MSG_YIELD_US, CXLKIT_MSG_SLEEP_US (decimal microseconds;
 * "forever" for the first two), else spin 200, yield 0, sleep at most 50 (docs/msg.md,
 * "Waiting", has the measurements behind them). */
#define CXK_WAIT_FOREVER 0xffffffffu  /* spin_us or yield_us: never leave that phase */
struct cxk_wait_opts {
    uint32_t spin_us;
    uint32_t yield_us;
    uint32_t sleep_us;   /* at most 1000000 */
    uint32_t reserved;   /* 0 */
};
/* The defaults above (the environment is read at each call: cache the result). */
CXK_API void cxk_wait_opts_init(struct cxk_wait_opts *o);
/* 0, or -EINVAL for a bad field (sleep_us over 1 s, reserved not 0). */
CXK_API int cxk_wait_opts_check(const struct cxk_wait_opts *o);
/* One wait's state, on the caller's stack: begin, then cxk_wait_idle after every poll that
 * found nothing (begin again after one that made progress, to spin again). */
struct cxk_wait {
    struct cxk_wait_opts opts;
    int64_t start_ns, now_ns;   /* monotonic clock at begin and at the last reading */
    uint64_t polls;             /* idle polls since begin */
    uint32_t phase;             /* what the last cxk_wait_idle did: CXK_WAIT_SPUN, ... */
    uint32_t adapt;             /* 0 from begin; set at the wait's first idle by the adaptive
                                 * spin (cxk_spin below): 1 + this wait's spin in us (at most
                                 * opts.spin_us), | CXK_WAIT_ADAPT_YIELD */
};
/* adapt: after its first 2 us the spin yields the CPU (sched_yield) between polls */
#define CXK_WAIT_ADAPT_YIELD 0x80000000u
enum cxk_wait_phase { CXK_WAIT_SPUN = 0, CXK_WAIT_YIELDED = 1, CXK_WAIT_SLEPT = 2 };
/* o NULL: cxk_wait_opts_init's defaults; a bad o gives -EINVAL and the defaults. */
CXK_API int cxk_wait_begin(struct cxk_wait *w, const struct cxk_wait_opts *o);
/* Spin, yield or sleep as the policy says; returns ns since begin (while spinning the clock
 * is read every few polls). */
CXK_API int64_t cxk_wait_idle(struct cxk_wait *w);
/* Wait until the ring has something to do: a consumer until a cell can be peeked (0) or the
 * producer closed it (-EPIPE), a producer until a cell can be reserved (0). -ETIMEDOUT once
 * timeout_ms passed (0: none). o NULL: the defaults. -EBADMSG as cxk_ring_peek. */
CXK_API int cxk_ring_wait(cxk_ring *r, const struct cxk_wait_opts *o, uint32_t timeout_ms);
/* ---- Same-host wake-up ----
 * On a pool of coherence "host" (every party a process of one machine) a consumer that
 * reaches the sleep phase of its wait sleeps in FUTEX_WAIT on a word of the ring's producer
 * line instead of a timed sleep, and a publish wakes it at once: the consumer sets its
 * "sleeping" word (line 1), fences, looks at the ring once more, then waits; the producer
 * publishes, fences, and only when that word is set bumps the futex word and calls
 * FUTEX_WAKE (no syscall while the consumer spins). Each futex sleep has a timeout (a safety
 * net: pool memory is untrusted): CXLKIT_MSG_WAKE_US microseconds (1..1000000, default
 * 1000); CXLKIT_MSG_WAKE_US=0 turns the wake-up off (timed sleeps as above). Coherence
 * "none" or "sim" (hosts apart: a futex does not cross machines), a futex call failing for
 * good (-ENOSYS, -EFAULT: a mapping that cannot hold a futex) or more than 128 rings keep
 * the timed sleeps. -EINTR ends that one sleep early. */
/* As cxk_wait_idle, for a wait on n consumer rings (n >= 1; NULL or producer handles among
 * them: timed sleeps): its sleeps end as soon as one of them is published to. */
CXK_API int64_t cxk_wait_idle_rings(struct cxk_wait *w, cxk_ring *const *rings, size_t n);
struct cxk_ring_wake_stats {
    uint32_t enabled;       /* 1: this handle uses the wake-up (coherent pool, no failure) */
    uint32_t reserved;
    uint64_t futex_waits;   /* consumer: FUTEX_WAITs made */
    uint64_t woken;         /* ... that a producer's wake ended (or its bump preceded) */
    uint64_t timeouts;      /* ... that ended on the safety-net timeout */
    uint64_t interrupted;   /* ... that ended with EINTR (a signal) */
    uint64_t fallbacks;     /* futex calls that failed for good: the handle went to timed sleeps */
    uint64_t rechecks;      /* consumer: sleeps skipped because a cell came while arming */
    uint64_t wakes_sent;    /* producer: FUTEX_WAKEs issued (the consumer said it slept) */
};
/* The handle's wake-up counters (since attach). -EINVAL for NULL. */
CXK_API int cxk_ring_wake_stats(const cxk_ring *r, struct cxk_ring_wake_stats *st);
/* ---- Adaptive spin ----
 * One per waiting party (an RPC client, an RPC server, a comm), driven by its waits; the
 * spin of each wait (at most opts.spin_us, the cap: CXLKIT_MSG_SPIN_US) follows three rules
 * (docs/msg.md, "Adaptive spin", has the convergence argument):
 *  - woke: a wait that follows our publish waking the peer (it was asleep) does not spin when
 *    the exchange is sporadic (this wait began more than 4 x cap after the one before): the
 *    answer needs the peer's wake-up first, and a spin would hold the CPU the woken peer needs;
 *  - outcome: a wait whose answer came within 4 x cap of its begin (whether it spun or slept)
 *    restores the full spin; one that slept and lasted longer quarters it (200, 50, 12, 3,
 *    0 us);
 *  - overcommit: while this thread may run on one CPU only, or its job has more ranks on
 *    this host than the CPUs it may use (cxk_spin_overcommitted, looked at every 10 ms at
 *    most), a peer may be queued behind it on its CPU: the spin yields the CPU
 *    (sched_yield) between polls after its first 2 us.
 * cap 0: no spin; cap CXK_WAIT_FOREVER: no adaptation. Used by one thread at a time. */
struct cxk_spin {
    uint32_t budget_us;      /* the next wait's spin before the woke rule (> cap: the cap) */
    uint32_t cap_us;         /* the cap of the wait in progress (or of the last one) */
    int64_t last_start_ns;   /* monotonic begin of the last wait (0: none yet) */
    int64_t cur_start_ns;    /* begin of the wait in progress (0: none) */
    uint32_t cur_slept;      /* the wait in progress slept */
    uint32_t overcommitted;  /* the last look at the machine found it overcommitted */
    int64_t probe_ns;        /* when the machine was last looked at (0: never) */
    uint64_t wakes_seen;     /* the party's wake-ups sent, at the last wait's begin */
    int64_t seen_ns;         /* the wait in progress's clock at its last idle poll (its end,
                              * to within a few polls: no clock read on the answer's path) */
    /* counters since init */
    uint64_t waits;          /* waits begun (their first idle poll) */
    uint64_t hits;           /* ... answered before they slept (during the spin) */
    uint64_t slept;          /* ... answered after a sleep */
    uint64_t restores;       /* outcome rule: the spin went back to the cap */
    uint64_t shrinks;        /* outcome rule: the spin was quartered */
    uint64_t woke_skips;     /* woke rule: waits it kept from spinning */
    uint64_t yield_waits;    /* overcommit rule: waits whose spin yielded */
};
#define CXK_SPIN_FULL 0xffffffffu  /* budget_us: the cap */
/* A fresh state: full spin, no history. */
CXK_API void cxk_spin_init(struct cxk_spin *s);
/* A wait begins at start_ns (monotonic) with cap cap_us; woke_peer: our publish since the
 * last wait woke the peer; overcommitted: as the rule above. Returns this wait's spin in us. */
CXK_API uint32_t cxk_spin_begin(struct cxk_spin *s, uint32_t cap_us, int64_t start_ns,
                                int woke_peer, int overcommitted);
/* The wait in progress slept (its spin ran out). */
CXK_API void cxk_spin_slept(struct cxk_spin *s);
/* The wait in progress got its answer at end_ns (nothing when no wait is in progress). */
CXK_API void cxk_spin_end(struct cxk_spin *s, int64_t end_ns);
/* Whether the calling thread's spin should yield now: its affinity allows one CPU only, or
 * the MPI launcher started more of the job's ranks on this host (MPI_LOCALNRANKS,
 * OMPI_COMM_WORLD_LOCAL_SIZE) than the CPUs it allows. 1, 0, or -errno (sched_getaffinity's). */
CXK_API int cxk_spin_overcommitted(void);
/* The job's own count of its ranks sharing this kernel's CPUs (the MPI shim counts ranks by
 * boot id: namespaces or containers of one machine are one host to the CPUs, not to the
 * launcher). The rule above takes the larger of it and the launcher's; 0 clears it. */
CXK_API void cxk_spin_set_local_ranks(long n);
/* This kernel's boot id as a number (FNV-1a of /proc/sys/kernel/random/boot_id), 0 when it
 * cannot be read: processes with the same one run on one machine and share its CPUs. */
CXK_API uint64_t cxk_boot_hash(void);
/* The CPUs the calling thread may run on, as a bitmask: bit c % 64 of mask[c / 64] for CPU c
 * (CPUs past words * 64 are left out). The number of CPUs set, or -EINVAL (mask NULL, words
 * 0) or -errno (sched_getaffinity's). */
CXK_API int cxk_cpu_affinity(uint64_t *mask, uint32_t words);

/* ---- Waiters: one waiting party's policy and counters, whatever owns it ----
 * A comm, an RPC client, an RPC server and a ring handle each own a waiter (valid as long as
 * its owner): the wait policy of its blocking calls, the adaptive spin of its waits and the
 * same-host wake-up counters of its rings (summed; consumer counters from the rings it reads,
 * wakes_sent from those it writes). The per-owner calls of the messaging and RPC sections
 * (cxk_msg_set_wait, cxk_rpc_spin_stats, ...) are these under other names, kept one release.
 * Thread-safe as their owner's calls are. */
typedef struct cxk_waiter cxk_waiter;
struct cxk_comm;
struct cxk_rpc_client;
struct cxk_rpc_server;
/* The owner's waiter; NULL for NULL. */
CXK_API cxk_waiter *cxk_msg_waiter(struct cxk_comm *comm);
CXK_API cxk_waiter *cxk_rpc_waiter(struct cxk_rpc_client *c);
CXK_API cxk_waiter *cxk_rpc_server_waiter(struct cxk_rpc_server *s);
CXK_API cxk_waiter *cxk_ring_waiter(cxk_ring *r);
struct cxk_waiter_stats {
    uint32_t struct_size;  /* in: sizeof(struct cxk_waiter_stats) as the caller knows it */
    uint32_t reserved;
    struct cxk_spin spin;              /* all zero when the owner's waits do not adapt (a ring) */
    struct cxk_ring_wake_stats wake;
};
/* The waiter's policy ("Waits" above); NULL: the defaults (CXLKIT_MSG_SPIN_US & co, -EINVAL
 * naming a malformed one: cxk_config_error). -EINVAL for a bad o; -ENOTSUP for an owner whose
 * waits take a policy per call (a ring, an RPC server). */
CXK_API int cxk_waiter_set_wait(cxk_waiter *w, const struct cxk_wait_opts *o);
CXK_API int cxk_waiter_get_wait(const cxk_waiter *w, struct cxk_wait_opts *o);
/* Spin and wake-up counters now. -EINVAL for NULL or a struct_size smaller than this
 * version's. */
CXK_API int cxk_waiter_stats(const cxk_waiter *w, struct cxk_waiter_stats *st);

/* ==== Messaging: MPI-style ranks over one pool =========================
 * A job of nranks ranks (each a process, usually each with its own pool host id) on one
 * pool. Objects are named "msg.<job>.<rank>.<what>" and created by that rank only: its rank
 * object (identity, heartbeat, barrier sequence, a directory of the rings it writes), the
 * ring to each peer it sends to (created at the first send: no N^2 rings up front), its
 * rendezvous buffers and its windows. Messages up to the eager limit travel in ring cells
 * (several consecutive cells for one message); larger ones by rendezvous: the sender copies
 * the payload into one of its buffers (pipelined, a ready count published as it goes), sends
 * a request-to-send, the receiver copies out and answers FIN. Matching follows MPI: (source,
 * tag), CXK_ANY_SOURCE / CXK_ANY_TAG, non-overtaking per (source, tag), an unexpected queue.
 * A comm is used by one thread at a time. Every wait fails with -ETIMEDOUT, never hangs, when
 * a peer it needs is gone (a process of this machine that no longer exists, or a rank of
 * another machine whose heartbeat stopped for dead_ms) or timeout_ms passed; then
 * cxk_msg_failed_rank names the rank. Errors beyond the usual: -EMSGSIZE a message longer
 * than the receive buffer (status.count = its length, the first bytes delivered), -EINVAL a
 * negative count, bad rank or tag, -EBADMSG a peer wrote what no correct rank writes. */
typedef struct cxk_comm cxk_comm;
typedef struct cxk_msg_req cxk_msg_req;
#define CXK_ANY_SOURCE (-1)
#define CXK_ANY_TAG (-1)
#define CXK_MSG_JOB_MAX 64     /* job name: [A-Za-z0-9_-], 1..64 bytes */
#define CXK_MSG_MAX_RANKS 4096
#define CXK_MSG_TAG_MAX 0x7fffffff

struct cxk_msg_opts {
    uint32_t cell_bytes;    /* ring cell size; 0 = CXLKIT_MSG_CELL_BYTES or 4096 */
    uint32_t ncells;        /* cells per ring; 0 = CXLKIT_MSG_CELLS or 64 */
    uint64_t eager_bytes;   /* largest eager message; 0 = CXLKIT_MSG_EAGER or what one
                               ring cell carries (cell_bytes - 64); at most half the ring */
    uint32_t timeout_ms;    /* any wait; 0 = CXLKIT_MSG_TIMEOUT_MS or none (dead peers still
                               end it) */
    uint32_t dead_ms;       /* a peer of another machine whose heartbeat is this old is dead;
                               0 = CXLKIT_MSG_DEAD_MS or 5000 */
    uint32_t join_ms;       /* how long cxk_msg_init waits for every rank; 0 = 60000 */
    uint32_t domain;        /* this rank's cache-coherence domain (one machine), 0 = unknown.
                               On a pool of coherence NONE, messages between two ranks that
                               give the same non-zero domain skip the flushes and invalidates
                               (their caches agree); every other pair, and SIM, keep them */
};
CXK_API void cxk_msg_opts_init(struct cxk_msg_opts *opts);

struct cxk_msg_status {
    int32_t source;
    int32_t tag;
    uint64_t count;   /* bytes of the message (may exceed what was delivered: -EMSGSIZE) */
    int32_t error;    /* 0 or -errno of this request */
    int32_t reserved;
};

/* Join job `job` as rank of nranks over p (opened by the caller, kept open until
 * cxk_msg_finalize). Waits (join_ms) until every rank has joined. Objects left by a crashed
 * earlier run of the same job and rank on this host are removed first; -EBUSY when that rank
 * is held by a live process, -EEXIST when an object of that rank belongs to another host (an
 * earlier run placed the rank there: not this host's to remove). When join_ms passes:
 * -EPROTONOSUPPORT if the rank waited for has an object of another format version (it runs
 * another cxlkit), else -ETIMEDOUT. opts NULL = defaults. */
CXK_API int cxk_msg_init(cxk_pool *p, const char *job, int rank, int nranks,
                         const struct cxk_msg_opts *opts, cxk_comm **out);
/* Barrier with every rank (failing like any wait when a peer is gone), then remove this
 * rank's objects and free comm. Returns the barrier's error, if any. */
CXK_API int cxk_msg_finalize(cxk_comm *comm);
/* cxk_msg_finalize; *failed_rank (may be NULL) gets the rank that made it fail, or -1. */
CXK_API int cxk_msg_finalize_ex(cxk_comm *comm, int *failed_rank);
/* Leave the job at once, without finalize's barrier (waits on no peer): stop this rank's
 * heartbeat, remove its objects and free comm. Peers waiting on it see it gone (-ETIMEDOUT
 * naming it), as if its process had ended. For a comm its owner drops without finalizing
 * (a destructor); -EINVAL for NULL. */
CXK_API int cxk_msg_abandon(cxk_comm *comm);
/* Checksum mode (on = 1; 0 off, the default; else -EINVAL): every message this rank sends
 * from now on carries a crc32c of its header fields and bytes, and every message it receives
 * must carry one. A message that carries one is verified by any receiver: a mismatch fails
 * the receive (and the peer's later messages) with -EBADMSG, cxk_msg_failed_rank naming the
 * sender, after the bytes were copied (the buffer then holds what arrived, unverified). Set
 * it right after cxk_msg_init on every rank of the job, or on none: a rank in checksum mode
 * refuses messages without one. Covers two-sided messages and collectives, not one-sided
 * window operations. */
CXK_API int cxk_msg_set_checksum(cxk_comm *comm, int on);
CXK_API int cxk_msg_rank(const cxk_comm *comm);
CXK_API int cxk_msg_size(const cxk_comm *comm);
/* The rank whose silence made the last call fail with -ETIMEDOUT, or -1. */
CXK_API int cxk_msg_failed_rank(const cxk_comm *comm);
/* 1 when messages between this rank and peer skip the flushes and invalidates (the pool is
 * coherent, peer is this rank, or on coherence NONE both gave one non-zero
 * cxk_msg_opts.domain), 0 when they pay them, -EINVAL for a bad comm or peer. */
CXK_API int cxk_msg_peer_coherent(const cxk_comm *comm, int peer);
/* A hook the calling thread's messaging waits call about every 20 ms while they wait (set
 * per thread; NULL, the default: none). A nonzero return ends the wait as its timeout would
 * (-ETIMEDOUT, cxk_msg_failed_rank -1; a request stays pending as after a timeout, a blocking
 * call's request is withdrawn). The Python binding sets one around its blocking calls so that
 * Ctrl-C (or any signal handler that raises) ends them. */
typedef int (*cxk_msg_interrupt_fn)(void *arg);
CXK_API void cxk_msg_set_interrupt(cxk_msg_interrupt_fn fn, void *arg);
CXK_API uint64_t cxk_msg_eager_bytes(const cxk_comm *comm);
/* The comm's wait policy (see "Waits" above; NULL: the defaults, which the comm also starts
 * with): how its blocking calls poll. -EINVAL for a bad o (cxk_wait_opts_check). */
CXK_API int cxk_msg_set_wait(cxk_comm *comm, const struct cxk_wait_opts *o);
CXK_API int cxk_msg_get_wait(const cxk_comm *comm, struct cxk_wait_opts *o);
/* the adaptive spin (cxk_spin) of the comm's waits, and the same-host wake-up's
 * counters summed over its rings (consumer counters from the rings peers write to us,
 * wakes_sent from ours). A wait for an incoming cell (recv, wait, waitany, probe, the rest of
 * an eager message, an RMA reply, a rendezvous's FIN) sleeps on the futexes of every peer's
 * ring to us on coherence "host", once each exists and none of our sends waits for room; a
 * barrier wait also on the futex word of the rank it waits for, which that rank's entry
 * bumps; other waits (a rendezvous's data, room in a ring) sleep on the timer. -EINVAL for
 * NULL. */
CXK_API int cxk_msg_spin_stats(const cxk_comm *comm, struct cxk_spin *st);
CXK_API int cxk_msg_wake_stats(const cxk_comm *comm, struct cxk_ring_wake_stats *st);

#define CXK_MSG_SYNC 1u  /* synchronous send: completes once the receive has matched it */
/* Start sending count bytes of buf to dest. buf may be reused when the request completes
 * (eager sends complete at once, rendezvous sends once their bytes are in the sender's
 * rendezvous buffer; synchronous ones once matched). *req is freed by the wait/test that
 * completes it. */
CXK_API int cxk_msg_isend(cxk_comm *comm, const void *buf, int64_t count, int dest, int tag,
                          unsigned flags, cxk_msg_req **req);
CXK_API int cxk_msg_irecv(cxk_comm *comm, void *buf, int64_t count, int source, int tag,
                          cxk_msg_req **req);
/* Wait for req and free it; st (may be NULL) gets its status. Returns the request's error
 * (e.g. -EMSGSIZE) or -ETIMEDOUT (req stays valid: wait again or cancel). */
CXK_API int cxk_msg_wait(cxk_comm *comm, cxk_msg_req *req, struct cxk_msg_status *st);
/* *done = 1 and req freed when complete (returning its error), else *done = 0. */
CXK_API int cxk_msg_test(cxk_comm *comm, cxk_msg_req *req, int *done, struct cxk_msg_status *st);
/* Wait for all n (statuses may be NULL); NULL entries are skipped; every completed entry is
 * set to NULL. Returns the first error. */
CXK_API int cxk_msg_waitall(cxk_comm *comm, size_t n, cxk_msg_req **reqs,
                            struct cxk_msg_status *statuses);
/* Wait for any one of n: *index gets it (its entry set to NULL); -EINVAL if all are NULL. */
CXK_API int cxk_msg_waitany(cxk_comm *comm, size_t n, cxk_msg_req **reqs, size_t *index,
                            struct cxk_msg_status *st);
/* Withdraw a receive not yet matched (-EBUSY once matched, or for a send) and free it. */
CXK_API int cxk_msg_cancel(cxk_comm *comm, cxk_msg_req *req);
CXK_API int cxk_msg_send(cxk_comm *comm, const void *buf, int64_t count, int dest, int tag,
                         unsigned flags);
CXK_API int cxk_msg_recv(cxk_comm *comm, void *buf, int64_t count, int source, int tag,
                         struct cxk_msg_status *st);
CXK_API int cxk_msg_sendrecv(cxk_comm *comm, const void *sbuf, int64_t scount, int dest,
                             int stag, void *rbuf, int64_t rcount, int source, int rtag,
                             struct cxk_msg_status *st);
/* Is a matching message there? (*flag 1 and st filled, the message stays queued). */
CXK_API int cxk_msg_iprobe(cxk_comm *comm, int source, int tag, int *flag,
                           struct cxk_msg_status *st);
CXK_API int cxk_msg_probe(cxk_comm *comm, int source, int tag, struct cxk_msg_status *st);
/* Drive progress once (drain rings into matches / the unexpected queue). */
CXK_API int cxk_msg_progress(cxk_comm *comm);

/* Collectives: barrier by per-rank sequence numbers in the rank objects; bcast and
 * allreduce of small buffers (messages on a context of their own: they never match user
 * messages). */
/* A barrier that failed (a peer lost or late past the timeout) fails every later one with
 * the same error: this rank never enters a barrier its peers are not in. */
CXK_API int cxk_msg_barrier(cxk_comm *comm);
CXK_API int cxk_msg_bcast(cxk_comm *comm, void *buf, int64_t count, int root);
enum cxk_msg_type {
    CXK_MSG_INT32 = 0, CXK_MSG_INT64 = 1, CXK_MSG_UINT32 = 2, CXK_MSG_UINT64 = 3,
    CXK_MSG_FLOAT = 4, CXK_MSG_DOUBLE = 5,
};
enum cxk_msg_op { CXK_OP_SUM = 0, CXK_OP_MIN = 1, CXK_OP_MAX = 2, CXK_OP_REPLACE = 3,
                  CXK_OP_NO_OP = 4 };
/* Elementwise op over every rank's n elements of sendbuf into recvbuf on every rank
 * (REPLACE / NO_OP: -EINVAL). sendbuf may equal recvbuf. */
CXK_API int cxk_msg_allreduce(cxk_comm *comm, const void *sendbuf, void *recvbuf, int64_t n,
                              int type, int op);
/* Bytes of one element of type, 0 for an unknown type. */
CXK_API size_t cxk_msg_type_size(int type);

/* ---- contexts for a layer above (the PMPI shim gives each communicator one) ----
 * A message sent on context ctx matches only receives and probes on ctx. Context 0 is the one
 * of cxk_msg_isend / irecv / iprobe / probe; 1..CXK_MSG_CTX_FIRST-1 are the library's own
 * (-EINVAL); CXK_MSG_CTX_FIRST..0xffffffff are the caller's. Otherwise as the calls above. */
#define CXK_MSG_CTX_FIRST 16u
CXK_API int cxk_msg_isend_ctx(cxk_comm *comm, const void *buf, int64_t count, int dest, int tag,
                              uint32_t ctx, unsigned flags, cxk_msg_req **req);
CXK_API int cxk_msg_irecv_ctx(cxk_comm *comm, void *buf, int64_t count, int source, int tag,
                              uint32_t ctx, cxk_msg_req **req);
CXK_API int cxk_msg_iprobe_ctx(cxk_comm *comm, int source, int tag, uint32_t ctx, int *flag,
                               struct cxk_msg_status *st);
CXK_API int cxk_msg_probe_ctx(cxk_comm *comm, int source, int tag, uint32_t ctx,
                              struct cxk_msg_status *st);

/* one copy through the pool: memory a rank gets from its comm lives in its own pool
 * partition ("msg.<job>.<rank>.mem.<k>"). A send above the eager limit whose whole buffer
 * lies in one such block is not copied by the sender: its request-to-send names the block and
 * the offset, the receiver copies straight out of it and answers FIN, and the send completes
 * at that FIN (the buffer must not change before: MPI's rule for any send). Sends from other
 * memory, and eager sends, are unchanged. The receiver checks the named block and range
 * against the pool (-EBADMSG, failed rank = the sender, when they do not lie in it).
 * cxk_msg_alloc_mem: nbytes > 0, zeroed, 64-byte aligned, into *ptr; -ENOSPC the partition is
 * full. cxk_msg_free_mem: -EINVAL ptr is not such a block, -EBUSY a send from it awaits its
 * FIN; blocks still allocated are removed by cxk_msg_finalize. */
CXK_API int cxk_msg_alloc_mem(cxk_comm *comm, uint64_t nbytes, void **ptr);
CXK_API int cxk_msg_free_mem(cxk_comm *comm, void *ptr);
/* 1 when [buf, buf + nbytes) lies in one block of cxk_msg_alloc_mem (a send from it travels
 * in one copy), else 0. */
CXK_API int cxk_msg_is_pool_mem(const cxk_comm *comm, const void *buf, uint64_t nbytes);

/* One-sided windows: each rank exposes nbytes of its own pool memory ("msg.<job>.<rank>.win.
 * <id>"). Offsets are bytes into the target's window. Gets, and puts of whole cache lines
 * under CXK_COHERENCE_NONE (any put under HOST), go straight to the target's memory;
 * accumulates, fetch-and-op, compare-and-swap and the parts of lines a put touches under NONE
 * are applied by the target itself as it reads its ring, one at a time: no two hosts write
 * one line and no atomic crosses hosts. The target applies them when it drives progress (any
 * cxk_msg_* / cxk_win_* call): passive-target epochs need the target to call in now and then.
 * Errors: -ERANGE an access outside the target's window, -EINVAL bad type/op/rank,
 * -EPROTO a call outside the epoch it needs (e.g. unlock without lock). */
typedef struct cxk_win cxk_win;
enum cxk_lock_type { CXK_LOCK_SHARED = 1, CXK_LOCK_EXCLUSIVE = 2 };
/* Collective: every rank creates its window (nbytes may differ per rank; zeroed). */
CXK_API int cxk_win_create(cxk_comm *comm, uint64_t nbytes, cxk_win **out);
/* Collective: barrier, then remove this rank's window. */
CXK_API int cxk_win_free(cxk_win *win);
CXK_API void *cxk_win_base(const cxk_win *win);          /* this rank's window memory */
/* Bytes of rank's window (-EINVAL: bad rank), into *nbytes. */
CXK_API int cxk_win_size(const cxk_win *win, int rank, uint64_t *nbytes);
CXK_API int cxk_win_put(cxk_win *win, const void *buf, uint64_t nbytes, int target, uint64_t off);
CXK_API int cxk_win_get(cxk_win *win, void *buf, uint64_t nbytes, int target, uint64_t off);
/* target[off..] op= buf[0..count) elementwise (SUM, MIN, MAX, REPLACE). */
CXK_API int cxk_win_accumulate(cxk_win *win, const void *buf, uint64_t count, int type,
                               int target, uint64_t off, int op);
/* One element: *result = old value, then old op= *operand (NO_OP: fetch only). */
CXK_API int cxk_win_fetch_and_op(cxk_win *win, const void *operand, void *result, int type,
                                 int target, uint64_t off, int op);
/* One element: *result = old value; if old == *compare (bitwise) it becomes *swap. */
CXK_API int cxk_win_compare_and_swap(cxk_win *win, const void *compare, const void *swap,
                                     void *result, int type, int target, uint64_t off);
/* Everything this rank started on target (-1: every target) has been applied there. */
CXK_API int cxk_win_flush(cxk_win *win, int target);
/* Collective: all operations of every rank before it are complete and visible after it. */
CXK_API int cxk_win_fence(cxk_win *win);
/* Post-start-complete-wait: post exposes this window to the origins in ranks; start opens
 * access to the targets in ranks (waits for their post); complete ends it (operations done);
 * wait returns once every origin of the post has completed. */
CXK_API int cxk_win_post(cxk_win *win, const int *ranks, int n);
CXK_API int cxk_win_start(cxk_win *win, const int *ranks, int n);
CXK_API int cxk_win_complete(cxk_win *win);
CXK_API int cxk_win_wait(cxk_win *win);
/* wait without blocking: *flag 1 once every origin of the post has completed (the
 * exposure epoch then ends, as after cxk_win_wait), else 0. */
CXK_API int cxk_win_test(cxk_win *win, int *flag);
/* Passive target: the target grants locks in arrival order (shared ones together). */
CXK_API int cxk_win_lock(cxk_win *win, int type, int target);
CXK_API int cxk_win_unlock(cxk_win *win, int target);

/* ==== RPC: fixed-size request and reply slots over rings ===============
 * A service "name" has one server and up to max_clients clients on one pool. Client k owns
 * the ring "rpc.<name>.<k>.req" (its requests), the server "rpc.<name>.<k>.rep" (replies)
 * and "rpc.<name>.srv" (geometry). A slot (ring cell) holds a 16-byte header and up to
 * cxk_rpc_payload_max bytes. Requests and replies may be committed in batches: one fence
 * publishes many slots (CXK_RPC_DEFER + cxk_rpc_flush / cxk_rpc_server_flush). Replies of one
 * client come back in request order. Calls wait at most timeout_ms (-ETIMEDOUT), and fail
 * with -EPIPE once the other side is closed or its process is gone. A server or client
 * handle is used by one thread at a time. */
typedef struct cxk_rpc_server cxk_rpc_server;
typedef struct cxk_rpc_client cxk_rpc_client;
#define CXK_RPC_NAME_MAX 64
#define CXK_RPC_DEFER 1u
struct cxk_rpc_req {
    uint32_t client;     /* which client sent it (for the reply) */
    uint32_t method;
    uint64_t id;         /* the client's id for it */
    const void *data;    /* in the ring: valid until the next cxk_rpc_server_next */
    uint32_t nbytes;
    uint32_t reserved;
};
/* slot_bytes: a multiple of 64 (0 = 256); depth: slots per ring, a power of two (0 = 128).
 * Objects of an earlier server of this service on this host are removed first (-EBUSY when
 * that server's process is alive). */
CXK_API int cxk_rpc_server_create(cxk_pool *p, const char *name, uint32_t max_clients,
                                  uint32_t slot_bytes, uint32_t depth, cxk_rpc_server **out);
CXK_API void cxk_rpc_server_close(cxk_rpc_server *s);
/* The next request of any client (clients in turn), or -EAGAIN. Connects new clients and
 * drops closed ones on the way. */
CXK_API int cxk_rpc_server_next(cxk_rpc_server *s, struct cxk_rpc_req *req);
/* Answer request id of client with status (>= 0 success, < 0 an -errno the client gets as
 * the call's result) and nbytes of data. With CXK_RPC_DEFER the reply waits for
 * cxk_rpc_server_flush. -EPIPE when that client has gone, or broke the protocol (its reply
 * ring full: more than depth requests outstanding); it is then dropped. */
CXK_API int cxk_rpc_server_reply(cxk_rpc_server *s, uint32_t client, uint64_t id, int32_t status,
                                 const void *data, uint32_t nbytes, unsigned flags);
CXK_API int cxk_rpc_server_flush(cxk_rpc_server *s);
CXK_API uint32_t cxk_rpc_server_clients(const cxk_rpc_server *s);  /* connected now */

/* Connect to service name (waiting up to timeout_ms for its server, 0 = 10 s). */
CXK_API int cxk_rpc_connect(cxk_pool *p, const char *name, uint32_t timeout_ms,
                            cxk_rpc_client **out);
CXK_API void cxk_rpc_close(cxk_rpc_client *c);
CXK_API uint32_t cxk_rpc_payload_max(const cxk_rpc_client *c);
/* Send a request (CXK_RPC_DEFER: publish later with cxk_rpc_flush); *id names it. -EAGAIN
 * when depth requests are outstanding. */
CXK_API int cxk_rpc_submit(cxk_rpc_client *c, uint32_t method, const void *data, uint32_t nbytes,
                           unsigned flags, uint64_t *id);
CXK_API int cxk_rpc_flush(cxk_rpc_client *c);
/* The next reply (in request order), copied into buf (cap bytes; -EMSGSIZE when longer, the
 * reply stays); -EAGAIN none yet. *status is the server's status. */
CXK_API int cxk_rpc_poll(cxk_rpc_client *c, uint64_t *id, int32_t *status, void *buf,
                         uint32_t cap, uint32_t *nbytes);
/* The client's wait policy for cxk_rpc_call and for a submit waiting for room ("Waits"
 * above; NULL: the defaults, which a client also starts with). -EINVAL for a bad o. */
CXK_API int cxk_rpc_set_wait(cxk_rpc_client *c, const struct cxk_wait_opts *o);
/* submit + wait for its reply (up to the connect's timeout_ms): returns the server's status
 * if negative, else 0; -EPROTO while submitted requests are outstanding. */
CXK_API int cxk_rpc_call(cxk_rpc_client *c, uint32_t method, const void *req, uint32_t nbytes,
                         void *reply, uint32_t cap, uint32_t *reply_nbytes, int32_t *status);
/* For loops of submit/poll and of server_next: cxk_wait_idle whose sleeps end as soon as a
 * reply (client) or a request of any connected client (server, up to 128 clients; the
 * server first publishes its deferred replies) is published (same-host wake-up above). A
 * client that connects while the server sleeps is noticed at that sleep's timeout
 * (CXLKIT_MSG_WAKE_US): its rings are not among those the server sleeps on yet. */
CXK_API int64_t cxk_rpc_wait_idle(cxk_rpc_client *c, struct cxk_wait *w);
CXK_API int64_t cxk_rpc_server_wait_idle(cxk_rpc_server *s, struct cxk_wait *w);
/* Wake-up counters: the client's reply ring; the server's request rings summed (enabled: 1
 * when any is). -EINVAL for NULL. */
CXK_API int cxk_rpc_wake_stats(const cxk_rpc_client *c, struct cxk_ring_wake_stats *st);
CXK_API int cxk_rpc_server_wake_stats(const cxk_rpc_server *s, struct cxk_ring_wake_stats *st);
/* The adaptive spin's state and counters (cxk_spin above) of the client's waits for replies
 * (cxk_rpc_call, cxk_rpc_wait_idle) and of the server's waits for requests
 * (cxk_rpc_server_wait_idle). -EINVAL for NULL. */
CXK_API int cxk_rpc_spin_stats(const cxk_rpc_client *c, struct cxk_spin *st);
CXK_API int cxk_rpc_server_spin_stats(const cxk_rpc_server *s, struct cxk_spin *st);
/* The client slot k this client holds (0 .. max_clients - 1), to name it in messages;
 * UINT32_MAX for NULL. Slot k is claimed with "rpc.<name>.<k>.cli" (the holder's pid and
 * boot), made before its request ring: a slot whose holder ran on this boot and whose process
 * has ended is taken back by the server and by connecting clients of the holder's host (a
 * live holder's never is). Calls fail with -EBADMSG when a ring of the client holds what no
 * correct peer writes (a head or cell outside its range), or the live server dropped the
 * client for that; -EPIPE only when the server is gone. */
CXK_API uint32_t cxk_rpc_client_slot(const cxk_rpc_client *c);

/* ---- The non-coherence simulator (coherence "sim") ----
 * Protocol mutations and crash points, the simulator's test companions, are declared in
 * cxlkit_testing.h and exist only in a testing build (CMake option CXLKIT_TESTING). */
/* What the simulator did in this process since load: out[0] lines written back to a pool,
 * out[1] lines fetched again, out[2] random evictions, out[3] lines of streaming stores. */
CXK_API void cxk_sim_counts(uint64_t out[4]);
/* The simulator's cost to production, timed in one run: medians of `rounds` rounds of `calls`
 * calls, ns per call: out[0] cxk_flush of one line, out[1] the same instruction without the
 * simulator's check, out[2] cxk_sfence, out[3] sfence without the check; out[4], out[5] the
 * medians of each round's ratio (flush, sfence). 0 or -EINVAL. */
CXK_API int cxk_bench_sim_branch(uint32_t rounds, uint32_t calls, double out[6]);

#ifdef __cplusplus
}
#endif
#endif /* CXLKIT_H */
