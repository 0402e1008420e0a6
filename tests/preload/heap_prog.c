/* heap_prog.c — how glibc's malloc serves and gives back one block of KIB KiB under the
 * environment it runs in: whether the block is its own mapping (the IS_MMAPPED bit of its
 * chunk header) and whether freeing it trimmed the heap (the program break fell). Tells the
 * malloc settings of libcxlkit_preload.so (M_MMAP_THRESHOLD, M_TRIM_THRESHOLD) apart from
 * glibc's defaults without reading glibc's internals (tests/placement/test_preload.py).
 * Prints "mmapped M trimmed T". Usage: heap_prog KIB */
#define _DEFAULT_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 2 || atol(argv[1]) < 1) {
        fprintf(stderr, "usage: heap_prog KIB\n");
        return 2;
    }
    size_t n = (size_t)atol(argv[1]) << 10;
    char *p = malloc(n);
    if (!p) return 1;
    memset(p, 1, n); /* used, as a program would */
    int mapped = (((size_t *)p)[-1] & 0x2) != 0;
    char *top = sbrk(0);
    free(p);
    printf("mmapped %d trimmed %d\n", mapped, (char *)sbrk(0) < top);
    return 0;
}
