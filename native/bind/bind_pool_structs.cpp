// bind_pool_structs.cpp — the pool's C result structs bound as they are (read-only attributes
// over the C struct, no dict in between): cxk_pool_stat and cxk_pool_host, which
// PoolHandle.stat() and .hosts() return.
#include <nanobind/stl/string.h>

#include <cstring>
#include <string>

#include "bind/bind.h"
#include "cxlkit.h"

namespace {

namespace nb = nanobind;

template <size_t N> std::string text(const char (&s)[N]) { return std::string(s, strnlen(s, N)); }

void bind_stat(nb::module_ &m) {
    using S = struct cxk_pool_stat;
    nb::class_<S>(m, "PoolStatC")
        .def_ro("size", &S::size)
        .def_ro("partition_bytes", &S::partition_bytes)
        .def_ro("used_bytes", &S::used_bytes)
        .def_ro("free_bytes", &S::free_bytes)
        .def_ro("objects", &S::objects)
        .def_ro("objects_host", &S::objects_host)
        .def_ro("max_objects", &S::max_objects)
        .def_ro("align", &S::align)
        .def_ro("lease_timeout_ns", &S::lease_timeout_ns)
        .def_ro("data_off", &S::data_off)
        .def_ro("version", &S::version)
        .def_ro("max_hosts", &S::max_hosts)
        .def_ro("host_id", &S::host_id)
        .def_ro("hosts_active", &S::hosts_active)
        .def_ro("coherence", &S::coherence)
        .def_ro("nbackings", &S::nbackings)
        .def_prop_ro("uuid", [](const S &s) {
            return nb::bytes(reinterpret_cast<const char *>(s.uuid), sizeof s.uuid);
        })
        .def_prop_ro("kind", [](const S &s) { return text(s.kind); })
        .def_ro("extent_bytes", &S::extent_bytes)
        .def_ro("nextents", &S::nextents)
        .def_ro("extents_held", &S::extents_held)
        .def_ro("extents_free", &S::extents_free)
        .def_ro("names_host", &S::names_host);
}

void bind_host(nb::module_ &m) {
    using H = struct cxk_pool_host;
    nb::class_<H>(m, "PoolHostC")
        .def_ro("slot", &H::slot)
        .def_ro("state", &H::state)
        .def_prop_ro("tag", [](const H &h) {
            return nb::bytes(h.tag, strnlen(h.tag, sizeof h.tag));
        })
        .def_ro("pid", &H::pid)
        .def_ro("heartbeat_age_ns", &H::heartbeat_age_ns)
        .def_ro("extents", &H::extents)
        .def_ro("held_bytes", &H::held_bytes)
        .def_ro("used_bytes", &H::used_bytes)
        .def_ro("objects", &H::objects);
}

}  // namespace

CXK_BIND(pool_structs) {
    bind_stat(m);
    bind_host(m);
}
