/* sim.c — the non-coherence simulator through the C ABI alone (coherence CXK_COHERENCE_SIM):
 * a store stays in its host's view until flushed, another host sees it only after
 * it invalidates, streaming stores reach the pool at the fence; mutation switches and the
 * benchmark of the simulator's cost. */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#include "check.h"
#include "cxlkit_testing.h"
#include "pool_open.h"
#include "cxlkit.h"

static char path[256];

static void remove_pool(void) { unlink(path); }

static cxk_pool *open_host(int host, unsigned flags) {
    return test_pool_open(path, host, flags, 8u << 20, 2, CXK_COHERENCE_SIM);
}

static void views(void) {
    cxk_pool *a = open_host(0, CXK_POOL_CREATE | CXK_POOL_EXCL), *b = open_host(1, 0);
    CHECK(a != NULL && b != NULL);
    struct cxk_pool_stat st;
    CHECK_EQ(cxk_pool_stat(a, &st), 0);
    CHECK_EQ(st.coherence, CXK_COHERENCE_SIM);
    CHECK(cxk_pool_base(a) != cxk_pool_base(b)); /* each host runs on its own view */

    uint64_t off = 0;
    CHECK_EQ(cxk_obj_create(a, "w", 4096, &off), 0);
    CHECK_EQ(cxk_obj_publish(a, off, 0), 0);
    volatile uint64_t *wa = (uint64_t *)((char *)cxk_pool_base(a) + off);
    volatile uint64_t *wb = (uint64_t *)((char *)cxk_pool_base(b) + off);
    wa[0] = 11;
    cxk_invalidate((const void *)wb, 8);
    CHECK_EQ(wb[0], 0); /* not written back */
    cxk_flush((const void *)wa, 8);
    CHECK_EQ(wb[0], 0); /* written back, b's copy stale */
    cxk_invalidate((const void *)wb, 8);
    CHECK_EQ(wb[0], 11);

    uint64_t before[4], after[4];
    cxk_sim_counts(before);
    static char src[4096];
    memset(src, 7, sizeof src);
    cxk_nt_copy((void *)(wa + 64), src, sizeof src - 512); /* lines 8.. streamed, fenced */
    cxk_sim_counts(after);
    CHECK(after[3] > before[3]);
    cxk_invalidate((const void *)(wb + 64), sizeof src - 512);
    CHECK_EQ(((volatile char *)(wb + 64))[100], 7);
    cxk_nt_store64((uint64_t *)(wa + 1), 99);
    cxk_invalidate((const void *)wb, 64);
    CHECK_EQ(wb[1], 99);
    CHECK_EQ(cxk_pool_close(b), 0);
    CHECK_EQ(cxk_pool_close(a), 0);
}

static void mutations(void) {
    CHECK_EQ(cxk_mutate("no_such_step", 1), -EINVAL);
    CHECK_EQ(cxk_mutate(NULL, 1), -EINVAL);
    int n = 0;
    while (cxk_mutation_name(n)) ++n;
    CHECK_EQ(n, 4);
    CHECK_EQ(strcmp(cxk_mutation_name(CXK_MUT_RING_HEAD_FLUSH), "ring_head_flush"), 0);
    CHECK_EQ(cxk_mutation_on(CXK_MUT_COUNTER_WRITEBACK), 0);
    CHECK_EQ(cxk_mutate("counter_writeback", 1), 0);
    CHECK_EQ(cxk_mutation_on(CXK_MUT_COUNTER_WRITEBACK), 1);
    CHECK_EQ(cxk_mutate("counter_writeback", 0), 0);
    CHECK_EQ(cxk_mutation_on(CXK_MUT_COUNTER_WRITEBACK), 0);
    CHECK_EQ(cxk_mutation_on(-1), 0);
    CHECK(cxk_mutation_name(4) == NULL);
}

static void bench(void) {
    double out[6];
    CHECK_EQ(cxk_bench_sim_branch(0, 10, out), -EINVAL);
    CHECK_EQ(cxk_bench_sim_branch(3, 100, NULL), -EINVAL);
    CHECK_EQ(cxk_bench_sim_branch(3, 100, out), 0);
    for (int i = 0; i < 6; ++i) CHECK(out[i] > 0);
}

int main(void) {
    snprintf(path, sizeof path, "/dev/shm/cxlkit-ctest-sim-%d", (int)getpid());
    atexit(remove_pool);
    setenv("CXLKIT_SIM_EVICT", "0", 1); /* exact expectations: no random eviction */
    views();
    mutations();
    bench();
    return 0;
}
