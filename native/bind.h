// bind.h — private to the binding floor (native/bind*.cpp, the only files that see Python):
// the one -errno -> OSError conversion and the hooks each subsystem's binding file defines.
#pragma once
#include <nanobind/nanobind.h>

#include <string>

namespace cxk::py {

namespace nb = nanobind;

// Raise the OSError subclass that matches -r (FileNotFoundError, PermissionError, ...),
// naming `what` (a path, object, or parameter) as its filename. Call with the GIL held.
[[noreturn]] void raise_errno(int err, const std::string &what);
inline long check(long r, const std::string &what) {
    if (r < 0) raise_errno(int(-r), what);
    return r;
}

// Each subsystem's binding file registers its part of cxlkit._native with
//   CXK_BIND(pool) { m.def(...); }
// at namespace scope; the module init runs every registered part in name order, so adding a
// subsystem touches no shared file.
using BindFn = void (*)(nb::module_ &);
struct Registrar {
    Registrar(const char *name, BindFn fn);
};
void bind_all(nb::module_ &m);

#define CXK_BIND(name)                                                          \
    static void cxk_bind_##name(::nanobind::module_ &m);                        \
    static ::cxk::py::Registrar cxk_registrar_##name(#name, &cxk_bind_##name); \
    static void cxk_bind_##name(::nanobind::module_ &m)

}  // namespace cxk::py
