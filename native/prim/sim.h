// sim.h — private: the non-coherence simulator behind coherence "sim". Each host
// sees a pool through a view of its own (a file shared by the host's processes: one coherence
// domain) beside a shadow of what that host last exchanged with the pool; the primitives of
// memops.cpp act on them for addresses inside a registered view (docs/pool-format.md).
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace cxk::sim {

struct Map;

// True while this process has a view registered: the one branch the primitives pay for the
// simulator in production (a relaxed load of a flag that is false there).
extern std::atomic<bool> g_on;

// Join host `key`'s view of the pool mapped at [pool, pool + size) (uuid: the pool's, so views
// of another pool never mix): *view (aligned to align, size bytes) is where the code runs. A
// view made now is a copy of the pool: the host's cache holds every line, clean. Files live
// in $CXLKIT_SIM_DIR (else /dev/shm). key: [A-Za-z0-9] only. 0 or -errno.
// pre: pool and size are multiples of 64; size > 0.
int attach(uint8_t *pool, uint64_t size, uint64_t align, const uint8_t uuid[16], const char *key,
           Map **out, uint8_t **view);
// Unregister and unmap the view. The last process of the host writes its dirty lines back
// (the host keeps running: its cache drains) and removes the view; in a child of fork
// (another pid than attach's) only the mappings go.
void detach(Map *m);

// The hooks of memops.cpp: each returns false when [a, a + n) is not in a view (the caller
// runs the real instruction). flush: dirty lines are written back (clwb: the line stays).
// invalidate: dirty lines are written back, clean ones fetched again from the pool.
// nt_stored: [a, a + n) (whole lines) was written by streaming stores: those lines reach the
// pool at this thread's next fence. fence: drains them.
bool flush(const void *a, size_t n);
bool invalidate(const void *a, size_t n);
bool nt_stored(const void *a, size_t n);
void fence();

// What the simulator did in this process since it loaded (tests show it had work to do).
struct Counts {
    uint64_t writebacks, fetches, evictions, nt_lines;
};
Counts counts();

}  // namespace cxk::sim
