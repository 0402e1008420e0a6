// bind_aio.cpp — binding of the async I/O engine (AioEngine: submit / wait with the GIL
// released) and of its file calls. Buffers cross as writable byte arrays (numpy uint8 views
// of placed buffers); the Python caller keeps each alive until its ticket is waited for.
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <cerrno>
#include <string>
#include <tuple>

#include "bind/bind.h"
#include "cxlkit.h"

namespace cxk::py {
namespace {

using Bytes = nb::ndarray<uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using ConstBytes = nb::ndarray<const uint8_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;

// a copy's two buffers must be the same length (ValueError naming the copy)
void same_size(const Bytes &dst, const ConstBytes &src, const std::string &what) {
    if (dst.size() != src.size())
        throw nb::value_error((what + ": copy of " + std::to_string(src.size()) +
                               " bytes into " + std::to_string(dst.size())).c_str());
}

struct AioEngine {
    cxk_aio *a = nullptr;
    AioEngine(int backend, uint32_t queue_depth, uint64_t block_size, uint32_t threads) {
        cxk_aio_opts o{backend, queue_depth, block_size, threads};
        int rc;
        {
            nb::gil_scoped_release nogil;
            rc = cxk_aio_create(&o, &a);
        }
        check(rc, "aio engine");
    }
    ~AioEngine() { close(); }
    void close() {
        if (!a) return;
        cxk_aio *x = a;
        a = nullptr;
        nb::gil_scoped_release nogil;
        cxk_aio_destroy(x);
    }
    cxk_aio *get() const {
        if (!a) throw nb::value_error("aio engine is closed");
        return a;
    }
};

}  // namespace
}  // namespace cxk::py

CXK_BIND(aio) {
    using namespace cxk::py;
    nb::class_<AioEngine>(m, "AioEngine")
        .def(nb::init<int, uint32_t, uint64_t, uint32_t>(), nb::arg("backend"),
             nb::arg("queue_depth"), nb::arg("block_size"), nb::arg("threads"))
        .def_prop_ro("backend", [](const AioEngine &e) { return cxk_aio_backend(e.get()); })
        .def(
            "submit",
            [](AioEngine &e, int fd, bool write, Bytes buf, uint64_t offset,
               const std::string &what) {
                uint64_t t = 0;
                check(cxk_aio_submit(e.get(), fd, write ? 1 : 0, buf.data(), buf.size(),
                                     offset, &t),
                      what);
                return t;
            },
            nb::arg("fd"), nb::arg("write"), nb::arg("buf"), nb::arg("offset"),
            nb::arg("what") = "aio")
        .def(
            "wait",
            [](AioEngine &e, uint64_t ticket, const std::string &what) {
                cxk_aio *a = e.get();
                int rc;
                uint64_t ns = 0;
                {
                    nb::gil_scoped_release nogil;
                    rc = cxk_aio_wait_ex(a, ticket, &ns);
                }
                check(rc, what);
                return ns;
            },
            nb::arg("ticket"), nb::arg("what") = "aio")
        .def(
            "done",
            [](AioEngine &e, uint64_t ticket, const std::string &what) {
                return check(cxk_aio_done(e.get(), ticket), what) == 1;
            },
            nb::arg("ticket"), nb::arg("what") = "aio")
        .def("stats",
             [](const AioEngine &e) {
                 struct cxk_aio_stats s{};
                 check(cxk_aio_stats(e.get(), &s), "aio stats");
                 return std::make_tuple(s.bytes_read, s.bytes_written, s.requests, s.chunks,
                                        s.errors);
             })
        .def("close", &AioEngine::close);
    m.def(
        "aio_open",
        [](const std::string &path, uint32_t flags) {
            int direct = 0;
            int fd = int(check(cxk_aio_open(path.c_str(), flags, &direct), path));
            return std::make_tuple(fd, direct != 0);
        },
        nb::arg("path"), nb::arg("flags"));
    m.def("aio_close", [](int fd) { check(cxk_aio_close(fd), "fd " + std::to_string(fd)); });
    m.def(
        "aio_sync",
        [](int fd, const std::string &what) {
            int rc;
            {
                nb::gil_scoped_release nogil;
                rc = cxk_aio_sync(fd);
            }
            check(rc, what);
        },
        nb::arg("fd"), nb::arg("what") = "aio sync");
    m.def(
        "aio_truncate",
        [](int fd, uint64_t nbytes, const std::string &what) {
            check(cxk_aio_truncate(fd, nbytes), what);
        },
        nb::arg("fd"), nb::arg("nbytes"), nb::arg("what") = "aio truncate");
    m.def(
        "aio_lock",
        [](int fd, int kind, bool wait, uint64_t at, const std::string &what) {
            int rc;
            for (;;) {
                {
                    nb::gil_scoped_release nogil;
                    rc = cxk_aio_lock(fd, kind, wait ? 1 : 0, at);
                }
                if (rc != -EINTR) break;
                // a signal ended the wait: its Python handler runs now (SIGTERM's exit, Ctrl-C's
                // KeyboardInterrupt end the wait); otherwise wait again
                if (PyErr_CheckSignals() != 0) throw nb::python_error();
            }
            check(rc, what);
        },
        nb::arg("fd"), nb::arg("kind"), nb::arg("wait"), nb::arg("at") = 0,
        nb::arg("what") = "aio lock");
    m.def(
        "aio_copy",
        [](Bytes dst, ConstBytes src, const std::string &what) {
            same_size(dst, src, what);
            int rc;
            {
                nb::gil_scoped_release nogil;
                rc = cxk_aio_copy(dst.data(), src.data(), src.size());
            }
            check(rc, what);
        },
        nb::arg("dst"), nb::arg("src"), nb::arg("what") = "aio copy");
    m.def(
        "aio_copy_sum",
        [](Bytes dst, ConstBytes src, const std::string &what) {
            same_size(dst, src, what);
            int rc;
            uint64_t sum = 0;
            {
                nb::gil_scoped_release nogil;
                rc = cxk_aio_copy_sum(dst.data(), src.data(), src.size(), &sum);
            }
            check(rc, what);
            return sum;
        },
        nb::arg("dst"), nb::arg("src"), nb::arg("what") = "aio copy");
    // the in-place kernel's SIGBUS guard (a range, any thread)
    m.def(
        "aio_guard_range",
        [](Bytes area, const std::string &what) {
            int id = -1;
            check(cxk_aio_guard_range(area.data(), area.size(), &id), what);
            return id;
        },
        nb::arg("area"), nb::arg("what") = "aio guard");
    m.def(
        "aio_unguard_range",
        [](int id, const std::string &what) {
            uint64_t faults = 0;
            check(cxk_aio_unguard_range(id, &faults), what);
            return faults;
        },
        nb::arg("id"), nb::arg("what") = "aio guard");
    m.def("aio_uring_built", []() { return cxk_aio_uring_built() != 0; });
    m.attr("AIO_AUTO") = int(CXK_AIO_AUTO);
    m.attr("AIO_URING") = int(CXK_AIO_URING);
    m.attr("AIO_THREADS") = int(CXK_AIO_THREADS);
    m.attr("AIO_ALIGN") = int(CXK_AIO_ALIGN);
    m.attr("AIO_O_WRITE") = int(CXK_AIO_O_WRITE);
    m.attr("AIO_O_CREATE") = int(CXK_AIO_O_CREATE);
    m.attr("AIO_O_DIRECT") = int(CXK_AIO_O_DIRECT);
}
