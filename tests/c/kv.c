/* kv.c — the KV copy engine and block store from C: a two-layer per-layer cache gathered into
 * images and scattered back, plan and argument checks (-EINVAL, -ERANGE), the checksum, and
 * put/get/lookup of blocks in a pool file (dedupe, leading hits, a wrong key is -EBADMSG). */
#include <errno.h>
#include <stdint.h>
#include <unistd.h>

#include "check.h"
#include "cxlkit.h"

#define NB 4
#define SUB 256 /* bytes of one (layer, part) sub-block */
#define IMG (2 * 2 * SUB)

static uint8_t layer[2][2][NB][SUB]; /* [layer][K,V][block][bytes]: "KB..." per layer */
static uint8_t out[2][2][NB][SUB];

static void plan_for(uint8_t (*t)[2][NB][SUB], uint64_t *bases, int64_t *strides,
                     uint64_t *extents, struct cxk_kv_seg *segs, struct cxk_kv_plan *p) {
    for (int l = 0; l < 2; ++l) {
        bases[l] = (uint64_t)(uintptr_t)t[l];
        strides[l] = SUB;
        extents[l] = sizeof t[l];
        for (int k = 0; k < 2; ++k) {
            struct cxk_kv_seg s = {(uint32_t)l, 0, (int64_t)k * NB * SUB,
                                   (uint64_t)(l * 2 + k) * SUB, SUB};
            segs[l * 2 + k] = s;
        }
    }
    struct cxk_kv_plan q = {2, 4, bases, strides, extents, segs, IMG};
    *p = q;
}

int main(void) {
    for (size_t i = 0; i < sizeof layer; ++i) ((uint8_t *)layer)[i] = (uint8_t)(i * 7 + 1);
    uint64_t bases[2], ob[2], extents[2], oe[2];
    int64_t strides[2], os[2];
    struct cxk_kv_seg segs[4], osegs[4];
    struct cxk_kv_plan p, po;
    plan_for(layer, bases, strides, extents, segs, &p);
    plan_for(out, ob, os, oe, osegs, &po);
    CHECK_EQ(cxk_kv_plan_check(&p), 0);

    static uint8_t img[2][IMG];
    void *imgs[2] = {img[0], img[1]};
    int64_t ids[2] = {3, 1};
    CHECK_EQ(cxk_kv_gather(&p, ids, imgs, 2, CXK_KV_FLUSH), 0);
    CHECK(memcmp(img[0] + SUB, layer[0][1][3], SUB) == 0);   /* layer 0, V, block 3 */
    CHECK(memcmp(img[1] + 3 * SUB, layer[1][1][1], SUB) == 0);
    uint64_t sums[2], esum;
    const void *cimgs[2] = {img[0], img[1]};
    int64_t oids[2] = {0, 2};
    CHECK_EQ(cxk_kv_scatter(&po, oids, cimgs, 2, CXK_KV_INVALIDATE, sums), 0);
    CHECK(memcmp(out[1][0][0], layer[1][0][3], SUB) == 0);
    CHECK(sums[0] == cxk_kv_checksum(img[0], IMG) && sums[0] != 0);
    CHECK_EQ(cxk_kv_checksum_engine(&p, 3, &esum), 0);
    CHECK(esum == sums[0]);

    /* bad input */
    int64_t bad_id = NB;
    CHECK_EQ(cxk_kv_gather(&p, &bad_id, imgs, 1, 0), -ERANGE);
    CHECK_EQ(cxk_kv_gather(&p, ids, imgs, 2, 1u << 9), -EINVAL);
    CHECK_EQ(cxk_kv_scatter(&p, ids, cimgs, 2, CXK_KV_FLUSH, NULL), -EINVAL);
    CHECK_EQ(cxk_kv_gather(NULL, ids, imgs, 2, 0), -EINVAL);
    segs[3].img_off = IMG; /* a run past the image */
    CHECK_EQ(cxk_kv_plan_check(&p), -EINVAL);
    segs[3].img_off = 3 * SUB;
    segs[0].base = 2;
    CHECK_EQ(cxk_kv_plan_check(&p), -EINVAL);
    segs[0].base = 0;

    /* blocks in a pool */
    char path[64];
    snprintf(path, sizeof path, "/dev/shm/cxlkit-ctest-kv-%d", (int)getpid());
    struct cxk_pool_opts o;
    cxk_pool_opts_init(&o);
    o.flags = CXK_POOL_CREATE;
    o.size = 8u << 20;
    o.host_id = 0;
    cxk_pool *pool = NULL;
    int r = cxk_pool_open(path, &o, &pool);
    if (r == -ENOENT || r == -EACCES) SKIP("no writable /dev/shm");
    CHECK_EQ(r, 0);
    const char *names[3] = {"kv.test.a", "kv.test.b", "kv.test.c"};
    uint8_t keys[3 * 32], lay[32] = {1, 2, 3};
    for (int i = 0; i < 96; ++i) keys[i] = (uint8_t)i;
    int st[3];
    int64_t pids[3] = {0, 1, 2};
    CHECK_EQ(cxk_kv_put(pool, &p, names, keys, lay, pids, 2, CXK_KV_CHECKSUM, st), 2);
    CHECK_EQ(cxk_kv_put(pool, &p, names, keys, lay, pids, 2, 0, st), 0);
    CHECK_EQ(st[0], -EEXIST);
    size_t hits = 9;
    CHECK_EQ(cxk_kv_lookup(pool, names, 3, &hits), 0);
    CHECK_EQ(hits, 2);
    memset(out, 0, sizeof out);
    int64_t gids[3] = {3, 2, 1};
    CHECK_EQ(cxk_kv_get(pool, &po, names, keys, lay, gids, 3, CXK_KV_CHECKSUM, st), 2);
    CHECK_EQ(st[2], -ENOENT);
    CHECK(memcmp(out[0][1][2], layer[0][1][1], SUB) == 0);
    keys[32] ^= 1; /* block b asked for under another key: refused, not copied as garbage */
    CHECK_EQ(cxk_kv_get(pool, &po, names, keys, lay, gids, 2, 0, st), 1);
    CHECK_EQ(st[1], -EBADMSG);
    /* a put skips zeroing only when the plan's runs cover the image: a plan that leaves the
     * last run out gets a zeroed gap even in a reused block full of an old block's bytes */
    struct cxk_obj_stat ost;
    CHECK_EQ(cxk_obj_stat(pool, "kv.test.a", &ost), 0);
    const uint64_t old_off = ost.off;
    const uint8_t *pbase = cxk_pool_base(pool);
    int nonzero = 0;
    for (int i = 0; i < SUB; ++i) nonzero |= pbase[old_off + CXK_KV_HDR_BYTES + 3 * SUB + i];
    CHECK(nonzero);
    CHECK_EQ(cxk_obj_destroy(pool, "kv.test.a"), 0);
    p.nsegs = 3;
    const char *gap[1] = {"kv.test.gap"};
    CHECK_EQ(cxk_kv_put(pool, &p, gap, keys, lay, pids, 1, 0, st), 1);
    p.nsegs = 4;
    CHECK_EQ(cxk_obj_stat(pool, "kv.test.gap", &ost), 0);
    CHECK_EQ(ost.off, old_off); /* the same block, reused */
    for (int i = 0; i < SUB; ++i) CHECK_EQ(pbase[ost.off + CXK_KV_HDR_BYTES + 3 * SUB + i], 0);
    CHECK(memcmp(pbase + ost.off + CXK_KV_HDR_BYTES, layer[0][0][0], SUB) == 0);
    CHECK_EQ(cxk_obj_destroy(pool, "kv.test.gap"), 0);
    CHECK_EQ(cxk_kv_put(pool, &p, gap, keys, lay, pids, 1, 0, st), 1); /* covering: unzeroed */
    CHECK_EQ(cxk_obj_stat(pool, "kv.test.gap", &ost), 0);
    CHECK(memcmp(pbase + ost.off + CXK_KV_HDR_BYTES + 3 * SUB, layer[1][1][0], SUB) == 0);

    CHECK_EQ(cxk_kv_put(NULL, &p, names, keys, lay, pids, 1, 0, st), -EINVAL);
    CHECK_EQ(cxk_kv_get(pool, &po, names, keys, lay, gids, 1, CXK_KV_NT, st), -EINVAL);
    CHECK_EQ(cxk_kv_lookup(pool, names, 1, NULL), -EINVAL);
    cxk_pool_close(pool);
    unlink(path);
    return 0;
}
