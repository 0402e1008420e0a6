// bind_msg_window.cpp — MsgWindow (one-sided windows of a comm, the local window lent through
// the buffer protocol) and Ring (a bare ring end on the caller's pool), bind_msg_types.h.
#include <string>

#include "bind/bind_msg_types.h"

namespace cxk::py {
namespace {

std::string at(const char *what, int target, uint64_t off) {
    return std::string(what) + " rank " + std::to_string(target) + " offset " +
           std::to_string(off);
}

}  // namespace

MsgWindow::MsgWindow(nb::handle comm, uint64_t nbytes) : comm_(nb::borrow(comm)), nbytes_(nbytes) {
    MsgComm &s = owner();
    s.call(s.label() + " window", [&](cxk_comm *c) { return cxk_win_create(c, nbytes, &w_); });
}

ExportedRange MsgWindow::exported() const {
    if (!w_) return ExportedRange{nullptr, 0, false, "window freed"};
    return ExportedRange{cxk_win_base(w_), Py_ssize_t(nbytes_), false, nullptr};
}

cxk_win *MsgWindow::get() const {
    if (!w_) throw nb::value_error("window freed");
    owner().get();  // the closed error of the comm
    return w_;
}

void MsgWindow::free() {
    if (!w_) return;
    if (exports) throw nb::buffer_error("window memory is still viewed: release the views first");
    MsgComm &s = owner();
    cxk_win *x = get();
    w_ = nullptr;
    s.call(s.label() + " window free", [&](cxk_comm *) { return cxk_win_free(x); });
}

uint64_t MsgWindow::size_of(int rank) {
    uint64_t n = 0;
    check(cxk_win_size(get(), rank, &n), "window size of rank " + std::to_string(rank));
    return n;
}

void MsgWindow::put(nb::handle buf, int target, uint64_t off) {
    View v(buf, false);
    on_comm(at("put to", target, off),
            [&](cxk_win *x) { return cxk_win_put(x, v.ptr(), uint64_t(v.len()), target, off); });
}

void MsgWindow::get_into(nb::handle buf, int target, uint64_t off) {
    View v(buf, true);
    on_comm(at("get from", target, off),
            [&](cxk_win *x) { return cxk_win_get(x, v.ptr(), uint64_t(v.len()), target, off); });
}

void MsgWindow::accumulate(nb::handle buf, uint64_t count, int type, int target, uint64_t off,
                           int op) {
    View v(buf, false);
    if (uint64_t(v.len()) < count * cxk_msg_type_size(type))
        throw nb::value_error("buffer shorter than count elements");
    on_comm(at("accumulate to", target, off), [&](cxk_win *x) {
        return cxk_win_accumulate(x, v.ptr(), count, type, target, off, op);
    });
}

nb::bytes MsgWindow::fetch_and_op(nb::bytes operand, int type, int target, uint64_t off, int op) {
    const size_t es = cxk_msg_type_size(type);
    if (!es || operand.size() != es)
        throw nb::value_error("operand is not one element of the type");
    std::string arg(operand.c_str(), operand.size());
    char result[8] = {};
    on_comm(at("fetch_and_op at", target, off), [&](cxk_win *x) {
        return cxk_win_fetch_and_op(x, arg.data(), result, type, target, off, op);
    });
    return nb::bytes(result, es);
}

nb::bytes MsgWindow::compare_and_swap(nb::bytes cmp, nb::bytes swp, int type, int target,
                                      uint64_t off) {
    const size_t es = cxk_msg_type_size(type);
    if (!es || cmp.size() != es || swp.size() != es)
        throw nb::value_error("compare and swap must be one element of the type each");
    std::string a(cmp.c_str(), es), b(swp.c_str(), es);
    char result[8] = {};
    on_comm(at("compare_and_swap at", target, off), [&](cxk_win *x) {
        return cxk_win_compare_and_swap(x, a.data(), b.data(), result, type, target, off);
    });
    return nb::bytes(result, es);
}

void MsgWindow::flush(int target) {
    on_comm("window flush", [&](cxk_win *x) { return cxk_win_flush(x, target); });
}

void MsgWindow::fence() {
    on_comm("window fence", [](cxk_win *x) { return cxk_win_fence(x); });
}

void MsgWindow::post(const std::vector<int> &ranks) {
    on_comm("window post",
            [&](cxk_win *x) { return cxk_win_post(x, ranks.data(), int(ranks.size())); });
}

void MsgWindow::start(const std::vector<int> &ranks) {
    on_comm("window start",
            [&](cxk_win *x) { return cxk_win_start(x, ranks.data(), int(ranks.size())); });
}

void MsgWindow::complete() {
    on_comm("window complete", [](cxk_win *x) { return cxk_win_complete(x); });
}

void MsgWindow::wait() {
    on_comm("window wait", [](cxk_win *x) { return cxk_win_wait(x); });
}

void MsgWindow::lock(int type, int target) {
    on_comm("lock of rank " + std::to_string(target),
            [&](cxk_win *x) { return cxk_win_lock(x, type, target); });
}

void MsgWindow::unlock(int target) {
    on_comm("unlock of rank " + std::to_string(target),
            [&](cxk_win *x) { return cxk_win_unlock(x, target); });
}

Ring::Ring(nb::handle pool_obj, const std::string &ring_name, int role, uint32_t cell_bytes,
           uint32_t ncells, bool create)
    : pool_(pool_obj), name_(ring_name) {
    cxk_pool *p = pool_.get();
    const int rc = create ? cxk_ring_create(p, name_.c_str(), cell_bytes, ncells, role, &r_)
                          : cxk_ring_open(p, name_.c_str(), role, &r_);
    if (rc) check(rc, name_);
}

Ring::~Ring() {
    if (r_) warn_unclosed("cxlkit.msg ring " + name_ + " was not closed; call close()");
    close();
}

void Ring::close() {
    if (r_) cxk_ring_close(r_), r_ = nullptr;
    pool_.release();
}

cxk_ring *Ring::get() const {
    if (!r_) throw nb::value_error(("closed ring " + name_).c_str());
    return r_;
}

bool Ring::push(nb::bytes data, uint32_t kind) {
    const int rc = cxk_ring_push(get(), data.c_str(), uint32_t(data.size()), kind);
    if (rc == -EAGAIN) return false;
    check(rc, name_);
    return true;
}

nb::object Ring::pop() {
    const void *pl;
    uint32_t n, kind;
    const int rc = cxk_ring_peek(get(), &pl, &n, &kind);
    if (rc == -EAGAIN) return nb::none();
    check(rc, name_);
    nb::bytes out(static_cast<const char *>(pl), n);
    check(cxk_ring_release(r_), name_);
    return nb::make_tuple(out, kind);
}

bool Ring::wait(uint32_t spin_us, uint32_t yield_us, uint32_t sleep_us, uint32_t timeout_ms) {
    cxk_wait_opts o = wait_opts(spin_us, yield_us, sleep_us, name_);
    cxk_ring *x = get();
    int rc;
    {
        nb::gil_scoped_release unlock;
        rc = cxk_ring_wait(x, &o, timeout_ms);
    }
    if (rc == -ETIMEDOUT) return false;
    check(rc, name_);
    return true;
}

uint32_t Ring::space() const {
    uint32_t n = 0;
    check(cxk_ring_space(get(), &n), name_);
    return n;
}

struct cxk_waiter_stats Ring::waiter_stats() {
    return cxk::py::waiter_stats(cxk_ring_waiter(get()), name_);
}

}  // namespace cxk::py
