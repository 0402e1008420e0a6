// bind_kv.cpp — binding of the KV copy engine: KVPlan (a validated copy of a cxk_kv_plan) with
// batched gather/scatter over image addresses, the block checksum, and KVPool: the KV store's
// batched put/get/lookup of blocks, and its counter and table accesses by pool offset, over a
// cxlkit.Pool's own handle (bind_pool.h).
#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "bind/bind_pool.h"

namespace cxk::py {
namespace {

template <typename T>
using Vec1 = nb::ndarray<const T, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
// segments arrive as int64[nsegs, 4]: (base, eng_off, img_off, nbytes); base < 2^32, so on a
// little-endian machine each row is bit-for-bit a cxk_kv_seg (base, reserved = 0, ...)
using SegArray = nb::ndarray<const int64_t, nb::shape<-1, 4>, nb::c_contig, nb::device::cpu>;

template <typename T>
std::vector<T> to_vec(const Vec1<T> &a) {
    return std::vector<T>(a.data(), a.data() + a.shape(0));
}

struct KVPlan {
    std::vector<uint64_t> bases, extents;
    std::vector<int64_t> strides;
    std::vector<cxk_kv_seg> segs;
    cxk_kv_plan plan{};

    KVPlan(Vec1<uint64_t> b, Vec1<int64_t> s, Vec1<uint64_t> e, SegArray g, uint64_t image_bytes)
        : bases(to_vec(b)), extents(to_vec(e)), strides(to_vec(s)) {
        if (bases.size() != strides.size() || bases.size() != extents.size())
            throw nb::value_error("KVPlan: bases, strides and extents differ in length");
        segs.resize(g.shape(0));
        for (size_t i = 0; i < segs.size(); ++i) {
            const int64_t *row = g.data() + 4 * i;
            if (row[0] < 0 || row[0] >= int64_t(bases.size()) || row[2] < 0 || row[3] < 0)
                throw nb::value_error("KVPlan: segment with a bad base, offset or length");
            segs[i] = cxk_kv_seg{uint32_t(row[0]), 0, row[1], uint64_t(row[2]), uint64_t(row[3])};
        }
        plan.nbases = uint32_t(bases.size());
        plan.nsegs = uint32_t(segs.size());
        plan.bases = bases.data();
        plan.block_stride = strides.data();
        plan.extent = extents.data();
        plan.segs = segs.data();
        plan.image_bytes = image_bytes;
        check(cxk_kv_plan_check(&plan), "KVPlan");
    }
};

std::vector<void *> addrs(const Vec1<uint64_t> &images) {
    std::vector<void *> out(images.shape(0));
    for (size_t i = 0; i < out.size(); ++i) out[i] = reinterpret_cast<void *>(images.data()[i]);
    return out;
}

}  // namespace
}  // namespace cxk::py

CXK_BIND(kv) {
    using namespace cxk::py;
    nb::class_<KVPlan>(m, "KVPlan")
        .def(nb::init<Vec1<uint64_t>, Vec1<int64_t>, Vec1<uint64_t>, SegArray, uint64_t>(),
             nb::arg("bases"), nb::arg("strides"), nb::arg("extents"), nb::arg("segs"),
             nb::arg("image_bytes"))
        .def_prop_ro("image_bytes", [](const KVPlan &p) { return p.plan.image_bytes; })
        .def_prop_ro("nsegs", [](const KVPlan &p) { return p.plan.nsegs; })
        .def(
            "gather",
            [](const KVPlan &p, Vec1<int64_t> ids, Vec1<uint64_t> images, unsigned flags) {
                if (ids.shape(0) != images.shape(0))
                    throw nb::value_error("gather: block_ids and images differ in length");
                auto imgs = addrs(images);
                int r;
                {
                    nb::gil_scoped_release nogil;
                    r = cxk_kv_gather(&p.plan, ids.data(), imgs.data(), imgs.size(), flags);
                }
                check(r, "kv gather");
            },
            nb::arg("block_ids"), nb::arg("images"), nb::arg("flags") = 0)
        .def(
            "scatter",
            [](const KVPlan &p, Vec1<int64_t> ids, Vec1<uint64_t> images, unsigned flags,
               bool want_sums) {
                if (ids.shape(0) != images.shape(0))
                    throw nb::value_error("scatter: block_ids and images differ in length");
                auto imgs = addrs(images);
                std::vector<const void *> cimgs(imgs.begin(), imgs.end());
                std::vector<uint64_t> sums(want_sums ? imgs.size() : 0);
                int r;
                {
                    nb::gil_scoped_release nogil;
                    r = cxk_kv_scatter(&p.plan, ids.data(), cimgs.data(), cimgs.size(), flags,
                                       want_sums ? sums.data() : nullptr);
                }
                check(r, "kv scatter");
                return sums;
            },
            nb::arg("block_ids"), nb::arg("images"), nb::arg("flags") = 0,
            nb::arg("want_sums") = false)
        .def("checksum_engine", [](const KVPlan &p, int64_t block_id) {
            uint64_t s = 0;
            check(cxk_kv_checksum_engine(&p.plan, block_id, &s), "kv checksum");
            return s;
        });
    m.def(
        "kv_checksum",
        [](uint64_t addr, size_t nbytes) {
            uint64_t s;
            {
                nb::gil_scoped_release nogil;
                s = cxk_kv_checksum(reinterpret_cast<const void *>(addr), nbytes);
            }
            return s;
        },
        nb::arg("addr"), nb::arg("nbytes"));
    m.attr("KV_FLUSH") = int(CXK_KV_FLUSH);
    m.attr("KV_NT") = int(CXK_KV_NT);
    m.attr("KV_INVALIDATE") = int(CXK_KV_INVALIDATE);
    m.attr("KV_CHECKSUM") = int(CXK_KV_CHECKSUM);
}

// ---- KVPool: block operations on the cxk_pool of a cxlkit.Pool (one handle per pool) --------
namespace cxk::py {
namespace {

struct KVPool {
    nb::object handle;  // the _native.PoolHandle: keeps the pool mapped while we exist
    bool owns = false;  // close() closes the pool too (the store opened it)
    bool closed = false;

    // A shared hold on the pool's mapping for one call (bind_pool.h): a concurrent close of
    // the pool waits for it, and calls after that raise the closed error.
    PoolHold hold() const {
        if (closed) throw nb::value_error("KV store's pool is closed");
        return hold_pool(handle);
    }
    nb::object call(const char *method) const {
        hold();
        return handle.attr(method);
    }
};

// names and keys as the C calls want them; the strings outlive the call
struct Names {
    std::vector<std::string> own;
    std::vector<const char *> ptrs;
    explicit Names(const std::vector<std::string> &names) : own(names) {
        for (auto &s : own) ptrs.push_back(s.c_str());
    }
};

std::string keys_blob(const std::vector<nb::bytes> &keys) {
    std::string out;
    for (auto &k : keys) {
        if (k.size() != 32) throw nb::value_error("keys: each key must be 32 bytes");
        out.append(k.c_str(), 32);
    }
    return out;
}

using BatchFn = int (*)(struct cxk_pool *, const struct cxk_kv_plan *, const char *const *,
                        const uint8_t *, const uint8_t *, const int64_t *, size_t, unsigned, int *);

// put and get: check lengths, pack names, keys and layout, run fn without the GIL; returns
// (fn's count, per-block status), status starting at `untried` for blocks fn never reaches
std::pair<int, std::vector<int>> batch(const KVPool &k, BatchFn fn, const char *what,
                                       const KVPlan &plan, const std::vector<std::string> &names,
                                       const std::vector<nb::bytes> &keys, nb::bytes layout,
                                       const Vec1<int64_t> &ids, unsigned flags, int untried) {
    if (names.size() != keys.size() || names.size() != ids.shape(0))
        throw nb::value_error((std::string(what) +
                               ": names, keys and block ids differ in length").c_str());
    if (layout.size() > 32) throw nb::value_error("layout: more than 32 bytes");
    uint8_t lay[32] = {};
    std::memcpy(lay, layout.c_str(), layout.size());
    Names nm(names);
    std::string kb = keys_blob(keys);
    std::vector<int> status(names.size(), untried);
    PoolHold use = k.hold();
    int r;
    {
        nb::gil_scoped_release nogil;
        r = fn(use.get(), &plan.plan, nm.ptrs.data(),
               reinterpret_cast<const uint8_t *>(kb.data()), lay, ids.data(), names.size(), flags,
               status.data());
    }
    check(r, std::string("kv ") + what);
    return {r, status};
}

}  // namespace
}  // namespace cxk::py

CXK_BIND(kvpool) {
    using namespace cxk::py;
    nb::class_<KVPool>(m, "KVPool")
        .def(
            "__init__",
            [](KVPool *self, nb::handle pool, bool owns) {
                nb::object h = pool_handle(pool);
                { PoolHold open = hold_pool(h); }  // the closed error for a closed pool
                new (self) KVPool{h, owns};
            },
            nb::arg("pool"), nb::arg("owns") = false)
        .def("close",
             [](KVPool &k) {
                 if (k.closed) return;
                 k.closed = true;
                 if (k.owns) k.handle.attr("close")();
             })
        .def_prop_ro("pool", [](const KVPool &k) { return k.handle; })
        // the mapping's address now, for a benchmark's scratch view; the library passes
        // offsets instead (an address kept across calls dangles once the pool is closed)
        .def_prop_ro("base", [](const KVPool &k) {
            PoolHold use = k.hold();
            return uint64_t(cxk_pool_base(use.get()));
        })
        .def("stat", [](const KVPool &k) { return k.call("stat")(); })
        .def("obj_stat", [](const KVPool &k, nb::str name) { return k.call("object_stat")(name); })
        .def("list", [](const KVPool &k) { return k.call("list")(); })
        .def("destroy", [](const KVPool &k, nb::str name) { k.call("destroy")(name); })
        .def("fsck", [](const KVPool &k, bool repair) { return k.call("fsck")(repair); },
             nb::arg("repair") = false)
        .def("create_counters",
             [](const KVPool &k, const std::string &name, uint64_t nbytes) {
                 // a host-owned counter object: created and published zeroed once; processes
                 // of the owner host then update it with atomics (one coherence domain)
                 PoolHold use = k.hold();
                 cxk_pool *p = use.get();
                 uint64_t off = 0;
                 int r = cxk_obj_create(p, name.c_str(), nbytes, &off);
                 if (r == 0) {
                     r = cxk_obj_publish(p, off, 0);
                     cxk_obj_close(p, off);
                 }
                 if (r < 0 && r != -EEXIST) check(r, name);
                 struct cxk_obj_stat s;
                 check(cxk_obj_stat(p, name.c_str(), &s), name);
                 return obj_stat_dict(s);
             })
        .def("put",
             [](const KVPool &k, const KVPlan &plan, const std::vector<std::string> &names,
                const std::vector<nb::bytes> &keys, nb::bytes layout, Vec1<int64_t> ids,
                unsigned flags) {
                 return batch(k, cxk_kv_put, "put", plan, names, keys, layout, ids, flags, 0);
             })
        .def("get",
             [](const KVPool &k, const KVPlan &plan, const std::vector<std::string> &names,
                const std::vector<nb::bytes> &keys, nb::bytes layout, Vec1<int64_t> ids,
                unsigned flags) {
                 // 1 = not tried: get stops at the first block that fails
                 return batch(k, cxk_kv_get, "get", plan, names, keys, layout, ids, flags, 1);
             })
        .def("hold",
             [](const KVPool &k, const std::string &name) {
                 // a reader's lease: the object's memory is not reused until release (or until
                 // this process dies and the pool expires the lease)
                 struct cxk_obj_stat s;
                 PoolHold use = k.hold();
                 check(cxk_obj_open(use.get(), name.c_str(), &s), name);
                 return obj_stat_dict(s);
             })
        .def("release",
             [](const KVPool &k, uint64_t off) {
                 PoolHold use = k.hold();
                 check(cxk_obj_close(use.get(), off), "lease");
             })
        .def("lookup", [](const KVPool &k, const std::vector<std::string> &names) {
            Names nm(names);
            size_t hits = 0;
            PoolHold use = k.hold();
            check(cxk_kv_lookup(use.get(), nm.ptrs.data(), names.size(), &hits), "kv lookup");
            return hits;
        })
        .def(
            "atomic_add",
            [](const KVPool &k, uint64_t offset, uint64_t value) {
                // a counter (u64) in a host-owned object: processes of one host are one
                // coherence domain, so a relaxed atomic add is exact among them; other hosts
                // only read it. Only this host's partition, and whole aligned words.
                PoolHold use = k.hold();
                if (offset % 8)
                    throw nb::value_error(("offset " + std::to_string(offset) +
                                           ": a counter is an 8-byte aligned u64").c_str());
                use.check_range(offset, 8, true);
                auto *w = reinterpret_cast<uint64_t *>(use.base() + offset);
                const uint64_t now = __atomic_add_fetch(w, value, __ATOMIC_RELAXED);
                // coherence "none": write the line back so other hosts' reads (which
                // invalidate first, see read below) see the count; a fence under "host"
                cxk_pool_flush(use.get(), offset, 8);
                return now;
            },
            nb::arg("offset"), nb::arg("value"))
        .def(
            "read",
            [](const KVPool &k, uint64_t offset, uint64_t nbytes) {
                // a copy of [offset, offset + nbytes) of the data region, after dropping stale
                // lines (coherence "none": pairs with the writer host's flush)
                PoolHold use = k.hold();
                use.check_range(offset, nbytes, false);
                cxk_pool_invalidate(use.get(), offset, nbytes);
                nb::bytes out(nullptr, size_t(nbytes));
                char *dst = PyBytes_AS_STRING(out.ptr());  // a fresh object: ours to fill
                if (nbytes >= (1u << 20)) {
                    nb::gil_scoped_release nogil;
                    std::memcpy(dst, use.base() + offset, nbytes);
                } else {
                    std::memcpy(dst, use.base() + offset, nbytes);
                }
                return out;
            },
            nb::arg("offset"), nb::arg("nbytes"));
}
