// bind_pool.h — private to the binding floor: the pool's handle (PoolHandle, one cxk_pool,
// bind_pool_handle.cpp) and what other binding files use of it — the cxk_pool behind a
// Python pool object held for one native call, with the pool's geometry to check offsets
// Python passes in.
#pragma once
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "bind/bind.h"
#include "bind/bind_pool_records.h"
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

class PoolObject;

// _native.PoolHandle: one open cxk_pool. Each method is one bound call: it holds the pool
// for its length (the closed error once close() has begun) and raises OSError naming the
// pool or object on a failed C call (cxlkit/pool/pool.py types it). Results are the C
// structs themselves (bind_pool_records.h).
class PoolHandle {
  public:
    PoolHandle(const std::vector<std::string> &paths, unsigned flags, int host_id,
               const std::string &tag, int coherence, int numa_node, uint64_t size,
               uint32_t max_hosts, uint32_t mode, uint64_t max_objects, uint32_t lease_slots,
               uint32_t lease_timeout_ms);
    ~PoolHandle();
    PoolHandle(const PoolHandle &) = delete;
    PoolHandle &operator=(const PoolHandle &) = delete;

    // A shared hold on the mapping for one call; the closed error once close() has begun.
    PoolHold hold() { return PoolHold(gate_, p_, label_, geo_); }
    bool closed() const { return !p_ || gate_.closing.load(); }
    // Waits for calls in flight, then unmaps; BufferError while views or attached users exist.
    void close();
    const std::string &label() const { return label_; }
    uint32_t host_id() const { return geo_.host_id; }
    uint32_t version() const { return version_; }
    uintptr_t address();
    nb::object fd();  // None for a pool without one
    PoolStatRecord pool_stat();
    std::vector<struct cxk_pool_host> hosts();  // every slot, in order
    struct cxk_obj_stat create(const std::string &name, uint64_t nbytes, unsigned flags);
    struct cxk_obj_stat open_object(const std::string &name);
    void close_object(uint64_t off);
    void destroy(const std::string &name);
    struct cxk_obj_stat object_stat(const std::string &name);
    std::vector<struct cxk_obj_stat> list();
    struct cxk_fsck_report fsck(bool repair);
    void release(uint32_t slot, bool drop);
    int wait_host();  // the slot this thread's last ETIMEDOUT waited for, or -1

    // PoolObject's part: its objects register here, and are closed with the pool
    void attach(PoolObject *o) { objects_.push_back(o); }
    void detach(PoolObject *o);
    cxk_pool *raw() const { return p_; }  // nullptr once closed; read with the GIL

  private:
    std::string what(const std::string &name) const;  // "object NAME in pool LABEL"
    void refuse_close_while_used() const;

    cxk_pool *p_ = nullptr;  // written with the GIL held; nullptr once closed
    std::string label_;      // how errors name the pool
    nb::str path_;           // label_ as the str every PoolStat carries
    uint32_t version_ = 0;   // on-media format: 1 = a read-only view of a version 1 pool
    std::vector<PoolObject *> objects_;  // open objects, closed with the pool
    PoolGate gate_;
    PoolGeometry geo_;
};

// A hold on a PoolHandle from pool_handle() (one type check, then as PoolHold's constructor).
PoolHold hold_pool(nb::handle handle);

// The _native.PoolHandle of `obj`: obj itself, or a cxlkit.Pool's handle (its `_h`).
// TypeError for anything else. Keep the result to keep the handle alive.
nb::object pool_handle(nb::handle obj);

}  // namespace cxk::py
