/* fastpath_prog.c — an ordinary C program for tests/placement/test_preload_fastpath.py: N rounds of small
 * calls of every wrapped kind (malloc, calloc, realloc, free, free(NULL), posix_memalign,
 * aligned_alloc, memalign, valloc, mmap/munmap of 64 KiB) while one large block (4 MiB) of each
 * malloc-family kind lives; then the large blocks are freed. For every large block it prints "mmapped NAME B", B the
 * IS_MMAPPED bit (0x2) of the size word glibc keeps just below the block: the bit the
 * library's free and realloc test to tell its blocks from the rest ("foreign": not printed,
 * the program runs on another malloc whose blocks have no such word). Prints "ok" at the end.
 * "midsize": instead, N rounds of malloc(1 MiB), every page written, free; prints "faults F",
 * the minor page faults of those rounds (getrusage).
 * Usage: fastpath_prog N [foreign | midsize] */
#define _GNU_SOURCE
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

#define LARGE (4u << 20)

static void *keep; /* the compiler must not drop a malloc/free pair */

static int small_round(size_t i) {
    size_t n = 16 + (i % 64) * 16;
    char *p = malloc(n);
    char *q = calloc(4, n);
    if (!p || !q) return -1;
    p[0] = (char)i;
    p = realloc(p, 2 * n); /* a heap block grows, still small */
    if (!p) return -1;
    void *a = NULL;
    if (posix_memalign(&a, 64, n)) return -1;
    void *b = aligned_alloc(64, 64 * (1 + i % 4));
    void *c = memalign(256, n);
    void *d = (i % 64) ? NULL : valloc(4096);
    char *m = (i % 16) ? NULL : mmap(NULL, 64u << 10, PROT_READ | PROT_WRITE,
                                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (!b || !c || m == MAP_FAILED) return -1;
    if (m) {
        m[0] = 1;
        munmap(m, 64u << 10);
    }
    keep = p;
    free(p);
    free(q);
    free(a);
    free(b);
    free(c);
    free(d);
    free(NULL);
    keep = realloc(NULL, n); /* realloc(NULL) is malloc */
    free(keep);
    return 0;
}

/* A block between glibc's default mmap threshold (128 KiB) and the minimum, freed and made
 * again: glibc alone keeps its pages (its dynamic trim threshold); so must it under the
 * library. */
static int midsize(long rounds) {
    struct rusage a, b;
    getrusage(RUSAGE_SELF, &a);
    for (long i = 0; i < rounds; i++) {
        char *p = malloc(1u << 20);
        if (!p) return 1;
        for (size_t o = 0; o < (1u << 20); o += 4096) p[o] = (char)i;
        keep = p;
        free(p);
    }
    getrusage(RUSAGE_SELF, &b);
    printf("faults %ld\nok\n", b.ru_minflt - a.ru_minflt);
    return 0;
}

static int bit(const void *p) { return (((const size_t *)p)[-1] & 0x2) != 0; }

int main(int argc, char **argv) {
    if (argc != 2 && !(argc == 3 && (!strcmp(argv[2], "foreign") ||
                                     !strcmp(argv[2], "midsize")))) {
        fprintf(stderr, "usage: fastpath_prog N [foreign | midsize]\n");
        return 2;
    }
    long rounds = atol(argv[1]);
    if (argc == 3 && !strcmp(argv[2], "midsize")) return midsize(rounds);
    void *big[7];
    const char *name[7] = {"malloc", "calloc", "posix_memalign", "aligned_alloc", "memalign",
                           "valloc", "realloc"};
    big[0] = malloc(LARGE);
    big[1] = calloc(1, LARGE);
    if (posix_memalign(&big[2], 64, LARGE)) big[2] = NULL;
    big[3] = aligned_alloc(4096, LARGE);
    big[4] = memalign(1u << 16, LARGE);
    big[5] = valloc(LARGE);
    char *grow = malloc(1000); /* a heap block that grows past the minimum */
    if (grow) memset(grow, 7, 1000);
    big[6] = grow ? realloc(grow, LARGE) : NULL;
    for (int i = 0; i < 7; i++) {
        if (!big[i]) {
            fprintf(stderr, "%s of %u bytes failed\n", name[i], LARGE);
            return 1;
        }
        memset(big[i], 1, LARGE);
        if (argc == 2) printf("mmapped %s %d\n", name[i], bit(big[i]));
    }
    /* the small rounds while the large blocks live: the registry holds their records, and a
     * small munmap must still pass without the lock (it touches none of them) */
    for (long i = 0; i < rounds; i++)
        if (small_round((size_t)i) < 0) {
            perror("small round");
            return 1;
        }
    for (int i = 0; i < 7; i++) free(big[i]);
    printf("ok\n");
    return 0;
}
