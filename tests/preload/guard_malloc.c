/* guard_malloc.c — a malloc that is not glibc's, for tests/placement/test_preload_fastpath.py, preloaded
 * after libcxlkit_preload.so (LD_PRELOAD="libcxlkit_preload.so guard_malloc.so"). Every block
 * is its own mapping that starts on a page boundary right after a PROT_NONE guard page, so
 * reading the word just below a block (where glibc keeps its chunk header) faults: a library
 * that read "the header" of another malloc's block would crash the program. Sizes live in a
 * side table (open addressing with tombstones, keyed by address; enough for a test). Thread-safe through one spin lock.
 * Built with: cc -O1 -shared -fPIC -o guard_malloc.so guard_malloc.c */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#define SLOTS (1u << 18)
#define PAGE 4096ul

static struct { uintptr_t p; size_t n; } table[SLOTS];
static int spin;

static void lock(void) {
    while (__atomic_exchange_n(&spin, 1, __ATOMIC_ACQUIRE)) {}
}
static void unlock(void) { __atomic_store_n(&spin, 0, __ATOMIC_RELEASE); }

#define TOMB ((uintptr_t)1) /* a freed slot: lookups probe past it */

static size_t slot_of(uintptr_t p) { return (size_t)((p / PAGE) * 2654435761u) % SLOTS; }

static void put(uintptr_t p, size_t n) {
    lock();
    size_t i = slot_of(p);
    while (table[i].p && table[i].p != TOMB) i = (i + 1) % SLOTS;
    table[i].p = p;
    table[i].n = n;
    unlock();
}

/* size of block p (removed when take), 0 when not ours */
static size_t find(uintptr_t p, int take) {
    lock();
    size_t i = slot_of(p), n = 0;
    while (table[i].p && table[i].p != p) i = (i + 1) % SLOTS;
    if (table[i].p == p) {
        n = table[i].n;
        if (take) table[i].p = TOMB;
    }
    unlock();
    return n;
}

/* a block of n bytes aligned to align (a power of two), right after a guard page. The raw
 * syscalls: the library under test wraps mmap/munmap, and that is not what is tested here. */
static void *block_aligned(size_t n, size_t align) {
    if (n == 0) n = 1;
    if (align < PAGE) align = PAGE;
    size_t data = (n + PAGE - 1) / PAGE * PAGE, span = data + PAGE + align;
    char *m = (char *)syscall(SYS_mmap, NULL, span, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        errno = ENOMEM;
        return NULL;
    }
    char *d = (char *)(((uintptr_t)m + PAGE + align - 1) & ~(uintptr_t)(align - 1));
    if (d - PAGE > m) syscall(SYS_munmap, m, (size_t)(d - PAGE - m));
    if (d + data < m + span) syscall(SYS_munmap, d + data, (size_t)(m + span - d - data));
    syscall(SYS_mprotect, d - PAGE, PAGE, PROT_NONE);
    put((uintptr_t)d, n);
    return d;
}

static void *block(size_t n) { return block_aligned(n, PAGE); }

void *malloc(size_t n) { return block(n); }

void free(void *p) {
    if (!p) return;
    size_t n = find((uintptr_t)p, 1);
    if (!n) return; /* not ours, or malloc(0): leak rather than crash */
    syscall(SYS_munmap, (char *)p - PAGE, (n + PAGE - 1) / PAGE * PAGE + PAGE);
    /* the head and tail block_aligned cut off are unmapped already */
}

void *calloc(size_t k, size_t n) {
    size_t t;
    if (__builtin_mul_overflow(k, n, &t)) {
        errno = ENOMEM;
        return NULL;
    }
    return block(t); /* fresh anonymous pages are zero */
}

void *realloc(void *p, size_t n) {
    if (!p) return block(n);
    size_t old = find((uintptr_t)p, 0);
    void *q = block(n);
    if (q) {
        memcpy(q, p, old < n ? old : n);
        free(p);
    }
    return q;
}

size_t malloc_usable_size(void *p) { return p ? find((uintptr_t)p, 0) : 0; }
void *memalign(size_t a, size_t n) { return block_aligned(n, a); }
void *aligned_alloc(size_t a, size_t n) { return block_aligned(n, a); }
void *valloc(size_t n) { return block(n); }
int posix_memalign(void **out, size_t a, size_t n) {
    void *p = block_aligned(n, a);
    if (!p) return ENOMEM;
    *out = p;
    return 0;
}
