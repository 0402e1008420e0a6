// bind_msg.cpp — cxlkit._native's messaging part: MsgComm (a rank of a job, on the caller's
// pool handle, which refuses to close while the comm uses it), MsgRequest (holds the
// Python buffer of a non-blocking call until it completes), MsgWindow (one-sided windows,
// the local window lent through the buffer protocol) and Ring (a bare ring end, for tests
// and tools). Blocking calls release the GIL; one native call per comm at a time (a mutex).
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bind/bind.h"
#include "bind/bind_msg.h"
#include "bind/bind_pool.h"
#include "cxlkit.h"

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

namespace {

// A Python buffer held for the duration of a native call or a request.
struct View : Buffer {
    View() = default;
    View(nb::handle obj, bool writable) : Buffer(obj, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) {}
    void *ptr() const { return data(); }
    int64_t len() const { return int64_t(size()); }
};

nb::tuple status_tuple(const cxk_msg_status &s) {
    return nb::make_tuple(s.source, s.tag, s.count);
}

// The caller's pool for the life of a comm or ring: a reference to its handle and a hold
// of its mapping, counted as attached so that the pool's close refuses (BufferError naming
// the pool) instead of unmapping under us or waiting for us. Take it with the GIL held.
struct PoolUse {
    nb::object handle;
    std::unique_ptr<PoolHold> hold;
    explicit PoolUse(nb::handle pool) : handle(pool_handle(pool)) {
        hold.reset(new PoolHold(hold_pool(handle)));
        hold->gate().attached.fetch_add(1);
    }
    ~PoolUse() { release(); }
    PoolUse(const PoolUse &) = delete;
    PoolUse &operator=(const PoolUse &) = delete;
    cxk_pool *get() const { return hold ? hold->get() : nullptr; }
    // no GIL needed: atomics only (the handle's reference goes with the object)
    void release() {
        if (!hold) return;
        hold->gate().attached.fetch_sub(1);
        hold.reset();
    }
};

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

struct MsgComm {
    PoolUse pool;
    cxk_comm *c = nullptr;
    std::mutex mu;
    std::string label;
    Py_ssize_t mem_views = 0;  // live views of its pool memory (MsgMemory): close refuses

    MsgComm(nb::handle pool_obj, const std::string &job, int rank, int size, uint32_t cell_bytes,
            uint32_t ncells, uint64_t eager_bytes, uint32_t timeout_ms, uint32_t dead_ms,
            uint32_t join_ms)
        : pool(pool_obj) {
        label = "job " + job + " rank " + std::to_string(rank);
        cxk_msg_opts o;
        cxk_msg_opts_init(&o);
        o.cell_bytes = cell_bytes, o.ncells = ncells, o.eager_bytes = eager_bytes;
        o.timeout_ms = timeout_ms, o.dead_ms = dead_ms, o.join_ms = join_ms;
        cxk_pool *p = pool.get();
        int r;
        {
            nb::gil_scoped_release unlock;
            r = cxk_msg_init(p, job.c_str(), rank, size, &o, &c);
        }
        if (r) check(r, label);
    }
    // Dropped without close(): leave the job without finalize's barrier (a destructor must
    // not wait on peers; they see this rank gone), GIL released, and say so.
    ~MsgComm() {
        if (!c) return;
        warn_unclosed("cxlkit.msg communicator " + label + " was not closed: it left the job "
                      "without the closing barrier (its peers see it gone); call close()");
        cxk_comm *x = c;
        c = nullptr;
        nb::gil_scoped_release unlock;
        std::lock_guard<std::mutex> g(mu);
        cxk_msg_abandon(x);
        pool.release();
    }
    int failed = -1;  // the rank that made finalize fail
    int shut() {
        int r = 0;
        if (c) r = cxk_msg_finalize_ex(c, &failed), c = nullptr;
        pool.release();
        return r;
    }
    cxk_comm *get() {
        if (!c) throw nb::value_error(("closed communicator (" + label + ")").c_str());
        return c;
    }
};

// Pool-resident memory of a comm (cxk_msg_alloc_mem), lent through the buffer protocol: a
// send from it above the eager limit travels in one copy. Its views are counted here and in
// the comm, so neither free nor the comm's close unmaps under a live view.
// Run fn() with the comm's mutex held and the GIL released: a thread must never
// wait for that mutex while holding the GIL, since a blocking call that holds the mutex takes
// the GIL in its interrupt hook (py_interrupt) — that would deadlock the two threads.
template <class Fn> int locked(MsgComm &m, Fn fn) {
    nb::gil_scoped_release unlock;
    std::lock_guard<std::mutex> g(m.mu);
    return fn();
}

struct MsgMemory {
    void *ptr = nullptr;
    uint64_t nbytes = 0;
    nb::object comm;
    Py_ssize_t exports = 0;
    MsgComm &owner() { return *nb::cast<MsgComm *>(comm); }
    // Dropped unfreed: give the block back now if no send from it is in flight (else the
    // comm's finalize removes it).
    ~MsgMemory() {
        if (!ptr || !comm.is_valid()) return;
        MsgComm &s = owner();
        if (!s.c) return;
        locked(s, [&] {
            cxk_msg_free_mem(s.c, ptr);
            return 0;
        });
    }
};

struct MsgRequest {
    cxk_msg_req *r = nullptr;
    nb::object comm;  // keeps the MsgComm alive
    View view;
    MsgComm &owner() { return *nb::cast<MsgComm *>(comm); }
    // Dropped while pending: the library must not touch the buffer after we release it —
    // withdraw a receive, finish a send (bounded: a gone peer fails the wait).
    ~MsgRequest() {
        if (!r || !comm.is_valid()) return;
        MsgComm &s = owner();
        if (!s.c) return;  // finalize freed it
        const bool pool_mem =  // looked at with the GIL held
            view.exporter() && nb::isinstance<MsgMemory>(nb::handle(view.exporter()));
        nb::gil_scoped_release unlock;
        std::lock_guard<std::mutex> g(s.mu);
        if (cxk_msg_cancel(s.c, r) == 0) return;
        // a send that cannot finish (its peer is gone) keeps the buffer: leak, never dangle —
        // unless it is the comm's pool memory, which stays mapped as long as the comm (the
        // view is let go, so close is not refused for it)
        if (cxk_msg_wait(s.c, r, nullptr) == -ETIMEDOUT && !pool_mem) view.leak();
    }
};

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

// Set for the scope of one blocking call (the hook is per thread in the library).
struct Interruptible {
    Interruptible() { cxk_msg_set_interrupt(py_interrupt, nullptr); }
    ~Interruptible() { cxk_msg_set_interrupt(nullptr, nullptr); }
    Interruptible(const Interruptible &) = delete;
    Interruptible &operator=(const Interruptible &) = delete;
};

// With the GIL held, after a failed blocking call: the exception a signal handler raised.
void raise_if_interrupted() {
    if (PyErr_Occurred()) throw nb::python_error();
}

// Run fn(comm) with the GIL released and the comm's mutex held; raise on a negative return
// (a signal handler's exception when one ended the wait).
template <class Fn> int call(MsgComm &m, const std::string &what, Fn fn) {
    cxk_comm *c = m.get();
    const int r = locked(m, [&] {
        Interruptible intr;
        return fn(c);
    });
    if (r < 0) {
        raise_if_interrupted();
        check(r, what);
    }
    return r;
}

struct MsgWindow {
    cxk_win *w = nullptr;
    nb::object comm;
    Py_ssize_t exports = 0;
    uint64_t nbytes = 0;
    ExportedRange exported() const {
        if (!w) return ExportedRange{nullptr, 0, false, "window freed"};
        return ExportedRange{cxk_win_base(w), Py_ssize_t(nbytes), false, nullptr};
    }
    MsgComm &owner() { return *nb::cast<MsgComm *>(comm); }
    cxk_win *get() {
        if (!w) throw nb::value_error("window freed");
        owner().get();
        return w;
    }
};

int memory_getbuffer(PyObject *self, Py_buffer *view, int flags) {
    MsgMemory *m = nb::inst_ptr<MsgMemory>(self);
    if (!m->ptr || !m->owner().c) {
        PyErr_SetString(PyExc_BufferError, m->ptr ? "communicator closed" : "pool memory freed");
        view->obj = nullptr;
        return -1;
    }
    if (PyBuffer_FillInfo(view, self, m->ptr, Py_ssize_t(m->nbytes), 0, flags) != 0) return -1;
    m->exports += 1;
    m->owner().mem_views += 1;
    return 0;
}

void memory_releasebuffer(PyObject *self, Py_buffer *) {
    MsgMemory *m = nb::inst_ptr<MsgMemory>(self);
    m->exports -= 1;
    m->owner().mem_views -= 1;
}

PyType_Slot memory_slots[] = {
    {Py_bf_getbuffer, reinterpret_cast<void *>(&memory_getbuffer)},
    {Py_bf_releasebuffer, reinterpret_cast<void *>(&memory_releasebuffer)},
    {0, nullptr}};

struct Ring {
    PoolUse pool;
    cxk_ring *r = nullptr;
    std::string name;
    Ring(nb::handle pool_obj, const std::string &ring_name, int role, uint32_t cell_bytes,
         uint32_t ncells, bool create)
        : pool(pool_obj), name(ring_name) {
        cxk_pool *p = pool.get();
        int rc = create ? cxk_ring_create(p, name.c_str(), cell_bytes, ncells, role, &r)
                        : cxk_ring_open(p, name.c_str(), role, &r);
        if (rc) check(rc, name);
    }
    ~Ring() {
        if (r) warn_unclosed("cxlkit.msg ring " + name + " was not closed; call close()");
        shut();
    }
    void shut() {
        if (r) cxk_ring_close(r), r = nullptr;
        pool.release();
    }
    cxk_ring *get() {
        if (!r) throw nb::value_error(("closed ring " + name).c_str());
        return r;
    }
};

void bind_comm(nb::module_ &m) {
    nb::class_<MsgComm>(m, "MsgComm")
        .def(nb::init<nb::handle, const std::string &, int, int, uint32_t, uint32_t, uint64_t,
                      uint32_t, uint32_t, uint32_t>())
        .def("close", [](MsgComm &s) {
            if (s.mem_views)
                throw nb::buffer_error("pool memory of this communicator is still viewed: "
                                       "release the views first");
            const int r = locked(s, [&] { return s.shut(); });
            if (r < 0) check(r, s.label);
        })
        .def_prop_ro("closed", [](const MsgComm &s) { return s.c == nullptr; })
        .def_prop_ro("rank", [](MsgComm &s) { return cxk_msg_rank(s.get()); })
        .def_prop_ro("size", [](MsgComm &s) { return cxk_msg_size(s.get()); })
        .def_prop_ro("eager_bytes", [](MsgComm &s) { return cxk_msg_eager_bytes(s.get()); })
        .def("is_pool_mem", [](MsgComm &s, nb::handle buf) {
            View v(buf, false);
            return cxk_msg_is_pool_mem(s.get(), v.ptr(), v.len()) == 1;
        })
        .def_prop_ro("failed_rank", [](MsgComm &s) { return s.c ? cxk_msg_failed_rank(s.c) : s.failed; })
        .def("set_wait", [](MsgComm &s, uint32_t spin_us, uint32_t yield_us, uint32_t sleep_us) {
            cxk_wait_opts o = wait_opts(spin_us, yield_us, sleep_us, s.label);
            cxk_comm *c = s.get();
            check(locked(s, [&] { return cxk_msg_set_wait(c, &o); }), s.label);
        })
        .def("spin_stats", [](MsgComm &s) {
            struct cxk_spin sp {};
            cxk_comm *c = s.get();
            check(locked(s, [&] { return cxk_msg_spin_stats(c, &sp); }), s.label);
            return spin_dict(sp);
        })
        .def("wake_stats", [](MsgComm &s) {
            struct cxk_ring_wake_stats w {};
            cxk_comm *c = s.get();
            check(locked(s, [&] { return cxk_msg_wake_stats(c, &w); }), s.label);
            return wake_dict(w);
        })
        .def("set_checksum", [](MsgComm &s, bool on) {
            cxk_comm *c = s.get();
            check(locked(s, [&] { return cxk_msg_set_checksum(c, on ? 1 : 0); }), s.label);
        })
        .def("get_wait", [](MsgComm &s) {
            cxk_wait_opts o{};
            cxk_comm *c = s.get();
            check(locked(s, [&] { return cxk_msg_get_wait(c, &o); }), s.label);
            return nb::make_tuple(o.spin_us, o.yield_us, o.sleep_us);
        })
        .def("send", [](MsgComm &s, nb::handle buf, int dest, int tag, bool sync) {
            View v(buf, false);
            call(s, s.label + " send", [&](cxk_comm *c) {
                return cxk_msg_send(c, v.ptr(), v.len(), dest, tag, sync ? CXK_MSG_SYNC : 0);
            });
        })
        .def("recv_into", [](MsgComm &s, nb::handle buf, int source, int tag) {
            View v(buf, true);
            cxk_msg_status st{};
            cxk_comm *c = s.get();
            const int r = locked(s, [&] {
                Interruptible intr;
                return cxk_msg_recv(c, v.ptr(), v.len(), source, tag, &st);
            });
            if (r == -EMSGSIZE) return nb::make_tuple(st.source, st.tag, st.count, true);
            if (r < 0) raise_if_interrupted(), check(r, s.label + " recv");
            return nb::make_tuple(st.source, st.tag, st.count, false);
        })
        .def("isend", [](nb::handle self, nb::handle buf, int dest, int tag, bool sync) {
            MsgComm &s = *nb::cast<MsgComm *>(self);
            auto *q = new MsgRequest;
            q->comm = nb::borrow(self);
            q->view = View(buf, false);
            cxk_comm *c = s.get();
            int r = locked(s, [&] {
                return cxk_msg_isend(c, q->view.ptr(), q->view.len(), dest, tag,
                                     sync ? CXK_MSG_SYNC : 0, &q->r);
            });
            if (r) {
                delete q;
                check(r, s.label + " isend");
            }
            return q;
        }, nb::rv_policy::take_ownership)
        .def("irecv", [](nb::handle self, nb::handle buf, int source, int tag) {
            MsgComm &s = *nb::cast<MsgComm *>(self);
            auto *q = new MsgRequest;
            q->comm = nb::borrow(self);
            q->view = View(buf, true);
            cxk_comm *c = s.get();
            int r = locked(s, [&] {
                return cxk_msg_irecv(c, q->view.ptr(), q->view.len(), source, tag, &q->r);
            });
            if (r) {
                delete q;
                check(r, s.label + " irecv");
            }
            return q;
        }, nb::rv_policy::take_ownership)
        .def("iprobe", [](MsgComm &s, int source, int tag) -> nb::object {
            int flag = 0;
            cxk_msg_status st{};
            call(s, s.label + " iprobe",
                 [&](cxk_comm *c) { return cxk_msg_iprobe(c, source, tag, &flag, &st); });
            if (!flag) return nb::none();
            return status_tuple(st);
        })
        .def("probe", [](MsgComm &s, int source, int tag) {
            cxk_msg_status st{};
            call(s, s.label + " probe", [&](cxk_comm *c) { return cxk_msg_probe(c, source, tag, &st); });
            return status_tuple(st);
        })
        .def("barrier", [](MsgComm &s) {
            call(s, s.label + " barrier", [](cxk_comm *c) { return cxk_msg_barrier(c); });
        })
        .def("bcast", [](MsgComm &s, nb::handle buf, int root) {
            View v(buf, true);
            call(s, s.label + " bcast",
                 [&](cxk_comm *c) { return cxk_msg_bcast(c, v.ptr(), v.len(), root); });
        })
        .def("allreduce", [](MsgComm &s, nb::handle src, nb::handle dst, int64_t n, int type,
                             int op) {
            View a(src, false), b(dst, true);
            size_t es = cxk_msg_type_size(type);
            if (es == 0) throw nb::value_error("unknown element type");
            if (a.len() < n * int64_t(es) || b.len() < n * int64_t(es))
                throw nb::value_error("buffer shorter than count elements");
            call(s, s.label + " allreduce", [&](cxk_comm *c) {
                return cxk_msg_allreduce(c, a.ptr(), b.ptr(), n, type, op);
            });
        });

    nb::class_<MsgRequest>(m, "MsgRequest")
        .def_prop_ro("done", [](const MsgRequest &q) { return q.r == nullptr; })
        .def("wait", [](MsgRequest &q) -> nb::object {
            if (!q.r) throw nb::value_error("request already completed");
            MsgComm &s = q.owner();
            cxk_msg_status st{};
            cxk_comm *c = s.get();
            const int r = locked(s, [&] {
                Interruptible intr;
                return cxk_msg_wait(c, q.r, &st);
            });
            if (r != -ETIMEDOUT) q.r = nullptr, q.view.release();  // freed by the wait
            if (r == -EMSGSIZE) return nb::make_tuple(st.source, st.tag, st.count, true);
            if (r < 0) raise_if_interrupted(), check(r, s.label + " wait");
            return nb::make_tuple(st.source, st.tag, st.count, false);
        })
        .def("test", [](MsgRequest &q) -> nb::object {
            if (!q.r) throw nb::value_error("request already completed");
            MsgComm &s = q.owner();
            cxk_msg_status st{};
            int done = 0;
            cxk_comm *c = s.get();
            int r = locked(s, [&] { return cxk_msg_test(c, q.r, &done, &st); });
            if (!done) {
                if (r < 0) check(r, s.label + " test");
                return nb::none();
            }
            q.r = nullptr, q.view.release();
            if (r == -EMSGSIZE) return nb::make_tuple(st.source, st.tag, st.count, true);
            if (r < 0) check(r, s.label + " test");
            return nb::make_tuple(st.source, st.tag, st.count, false);
        })
        .def("cancel", [](MsgRequest &q) {
            if (!q.r) throw nb::value_error("request already completed");
            MsgComm &s = q.owner();
            cxk_comm *c = s.get();
            int r = locked(s, [&] { return cxk_msg_cancel(c, q.r); });
            check(r, s.label + " cancel");
            q.r = nullptr, q.view.release();
        });
}

void bind_memory(nb::module_ &m) {
    nb::class_<MsgMemory>(m, "MsgMemory", nb::type_slots(memory_slots))
        .def("__init__", [](MsgMemory *self, nb::handle comm, uint64_t nbytes) {
            new (self) MsgMemory();
            self->comm = nb::borrow(comm);
            self->nbytes = nbytes;
            MsgComm &s = self->owner();
            call(s, s.label + " alloc_mem of " + std::to_string(nbytes) + " bytes",
                 [&](cxk_comm *c) { return cxk_msg_alloc_mem(c, nbytes, &self->ptr); });
        })
        .def("free", [](MsgMemory &x) {
            if (!x.ptr) return;
            if (x.exports) throw nb::buffer_error("pool memory is still viewed: release the views first");
            MsgComm &s = x.owner();
            if (!s.c) return void(x.ptr = nullptr);  // the comm's finalize removed it
            void *p = x.ptr;
            call(s, s.label + " free_mem", [&](cxk_comm *c) { return cxk_msg_free_mem(c, p); });
            x.ptr = nullptr;
        })
        .def_prop_ro("freed", [](const MsgMemory &x) { return x.ptr == nullptr; })
        .def_prop_ro("nbytes", [](const MsgMemory &x) { return x.nbytes; });
}

void bind_window(nb::module_ &m) {
    nb::class_<MsgWindow>(m, "MsgWindow", nb::type_slots(buffer_slots<MsgWindow>))
        .def("__init__", [](MsgWindow *self, nb::handle comm, uint64_t nbytes) {
            new (self) MsgWindow();
            self->comm = nb::borrow(comm);
            self->nbytes = nbytes;
            MsgComm &s = self->owner();
            call(s, s.label + " window", [&](cxk_comm *c) { return cxk_win_create(c, nbytes, &self->w); });
        })
        .def("free", [](MsgWindow &w) {
            if (!w.w) return;
            if (w.exports) throw nb::buffer_error("window memory is still viewed: release the views first");
            MsgComm &s = w.owner();
            cxk_win *x = w.get();
            w.w = nullptr;
            call(s, s.label + " window free", [&](cxk_comm *) { return cxk_win_free(x); });
        })
        .def("size_of", [](MsgWindow &w, int rank) {
            uint64_t n = 0;
            check(cxk_win_size(w.get(), rank, &n), "window size of rank " + std::to_string(rank));
            return n;
        })
        .def("put", [](MsgWindow &w, nb::handle buf, int target, uint64_t off) {
            View v(buf, false);
            cxk_win *x = w.get();
            call(w.owner(), "put to rank " + std::to_string(target) + " offset " + std::to_string(off),
                 [&](cxk_comm *) { return cxk_win_put(x, v.ptr(), uint64_t(v.len()), target, off); });
        })
        .def("get_into", [](MsgWindow &w, nb::handle buf, int target, uint64_t off) {
            View v(buf, true);
            cxk_win *x = w.get();
            call(w.owner(), "get from rank " + std::to_string(target) + " offset " + std::to_string(off),
                 [&](cxk_comm *) { return cxk_win_get(x, v.ptr(), uint64_t(v.len()), target, off); });
        })
        .def("accumulate", [](MsgWindow &w, nb::handle buf, uint64_t count, int type, int target,
                              uint64_t off, int op) {
            View v(buf, false);
            if (uint64_t(v.len()) < count * cxk_msg_type_size(type))
                throw nb::value_error("buffer shorter than count elements");
            cxk_win *x = w.get();
            call(w.owner(), "accumulate to rank " + std::to_string(target) + " offset " + std::to_string(off),
                 [&](cxk_comm *) { return cxk_win_accumulate(x, v.ptr(), count, type, target, off, op); });
        })
        .def("fetch_and_op", [](MsgWindow &w, nb::bytes operand, int type, int target, uint64_t off,
                                int op) {
            size_t es = cxk_msg_type_size(type);
            if (!es || operand.size() != es) throw nb::value_error("operand is not one element of the type");
            std::string arg(operand.c_str(), operand.size());
            char result[8] = {};
            cxk_win *x = w.get();
            call(w.owner(), "fetch_and_op at rank " + std::to_string(target) + " offset " + std::to_string(off),
                 [&](cxk_comm *) { return cxk_win_fetch_and_op(x, arg.data(), result, type, target, off, op); });
            return nb::bytes(result, es);
        })
        .def("compare_and_swap", [](MsgWindow &w, nb::bytes cmp, nb::bytes swp, int type, int target,
                                    uint64_t off) {
            size_t es = cxk_msg_type_size(type);
            if (!es || cmp.size() != es || swp.size() != es)
                throw nb::value_error("compare and swap must be one element of the type each");
            std::string a(cmp.c_str(), es), b(swp.c_str(), es);
            char result[8] = {};
            cxk_win *x = w.get();
            call(w.owner(), "compare_and_swap at rank " + std::to_string(target) + " offset " + std::to_string(off),
                 [&](cxk_comm *) { return cxk_win_compare_and_swap(x, a.data(), b.data(), result, type, target, off); });
            return nb::bytes(result, es);
        })
        .def("flush", [](MsgWindow &w, int target) {
            cxk_win *x = w.get();
            call(w.owner(), "window flush", [&](cxk_comm *) { return cxk_win_flush(x, target); });
        })
        .def("fence", [](MsgWindow &w) {
            cxk_win *x = w.get();
            call(w.owner(), "window fence", [&](cxk_comm *) { return cxk_win_fence(x); });
        })
        .def("post", [](MsgWindow &w, const std::vector<int> &ranks) {
            cxk_win *x = w.get();
            call(w.owner(), "window post", [&](cxk_comm *) { return cxk_win_post(x, ranks.data(), int(ranks.size())); });
        })
        .def("start", [](MsgWindow &w, const std::vector<int> &ranks) {
            cxk_win *x = w.get();
            call(w.owner(), "window start", [&](cxk_comm *) { return cxk_win_start(x, ranks.data(), int(ranks.size())); });
        })
        .def("complete", [](MsgWindow &w) {
            cxk_win *x = w.get();
            call(w.owner(), "window complete", [&](cxk_comm *) { return cxk_win_complete(x); });
        })
        .def("wait", [](MsgWindow &w) {
            cxk_win *x = w.get();
            call(w.owner(), "window wait", [&](cxk_comm *) { return cxk_win_wait(x); });
        })
        .def("lock", [](MsgWindow &w, int type, int target) {
            cxk_win *x = w.get();
            call(w.owner(), "lock of rank " + std::to_string(target), [&](cxk_comm *) { return cxk_win_lock(x, type, target); });
        })
        .def("unlock", [](MsgWindow &w, int target) {
            cxk_win *x = w.get();
            call(w.owner(), "unlock of rank " + std::to_string(target), [&](cxk_comm *) { return cxk_win_unlock(x, target); });
        });
}

void bind_ring(nb::module_ &m) {
    m.attr("RING_PRODUCER") = int(CXK_RING_PRODUCER);
    m.attr("RING_CONSUMER") = int(CXK_RING_CONSUMER);
    m.def("ring_bytes", &cxk_ring_bytes);
    m.def("wait_defaults", [] {
        cxk_wait_opts o;
        cxk_wait_opts_init(&o);
        return nb::make_tuple(o.spin_us, o.yield_us, o.sleep_us);
    });
    m.attr("WAIT_FOREVER") = CXK_WAIT_FOREVER;
    nb::class_<Ring>(m, "Ring")
        .def(nb::init<nb::handle, const std::string &, int, uint32_t, uint32_t, bool>())
        .def("close", &Ring::shut)
        .def_prop_ro("payload_max", [](Ring &r) { return cxk_ring_payload_max(r.get()); })
        .def_prop_ro("ncells", [](Ring &r) { return cxk_ring_ncells(r.get()); })
        .def("push", [](Ring &r, nb::bytes data, uint32_t kind) {
            int rc = cxk_ring_push(r.get(), data.c_str(), uint32_t(data.size()), kind);
            if (rc == -EAGAIN) return false;
            check(rc, r.name);
            return true;
        })
        .def("pop", [](Ring &r) -> nb::object {
            const void *pl;
            uint32_t n, kind;
            int rc = cxk_ring_peek(r.get(), &pl, &n, &kind);
            if (rc == -EAGAIN) return nb::none();
            check(rc, r.name);
            nb::bytes out(static_cast<const char *>(pl), n);
            check(cxk_ring_release(r.r), r.name);
            return nb::make_tuple(out, kind);
        })
        .def("wait", [](Ring &r, uint32_t spin_us, uint32_t yield_us, uint32_t sleep_us,
                        uint32_t timeout_ms) {
            cxk_wait_opts o = wait_opts(spin_us, yield_us, sleep_us, r.name);
            cxk_ring *x = r.get();
            int rc;
            {
                nb::gil_scoped_release unlock;
                rc = cxk_ring_wait(x, &o, timeout_ms);
            }
            if (rc == -ETIMEDOUT) return false;
            check(rc, r.name);
            return true;
        })
        .def("space", [](Ring &r) {
            uint32_t n = 0;
            check(cxk_ring_space(r.get(), &n), r.name);
            return n;
        });
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
