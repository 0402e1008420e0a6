// bind_pool.h — private to the binding floor: what other binding files use of bind_pool.cpp —
// the cxk_pool behind a Python pool object held for one native call (with the pool's geometry,
// to check offsets Python passes in), and the one cxk_obj_stat -> dict conversion.
#pragma once
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>

#include "bind/bind.h"
#include "cxlkit.h"

namespace cxk::py {

// A PoolHandle's reader/writer gate: native calls hold it shared while they use the mapping
// (an in-flight count), close() holds it exclusive: it marks the handle closing, so no new
// call starts, and waits for the count to drain before it unmaps.
struct PoolGate {
    std::atomic<int64_t> inflight{0};
    std::atomic<bool> closing{false};
    bool closed = false;  // under mu: close() finished (a second closer waits for it)
    // long-lived users holding the mapping across calls (a messaging comm or ring, each with
    // a PoolHold for its life): close() refuses while any is attached rather than wait for it
    std::atomic<int> attached{0};
    std::mutex mu;
    std::condition_variable cv;
};

// What a handle learnt from cxk_pool_stat at open; fixed for the pool's life.
struct PoolGeometry {
    uint64_t size = 0;             // bytes mapped
    uint64_t data_off = 0;         // the data region: [data_off, data_off + partition_bytes)
    uint64_t partition_bytes = 0;  // (format v2: extents of it are this host's, cxk_pool_owns)
    uint32_t host_id = 0;
    bool nc = false;               // coherence "none": flushes and invalidates are real
};

// One shared hold of a PoolHandle's mapping for one native call. Take it with the GIL held;
// it raises the closed error (ValueError naming the pool) once close() has begun. Keep it
// alive across the GIL-released call; release needs no GIL. Python code must not keep a raw
// address across calls (a close in between unmaps it): it passes offsets, and the call that
// uses one holds the pool for the whole access.
class PoolHold {
  public:
    PoolHold(PoolGate &gate, cxk_pool *p, const std::string &label, const PoolGeometry &geo);
    ~PoolHold();
    PoolHold(const PoolHold &) = delete;
    PoolHold &operator=(const PoolHold &) = delete;
    cxk_pool *get() const { return p_; }
    PoolGate &gate() const { return *gate_; }
    char *base() const { return static_cast<char *>(cxk_pool_base(p_)); }
    const PoolGeometry &geometry() const { return *geo_; }
    // [off, off + n) lies in the pool's data region (to_write: in this host's own partition,
    // the only part it may write, DESIGN principle 1); else ValueError naming the offset
    void check_range(uint64_t off, uint64_t n, bool to_write) const;

  private:
    PoolGate *gate_;
    cxk_pool *p_;
    const std::string *label_;
    const PoolGeometry *geo_;
};

// A hold on a PoolHandle from pool_handle() (one type check, then as PoolHold's constructor).
PoolHold hold_pool(nb::handle handle);

// The _native.PoolHandle of `obj`: obj itself, or a cxlkit.Pool's handle (its `_h`).
// TypeError for anything else. Keep the result to keep the handle alive.
nb::object pool_handle(nb::handle obj);
// name, offset, nbytes, generation, checksum, created_ns, host, state
nb::dict obj_stat_dict(const struct cxk_obj_stat &s);

}  // namespace cxk::py
