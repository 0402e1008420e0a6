/* alloc_prog.c — an ordinary C program (it knows nothing of cxlkit) that the preload tests
 * run under libcxlkit_preload.so. Each argument is one step:
 *   mmap:SIZE  malloc:SIZE  calloc:SIZE  memalign:SIZE  realloc:SIZE (grows the last block)
 *   reallocarray:SIZE (the same through reallocarray)
 *   hole:SIZE (unmap SIZE bytes at offset SIZE of the last block: it stays reported whole)
 *   adjacent:SIZE (two mappings of SIZE side by side: MAP_FIXED into one reserved range;
 *     the kernel shows them as one VMA when their edge chunks share a node)
 *   fork (the child touches its copy of every block, reports and waits too)  free (all)
 * Every block is touched whole; then one line per block "NAME ADDR SIZE" on stdout, "ready",
 * and the program waits for a line on stdin (the test reads /proc/PID/numa_maps meanwhile);
 * after a fork parent and child each report and wait, the parent then reaps the child. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <malloc.h>

#define MAXB 64
static struct { const char *name; char *p; size_t n; int mapped; } b[MAXB];
static int nb;

static size_t size_of(const char *s) {
    char *end;
    size_t v = strtoull(s, &end, 10);
    if (*end == 'K') v <<= 10;
    else if (*end == 'M') v <<= 20;
    return v;
}

static void report(const char *who) {
    for (int i = 0; i < nb; i++)
        if (b[i].p) printf("%s %s %p %zu\n", who, b[i].name, (void *)b[i].p, b[i].n);
    printf("%s ready %d\n", who, (int)getpid());
    fflush(stdout);
}

/* One byte from stdin, unbuffered: parent and child share the pipe, one newline each. */
static void wait_line(void) {
    char c;
    while (read(0, &c, 1) == 1 && c != '\n') {}
}

int main(int argc, char **argv) {
    int forked = 0;
    pid_t child = -1;
    for (int a = 1; a < argc; a++) {
        char *arg = argv[a], *colon = strchr(arg, ':');
        size_t n = colon ? size_of(colon + 1) : 0;
        if (nb == MAXB) return 2;
        if (!strncmp(arg, "mmap:", 5)) {
            char *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (p == MAP_FAILED) { perror("mmap"); return 1; }
            b[nb++] = (typeof(b[0])){"mmap", p, n, 1};
        } else if (!strncmp(arg, "malloc:", 7)) {
            b[nb++] = (typeof(b[0])){"malloc", malloc(n), n, 0};
        } else if (!strncmp(arg, "calloc:", 7)) {
            b[nb++] = (typeof(b[0])){"calloc", calloc(1, n), n, 0};
        } else if (!strncmp(arg, "memalign:", 9)) {
            b[nb++] = (typeof(b[0])){"memalign", memalign(1 << 16, n), n, 0};
        } else if (!strncmp(arg, "realloc:", 8) && nb) {
            b[nb - 1].p = realloc(b[nb - 1].p, n);
            b[nb - 1].n = n;
            b[nb - 1].name = "realloc";
        } else if (!strncmp(arg, "reallocarray:", 13) && nb) {
            b[nb - 1].p = reallocarray(b[nb - 1].p, n / 4096, 4096);
            b[nb - 1].n = n;
            b[nb - 1].name = "reallocarray";
        } else if (!strncmp(arg, "adjacent:", 9) && nb + 1 < MAXB) {
            char *r = mmap(NULL, 2 * n, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (r == MAP_FAILED) { perror("mmap"); return 1; }
            for (int h = 0; h < 2; h++) {
                char *p = mmap(r + h * n, n, PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
                if (p == MAP_FAILED) { perror("mmap fixed"); return 1; }
                b[nb++] = (typeof(b[0])){"adjacent", p, n, 1};
                memset(p, 0x5a, n);
            }
            continue;
        } else if (!strncmp(arg, "hole:", 5) && nb && b[nb - 1].n > 2 * n) {
            if (munmap(b[nb - 1].p + n, n)) { perror("munmap"); return 1; }
            continue;
        } else if (!strcmp(arg, "fork")) {
            forked = 1;
        } else if (!strcmp(arg, "free")) {
            for (int i = 0; i < nb; i++) {
                if (b[i].mapped) munmap(b[i].p, b[i].n); else free(b[i].p);
                b[i].p = NULL;
            }
            continue;
        } else {
            fprintf(stderr, "alloc_prog: unknown step %s\n", arg);
            return 2;
        }
        if (!b[nb - 1].p) { fprintf(stderr, "alloc_prog: %s failed\n", arg); return 1; }
        memset(b[nb - 1].p, 0x5a, b[nb - 1].n);  /* first touch, after placement */
    }
    if (forked) {
        child = fork();
        if (child == 0) {
            for (int i = 0; i < nb; i++) if (b[i].p) memset(b[i].p, 0x33, b[i].n);
            char *p = malloc(3u << 20);  /* a block of the child's own */
            if (!p) return 1;
            memset(p, 1, 3u << 20);
            b[nb++] = (typeof(b[0])){"child-malloc", p, 3u << 20, 0};
            report("child");
            wait_line();
            return 0;
        }
    }
    report("parent");
    wait_line();
    if (child > 0) {
        int st;
        if (waitpid(child, &st, 0) != child || !WIFEXITED(st) || WEXITSTATUS(st)) return 1;
    }
    return 0;
}
