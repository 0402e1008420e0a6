// bind_kv.cpp — binding of the KV copy engine: KVPlan (a validated copy of a cxk_kv_plan) with
// batched gather/scatter over image addresses, and the block checksum.
#include <nanobind/ndarray.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <vector>

#include "bind.h"
#include "cxlkit.h"

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
}
