/* policy.c — placement from C without Python: every policy on node 0 puts every page there,
 * stripe maps chunks to nodes by weight, bad policies are refused, residency counts pages,
 * and fault injection reaches the error paths of alloc and residency. */
#include <errno.h>
#include <string.h>

#include "check.h"
#include "cxlkit.h"

static struct cxk_policy pol(int mode, int nnodes) {
    struct cxk_policy p;
    memset(&p, 0, sizeof p);
    p.mode = mode;
    p.nnodes = (uint32_t)nnodes;
    return p;
}

static void all_on_node0(int mode) {
    struct cxk_policy p = pol(mode, mode == CXK_POLICY_DEFAULT ? 0 : 1);
    void *a = NULL;
    size_t n = 3u << 20;
    int r = cxk_alloc(n, &p, CXK_ALLOC_POPULATE, &a);
    if (mode == CXK_POLICY_WEIGHTED && r == -EOPNOTSUPP) return; /* kernel before 6.9 */
    CHECK_EQ(r, 0);
    uint64_t per[4] = {0}, absent = 0;
    CHECK_EQ(cxk_residency(a, n, per, 4, &absent, NULL), 0);
    CHECK_EQ(absent, 0);
    CHECK_EQ(per[0], n / cxk_page_size());
    CHECK_EQ(cxk_unmap(a, n), 0);
}

static void checks(void) {
    struct cxk_policy p = pol(CXK_POLICY_BIND, 0);
    CHECK_EQ(cxk_policy_check(&p), -EINVAL); /* no node */
    p.nnodes = 2;
    CHECK_EQ(cxk_policy_check(&p), -EINVAL); /* node 0 twice */
    p.nodes[1] = CXK_MAX_NODE_ID + 1;
    CHECK_EQ(cxk_policy_check(&p), -EINVAL); /* out of range */
    p = pol(CXK_POLICY_PREFERRED, 2);
    p.nodes[1] = 1;
    CHECK_EQ(cxk_policy_check(&p), -EINVAL); /* preferred takes one */
    p = pol(99, 1);
    CHECK_EQ(cxk_policy_check(&p), -EINVAL);
    p = pol(CXK_POLICY_STRIPE, 1);
    p.chunk_bytes = 1000;
    CHECK_EQ(cxk_policy_check(&p), -EINVAL); /* not a page multiple */
    p = pol(CXK_POLICY_DEFAULT, 1);
    CHECK_EQ(cxk_policy_check(&p), -EINVAL);
    CHECK_EQ(cxk_policy_check(NULL), -EINVAL);
    p = pol(CXK_POLICY_STRIPE, 1);
    CHECK_EQ(cxk_policy_set_task(&p), -EINVAL); /* stripe is per range */
    void *a = NULL;
    p = pol(CXK_POLICY_BIND, 1);
    CHECK_EQ(cxk_alloc(0, &p, 0, &a), -EINVAL);
    CHECK_EQ(cxk_alloc(1 << 20, &p, CXK_ALLOC_HUGEPAGE | CXK_ALLOC_NOHUGEPAGE, &a), -EINVAL);
    /* huge pages asked for: the mapping starts on a 2 MiB boundary, whatever the length */
    const size_t lens[3] = {4096, (2u << 20) + 4096, 6u << 20};
    for (int i = 0; i < 3; ++i) {
        CHECK_EQ(cxk_alloc(lens[i], &p, CXK_ALLOC_HUGEPAGE | CXK_ALLOC_POPULATE, &a), 0);
        CHECK_EQ((uintptr_t)a % (2u << 20), 0);
        ((volatile char *)a)[lens[i] - 1] = 1;
        CHECK_EQ(cxk_unmap(a, lens[i]), 0);
    }
    CHECK_EQ(cxk_policy_apply((void *)1, 4096, &p, 0), -EINVAL); /* unaligned */
}

static void stripe_pattern(void) {
    /* nodes {0, 7, 3} with weights {2, 1, 1}: chunks go 0 0 7 3 0 0 7 3 ... */
    struct cxk_policy p = pol(CXK_POLICY_STRIPE, 3);
    p.nodes[0] = 0; p.nodes[1] = 7; p.nodes[2] = 3;
    p.weights[0] = 2; p.weights[1] = 1; p.weights[2] = 1;
    p.chunk_bytes = 2u << 20;
    const size_t ps = cxk_page_size(), ppc = (2u << 20) / ps;
    const int expect[8] = {0, 0, 7, 3, 0, 0, 7, 3};
    for (int c = 0; c < 8; ++c) {
        CHECK_EQ(cxk_policy_intended_node(&p, (uint64_t)c * ppc, ps), expect[c]);
        CHECK_EQ(cxk_policy_intended_node(&p, (uint64_t)c * ppc + ppc - 1, ps), expect[c]);
    }
    p = pol(CXK_POLICY_INTERLEAVE, 2);
    p.nodes[1] = 1;
    CHECK_EQ(cxk_policy_intended_node(&p, 0, ps), -1); /* the kernel picks the phase */
}

static void faults(void) {
    struct cxk_policy p = pol(CXK_POLICY_BIND, 1);
    void *a = NULL;
    CHECK_EQ(cxk_fault_inject("mbind", 1, EPERM), 0);
    CHECK_EQ(cxk_alloc(1 << 20, &p, 0, &a), -EPERM);
    CHECK(a == NULL);
    CHECK_EQ(cxk_fault_inject("madvise", 1, ENOMEM), 0);
    CHECK_EQ(cxk_alloc(1 << 20, &p, CXK_ALLOC_POPULATE, &a), -ENOMEM);
    CHECK_EQ(cxk_fault_inject("madvise", 1, EINVAL), 0); /* the MADV_NOHUGEPAGE call */
    CHECK_EQ(cxk_alloc(1 << 20, &p, CXK_ALLOC_NOHUGEPAGE | CXK_ALLOC_POPULATE, &a), -EINVAL);
    CHECK_EQ(cxk_fault_inject("madvise", 1, EAGAIN), 0); /* the MADV_HUGEPAGE call */
    CHECK_EQ(cxk_alloc(1 << 20, &p, CXK_ALLOC_HUGEPAGE, &a), -EAGAIN);
    CHECK_EQ(cxk_fault_inject("mmap", 1, ENOMEM), 0);
    CHECK_EQ(cxk_alloc(1 << 20, &p, CXK_ALLOC_HUGEPAGE, &a), -ENOMEM);
    CHECK_EQ(cxk_alloc(1 << 20, &p, 0, &a), 0); /* not populated */
    uint64_t per[2] = {0}, absent = 0;
    int32_t node_of[256];
    CHECK_EQ(cxk_residency(a, 1 << 20, per, 2, &absent, node_of), 0);
    CHECK_EQ(absent, (1 << 20) / cxk_page_size());
    CHECK_EQ(node_of[0], -ENOENT);
    CHECK_EQ(cxk_fault_inject("move_pages", 1, EFAULT), 0);
    CHECK_EQ(cxk_residency(a, 1 << 20, per, 2, &absent, NULL), -EFAULT);
    CHECK_EQ(cxk_fault_inject("set_mempolicy", 1, EINVAL), 0);
    CHECK_EQ(cxk_policy_set_task(&p), -EINVAL);
    CHECK_EQ(cxk_unmap(a, 1 << 20), 0);
}

int main(void) {
    checks();
    stripe_pattern();
    faults();
    for (int m = CXK_POLICY_DEFAULT; m <= CXK_POLICY_STRIPE; ++m) all_on_node0(m);
    return 0;
}
