// policy.cpp — placement: turns a cxk_policy into mbind/set_mempolicy calls (including the
// software stripe), allocates under a policy, and reports where pages are (move_pages).
#include "prim/policy.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "sys/sys.h"

namespace cxk {
namespace {

int to_kernel_mode(int32_t mode) {
    switch (mode) {
        case CXK_POLICY_DEFAULT: return kMpolDefault;
        case CXK_POLICY_BIND: return kMpolBind;
        case CXK_POLICY_PREFERRED: return kMpolPreferred;
        case CXK_POLICY_INTERLEAVE: return kMpolInterleave;
        case CXK_POLICY_WEIGHTED: return kMpolWeightedInterleave;
        default: return -1;
    }
}

unsigned to_kernel_flags(unsigned flags) {
    unsigned k = 0;
    if (flags & CXK_APPLY_MIGRATE) k |= kMpolMfMove;
    if (flags & CXK_APPLY_STRICT) k |= kMpolMfStrict;
    return k;
}

NodeMask mask_of(const cxk_policy &p) {
    NodeMask m;
    for (uint32_t i = 0; i < p.nnodes; ++i) m.set(p.nodes[i]);
    return m;
}

// The kernel says EINVAL both for a bad nodemask and for an unknown mode; tell them apart.
int weighted_errno(long r) {
    return (r == -EINVAL && !kernel_has_weighted_interleave()) ? -EOPNOTSUPP : int(r);
}

uint64_t stripe_chunk(const cxk_policy &p) {
    return p.chunk_bytes ? p.chunk_bytes : (uint64_t(2) << 20);
}

// Node of stripe chunk c: node i owns weights[i] consecutive chunks of each round.
int stripe_node(const cxk_policy &p, uint64_t c) {
    uint64_t round = 0;
    for (uint32_t i = 0; i < p.nnodes; ++i) round += p.weights[i] ? p.weights[i] : 1;
    uint64_t k = c % round;
    for (uint32_t i = 0; i < p.nnodes; ++i) {
        uint64_t w = p.weights[i] ? p.weights[i] : 1;
        if (k < w) return p.nodes[i];
        k -= w;
    }
    return p.nodes[0];  // unreachable: k < round
}

}  // namespace

bool kernel_has_weighted_interleave() {
    static const bool has = access("/sys/kernel/mm/mempolicy/weighted_interleave", F_OK) == 0;
    return has;
}

int bind_range(void *addr, size_t nbytes, int node, unsigned flags) {
    NodeMask m;
    m.set(node);
    long r = cxk_mbind(addr, nbytes, kMpolBind, m.bits, kMaxNode, to_kernel_flags(flags));
    return r == -EIO && !(flags & CXK_APPLY_STRICT) ? 0 : int(r);
}

}  // namespace cxk

namespace {

constexpr size_t kHugePage = size_t(2) << 20;

}  // namespace

extern "C" {

int cxk_policy_check(const struct cxk_policy *pol) {
    if (!pol) return -EINVAL;
    const auto &p = *pol;
    if (p.mode < CXK_POLICY_DEFAULT || p.mode > CXK_POLICY_STRIPE) return -EINVAL;
    if (p.mode == CXK_POLICY_DEFAULT) return p.nnodes == 0 ? 0 : -EINVAL;
    if (p.nnodes < 1 || p.nnodes > CXK_MAX_POLICY_NODES) return -EINVAL;
    if (p.mode == CXK_POLICY_PREFERRED && p.nnodes != 1) return -EINVAL;
    for (uint32_t i = 0; i < p.nnodes; ++i) {
        if (p.nodes[i] < 0 || p.nodes[i] > CXK_MAX_NODE_ID) return -EINVAL;
        for (uint32_t j = 0; j < i; ++j)
            if (p.nodes[j] == p.nodes[i]) return -EINVAL;
    }
    if (p.mode == CXK_POLICY_STRIPE) {
        uint64_t c = cxk::stripe_chunk(p);
        if (c % cxk_page_size() != 0) return -EINVAL;
    }
    return 0;
}

int cxk_policy_apply(void *addr, size_t nbytes, const struct cxk_policy *pol, unsigned flags) {
    if (int e = cxk_policy_check(pol)) return e;
    const size_t ps = cxk_page_size();
    if (!addr || nbytes == 0 || uintptr_t(addr) % ps != 0) return -EINVAL;
    nbytes = (nbytes + ps - 1) & ~(ps - 1);
    const auto &p = *pol;
    if (p.mode == CXK_POLICY_STRIPE) {
        const uint64_t chunk = cxk::stripe_chunk(p);
        auto *base = static_cast<unsigned char *>(addr);
        // Consecutive chunks bound to the same node go in one mbind (fewer VMAs to split).
        uint64_t start = 0;
        while (start < nbytes) {
            uint64_t c = start / chunk;
            int node = cxk::stripe_node(p, c);
            uint64_t end = start;
            while (end < nbytes && cxk::stripe_node(p, end / chunk) == node)
                end = (end / chunk + 1) * chunk;
            if (end > nbytes) end = nbytes;
            if (int e = cxk::bind_range(base + start, end - start, node, flags)) return e;
            start = end;
        }
        return 0;
    }
    cxk::NodeMask m = cxk::mask_of(p);
    const int mode = cxk::to_kernel_mode(p.mode);
    long r = cxk_mbind(addr, nbytes, mode, p.mode == CXK_POLICY_DEFAULT ? nullptr : m.bits,
                       p.mode == CXK_POLICY_DEFAULT ? 0 : cxk::kMaxNode,
                       cxk::to_kernel_flags(flags));
    if (r == -EIO && !(flags & CXK_APPLY_STRICT)) r = 0;  // some pages busy: best effort
    return p.mode == CXK_POLICY_WEIGHTED ? cxk::weighted_errno(r) : int(r);
}

int cxk_policy_set_task(const struct cxk_policy *pol) {
    if (int e = cxk_policy_check(pol)) return e;
    const auto &p = *pol;
    if (p.mode == CXK_POLICY_STRIPE) return -EINVAL;
    cxk::NodeMask m = cxk::mask_of(p);
    long r = cxk_set_mempolicy(cxk::to_kernel_mode(p.mode),
                               p.mode == CXK_POLICY_DEFAULT ? nullptr : m.bits,
                               p.mode == CXK_POLICY_DEFAULT ? 0 : cxk::kMaxNode);
    return p.mode == CXK_POLICY_WEIGHTED ? cxk::weighted_errno(r) : int(r);
}

int cxk_policy_intended_node(const struct cxk_policy *pol, uint64_t page_index,
                             size_t page_size) {
    if (cxk_policy_check(pol) != 0 || page_size == 0) return -1;
    const auto &p = *pol;
    switch (p.mode) {
        case CXK_POLICY_BIND: return p.nnodes == 1 ? p.nodes[0] : -1;
        case CXK_POLICY_PREFERRED: return p.nodes[0];
        case CXK_POLICY_INTERLEAVE:
        case CXK_POLICY_WEIGHTED: return p.nnodes == 1 ? p.nodes[0] : -1;
        case CXK_POLICY_STRIPE:
            return cxk::stripe_node(p, page_index * page_size / cxk::stripe_chunk(p));
        default: return -1;
    }
}

int cxk_residency(const void *addr, size_t nbytes, uint64_t *pages_per_node, uint32_t max_nodes,
                  uint64_t *not_present, int32_t *node_of_page) {
    const size_t ps = cxk_page_size();
    if (!addr || nbytes == 0 || uintptr_t(addr) % ps != 0 || !pages_per_node || !not_present)
        return -EINVAL;
    const size_t npages = (nbytes + ps - 1) / ps;
    constexpr size_t kBatch = 4096;
    std::vector<void *> pages(kBatch);
    std::vector<int> status(kBatch);
    auto *base = static_cast<unsigned char *>(const_cast<void *>(addr));
    for (size_t first = 0; first < npages; first += kBatch) {
        size_t n = npages - first < kBatch ? npages - first : kBatch;
        for (size_t i = 0; i < n; ++i) pages[i] = base + (first + i) * ps;
        long r = cxk_move_pages(0, n, pages.data(), nullptr, status.data(), 0);
        if (r < 0) return int(r);
        for (size_t i = 0; i < n; ++i) {
            int s = status[i];
            if (node_of_page) node_of_page[first + i] = s;
            if (s >= 0 && uint32_t(s) < max_nodes) pages_per_node[s] += 1;
            else *not_present += 1;
        }
    }
    return 0;
}

int cxk_alloc(size_t nbytes, const struct cxk_policy *pol, unsigned flags, void **out) {
    if (!out || nbytes == 0) return -EINVAL;
    if (int e = cxk_policy_check(pol)) return e;
    const bool huge = flags & CXK_ALLOC_HUGEPAGE;
    if (huge && (flags & CXK_ALLOC_NOHUGEPAGE)) return -EINVAL;
    void *p = nullptr;
    // huge: a 2 MiB-aligned start, so THP can back the range from its first byte
    if (int e = huge ? cxk::sys_map_aligned(nbytes, kHugePage, PROT_READ | PROT_WRITE, &p)
                     : cxk_map_anon(nbytes, &p))
        return e;
    int e = (flags & CXK_ALLOC_NOHUGEPAGE) ? cxk::sys_madvise(p, nbytes, MADV_NOHUGEPAGE)
            : huge                         ? cxk::sys_madvise(p, nbytes, MADV_HUGEPAGE)
                                           : 0;
    if (e == 0) e = cxk_policy_apply(p, nbytes, pol, 0);
    if (e == 0 && (flags & CXK_ALLOC_POPULATE)) e = cxk_populate(p, nbytes);
    if (e != 0) {
        const size_t ps = cxk_page_size();
        (void)cxk::sys_munmap(p, (nbytes + ps - 1) & ~(ps - 1));  // e is the error to report
        return e;
    }
    *out = p;
    return 0;
}

}  // extern "C"
