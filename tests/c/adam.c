/* adam.c — the Adam C ABI from C: every SIMD level gives the scalar level's bits on odd
 * lengths and unaligned starts (fp32/bf16/fp16 grads, each copy dtype, NT stores), bad input
 * is -EINVAL, a team updates every element and reports where its chunks went, and a failing
 * node query leaves everything untouched; RESYNC re-reads exactly the copy elements that are
 * not the master's rounding and the _ex calls count them; an OpenMP team needs a loaded
 * runtime (-ENOENT here: this program loads none); TRAFFIC writes every array back unchanged.
 * Every level runs every combination of the per-step flags (maximize; no decay, L2, decoupled,
 * decoupled by 0), each its own compiled loop. */
#include <errno.h>
#include <math.h>
#include <stdint.h>

#include "adam_util.h"
#include "check.h"
#include "cxlkit.h"

#define N 1003

struct state {
    float p[N + 16], m[N + 16], v[N + 16], g32[N + 16];
    uint16_t g16[N + 16], copy[N + 16];
    float copy32[N + 16];
};

static void fill(struct state *s) {
    uint32_t seed = 12345;
    for (int i = 0; i < N + 16; ++i) {
        s->p[i] = rnd(&seed);
        s->m[i] = rnd(&seed) * 0.1f;
        s->v[i] = fabsf(rnd(&seed)) * 0.01f;
        s->g32[i] = rnd(&seed);
        s->g16[i] = to_bf16(s->g32[i]);
        s->copy[i] = 0;
        s->copy32[i] = 0;
    }
}

static struct cxk_adam_tensor tensor_of(struct state *s, int off, int gdt, int cdt) {
    return adam_tensor(s->p + off, s->m + off, s->v + off, s->g32 + off, s->g16 + off,
                       s->copy32 + off, s->copy + off, gdt, cdt, N);
}

static struct state ref, got;

int main(void) {
    struct cxk_adam_hparams h;
    memset(&h, 0, sizeof h);
    h.lr = 1e-3, h.beta1 = 0.9, h.beta2 = 0.999, h.eps = 1e-8, h.weight_decay = 0.01;
    h.grad_scale = 0.5, h.step = 3, h.flags = CXK_ADAM_DECOUPLED | CXK_ADAM_BIAS_CORRECTION;

    const int levels[] = {CXK_SIMD_AVX2, CXK_SIMD_AVX512, CXK_SIMD_AVX512BF16};
    /* (flags, weight_decay) of each decay kind; each with and without MAXIMIZE below */
    const unsigned mode_flags[] = {0, 0, CXK_ADAM_DECOUPLED, CXK_ADAM_DECOUPLED};
    const double mode_wd[] = {0.0, 0.01, 0.01, 0.0};
    const int gdts[] = {CXK_DTYPE_F32, CXK_DTYPE_BF16, CXK_DTYPE_F16};
    const int cdts[] = {CXK_DTYPE_NONE, CXK_DTYPE_F32, CXK_DTYPE_BF16, CXK_DTYPE_F16};
    int ran = 0;
    for (int lm = 0; lm < 3 * 8; ++lm) {
        const int li = lm / 8, mi = lm % 8;  /* level, mode */
        for (int gi = 0; gi < 3; ++gi)
            for (int ci = 0; ci < 4; ++ci)
                for (int off = 0; off < 3; ++off)  /* off > 0: unaligned start */
                    for (unsigned extra = 0; extra <= (CXK_ADAM_NT_STATE | CXK_ADAM_NT_COPY);
                         extra += CXK_ADAM_NT_STATE | CXK_ADAM_NT_COPY) {
                        fill(&ref);
                        fill(&got);
                        struct cxk_adam_tensor a = tensor_of(&ref, off, gdts[gi], cdts[ci]);
                        struct cxk_adam_tensor b = tensor_of(&got, off, gdts[gi], cdts[ci]);
                        h.simd = CXK_SIMD_SCALAR;
                        h.flags = mode_flags[mi % 4] | CXK_ADAM_BIAS_CORRECTION |
                                  (mi >= 4 ? CXK_ADAM_MAXIMIZE : 0u);
                        h.weight_decay = mode_wd[mi % 4];
                        CHECK_EQ(cxk_adam_step(&h, &a, 1), 0);
                        h.simd = levels[li];
                        h.flags |= extra;
                        int r = cxk_adam_step(&h, &b, 1);
                        if (r == -ENOTSUP) continue;  /* this CPU lacks the level */
                        CHECK_EQ(r, 0);
                        ++ran;
                        CHECK(memcmp(&ref, &got, sizeof ref) == 0);
                    }
    }
    if (ran == 0) fprintf(stderr, "note: no SIMD level on this CPU; scalar only\n");
    h.flags = CXK_ADAM_DECOUPLED | CXK_ADAM_BIAS_CORRECTION, h.weight_decay = 0.01;

    /* bad input: -EINVAL, nothing written */
    fill(&got);
    struct cxk_adam_tensor t = tensor_of(&got, 0, CXK_DTYPE_F32, CXK_DTYPE_NONE);
    h.simd = CXK_SIMD_AUTO;
    h.flags = CXK_ADAM_DECOUPLED | CXK_ADAM_BIAS_CORRECTION;
    struct cxk_adam_hparams bad = h;
    bad.beta1 = 1.0;
    CHECK_EQ(cxk_adam_step(&bad, &t, 1), -EINVAL);
    bad = h, bad.lr = NAN;
    CHECK_EQ(cxk_adam_step(&bad, &t, 1), -EINVAL);
    bad = h, bad.step = 0;
    CHECK_EQ(cxk_adam_step(&bad, &t, 1), -EINVAL);
    bad = h, bad.flags = 1u << 20;
    CHECK_EQ(cxk_adam_step(&bad, &t, 1), -EINVAL);
    bad = h, bad.simd = 9;
    CHECK_EQ(cxk_adam_step(&bad, &t, 1), -EINVAL);
    struct cxk_adam_tensor tb = t;
    tb.grad_dtype = 7;
    CHECK_EQ(cxk_adam_step(&h, &tb, 1), -EINVAL);
    tb = t, tb.copy_dtype = CXK_DTYPE_BF16;  /* dtype without a pointer */
    CHECK_EQ(cxk_adam_step(&h, &tb, 1), -EINVAL);
    tb = t, tb.exp_avg = NULL;
    CHECK_EQ(cxk_adam_step(&h, &tb, 1), -EINVAL);
    struct state fresh;
    fill(&fresh);
    CHECK(memcmp(&fresh, &got, sizeof got) == 0);
    CHECK(strcmp(cxk_simd_name(CXK_SIMD_AVX512), "avx512") == 0);
    CHECK(strcmp(cxk_simd_name(CXK_SIMD_AVX512BF16), "avx512bf16") == 0);
    CHECK(cxk_adam_simd() >= CXK_SIMD_SCALAR);

    /* a team of 2 threads on the first memory node gives the single-thread bits */
    struct cxk_adam_team_opts o;
    memset(&o, 0, sizeof o);
    o.chunk_bytes = 256;  /* many chunks for N elements */
    o.pin = 1;
    cxk_adam_team *team = NULL;
    CHECK_EQ(cxk_adam_team_create(NULL, &team), 0);  /* defaults: every memory node */
    uint32_t nteams = 0;
    CHECK_EQ(cxk_adam_team_info(team, 0, NULL, NULL, NULL, NULL, &nteams), 0);
    CHECK(nteams >= 1);
    int32_t node0;
    CHECK_EQ(cxk_adam_team_info(team, 1, &node0, NULL, NULL, NULL, &nteams), 0);
    cxk_adam_team_destroy(team);
    o.nnodes = 1, o.nodes[0] = node0, o.threads[0] = 2;
    CHECK_EQ(cxk_adam_team_create(&o, &team), 0);
    fill(&ref);
    fill(&got);
    struct cxk_adam_tensor a = tensor_of(&ref, 1, CXK_DTYPE_BF16, CXK_DTYPE_BF16);
    struct cxk_adam_tensor b = tensor_of(&got, 1, CXK_DTYPE_BF16, CXK_DTYPE_BF16);
    CHECK_EQ(cxk_adam_step(&h, &a, 1), 0);
    CHECK_EQ(cxk_adam_team_step(team, &h, &b, 1), 0);
    CHECK(memcmp(&ref, &got, sizeof ref) == 0);
    uint32_t threads;
    uint64_t chunks;
    int32_t cpu;
    CHECK_EQ(cxk_adam_team_info(team, 1, NULL, &threads, &cpu, &chunks, &nteams), 0);
    CHECK_EQ(threads, 2);
    CHECK(cpu >= 0);
    CHECK(chunks >= (N * 4) / 256);

    /* the node query failing: the error comes back and nothing is written */
    fill(&got);
    CHECK_EQ(cxk_fault_inject("move_pages", 1, EPERM), 0);
    CHECK_EQ(cxk_adam_team_step(team, &h, &b, 1), -EPERM);
    CHECK(memcmp(&fresh, &got, sizeof got) == 0);
    cxk_adam_team_destroy(team);

    /* bad team options */
    o.nnodes = 2, o.nodes[1] = node0;  /* repeated node */
    CHECK_EQ(cxk_adam_team_create(&o, &team), -EINVAL);
    o.nnodes = 1, o.chunk_bytes = 100;
    CHECK_EQ(cxk_adam_team_create(&o, &team), -EINVAL);
    CHECK_EQ(cxk_adam_team_step(NULL, &h, &b, 1), -EINVAL);

    /* RESYNC: after a step the bf16 copy is the master's rounding; overwrite 3 elements and
     * the next step re-reads exactly those (counted), the others keep their fp32 masters */
    fill(&got);
    b = tensor_of(&got, 0, CXK_DTYPE_BF16, CXK_DTYPE_BF16);
    struct cxk_adam_hparams hr = h;
    hr.flags |= CXK_ADAM_RESYNC;
    uint64_t resynced = 99;
    for (int i = 0; i < N; ++i) got.copy[i] = to_bf16(got.p[i]);
    CHECK_EQ(cxk_adam_step_ex(&hr, &b, 1, &resynced), 0);
    CHECK_EQ(resynced, 0);
    got.copy[0] = to_bf16(5.0f), got.copy[500] = to_bf16(-3.0f), got.copy[N - 1] = 0x4000;
    memcpy(&ref, &got, sizeof ref);
    ref.p[0] = 5.0f, ref.p[500] = -3.0f, ref.p[N - 1] = 2.0f;  /* what the re-read gives */
    a = tensor_of(&ref, 0, CXK_DTYPE_BF16, CXK_DTYPE_BF16);
    hr.step = h.step = 2;
    CHECK_EQ(cxk_adam_step_ex(&hr, &b, 1, &resynced), 0);
    CHECK_EQ(resynced, 3);
    CHECK_EQ(cxk_adam_step(&h, &a, 1), 0);
    CHECK(memcmp(&ref, &got, sizeof ref) == 0);
    CHECK_EQ(cxk_adam_step_ex(&hr, &b, 1, NULL), 0);  /* the count is optional */

    /* TRAFFIC (the benchmarks' bound): every level reads and writes the arrays back bit for
     * bit, a copy that is not the master's rounding included, and counts nothing */
    for (int level = CXK_SIMD_SCALAR; level <= CXK_SIMD_AVX512BF16; ++level) {
        struct cxk_adam_hparams ht = hr;
        ht.flags |= CXK_ADAM_TRAFFIC, ht.simd = level;
        fill(&got);
        got.copy[7] = 0x4000, got.m[8] = -0.0f;
        memcpy(&ref, &got, sizeof ref);
        resynced = 99;
        int r = cxk_adam_step_ex(&ht, &b, 1, &resynced);
        if (r == -ENOTSUP) continue;  /* this CPU lacks the level */
        CHECK_EQ(r, 0);
        CHECK_EQ(resynced, 0);
        CHECK(memcmp(&ref, &got, sizeof ref) == 0);
    }

    /* an OpenMP team: this program has no OpenMP runtime loaded, and none is loaded for it */
    CHECK_EQ(cxk_adam_team_create_omp(NULL, 2, 0, &team), -ENOENT);
    CHECK(team == NULL);
    CHECK_EQ(cxk_adam_team_create_omp("libgomp", 2000, 0, &team), -EINVAL);
    CHECK_EQ(cxk_adam_team_create_omp(NULL, 2, 100, &team), -EINVAL);
    CHECK_EQ(cxk_adam_team_create_omp(NULL, 2, 0, NULL), -EINVAL);
    CHECK_EQ(cxk_adam_team_step_ex(NULL, &hr, &b, 1, &resynced), -EINVAL);
    return 0;
}
