// bind_pool_records.cpp — cxlkit.PoolStat, HostInfo, FsckReport and ObjectInfo, and the
// upgrade's and probe's results: the pool's C result structs bound as they are
// (bind_pool_records.h) as read-only records (bind_record.h). Each attribute is converted
// when read (uuid a hex str, states and coherence as words, nanoseconds as float seconds).
#include <cstdio>
#include <cstring>
#include <string>

#include "bind/bind_pool_records.h"
#include "bind/bind_record.h"

namespace cxk::py {
namespace {

template <size_t N> nb::str text(const char (&s)[N], const char *errors) {
    return nb::steal<nb::str>(PyUnicode_DecodeUTF8(s, Py_ssize_t(strnlen(s, N)), errors));
}

// a code as its word, or the number as text when no word names it (any host writes them)
template <size_t N> nb::str word(const char *const (&words)[N], uint32_t code) {
    if (code < N && words[code]) return nb::str(words[code]);
    return nb::str(std::to_string(code).c_str());
}

nb::object seconds(int64_t ns) { return nb::float_(double(ns) / 1e9); }

const char *const kCoherence[] = {"host", "none", "sim"};  // CXK_COHERENCE_*
const char *const kHostState[] = {"free", "live", "dead", "claimed"};  // CXK_HOST_*
const char *const kObjState[] = {nullptr, "creating", "live", "dead"};  // CXK_OBJ_*

nb::object uuid_hex(const PoolStatRecord &s) {
    char hex[2 * sizeof s.uuid + 1];
    for (size_t i = 0; i < sizeof s.uuid; ++i) std::snprintf(hex + 2 * i, 3, "%02x", s.uuid[i]);
    return nb::str(hex);
}

void bind_stat(nb::module_ &m) {
    using S = PoolStatRecord;
    Record<S>(m, "PoolStat",
              "A pool's geometry and usage (Pool.stat()): read-only. partition_bytes is the data "
              "region [data_offset, data_offset + partition_bytes), which one host may fill; "
              "used_bytes, free_bytes, objects_host, extents_held and names_host are this "
              "host's (used + free == extents_held * extent_bytes); objects counts every "
              "host's published objects; extents_free those held by no host.")
        .field("path", [](const S &s) -> nb::object { return s.path; })
        .field("kind", [](const S &s) -> nb::object { return text(s.kind, "replace"); })
        .member<&S::size>("size")
        .member<&S::version>("version")
        .field("uuid", &uuid_hex)
        .member<&S::max_hosts>("max_hosts")
        .member<&S::host_id>("host_id")
        .member<&S::hosts_active>("hosts_active")
        .field("coherence", [](const S &s) -> nb::object { return word(kCoherence, s.coherence); })
        .member<&S::partition_bytes>("partition_bytes")
        .member<&S::used_bytes>("used_bytes")
        .member<&S::free_bytes>("free_bytes")
        .member<&S::objects>("objects")
        .member<&S::objects_host>("objects_host")
        .member<&S::max_objects>("max_objects")
        .member<&S::align>("align")
        .member<&S::nbackings>("nbackings")
        .field("lease_timeout_s",
               [](const S &s) -> nb::object { return seconds(int64_t(s.lease_timeout_ns)); })
        .member<&S::data_off>("data_offset")
        .member<&S::extent_bytes>("extent_bytes")
        .member<&S::nextents>("nextents")
        .member<&S::extents_held>("extents_held")
        .member<&S::extents_free>("extents_free")
        .member<&S::names_host>("names_host")
        .finish();
}

void bind_host(nb::module_ &m) {
    using H = struct cxk_pool_host;
    Record<H>(m, "HostInfo",
              "One host slot of a pool (Pool.hosts()): read-only. state: \"free\" (never "
              "claimed, or released), \"live\" (heartbeat younger than the lease timeout), "
              "\"dead\" (attached once, heartbeat stale: release frees it), \"claimed\" "
              "(claimed but never attached). name and counts are as its host last wrote them; "
              "heartbeat_age_s is None when it neither beat nor claimed.")
        .member<&H::slot>("slot")
        .field("state", [](const H &h) -> nb::object { return word(kHostState, h.state); })
        .field("name", [](const H &h) -> nb::object { return text(h.tag, "replace"); })
        .member<&H::pid>("pid")
        .field("heartbeat_age_s", [](const H &h) -> nb::object {
            return h.heartbeat_age_ns < 0 ? nb::object(nb::none()) : seconds(h.heartbeat_age_ns);
        })
        .member<&H::extents>("extents")
        .member<&H::held_bytes>("held_bytes")
        .member<&H::used_bytes>("used_bytes")
        .member<&H::objects>("objects")
        .finish();
}

bool fsck_clean(const cxk_fsck_report &f) {
    return f.errors == 0 && f.duplicate_names == 0 && f.counters_wrong == 0 &&
           f.registers_bad == 0;
}

void bind_fsck(nb::module_ &m) {
    using F = struct cxk_fsck_report;
    Record<F> r(m, "FsckReport",
                "What Pool.fsck() found: read-only counts (FsckReport(**counts) builds one, "
                "counts not given being 0). counters_wrong: hosts whose object/byte counters "
                "disagree with their block chain; counters_rebuilt: this host's, rebuilt by "
                "the repair; registers_bad: hosts whose bakery registers hold what no host "
                "writes.");
    r.member<&F::objects_live>("objects_live")
        .member<&F::objects_creating>("objects_creating")
        .member<&F::objects_dead>("objects_dead")
        .member<&F::blocks_free>("blocks_free")
        .member<&F::bytes_used>("bytes_used")
        .member<&F::bytes_free>("bytes_free")
        .member<&F::largest_free>("largest_free")
        .member<&F::reclaimed_objects>("reclaimed_objects")
        .member<&F::reclaimed_bytes>("reclaimed_bytes")
        .member<&F::repaired_entries>("repaired_entries")
        .member<&F::leases_live>("leases_live")
        .member<&F::leases_expired>("leases_expired")
        .member<&F::duplicate_names>("duplicate_names")
        .member<&F::errors>("errors")
        .member<&F::counters_wrong>("counters_wrong")
        .member<&F::counters_rebuilt>("counters_rebuilt")
        .member<&F::registers_bad>("registers_bad")
        .finish()
        .keyword_init();
    r.cls().def_prop_ro("clean", &fsck_clean,
                        "Nothing lost or untrustworthy: no broken chains, dangling entries or "
                        "duplicates, no host counters that contradict their chain, no bakery "
                        "registers no host writes.");
}

void bind_object(nb::module_ &m) {
    using O = struct cxk_obj_stat;
    Record<O> r(m, "ObjectInfo",
                "One object of a pool (Pool.list(), Pool.info()): read-only. offset: of the "
                "payload from the pool base (the same in every process); host: the owner's "
                "slot; state: \"creating\", \"live\" or \"dead\"; checksum: crc32c of the "
                "payload when recorded, else None; created: seconds since the epoch, "
                "created_ns the same exact (CLOCK_REALTIME).");
    // names are validated as written, but any host can write a header: never raise here
    r.field("name", [](const O &o) -> nb::object { return text(o.name, "backslashreplace"); })
        .member<&O::nbytes>("nbytes")
        .member<&O::off>("offset")
        .member<&O::host>("host")
        .member<&O::generation>("generation")
        .field("state", [](const O &o) -> nb::object { return word(kObjState, o.state); })
        .field("checksum", [](const O &o) -> nb::object {
            return o.checksum ? nb::object(nb::int_(o.checksum & 0xFFFFFFFFu)) : nb::none();
        })
        .field("created", [](const O &o) -> nb::object { return seconds(o.created_ns); })
        .member<&O::created_ns>("created_ns")
        .finish();
    r.cls().def_prop_ro("live", [](const O &o) { return o.state == CXK_OBJ_LIVE; },
                        "Published: open() of any host finds it.");
}

void bind_upgrade(nb::module_ &m) {
    using U = PoolUpgradeRecord;
    Record<U>(m, "PoolUpgradeInfo",
              "What upgrading a version 1 pool in place found (cxlkit.pool.upgrade reads it): "
              "read-only, as cxk_pool_upgrade_info; errno 0 when it succeeded.")
        .member<&U::from_version>("from_version")
        .member<&U::busy_host>("busy_host")
        .field("busy_tag", [](const U &u) -> nb::object { return text(u.busy_tag, "replace"); })
        .member<&U::extent_bytes>("extent_bytes")
        .member<&U::nextents>("nextents")
        .member<&U::objects>("objects")
        .member<&U::meta_off>("meta_off")
        .member<&U::cut_bytes>("cut_bytes")
        .member<&U::error>("errno")
        .finish();
}

void bind_probe(nb::module_ &m) {
    using P = struct cxk_pool_probe_info;
    Record<P>(m, "PoolProbeInfo",
              "What a pool file holds, read without opening it as a pool (cxlkit.pool.remove "
              "and the open errors read it): read-only, as cxk_pool_probe_info; superblock is "
              "0 for a whole one, else the errno of what is wrong with it.")
        .member<&P::file_type>("file_type")
        .field("superblock", [](const P &p) -> nb::object { return nb::int_(-p.superblock); })
        .member<&P::version>("version")
        .member<&P::max_hosts>("max_hosts")
        .member<&P::hosts_live>("hosts_live")
        .member<&P::hosts_dead>("hosts_dead")
        .member<&P::size>("size")
        .member<&P::dev>("dev")
        .member<&P::ino>("ino")
        .field("why", [](const P &p) -> nb::object { return text(p.why, "replace"); })
        .finish();
}

}  // namespace
}  // namespace cxk::py

CXK_BIND(pool_records) {
    using namespace cxk::py;
    bind_stat(m);
    bind_host(m);
    bind_fsck(m);
    bind_object(m);
    bind_upgrade(m);
    bind_probe(m);
}
