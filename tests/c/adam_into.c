/* adam_into.c — cxk_adam_step_into from C: at every SIMD level, for every grad and copy dtype,
 * each decay mode, with and without MAXIMIZE, NT stores and RESYNC, on unaligned starts and an
 * odd length, the out-of-place step writes the bits the in-place step writes and leaves its
 * inputs untouched; out == in is the in-place step; a team gives the same bits; an output that
 * partly overlaps an input, another output, the grad or the copy, a NULL or misaligned output
 * and a NULL out list are -EINVAL with nothing written; checksum parts folded in any order
 * finish to cxk_kv_checksum, and the folded step's parts are its images' sums. */
#include <errno.h>
#include <math.h>
#include <stdint.h>

#include "adam_util.h"
#include "check.h"
#include "cxlkit.h"

#define N 1003
#define PAD 32

/* the inputs and the copy, plus a separate output area */
struct state {
    float p[N + PAD], m[N + PAD], v[N + PAD], g32[N + PAD];
    uint16_t g16[N + PAD], copy[N + PAD];
    float copy32[N + PAD];
    float po[N + PAD], mo[N + PAD], vo[N + PAD];
};

static void fill(struct state *s) {
    uint32_t seed = 777;
    for (int i = 0; i < N + PAD; ++i) {
        s->p[i] = rnd(&seed);
        s->m[i] = rnd(&seed) * 0.1f;
        s->v[i] = fabsf(rnd(&seed)) * 0.01f;
        s->g32[i] = rnd(&seed);
        s->g16[i] = to_bf16(s->g32[i]);
        /* every 7th copy element differs from the master's rounding: RESYNC re-reads those */
        s->copy[i] = (i % 7) ? to_bf16(s->p[i]) : to_bf16(s->p[i] + 0.25f);
        s->copy32[i] = (i % 7) ? s->p[i] : s->p[i] + 0.25f;
        s->po[i] = s->mo[i] = s->vo[i] = -1.0f;
    }
}

static struct cxk_adam_tensor tensor_of(struct state *s, int off, int gdt, int cdt) {
    return adam_tensor(s->p + off, s->m + off, s->v + off, s->g32 + off, s->g16 + off,
                       s->copy32 + off, s->copy + off, gdt, cdt, N);
}

static struct state ref, got, orig;

/* got's outputs (at off_out) hold ref's updated arrays (at off_in), its inputs are orig's,
 * its copy is ref's */
static void check_into(int off_in, int off_out) {
    CHECK(memcmp(got.po + off_out, ref.p + off_in, N * 4) == 0);
    CHECK(memcmp(got.mo + off_out, ref.m + off_in, N * 4) == 0);
    CHECK(memcmp(got.vo + off_out, ref.v + off_in, N * 4) == 0);
    CHECK(memcmp(got.p, orig.p, sizeof got.p) == 0);
    CHECK(memcmp(got.m, orig.m, sizeof got.m) == 0);
    CHECK(memcmp(got.v, orig.v, sizeof got.v) == 0);
    CHECK(memcmp(got.copy, ref.copy, sizeof got.copy) == 0);
    CHECK(memcmp(got.copy32, ref.copy32, sizeof got.copy32) == 0);
}

int main(void) {
    struct cxk_adam_hparams h;
    memset(&h, 0, sizeof h);
    h.lr = 1e-3, h.beta1 = 0.9, h.beta2 = 0.999, h.eps = 1e-8, h.weight_decay = 0.01;
    h.grad_scale = 0.5, h.step = 3;
    const int levels[] = {CXK_SIMD_SCALAR, CXK_SIMD_AVX2, CXK_SIMD_AVX512, CXK_SIMD_AVX512BF16};
    const unsigned modes[] = {0, CXK_ADAM_DECOUPLED, CXK_ADAM_MAXIMIZE | CXK_ADAM_DECOUPLED,
                              CXK_ADAM_NT_STATE | CXK_ADAM_NT_COPY | CXK_ADAM_DECOUPLED,
                              CXK_ADAM_RESYNC | CXK_ADAM_DECOUPLED};
    const int gdts[] = {CXK_DTYPE_F32, CXK_DTYPE_BF16, CXK_DTYPE_F16};
    const int cdts[] = {CXK_DTYPE_NONE, CXK_DTYPE_F32, CXK_DTYPE_BF16, CXK_DTYPE_F16};
    int ran = 0;
    for (int li = 0; li < 4; ++li) {
        h.simd = levels[li];
        for (int mi = 0; mi < 5; ++mi)
            for (int gi = 0; gi < 3; ++gi)
                for (int ci = 0; ci < 4; ++ci) {
                    h.flags = CXK_ADAM_BIAS_CORRECTION | modes[mi];
                    /* an unaligned input start, an output start aligned differently */
                    const int off_in = 3, off_out = 16;
                    fill(&ref);
                    struct cxk_adam_tensor t = tensor_of(&ref, off_in, gdts[gi], cdts[ci]);
                    uint64_t rs_ref = 0, rs_got = 0;
                    int r = cxk_adam_step_ex(&h, &t, 1, &rs_ref);
                    if (r == -ENOTSUP) continue;  /* a level this CPU lacks */
                    CHECK_EQ(r, 0);
                    fill(&got);
                    orig = got;
                    t = tensor_of(&got, off_in, gdts[gi], cdts[ci]);
                    struct cxk_adam_out o = {got.po + off_out, got.mo + off_out,
                                             got.vo + off_out};
                    CHECK_EQ(cxk_adam_step_into(&h, &t, &o, 1, &rs_got), 0);
                    check_into(off_in, off_out);
                    CHECK_EQ(rs_got, rs_ref);
                    if (modes[mi] & CXK_ADAM_RESYNC && cdts[ci] != CXK_DTYPE_NONE)
                        CHECK(rs_got > 0);
                    /* out == in: the in-place step's bits, the same count */
                    fill(&got);
                    t = tensor_of(&got, off_in, gdts[gi], cdts[ci]);
                    struct cxk_adam_out same = {t.param, t.exp_avg, t.exp_avg_sq};
                    CHECK_EQ(cxk_adam_step_into(&h, &t, &same, 1, &rs_got), 0);
                    CHECK_EQ(rs_got, rs_ref);
                    CHECK(memcmp(got.p, ref.p, sizeof got.p) == 0);
                    CHECK(memcmp(got.m, ref.m, sizeof got.m) == 0);
                    CHECK(memcmp(got.v, ref.v, sizeof got.v) == 0);
                    ++ran;
                }
    }
    CHECK(ran >= 2 * 5 * 3 * 4); /* scalar and AVX2 at least */

    /* param in place, the moments out of place: each array on its own */
    h.simd = CXK_SIMD_AUTO;
    h.flags = CXK_ADAM_BIAS_CORRECTION | CXK_ADAM_DECOUPLED;
    fill(&ref);
    struct cxk_adam_tensor t = tensor_of(&ref, 0, CXK_DTYPE_BF16, CXK_DTYPE_BF16);
    CHECK_EQ(cxk_adam_step(&h, &t, 1), 0);
    fill(&got);
    t = tensor_of(&got, 0, CXK_DTYPE_BF16, CXK_DTYPE_BF16);
    struct cxk_adam_out mixed = {got.p, got.mo, got.vo};
    CHECK_EQ(cxk_adam_step_into(&h, &t, &mixed, 1, NULL), 0);
    CHECK(memcmp(got.p, ref.p, N * 4) == 0);
    CHECK(memcmp(got.mo, ref.m, N * 4) == 0);
    CHECK(memcmp(got.vo, ref.v, N * 4) == 0);

    /* a team: the same bits, out of place */
    cxk_adam_team *team = NULL;
    struct cxk_adam_team_opts opts;
    memset(&opts, 0, sizeof opts);
    opts.chunk_bytes = 256;
    CHECK_EQ(cxk_adam_team_create(&opts, &team), 0);
    fill(&got);
    orig = got;
    t = tensor_of(&got, 0, CXK_DTYPE_BF16, CXK_DTYPE_BF16);
    struct cxk_adam_out o = {got.po, got.mo, got.vo};
    CHECK_EQ(cxk_adam_team_step_into(team, &h, &t, &o, 1, NULL), 0);
    check_into(0, 0);
    CHECK_EQ(cxk_adam_team_step_into(NULL, &h, &t, &o, 1, NULL), -EINVAL);
    cxk_adam_team_destroy(team);

    /* bad outputs: -EINVAL, nothing written */
    fill(&got);
    orig = got;
    t = tensor_of(&got, 0, CXK_DTYPE_BF16, CXK_DTYPE_BF16);
    struct cxk_adam_out bad[] = {
        {got.p + 1, got.mo, got.vo},              /* partly over its own input */
        {got.po, got.m, got.vo},                   /* exp_avg in place: allowed */
        {got.po, got.p, got.vo},                   /* exp_avg written over the param input */
        {got.po, got.po + 5, got.vo},              /* two outputs overlap */
        {got.g32, got.mo, got.vo},                 /* an array no input uses: allowed */
        {(float *)got.g16, got.mo, got.vo},        /* over the grad */
        {(float *)got.copy, got.mo, got.vo},       /* over the copy */
        {NULL, got.mo, got.vo},                    /* NULL */
        {(float *)((char *)got.po + 2), got.mo, got.vo}, /* misaligned */
    };
    const int expect_bad[] = {1, 0, 1, 1, 0, 1, 1, 1, 1};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
        int r = cxk_adam_step_into(&h, &t, &bad[i], 1, NULL);
        if (expect_bad[i]) {
            CHECK_EQ(r, -EINVAL);
            CHECK(memcmp(&got, &orig, sizeof got) == 0);
        } else {
            CHECK_EQ(r, 0);
            fill(&got);
            orig = got;
        }
    }
    CHECK_EQ(cxk_adam_step_into(&h, &t, NULL, 1, NULL), -EINVAL);
    CHECK_EQ(cxk_adam_step_into(&h, &t, NULL, 0, NULL), 0);
    CHECK(memcmp(&got, &orig, sizeof got) == 0);

    /* checksum parts: an image (p | m | v of one tensor, N fp32 each) split anywhere on 4
     * bytes, folded in reverse order, finishes to cxk_kv_checksum; the folded step's parts
     * of what it read and wrote are the images' before and after */
    static float img[3 * N], out_img[3 * N];
    uint32_t seed = 99;
    for (int i = 0; i < 3 * N; ++i) img[i] = rnd(&seed) * 0.01f + (i >= 2 * N ? 0.02f : 0.0f);
    struct cxk_sum_parts sp;
    memset(&sp, 0, sizeof sp);
    const uint64_t cuts[] = {0, 4 * 7, 4 * 501, 4 * 2000, sizeof img};
    for (int c = 3; c >= 0; --c)
        CHECK_EQ(cxk_adam_sum_add(&sp, (char *)img + cuts[c], cuts[c], cuts[c + 1] - cuts[c]), 0);
    CHECK(cxk_adam_sum_finish(&sp, sizeof img) == cxk_kv_checksum(img, sizeof img));
    CHECK_EQ(cxk_adam_sum_add(&sp, img, 2, 4), -EINVAL);
    CHECK_EQ(cxk_adam_sum_add(NULL, img, 0, 4), -EINVAL);
    const uint64_t before = cxk_kv_checksum(img, sizeof img);
    struct cxk_adam_tensor it;
    memset(&it, 0, sizeof it);
    it.param = img, it.exp_avg = img + N, it.exp_avg_sq = img + 2 * N;
    it.grad = got.g16, it.grad_dtype = CXK_DTYPE_BF16, it.copy_dtype = CXK_DTYPE_NONE, it.n = N;
    struct cxk_adam_out io = {out_img, out_img + N, out_img + 2 * N};
    const uint64_t offs[3] = {0, 4 * N, 8 * N};
    struct cxk_sum_parts pin, pout;
    memset(&pin, 0, sizeof pin);
    memset(&pout, 0, sizeof pout);
    CHECK_EQ(cxk_adam_step_into_sum(&h, &it, &io, 1, offs, &pin, &pout, NULL), 0);
    CHECK(cxk_adam_sum_finish(&pin, sizeof img) == before);
    CHECK(cxk_adam_sum_finish(&pout, sizeof out_img) == cxk_kv_checksum(out_img, sizeof out_img));
    CHECK_EQ(cxk_adam_step_into_sum(&h, &it, &io, 1, NULL, &pin, &pout, NULL), -EINVAL);
    return 0;
}
