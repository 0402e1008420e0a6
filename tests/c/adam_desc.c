/* adam_desc.c — cxk_adam_run, the descriptor entry point: in place, into other arrays, with the
 * checksums folded in and on a team it writes the bits the old entry points write (they are
 * wrappers over it) and reports the same resynced count; a descriptor shorter than the one this
 * library knows reads its missing fields as zero, a longer one is accepted when its extra bytes
 * are zero and is -E2BIG otherwise; NULL, a size below the minimum, a non-zero reserved field
 * and checksums without out are -EINVAL with nothing written. */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "adam_util.h"
#include "check.h"
#include "cxlkit.h"

#define N 777

struct arrays {
    float p[N], m[N], v[N], g[N], g32[N], copy32[N];
    uint16_t g16[N], copy[N];
    float po[N], mo[N], vo[N];
};

static void fill(struct arrays *a) {
    uint32_t seed = 4242;
    for (int i = 0; i < N; ++i) {
        a->p[i] = rnd(&seed);
        a->m[i] = rnd(&seed) * 0.1f;
        a->v[i] = fabsf(rnd(&seed)) * 0.01f;
        a->g32[i] = rnd(&seed);
        a->g16[i] = to_bf16(a->g32[i]);
        a->copy[i] = (i % 5) ? to_bf16(a->p[i]) : to_bf16(a->p[i] + 0.5f);  /* RESYNC re-reads */
        a->copy32[i] = a->p[i];
        a->po[i] = a->mo[i] = a->vo[i] = -1.0f;
    }
}

static struct cxk_adam_tensor tensor_of(struct arrays *a) {
    return adam_tensor(a->p, a->m, a->v, a->g32, a->g16, a->copy32, a->copy, CXK_DTYPE_BF16,
                       CXK_DTYPE_BF16, N);
}

static struct arrays ref, got;

static int same(const struct arrays *x, const struct arrays *y) {
    return memcmp(x, y, sizeof *x) == 0;
}

static struct cxk_adam_step_desc desc_of(const struct cxk_adam_hparams *h,
                                         const struct cxk_adam_tensor *t) {
    struct cxk_adam_step_desc d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    d.hparams = h;
    d.tensors = t;
    d.ntensors = 1;
    return d;
}

int main(void) {
    struct cxk_adam_hparams h;
    memset(&h, 0, sizeof h);
    h.lr = 1e-3, h.beta1 = 0.9, h.beta2 = 0.999, h.eps = 1e-8, h.weight_decay = 0.01;
    h.grad_scale = 1.0, h.step = 2;
    h.flags = CXK_ADAM_BIAS_CORRECTION | CXK_ADAM_DECOUPLED | CXK_ADAM_RESYNC;

    /* in place: the bits and the resynced count of cxk_adam_step_ex */
    fill(&ref), fill(&got);
    struct cxk_adam_tensor tr = tensor_of(&ref), tg = tensor_of(&got);
    uint64_t resynced_ref = 0;
    CHECK_EQ(cxk_adam_step_ex(&h, &tr, 1, &resynced_ref), 0);
    struct cxk_adam_step_desc d = desc_of(&h, &tg);
    d.resynced = 12345;
    CHECK_EQ(cxk_adam_run(&d), 0);
    CHECK(same(&ref, &got));
    CHECK(resynced_ref > 0);
    CHECK_EQ(d.resynced, resynced_ref);

    /* into other arrays, checksums folded: the bits and parts of cxk_adam_step_into_sum */
    fill(&ref), fill(&got);
    tr = tensor_of(&ref), tg = tensor_of(&got);
    struct cxk_adam_out or = {ref.po, ref.mo, ref.vo}, og = {got.po, got.mo, got.vo};
    const uint64_t offs[3] = {0, 4 * N, 8 * N};
    struct cxk_sum_parts in_r, out_r, in_g, out_g;
    memset(&in_r, 0, sizeof in_r), memset(&out_r, 0, sizeof out_r);
    memset(&in_g, 0, sizeof in_g), memset(&out_g, 0, sizeof out_g);
    CHECK_EQ(cxk_adam_step_into_sum(&h, &tr, &or, 1, offs, &in_r, &out_r, NULL), 0);
    d = desc_of(&h, &tg);
    d.out = &og, d.img_off = offs, d.in_sum = &in_g, d.out_sum = &out_g;
    CHECK_EQ(cxk_adam_run(&d), 0);
    CHECK(same(&ref, &got));
    CHECK(memcmp(&in_r, &in_g, sizeof in_r) == 0 && memcmp(&out_r, &out_g, sizeof out_r) == 0);

    /* on a team: the bits of the calling thread's step */
    cxk_adam_team *team = NULL;
    CHECK_EQ(cxk_adam_team_create(NULL, &team), 0);
    fill(&ref), fill(&got);
    tr = tensor_of(&ref), tg = tensor_of(&got);
    CHECK_EQ(cxk_adam_step(&h, &tr, 1), 0);
    d = desc_of(&h, &tg);
    d.team = team;
    CHECK_EQ(cxk_adam_run(&d), 0);
    CHECK(same(&ref, &got));
    cxk_adam_team_destroy(team);

    /* an older caller's shorter descriptor: the fields it lacks read as zero (in place) */
    fill(&ref), fill(&got);
    tr = tensor_of(&ref), tg = tensor_of(&got);
    CHECK_EQ(cxk_adam_step(&h, &tr, 1), 0);
    d = desc_of(&h, &tg);
    d.struct_size = CXK_ADAM_STEP_DESC_MIN;
    d.out = (const struct cxk_adam_out *)&og;  /* past the caller's size: must be ignored */
    d.resynced = 777;                          /* past the caller's size: left alone */
    CHECK_EQ(cxk_adam_run(&d), 0);
    CHECK(same(&ref, &got));
    CHECK_EQ(d.resynced, 777u);

    /* a newer caller's longer descriptor: zero extra bytes are fine, others -E2BIG */
    struct {
        struct cxk_adam_step_desc d;
        uint64_t newer_field;
    } big;
    fill(&got);
    tg = tensor_of(&got);
    memset(&big, 0, sizeof big);
    big.d = desc_of(&h, &tg);
    big.d.struct_size = sizeof big;
    CHECK_EQ(cxk_adam_run(&big.d), 0);
    fill(&ref), fill(&got);
    tg = tensor_of(&got);
    big.d = desc_of(&h, &tg);
    big.d.struct_size = sizeof big;
    big.newer_field = 1;
    CHECK_EQ(cxk_adam_run(&big.d), -E2BIG);
    CHECK(same(&ref, &got));  /* nothing written */

    /* refusals, nothing written */
    CHECK_EQ(cxk_adam_run(NULL), -EINVAL);
    d = desc_of(&h, &tg);
    d.struct_size = CXK_ADAM_STEP_DESC_MIN - 8;
    CHECK_EQ(cxk_adam_run(&d), -EINVAL);
    d = desc_of(&h, &tg);
    d.reserved = 1;
    CHECK_EQ(cxk_adam_run(&d), -EINVAL);
    d = desc_of(&h, &tg);
    d.img_off = offs, d.in_sum = &in_g;  /* checksums need out */
    CHECK_EQ(cxk_adam_run(&d), -EINVAL);
    CHECK(same(&ref, &got));
    /* the old calls keep their own refusals */
    CHECK_EQ(cxk_adam_step_into(&h, &tg, NULL, 1, NULL), -EINVAL);
    CHECK_EQ(cxk_adam_team_step(NULL, &h, &tg, 1), -EINVAL);
    CHECK(same(&ref, &got));
    return 0;
}
