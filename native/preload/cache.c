/* cache.c — the cache of placed malloc mappings. A program that frees a large block and
 * allocates one of the same size again (a loop over 4 MiB buffers) would otherwise get a
 * fresh mapping each time from glibc (M_MMAP_THRESHOLD is pinned at the minimum size), bound
 * again by mbind and faulted in again page by page: 4x slower than glibc alone on that loop.
 * Here the freed mapping is kept whole — its chunk header left as glibc wrote it, its pages
 * resident and still bound chunk by chunk — and the next malloc/calloc of a fitting size
 * gets it back.
 *
 * Bounds: at most cap_bytes and cap_count mappings (CXLKIT_PRELOAD_CACHE, _COUNT); the
 * oldest leave first. A mapping leaves through the release callback (glibc's own free, so
 * that glibc's count of its mappings stays right for M_MMAP_MAX). Entries are whole glibc
 * mmapped chunks with alignment offset 0; a fit takes the smallest entry that holds the
 * request and hands it out whole when at most a quarter larger, else trims the tail.
 *
 * Threads: one mutex, held only to scan and edit the table (releases run after unlock).
 * fork: the child gets its own copy of the table and of every cached mapping (private
 * anonymous memory is copied on write), so the cache stays right in both; pthread_atfork
 * takes the mutex around fork so the child never inherits it held by a thread that does
 * not exist there. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "preload.h"

struct entry {
    char *map;      /* start of the mapping = glibc's chunk header */
    size_t len;     /* mapping bytes = glibc's chunk size */
    uint64_t stamp; /* insertion order: the oldest (smallest) leaves first */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct entry table[CXP_CACHE_MAX_COUNT];
static int used;             /* entries in table[0..used) */
static size_t held;          /* bytes over the entries */
static uint64_t clock_;      /* next stamp */
/* Written once by cxp_cache_init (before the program's threads), read after. */
static size_t cap_bytes;
static int cap_count;
static void (*release)(char *map, size_t len);
static size_t page;
static struct cxp_cache_stats stats; /* under lock */

static void before_fork(void) { pthread_mutex_lock(&lock); }
static void after_fork(void) { pthread_mutex_unlock(&lock); }

void cxp_cache_init(size_t bytes, int count, size_t page_size,
                    void (*release_fn)(char *map, size_t len)) {
    cap_bytes = bytes;
    cap_count = count > CXP_CACHE_MAX_COUNT ? CXP_CACHE_MAX_COUNT : count;
    page = page_size;
    release = release_fn;
    if (cxp_cache_enabled()) pthread_atfork(before_fork, after_fork, after_fork);
}

int cxp_cache_enabled(void) { return cap_bytes > 0 && cap_count > 0; }

static void drop(int i) {
    held -= table[i].len;
    table[i] = table[--used];
}

static int oldest(void) {
    int o = 0;
    for (int i = 1; i < used; i++)
        if (table[i].stamp < table[o].stamp) o = i;
    return o;
}

int cxp_cache_put(char *map, size_t len) {
    if (!cxp_cache_enabled() || len > cap_bytes) return 0;
    struct entry out[CXP_CACHE_MAX_COUNT];
    int nout = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < used; i++)
        if (table[i].map == map) {  /* freed twice: glibc would abort too */
            pthread_mutex_unlock(&lock);
            return -1;
        }
    while (used > 0 && (used >= cap_count || held + len > cap_bytes)) {
        int o = oldest();
        out[nout++] = table[o];
        drop(o);
    }
    table[used++] = (struct entry){map, len, clock_++};
    held += len;
    stats.puts++;
    stats.evictions += (unsigned long)nout;
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < nout; i++) release(out[i].map, out[i].len);
    return 1;
}

char *cxp_cache_take(size_t need, size_t *len) {
    if (!cxp_cache_enabled()) return NULL;
    /* used is written under the lock; a stale 0 only costs this call a fresh mapping */
    if (__atomic_load_n(&used, __ATOMIC_RELAXED) == 0) {
        __atomic_add_fetch(&stats.misses, 1, __ATOMIC_RELAXED);
        return NULL;
    }
    pthread_mutex_lock(&lock);
    int best = -1;
    for (int i = 0; i < used; i++)
        if (table[i].len >= need && (best < 0 || table[i].len < table[best].len)) best = i;
    if (best < 0) {
        __atomic_add_fetch(&stats.misses, 1, __ATOMIC_RELAXED);
        pthread_mutex_unlock(&lock);
        return NULL;
    }
    struct entry e = table[best];
    drop(best);
    stats.hits++;
    pthread_mutex_unlock(&lock);
    size_t want = (need + page - 1) / page * page;
    if (e.len - want > want / 4) {
        /* much larger: give the tail back to the kernel. The head keeps its chunk grid (it
         * starts where the mapping did), so its placement stays exact. */
        /* the syscall itself: the library's own munmap wrapper would log a program unmap */
        if (syscall(SYS_munmap, e.map + want, e.len - want) == 0) {
            cxp_registry_remove(e.map + want, e.len - want);
            e.len = want; /* the caller writes glibc's chunk header for the new length */
        }
    }
    *len = e.len;
    return e.map;
}

int cxp_cache_flush(void) {
    struct entry out[CXP_CACHE_MAX_COUNT];
    pthread_mutex_lock(&lock);
    int n = used;
    memcpy(out, table, (size_t)n * sizeof out[0]);
    used = 0;
    held = 0;
    stats.evictions += (unsigned long)n;
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < n; i++) release(out[i].map, out[i].len);
    return n;
}

void cxp_cache_stats(struct cxp_cache_stats *s) {
    pthread_mutex_lock(&lock);
    *s = stats;
    s->entries = used;
    s->bytes = held;
    pthread_mutex_unlock(&lock);
}
