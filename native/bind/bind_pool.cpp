// bind_pool.cpp — binding of the pool: PoolHandle (one cxk_pool, bind_pool_handle.cpp) and
// PoolObject (a leased object exporting its payload through the buffer protocol,
// bind_pool_object.cpp), each method bound as it is; the results are the records of
// bind_pool_records.cpp. cxlkit/pool/pool.py is the public face.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <tuple>

#include "bind/bind_pool.h"
#include "bind/bind_pool_object.h"
#ifdef CXLKIT_TESTING
#include "cxlkit_testing.h"
#endif

namespace {

namespace nb = nanobind;

void bind_constants(nb::module_ &m) {
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
}

void bind_object(nb::module_ &m) {
    using cxk::py::PoolObject;
    nb::class_<PoolObject>(m, "PoolObject", nb::type_slots(cxk::py::buffer_slots<PoolObject>))
        .def(nb::init<nb::handle, const std::string &, uint64_t, uint64_t, uint64_t, uint32_t,
                      bool>(),
             nb::arg("handle"), nb::arg("name"), nb::arg("offset"), nb::arg("nbytes"),
             nb::arg("generation"), nb::arg("host"), nb::arg("writable"))
        .def_prop_ro("name", &PoolObject::name)
        .def_prop_ro("offset", &PoolObject::offset)
        .def_prop_ro("nbytes", &PoolObject::nbytes)
        .def_prop_ro("generation", &PoolObject::generation)
        .def_prop_ro("host", &PoolObject::host)
        .def_prop_ro("writable", &PoolObject::writable)
        .def_prop_ro("closed", &PoolObject::closed)
        // the payload's address now: valid only while the caller knows the pool stays open
        // (cxlkit's own code passes offsets to the calls below instead)
        .def_prop_ro("address", &PoolObject::address)
        .def("__len__", &PoolObject::nbytes)
        .def("close", &PoolObject::close)
        .def("publish", &PoolObject::publish, nb::arg("checksum"))
        .def("valid", &PoolObject::valid)
        .def("verify", &PoolObject::verify)
        .def("read_into", &PoolObject::read_into, nb::arg("dst"), nb::arg("pos"))
        .def("write", &PoolObject::write_at, nb::arg("pos"), nb::arg("data"))
        // [offset, offset + nbytes) of the payload (nbytes None: to its end): written lines
        // made visible to other hosts / stale lines dropped before a read (coherence "none";
        // fences only under "host")
        .def("flush", &PoolObject::flush, nb::arg("offset") = 0, nb::arg("nbytes") = nb::none())
        .def("invalidate", &PoolObject::invalidate, nb::arg("offset") = 0,
             nb::arg("nbytes") = nb::none())
        // u64 words at payload offsets (8-byte aligned): one value stored at each, or each
        // loaded, as single aligned 8-byte accesses under a hold of the pool (no view that a
        // close of the pool would have to refuse for, no address that outlives the call)
        .def("store_u64", &PoolObject::store_u64, nb::arg("offsets"), nb::arg("value"))
        .def("load_u64", &PoolObject::load_u64, nb::arg("offsets"))
        // one bounded counter add, for the KV store's shared counters
        .def("add_u64", &PoolObject::add_u64, nb::arg("offset"), nb::arg("value"))
        // flush / invalidate for nbytes at each payload offset of a batch (scattered words,
        // e.g. the slots a recency update stamped), one call; every range is checked first
        .def("flush_at", &PoolObject::flush_at, nb::arg("offsets"), nb::arg("nbytes") = 8)
        .def("invalidate_at", &PoolObject::invalidate_at, nb::arg("offsets"),
             nb::arg("nbytes") = 8);
}

void bind_handle(nb::module_ &m) {
    using cxk::py::PoolHandle;
    nb::class_<PoolHandle>(m, "PoolHandle")
        .def(nb::init<const std::vector<std::string> &, unsigned, int, const std::string &, int,
                      int, uint64_t, uint32_t, uint32_t, uint64_t, uint32_t, uint32_t>(),
             nb::arg("paths"), nb::arg("flags"), nb::arg("host_id"), nb::arg("host_tag"),
             nb::arg("coherence"), nb::arg("numa_node"), nb::arg("size"), nb::arg("max_hosts"),
             nb::arg("mode"), nb::arg("max_objects"), nb::arg("lease_slots"),
             nb::arg("lease_timeout_ms"))
        .def_prop_ro("label", &PoolHandle::label)
        .def_prop_ro("host_id", &PoolHandle::host_id)
        .def_prop_ro("version", &PoolHandle::version)
        .def_prop_ro("closed", &PoolHandle::closed)
        .def_prop_ro("address", &PoolHandle::address)
        .def_prop_ro("fd", &PoolHandle::fd)
        .def("close", &PoolHandle::close)
        .def("stat", &PoolHandle::pool_stat)
        .def("create", &PoolHandle::create, nb::arg("name"), nb::arg("nbytes"),
             nb::arg("flags") = 0)
        .def("open", &PoolHandle::open_object, nb::arg("name"))
        .def("close_object", &PoolHandle::close_object, nb::arg("offset"))
        .def("destroy", &PoolHandle::destroy, nb::arg("name"))
        .def("object_stat", &PoolHandle::object_stat, nb::arg("name"))
        .def("list", &PoolHandle::list)
        .def("fsck", &PoolHandle::fsck, nb::arg("repair"))
        // format v2: host slots as a user sees them, and freeing a dead one's
        .def("hosts", &PoolHandle::hosts)
        .def("release", &PoolHandle::release, nb::arg("slot"), nb::arg("drop"))
        // the host slot this thread's last ETIMEDOUT (create, release) waited for, or -1
        .def("wait_host", &PoolHandle::wait_host);
}

#ifdef CXLKIT_TESTING  // crash points: testing builds only
void crash_at(const std::string &point, int nth) {
    cxk::py::check(cxk_pool_crash_at(point.c_str(), nth), "crash point " + point);
}

void stop_at(const std::string &point, int count) {
    cxk::py::check(cxk_pool_stop_at(point.c_str(), count), "stop point " + point);
}
#endif

// Upgrading a version 1 pool in place: what the upgrade found, and its errno (the caller
// names the error: it knows the host).
cxk::py::PoolUpgradeRecord upgrade(const std::string &path, bool shared) {
    cxk::py::PoolUpgradeRecord x{};
    int r;
    {
        nb::gil_scoped_release unlock;  // walks every partition's chain
        r = cxk_pool_upgrade(path.c_str(), shared ? CXK_POOL_SHARED : 0, &x);
    }
    x.error = r < 0 ? -r : 0;
    return x;
}

struct cxk_pool_probe_info probe(const std::string &path) {
    cxk_pool_probe_info x{};
    cxk::py::check(cxk_pool_probe(path.c_str(), &x), path);
    return x;
}

std::tuple<uint64_t, uint64_t> dax_geometry(const std::string &root, const std::string &name) {
    uint64_t size = 0, align = 0;
    cxk::py::check(cxk_pool_dax_geometry(root.c_str(), name.c_str(), &size, &align), name);
    return std::make_tuple(size, align);
}

void bind_functions(nb::module_ &m) {
#ifdef CXLKIT_TESTING
    m.def("pool_crash_at", &crash_at);
    m.def("pool_stop_at", &stop_at);
#endif
    m.def("pool_upgrade", &upgrade, nb::arg("path"), nb::arg("shared") = false);
    m.def("pool_probe", &probe, nb::arg("path"));
    m.def("pool_dax_geometry", &dax_geometry);
}

}  // namespace

CXK_BIND(pool) {
    using namespace cxk::py;
    bind_constants(m);
    bind_object(m);
    bind_handle(m);
    bind_functions(m);
}
