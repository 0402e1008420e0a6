// policy.h — private: kernel mempolicy constants and nodemask helpers shared by policy.cpp
// and the pool's NUMA backing.
#pragma once
#include <cstddef>
#include <cstdint>

#include "cxlkit.h"

namespace cxk {

enum : int {
    kMpolDefault = 0, kMpolPreferred = 1, kMpolBind = 2, kMpolInterleave = 3,
    kMpolWeightedInterleave = 6,  // Linux 6.9+
};
enum : unsigned { kMpolMfStrict = 1u << 0, kMpolMfMove = 1u << 1 };

constexpr size_t kMaskWords = (CXK_MAX_NODE_ID + 1) / (8 * sizeof(unsigned long));
// The kernel reads maxnode-1 bits (a historical off-by-one every caller compensates for).
constexpr unsigned long kMaxNode = CXK_MAX_NODE_ID + 2;

struct NodeMask {
    unsigned long bits[kMaskWords] = {};
    void set(int node) { bits[node / (8 * sizeof(long))] |= 1ul << (node % (8 * sizeof(long))); }
};

// True when this kernel offers MPOL_WEIGHTED_INTERLEAVE (its sysfs weight directory exists).
bool kernel_has_weighted_interleave();

// Bind [addr, addr+nbytes) to one node; flags are CXK_APPLY_*.
int bind_range(void *addr, size_t nbytes, int node, unsigned flags);

}  // namespace cxk
