// extents.h — private: the hosts' extent maps (extents.cpp): runs, claiming free extents
// when a host's own run out, giving emptied tails back, and their recovery.
#pragma once
#include <cstdint>
#include <vector>

#include "pool/pool.h"

namespace cxk::pool {

struct Run {
    uint64_t first, count;  // extents
};
// Host h's runs in extent order (orphans and reservations are no runs).
void runs_of(const cxk_pool *p, uint32_t h, std::vector<Run> *out);
// Extents host h holds in runs.
uint64_t extents_held(const cxk_pool *p, uint32_t h);
// Claim extents so that a block of `need` bytes fits one of our runs: extend a run whose end
// is followed by free extents, else a new run at the first fit. pre: the host lock and the
// bakery are held. 0, -ENOSPC (no run of free extents that long), -EDQUOT (the filesystem
// under a sparse pool file has no room for them: space.h) or -EBUSY (another host claimed
// the same extents at once every time: a host the bakery took for dead is alive).
int extent_claim(cxk_pool *p, uint64_t need);
// off is a FREE block that ends its run: give the whole extents at its tail back (all but one
// extent when they are the last we hold). pre: the host lock.
void extent_trim(cxk_pool *p, uint64_t off);
// The same when the caller has just read off's run from our map: [rb, re).
void extent_trim(cxk_pool *p, uint64_t off, uint64_t rb, uint64_t re);
// off is a FREE block of our run [rb, re) that does not end it: the whole extents strictly
// inside it go back to the pool (the run splits in two around them), but one extent when the
// host would be left with less than an extent free. pre: the host lock.
void extent_return_gap(cxk_pool *p, uint64_t off, uint64_t rb, uint64_t re);
void extent_return_gap(cxk_pool *p, uint64_t off);
// Our map after a crash: reservations withdrawn, orphan CONTs cleared. pre: the host lock.
void extmap_recover(cxk_pool *p);
// pool release: host h's runs become runs of ours (commit order; h's map still says them
// too until extmap_clear(h)). pre: the host lock; h is dead.
void extents_adopt(cxk_pool *p, uint32_t h);
void extmap_clear(cxk_pool *p, uint32_t h);
// Extents held by two hosts' maps at once (fsck): their count.
uint64_t extents_overlapping(const cxk_pool *p);

}  // namespace cxk::pool
