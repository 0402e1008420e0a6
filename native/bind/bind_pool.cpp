// bind_pool.cpp — binding of the pool: PoolHandle (one cxk_pool, shared with other binding
// files through bind_pool.h) and PoolObject (a leased object that exports its payload through
// the buffer protocol: memoryview / numpy / torch views without copies). cxlkit/pool.py is the
// public face.
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "bind/bind_pool.h"
#ifdef CXLKIT_TESTING
#include "cxlkit_testing.h"
#endif

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

namespace {

// The counter_writeback mutation drops add_u64's write-back (testing builds only).
bool counter_writeback_mutated() {
#ifdef CXLKIT_TESTING
    return cxk_mutation_on(CXK_MUT_COUNTER_WRITEBACK) != 0;
#else
    return false;
#endif
}

struct PoolObject;

struct PoolHandle {
    cxk_pool *p = nullptr;             // written with the GIL held; nullptr once closed
    std::string label;                 // how errors name the pool
    uint32_t host_id = 0;
    uint32_t version = 0;  // on-media format: 1 = a read-only view of a version 1 pool
    std::vector<PoolObject *> objects; // open objects, closed with the pool
    PoolGate gate;
    PoolGeometry geo;

    PoolHandle(const std::vector<std::string> &paths, unsigned flags, int host_id,
               const std::string &tag, int coherence, int numa_node, uint64_t size,
               uint32_t max_hosts, uint32_t mode, uint64_t max_objects, uint32_t lease_slots,
               uint32_t lease_timeout_ms) {
        if (paths.empty()) throw nb::value_error("a pool needs at least one backing path");
        label = paths[0];
        for (size_t i = 1; i < paths.size(); ++i) label += "+" + paths[i];
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
            r = cxk_pool_open_striped(cp.data(), uint32_t(cp.size()), &o, &p);
        }
        check(r, label);
        struct cxk_pool_stat s;
        r = cxk_pool_stat(p, &s);
        if (r) {
            cxk_pool_close(p);
            p = nullptr;
            check(r, label);
        }
        this->host_id = s.host_id;
        this->version = s.version;
        geo = PoolGeometry{s.size, s.data_off, s.partition_bytes, s.host_id,
                           s.coherence != CXK_COHERENCE_HOST};
    }
    ~PoolHandle();
    // A shared hold on the mapping for one call; the closed error once close() has begun.
    PoolHold hold() { return PoolHold(gate, p, label, geo); }
    bool closed() const { return !p || gate.closing.load(); }
    void close();

    struct cxk_pool_stat pool_stat() {
        struct cxk_pool_stat s;
        PoolHold use = hold();
        check(cxk_pool_stat(use.get(), &s), label);
        return s;
    }
    // format v2: every host slot as a user sees it
    std::vector<struct cxk_pool_host> host_slots() {
        PoolHold use = hold();
        struct cxk_pool_stat s;
        check(cxk_pool_stat(use.get(), &s), label);
        std::vector<struct cxk_pool_host> out(s.max_hosts);
        for (uint32_t i = 0; i < s.max_hosts; ++i)
            check(cxk_pool_host_info(use.get(), i, &out[i]), label);
        return out;
    }
};

struct PoolObject {
    nb::object owner;  // the PoolHandle: keeps the handle alive while we exist
    PoolHandle *h;
    std::string name;
    uint64_t off, nbytes, generation;
    uint32_t host;
    bool writable;
    bool closed = false;
    Py_ssize_t exports = 0;

    PoolObject(nb::object o, PoolHandle *handle, std::string n, uint64_t off_, uint64_t nb_,
               uint64_t gen, uint32_t host_, bool w)
        : owner(std::move(o)), h(handle), name(std::move(n)), off(off_), nbytes(nb_),
          generation(gen), host(host_), writable(w) {
        h->objects.push_back(this);
    }
    ~PoolObject() {
        // GIL held: a closing handle is still mapped (close() unmaps only after it clears
        // h->p with the GIL), and its close drops every lease anyway
        if (!closed && h->p) cxk_obj_close(h->p, off);
        forget();
    }
    void forget() {
        auto &v = h->objects;
        for (size_t i = 0; i < v.size(); ++i)
            if (v[i] == this) {
                v[i] = v.back();
                v.pop_back();
                break;
            }
    }
    std::string what() const { return "object " + name + " in pool " + h->label; }
    template <typename Pos, typename N> [[noreturn]] void bad_range(Pos pos, N n) const {
        throw nb::value_error(("range [" + std::to_string(pos) + ", +" + std::to_string(n) +
                               ") outside object " + name + " of " + std::to_string(nbytes) +
                               " bytes")
                                  .c_str());
    }
    // [pos, pos + n) of the payload from Python's arguments (n None: to the end); ValueError
    // naming the object when it does not fit
    std::pair<uint64_t, uint64_t> range(int64_t pos, std::optional<int64_t> n) const {
        if (pos < 0 || uint64_t(pos) > nbytes || (n && *n < 0)) bad_range(pos, n.value_or(0));
        uint64_t len = n ? uint64_t(*n) : nbytes - uint64_t(pos);
        if (len > nbytes - uint64_t(pos)) bad_range(pos, len);
        return {uint64_t(pos), len};
    }
    PoolHold hold() const {
        if (closed) throw nb::value_error(("object " + name + " is closed").c_str());
        return h->hold();
    }
    ExportedRange exported() const {
        // no new view once close() has begun: it checked for views before marking closing
        if (closed || h->closed()) return {nullptr, 0, true, "pool object is closed"};
        return {static_cast<char *>(cxk_pool_base(h->p)) + off, Py_ssize_t(nbytes), !writable,
                nullptr};
    }
    void close() {
        if (closed) return;
        if (exports > 0)
            throw nb::buffer_error(("object " + name +
                                    " is closed while views of it exist; drop them first").c_str());
        if (!h->closed()) {  // else the pool's close drops the lease
            PoolHold use = h->hold();
            check(cxk_obj_close(use.get(), off), what());
        }
        closed = true;
    }
};

PoolHandle::~PoolHandle() {
    // the last reference: no call holds the gate (each call keeps the handle alive)
    for (PoolObject *o : objects) o->closed = true;
    if (p) cxk_pool_close(p);
}

void PoolHandle::close() {
    if (!p) return;
    if (gate.closing.load()) {
        // another thread is closing: return once it has
        nb::gil_scoped_release unlock;
        std::unique_lock<std::mutex> lk(gate.mu);
        gate.cv.wait(lk, [this] { return gate.closed; });
        return;
    }
    for (PoolObject *o : objects)
        if (o->exports > 0)
            throw nb::buffer_error(("pool " + label + " is closed while views of object " +
                                    o->name + " exist; drop them first").c_str());
    if (const int n = gate.attached.load())
        throw nb::buffer_error(("pool " + label + " is closed while " + std::to_string(n) +
                                " messaging communicator(s) or ring(s) use it; close them "
                                "first").c_str());
    gate.closing.store(true);  // new calls fail from here (they check it with the GIL)
    {
        // calls in flight need the GIL to finish: wait without it
        nb::gil_scoped_release unlock;
        std::unique_lock<std::mutex> lk(gate.mu);
        gate.cv.wait(lk, [this] { return gate.inflight.load() == 0; });
    }
    for (PoolObject *o : objects) o->closed = true;  // the pool's close drops the leases
    cxk_pool *q = p;
    p = nullptr;
    int r;
    {
        nb::gil_scoped_release unlock;  // joins the heartbeat thread
        r = cxk_pool_close(q);
    }
    {
        std::lock_guard<std::mutex> lk(gate.mu);
        gate.closed = true;
    }
    gate.cv.notify_all();
    check(r, label);
}

using U64Array = nb::ndarray<const uint64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

// flush_at / invalidate_at: sync (cxk_flush or cxk_invalidate, which fences each range itself)
// nbytes at each payload offset when the pool is non-coherent, then one full fence, as
// cxk_pool_flush / cxk_pool_invalidate end with: it orders the write-backs before our later
// stores and our later loads after the dropped lines (the pairs of the other host's
// invalidate / flush)
void sync_each(PoolObject &o, const U64Array &offsets, int64_t nbytes,
               void (*sync)(const void *, size_t)) {
    PoolHold use = o.hold();
    if (nbytes < 0 || uint64_t(nbytes) > o.nbytes) o.bad_range(0, nbytes);
    const uint64_t n = uint64_t(nbytes), *off = offsets.data();
    const size_t count = offsets.shape(0);
    for (size_t i = 0; i < count; ++i)
        if (off[i] > o.nbytes - n) o.bad_range(off[i], n);
    use.check_range(o.off, o.nbytes, false);
    if (use.geometry().nc) {
        const char *b = use.base() + o.off;
        for (size_t i = 0; i < count; ++i) sync(b + off[i], n);
    }
    cxk_mfence();
}

// every offset names a whole aligned u64 of the payload; else ValueError naming the object
void check_words(const PoolObject &o, const U64Array &offsets) {
    const uint64_t *off = offsets.data();
    for (size_t i = 0; i < offsets.shape(0); ++i) {
        if (off[i] % 8)
            throw nb::value_error(("offset " + std::to_string(off[i]) + " in object " + o.name +
                                   ": not a multiple of 8 (a u64 word)").c_str());
        if (o.nbytes < 8 || off[i] > o.nbytes - 8) o.bad_range(off[i], 8);
    }
}

PoolHandle &handle_of(nb::handle handle) { return nb::cast<PoolHandle &>(handle); }

}  // namespace

PoolHold hold_pool(nb::handle handle) { return handle_of(handle).hold(); }

nb::dict obj_stat_dict(const struct cxk_obj_stat &s) {
    nb::dict d;
    // names are validated as written, but any host can write a header: never raise here
    d["name"] = nb::steal<nb::str>(
        PyUnicode_DecodeUTF8(s.name, Py_ssize_t(strnlen(s.name, sizeof s.name)), "backslashreplace"));
    d["offset"] = s.off;
    d["nbytes"] = s.nbytes;
    d["generation"] = s.generation;
    d["checksum"] = s.checksum;
    d["created_ns"] = s.created_ns;
    d["host"] = s.host;
    d["state"] = s.state;
    return d;
}

nb::object pool_handle(nb::handle obj) {
    if (nb::isinstance<PoolHandle>(obj)) return nb::borrow(obj);
    if (nb::hasattr(obj, "_h")) {
        nb::object h = obj.attr("_h");
        if (nb::isinstance<PoolHandle>(h)) return h;
    }
    throw nb::type_error("pool: expected a cxlkit.Pool or a _native.PoolHandle");
}

}  // namespace cxk::py

CXK_BIND(pool) {
    using namespace cxk::py;
    m.attr("POOL_CREATE") = CXK_POOL_CREATE;
    m.attr("POOL_EXCL") = CXK_POOL_EXCL;
    m.attr("POOL_FORCE") = CXK_POOL_FORCE;
    m.attr("POOL_SHARED") = CXK_POOL_SHARED;
    m.attr("POOL_OVERCOMMIT") = CXK_POOL_OVERCOMMIT;
    m.attr("POOL_REPAIR") = CXK_POOL_REPAIR;
    m.attr("POOL_READ_V1") = CXK_POOL_READ_V1;  // a version 1 pool opens read-only
    m.attr("POOL_LEASE_TIMEOUT_MIN_MS") = CXK_POOL_LEASE_TIMEOUT_MIN_MS;
    m.attr("POOL_LEASE_TIMEOUT_MAX_MS") = CXK_POOL_LEASE_TIMEOUT_MAX_MS;
    m.attr("POOL_NAME_MAX") = CXK_POOL_NAME_MAX;
    m.attr("POOL_TAG_MAX") = CXK_POOL_TAG_MAX;
    m.attr("POOL_FORMAT_VERSION") = CXK_POOL_FORMAT_VERSION;
    m.attr("POOL_MAX_HOSTS") = CXK_POOL_MAX_HOSTS;
    m.attr("POOL_MAX_BACKINGS") = CXK_POOL_MAX_BACKINGS;
    m.attr("POOL_STRIPE_BYTES") = CXK_POOL_STRIPE_BYTES;
    m.attr("OBJ_NOZERO") = CXK_OBJ_NOZERO;

    nb::class_<PoolObject>(m, "PoolObject", nb::type_slots(buffer_slots<PoolObject>))
        // adopts the lease that PoolHandle.create/open took for (offset, generation)
        .def("__init__", [](PoolObject *self, nb::handle handle, const std::string &name,
                            uint64_t off, uint64_t nbytes, uint64_t gen, uint32_t host,
                            bool writable) {
            PoolHandle &h = nb::cast<PoolHandle &>(handle);
            h.hold();  // the closed error once the pool is closing
            if (writable && host != h.host_id)
                raise_errno(EPERM, "object " + name + " (owned by host " + std::to_string(host) +
                                       ") in pool " + h.label);
            new (self) PoolObject(nb::borrow(handle), &h, name, off, nbytes, gen, host, writable);
        }, nb::arg("handle"), nb::arg("name"), nb::arg("offset"), nb::arg("nbytes"),
           nb::arg("generation"), nb::arg("host"), nb::arg("writable"))
        .def_ro("name", &PoolObject::name)
        .def_ro("offset", &PoolObject::off)
        .def_ro("nbytes", &PoolObject::nbytes)
        .def_ro("generation", &PoolObject::generation)
        .def_ro("host", &PoolObject::host)
        .def_ro("writable", &PoolObject::writable)
        .def_prop_ro("closed", [](const PoolObject &o) { return o.closed || o.h->closed(); })
        // the payload's address now: valid only while the caller knows the pool stays open
        // (cxlkit's own code passes offsets to the calls below instead)
        .def_prop_ro("address", [](const PoolObject &o) {
            PoolHold use = o.hold();
            return uintptr_t(static_cast<char *>(cxk_pool_base(use.get())) + o.off);
        })
        .def("__len__", [](const PoolObject &o) { return o.nbytes; })
        .def("close", &PoolObject::close)
        .def("publish", [](PoolObject &o, bool checksum) {
            PoolHold use = o.hold();
            int r;
            {
                nb::gil_scoped_release unlock;
                r = cxk_obj_publish(use.get(), o.off, checksum ? CXK_PUBLISH_CHECKSUM : 0);
            }
            check(r, o.what());
        }, nb::arg("checksum"))
        .def("valid", [](PoolObject &o) {
            PoolHold use = o.hold();
            return cxk_obj_validate(use.get(), o.off, o.generation) == 0;
        })
        .def("verify", [](PoolObject &o) {
            PoolHold use = o.hold();
            int r;
            {
                nb::gil_scoped_release unlock;
                r = cxk_obj_verify(use.get(), o.off);
            }
            check(r, o.what());
        })
        .def("read_into", [](PoolObject &o, nb::handle dst, uint64_t pos) {
            PoolHold use = o.hold();
            Buffer v(dst, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS);
            int r;
            {
                nb::gil_scoped_release unlock;
                r = cxk_obj_read(use.get(), o.off, o.generation, pos, v.data(), v.size());
            }
            v.release();
            check(r, o.what());
        }, nb::arg("dst"), nb::arg("pos"))
        .def("write", [](PoolObject &o, int64_t pos, nb::handle data) {
            // a copy into the payload under a hold: no address outlives the call
            PoolHold use = o.hold();
            if (!o.writable) raise_errno(EACCES, o.what() + " (opened read-only)");
            Buffer v(data, PyBUF_C_CONTIGUOUS);
            auto [at, n] = o.range(pos, int64_t(v.size()));
            use.check_range(o.off + at, n, true);  // a forged PoolObject writes nowhere else
            char *dst = use.base() + o.off + at;
            if (n >= (1u << 20)) {
                nb::gil_scoped_release unlock;
                std::memmove(dst, v.data(), n);
            } else {
                std::memmove(dst, v.data(), n);
            }
        }, nb::arg("pos"), nb::arg("data"))
        // [offset, offset + nbytes) of the payload (nbytes None: to its end): written lines
        // made visible to other hosts / stale lines dropped before a read (coherence "none";
        // fences only under "host")
        .def("flush", [](PoolObject &o, int64_t offset, std::optional<int64_t> nbytes) {
            PoolHold use = o.hold();
            auto [at, n] = o.range(offset, nbytes);
            use.check_range(o.off + at, n, false);
            cxk_pool_flush(use.get(), o.off + at, n);
        }, nb::arg("offset") = 0, nb::arg("nbytes") = nb::none())
        .def("invalidate", [](PoolObject &o, int64_t offset, std::optional<int64_t> nbytes) {
            PoolHold use = o.hold();
            auto [at, n] = o.range(offset, nbytes);
            use.check_range(o.off + at, n, false);
            cxk_pool_invalidate(use.get(), o.off + at, n);
        }, nb::arg("offset") = 0, nb::arg("nbytes") = nb::none())
        // u64 words at payload offsets (8-byte aligned): one value stored at each, or each
        // loaded, as single aligned 8-byte accesses under a hold of the pool (no view that a
        // close of the pool would have to refuse for, no address that outlives the call)
        .def("store_u64", [](PoolObject &o, U64Array offsets, uint64_t value) {
            PoolHold use = o.hold();
            if (!o.writable) raise_errno(EACCES, o.what() + " (opened read-only)");
            check_words(o, offsets);
            use.check_range(o.off, o.nbytes, true);
            char *b = use.base() + o.off;
            const uint64_t *off = offsets.data();
            for (size_t i = 0; i < offsets.shape(0); ++i)
                __atomic_store_n(reinterpret_cast<uint64_t *>(b + off[i]), value,
                                 __ATOMIC_RELAXED);
        }, nb::arg("offsets"), nb::arg("value"))
        .def("load_u64", [](PoolObject &o, U64Array offsets) {
            PoolHold use = o.hold();
            check_words(o, offsets);
            use.check_range(o.off, o.nbytes, false);
            const size_t n = offsets.shape(0);
            auto *out = new uint64_t[n];
            nb::capsule owner(out, [](void *q) noexcept { delete[] static_cast<uint64_t *>(q); });
            const char *b = use.base() + o.off;
            const uint64_t *off = offsets.data();
            for (size_t i = 0; i < n; ++i)
                out[i] = __atomic_load_n(reinterpret_cast<const uint64_t *>(b + off[i]),
                                         __ATOMIC_RELAXED);
            return nb::ndarray<nb::numpy, uint64_t, nb::ndim<1>>(out, {n}, owner);
        }, nb::arg("offsets"))
        // ---- one face: a bounded counter add, for the KV store's shared counters
        // One u64 of the payload at an aligned offset inside the object (never past its end,
        // whatever the object's size), added to atomically: processes of one host are one
        // coherence domain, so a relaxed add is exact among them; other hosts only read it.
        // Only the owner's writable objects. Returns the new value; on a non-coherent pool the
        // word's line is written back so other hosts' reads (which invalidate first) see it.
        .def("add_u64", [](PoolObject &o, uint64_t offset, uint64_t value) {
            PoolHold use = o.hold();
            if (!o.writable) raise_errno(EACCES, o.what() + " (opened read-only)");
            if (offset % 8)
                throw nb::value_error(("offset " + std::to_string(offset) + " in object " +
                                       o.name + ": not a multiple of 8 (a u64 word)").c_str());
            if (o.nbytes < 8 || offset > o.nbytes - 8) o.bad_range(offset, 8);
            use.check_range(o.off + offset, 8, true);
            auto *w = reinterpret_cast<uint64_t *>(use.base() + o.off + offset);
            const uint64_t now = __atomic_add_fetch(w, value, __ATOMIC_RELAXED);
            if (!counter_writeback_mutated()) cxk_pool_flush(use.get(), o.off + offset, 8);
            return now;
        }, nb::arg("offset"), nb::arg("value"))
        // flush / invalidate for nbytes at each payload offset of a batch (scattered words,
        // e.g. the slots a recency update stamped), one call; every range is checked first
        .def("flush_at", [](PoolObject &o, U64Array offsets, int64_t nbytes) {
            sync_each(o, offsets, nbytes, cxk_flush);
        }, nb::arg("offsets"), nb::arg("nbytes") = 8)
        .def("invalidate_at", [](PoolObject &o, U64Array offsets, int64_t nbytes) {
            sync_each(o, offsets, nbytes, cxk_invalidate);
        }, nb::arg("offsets"), nb::arg("nbytes") = 8);

    nb::class_<PoolHandle>(m, "PoolHandle")
        .def(nb::init<const std::vector<std::string> &, unsigned, int, const std::string &, int,
                      int, uint64_t, uint32_t, uint32_t, uint64_t, uint32_t, uint32_t>(),
             nb::arg("paths"), nb::arg("flags"), nb::arg("host_id"), nb::arg("host_tag"),
             nb::arg("coherence"), nb::arg("numa_node"), nb::arg("size"), nb::arg("max_hosts"),
             nb::arg("mode"), nb::arg("max_objects"), nb::arg("lease_slots"),
             nb::arg("lease_timeout_ms"))
        .def_ro("label", &PoolHandle::label)
        .def_ro("host_id", &PoolHandle::host_id)
        .def_ro("version", &PoolHandle::version)
        .def_prop_ro("closed", [](const PoolHandle &h) { return h.closed(); })
        .def_prop_ro("address", [](PoolHandle &h) {
            PoolHold use = h.hold();
            return uintptr_t(cxk_pool_base(use.get()));
        })
        .def("close", &PoolHandle::close)
        .def_prop_ro("fd", [](PoolHandle &h) {
            PoolHold use = h.hold();
            int fd = cxk_pool_fd(use.get());
            return fd >= 0 ? nb::object(nb::int_(fd)) : nb::none();
        })
        .def("stat", &PoolHandle::pool_stat)
        .def("create", [](PoolHandle &h, const std::string &name, uint64_t nbytes,
                          unsigned flags) {
            PoolHold use = h.hold();
            cxk_pool *p = use.get();
            uint64_t off = 0;
            struct cxk_obj_stat s;
            int r;
            {
                nb::gil_scoped_release unlock;  // zeroing a large payload takes a while
                r = cxk_obj_create_ex(p, name.c_str(), nbytes, flags, &off);
            }
            check(r, "object " + name + " in pool " + h.label);
            check(cxk_obj_stat_at(p, off, &s), "object " + name + " in pool " + h.label);
            return obj_stat_dict(s);
        }, nb::arg("name"), nb::arg("nbytes"), nb::arg("flags") = 0)
        .def("open", [](PoolHandle &h, const std::string &name) {
            PoolHold use = h.hold();
            cxk_pool *p = use.get();
            struct cxk_obj_stat s;
            int r;
            {
                nb::gil_scoped_release unlock;
                r = cxk_obj_open(p, name.c_str(), &s);
            }
            check(r, "object " + name + " in pool " + h.label);
            return obj_stat_dict(s);
        })
        .def("close_object", [](PoolHandle &h, uint64_t off) {
            PoolHold use = h.hold();
            check(cxk_obj_close(use.get(), off), h.label);
        })
        .def("destroy", [](PoolHandle &h, const std::string &name) {
            PoolHold use = h.hold();
            cxk_pool *p = use.get();
            int r;
            {
                nb::gil_scoped_release unlock;
                r = cxk_obj_destroy(p, name.c_str());
            }
            check(r, "object " + name + " in pool " + h.label);
        })
        .def("object_stat", [](PoolHandle &h, const std::string &name) {
            struct cxk_obj_stat s;
            PoolHold use = h.hold();
            check(cxk_obj_stat(use.get(), name.c_str(), &s),
                  "object " + name + " in pool " + h.label);
            return obj_stat_dict(s);
        })
        .def("list", [](PoolHandle &h) {
            PoolHold use = h.hold();
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
            check(r, h.label);
            nb::list l;
            for (size_t i = 0; i < n && i < out.size(); ++i) l.append(obj_stat_dict(out[i]));
            return l;
        })
        .def("fsck", [](PoolHandle &h, bool repair) {
            PoolHold use = h.hold();
            cxk_pool *p = use.get();
            struct cxk_fsck_report f;
            int r;
            {
                nb::gil_scoped_release unlock;
                r = cxk_pool_fsck(p, repair ? CXK_FSCK_REPAIR : 0, &f);
            }
            check(r, h.label);
            nb::dict d;
            d["objects_live"] = f.objects_live;
            d["objects_creating"] = f.objects_creating;
            d["objects_dead"] = f.objects_dead;
            d["blocks_free"] = f.blocks_free;
            d["bytes_used"] = f.bytes_used;
            d["bytes_free"] = f.bytes_free;
            d["largest_free"] = f.largest_free;
            d["reclaimed_objects"] = f.reclaimed_objects;
            d["reclaimed_bytes"] = f.reclaimed_bytes;
            d["repaired_entries"] = f.repaired_entries;
            d["leases_live"] = f.leases_live;
            d["leases_expired"] = f.leases_expired;
            d["duplicate_names"] = f.duplicate_names;
            d["errors"] = f.errors;
            d["counters_wrong"] = f.counters_wrong;
            d["counters_rebuilt"] = f.counters_rebuilt;
            d["registers_bad"] = f.registers_bad;
            return d;
        }, nb::arg("repair"))
        // format v2: host slots as a user sees them, and freeing a dead one's
        .def("hosts", &PoolHandle::host_slots)
        .def("release", [](PoolHandle &h, uint32_t slot, bool drop) {
            PoolHold use = h.hold();
            cxk_pool *p = use.get();
            int r;
            {
                nb::gil_scoped_release unlock;
                r = cxk_pool_release(p, slot, drop ? CXK_RELEASE_DROP : 0);
            }
            check(r, h.label + " host slot " + std::to_string(slot));
        }, nb::arg("slot"), nb::arg("drop"))
        // the host slot this thread's last ETIMEDOUT (create, release) waited for, or -1
        .def("wait_host", [](PoolHandle &h) {
            PoolHold use = h.hold();
            return cxk_pool_wait_host(use.get());
        });

#ifdef CXLKIT_TESTING  // crash points: testing builds only
    m.def("pool_crash_at", [](const std::string &point, int nth) {
        check(cxk_pool_crash_at(point.c_str(), nth), "crash point " + point);
    });
    m.def("pool_stop_at", [](const std::string &point, int count) {
        check(cxk_pool_stop_at(point.c_str(), count), "stop point " + point);
    });
#endif
    // ---- upgrading a version 1 pool in place ----
    m.def("pool_upgrade", [](const std::string &path, bool shared) {
        cxk_pool_upgrade_info x{};
        int r;
        {
            nb::gil_scoped_release unlock;  // walks every partition's chain
            r = cxk_pool_upgrade(path.c_str(), shared ? CXK_POOL_SHARED : 0, &x);
        }
        nb::dict d;
        d["from_version"] = x.from_version;
        d["busy_host"] = x.busy_host;
        d["busy_tag"] = std::string(x.busy_tag, strnlen(x.busy_tag, sizeof x.busy_tag));
        d["extent_bytes"] = x.extent_bytes;
        d["nextents"] = x.nextents;
        d["objects"] = x.objects;
        d["meta_off"] = x.meta_off;
        d["cut_bytes"] = x.cut_bytes;
        d["errno"] = r < 0 ? -r : 0;  // the caller names the error (it knows the host)
        return d;
    }, nb::arg("path"), nb::arg("shared") = false);
    m.def("pool_probe", [](const std::string &path) {
        cxk_pool_probe_info x{};
        check(cxk_pool_probe(path.c_str(), &x), path);
        nb::dict d;
        d["file_type"] = x.file_type;
        d["superblock"] = -x.superblock;  // an errno (0: a whole superblock)
        d["version"] = x.version;
        d["max_hosts"] = x.max_hosts;
        d["hosts_live"] = x.hosts_live;
        d["hosts_dead"] = x.hosts_dead;
        d["size"] = x.size;
        d["dev"] = x.dev;
        d["ino"] = x.ino;
        d["why"] = std::string(x.why, strnlen(x.why, sizeof x.why));
        return d;
    }, nb::arg("path"));
    m.def("pool_dax_geometry", [](const std::string &root, const std::string &name) {
        uint64_t size = 0, align = 0;
        check(cxk_pool_dax_geometry(root.c_str(), name.c_str(), &size, &align), name);
        return std::make_tuple(size, align);
    });
}
