// recovery.h — private: rebuilding this host's derived state and the reclaiming sweeps
// (recovery.cpp). pre for all: the caller holds this host's lock.
#pragma once
#include <cstdint>

#include "pool/pool.h"

namespace cxk::pool {
void list_del(uint64_t *arr, uint32_t *n, uint64_t v);
// Our own table's entry that points at block (found by the name in its header).
bool own_entry_of(const cxk_pool *p, uint64_t block, uint64_t *entry);
void reclaim_creating(cxk_pool *p, uint64_t block);
void sweep_creating(cxk_pool *p);   // objects of creators that died
void sweep_pending(cxk_pool *p);    // DEAD blocks nobody leases any more
// Rebuild from the block chain; r (may be null) counts what was done. 0 or -EBADMSG (a
// broken chain: nothing derived was changed).
int recover(cxk_pool *p, cxk_fsck_report *r);
}  // namespace cxk::pool
