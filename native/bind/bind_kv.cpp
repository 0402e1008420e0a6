// bind_kv.cpp — binding of the KV copy engine: KVPlan (a validated copy of a cxk_kv_plan) with
// batched gather/scatter over image addresses, the block checksum, and the KV store's batched
// put/get/lookup of blocks (kv_put / kv_get / kv_lookup) over a cxlkit.Pool's own handle
// (bind_pool.h). Everything else the store does in a pool goes through cxlkit.Pool / PoolObject.
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

// ---- batched block calls on the cxk_pool of a cxlkit.Pool (the one pool face) -------------
namespace cxk::py {
namespace {

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

// put and get: check lengths, pack names, keys and layout, run fn without the GIL under a hold
// of the pool (a concurrent close waits for it); returns (fn's count, per-block status),
// status starting at `untried` for blocks fn never reaches
std::pair<int, std::vector<int>> batch(nb::handle pool, BatchFn fn, const char *what,
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
    nb::object h = pool_handle(pool);  // keeps the handle alive for the call
    PoolHold use = hold_pool(h);
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
    m.def(
        "kv_put",
        [](nb::handle pool, const KVPlan &plan, const std::vector<std::string> &names,
           const std::vector<nb::bytes> &keys, nb::bytes layout, Vec1<int64_t> ids,
           unsigned flags) {
            return batch(pool, cxk_kv_put, "put", plan, names, keys, layout, ids, flags, 0);
        },
        nb::arg("pool"), nb::arg("plan"), nb::arg("names"), nb::arg("keys"), nb::arg("layout"),
        nb::arg("block_ids"), nb::arg("flags"));
    m.def(
        "kv_get",
        [](nb::handle pool, const KVPlan &plan, const std::vector<std::string> &names,
           const std::vector<nb::bytes> &keys, nb::bytes layout, Vec1<int64_t> ids,
           unsigned flags) {
            // 1 = not tried: get stops at the first block that fails
            return batch(pool, cxk_kv_get, "get", plan, names, keys, layout, ids, flags, 1);
        },
        nb::arg("pool"), nb::arg("plan"), nb::arg("names"), nb::arg("keys"), nb::arg("layout"),
        nb::arg("block_ids"), nb::arg("flags"));
    m.def(
        "kv_lookup",
        [](nb::handle pool, const std::vector<std::string> &names) {
            Names nm(names);
            size_t hits = 0;
            nb::object h = pool_handle(pool);
            PoolHold use = hold_pool(h);
            check(cxk_kv_lookup(use.get(), nm.ptrs.data(), names.size(), &hits), "kv lookup");
            return hits;
        },
        nb::arg("pool"), nb::arg("names"));
}
