// bind_adam.cpp — binding of the Adam kernel: one step over a list of tensors (numpy arrays,
// torch tensors or any DLPack/buffer-protocol CPU array, without copies) and AdamTeam, the
// per-node thread teams. Arrays are taken unconstrained so nanobind never converts (copies)
// one: a copy would silently receive the update. Shape, dtype size and contiguity are
// checked here; the caller (cxlkit.train.adam) says what the 16-bit dtypes are.
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cerrno>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "bind/bind.h"
#include "cxlkit.h"

namespace cxk::py {
namespace {

using Arr = nb::ndarray<>;
using RoArr = nb::ndarray<nb::ro>;
// (lr, beta1, beta2, eps, weight_decay, grad_scale, step, flags, simd)
using HParams = std::tuple<double, double, double, double, double, double, int64_t, uint32_t,
                           int32_t>;
// (param, exp_avg, exp_avg_sq, grad, grad_dtype, param_copy or None, copy_dtype)
using TensorArgs = std::tuple<Arr, Arr, Arr, RoArr, int32_t, std::optional<Arr>, int32_t>;

size_t dtype_bytes(int32_t dt) { return dt == CXK_DTYPE_F32 ? 4 : 2; }

template <class A>
void check_array(const A &a, const char *what, size_t idx, size_t itemsize, size_t n) {
    const std::string name = std::string(what) + " of tensor " + std::to_string(idx);
    if (a.device_type() != nb::device::cpu::value)
        throw nb::value_error((name + ": expected a CPU array").c_str());
    if (size_t(a.dtype().bits) != itemsize * 8 || a.dtype().lanes != 1)
        throw nb::value_error((name + ": expected " + std::to_string(itemsize * 8) +
                               "-bit elements, got " + std::to_string(a.dtype().bits))
                                  .c_str());
    if (a.size() != n)
        throw nb::value_error((name + ": " + std::to_string(a.size()) + " elements, expected " +
                               std::to_string(n))
                                  .c_str());
    int64_t want = 1;  // C-contiguous: strides (in elements) are suffix products of the shape
    for (size_t d = a.ndim(); n != 0 && d-- > 0;) {  // an empty array has any strides
        if (a.shape(d) != 1 && a.stride(d) != want)
            throw nb::value_error((name + ": expected a contiguous array").c_str());
        want *= int64_t(a.shape(d));
    }
}

cxk_adam_hparams to_hparams(const HParams &h) {
    cxk_adam_hparams p{};
    std::tie(p.lr, p.beta1, p.beta2, p.eps, p.weight_decay, p.grad_scale, p.step, p.flags,
             p.simd) = h;
    return p;
}

std::vector<cxk_adam_tensor> to_tensors(const std::vector<TensorArgs> &ts) {
    std::vector<cxk_adam_tensor> out;
    out.reserve(ts.size());
    for (size_t i = 0; i < ts.size(); ++i) {
        const auto &[p, m, v, g, gdt, copy, cdt] = ts[i];
        if (gdt < CXK_DTYPE_F32 || gdt > CXK_DTYPE_F16)
            throw nb::value_error(("grad_dtype of tensor " + std::to_string(i) + ": " +
                                   std::to_string(gdt)).c_str());
        if (copy.has_value() != (cdt != CXK_DTYPE_NONE) || cdt < CXK_DTYPE_NONE ||
            cdt > CXK_DTYPE_F16)
            throw nb::value_error(("param_copy/copy_dtype of tensor " + std::to_string(i) +
                                   " do not match").c_str());
        const size_t n = p.size();
        if (p.dtype() != nb::dtype<float>())
            throw nb::value_error(("param of tensor " + std::to_string(i) +
                                   ": expected float32").c_str());
        check_array(p, "param", i, 4, n);
        check_array(m, "exp_avg", i, 4, n);
        check_array(v, "exp_avg_sq", i, 4, n);
        if (m.dtype() != nb::dtype<float>() || v.dtype() != nb::dtype<float>())
            throw nb::value_error(("exp_avg/exp_avg_sq of tensor " + std::to_string(i) +
                                   ": expected float32").c_str());
        check_array(g, "grad", i, dtype_bytes(gdt), n);
        cxk_adam_tensor t{};
        t.param = static_cast<float *>(p.data());
        t.exp_avg = static_cast<float *>(m.data());
        t.exp_avg_sq = static_cast<float *>(v.data());
        t.grad = g.data();
        t.n = n;
        t.grad_dtype = gdt;
        t.copy_dtype = cdt;
        if (copy) {
            check_array(*copy, "param_copy", i, dtype_bytes(cdt), n);
            t.param_copy = copy->data();
        }
        out.push_back(t);
    }
    return out;
}

// (param, exp_avg, exp_avg_sq) the updated values go to (adam_step_into)
using OutArgs = std::tuple<Arr, Arr, Arr>;

bool shares_bytes(const void *a, size_t an, const void *b, size_t bn) {
    const uintptr_t x = uintptr_t(a), y = uintptr_t(b);
    return an && bn && x < y + bn && y < x + an;
}

// Each output: float32, contiguous, n elements; exactly its input array or sharing no byte
// with the tensor's arrays or the other outputs (the C call's rule, named here per array).
std::vector<cxk_adam_out> to_outs(const std::vector<OutArgs> &os,
                                  const std::vector<cxk_adam_tensor> &t) {
    if (os.size() != t.size())
        throw nb::value_error(("outs: " + std::to_string(os.size()) + " entries for " +
                               std::to_string(t.size()) + " tensors").c_str());
    static const char *names[3] = {"param", "exp_avg", "exp_avg_sq"};
    std::vector<cxk_adam_out> out(os.size());
    for (size_t i = 0; i < os.size(); ++i) {
        const auto &[p, m, v] = os[i];
        const Arr *arr[3] = {&p, &m, &v};
        const size_t n = size_t(t[i].n), nb = n * 4;
        float *in[3] = {t[i].param, t[i].exp_avg, t[i].exp_avg_sq};
        float *o[3];
        for (int a = 0; a < 3; ++a) {
            const std::string what = std::string("out ") + names[a];
            check_array(*arr[a], what.c_str(), i, 4, n);
            if (arr[a]->dtype() != nb::dtype<float>())
                throw nb::value_error((what + " of tensor " + std::to_string(i) +
                                       ": expected float32").c_str());
            o[a] = static_cast<float *>(arr[a]->data());
        }
        const size_t gb = n * dtype_bytes(t[i].grad_dtype);
        const size_t cb = t[i].param_copy ? n * dtype_bytes(t[i].copy_dtype) : 0;
        for (int a = 0; a < 3 && n; ++a) {
            bool bad = shares_bytes(o[a], nb, t[i].grad, gb) ||
                       shares_bytes(o[a], nb, t[i].param_copy, cb);
            for (int b = 0; b < 3; ++b) {
                if (b != a && shares_bytes(o[a], nb, o[b], nb)) bad = true;
                if (!(a == b && o[a] == in[b]) && shares_bytes(o[a], nb, in[b], nb)) bad = true;
            }
            if (bad)
                throw nb::value_error(("out " + std::string(names[a]) + " of tensor " +
                                       std::to_string(i) +
                                       ": overlaps another array (an output is its own input "
                                       "array exactly, or shares no byte with the others)")
                                          .c_str());
        }
        out[i] = {o[0], o[1], o[2]};
    }
    return out;
}

struct AdamTeam {
    cxk_adam_team *team = nullptr;
    // cxk_adam_team_step takes one step at a time per team, and steps run without the GIL:
    // Python threads sharing a team take turns here, and close waits for a running step
    mutable std::mutex mu;

    AdamTeam(const std::vector<int> &nodes, const std::vector<unsigned> &threads,
             uint64_t chunk_bytes, bool pin) {
        if (nodes.size() > CXK_MAX_POLICY_NODES)
            throw nb::value_error("an AdamTeam names at most 64 nodes");
        if (!threads.empty() && threads.size() != nodes.size())
            throw nb::value_error("threads must give one count per node");
        cxk_adam_team_opts o{};
        o.nnodes = uint32_t(nodes.size());
        for (size_t i = 0; i < nodes.size(); ++i) {
            o.nodes[i] = nodes[i];
            o.threads[i] = threads.empty() ? 0 : threads[i];
        }
        o.chunk_bytes = chunk_bytes;
        o.pin = pin ? 1 : 0;
        check(cxk_adam_team_create(&o, &team), "adam team");
    }
    // A team on the process's OpenMP runtime (cxk_adam_team_create_omp).
    AdamTeam(const std::optional<std::string> &runtime, unsigned nthreads, uint64_t chunk_bytes) {
        const char *rt = runtime ? runtime->c_str() : nullptr;
        int r = cxk_adam_team_create_omp(rt, nthreads, chunk_bytes, &team);
        if (r == -ENOENT)
            raise_errno(ENOENT, "OpenMP runtime " + (runtime ? "'" + *runtime + "'" :
                                std::string("(libgomp, libiomp5, libomp)")) +
                                    " is not loaded in this process");
        check(r, "adam OpenMP team");
    }
    ~AdamTeam() { cxk_adam_team_destroy(team); }
    void require_open() const {
        if (!team) throw nb::value_error("AdamTeam is closed");
    }
    void close() {
        nb::gil_scoped_release unlock;  // a step holding mu finishes without the GIL
        std::lock_guard<std::mutex> lk(mu);
        cxk_adam_team_destroy(team);
        team = nullptr;
    }
    // [(node, threads, first cpu or -1, chunks in the last step)]
    std::vector<std::tuple<int, unsigned, int, uint64_t>> info() const {
        std::lock_guard<std::mutex> lk(mu);  // no step writes the counts, no close frees them
        require_open();
        uint32_t n = 0;
        check(cxk_adam_team_info(team, 0, nullptr, nullptr, nullptr, nullptr, &n), "adam team");
        std::vector<int32_t> nodes(n), cpus(n);
        std::vector<uint32_t> threads(n);
        std::vector<uint64_t> chunks(n);
        check(cxk_adam_team_info(team, n, nodes.data(), threads.data(), cpus.data(),
                                 chunks.data(), &n),
              "adam team");
        std::vector<std::tuple<int, unsigned, int, uint64_t>> out;
        for (uint32_t i = 0; i < n; ++i) out.emplace_back(nodes[i], threads[i], cpus[i], chunks[i]);
        return out;
    }
};

}  // namespace
}  // namespace cxk::py

namespace cxk::py {
namespace {

// One step, in place (os NULL) or into os's arrays; -errno raised as OSError, with CXLKIT_SIMD
// named when it is the bad input.
// A folded step's arguments (adam_step_into_sum): 3 image offsets per tensor, the parts.
struct Fold {
    const std::vector<uint64_t> *offs = nullptr;
    cxk_sum_parts *in = nullptr, *out = nullptr;
};

uint64_t step(const HParams &hp, const std::vector<TensorArgs> &ts,
              const std::vector<OutArgs> *os, AdamTeam *team, const Fold &f = {}) {
    cxk_adam_hparams h = to_hparams(hp);
    std::vector<cxk_adam_tensor> t = to_tensors(ts);
    std::vector<cxk_adam_out> o;
    if (os) o = to_outs(*os, t);
    const cxk_adam_out *op = os ? o.data() : nullptr;
    if (f.offs && f.offs->size() != 3 * t.size())
        throw nb::value_error(("img_offs: " + std::to_string(f.offs->size()) +
                               " offsets, expected 3 per tensor (" +
                               std::to_string(3 * t.size()) + ")").c_str());
    const uint64_t *offs = f.offs ? f.offs->data() : nullptr;
    if (team) team->require_open();
    int r;
    uint64_t resynced = 0;
    bool closed = false;
    {
        nb::gil_scoped_release unlock;  // a step over a large model takes a while
        cxk_adam_step_desc d{};
        d.struct_size = sizeof d;
        d.hparams = &h;
        d.tensors = t.data();
        d.ntensors = t.size();
        d.out = os ? op : nullptr;
        if (offs) {
            d.img_off = offs;
            d.in_sum = f.in;
            d.out_sum = f.out;
        }
        if (os && !op && !t.empty()) {
            r = -EINVAL;
        } else if (team) {
            std::lock_guard<std::mutex> lk(team->mu);
            closed = team->team == nullptr;  // closed by another thread meanwhile
            d.team = team->team;
            r = closed ? 0 : cxk_adam_run(&d);
        } else {
            r = cxk_adam_run(&d);
        }
        resynced = d.resynced;
    }
    if (closed) team->require_open();
    check(r, team ? "adam step (node query)" : "adam step");
    return resynced;  // elements re-read from param_copy (ADAM_RESYNC)
}

// A writable array of 8 uint64 (a[4], c[4]) as a cxk_sum_parts.
cxk_sum_parts *parts_of(const std::optional<Arr> &a, const char *what) {
    if (!a) return nullptr;
    if (a->dtype() != nb::dtype<uint64_t>() || a->size() != 8 || a->ndim() != 1 ||
        a->stride(0) != 1 || a->device_type() != nb::device::cpu::value)
        throw nb::value_error((std::string(what) + ": expected a contiguous uint64 array of 8 "
                               "(the checksum parts a[4], c[4])").c_str());
    return static_cast<cxk_sum_parts *>(a->data());
}

}  // namespace
}  // namespace cxk::py

CXK_BIND(adam) {
    using namespace cxk::py;
    m.attr("DTYPE_NONE") = int(CXK_DTYPE_NONE);
    m.attr("DTYPE_F32") = int(CXK_DTYPE_F32);
    m.attr("DTYPE_BF16") = int(CXK_DTYPE_BF16);
    m.attr("DTYPE_F16") = int(CXK_DTYPE_F16);
    m.attr("ADAM_DECOUPLED") = CXK_ADAM_DECOUPLED;
    m.attr("ADAM_MAXIMIZE") = CXK_ADAM_MAXIMIZE;
    m.attr("ADAM_BIAS_CORRECTION") = CXK_ADAM_BIAS_CORRECTION;
    m.attr("ADAM_NT_STATE") = CXK_ADAM_NT_STATE;
    m.attr("ADAM_NT_COPY") = CXK_ADAM_NT_COPY;
    m.attr("ADAM_RESYNC") = CXK_ADAM_RESYNC;
    m.attr("ADAM_TRAFFIC") = CXK_ADAM_TRAFFIC;

    m.def("adam_simd", [] { return int(check(cxk_adam_simd(), "CXLKIT_SIMD")); });
    m.def("simd_name", [](int s) { return std::string(cxk_simd_name(s)); });

    nb::class_<AdamTeam>(m, "AdamTeam")
        .def(nb::init<const std::vector<int> &, const std::vector<unsigned> &, uint64_t, bool>(),
             nb::arg("nodes"), nb::arg("threads"), nb::arg("chunk_bytes"), nb::arg("pin"))
        .def_static(
            "openmp",
            [](const std::optional<std::string> &runtime, unsigned nthreads, uint64_t chunk_bytes) {
                return new AdamTeam(runtime, nthreads, chunk_bytes);
            },
            nb::arg("runtime").none(), nb::arg("nthreads"), nb::arg("chunk_bytes"),
            nb::rv_policy::take_ownership)
        .def("info", &AdamTeam::info)
        .def("close", &AdamTeam::close)
        .def_prop_ro("closed", [](const AdamTeam &t) { return t.team == nullptr; });

    m.def(
        "adam_step",
        [](const HParams &hp, const std::vector<TensorArgs> &ts, AdamTeam *team) {
            return step(hp, ts, nullptr, team);
        },
        nb::arg("hparams"), nb::arg("tensors"), nb::arg("team").none());
    // The update read from tensors' arrays and written to outs' (cxk_adam_step_into).
    m.def(
        "adam_step_into",
        [](const HParams &hp, const std::vector<TensorArgs> &ts, const std::vector<OutArgs> &os,
           AdamTeam *team) { return step(hp, ts, &os, team); },
        nb::arg("hparams"), nb::arg("tensors"), nb::arg("outs"), nb::arg("team").none());
    // adam_step_into with the payload checksum folded in (cxk_adam_step_into_sum).
    m.def(
        "adam_step_into_sum",
        [](const HParams &hp, const std::vector<TensorArgs> &ts, const std::vector<OutArgs> &os,
           const std::vector<uint64_t> &offs, std::optional<Arr> in_parts,
           std::optional<Arr> out_parts, AdamTeam *team) {
            Fold f{&offs, parts_of(in_parts, "in_parts"), parts_of(out_parts, "out_parts")};
            return step(hp, ts, &os, team, f);
        },
        nb::arg("hparams"), nb::arg("tensors"), nb::arg("outs"), nb::arg("img_offs"),
        nb::arg("in_parts").none(), nb::arg("out_parts").none(), nb::arg("team").none());
    m.def(
        "sum_parts_add",
        [](Arr parts, RoArr data, uint64_t img_off) {
            cxk_sum_parts *p = parts_of(parts, "parts");
            if (data.ndim() != 1 || (data.size() > 1 && data.stride(0) != 1) ||
                data.device_type() != nb::device::cpu::value)
                throw nb::value_error("data: expected a contiguous 1-d CPU array");
            const uint64_t nbytes = uint64_t(data.nbytes());
            check(cxk_adam_sum_add(p, data.data(), img_off, nbytes),
                  "sum_parts_add (offset and size multiples of 4)");
        },
        nb::arg("parts"), nb::arg("data"), nb::arg("img_off"));
    m.def(
        "sum_parts_finish",
        [](Arr parts, uint64_t nbytes) {
            return cxk_adam_sum_finish(parts_of(parts, "parts"), nbytes);
        },
        nb::arg("parts"), nb::arg("image_nbytes"));
}
