// bind_policy.cpp — binding of placement: Mapping (a page-aligned allocation that exports the
// buffer protocol), policy application to any buffer, residency, task policy, pinning.
#include <sys/mman.h>

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <vector>

#include "bind/bind.h"
#include "cxlkit.h"

namespace cxk::py {
namespace {

// A policy crosses as (mode, nodes, weights, chunk_bytes); Python validated it first,
// cxk_policy_check validates it again here.
using PolicyTuple = std::tuple<int, std::vector<int>, std::vector<unsigned>, uint64_t>;

cxk_policy to_policy(const PolicyTuple &t) {
    cxk_policy p;
    std::memset(&p, 0, sizeof p);
    const auto &[mode, nodes, weights, chunk] = t;
    if (nodes.size() > CXK_MAX_POLICY_NODES)
        throw nb::value_error("policy names more than 64 nodes");
    p.mode = mode;
    p.nnodes = uint32_t(nodes.size());
    for (size_t i = 0; i < nodes.size(); ++i) {
        p.nodes[i] = nodes[i];
        p.weights[i] = i < weights.size() ? weights[i] : 1;
    }
    p.chunk_bytes = chunk;
    check(cxk_policy_check(&p), "policy");
    return p;
}

// Page-aligned span [lo, hi) covering a buffer.
struct Span {
    void *addr;
    size_t nbytes;
};
Span page_span(const void *addr, size_t nbytes) {
    const uintptr_t ps = cxk_page_size();
    uintptr_t lo = uintptr_t(addr) & ~(ps - 1);
    uintptr_t hi = (uintptr_t(addr) + nbytes + ps - 1) & ~(ps - 1);
    return {reinterpret_cast<void *>(lo), size_t(hi - lo)};
}

struct Mapping {
    void *addr = nullptr;
    size_t nbytes = 0;     // as requested
    size_t mapped = 0;     // rounded up to the page size
    Py_ssize_t exports = 0;

    // thp: < 0 refuse transparent huge pages, 0 leave them to the system, > 0 ask for them.
    Mapping(size_t n, const PolicyTuple &pol, bool populate, int thp) {
        if (n == 0) throw nb::value_error("nbytes must be > 0");
        cxk_policy p = to_policy(pol);
        nb::gil_scoped_release unlock;  // populating a large range takes a while
        unsigned flags = (populate ? CXK_ALLOC_POPULATE : 0u) |
                         (thp < 0 ? CXK_ALLOC_NOHUGEPAGE : thp > 0 ? CXK_ALLOC_HUGEPAGE : 0u);
        int r = cxk_alloc(n, &p, flags, &addr);
        if (r < 0) {
            nb::gil_scoped_acquire lock;
            raise_errno(-r, "alloc of " + std::to_string(n) + " bytes");
        }
        nbytes = n;
        const size_t ps = cxk_page_size();
        mapped = (n + ps - 1) & ~(ps - 1);
    }
    ~Mapping() {
        if (addr) (void)cxk_unmap(addr, mapped);  // a destructor has no one to tell
    }
    void require_open() const {
        if (!addr) throw nb::value_error("buffer is closed");
    }
    ExportedRange exported() const {
        return {addr, Py_ssize_t(nbytes), false, addr ? nullptr : "buffer is closed"};
    }
    void close() {
        if (!addr) return;
        if (exports > 0)
            throw nb::buffer_error("buffer is closed while views of it exist; drop them first");
        check(cxk_unmap(addr, mapped), "buffer");
        addr = nullptr;
    }
};

// (pages per node [max_nodes], pages not present)
std::tuple<std::vector<uint64_t>, uint64_t> residency_of(void *addr, size_t nbytes,
                                                         uint32_t max_nodes) {
    std::vector<uint64_t> per_node(max_nodes, 0);
    uint64_t absent = 0;
    int r;
    {
        nb::gil_scoped_release unlock;
        r = cxk_residency(addr, nbytes, per_node.data(), max_nodes, &absent, nullptr);
    }
    check(r, "residency");
    return {per_node, absent};
}

void apply_to(void *addr, size_t nbytes, const PolicyTuple &pol, bool migrate, bool strict) {
    cxk_policy p = to_policy(pol);
    unsigned flags = (migrate ? CXK_APPLY_MIGRATE : 0u) | (strict ? CXK_APPLY_STRICT : 0u);
    int r;
    {
        nb::gil_scoped_release unlock;
        r = cxk_policy_apply(addr, nbytes, &p, flags);
    }
    check(r, "policy");
}

}  // namespace
}  // namespace cxk::py

CXK_BIND(policy) {
    using namespace cxk::py;
    // Nothing prints at exit: objects a script keeps in module globals
    // (a Buffer, Pool, Store, TieredAdamW) are not collected when the interpreter finalizes,
    // so nanobind's leak report named them (and their types and methods) on every such
    // exit. They are not leaks of ours: the process ends and the kernel takes the mappings
    // back; the pool's leases expire with the process. tests/pool/test_exit.py runs such a script.
    nb::set_leak_warnings(false);
    m.attr("MAX_POLICY_NODES") = CXK_MAX_POLICY_NODES;
    m.attr("MAX_NODE_ID") = CXK_MAX_NODE_ID;

    nb::class_<Mapping>(m, "Mapping", nb::type_slots(buffer_slots<Mapping>))
        .def(nb::init<size_t, const PolicyTuple &, bool, int>(), nb::arg("nbytes"),
             nb::arg("policy"), nb::arg("populate"), nb::arg("thp"))
        .def_prop_ro("address", [](const Mapping &s) { return uintptr_t(s.addr); })
        .def_prop_ro("nbytes", [](const Mapping &s) { return s.nbytes; })
        .def_prop_ro("closed", [](const Mapping &s) { return s.addr == nullptr; })
        .def("__len__", [](const Mapping &s) { return s.nbytes; })
        .def("close", &Mapping::close)
        .def("_residency", [](Mapping &s, uint32_t max_nodes) {
            s.require_open();
            return residency_of(s.addr, s.mapped, max_nodes);
        })
        .def("_node_of_pages", [](Mapping &s) {
            s.require_open();
            const size_t npages = s.mapped / cxk_page_size();
            auto *out = new int32_t[npages];
            nb::capsule owner(out, [](void *p) noexcept { delete[] static_cast<int32_t *>(p); });
            std::vector<uint64_t> scratch(1);
            uint64_t absent = 0;
            int r;
            {
                nb::gil_scoped_release unlock;
                r = cxk_residency(s.addr, s.mapped, scratch.data(), 1, &absent, out);
            }
            check(r, "residency");
            return nb::ndarray<nb::numpy, int32_t, nb::ndim<1>>(out, {npages}, owner);
        })
        .def("_apply", [](Mapping &s, const PolicyTuple &pol, bool migrate, bool strict) {
            s.require_open();
            apply_to(s.addr, s.mapped, pol, migrate, strict);
        })
        .def("_populate", [](Mapping &s) {
            s.require_open();
            int r;
            {
                nb::gil_scoped_release unlock;
                r = cxk_populate(s.addr, s.mapped);
            }
            check(r, "populate");
        })
        .def("_pin", [](Mapping &s) { s.require_open(); check(cxk_pin(s.addr, s.mapped), "pin"); })
        .def("_unpin", [](Mapping &s) { s.require_open(); check(cxk_unpin(s.addr), "pin"); });

    m.def("apply_to_buffer", [](nb::handle obj, const PolicyTuple &pol, bool migrate, bool strict) {
        Buffer b(obj, PyBUF_SIMPLE);
        if (b.size() == 0) throw nb::value_error("buffer is empty");
        Span s = page_span(b.data(), b.size());
        apply_to(s.addr, s.nbytes, pol, migrate, strict);
    });
    m.def("residency_of_buffer", [](nb::handle obj, uint32_t max_nodes) {
        Buffer b(obj, PyBUF_SIMPLE);
        if (b.size() == 0) throw nb::value_error("buffer is empty");
        Span s = page_span(b.data(), b.size());
        return residency_of(s.addr, s.nbytes, max_nodes);
    });
    m.def("set_task_policy", [](const PolicyTuple &pol) {
        cxk_policy p = to_policy(pol);
        check(cxk_policy_set_task(&p), "task policy");
    });
    m.def("task_policy", [] {
        int mode = 0;
        unsigned long mask[(CXK_MAX_NODE_ID + 1) / (8 * sizeof(long))] = {};
        check(cxk_get_mempolicy(&mode, mask, CXK_MAX_NODE_ID + 2, nullptr, 0), "task policy");
        std::vector<int> nodes;
        for (int n = 0; n <= CXK_MAX_NODE_ID; ++n)
            if (mask[n / (8 * sizeof(long))] & (1ul << (n % (8 * sizeof(long))))) nodes.push_back(n);
        return std::make_tuple(mode, nodes);
    });
    m.def("intended_node", [](const PolicyTuple &pol, uint64_t page_index) {
        cxk_policy p = to_policy(pol);
        return cxk_policy_intended_node(&p, page_index, cxk_page_size());
    });
}
