// bind_sim.cpp — the non-coherence simulator: what it did, the benchmark of its cost to
// production, and (testing builds only) the protocol mutations that tests turn on.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <vector>

#include "bind/bind.h"
#include "cxlkit.h"
#ifdef CXLKIT_TESTING
#include "cxlkit_testing.h"
#endif

#ifdef CXLKIT_TESTING
constexpr bool CXLKIT_TESTING_BUILD = true;
#else
constexpr bool CXLKIT_TESTING_BUILD = false;
#endif

CXK_BIND(sim) {
    using namespace cxk::py;
#ifdef CXLKIT_TESTING
    m.def("mutate", [](const std::string &name, bool on) {
        if (cxk_mutate(name.c_str(), on ? 1 : 0) != 0)
            throw nb::value_error(("mutation " + name + ": unknown").c_str());
    }, nb::arg("name"), nb::arg("on"));
    m.def("mutation_names", [] {
        std::vector<std::string> out;
        for (int i = 0; const char *n = cxk_mutation_name(i); ++i) out.emplace_back(n);
        return out;
    });
#endif
    m.attr("testing_build") = CXLKIT_TESTING_BUILD;
    m.def("sim_counts", [] {
        uint64_t c[4];
        cxk_sim_counts(c);
        return std::vector<uint64_t>(c, c + 4);
    });
    m.def("bench_sim_branch", [](uint32_t rounds, uint32_t calls) {
        double out[6];
        int r;
        {
            nb::gil_scoped_release unlock;
            r = cxk_bench_sim_branch(rounds, calls, out);
        }
        check(r, "bench_sim_branch");
        return std::vector<double>(out, out + 6);
    }, nb::arg("rounds"), nb::arg("calls"));
}
