// bind.cpp — the nanobind module cxlkit._native: module init, the errno conversion,
// and the sys section (version, cpu features, fault injection).
#include "bind/bind.h"

#include <nanobind/stl/string.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "cxlkit.h"

namespace cxk::py {

void raise_errno(int err, const std::string &what) {
    // A refused CXLKIT_* value is the reason the library gives for an EINVAL: its message
    // (naming the variable) replaces strerror. Taken on every error so none goes stale.
    const std::string config = cxk_config_error();
    const std::string why = err == EINVAL && !config.empty() ? config : std::strerror(err);
    // OSError(errno, strerror, filename) picks the subclass (FileExistsError, ...) itself.
    PyObject *exc = PyObject_CallFunction(PyExc_OSError, "iss", err, why.c_str(), what.c_str());
    if (exc) {
        PyErr_SetObject(reinterpret_cast<PyObject *>(Py_TYPE(exc)), exc);
        Py_DECREF(exc);
    }
    throw nb::python_error();
}

namespace {
struct Part {
    std::string name;
    BindFn fn;
};
std::vector<Part> &parts() {
    static std::vector<Part> all;  // function-local: safe from static init order
    return all;
}
}  // namespace

Registrar::Registrar(const char *name, BindFn fn) { parts().push_back({name, fn}); }

void bind_all(nb::module_ &m) {
    auto all = parts();
    std::sort(all.begin(), all.end(), [](const Part &a, const Part &b) { return a.name < b.name; });
    for (const auto &p : all) p.fn(m);
}

}  // namespace cxk::py

CXK_BIND(sys) {
    using namespace cxk::py;
    m.def("version", &cxk_version);
    m.def("page_size", &cxk_page_size);
    m.def("cpu_features", &cxk_cpu_features);
    m.def(
        "fault_inject",
        [](const std::string &name, int nth, int err) {
            check(cxk_fault_inject(name.c_str(), nth, err), "fault " + name);
        },
        nb::arg("name"), nb::arg("nth"), nb::arg("err"));
    m.def("fault_clear", &cxk_fault_clear);
    m.def("fault_calls", [](const std::string &name) {
        return check(long(cxk_fault_calls(name.c_str())), "fault " + name);
    });
    m.def("memfd_create", [](const std::string &name, unsigned flags) {
        return check(cxk_memfd_create(name.c_str(), flags), name);
    });
    m.def("pin_available", [] { return cxk_pin_available() == 1; });
    m.def("thp_disable", [](bool disable) { check(cxk_thp_disable(disable), "prctl THP"); });
    // a dict, not a record: a constant name -> bit table built once at import, no C struct
    nb::dict f;
    f["clflushopt"] = int(CXK_CPU_CLFLUSHOPT);
    f["clwb"] = int(CXK_CPU_CLWB);
    f["avx2"] = int(CXK_CPU_AVX2);
    f["avx512f"] = int(CXK_CPU_AVX512F);
    f["avx512bw"] = int(CXK_CPU_AVX512BW);
    f["avx512bf16"] = int(CXK_CPU_AVX512BF16);
    f["movdir64b"] = int(CXK_CPU_MOVDIR64B);
    f["sse4.2"] = int(CXK_CPU_SSE42);
    f["fma"] = int(CXK_CPU_FMA);
    f["f16c"] = int(CXK_CPU_F16C);
    m.attr("CPU_FEATURE_BITS") = f;
    m.def("flush_kind", &cxk_flush_kind);
}

NB_MODULE(_native, m) {
    m.doc() = "cxlkit native core (libcxlkit); use the cxlkit package, not this module";
    cxk::py::bind_all(m);
}
