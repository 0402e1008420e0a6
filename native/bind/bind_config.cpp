// bind_config.cpp — the CXLKIT_* table (cxk_config_*) as cxlkit._native.config_table():
// one ConfigEntry per variable, its attributes read-only.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <string>
#include <vector>

#include "bind/bind.h"
#include "cxlkit.h"

namespace {

const char *type_name(uint32_t t) {
    static const char *const kNames[] = {"string", "path",     "uint", "bool",  "choice",
                                         "micros", "fraction", "size", "faults", "stripe"};
    return t < sizeof kNames / sizeof kNames[0] ? kNames[t] : "string";
}

struct ConfigEntry {
    std::string name, type, default_value, range, reader, doc, why;
    std::optional<std::string> value;  // None: unset
    bool valid;
};

std::vector<ConfigEntry> config_table() {
    std::vector<ConfigEntry> all;
    for (int i = 0; i < cxk_config_count(); ++i) {
        struct cxk_config_entry e{};
        e.struct_size = sizeof e;
        cxk::py::check(cxk_config_entry(i, &e), "config entry " + std::to_string(i));
        all.push_back({e.name, type_name(e.type), e.default_value, e.range, e.reader, e.doc,
                       e.why, e.value ? std::optional<std::string>(e.value) : std::nullopt,
                       e.valid != 0});
    }
    return all;
}

}  // namespace

CXK_BIND(config) {
    namespace nb = nanobind;
    nb::class_<ConfigEntry>(m, "ConfigEntry")
        .def_ro("name", &ConfigEntry::name)
        .def_ro("type", &ConfigEntry::type)
        .def_ro("default", &ConfigEntry::default_value)
        .def_ro("range", &ConfigEntry::range)
        .def_ro("reader", &ConfigEntry::reader)
        .def_ro("doc", &ConfigEntry::doc)
        .def_ro("value", &ConfigEntry::value)
        .def_ro("valid", &ConfigEntry::valid)
        .def_ro("why", &ConfigEntry::why)
        .def("__repr__", [](const ConfigEntry &e) {
            return "ConfigEntry(" + e.name + "=" + (e.value ? *e.value : e.default_value) + ")";
        });
    m.def("config_table", &config_table,
          "Every CXLKIT_* variable of the native table, with the environment's value now");
}
