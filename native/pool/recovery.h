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
// broken chain: nothing derived was changed). Leaves the bakery registers alone: a caller
// may hold the bakery (a release adopting a dead host's objects).
int recover(cxk_pool *p, cxk_fsck_report *r);
// This host's counters say what no block chain can (more names than the table holds, more
// blocks than their bytes, bytes beyond the data region): O(1), checked at every lock.
bool counters_impossible(const cxk_pool *p);
// The name table is full by this host's counters: when the chain says otherwise, rebuild
// them (a create then goes on). 0, or -EBADMSG (a broken chain).
int counters_heal(cxk_pool *p);
}  // namespace cxk::pool
