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

// A Python object's memory (bytes, bytearray, memoryview, numpy, ...) held for the duration
// of a native call or of a request that outlives it: PyObject_GetBuffer with flags
// (PyBUF_SIMPLE, PyBUF_WRITABLE, PyBUF_C_CONTIGUOUS, ...), released by the destructor (with
// the GIL held: keep it out of GIL-released scopes' ends). Movable, not copyable; an empty
// Buffer holds nothing.
class Buffer {
  public:
    Buffer() = default;
    Buffer(nb::handle obj, int flags) {
        if (PyObject_GetBuffer(obj.ptr(), &b_, flags) != 0) throw nb::python_error();
        held_ = true;
    }
    Buffer(Buffer &&o) noexcept : b_(o.b_), held_(o.held_) { o.held_ = false; }
    Buffer &operator=(Buffer &&o) noexcept {
        release();
        b_ = o.b_, held_ = o.held_, o.held_ = false;
        return *this;
    }
    Buffer(const Buffer &) = delete;
    Buffer &operator=(const Buffer &) = delete;
    ~Buffer() { release(); }
    void release() {
        if (held_) PyBuffer_Release(&b_), held_ = false;
    }
    char *data() const { return static_cast<char *>(b_.buf); }
    size_t size() const { return size_t(b_.len); }
    // the object that exported the memory (nullptr when none is held)
    PyObject *exporter() const { return held_ ? b_.obj : nullptr; }
    // let go without releasing: the export stays (memory the library may still write into
    // is never handed back to Python; it leaks instead)
    void leak() { held_ = false; }

  private:
    Py_buffer b_{};
    bool held_ = false;
};

// The buffer protocol (memoryview / numpy / torch views without copies) for a bound class T
// that lends one byte range and counts its live views in `Py_ssize_t exports` (so its close
// can refuse while any exist). T::exported() gives the range now, or `closed` = the message
// for the BufferError when there is none. Use: nb::class_<T>(m, "T",
// nb::type_slots(buffer_slots<T>)).
struct ExportedRange {
    void *addr;
    Py_ssize_t nbytes;
    bool readonly;
    const char *closed;  // non-null: no range (closed), this is why
};
template <class T> int buffer_get(PyObject *self, Py_buffer *view, int flags) {
    T *t = nb::inst_ptr<T>(self);
    const ExportedRange r = t->exported();
    if (r.closed) {
        PyErr_SetString(PyExc_BufferError, r.closed);
        view->obj = nullptr;
        return -1;
    }
    if (PyBuffer_FillInfo(view, self, r.addr, r.nbytes, r.readonly ? 1 : 0, flags) != 0)
        return -1;
    t->exports += 1;
    return 0;
}
template <class T> void buffer_release(PyObject *self, Py_buffer *) {
    nb::inst_ptr<T>(self)->exports -= 1;
}
template <class T>
inline PyType_Slot buffer_slots[] = {
    {Py_bf_getbuffer, reinterpret_cast<void *>(&buffer_get<T>)},
    {Py_bf_releasebuffer, reinterpret_cast<void *>(&buffer_release<T>)},
    {0, nullptr}};

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
