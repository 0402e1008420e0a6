// bind_msg_comm.cpp — MsgComm, MsgRequest and MsgMemory (bind_msg_types.h): a rank's calls,
// its pending requests and its pool memory.
#include <string>

#include "bind/bind_msg_types.h"

namespace cxk::py {
namespace {

nb::tuple status_tuple(const cxk_msg_status &s) {
    return nb::make_tuple(s.source, s.tag, s.count);
}

// A completed receive: (source, tag, count, truncated)
nb::tuple received(const cxk_msg_status &st, bool truncated) {
    return nb::make_tuple(st.source, st.tag, st.count, truncated);
}

}  // namespace

MsgComm::MsgComm(nb::handle pool_obj, const std::string &job, int rank, int size,
                 uint32_t cell_bytes, uint32_t ncells, uint64_t eager_bytes,
                 uint32_t timeout_ms, uint32_t dead_ms, uint32_t join_ms, uint32_t domain)
    : pool_(pool_obj), label_("job " + job + " rank " + std::to_string(rank)) {
    cxk_msg_opts o;
    cxk_msg_opts_init(&o);
    o.cell_bytes = cell_bytes, o.ncells = ncells, o.eager_bytes = eager_bytes;
    o.timeout_ms = timeout_ms, o.dead_ms = dead_ms, o.join_ms = join_ms;
    o.domain = domain;
    cxk_pool *p = pool_.get();
    int r;
    {
        nb::gil_scoped_release unlock;
        r = cxk_msg_init(p, job.c_str(), rank, size, &o, &c_);
    }
    if (r) check(r, label_);
}

// Dropped without close(): leave the job without finalize's barrier (a destructor must not
// wait on peers; they see this rank gone), GIL released, and say so.
MsgComm::~MsgComm() {
    if (!c_) return;
    warn_unclosed("cxlkit.msg communicator " + label_ + " was not closed: it left the job "
                  "without the closing barrier (its peers see it gone); call close()");
    cxk_comm *x = c_;
    c_ = nullptr;
    nb::gil_scoped_release unlock;
    std::lock_guard<std::mutex> g(mu_);
    cxk_msg_abandon(x);
    pool_.release();
}

cxk_comm *MsgComm::get() const {
    if (!c_) throw nb::value_error(("closed communicator (" + label_ + ")").c_str());
    return c_;
}

int MsgComm::shut() {
    int r = 0;
    if (c_) r = cxk_msg_finalize_ex(c_, &failed_), c_ = nullptr;
    pool_.release();
    return r;
}

void MsgComm::close() {
    if (mem_views)
        throw nb::buffer_error("pool memory of this communicator is still viewed: release the "
                               "views first");
    const int r = locked([&] { return shut(); });
    if (r < 0) check(r, label_);
}

bool MsgComm::peer_coherent(int peer) const {
    const int r = cxk_msg_peer_coherent(get(), peer);
    if (r < 0) check(r, label_ + ": peer " + std::to_string(peer));
    return r == 1;
}

bool MsgComm::is_pool_mem(nb::handle buf) const {
    View v(buf, false);
    return cxk_msg_is_pool_mem(get(), v.ptr(), v.len()) == 1;
}

void MsgComm::set_wait(uint32_t spin_us, uint32_t yield_us, uint32_t sleep_us) {
    cxk_wait_opts o = wait_opts(spin_us, yield_us, sleep_us, label_);
    cxk_comm *c = get();
    check(locked([&] { return cxk_msg_set_wait(c, &o); }), label_);
}

nb::tuple MsgComm::get_wait() {
    cxk_wait_opts o{};
    cxk_comm *c = get();
    check(locked([&] { return cxk_msg_get_wait(c, &o); }), label_);
    return nb::make_tuple(o.spin_us, o.yield_us, o.sleep_us);
}

struct cxk_waiter_stats MsgComm::waiter_stats() {
    struct cxk_waiter_stats st {};
    cxk_comm *c = get();
    int r = locked([&] {
        st.struct_size = sizeof st;
        return cxk_waiter_stats(cxk_msg_waiter(c), &st);
    });
    check(r, label_);
    return st;
}

void MsgComm::set_checksum(bool on) {
    cxk_comm *c = get();
    check(locked([&] { return cxk_msg_set_checksum(c, on ? 1 : 0); }), label_);
}

void MsgComm::send(nb::handle buf, int dest, int tag, bool sync) {
    View v(buf, false);
    call(label_ + " send", [&](cxk_comm *c) {
        return cxk_msg_send(c, v.ptr(), v.len(), dest, tag, sync ? CXK_MSG_SYNC : 0);
    });
}

nb::tuple MsgComm::recv_into(nb::handle buf, int source, int tag) {
    View v(buf, true);
    cxk_msg_status st{};
    cxk_comm *c = get();
    const int r = locked([&] {
        Interruptible intr;
        return cxk_msg_recv(c, v.ptr(), v.len(), source, tag, &st);
    });
    if (r == -EMSGSIZE) return received(st, true);
    if (r < 0) raise_if_interrupted(), check(r, label_ + " recv");
    return received(st, false);
}

MsgRequest *MsgComm::isend(nb::handle self, nb::handle buf, int dest, int tag, bool sync) {
    MsgComm &s = comm_of(nb::borrow(self));
    cxk_comm *c = s.get();  // the closed error before anything is held
    auto *q = new MsgRequest(self, buf, false);
    const int r = s.locked([&] {
        return cxk_msg_isend(c, q->view_.ptr(), q->view_.len(), dest, tag,
                             sync ? CXK_MSG_SYNC : 0, &q->r_);
    });
    if (r) {
        delete q;
        check(r, s.label_ + " isend");
    }
    return q;
}

MsgRequest *MsgComm::irecv(nb::handle self, nb::handle buf, int source, int tag) {
    MsgComm &s = comm_of(nb::borrow(self));
    cxk_comm *c = s.get();  // the closed error before anything is held
    auto *q = new MsgRequest(self, buf, true);
    const int r = s.locked([&] {
        return cxk_msg_irecv(c, q->view_.ptr(), q->view_.len(), source, tag, &q->r_);
    });
    if (r) {
        delete q;
        check(r, s.label_ + " irecv");
    }
    return q;
}

nb::object MsgComm::iprobe(int source, int tag) {
    int flag = 0;
    cxk_msg_status st{};
    call(label_ + " iprobe",
         [&](cxk_comm *c) { return cxk_msg_iprobe(c, source, tag, &flag, &st); });
    if (!flag) return nb::none();
    return status_tuple(st);
}

nb::tuple MsgComm::probe(int source, int tag) {
    cxk_msg_status st{};
    call(label_ + " probe", [&](cxk_comm *c) { return cxk_msg_probe(c, source, tag, &st); });
    return status_tuple(st);
}

void MsgComm::barrier() {
    call(label_ + " barrier", [](cxk_comm *c) { return cxk_msg_barrier(c); });
}

void MsgComm::bcast(nb::handle buf, int root) {
    View v(buf, true);
    call(label_ + " bcast", [&](cxk_comm *c) { return cxk_msg_bcast(c, v.ptr(), v.len(), root); });
}

void MsgComm::allreduce(nb::handle src, nb::handle dst, int64_t n, int type, int op) {
    View a(src, false), b(dst, true);
    const size_t es = cxk_msg_type_size(type);
    if (es == 0) throw nb::value_error("unknown element type");
    if (a.len() < n * int64_t(es) || b.len() < n * int64_t(es))
        throw nb::value_error("buffer shorter than count elements");
    call(label_ + " allreduce", [&](cxk_comm *c) {
        return cxk_msg_allreduce(c, a.ptr(), b.ptr(), n, type, op);
    });
}

// Dropped while pending: the library must not touch the buffer after we release it —
// withdraw a receive, finish a send (bounded: a gone peer fails the wait).
MsgRequest::~MsgRequest() {
    if (!r_ || !comm_.is_valid()) return;
    MsgComm &s = owner();
    cxk_comm *c = s.raw();
    if (!c) return;  // finalize freed it
    const bool pool_mem =  // looked at with the GIL held
        view_.exporter() && nb::isinstance<MsgMemory>(nb::handle(view_.exporter()));
    s.locked([&] {
        if (cxk_msg_cancel(c, r_) == 0) return 0;
        // a send that cannot finish (its peer is gone) keeps the buffer: leak, never dangle —
        // unless it is the comm's pool memory, which stays mapped as long as the comm (the
        // view is let go, so close is not refused for it)
        if (cxk_msg_wait(c, r_, nullptr) == -ETIMEDOUT && !pool_mem) view_.leak();
        return 0;
    });
}

nb::object MsgRequest::wait() {
    if (!r_) throw nb::value_error("request already completed");
    MsgComm &s = owner();
    cxk_msg_status st{};
    cxk_comm *c = s.get();
    const int r = s.locked([&] {
        Interruptible intr;
        return cxk_msg_wait(c, r_, &st);
    });
    if (r != -ETIMEDOUT) finished();  // freed by the wait
    if (r == -EMSGSIZE) return received(st, true);
    if (r < 0) raise_if_interrupted(), check(r, s.label() + " wait");
    return received(st, false);
}

nb::object MsgRequest::test() {
    if (!r_) throw nb::value_error("request already completed");
    MsgComm &s = owner();
    cxk_msg_status st{};
    int done = 0;
    cxk_comm *c = s.get();
    const int r = s.locked([&] { return cxk_msg_test(c, r_, &done, &st); });
    if (!done) {
        if (r < 0) check(r, s.label() + " test");
        return nb::none();
    }
    finished();
    if (r == -EMSGSIZE) return received(st, true);
    if (r < 0) check(r, s.label() + " test");
    return received(st, false);
}

void MsgRequest::cancel() {
    if (!r_) throw nb::value_error("request already completed");
    MsgComm &s = owner();
    cxk_comm *c = s.get();
    check(s.locked([&] { return cxk_msg_cancel(c, r_); }), s.label() + " cancel");
    finished();
}

MsgMemory::MsgMemory(nb::handle comm, uint64_t nbytes) : nbytes_(nbytes), comm_(nb::borrow(comm)) {
    MsgComm &s = owner();
    s.call(s.label() + " alloc_mem of " + std::to_string(nbytes) + " bytes",
           [&](cxk_comm *c) { return cxk_msg_alloc_mem(c, nbytes, &ptr_); });
}

// Dropped unfreed: give the block back now if no send from it is in flight (else the comm's
// finalize removes it).
MsgMemory::~MsgMemory() {
    if (!ptr_ || !comm_.is_valid()) return;
    MsgComm &s = owner();
    cxk_comm *c = s.raw();
    if (!c) return;
    s.locked([&] {
        cxk_msg_free_mem(c, ptr_);
        return 0;
    });
}

void MsgMemory::free() {
    if (!ptr_) return;
    if (exports_) throw nb::buffer_error("pool memory is still viewed: release the views first");
    MsgComm &s = owner();
    if (s.closed()) return void(ptr_ = nullptr);  // the comm's finalize removed it
    void *p = ptr_;
    s.call(s.label() + " free_mem", [&](cxk_comm *c) { return cxk_msg_free_mem(c, p); });
    ptr_ = nullptr;
}

int MsgMemory::getbuffer(PyObject *self, Py_buffer *view, int flags) {
    MsgMemory *m = nb::inst_ptr<MsgMemory>(self);
    if (!m->ptr_ || m->owner().closed()) {
        PyErr_SetString(PyExc_BufferError, m->ptr_ ? "communicator closed" : "pool memory freed");
        view->obj = nullptr;
        return -1;
    }
    if (PyBuffer_FillInfo(view, self, m->ptr_, Py_ssize_t(m->nbytes_), 0, flags) != 0) return -1;
    m->exports_ += 1;
    m->owner().mem_views += 1;
    return 0;
}

void MsgMemory::releasebuffer(PyObject *self, Py_buffer *) {
    MsgMemory *m = nb::inst_ptr<MsgMemory>(self);
    m->exports_ -= 1;
    m->owner().mem_views -= 1;
}

}  // namespace cxk::py
