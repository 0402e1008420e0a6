// leases.h — private: reader leases in each host's lease table (leases.cpp).
#pragma once
#include <cstdint>

#include "pool/pool.h"

namespace cxk::pool {
// The calling process's pid without a system call (kept, and forgotten by a fork's child).
uint32_t self_pid();
// Does a live process of a live host lease (block, gen)?
bool leased(const cxk_pool *p, uint64_t block, uint64_t gen);
// Clear this host's entries whose process is gone; returns how many.
uint64_t clean_leases(cxk_pool *p);
// Claim a free entry of this host's table for the calling process: its index or -EMFILE.
int64_t lease_claim(cxk_pool *p);
// Fill claimed entry i and make it visible (ends with a full fence).
void lease_set(cxk_pool *p, uint64_t i, uint64_t block, uint64_t gen, uint32_t obj_host);
void lease_free(cxk_pool *p, uint64_t i);  // only the calling process's own entry
}  // namespace cxk::pool
