/* adam_lib_ab.c — two builds of libcxlkit's AdamW kernel side by side in one process: each
 * library (dlopen, RTLD_LOCAL: each keeps its own kernels and its own CXLKIT_SIMD choice)
 * runs the step and its traffic kernel (CXK_ADAM_TRAFFIC, the bound adam_e2e judges a step
 * against) over the same buffers on the calling thread, the four tasks in an order rotated
 * per round, with a read of twice the L3 (untimed) before each task so none pays for the
 * dirty lines of the one before (--no-scrub: none, for sizes that fit a cache). One JSON
 * line per model: medians and ranges of each task,
 * and paired ratios (medians over rounds of ratios of the same round): B's step against A's,
 * each step against its own library's traffic kernel and against A's (a fixed yardstick).
 *
 *   cc -O2 -Iinclude -o /tmp/adam_lib_ab bench/adam_lib_ab.c -ldl
 *   /tmp/adam_lib_ab --a old=/tmp/old/libcxlkit.so --b new=build/c/libcxlkit.so \
 *       --n 10000000 --rounds 21 --models bf16,fp32,fp16
 *
 * Models (as TieredAdamW steps them): bf16 = fp32 master/m/v, bf16 grad, bf16 param re-read
 * and written (RESYNC), 30 B/param; fp16 the same with fp16; fp32 = fp32 grad, no copy,
 * 28 B/param. AdamW with decoupled decay 0.01 and bias correction. The master, m and v sit in
 * huge pages (TieredAdamW's own buffers); the grad and the 16-bit param in 4 KiB pages, as
 * torch allocates them, unless --thp-all. --zero-params: every param and grad zero (a
 * padding row, a param no grad moves), the case the pair path tests again. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "cxlkit.h"

typedef int (*step_fn)(const struct cxk_adam_hparams *, const struct cxk_adam_tensor *, size_t);
typedef int (*simd_fn)(void);

struct lib {
    const char *name;
    step_fn step;
    int simd;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* every mapping of a model, unmapped when the model is done */
static struct { void *raw; size_t len; } maps[16];
static int nmaps;

static void unmap_all(void) {
    for (int i = 0; i < nmaps; i++) munmap(maps[i].raw, maps[i].len);
    nmaps = 0;
}

static void *alloc(size_t nbytes, int thp) {
    const size_t huge = 2u << 20;
    size_t len = (nbytes + huge - 1) / huge * huge + huge;
    unsigned char *raw = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                              -1, 0);
    if (raw == MAP_FAILED) {
        perror("mmap");
        exit(1);
    }
    maps[nmaps].raw = raw;
    maps[nmaps++].len = len;
    unsigned char *p = (unsigned char *)(((uintptr_t)raw + huge - 1) & ~(uintptr_t)(huge - 1));
    if (thp) madvise(p, len - (size_t)(p - raw), MADV_HUGEPAGE);
    else madvise(p, len - (size_t)(p - raw), MADV_NOHUGEPAGE);
    memset(p, 0, nbytes);
    return p;
}

static struct lib open_lib(const char *spec) {
    struct lib l;
    const char *eq = strchr(spec, '=');
    if (!eq) {
        fprintf(stderr, "--a/--b want NAME=PATH, got %s\n", spec);
        exit(2);
    }
    l.name = strndup(spec, (size_t)(eq - spec));
    void *h = dlopen(eq + 1, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "dlopen %s: %s\n", eq + 1, dlerror());
        exit(2);
    }
    l.step = (step_fn)dlsym(h, "cxk_adam_step");
    simd_fn simd = (simd_fn)dlsym(h, "cxk_adam_simd");
    if (!l.step || !simd) {
        fprintf(stderr, "%s: no cxk_adam_step / cxk_adam_simd\n", eq + 1);
        exit(2);
    }
    l.simd = simd();
    return l;
}

static uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(const double *x, int n) {
    double *t = malloc(sizeof(double) * (size_t)n);
    memcpy(t, x, sizeof(double) * (size_t)n);
    qsort(t, (size_t)n, sizeof(double), cmp_d);
    double r = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
    free(t);
    return r;
}

static double minv(const double *x, int n) {
    double r = x[0];
    for (int i = 1; i < n; i++) r = x[i] < r ? x[i] : r;
    return r;
}

static double maxv(const double *x, int n) {
    double r = x[0];
    for (int i = 1; i < n; i++) r = x[i] > r ? x[i] : r;
    return r;
}

/* tasks: 0 A step, 1 A traffic, 2 B step, 3 B traffic */
static void run_model(const char *model, struct lib *libs, uint64_t n, int rounds, int thp_all,
                      int zero, volatile unsigned char *scrub, size_t scrub_n) {
    const int half = strcmp(model, "fp32") != 0;
    const int gdt = !half ? CXK_DTYPE_F32 : !strcmp(model, "bf16") ? CXK_DTYPE_BF16
                                                                    : CXK_DTYPE_F16;
    float *p = alloc(n * 4, 1), *m = alloc(n * 4, 1), *v = alloc(n * 4, 1);
    void *g = alloc(n * (half ? 2 : 4), thp_all);
    uint16_t *c = half ? alloc(n * 2, thp_all) : NULL;
    uint32_t s = 12345;
    for (uint64_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        float x = (float)((int32_t)(s >> 8) - (1 << 23)) / (float)(1 << 23);
        p[i] = zero ? 0.0f : 0.02f * x;
        float gx = zero ? 0.0f : 1e-3f * x * (i % 7 ? 1.0f : -0.5f);
        if (!half) ((float *)g)[i] = gx;
        else if (gdt == CXK_DTYPE_BF16) ((uint16_t *)g)[i] = to_bf16(gx);
        else ((_Float16 *)g)[i] = (_Float16)gx;
    }
    if (half) {  /* the copy is the master's rounding: nothing to re-read */
        for (uint64_t i = 0; i < n; i++) {
            if (gdt == CXK_DTYPE_BF16) c[i] = to_bf16(p[i]);
            else { _Float16 h = (_Float16)p[i]; memcpy(&c[i], &h, 2); }
        }
    }
    struct cxk_adam_tensor t = {p, m, v, g, c, n, gdt, half ? gdt : CXK_DTYPE_NONE};
    struct cxk_adam_hparams h = {1e-4, 0.9, 0.999, 1e-8, 0.01, 1.0, 1,
                                 CXK_ADAM_DECOUPLED | CXK_ADAM_BIAS_CORRECTION |
                                     (half ? CXK_ADAM_RESYNC : 0u),
                                 CXK_SIMD_AUTO};
    struct cxk_adam_hparams ht = h;
    ht.flags |= CXK_ADAM_TRAFFIC;
    double *tm[4];
    for (int k = 0; k < 4; k++) tm[k] = calloc((size_t)rounds, sizeof(double));
    int64_t step = 1;
    for (int k = 0; k < 4; k++) {  /* warm-up: page the buffers in, resolve the level */
        h.step = step++;
        if (libs[k / 2].step(k % 2 ? &ht : &h, &t, 1)) {
            fprintf(stderr, "step failed\n");
            exit(1);
        }
    }
    unsigned sink = 0;
    for (int r = 0; r < rounds; r++) {
        for (int j = 0; j < 4; j++) {
            int k = (r + j) % 4;
            for (size_t i = 0; i < scrub_n; i += 64) sink += scrub[i];
            h.step = step++;
            double t0 = now_s();
            int rc = libs[k / 2].step(k % 2 ? &ht : &h, &t, 1);
            tm[k][r] = now_s() - t0;
            if (rc) { fprintf(stderr, "step failed: %d\n", rc); exit(1); }
        }
    }
    const char *tn[4] = {"a_step", "a_traffic", "b_step", "b_traffic"};
    double bpp = half ? 30.0 : 28.0, ld[3];
    getloadavg(ld, 3);
    printf("{\"model\": \"%s\", \"params\": %llu, \"rounds\": %d, \"a\": \"%s\", \"b\": \"%s\", "
           "\"simd\": [%d, %d], \"thp_all\": %s, \"zero_params\": %s, \"sink\": %u, ",
           model, (unsigned long long)n, rounds, libs[0].name, libs[1].name, libs[0].simd,
           libs[1].simd, thp_all ? "true" : "false", zero ? "true" : "false", sink & 1u);
    for (int k = 0; k < 4; k++)
        printf("\"%s_ms\": %.3f, \"%s_ms_min\": %.3f, \"%s_ms_max\": %.3f, \"%s_gbs\": %.2f, ",
               tn[k], 1e3 * median(tm[k], rounds), tn[k], 1e3 * minv(tm[k], rounds), tn[k],
               1e3 * maxv(tm[k], rounds), tn[k], bpp * (double)n / median(tm[k], rounds) / 1e9);
    double *q = calloc((size_t)rounds, sizeof(double));
    /* speedup of B's step over A's; each step's % of its own and of A's traffic kernel */
    struct { const char *name; int num, den; } pr[] = {
        {"b_over_a_step", 0, 2}, {"b_over_a_traffic", 1, 3}, {"a_pct_of_a_traffic", 1, 0},
        {"b_pct_of_b_traffic", 3, 2}, {"b_pct_of_a_traffic", 1, 2}};
    for (size_t k = 0; k < sizeof pr / sizeof pr[0]; k++) {
        for (int r = 0; r < rounds; r++) q[r] = tm[pr[k].num][r] / tm[pr[k].den][r];
        double scale = strstr(pr[k].name, "pct") ? 100.0 : 1.0;
        printf("\"%s\": %.4f, ", pr[k].name, scale * median(q, rounds));
    }
    printf("\"loadavg_1m\": %.2f}\n", ld[0]);
    fflush(stdout);
    free(q);
    for (int k = 0; k < 4; k++) free(tm[k]);
    unmap_all();
}

int main(int argc, char **argv) {
    const char *a = NULL, *b = NULL, *models = "bf16,fp32";
    uint64_t n = 10000000;
    int rounds = 21, thp_all = 0, zero = 0;
    size_t scrub_n = 64u << 20; /* twice the 32 MiB L3; --no-scrub: the data stays cached */
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--a") && i + 1 < argc) a = argv[++i];
        else if (!strcmp(argv[i], "--b") && i + 1 < argc) b = argv[++i];
        else if (!strcmp(argv[i], "--n") && i + 1 < argc) n = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--models") && i + 1 < argc) models = argv[++i];
        else if (!strcmp(argv[i], "--thp-all")) thp_all = 1;
        else if (!strcmp(argv[i], "--no-scrub")) scrub_n = 0;
        else if (!strcmp(argv[i], "--zero-params")) zero = 1;
        else {
            fprintf(stderr, "usage: %s --a NAME=LIB --b NAME=LIB [--n N] [--rounds R] "
                            "[--models bf16,fp32,fp16] [--thp-all] [--no-scrub] "
                            "[--zero-params]\n", argv[0]);
            return 2;
        }
    }
    if (!a || !b || n == 0 || rounds < 1) {
        fprintf(stderr, "--a and --b are required; --n and --rounds positive\n");
        return 2;
    }
    struct lib libs[2] = {open_lib(a), open_lib(b)};
    volatile unsigned char *scrub = alloc(64u << 20, 1);
    nmaps = 0;  /* the scrub buffer lives as long as the process */
    char *list = strdup(models);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        if (strcmp(tok, "bf16") && strcmp(tok, "fp16") && strcmp(tok, "fp32")) {
            fprintf(stderr, "--models: %s is not bf16, fp16 or fp32\n", tok);
            return 2;
        }
        run_model(tok, libs, n, rounds, thp_all, zero, scrub, scrub_n);
    }
    free(list);
    return 0;
}
