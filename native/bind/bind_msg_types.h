// bind_msg_types.h — private to the messaging binding files: MsgComm (a rank of a job, on the
// caller's pool handle, which refuses to close while the comm uses it), MsgRequest (holds the
// Python buffer of a non-blocking call until it completes), MsgMemory (pool memory of a comm,
// lent through the buffer protocol), MsgWindow (one-sided windows) and Ring (a bare ring end,
// for tests and tools). Each method is one bound call (bind_msg.cpp binds them). Blocking
// calls release the GIL; one native call per comm at a time (its mutex).
#pragma once
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bind/bind.h"
#include "bind/bind_msg.h"
#include "bind/bind_pool.h"
#include "cxlkit.h"

namespace cxk::py {

// A Python buffer held for the duration of a native call or a request.
struct View : Buffer {
    View() = default;
    View(nb::handle obj, bool writable) : Buffer(obj, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) {}
    void *ptr() const { return data(); }
    int64_t len() const { return int64_t(size()); }
};

// The caller's pool for the life of a comm or ring: a reference to its handle and a hold
// of its mapping, counted as attached so that the pool's close refuses (BufferError naming
// the pool) instead of unmapping under us or waiting for us. Take it with the GIL held.
class PoolUse {
  public:
    explicit PoolUse(nb::handle pool);
    ~PoolUse() { release(); }
    PoolUse(const PoolUse &) = delete;
    PoolUse &operator=(const PoolUse &) = delete;
    cxk_pool *get() const { return hold_ ? hold_->get() : nullptr; }
    // no GIL needed: atomics only (the handle's reference goes with the object)
    void release();

  private:
    nb::object handle_;
    std::unique_ptr<PoolHold> hold_;
};

// A warning from a destructor: shown (or, turned into an error by the filters, reported as
// unraisable), never raised out of it.
void warn_unclosed(const std::string &what);

// Set for the scope of one blocking call: Ctrl-C ends the wait (bind_msg.cpp).
struct Interruptible {
    Interruptible();
    ~Interruptible();
    Interruptible(const Interruptible &) = delete;
    Interruptible &operator=(const Interruptible &) = delete;
};
// With the GIL held, after a failed blocking call: the exception a signal handler raised.
void raise_if_interrupted();

class MsgRequest;

class MsgComm {
  public:
    MsgComm(nb::handle pool_obj, const std::string &job, int rank, int size,
            uint32_t cell_bytes, uint32_t ncells, uint64_t eager_bytes, uint32_t timeout_ms,
            uint32_t dead_ms, uint32_t join_ms, uint32_t domain);
    ~MsgComm();
    MsgComm(const MsgComm &) = delete;
    MsgComm &operator=(const MsgComm &) = delete;

    // Run fn() with the comm's mutex held and the GIL released: a thread must never wait for
    // that mutex while holding the GIL, since a blocking call that holds the mutex takes the
    // GIL in its interrupt hook (py_interrupt) — that would deadlock the two threads.
    template <class Fn> int locked(Fn fn) {
        nb::gil_scoped_release unlock;
        std::lock_guard<std::mutex> g(mu_);
        return fn();
    }
    // Run fn(comm) so, interruptible; raise on a negative return (a signal handler's
    // exception when one ended the wait).
    template <class Fn> int call(const std::string &what, Fn fn) {
        cxk_comm *c = get();
        const int r = locked([&] {
            Interruptible intr;
            return fn(c);
        });
        if (r < 0) {
            raise_if_interrupted();
            check(r, what);
        }
        return r;
    }
    cxk_comm *get() const;
    cxk_comm *raw() const { return c_; }  // nullptr once closed
    const std::string &label() const { return label_; }
    Py_ssize_t mem_views = 0;  // live views of its pool memory (MsgMemory): close refuses

    void close();
    bool closed() const { return c_ == nullptr; }
    int rank() const { return cxk_msg_rank(get()); }
    int size() const { return cxk_msg_size(get()); }
    uint64_t eager_bytes() const { return cxk_msg_eager_bytes(get()); }
    int failed_rank() const { return c_ ? cxk_msg_failed_rank(c_) : failed_; }
    bool peer_coherent(int peer) const;
    bool is_pool_mem(nb::handle buf) const;
    void set_wait(uint32_t spin_us, uint32_t yield_us, uint32_t sleep_us);
    nb::tuple get_wait();
    struct cxk_waiter_stats waiter_stats();
    void set_checksum(bool on);
    void send(nb::handle buf, int dest, int tag, bool sync);
    nb::tuple recv_into(nb::handle buf, int source, int tag);
    static MsgRequest *isend(nb::handle self, nb::handle buf, int dest, int tag, bool sync);
    static MsgRequest *irecv(nb::handle self, nb::handle buf, int source, int tag);
    nb::object iprobe(int source, int tag);
    nb::tuple probe(int source, int tag);
    void barrier();
    void bcast(nb::handle buf, int root);
    void allreduce(nb::handle src, nb::handle dst, int64_t n, int type, int op);

  private:
    int shut();

    PoolUse pool_;
    cxk_comm *c_ = nullptr;
    std::mutex mu_;
    std::string label_;
    int failed_ = -1;  // the rank that made finalize fail
};

// A comm's owner object (MsgRequest, MsgMemory, MsgWindow keep it alive) as the comm.
inline MsgComm &comm_of(const nb::object &comm) { return *nb::cast<MsgComm *>(comm); }

class MsgRequest {
  public:
    MsgRequest(nb::handle comm, nb::handle buf, bool writable)
        : comm_(nb::borrow(comm)), view_(buf, writable) {}
    ~MsgRequest();
    MsgRequest(const MsgRequest &) = delete;
    MsgRequest &operator=(const MsgRequest &) = delete;
    bool done() const { return r_ == nullptr; }
    nb::object wait();
    nb::object test();
    void cancel();

  private:
    friend class MsgComm;
    MsgComm &owner() const { return comm_of(comm_); }
    void finished() { r_ = nullptr, view_.release(); }
    cxk_msg_req *r_ = nullptr;
    nb::object comm_;  // keeps the MsgComm alive
    View view_;
};

// Pool-resident memory of a comm (cxk_msg_alloc_mem), lent through the buffer protocol: a
// send from it above the eager limit travels in one copy. Its views are counted here and in
// the comm, so neither free nor the comm's close unmaps under a live view.
class MsgMemory {
  public:
    MsgMemory(nb::handle comm, uint64_t nbytes);
    ~MsgMemory();
    MsgMemory(const MsgMemory &) = delete;
    MsgMemory &operator=(const MsgMemory &) = delete;
    void free();
    bool freed() const { return ptr_ == nullptr; }
    uint64_t nbytes() const { return nbytes_; }
    static int getbuffer(PyObject *self, Py_buffer *view, int flags);
    static void releasebuffer(PyObject *self, Py_buffer *);

  private:
    MsgComm &owner() const { return comm_of(comm_); }
    void *ptr_ = nullptr;
    uint64_t nbytes_ = 0;
    nb::object comm_;
    Py_ssize_t exports_ = 0;
};

class MsgWindow {
  public:
    MsgWindow(nb::handle comm, uint64_t nbytes);
    MsgWindow(const MsgWindow &) = delete;
    MsgWindow &operator=(const MsgWindow &) = delete;
    ExportedRange exported() const;
    Py_ssize_t exports = 0;
    void free();
    uint64_t size_of(int rank);
    void put(nb::handle buf, int target, uint64_t off);
    void get_into(nb::handle buf, int target, uint64_t off);
    void accumulate(nb::handle buf, uint64_t count, int type, int target, uint64_t off, int op);
    nb::bytes fetch_and_op(nb::bytes operand, int type, int target, uint64_t off, int op);
    nb::bytes compare_and_swap(nb::bytes cmp, nb::bytes swp, int type, int target,
                               uint64_t off);
    void flush(int target);
    void fence();
    void post(const std::vector<int> &ranks);
    void start(const std::vector<int> &ranks);
    void complete();
    void wait();
    void lock(int type, int target);
    void unlock(int target);

  private:
    MsgComm &owner() const { return comm_of(comm_); }
    cxk_win *get() const;
    // one window call through the comm (its mutex, GIL released, interruptible)
    template <class Fn> void on_comm(const std::string &what, Fn fn) {
        cxk_win *x = get();
        owner().call(what, [&](cxk_comm *) { return fn(x); });
    }
    cxk_win *w_ = nullptr;
    nb::object comm_;
    uint64_t nbytes_ = 0;
};

class Ring {
  public:
    Ring(nb::handle pool_obj, const std::string &ring_name, int role, uint32_t cell_bytes,
         uint32_t ncells, bool create);
    ~Ring();
    Ring(const Ring &) = delete;
    Ring &operator=(const Ring &) = delete;
    void close();
    uint32_t payload_max() const { return cxk_ring_payload_max(get()); }
    uint32_t ncells() const { return cxk_ring_ncells(get()); }
    bool push(nb::bytes data, uint32_t kind);
    nb::object pop();
    bool wait(uint32_t spin_us, uint32_t yield_us, uint32_t sleep_us, uint32_t timeout_ms);
    uint32_t space() const;
    struct cxk_waiter_stats waiter_stats();

  private:
    cxk_ring *get() const;
    PoolUse pool_;
    cxk_ring *r_ = nullptr;
    std::string name_;
};

}  // namespace cxk::py
