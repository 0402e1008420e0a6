// bind_pool_handle.cpp — PoolHandle (bind_pool.h): one open cxk_pool, the hold every native
// call takes on it, and its calls. Bound in bind_pool.cpp.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "bind/bind_pool.h"
#include "bind/bind_pool_object.h"

namespace cxk::py {

PoolHold::PoolHold(PoolGate &gate, cxk_pool *p, const std::string &label,
                   const PoolGeometry &geo)
    : gate_(&gate), p_(p), label_(&label), geo_(&geo) {
    // GIL held: close() marks closing with the GIL held too, so either it saw our count or
    // we see its mark
    if (!p || gate.closing.load()) throw nb::value_error(("pool " + label + " is closed").c_str());
    gate.inflight.fetch_add(1);
}

PoolHold::~PoolHold() {
    // seq_cst pairs with close(): it stores closing, then reads the count under mu; we drop
    // the count, then read closing. One of us sees the other, and the notify is under mu, so
    // a closer waiting on the count cannot miss it.
    if (gate_->inflight.fetch_sub(1) == 1 && gate_->closing.load()) {
        std::lock_guard<std::mutex> lk(gate_->mu);
        gate_->cv.notify_all();
    }
}

void PoolHold::check_range(uint64_t off, uint64_t n, bool to_write) const {
    const PoolGeometry &g = *geo_;
    uint64_t lo = g.data_off, hi = g.size;
    const char *where = "the data region";
    if (to_write) {
        lo = g.data_off;
        hi = g.data_off + g.partition_bytes;
        where = "this host's extents (a host writes only its own)";
    }
    if (off >= lo && off <= hi && n <= hi - off && to_write && cxk_pool_owns(p_, off, n) != 0) {
        char msg[200];
        snprintf(msg, sizeof msg,
                 "offset 0x%llx (+%llu bytes) is outside this host's extents (a host writes "
                 "only its own) of pool ", (unsigned long long)off, (unsigned long long)n);
        throw nb::value_error((msg + *label_).c_str());
    }
    if (off < lo || off > hi || n > hi - off) {  // no overflow: off <= hi first
        char msg[256];
        snprintf(msg, sizeof msg,
                 "offset 0x%llx (+%llu bytes) is outside %s [0x%llx, 0x%llx) of pool ",
                 (unsigned long long)off, (unsigned long long)n, where, (unsigned long long)lo,
                 (unsigned long long)hi);
        throw nb::value_error((msg + *label_).c_str());
    }
}

PoolHandle::PoolHandle(const std::vector<std::string> &paths, unsigned flags, int host_id,
                       const std::string &tag, int coherence, int numa_node, uint64_t size,
                       uint32_t max_hosts, uint32_t mode, uint64_t max_objects,
                       uint32_t lease_slots, uint32_t lease_timeout_ms) {
    if (paths.empty()) throw nb::value_error("a pool needs at least one backing path");
    label_ = paths[0];
    for (size_t i = 1; i < paths.size(); ++i) label_ += "+" + paths[i];
    path_ = nb::str(label_.c_str());
    cxk_pool_opts o;
    cxk_pool_opts_init(&o);
    o.flags = flags;
    o.host_id = host_id;
    o.host_tag = tag.c_str();
    o.coherence = coherence;
    o.numa_node = numa_node;
    o.size = size;
    o.max_hosts = max_hosts;
    o.mode = mode;
    o.max_objects = max_objects;
    o.lease_slots = lease_slots;
    o.lease_timeout_ms = lease_timeout_ms;
    std::vector<const char *> cp;
    for (const auto &s : paths) cp.push_back(s.c_str());
    int r;
    {
        nb::gil_scoped_release unlock;  // formatting touches the metadata pages
        r = cxk_pool_open_striped(cp.data(), uint32_t(cp.size()), &o, &p_);
    }
    check(r, label_);
    struct cxk_pool_stat s;
    r = cxk_pool_stat(p_, &s);
    if (r) {
        cxk_pool_close(p_);
        p_ = nullptr;
        check(r, label_);
    }
    version_ = s.version;
    geo_ = PoolGeometry{s.size, s.data_off, s.partition_bytes, s.host_id,
                        s.coherence != CXK_COHERENCE_HOST};
}

PoolHandle::~PoolHandle() {
    // the last reference: no call holds the gate (each call keeps the handle alive)
    for (PoolObject *o : objects_) o->mark_closed();
    if (p_) cxk_pool_close(p_);
}

void PoolHandle::detach(PoolObject *o) {
    for (size_t i = 0; i < objects_.size(); ++i)
        if (objects_[i] == o) {
            objects_[i] = objects_.back();
            objects_.pop_back();
            return;
        }
}

std::string PoolHandle::what(const std::string &name) const {
    return "object " + name + " in pool " + label_;
}

void PoolHandle::refuse_close_while_used() const {
    for (const PoolObject *o : objects_)
        if (o->has_views())
            throw nb::buffer_error(("pool " + label_ + " is closed while views of object " +
                                    o->name() + " exist; drop them first").c_str());
    if (const int n = gate_.attached.load())
        throw nb::buffer_error(("pool " + label_ + " is closed while " + std::to_string(n) +
                                " messaging communicator(s) or ring(s) use it; close them "
                                "first").c_str());
}

void PoolHandle::close() {
    if (!p_) return;
    if (gate_.closing.load()) {
        // another thread is closing: return once it has
        nb::gil_scoped_release unlock;
        std::unique_lock<std::mutex> lk(gate_.mu);
        gate_.cv.wait(lk, [this] { return gate_.closed; });
        return;
    }
    refuse_close_while_used();
    gate_.closing.store(true);  // new calls fail from here (they check it with the GIL)
    {
        // calls in flight need the GIL to finish: wait without it
        nb::gil_scoped_release unlock;
        std::unique_lock<std::mutex> lk(gate_.mu);
        gate_.cv.wait(lk, [this] { return gate_.inflight.load() == 0; });
    }
    for (PoolObject *o : objects_) o->mark_closed();  // the pool's close drops the leases
    cxk_pool *q = p_;
    p_ = nullptr;
    int r;
    {
        nb::gil_scoped_release unlock;  // joins the heartbeat thread
        r = cxk_pool_close(q);
    }
    {
        std::lock_guard<std::mutex> lk(gate_.mu);
        gate_.closed = true;
    }
    gate_.cv.notify_all();
    check(r, label_);
}

uintptr_t PoolHandle::address() {
    PoolHold use = hold();
    return uintptr_t(cxk_pool_base(use.get()));
}

nb::object PoolHandle::fd() {
    PoolHold use = hold();
    const int fd = cxk_pool_fd(use.get());
    return fd >= 0 ? nb::object(nb::int_(fd)) : nb::none();
}

PoolStatRecord PoolHandle::pool_stat() {
    PoolStatRecord s;
    PoolHold use = hold();
    check(cxk_pool_stat(use.get(), &s), label_);
    s.path = path_;
    return s;
}

std::vector<struct cxk_pool_host> PoolHandle::hosts() {
    PoolHold use = hold();
    struct cxk_pool_stat s;
    check(cxk_pool_stat(use.get(), &s), label_);
    std::vector<struct cxk_pool_host> out(s.max_hosts);
    for (uint32_t i = 0; i < s.max_hosts; ++i)
        check(cxk_pool_host_info(use.get(), i, &out[i]), label_);
    return out;
}

struct cxk_obj_stat PoolHandle::create(const std::string &name, uint64_t nbytes,
                                       unsigned flags) {
    PoolHold use = hold();
    cxk_pool *p = use.get();
    uint64_t off = 0;
    struct cxk_obj_stat s;
    int r;
    {
        nb::gil_scoped_release unlock;  // zeroing a large payload takes a while
        r = cxk_obj_create_ex(p, name.c_str(), nbytes, flags, &off);
    }
    check(r, what(name));
    check(cxk_obj_stat_at(p, off, &s), what(name));
    return s;
}

struct cxk_obj_stat PoolHandle::open_object(const std::string &name) {
    PoolHold use = hold();
    cxk_pool *p = use.get();
    struct cxk_obj_stat s;
    int r;
    {
        nb::gil_scoped_release unlock;
        r = cxk_obj_open(p, name.c_str(), &s);
    }
    check(r, what(name));
    return s;
}

void PoolHandle::close_object(uint64_t off) {
    PoolHold use = hold();
    check(cxk_obj_close(use.get(), off), label_);
}

void PoolHandle::destroy(const std::string &name) {
    PoolHold use = hold();
    cxk_pool *p = use.get();
    int r;
    {
        nb::gil_scoped_release unlock;
        r = cxk_obj_destroy(p, name.c_str());
    }
    check(r, what(name));
}

struct cxk_obj_stat PoolHandle::object_stat(const std::string &name) {
    struct cxk_obj_stat s;
    PoolHold use = hold();
    check(cxk_obj_stat(use.get(), name.c_str(), &s), what(name));
    return s;
}

std::vector<struct cxk_obj_stat> PoolHandle::list() {
    PoolHold use = hold();
    cxk_pool *p = use.get();
    std::vector<struct cxk_obj_stat> out;
    size_t n = 0;
    int r;
    {
        nb::gil_scoped_release unlock;
        for (;;) {
            r = cxk_obj_list(p, out.data(), out.size(), &n);
            if (r || n <= out.size()) break;
            out.resize(n + n / 8 + 16);  // objects may appear meanwhile
        }
    }
    check(r, label_);
    out.resize(std::min(n, out.size()));
    return out;
}

struct cxk_fsck_report PoolHandle::fsck(bool repair) {
    PoolHold use = hold();
    cxk_pool *p = use.get();
    struct cxk_fsck_report f;
    int r;
    {
        nb::gil_scoped_release unlock;
        r = cxk_pool_fsck(p, repair ? CXK_FSCK_REPAIR : 0, &f);
    }
    check(r, label_);
    return f;
}

void PoolHandle::release(uint32_t slot, bool drop) {
    PoolHold use = hold();
    cxk_pool *p = use.get();
    int r;
    {
        nb::gil_scoped_release unlock;
        r = cxk_pool_release(p, slot, drop ? CXK_RELEASE_DROP : 0);
    }
    check(r, label_ + " host slot " + std::to_string(slot));
}

int PoolHandle::wait_host() {
    PoolHold use = hold();
    return cxk_pool_wait_host(use.get());
}

PoolHold hold_pool(nb::handle handle) { return nb::cast<PoolHandle &>(handle).hold(); }

nb::object pool_handle(nb::handle obj) {
    if (nb::isinstance<PoolHandle>(obj)) return nb::borrow(obj);
    if (nb::hasattr(obj, "_h")) {
        nb::object h = obj.attr("_h");
        if (nb::isinstance<PoolHandle>(h)) return h;
    }
    throw nb::type_error("pool: expected a cxlkit.Pool or a _native.PoolHandle");
}

}  // namespace cxk::py
