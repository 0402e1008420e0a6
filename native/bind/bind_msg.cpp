// bind_msg.cpp — cxlkit._native's messaging part: the classes of bind_msg_types.h (MsgComm,
// MsgRequest, MsgMemory, MsgWindow, Ring; bind_msg_comm.cpp, bind_msg_window.cpp) bound
// method by method, and what they share: the pool they attach to, the warning of an unclosed
// one, Ctrl-C during a blocking call.
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <vector>

#include "bind/bind_msg_types.h"

namespace cxk::py {

cxk_pool *open_private(const std::vector<std::string> &paths, int host_id,
                       const std::string &tag, int coherence) {
    if (paths.empty()) throw nb::value_error("a pool needs at least one backing path");
    cxk_pool_opts o;
    cxk_pool_opts_init(&o);
    o.host_id = host_id;
    o.host_tag = tag.c_str();
    o.coherence = coherence;
    std::vector<const char *> cp;
    for (const auto &s : paths) cp.push_back(s.c_str());
    cxk_pool *p = nullptr;
    int r;
    {
        nb::gil_scoped_release unlock;
        r = cxk_pool_open_striped(cp.data(), uint32_t(cp.size()), &o, &p);
    }
    check(r, paths[0]);
    return p;
}

cxk_wait_opts wait_opts(uint32_t spin_us, uint32_t yield_us, uint32_t sleep_us,
                        const std::string &what) {
    cxk_wait_opts o{spin_us, yield_us, sleep_us, 0};
    if (cxk_wait_opts_check(&o)) throw nb::value_error(("wait policy of " + what + ": sleep_us " +
                                                        std::to_string(sleep_us) +
                                                        " over 1000000").c_str());
    return o;
}

PoolUse::PoolUse(nb::handle pool) : handle_(pool_handle(pool)) {
    hold_.reset(new PoolHold(hold_pool(handle_)));
    hold_->gate().attached.fetch_add(1);
}

void PoolUse::release() {
    if (!hold_) return;
    hold_->gate().attached.fetch_sub(1);
    hold_.reset();
}

// A warning from a destructor: shown (or, turned into an error by the filters, reported as
// unraisable), never raised out of it.
void warn_unclosed(const std::string &what) {
#if PY_VERSION_HEX >= 0x030D0000
    if (Py_IsFinalizing()) return;
#else
    if (_Py_IsFinalizing()) return;
#endif
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (PyErr_WarnEx(PyExc_ResourceWarning, what.c_str(), 1) < 0) PyErr_WriteUnraisable(nullptr);
    PyErr_Restore(type, value, tb);
}

namespace {

// Ctrl-C during a blocking call. CPython's C-level handler only notes a signal; its Python
// handler (KeyboardInterrupt for SIGINT) runs when the main thread next runs bytecode, which
// a wait in the library with the GIL released never does. While a blocking call of the main
// thread waits, the library calls this hook every ~20 ms: it takes the GIL, runs the pending
// handlers, and ends the wait (as a timeout ends it) when one raised; the call then raises
// that exception (raise_if_interrupted). Other threads: Python runs handlers on the main one.
unsigned long g_main_thread = 0;

int py_interrupt(void *) {
    if (PyThread_get_thread_ident() != g_main_thread) return 0;
#if PY_VERSION_HEX >= 0x030D0000
    if (Py_IsFinalizing()) return 0;
#else
    if (_Py_IsFinalizing()) return 0;
#endif
    PyGILState_STATE g = PyGILState_Ensure();
    const int raised = PyErr_CheckSignals();  // -1: a handler raised; the error stays set
    PyGILState_Release(g);
    return raised != 0;
}

}  // namespace

Interruptible::Interruptible() { cxk_msg_set_interrupt(py_interrupt, nullptr); }
Interruptible::~Interruptible() { cxk_msg_set_interrupt(nullptr, nullptr); }

void raise_if_interrupted() {
    if (PyErr_Occurred()) throw nb::python_error();
}

namespace {

PyType_Slot memory_slots[] = {
    {Py_bf_getbuffer, reinterpret_cast<void *>(&MsgMemory::getbuffer)},
    {Py_bf_releasebuffer, reinterpret_cast<void *>(&MsgMemory::releasebuffer)},
    {0, nullptr}};

void bind_comm(nb::module_ &m) {
    nb::class_<MsgComm>(m, "MsgComm")
        .def(nb::init<nb::handle, const std::string &, int, int, uint32_t, uint32_t, uint64_t,
                      uint32_t, uint32_t, uint32_t, uint32_t>())
        .def("close", &MsgComm::close)
        .def_prop_ro("closed", &MsgComm::closed)
        .def_prop_ro("rank", &MsgComm::rank)
        .def_prop_ro("size", &MsgComm::size)
        .def_prop_ro("eager_bytes", &MsgComm::eager_bytes)
        .def("is_pool_mem", &MsgComm::is_pool_mem)
        .def("peer_coherent", &MsgComm::peer_coherent)
        .def_prop_ro("failed_rank", &MsgComm::failed_rank)
        .def("set_wait", &MsgComm::set_wait)
        .def("waiter_stats", &MsgComm::waiter_stats)
        .def("set_checksum", &MsgComm::set_checksum)
        .def("get_wait", &MsgComm::get_wait)
        .def("send", &MsgComm::send)
        .def("recv_into", &MsgComm::recv_into)
        .def("isend", &MsgComm::isend, nb::rv_policy::take_ownership)
        .def("irecv", &MsgComm::irecv, nb::rv_policy::take_ownership)
        .def("iprobe", &MsgComm::iprobe)
        .def("probe", &MsgComm::probe)
        .def("barrier", &MsgComm::barrier)
        .def("bcast", &MsgComm::bcast)
        .def("allreduce", &MsgComm::allreduce);

    nb::class_<MsgRequest>(m, "MsgRequest")
        .def_prop_ro("done", &MsgRequest::done)
        .def("wait", &MsgRequest::wait)
        .def("test", &MsgRequest::test)
        .def("cancel", &MsgRequest::cancel);
}

void bind_memory(nb::module_ &m) {
    nb::class_<MsgMemory>(m, "MsgMemory", nb::type_slots(memory_slots))
        .def(nb::init<nb::handle, uint64_t>())
        .def("free", &MsgMemory::free)
        .def_prop_ro("freed", &MsgMemory::freed)
        .def_prop_ro("nbytes", &MsgMemory::nbytes);
}

void bind_window(nb::module_ &m) {
    nb::class_<MsgWindow>(m, "MsgWindow", nb::type_slots(buffer_slots<MsgWindow>))
        .def(nb::init<nb::handle, uint64_t>())
        .def("free", &MsgWindow::free)
        .def("size_of", &MsgWindow::size_of)
        .def("put", &MsgWindow::put)
        .def("get_into", &MsgWindow::get_into)
        .def("accumulate", &MsgWindow::accumulate)
        .def("fetch_and_op", &MsgWindow::fetch_and_op)
        .def("compare_and_swap", &MsgWindow::compare_and_swap)
        .def("flush", &MsgWindow::flush)
        .def("fence", &MsgWindow::fence)
        .def("post", &MsgWindow::post)
        .def("start", &MsgWindow::start)
        .def("complete", &MsgWindow::complete)
        .def("wait", &MsgWindow::wait)
        .def("lock", &MsgWindow::lock)
        .def("unlock", &MsgWindow::unlock);
}

// the library's default wait policy: (spin_us, yield_us, sleep_us)
nb::tuple wait_defaults() {
    cxk_wait_opts o;
    cxk_wait_opts_init(&o);
    return nb::make_tuple(o.spin_us, o.yield_us, o.sleep_us);
}

void bind_ring(nb::module_ &m) {
    m.attr("RING_PRODUCER") = int(CXK_RING_PRODUCER);
    m.attr("RING_CONSUMER") = int(CXK_RING_CONSUMER);
    m.def("ring_bytes", &cxk_ring_bytes);
    m.def("wait_defaults", &wait_defaults);
    m.attr("WAIT_FOREVER") = CXK_WAIT_FOREVER;
    nb::class_<Ring>(m, "Ring")
        .def(nb::init<nb::handle, const std::string &, int, uint32_t, uint32_t, bool>())
        .def("close", &Ring::close)
        .def_prop_ro("payload_max", &Ring::payload_max)
        .def_prop_ro("ncells", &Ring::ncells)
        .def("push", &Ring::push)
        .def("pop", &Ring::pop)
        .def("wait", &Ring::wait)
        .def("space", &Ring::space)
        .def("waiter_stats", &Ring::waiter_stats);
}

}  // namespace
}  // namespace cxk::py

CXK_BIND(msg) {
    using namespace cxk::py;
    m.attr("ANY_SOURCE") = CXK_ANY_SOURCE;
    m.attr("ANY_TAG") = CXK_ANY_TAG;
    // the thread Python runs signal handlers on (the import may run on another)
    g_main_thread = nb::cast<unsigned long>(
        nb::module_::import_("threading").attr("main_thread")().attr("ident"));
    bind_comm(m);
    bind_memory(m);
    bind_window(m);
    bind_ring(m);
}
