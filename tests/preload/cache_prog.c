/* cache_prog.c — an ordinary C program (it knows nothing of cxlkit) that frees and reallocates
 * large blocks, for tests/placement/test_preload_cache.py. One scenario per run (argv[1]); each checks
 * the contents it relies on and prints "ok SCENARIO" plus "key value" lines, or "FAIL why"
 * and exits 1. Under libcxlkit_preload.so the blocks go through the library's cache; without
 * it the same checks hold (glibc maps each one afresh). */
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define MiB (1ul << 20)
#define FAIL(...) do { printf("FAIL "); printf(__VA_ARGS__); printf("\n"); exit(1); } while (0)

static void fill(char *p, size_t n, char v) {
    for (size_t o = 0; o < n; o += 4096) p[o] = v;
    p[n - 1] = v;
}

static int all(const char *p, size_t n, char v) {
    for (size_t o = 0; o < n; o += 4096)
        if (p[o] != v) return 0;
    return p[n - 1] == v;
}

/* q is p's mapping again: the same first page (the library hands a reused block out at a
 * staggered page offset, so the pointers may differ by less than a page) */
static int same_map(const void *p, const void *q) {
    return (uintptr_t)p / 4096 == (uintptr_t)q / 4096;
}

/* p's old bytes, read where they were (through p: q = p's mapping again, still mapped),
 * past the first page (the reused block's chunk header may sit over p's first bytes) */
static int old_bytes(const char *p, const char *q, size_t n, char v) {
    return same_map(p, q) && all(p + 4096, n - 4096, v);
}

static char *big(size_t n) {
    char *p = malloc(n);
    if (!p) FAIL("malloc %zu", n);
    return p;
}

/* free a written block, malloc the same size: the reused block still holds the old bytes */
static void reuse(void) {
    char *p = big(4 * MiB);
    fill(p, 4 * MiB, 7);
    free(p);
    char *q = big(4 * MiB);
    printf("first %p second %p old_bytes %d usable_ok %d\n", (void *)p, (void *)q,
           old_bytes(p, q, 4 * MiB, 7), malloc_usable_size(q) >= 4 * MiB);
    free(q);
}

static void zeroed(void) {
    char *p = big(4 * MiB);
    memset(p, 0xab, 4 * MiB);
    free(p);
    char *q = calloc(4, MiB);
    if (!q) FAIL("calloc");
    for (size_t i = 0; i < 4 * MiB; i++)
        if (q[i]) FAIL("calloc byte %zu is %d", i, q[i]);
    printf("first %p second %p zero 1\n", (void *)p, (void *)q);
    free(q);
}

static void trim(void) {
    char *p[3];
    for (int i = 0; i < 3; i++) fill(p[i] = big((size_t)(3 + i) * MiB), (size_t)(3 + i) * MiB, 1);
    for (int i = 0; i < 3; i++) free(p[i]);
    printf("trim %d\n", malloc_trim(0));
}

/* two blocks freed with room for one (CXLKIT_PRELOAD_CACHE_COUNT=1): the older leaves */
static void evict(void) {
    char *a = big(4 * MiB), *b = big(4 * MiB);
    fill(a, 4 * MiB, 1);
    fill(b, 4 * MiB, 2);
    free(a);
    free(b);
    char *c = big(4 * MiB);
    printf("a %p b %p c %p c_is_b %d\n", (void *)a, (void *)b, (void *)c,
           old_bytes(b, c, 4 * MiB, 2));
    free(c);
}

static void double_free(void) {
    char *p = big(4 * MiB);
    fill(p, 4 * MiB, 1);
    free(p);
    fflush(stdout);
    free(p); /* the library stops here (glibc alone would crash later or now) */
    printf("survived\n");
}

/* a reused block grows by realloc (glibc's mremap: the header is glibc's own) */
static void grow(void) {
    char *p = big(4 * MiB);
    free(p);
    char *q = big(4 * MiB);
    fill(q, 4 * MiB, 5);
    char *r = realloc(q, 12 * MiB);
    if (!r) FAIL("realloc");
    if (!all(r, 4 * MiB, 5)) FAIL("realloc lost the contents");
    fill(r, 12 * MiB, 6);
    printf("reused %d grown %p kept 1\n", same_map(p, q), (void *)r);
    free(r);
}

/* a 16 MiB block freed, a 4 MiB one asked for: the cached one is cut to size */
static void split(void) {
    char *p = big(16 * MiB);
    fill(p, 16 * MiB, 3);
    free(p);
    char *q = big(4 * MiB);
    fill(q, 4 * MiB, 4);
    printf("first %p second %p usable %zu\n", (void *)p, (void *)q, malloc_usable_size(q));
    free(q);
}

/* memalign's blocks (offset in the mapping) and the program's own mappings stay out */
static void others(void) {
    char *a = memalign(64 * 1024, 4 * MiB);
    if (!a) FAIL("memalign");
    fill(a, 4 * MiB, 1);
    free(a);
    char *m = mmap(NULL, 4 * MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) FAIL("mmap");
    fill(m, 4 * MiB, 1);
    munmap(m, 4 * MiB);
    char *q = big(4 * MiB);
    printf("memalign %p mmap %p malloc %p fresh %d\n", (void *)a, (void *)m, (void *)q,
           all(q, 4 * MiB, 0));
    free(q);
}

/* parent and child each reuse their own copy of the cached mapping */
static void forked(void) {
    char *p = big(4 * MiB);
    fill(p, 4 * MiB, 9);
    free(p);
    fflush(stdout);
    pid_t c = fork();
    if (c < 0) FAIL("fork");
    char *q = big(4 * MiB);
    int old = old_bytes(p, q, 4 * MiB, 9);
    fill(q, 4 * MiB, c == 0 ? 1 : 2);
    if (c == 0) {
        printf("child reused %d old %d\n", same_map(p, q), old);
        fflush(stdout);
        _exit(all(q, 4 * MiB, 1) ? 0 : 1);
    }
    int st;
    waitpid(c, &st, 0);
    printf("parent reused %d old %d mine %d child_ok %d\n", same_map(p, q), old,
           all(q, 4 * MiB, 2),
           WIFEXITED(st) && WEXITSTATUS(st) == 0);
    free(q);
}

/* threads allocate, write, check and free blocks of a few sizes at once */
static void *worker(void *arg) {
    char tag = (char)(uintptr_t)arg;
    for (int i = 0; i < 150; i++) {
        size_t n = (size_t)(3 + (i + tag) % 3) * MiB + (size_t)(i % 5) * 4096;
        char *p = (i & 1) ? calloc(1, n) : malloc(n);
        if (!p) return (void *)1;
        if ((i & 1) && !all(p, n, 0)) return (void *)2;
        fill(p, n, tag);
        sched_yield();
        if (!all(p, n, tag)) return (void *)3;
        free(p);
    }
    return NULL;
}

static void threads(void) {
    pthread_t t[4];
    for (uintptr_t i = 0; i < 4; i++) pthread_create(&t[i], NULL, worker, (void *)(i + 1));
    int bad = 0;
    for (int i = 0; i < 4; i++) {
        void *r;
        pthread_join(t[i], &r);
        if (r) bad = (int)(uintptr_t)r;
    }
    if (bad) FAIL("thread check %d", bad);
    printf("threads 4\n");
}

/* a 4 MiB block freed and made again 16 times, two live at a time as a * 2 + 1 has them:
 * every block whole and usable (written, usable size, grown by realloc, freed); prints the
 * number of distinct page offsets the blocks' data started at, and the two live blocks'
 * offsets were equal how often */
static void stagger(void) {
    unsigned seen = 0, same = 0;
    char *keep = NULL;
    for (int i = 0; i < 16; i++) {
        char *p = big(4 * MiB);
        if (malloc_usable_size(p) < 4 * MiB) FAIL("usable size %zu", malloc_usable_size(p));
        fill(p, 4 * MiB, (char)i);
        if (!all(p, 4 * MiB, (char)i)) FAIL("contents of block %d", i);
        seen |= 1u << (__builtin_ctzl((uintptr_t)p % 4096 | 4096) % 32);
        if (keep) {
            same += ((uintptr_t)keep % 4096) == ((uintptr_t)p % 4096);
            free(keep);
        }
        keep = p;
    }
    char *g = realloc(keep, 6 * MiB); /* glibc's mremap of a block at an offset */
    if (!g || !all(g, 4 * MiB, 15)) FAIL("realloc of a reused block");
    fill(g, 6 * MiB, 3);
    free(g);
    printf("offsets %d same %u\n", __builtin_popcount(seen), same);
}

int main(int argc, char **argv) {
    static const struct { const char *name; void (*fn)(void); } s[] = {
        {"reuse", reuse}, {"zeroed", zeroed}, {"trim", trim}, {"evict", evict},
        {"double", double_free}, {"grow", grow}, {"split", split}, {"others", others},
        {"fork", forked}, {"threads", threads}, {"stagger", stagger}};
    if (argc != 2) return 2;
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++)
        if (!strcmp(argv[1], s[i].name)) {
            s[i].fn();
            printf("ok %s\n", argv[1]);
            return 0;
        }
    fprintf(stderr, "cache_prog: unknown scenario %s\n", argv[1]);
    return 2;
}
