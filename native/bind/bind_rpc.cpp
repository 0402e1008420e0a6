// bind_rpc.cpp — cxlkit._native's RPC part: RpcServer and RpcClient on the caller's pool
// handle (the one face of a pool: each native call holds the handle as every pool call does,
// so the pool cannot be unmapped under it). Waits release the GIL and poll the rings under
// the library's wait policy (spin, then yield, then sleep: cxk_wait_*; the machine may have
// fewer cores than processes). Replies are committed deferred and published in batches: when
// the server runs out of queued requests, or every kBatch replies (one fence for many slots,
// the Beluga pattern).
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <atomic>
#include <cerrno>
#include <mutex>
#include <string>
#include <vector>

#include "bind/bind.h"
#include "bind/bind_msg.h"
#include "bind/bind_pool.h"
#include "cxlkit.h"

namespace cxk::py {
namespace {

constexpr uint32_t kBatch = 32;       // replies published together at most
constexpr uint32_t kSlotHdr = 16;     // rpc.h SlotHdr: id, method, status

std::string buf_bytes(nb::handle obj) {
    Buffer b(obj, PyBUF_SIMPLE);
    return std::string(b.data(), b.size());
}

struct RpcServer {
    nb::object h;                       // the caller's PoolHandle (kept alive)
    cxk_rpc_server *s = nullptr;
    std::string name;
    uint32_t payload_max = 0;
    uint32_t pending = 0;               // deferred replies not yet published
    cxk_wait_opts wait{};               // how next() waits for work (set_wait)
    std::atomic<bool> stopping{false};  // set by stop() from any thread
    std::mutex mu;                      // one native call at a time

    RpcServer(nb::handle pool, const std::string &svc, uint32_t max_clients,
              uint32_t slot_bytes, uint32_t depth)
        : h(pool_handle(pool)), name(svc) {
        PoolHold use = hold_pool(h);
        int rc;
        {
            nb::gil_scoped_release unlock;
            rc = cxk_rpc_server_create(use.get(), name.c_str(), max_clients, slot_bytes, depth,
                                       &s);
        }
        check(rc, name);
        payload_max = (slot_bytes ? slot_bytes : 256) - CXK_RING_CELL_HDR - kSlotHdr;
        cxk_wait_opts_init(&wait);
    }
    ~RpcServer() { close(); }
    // GIL held. The pool is held across the native close, which runs under mu without the
    // GIL (a reply waiting for mu holds the GIL). A pool closed first took our leases and
    // mapping with it: nothing of ours is left in it, and the handle (process memory) cannot
    // be freed without touching the unmapped rings, so it is dropped as it is.
    void close() {
        stopping = true;
        try {
            PoolHold use = hold_pool(h);
            nb::gil_scoped_release unlock;
            std::lock_guard<std::mutex> g(mu);
            if (s) cxk_rpc_server_flush(s), cxk_rpc_server_close(s), s = nullptr;
        } catch (const nb::builtin_exception &) {
            s = nullptr;
        }
    }
    cxk_rpc_server *get() {
        if (!s) throw nb::value_error(("closed RPC server " + name).c_str());
        return s;
    }
};

struct RpcClient {
    nb::object h;                       // the caller's PoolHandle (kept alive)
    cxk_rpc_client *c = nullptr;
    std::string name;
    uint32_t timeout_ms = 10000;
    cxk_wait_opts wait{};               // how call_many waits for replies (set_wait)
    std::mutex mu;

    RpcClient(nb::handle pool, const std::string &svc, uint32_t timeout)
        : h(pool_handle(pool)), name(svc), timeout_ms(timeout ? timeout : 10000) {
        PoolHold use = hold_pool(h);
        int rc;
        {
            nb::gil_scoped_release unlock;
            rc = cxk_rpc_connect(use.get(), name.c_str(), timeout_ms, &c);
        }
        cxk_wait_opts_init(&wait);
        check(rc, name);
    }
    ~RpcClient() { close(); }
    // as RpcServer::close
    void close() {
        try {
            PoolHold use = hold_pool(h);
            nb::gil_scoped_release unlock;
            std::lock_guard<std::mutex> g(mu);
            if (c) cxk_rpc_close(c), c = nullptr;
        } catch (const nb::builtin_exception &) {
            c = nullptr;
        }
    }
    cxk_rpc_client *get() {
        if (!c) throw nb::value_error(("closed RPC client of " + name).c_str());
        return c;
    }
};

// The next request, or None once timeout_ms (< 0: none) passed or stop() was called.
// Deferred replies are published whenever no request is queued.
nb::object server_next(RpcServer &r, int64_t timeout_ms) {
    cxk_rpc_req q{};
    std::string data;
    int rc;
    PoolHold use = hold_pool(r.h);  // a close of the pool waits for this call
    {
        nb::gil_scoped_release unlock;
        std::lock_guard<std::mutex> g(r.mu);
        if (!r.s) rc = -EBADF;
        else {
            const int64_t limit = timeout_ms < 0 ? INT64_MAX : timeout_ms * 1000000;
            cxk_wait w;
            cxk_wait_begin(&w, &r.wait);
            for (;;) {
                rc = cxk_rpc_server_next(r.s, &q);
                if (rc != -EAGAIN) break;
                if (r.pending) cxk_rpc_server_flush(r.s), r.pending = 0;
                if (r.stopping.load(std::memory_order_relaxed)) break;
                // a client's publish ends the sleeps (same-host wake-up); deferred replies
                // are published before each sleep
                if (cxk_rpc_server_wait_idle(r.s, &w) > limit) break;
            }
            if (rc == 0) data.assign(static_cast<const char *>(q.data), q.nbytes);
        }
    }
    if (rc == -EAGAIN) return nb::none();
    if (rc == -EBADF) r.get();
    check(rc, r.name);
    return nb::make_tuple(q.client, q.method, q.id, nb::bytes(data.data(), data.size()));
}

// Answer a request (deferred; published by the next wait or every kBatch). Returns 0, or
// -EPIPE when that client has gone (nothing to answer).
int server_reply(RpcServer &r, uint32_t client, uint64_t id, int32_t status, nb::handle data) {
    std::string d = buf_bytes(data);
    PoolHold use = hold_pool(r.h);
    std::lock_guard<std::mutex> g(r.mu);
    int rc = cxk_rpc_server_reply(r.get(), client, id, status, d.data(), uint32_t(d.size()),
                                  CXK_RPC_DEFER);
    if (rc == -EPIPE) return rc;
    check(rc, r.name);
    if (++r.pending >= kBatch) cxk_rpc_server_flush(r.s), r.pending = 0;
    return 0;
}

// Pipelined calls: up to the ring's depth outstanding, each burst published with one fence;
// replies in order, as (status, bytes) pairs.
nb::list client_call_many(RpcClient &r, uint32_t method, const std::vector<nb::bytes> &in) {
    std::vector<std::string> reqs;
    reqs.reserve(in.size());
    for (const auto &b : in) reqs.emplace_back(b.c_str(), b.size());
    std::vector<std::pair<int32_t, std::string>> out(reqs.size());
    int rc = 0;
    PoolHold use = hold_pool(r.h);
    {
        nb::gil_scoped_release unlock;
        std::lock_guard<std::mutex> g(r.mu);
        if (!r.c) rc = -EBADF;
        std::vector<char> buf(r.c ? cxk_rpc_payload_max(r.c) : 0);
        size_t sent = 0, got = 0;
        cxk_wait w;
        cxk_wait_begin(&w, &r.wait);
        while (!rc && got < reqs.size()) {
            bool burst = false;
            while (sent < reqs.size()) {
                const std::string &q = reqs[sent];
                rc = cxk_rpc_submit(r.c, method, q.data(), uint32_t(q.size()), CXK_RPC_DEFER,
                                    nullptr);
                if (rc == -EAGAIN) break;
                if (rc) break;
                ++sent, burst = true;
            }
            if (rc == -EAGAIN) rc = 0;
            if (rc) break;
            if (burst) cxk_rpc_flush(r.c);
            uint32_t n = 0;
            int32_t st = 0;
            int prc = cxk_rpc_poll(r.c, nullptr, &st, buf.data(), uint32_t(buf.size()), &n);
            if (prc == 0) {
                out[got++] = {st, std::string(buf.data(), n)};
                cxk_wait_begin(&w, &r.wait);  // progress: the timeout and the spin start over
            } else if (prc != -EAGAIN) {
                rc = prc;
            } else if (cxk_rpc_wait_idle(r.c, &w) > int64_t(r.timeout_ms) * 1000000) {
                rc = -ETIMEDOUT;
            }
        }
    }
    if (rc == -EBADF) r.get();
    check(rc, r.name);
    nb::list l;
    for (auto &[st, d] : out) l.append(nb::make_tuple(st, nb::bytes(d.data(), d.size())));
    return l;
}

nb::tuple client_call(RpcClient &r, uint32_t method, nb::handle data) {
    std::string d = buf_bytes(data);
    std::string reply;
    int32_t st = 0;
    int rc;
    PoolHold use = hold_pool(r.h);
    {
        nb::gil_scoped_release unlock;
        std::lock_guard<std::mutex> g(r.mu);
        if (!r.c) rc = -EBADF;
        else {
            reply.resize(cxk_rpc_payload_max(r.c));
            uint32_t n = 0;
            rc = cxk_rpc_call(r.c, method, d.data(), uint32_t(d.size()), reply.data(),
                              uint32_t(reply.size()), &n, &st);
            reply.resize(n <= reply.size() ? n : 0);
            if (rc == st) rc = 0;  // the server's own (negative) status is a reply, not a failure
        }
    }
    if (rc == -EBADF) r.get();
    check(rc, r.name);
    return nb::make_tuple(st, nb::bytes(reply.data(), reply.size()));
}

}  // namespace

}  // namespace cxk::py

CXK_BIND(rpc) {
    using namespace cxk::py;
    m.attr("RPC_NAME_MAX") = CXK_RPC_NAME_MAX;
    nb::class_<RpcServer>(m, "RpcServer")
        .def(nb::init<nb::handle, const std::string &, uint32_t, uint32_t, uint32_t>())
        .def("close", &RpcServer::close)
        .def("stop", [](RpcServer &r) { r.stopping = true; })
        .def("resume", [](RpcServer &r) { r.stopping = false; })
        .def_prop_ro("stopping", [](RpcServer &r) { return r.stopping.load(); })
        .def_prop_ro("closed", [](RpcServer &r) { return r.s == nullptr; })
        .def_prop_ro("payload_max", [](RpcServer &r) { return r.payload_max; })
        .def_prop_ro("clients", [](RpcServer &r) { return cxk_rpc_server_clients(r.get()); })
        .def("set_wait", [](RpcServer &r, uint32_t spin_us, uint32_t yield_us, uint32_t sleep_us) {
            cxk_wait_opts o = wait_opts(spin_us, yield_us, sleep_us, "RPC server " + r.name);
            std::lock_guard<std::mutex> g(r.mu);
            r.wait = o;
        })
        .def("waiter_stats", [](RpcServer &r) {
            std::lock_guard<std::mutex> g(r.mu);
            return waiter_stats(cxk_rpc_server_waiter(r.get()), r.name);
        })
        .def("next", &server_next)
        .def("reply", &server_reply)
        .def("flush", [](RpcServer &r) {
            PoolHold use = hold_pool(r.h);
            std::lock_guard<std::mutex> g(r.mu);
            check(cxk_rpc_server_flush(r.get()), r.name);
            r.pending = 0;
        });
    nb::class_<RpcClient>(m, "RpcClient")
        .def(nb::init<nb::handle, const std::string &, uint32_t>())
        .def("close", &RpcClient::close)
        .def_prop_ro("closed", [](RpcClient &r) { return r.c == nullptr; })
        .def_prop_ro("slot", [](RpcClient &r) { return cxk_rpc_client_slot(r.get()); })
        .def_prop_ro("payload_max", [](RpcClient &r) { return cxk_rpc_payload_max(r.get()); })
        .def("set_wait", [](RpcClient &r, uint32_t spin_us, uint32_t yield_us, uint32_t sleep_us) {
            cxk_wait_opts o = wait_opts(spin_us, yield_us, sleep_us, "RPC client of " + r.name);
            std::lock_guard<std::mutex> g(r.mu);
            check(cxk_rpc_set_wait(r.get(), &o), r.name);
            r.wait = o;
        })
        .def("waiter_stats", [](RpcClient &r) {
            std::lock_guard<std::mutex> g(r.mu);
            return waiter_stats(cxk_rpc_waiter(r.get()), r.name);
        })
        .def("call", &client_call)
        .def("call_many", &client_call_many);
}
