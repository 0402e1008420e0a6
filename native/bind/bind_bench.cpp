// bind_bench.cpp — binding of the benchmark kernels: each takes buffers (a cxlkit.Buffer
// placed on a node, or any writable buffer) and runs with the GIL released.
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <string>
#include <vector>

#include "bind/bind_pool.h"
#include "cxlkit.h"

namespace cxk::py {
namespace {

// A caller's buffer for the duration of a call (its memory stays mapped while we run);
// ValueError naming `what` when it is empty.
struct View : Buffer {
    View(nb::handle obj, bool writable, const char *what)
        : Buffer(obj, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) {
        if (size() == 0) throw nb::value_error((std::string(what) + " is empty").c_str());
    }
};

}  // namespace
}  // namespace cxk::py

CXK_BIND(bench) {
    using namespace cxk::py;
    // dicts, not records: bench-only constant name -> code tables built once at import
    nb::dict kinds;
    kinds["read"] = int(CXK_BENCH_READ);
    kinds["write"] = int(CXK_BENCH_WRITE);
    kinds["copy"] = int(CXK_BENCH_COPY);
    kinds["nt_write"] = int(CXK_BENCH_NT_WRITE);
    m.attr("BENCH_KINDS") = kinds;
    nb::dict methods;
    methods["memcpy"] = int(CXK_COPY_MEMCPY);
    methods["nt"] = int(CXK_COPY_NT);
    methods["flush"] = int(CXK_COPY_FLUSH);
    methods["invalidate"] = int(CXK_COPY_INVALIDATE);
    m.attr("BENCH_COPY_METHODS") = methods;
    m.attr("BENCH_MAX_THREADS") = CXK_BENCH_MAX_THREADS;

    m.def("bench_chase_init", [](nb::handle buf, size_t stride, uint64_t seed) {
        View v(buf, true, "chase buffer");
        int r;
        {
            nb::gil_scoped_release unlock;
            r = cxk_bench_chase_init(v.data(), v.size(), stride, seed);
        }
        check(r, "chase buffer");
    }, nb::arg("buf"), nb::arg("stride"), nb::arg("seed"));

    m.def("bench_chase", [](nb::handle buf, uint64_t nloads, int cpu) {
        View v(buf, false, "chase buffer");
        double ns = 0, wall = 0;
        int r;
        {
            nb::gil_scoped_release unlock;
            r = cxk_bench_chase(v.data(), nloads, cpu, &ns, &wall);
        }
        check(r, "cpu " + std::to_string(cpu));
        return std::make_tuple(ns, wall);
    }, nb::arg("buf"), nb::arg("nloads"), nb::arg("cpu"));

    m.def("bench_chase_from", [](nb::handle buf, size_t offset, uint64_t nloads, int cpu) {
        View v(buf, false, "chase buffer");
        const char *base = static_cast<const char *>(v.data());
        const void *cursor = base + std::min(offset, v.size());
        double ns = 0, wall = 0;
        int r = -EINVAL;
        if (offset < v.size()) {
            nb::gil_scoped_release unlock;
            r = cxk_bench_chase_from(base, v.size(), &cursor, nloads, cpu, &ns, &wall);
        }
        check(r, "chase buffer offset " + std::to_string(offset) + ", cpu " +
                     std::to_string(cpu));
        return std::make_tuple(ns, wall, size_t(static_cast<const char *>(cursor) - base));
    }, nb::arg("buf"), nb::arg("offset"), nb::arg("nloads"), nb::arg("cpu"));

    m.def("bench_bandwidth", [](nb::handle dst, nb::handle src, int kind, uint32_t nthreads,
                                const std::vector<int32_t> &cpus, uint32_t reps, uint32_t passes) {
        View d(dst, kind != CXK_BENCH_READ, "buffer");
        std::unique_ptr<View> s;
        if (kind == CXK_BENCH_COPY) s = std::make_unique<View>(src, false, "source buffer");
        if (s && s->size() < d.size()) throw nb::value_error("source buffer is smaller than dst");
        cxk_bench_bw o{kind, nthreads, cpus.empty() ? nullptr : cpus.data(),
                       uint32_t(cpus.size()), reps, passes};
        std::vector<double> out(reps ? reps : 1), oncpu(reps ? reps : 1);
        size_t n = d.size() / 64 * 64;
        int r;
        {
            nb::gil_scoped_release unlock;
            r = cxk_bench_bandwidth_ex(d.data(), s ? s->data() : nullptr, n, &o, out.data(),
                                       oncpu.data());
        }
        check(r, "bandwidth run");
        return std::make_tuple(out, oncpu);
    }, nb::arg("dst"), nb::arg("src").none(), nb::arg("kind"), nb::arg("nthreads"), nb::arg("cpus"),
       nb::arg("reps"), nb::arg("passes"));

    m.def("bench_loaded_latency", [](nb::handle chase, nb::handle gen, int chase_cpu, int kind,
                                     uint32_t ngen, const std::vector<int32_t> &gen_cpus,
                                     double rate, uint64_t duration_ns) {
        View c(chase, false, "chase buffer");
        View g(gen, true, "load buffer");
        cxk_bench_loaded o{chase_cpu, kind, ngen, gen_cpus.empty() ? nullptr : gen_cpus.data(),
                           uint32_t(gen_cpus.size()), rate, duration_ns};
        double ns = 0, bps = 0;
        int r;
        {
            nb::gil_scoped_release unlock;
            r = cxk_bench_loaded_latency(c.data(), g.data(), g.size(), &o, &ns, &bps);
        }
        check(r, "loaded-latency run");
        return std::make_tuple(ns, bps);
    }, nb::arg("chase"), nb::arg("gen"), nb::arg("chase_cpu"), nb::arg("kind"), nb::arg("ngen"),
       nb::arg("gen_cpus"), nb::arg("rate"), nb::arg("duration_ns"));

    m.def("bench_copy", [](nb::handle dst, nb::handle src, size_t size, int method,
                           uint64_t ncopies, int cpu) {
        View d(dst, true, "destination buffer");
        View s(src, false, "source buffer");
        double ns = 0;
        int r;
        {
            nb::gil_scoped_release unlock;
            r = cxk_bench_copy(d.data(), s.data(), std::min(d.size(), s.size()), size, method,
                               ncopies, cpu, &ns);
        }
        check(r, "copy run");
        return ns;
    }, nb::arg("dst"), nb::arg("src"), nb::arg("size"), nb::arg("method"), nb::arg("ncopies"),
       nb::arg("cpu"));

    // bench/pool.py: median ns of one name lookup (cxk_bench_pool_lookup) in a cxlkit.Pool,
    // under a hold of the pool (a close waits for it)
    m.def("bench_pool_lookup", [](nb::handle pool, const std::vector<std::string> &names) {
        std::vector<const char *> ptrs;
        for (const auto &s : names) ptrs.push_back(s.c_str());
        nb::object h = pool_handle(pool);
        PoolHold use = hold_pool(h);
        double ns = 0;
        int r;
        {
            nb::gil_scoped_release unlock;
            r = cxk_bench_pool_lookup(use.get(), ptrs.data(), ptrs.size(), &ns);
        }
        check(r, "pool lookup benchmark");
        return ns;
    }, nb::arg("pool"), nb::arg("names"));

    m.def("bench_hugepages", [](nb::handle buf) {
        View v(buf, false, "buffer");
        check(cxk_bench_hugepages(v.data(), v.size()), "buffer");
    }, nb::arg("buf"));
}
