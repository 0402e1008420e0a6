/* preload.h — private to libcxlkit_preload.so: the configuration read from the environment,
 * the decision log, and the stripe placement. C and libc only: the library is preloaded into
 * unmodified programs, so it must not bring libstdc++ or libcxlkit (C++) into them. */
#pragma once
#include <stddef.h>
#include <stdint.h>

#define CXP_MAX_NODES 64     /* nodes one stripe names (CXK_MAX_POLICY_NODES) */
#define CXP_MAX_NODE_ID 1023 /* CXK_MAX_NODE_ID */
#define CXP_MAX_WEIGHT 255
/* glibc refuses an M_MMAP_THRESHOLD above HEAP_MAX_SIZE / 2 (32 MiB on 64-bit) */
#define CXP_MAX_MMAP_THRESHOLD (32ul << 20)

/* The whole configuration; written once by cxp_config_read, read-only after. */
struct cxp_config {
    int nnodes;
    int nodes[CXP_MAX_NODES];
    unsigned weights[CXP_MAX_NODES];
    unsigned round;       /* sum of weights: chunks per round */
    size_t chunk_bytes;   /* multiple of the page size */
    size_t min_bytes;     /* mappings and blocks this large or larger are placed */
    size_t cache_bytes;   /* CXLKIT_PRELOAD_CACHE: freed placed blocks kept, bytes (0: off) */
    int cache_count;      /* CXLKIT_PRELOAD_CACHE_COUNT: ... and mappings */
};

/* The configuration from CXLKIT_STRIPE, CXLKIT_STRIPE_CHUNK, CXLKIT_MIN_SIZE,
 * CXLKIT_PRELOAD_CACHE and CXLKIT_PRELOAD_CACHE_COUNT, read through the CXLKIT_* table
 * (unset: the table's defaults; a malformed value: the table's one-line refusal naming the
 * variable, as `cxlkit config` gives it). Returns 0, or -1 with a one-line reason naming the
 * variable in err (errcap bytes). No allocation: it runs inside malloc. */
int cxp_config_read(size_t page, struct cxp_config *out, char *err, size_t errcap);

/* "0:3,1:1" back from a configuration, NUL-terminated (cap >= 16). */
void cxp_config_format(const struct cxp_config *c, char *buf, size_t cap);

/* ---- the decision log (CXLKIT_PRELOAD_LOG=path|stderr): one write(2) per line ---------- */
/* fd to log to, or -1 (no log). Set once at init. */
extern int cxp_log_fd;
/* printf-style line, prefixed "cxlkit-preload[PID]: " and ended with a newline. No
 * allocation (snprintf into a stack buffer, then one write, atomic under O_APPEND). */
void cxp_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The same line on stderr whether or not a log is set (bad configuration, once). */
void cxp_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- placement ------------------------------------------------------------------------ */
/* Bind [addr, addr+len) chunk by chunk: chunk c (counted from addr) goes to the node whose
 * weight slot holds c mod round, one mbind per run of consecutive chunks on one node.
 * move_first: MPOL_MF_MOVE on the first run (malloc wrote its block header there before we
 * saw the block); move_all: on every run (MAP_POPULATE faulted the pages in already).
 * per_node[i] gets the bytes bound to c->nodes[i] (c->nnodes entries).
 * pre: addr page-aligned, len > 0. Returns the number of runs bound, or -errno of the
 * first mbind that failed (the rest of the range keeps the policy it had). */
long cxp_place(const struct cxp_config *c, void *addr, size_t len, int move_first, int move_all,
               size_t *per_node);

/* mbind(2) through syscall(2): glibc has no wrapper (libnuma's lives outside libc). 0 or
 * -errno. CXLKIT_PRELOAD_FAULT=mbind:N:errno makes the Nth call (1-based) fail (tests). */
int cxp_mbind(void *addr, size_t len, int mode, const unsigned long *mask,
              unsigned long maxnode, unsigned flags);
/* The nodes this task may allocate on (get_mempolicy MPOL_F_MEMS_ALLOWED): 1 if node is
 * allowed, 0 if not, -errno if the kernel would not say. */
int cxp_node_allowed(int node);
/* Arm the mbind fault from CXLKIT_PRELOAD_FAULT (NULL: none). 0, or -1 when malformed. */
int cxp_fault_parse(const char *spec);

/* ---- the cache of freed placed malloc mappings (cache.c) ------------------------------ */
/* Its defaults (CXLKIT_PRELOAD_CACHE and _COUNT, native/sys/config_table.h) were measured
 * with bench/preload_overhead.py (docs/preload.md): glibc's own bound on free heap memory it
 * keeps is its trim threshold, at most 64 MiB (2 x the 32 MiB cap of its dynamic mmap
 * threshold); the cache keeps as much. The table's range of the count ends here. */
#define CXP_CACHE_MAX_COUNT 256

struct cxp_cache_stats {
    unsigned long puts, hits, misses, evictions;
    int entries;
    size_t bytes;
};

/* Set the bounds (bytes or count 0: off) and the callback a mapping leaves by. Once, at
 * setup, before the program's threads. */
void cxp_cache_init(size_t bytes, int count, size_t page,
                    void (*release)(char *map, size_t len));
int cxp_cache_enabled(void);
/* Keep the mapping [map, map+len) (a whole glibc mmapped chunk). 1 kept (older
 * entries may have left through release), 0 not kept (larger than the cache: the caller
 * frees it), -1 it is in the cache already (a double free). */
int cxp_cache_put(char *map, size_t len);
/* The smallest cached mapping of at least need bytes, taken out of the cache (its tail
 * trimmed when it is more than a quarter larger than need), its length in *len; NULL when
 * none fits. The caller writes glibc's chunk header into it (the old one may be stale). */
char *cxp_cache_take(size_t need, size_t *len); /* empty: one relaxed load, no lock */
/* Release every cached mapping; returns how many. */
int cxp_cache_flush(void);
void cxp_cache_stats(struct cxp_cache_stats *s);

/* ---- the registry of placed ranges, for cxlkit audit (registry.c) ---------------------- */
#define CXP_REGISTRY_RECORDS 65536 /* 2 MiB of memfd, touched as used */
/* pthread_atfork handlers (once, at setup). */
void cxp_registry_init(void);
/* [addr, addr+len) was placed with its chunk grid starting at addr (replaces what overlaps). */
void cxp_registry_add(void *addr, size_t len);
/* [addr, addr+len) is no longer placed (unmapped, freed, moved): cut from every record.
 * Takes the lock only when cxp_registry_overlaps says the range may touch a record. */
void cxp_registry_remove(void *addr, size_t len);
/* Whether [addr, addr+len) may overlap a record: 0 only when a lock-free read of the registry
 * (between two equal even generations, at most CXP_REGISTRY_FAST_SCAN records) found none.
 * The fast path of munmap: a small unmap that touches no placed range takes no lock. */
#define CXP_REGISTRY_FAST_SCAN 64
int cxp_registry_overlaps(void *addr, size_t len);
