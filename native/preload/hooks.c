/* hooks.c — the interposed entry points of libcxlkit_preload.so and its one-time setup.
 *
 * What is placed: anonymous private mappings of at least CXLKIT_MIN_SIZE made through mmap /
 * mmap64 / mremap, and malloc-family blocks of at least that size. glibc's malloc maps large
 * blocks with its internal mmap (no PLT call to wrap), so the malloc family is wrapped: the
 * real call runs, and if glibc served the block by its own mapping (the IS_MMAPPED bit of the
 * chunk header) the whole mapping is striped, moving the one page malloc wrote its header to.
 * M_MMAP_THRESHOLD is set to the minimum size (at most glibc's 32 MiB cap), and
 * M_TRIM_THRESHOLD to twice that (what glibc's dynamic rule would set), so that every
 * block that large is such a mapping: glibc's default threshold rises after frees, and blocks
 * would then come from the heap, already touched. A realloc that grows a heap block past the
 * minimum is malloc + copy + free here, so the copy lands in placed pages. Any other malloc
 * (jemalloc, tcmalloc: the header check would read foreign memory) is passed through and said
 * so in the log. Fork: the child keeps each mapping's policy (the kernel copies it). Exec: the
 * new image loads the library again from LD_PRELOAD and re-reads the environment. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "preload.h"
#include "sys/config_parse.h"

#define API __attribute__((visibility("default")))
#define IS_MMAPPED 0x2ul  /* glibc malloc chunk header: the block is its own mapping */
#define SIZE_BITS 0x7ul

/* glibc's own allocator entry points: used only while dlsym resolves the next malloc. */
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void __libc_free(void *);
extern void *__libc_realloc(void *, size_t);

static void *(*real_mmap)(void *, size_t, int, int, int, off_t);
static int (*real_munmap)(void *, size_t);
static void *(*real_mremap)(void *, size_t, size_t, int, ...);
static void *(*real_malloc)(size_t);
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static int (*real_posix_memalign)(void **, size_t, size_t);
static void *(*real_aligned_alloc)(size_t, size_t);
static void *(*real_memalign)(size_t, size_t);
static void *(*real_valloc)(size_t);
static void (*real_free)(void *);
static int (*real_malloc_trim)(size_t);

static int resolved;   /* all real_* set */
static int resolving;  /* inside dlsym: our malloc forwards to glibc's */
static int state;      /* 0 not set up, 1 setting up, 2 done */
static int active;     /* a valid configuration: place */
static int glibc_malloc; /* the next malloc is glibc's: its chunk headers can be read */
static int cache_on;     /* freed placed blocks go to the cache (cache.c) */
static size_t page_size = 4096;
static struct cxp_config cfg;

/* ---- the fast path ----------------------------------------------------------------------
 * Every malloc-family call and every mmap/munmap of the program passes through here, so the
 * common case (a small block, a small mapping) is one load and one compare, then a tail jump
 * to the real function: no lock, no thread-local guard, no stack frame (the slow paths are
 * separate noinline functions). Read the disassembly (objdump -d) after changing these.
 *
 * place_min: calls for this many bytes or more take the slow path. 0 until set up (the first
 * call sets up), cfg.min_bytes when placing, SIZE_MAX when off. Stored with release at the
 * end of setup, after every real_* pointer: a thread that loads it nonzero (acquire, a plain
 * load on x86) may call through real_*.
 * watch_headers: 1 when the next malloc is glibc's and placement is on: free and realloc may
 * read the chunk header word just below a block (0 otherwise: another malloc's block may
 * start a mapping, and the word below it would be unmapped). Stored before place_min. */
static size_t place_min;
static int watch_headers;
static inline size_t slow_from(void) { return __atomic_load_n(&place_min, __ATOMIC_ACQUIRE); }
static inline int watching(void) { return __atomic_load_n(&watch_headers, __ATOMIC_ACQUIRE); }
/* glibc marks a chunk it mapped by itself with IS_MMAPPED in the size word below the block;
 * every block the library places or caches is such a chunk (placed_block checks the bit, a
 * cached block keeps glibc's header), so a block without it is never the library's. */
static inline int mmapped_chunk(const void *p) {
    return (((const size_t *)p)[-1] & IS_MMAPPED) != 0;
}

/* How often each slow path ran once set up, and the calls before set up (dlsym's, the
 * loader's): logged at exit (CXLKIT_PRELOAD_LOG) so a test can check that small calls never
 * leave the fast path. Relaxed counters, touched only in the slow paths. */
enum { SLOW_BOOT, SLOW_MALLOC, SLOW_CALLOC, SLOW_REALLOC, SLOW_FREE, SLOW_ALIGNED, SLOW_MMAP,
       SLOW_MUNMAP, SLOW_N };
static unsigned long slow_calls[SLOW_N];
static inline void count_slow(int which) {
    __atomic_add_fetch(&slow_calls[slow_from() ? which : SLOW_BOOT], 1, __ATOMIC_RELAXED);
}

static void resolve(void) {
    if (__atomic_load_n(&resolved, __ATOMIC_ACQUIRE)) return;
    __atomic_store_n(&resolving, 1, __ATOMIC_RELAXED);
    real_mmap = dlsym(RTLD_NEXT, "mmap");
    real_munmap = dlsym(RTLD_NEXT, "munmap");
    real_mremap = dlsym(RTLD_NEXT, "mremap");
    real_malloc = dlsym(RTLD_NEXT, "malloc");
    real_calloc = dlsym(RTLD_NEXT, "calloc");
    real_realloc = dlsym(RTLD_NEXT, "realloc");
    real_posix_memalign = dlsym(RTLD_NEXT, "posix_memalign");
    real_aligned_alloc = dlsym(RTLD_NEXT, "aligned_alloc");
    real_memalign = dlsym(RTLD_NEXT, "memalign");
    real_valloc = dlsym(RTLD_NEXT, "valloc");
    real_free = dlsym(RTLD_NEXT, "free");
    real_malloc_trim = dlsym(RTLD_NEXT, "malloc_trim");
    /* the next malloc is glibc's when libc.so.6 itself exports that address */
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    glibc_malloc = libc && dlsym(libc, "malloc") == (void *)real_malloc;
    if (libc) dlclose(libc);
    __atomic_store_n(&resolving, 0, __ATOMIC_RELAXED);
    /* release pairs with the acquire above: a thread that sees resolved sees every real_* */
    __atomic_store_n(&resolved, 1, __ATOMIC_RELEASE);
}

static void open_log(void) {
    const char *log = cxk_cfg_env(CXK_CFG_PRELOAD_LOG);
    if (!log) return;
    if (strcmp(log, "stderr") == 0) {
        cxp_log_fd = 2;
        return;
    }
    /* O_NONBLOCK: a FIFO with no reader (or a device) must not hold the program's start;
     * then only a regular file is kept: a pipe's writes could block or fail later */
    int fd = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY | O_NONBLOCK, 0644);
    if (fd < 0) {
        cxp_warn("CXLKIT_PRELOAD_LOG=%s: %s; logging to stderr", log, strerror(errno));
        cxp_log_fd = 2;
        return;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        cxp_warn("CXLKIT_PRELOAD_LOG=%s: not a regular file (a FIFO, socket or device); "
                 "logging to stderr", log);
        cxp_log_fd = 2;
        return;
    }
    fcntl(fd, F_SETFL, O_APPEND);  /* a regular file never blocks: O_NONBLOCK off again */
    cxp_log_fd = fd;
}

static void setup_malloc(void) {
    if (!glibc_malloc) {
        cxp_log("malloc is not glibc's: malloc blocks are left alone, mmap calls are placed");
        return;
    }
    if (getenv("MALLOC_MMAP_THRESHOLD_")) {
        cxp_log("MALLOC_MMAP_THRESHOLD_ is set: kept; blocks malloc serves from its heap "
                "are left alone");
        return;
    }
    size_t t = cfg.min_bytes < CXP_MAX_MMAP_THRESHOLD ? cfg.min_bytes : CXP_MAX_MMAP_THRESHOLD;
    if (!mallopt(M_MMAP_THRESHOLD, (int)t))
        cxp_log("mallopt(M_MMAP_THRESHOLD, %zu) refused: some large blocks may come from "
                "the heap and be left alone", t);
    /* Pinning the threshold also stops glibc's dynamic rule, which raises the trim threshold
     * to twice the mmap threshold once a mapped block is freed; left at its 128 KiB default,
     * every free of a 128 KiB..minimum block at the top of the heap gave its pages back and
     * the next malloc faulted them in again (a 1 MiB malloc/free loop: 500x slower than glibc
     * alone, 448k page faults instead of 591). Set as the rule would: twice the threshold. */
    if (getenv("MALLOC_TRIM_THRESHOLD_"))
        cxp_log("MALLOC_TRIM_THRESHOLD_ is set: kept");
    else if (!mallopt(M_TRIM_THRESHOLD, (int)(2 * t)))
        cxp_log("mallopt(M_TRIM_THRESHOLD, %zu) refused: freed heap blocks may be trimmed "
                "and faulted in again", 2 * t);
}

/* A cached mapping leaves through glibc's own free: it munmaps the chunk and keeps its
 * count of mappings right (M_MMAP_MAX). */
static void release_block(char *map, size_t len) {
    cxp_log("release %p+%zu: out of the cache", (void *)map, len);
    cxp_registry_remove(map, len);
    /* a chunk header at offset 0 for the whole mapping as it is now (the block may have been
     * handed out at a staggered offset, or cut to size, since glibc wrote the first one) */
    size_t *hdr = (size_t *)map;
    hdr[0] = 0;
    hdr[1] = len | IS_MMAPPED;
    real_free(map + 2 * sizeof(size_t));
}

static void setup_cache(void) {
    if (!glibc_malloc) return;
    cxp_cache_init(cfg.cache_bytes, cfg.cache_count, page_size, release_block);
    cache_on = cxp_cache_enabled();
}

/* Read the environment once. Bad configuration: one line on stderr, and the library only
 * forwards from then on. */
static void setup(void) {
    int expect = 0;
    if (!__atomic_compare_exchange_n(&state, &expect, 1, 0, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
        return;  /* another thread sets up (a call there may come unplaced meanwhile) */
    resolve();
    long ps = sysconf(_SC_PAGESIZE);
    if (ps > 0) page_size = (size_t)ps;
    open_log();
    char err[256];
    if (cxp_fault_parse(cxk_cfg_env(CXK_CFG_PRELOAD_FAULT)) < 0) {
        cxp_warn("CXLKIT_PRELOAD_FAULT=%s: expected mbind:N:errno; placement off",
                 cxk_cfg_env(CXK_CFG_PRELOAD_FAULT));
    } else if (cxp_config_read(page_size, &cfg, err, sizeof err) < 0) {
        cxp_warn("%s; placement off", err);
    } else {
        int ok = 1;
        for (int i = 0; i < cfg.nnodes && ok; i++) {
            int a = cxp_node_allowed(cfg.nodes[i]);
            if (a == 0) {
                cxp_warn("CXLKIT_STRIPE=%s: node %d has no memory this process may use; "
                         "placement off", cxk_cfg_env(CXK_CFG_STRIPE), cfg.nodes[i]);
                ok = 0;
            } else if (a < 0) {
                cxp_warn("get_mempolicy: %s (kernel without NUMA?); placement off",
                         strerror(-a));
                ok = 0;
            }
        }
        if (ok) {
            char spec[CXP_MAX_NODES * 16];
            cxp_config_format(&cfg, spec, sizeof spec);
            setup_cache();
            cxp_registry_init();
            cxp_log("on: stripe %s chunk %zu min %zu cache %zu bytes %d blocks%s", spec,
                    cfg.chunk_bytes, cfg.min_bytes, cfg.cache_bytes, cfg.cache_count,
                    cache_on ? "" : " (off)");
            setup_malloc();
            __atomic_store_n(&active, 1, __ATOMIC_RELEASE);
        }
    }
    /* watch_headers first: a thread that sees place_min set sees it too */
    __atomic_store_n(&watch_headers, active && glibc_malloc, __ATOMIC_RELEASE);
    __atomic_store_n(&place_min, active ? cfg.min_bytes : SIZE_MAX, __ATOMIC_RELEASE);
    __atomic_store_n(&state, 2, __ATOMIC_RELEASE);
}

__attribute__((constructor)) static void cxp_init(void) { setup(); }

static inline int placing(void) {
    if (__builtin_expect(__atomic_load_n(&state, __ATOMIC_ACQUIRE) != 2, 0)) setup();
    return __atomic_load_n(&active, __ATOMIC_ACQUIRE);
}

static void place_range(const char *what, void *addr, size_t len, int move_first,
                        int move_all) {
    size_t per_node[CXP_MAX_NODES];
    long r = cxp_place(&cfg, addr, len, move_first, move_all, per_node);
    if (r < 0) {
        cxp_log("error %s %p+%zu: mbind: %s; the rest of it keeps the default policy", what,
                addr, len, strerror((int)-r));
        return;
    }
    cxp_registry_add(addr, len);
    char spread[CXP_MAX_NODES * 28];
    size_t at = 0;
    spread[0] = 0;
    for (int i = 0; i < cfg.nnodes && at < sizeof spread; i++) {
        int k = snprintf(spread + at, sizeof spread - at, " %d:%zu", cfg.nodes[i], per_node[i]);
        if (k < 0) break;
        at += (size_t)k;
    }
    cxp_log("place %s %p+%zu: %ld runs, bytes per node%s", what, addr, len, r, spread);
}

/* ---- mmap family --------------------------------------------------------------------- */
static void consider_mapping(const char *what, void *p, size_t len, int prot, int flags) {
    (void)prot;
    if (len < cfg.min_bytes) return;  /* small: not logged, they are many */
    if (!(flags & MAP_ANONYMOUS))
        cxp_log("leave %s %p+%zu: file-backed", what, p, len);
    else if ((flags & MAP_TYPE) != MAP_PRIVATE)
        cxp_log("leave %s %p+%zu: shared", what, p, len);
    else if (flags & (MAP_HUGETLB | MAP_GROWSDOWN | MAP_STACK))
        cxp_log("leave %s %p+%zu: hugetlb, stack or grows-down", what, p, len);
    else
        place_range(what, p, len, 0, (flags & MAP_POPULATE) != 0);
}

/* A mapping as large as the minimum, a MAP_FIXED one (it may replace part of a placed range),
 * or any call before set up. */
__attribute__((noinline)) static void *mmap_slow(void *addr, size_t len, int prot, int flags,
                                                 int fd, off_t off) {
    if (__builtin_expect(!real_mmap, 0)) {
        if (__atomic_load_n(&resolving, __ATOMIC_RELAXED))
            return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
        resolve();
    }
    count_slow(SLOW_MMAP);
    void *p = real_mmap(addr, len, prot, flags, fd, off);
    if (p != MAP_FAILED && placing()) {
        int saved = errno;
        if (flags & MAP_FIXED) cxp_registry_remove(p, len);
        consider_mapping("mmap", p, len, prot, flags);
        errno = saved;
    }
    return p;
}

API void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off) {
    /* MAP_FIXED_NOREPLACE fails rather than replace: only MAP_FIXED can cut a placed range */
    if (__builtin_expect(len < slow_from() && !(flags & MAP_FIXED), 1))
        return real_mmap(addr, len, prot, flags, fd, off);
    return mmap_slow(addr, len, prot, flags, fd, off);
}

API void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
    __attribute__((alias("mmap")));

__attribute__((noinline)) static int munmap_slow(void *addr, size_t len) {
    if (__builtin_expect(!real_munmap, 0)) resolve();
    count_slow(SLOW_MUNMAP);
    int r = real_munmap(addr, len);
    if (r == 0 && placing()) {
        cxp_registry_remove(addr, len); /* any part of a placed range */
        if (len >= cfg.min_bytes) cxp_log("unmap %p+%zu", addr, len);
    }
    return r;
}

/* A small unmap passes straight through unless it cuts a placed range (a lock-free look at
 * the registry: a hole punched in a placed mapping must leave its record). */
API int munmap(void *addr, size_t len) {
    if (__builtin_expect(len < slow_from() && !cxp_registry_overlaps(addr, len), 1))
        return real_munmap(addr, len);
    return munmap_slow(addr, len);
}

/* Whether the page at p has the policy the library gives a mapping's first chunk (MPOL_BIND
 * to the stripe's first node): the mark of a placed mapping. Keeps errno. */
static int bound_to_first(void *p) {
    int mode = -1;
    unsigned long mask[(CXP_MAX_NODE_ID + 1) / (8 * sizeof(unsigned long))] = {0};
    int saved = errno;
    /* MPOL_F_NODE | MPOL_F_ADDR would give the node of a page; MPOL_F_ADDR alone the policy */
    long r = syscall(SYS_get_mempolicy, &mode, mask, (unsigned long)(CXP_MAX_NODE_ID + 2), p,
                     2ul /* MPOL_F_ADDR */);
    errno = saved;
    return r == 0 && mode == 2 /* MPOL_BIND */ &&
           ((mask[(size_t)cfg.nodes[0] / (8 * sizeof(long))] >>
             ((size_t)cfg.nodes[0] % (8 * sizeof(long)))) & 1);
}

/* A mapping that grows keeps the policy of its last part for the new pages: striped again
 * whole (pages already there stay: no MPOL_MF_MOVE) when it was placed, i.e. its first page
 * is bound to the stripe's first node. */
API void *mremap(void *old, size_t old_len, size_t new_len, int flags, ...) {
    void *want = NULL;
    if (flags & MREMAP_FIXED) {
        va_list ap;
        va_start(ap, flags);
        want = va_arg(ap, void *);
        va_end(ap);
    }
    if (__builtin_expect(!real_mremap, 0)) resolve();
    void *p = real_mremap(old, old_len, new_len, flags, want);
    if (p == MAP_FAILED || !placing()) return p;
    int saved = errno;
    /* the old range is gone or changed; placed again below when the result is placed */
    if (p != old || new_len < old_len)
        cxp_registry_remove(old, old_len);
    if (p != old && (flags & MREMAP_FIXED)) cxp_registry_remove(p, new_len);
    if (new_len < cfg.min_bytes) {
        errno = saved;
        return p;
    }
    if (bound_to_first(p))
        place_range("mremap", p, new_len, 0, 0);
    else
        cxp_log("leave mremap %p+%zu: not a placed mapping", p, new_len);
    errno = saved;
    return p;
}

/* ---- malloc family ------------------------------------------------------------------- */
/* The mapping glibc made for block p (the chunk header just below p), or 0 when p came from
 * the heap. glibc keeps prev_size = the alignment offset from the mapping's start for such
 * chunks (memalign), and size with the flag bits. */
static int block_mapping(void *p, size_t want, char **start, size_t *len) {
    const size_t *h = (const size_t *)p;
    size_t size = h[-1];
    if (!(size & IS_MMAPPED)) return 0;
    size_t off = h[-2];
    char *m = (char *)p - 2 * sizeof(size_t) - off;
    size_t n = (size & ~SIZE_BITS) + off;
    if (((uintptr_t)m % page_size) || (n % page_size) || n < want) return 0;
    *start = m;
    *len = n;
    return 1;
}

/* Whether the page at addr (present: malloc wrote it) sits elsewhere than the stripe's first
 * node. MPOL_MF_MOVE is asked for only then: it drains every CPU's LRU cache first
 * (lru_add_drain_all), which made a placed 4 MiB malloc cost ~1.4x an unplaced one. */
static int header_misplaced(void *addr) {
    int node = -1;
    int saved = errno;
    long r = syscall(SYS_get_mempolicy, &node, NULL, 0ul, addr, 3ul /* MPOL_F_NODE|ADDR */);
    errno = saved;
    return r != 0 || node != cfg.nodes[0];
}

static void *placed_block(const char *what, void *p, size_t n) {
    if (!p || !placing() || n < cfg.min_bytes) return p;
    int saved = errno;
    char *m;
    size_t len;
    if (!glibc_malloc)
        cxp_log("leave %s %p+%zu: malloc is not glibc's", what, p, n);
    else if (!block_mapping(p, n, &m, &len))
        cxp_log("leave %s %p+%zu: served from malloc's heap, not its own mapping", what, p, n);
    else
        place_range(what, m, len, header_misplaced(m), 0);
    errno = saved;
    return p;
}

/* ---- the cache of freed placed blocks (cache.c) -------------------------------------- */
/* Where a reused block's data starts in its first page. glibc puts every mapped block at page
 * offset 16 (its 16-byte chunk header at the mapping's start), so two blocks a program streams
 * between (numpy's a * 2 + 1 reads one 4 MiB array and writes another) have the same low 12
 * address bits all along: the CPU's 4 KiB alias check between loads and earlier stores then
 * stalls (streaming 4 MiB arrays at one page offset measured 10-20 % slower than at offsets
 * 1 KiB apart, docs/preload.md). A reused block gets the next of the page offsets 32, 64 ...
 * 2048 that fits its slack (16, glibc's own, when none does): glibc accepts a mapped chunk at an offset (memalign makes
 * them; free and realloc read prev_size) when its data's page offset is a power of two. */
#define STAGGER_STEPS 8 /* page offsets 16 << 0 .. 16 << 7 */
static unsigned stagger_next;

static inline int stagger_form(size_t data_off) {
    return data_off >= 16 && data_off <= (16u << (STAGGER_STEPS - 1)) &&
           (data_off & (data_off - 1)) == 0;
}

/* The chunk offset (data page offset - 16) for a block with slack bytes to spare. */
static size_t stagger_offset(size_t slack) {
    /* k from 1: offset 16 is where glibc puts every fresh block */
    unsigned k = 1 + __atomic_fetch_add(&stagger_next, 1, __ATOMIC_RELAXED) % (STAGGER_STEPS - 1);
    while (k > 0 && ((size_t)16 << k) - 16 > slack) k--;
    return ((size_t)16 << k) - 16;
}

/* A cached placed block for a request of n bytes, or NULL. Its chunk header is the one glibc
 * wrote (prev_size 0, size = the mapping's length | IS_MMAPPED), so the block is glibc's
 * again: free, realloc (mremap) and malloc_usable_size treat it as any mapped block. */
static void *cached_block(const char *what, size_t n) {
    size_t need, len;
    if (!placing() || !cache_on || n < cfg.min_bytes ||
        __builtin_add_overflow(n, 2 * sizeof(size_t), &need))
        return NULL;
    char *m = cxp_cache_take(need, &len);
    if (!m) return NULL;
    size_t off = stagger_offset(len - need);
    size_t *hdr = (size_t *)(m + off);
    hdr[0] = off;                    /* prev_size: the chunk's offset in its mapping */
    hdr[1] = (len - off) | IS_MMAPPED; /* size with glibc's flag */
    cxp_log("reuse %s %p+%zu: a cached placed block, data at page offset %zu", what, m, len,
            off + 2 * sizeof(size_t));
    return m + off + 2 * sizeof(size_t);
}

/* Keep the block p in the cache when it is a whole placed mapping of glibc's whose offset is
 * one stagger_offset gives (glibc's own 0 included; memalign's, aligned to a page or more,
 * are not). 1 kept, 0 not (the caller frees it). A block in the cache already is a
 * double free: glibc would crash on the second munmap later, here it stops now. */
static int cache_free(void *p) {
    char *m;
    size_t len;
    if (!block_mapping(p, 0, &m, &len) || !stagger_form((size_t)((char *)p - m)) ||
        len < cfg.min_bytes || !bound_to_first(m))
        return 0;
    int r = cxp_cache_put(m, len);
    if (r < 0) {
        cxp_warn("free(%p): the block was freed already (double free); aborting", p);
        abort();
    }
    if (r) cxp_log("cache %p+%zu", m, len);
    return r;
}

/* A block whose header says glibc mapped it (rare: only blocks of at least the minimum are
 * mapped once the threshold is pinned), or a call before set up / with another malloc. */
__attribute__((noinline)) static void free_slow(void *p) {
    if (__builtin_expect(!real_free, 0)) {
        if (__atomic_load_n(&resolving, __ATOMIC_RELAXED)) {
            __libc_free(p);
            return;
        }
        resolve();
    }
    if (p && watching()) {
        count_slow(SLOW_FREE);
        size_t size = ((const size_t *)p)[-1];
        if (cache_on && size >= cfg.min_bytes && cache_free(p)) return;
        /* glibc unmaps it: a placed block, or one shrunk in place below the minimum, leaves
         * the registry (no lock when it has no record) */
        char *m;
        size_t len;
        if (block_mapping(p, 0, &m, &len)) cxp_registry_remove(m, len);
    }
    real_free(p);
}

API void free(void *p) {
    /* one flag, then the header word glibc's free reads next anyway */
    if (__builtin_expect(watching(), 1) && __builtin_expect(!p || !mmapped_chunk(p), 1)) {
        real_free(p);
        return;
    }
    free_slow(p);
}

/* The program asks for free memory back: the cache goes first, then glibc's heap. */
API int malloc_trim(size_t pad) {
    if (__builtin_expect(!real_malloc_trim, 0)) resolve();
    int n = __atomic_load_n(&cache_on, __ATOMIC_RELAXED) ? cxp_cache_flush() : 0;
    if (n) cxp_log("malloc_trim: released %d cached blocks", n);
    int r = real_malloc_trim(pad);
    return r || n > 0;
}

__attribute__((destructor)) static void cxp_fini(void) {
    unsigned long c[SLOW_N];
    for (int i = 0; i < SLOW_N; i++) c[i] = __atomic_load_n(&slow_calls[i], __ATOMIC_RELAXED);
    cxp_log("slow path at exit: malloc %lu calloc %lu realloc %lu free %lu aligned %lu mmap %lu "
            "munmap %lu before setup %lu", c[SLOW_MALLOC], c[SLOW_CALLOC], c[SLOW_REALLOC],
            c[SLOW_FREE], c[SLOW_ALIGNED], c[SLOW_MMAP], c[SLOW_MUNMAP], c[SLOW_BOOT]);
    if (!__atomic_load_n(&cache_on, __ATOMIC_RELAXED)) return;
    struct cxp_cache_stats st;
    cxp_cache_stats(&st);
    cxp_log("cache at exit: %lu kept, %lu reused, %lu missed, %lu released; %d blocks "
            "%zu bytes held", st.puts, st.hits, st.misses, st.evictions, st.entries, st.bytes);
}

/* Set up (the first call of all), or resolve while dlsym runs: 1 when the caller should
 * forward its call to glibc's __libc_* (inside dlsym, real_* not set yet). */
static int boot(void) {
    if (__builtin_expect(!real_malloc, 0)) {
        if (__atomic_load_n(&resolving, __ATOMIC_RELAXED)) return 1;
        resolve();
    }
    placing(); /* sets up (or another thread does: this call then goes unplaced) */
    return 0;
}

__attribute__((noinline)) static void *malloc_slow(size_t n) {
    count_slow(SLOW_MALLOC);
    if (!slow_from() && boot()) return __libc_malloc(n);
    if (n < slow_from() || !placing()) return real_malloc(n);
    void *c = cached_block("malloc", n);
    return c ? c : placed_block("malloc", real_malloc(n), n);
}

API void *malloc(size_t n) {
    if (__builtin_expect(n < slow_from(), 1)) return real_malloc(n);
    return malloc_slow(n);
}

/* A reused block is not zero: memset it (its pages are resident already; dropping them with
 * MADV_DONTNEED and faulting zero pages back measured slower, docs/preload.md). */
__attribute__((noinline)) static void *calloc_slow(size_t k, size_t n) {
    count_slow(SLOW_CALLOC);
    if (!slow_from() && boot()) return __libc_calloc(k, n);
    size_t total;
    if (__builtin_mul_overflow(k, n, &total)) return real_calloc(k, n); /* glibc: ENOMEM */
    if (total < slow_from() || !placing()) return real_calloc(k, n);
    void *c = cached_block("calloc", total);
    if (c) return memset(c, 0, total);
    return placed_block("calloc", real_calloc(k, n), total);
}

API void *calloc(size_t k, size_t n) {
    size_t total;
    if (__builtin_expect(!__builtin_mul_overflow(k, n, &total) && total < slow_from(), 1))
        return real_calloc(k, n);
    return calloc_slow(k, n);
}

/* A mapped block shrunk below the minimum: glibc shrinks its mapping in place (mremap) or
 * copies it to its heap and unmaps it. Its record goes first (the range may be reused by
 * another thread once unmapped) and comes back, shortened, when the block stayed mapped in
 * place; an unplaced mapped block had no record and gets none. */
static void *realloc_mapped_small(void *old, size_t n, char *m, size_t len) {
    int was_placed = len >= cfg.min_bytes && bound_to_first(m);
    if (was_placed) cxp_registry_remove(m, len);
    void *p = real_realloc(old, n);
    char *m2;
    size_t len2;
    if (!was_placed) return p;
    if (!p) {
        cxp_registry_add(m, len); /* failed: the old block stays as it was */
    } else if (block_mapping(p, 0, &m2, &len2) && m2 == m) {
        cxp_registry_add(m2, len2);
        cxp_log("realloc %p+%zu: shrunk in place to %zu", (void *)m, len, len2);
    }
    return p;
}

__attribute__((noinline)) static void *realloc_slow(void *old, size_t n) {
    count_slow(SLOW_REALLOC);
    if (!slow_from() && boot()) return __libc_realloc(old, n);
    if (!placing() || !glibc_malloc) return real_realloc(old, n);
    char *m;
    size_t len;
    int mapped = old && block_mapping(old, 0, &m, &len);
    if (n < cfg.min_bytes)
        return mapped ? realloc_mapped_small(old, n, m, len) : real_realloc(old, n);
    if (!old) return malloc(n); /* the cache may serve it */
    if (!mapped) {
        /* a heap block grows past the minimum: a new placed block, then the copy */
        size_t have = malloc_usable_size(old);
        void *p = malloc(n);
        if (!p) return NULL;
        memcpy(p, old, have < n ? have : n);
        cxp_log("realloc %p -> %p: heap block copied into a placed one", old, p);
        free(old);
        return p;
    }
    /* a mapped block (cached before or not) glibc moves with mremap (pages keep their nodes)
     * or, shrunk below its threshold, copies to its heap: its record goes, the result is
     * placed (and recorded) again */
    cxp_registry_remove(m, len);
    void *p = real_realloc(old, n);
    if (!p) {
        cxp_registry_add(m, len); /* failed: the old block stays as it was */
        return NULL;
    }
    return placed_block("realloc", p, n);
}

/* Small and not a mapped block: glibc's. Set up (place_min nonzero) and not watching: placement
 * off or another malloc, whose blocks are never placed. */
API void *realloc(void *old, size_t n) {
    if (__builtin_expect(n < slow_from(), 1) &&
        __builtin_expect(!old || !watching() || !mmapped_chunk(old), 1))
        return real_realloc(old, n);
    return realloc_slow(old, n);
}

/* The aligned family: the real call, then a block as large as the minimum is placed. */
__attribute__((noinline)) static void *aligned_slow(const char *what, void *p, size_t n) {
    count_slow(SLOW_ALIGNED);
    return placed_block(what, p, n);
}

API int posix_memalign(void **out, size_t align, size_t n) {
    if (__builtin_expect(n < slow_from(), 1)) return real_posix_memalign(out, align, n);
    if (__builtin_expect(!real_posix_memalign, 0)) resolve();
    int r = real_posix_memalign(out, align, n);
    if (r == 0) aligned_slow("posix_memalign", *out, n);
    return r;
}

API void *aligned_alloc(size_t align, size_t n) {
    if (__builtin_expect(n < slow_from(), 1)) return real_aligned_alloc(align, n);
    if (__builtin_expect(!real_aligned_alloc, 0)) resolve();
    return aligned_slow("aligned_alloc", real_aligned_alloc(align, n), n);
}

API void *memalign(size_t align, size_t n) {
    if (__builtin_expect(n < slow_from(), 1)) return real_memalign(align, n);
    if (__builtin_expect(!real_memalign, 0)) resolve();
    return aligned_slow("memalign", real_memalign(align, n), n);
}

API void *valloc(size_t n) {
    if (__builtin_expect(n < slow_from(), 1)) return real_valloc(n);
    if (__builtin_expect(!real_valloc, 0)) resolve();
    return aligned_slow("valloc", real_valloc(n), n);
}
