// rpc.cpp — the Beluga pattern on cxlkit rings: each client owns a request ring, the server
// a reply ring per client; fixed-size slots, replies in request order, batched publishes.
#include "rpc/rpc.h"
#include "rpc/slots.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "cxlkit.h"
#include "ring/liveness.h"
#include "ring/spin.h"
#include "ring/waiter.h"
#include "ring/wake.h"
#include "sys/config.h"

using namespace cxk::rpc;
using cxk::ring::boot_hash;
using cxk::ring::pid_gone;

struct cxk_rpc_server {
    cxk_pool *pool = nullptr;
    std::string name;
    uint64_t obj_off = 0;
    uint32_t max_clients = 0, slot_bytes = 0, depth = 0;
    uint32_t host = 0;                  // our host slot in the pool
    std::vector<cxk_ring *> req, rep;  // per client slot (nullptr: none)
    std::vector<uint64_t> req_off, req_gen;  // the request ring object each slot attached to
    uint32_t holder_k = 0;              // connected slot whose holder is looked at next
    int64_t holder_ms = 0;              // when the next holder is looked at (monotonic ms)
    uint32_t next = 0;                  // client to look at first
    uint32_t scan = 0;                  // next client slot to look for
    uint64_t polls = 0;
    int cur = -1;                       // client whose request was returned last
    uint32_t connected = 0;
    std::vector<cxk_ring *> live;       // the connected clients' request rings (for a wait)
    std::vector<cxk_ring *> live_rep;   // and their reply rings, in the same order
    bool live_stale = true;             // a client came or went since live was made
    cxk_spin spin{};                    // the adaptive spin of its waits (ring/spin.cpp)
    cxk_waiter waiter{};                // spin and the request rings' wake-up counters
};

struct cxk_rpc_client {
    cxk_pool *pool = nullptr;
    std::string name;
    uint32_t k = UINT32_MAX;            // our client slot
    uint64_t cli_off = 0;               // our identity object (we hold the creator's lease)
    uint64_t stale_gen = 0;             // the reply ring of slot k before we claimed it
    uint32_t stale_host = UINT32_MAX;   // (an earlier holder's: never ours)
    cxk_ring *req = nullptr, *rep = nullptr;
    uint64_t srv_off = 0, srv_gen = 0;
    uint64_t next_id = 1;
    uint64_t outstanding = 0;
    uint32_t depth = 0;
    uint64_t srv_pid = 0, srv_boot = 0;
    uint32_t timeout_ms = 10000;
    uint32_t idle = 0;                  // empty polls, to look at the server now and then
    uint32_t unsynced = 0;              // replies released since our reply-ring head was last
                                        // published for certain (the ring publishes in batches)
    cxk_wait_opts wait{};               // how call and submit wait (cxk_rpc_set_wait)
    cxk_waiter waiter{};                // wait, spin and the reply ring's wake-up counters
    cxk_spin spin{};                    // the adaptive spin of its waits (ring/spin.cpp)
};

namespace {

int64_t now_ms() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

// How often a blocked call looks at its deadline and whether the server is gone.
constexpr int64_t kCheckNs = 1000000;
// A server looks at one connected client's holder (alive? its ring still the one attached?)
// per this many ms: a check costs an object open and a /proc read (~10 us), so 1 ms bounds
// it to ~1 % of an idle server and takes back a dead client of 4096 slots within ~4 s.
constexpr int64_t kHolderCheckMs = 1;
// Client slots a sleeping server looks at after each sleep (cxk_rpc_server_wait_idle): an
// empty slot costs a name lookup (~1 us), so 64 bound it to a few % of a 1 ms sleep.
constexpr uint32_t kScanPerSleep = 64;

bool good_name(const char *n) {
    size_t len = std::strlen(n);
    if (len == 0 || len > CXK_RPC_NAME_MAX) return false;
    for (size_t i = 0; i < len; ++i) {
        char ch = n[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '-'))
            return false;
    }
    return true;
}

// The server process is gone (same machine only; another machine's server is trusted to
// close its service, or calls time out).
bool server_gone(cxk_rpc_client *c) {
    if (cxk_obj_validate(c->pool, c->srv_off, c->srv_gen) != 0) return true;
    if (c->srv_boot != boot_hash()) return false;
    return pid_gone(c->srv_pid);
}

void drop_client(cxk_rpc_server *s, uint32_t k) {
    if (s->req[k]) cxk_ring_close(s->req[k]), s->req[k] = nullptr;
    s->req_off[k] = s->req_gen[k] = 0;
    if (s->rep[k]) {
        cxk_ring_close(s->rep[k]);
        s->rep[k] = nullptr;
        std::string n = ring_name(s->name, k, "rep");
        cxk_obj_destroy(s->pool, n.c_str());
        --s->connected;
    }
    s->live_stale = true;
}

// Every kHolderCheckMs, one connected client: dropped when its request ring was destroyed
// or replaced, or its holder is provably gone (then its slot is taken back where ours to).
void check_holders(cxk_rpc_server *s) {
    if (s->connected == 0) return;
    const int64_t now = now_ms();
    if (now < s->holder_ms) return;
    s->holder_ms = now + kHolderCheckMs;
    for (uint32_t i = 0; i < s->max_clients; ++i) {
        uint32_t k = s->holder_k++ % s->max_clients;
        if (!s->req[k]) continue;
        if (cxk_obj_validate(s->pool, s->req_off[k], s->req_gen[k]) != 0) {
            drop_client(s, k);
        } else if (holder_dead(s->pool, s->name, k)) {
            drop_client(s, k);
            reclaim_if_dead(s->pool, s->name, k, s->host);
        }
        return;
    }
}

// Look for one new client per call: its request ring exists, make its reply ring.
void scan_clients(cxk_rpc_server *s) {
    check_holders(s);
    uint32_t k = s->scan++ % s->max_clients;
    if (s->req[k]) return;
    std::string n = ring_name(s->name, k, "req");
    cxk_ring *r = nullptr;
    if (cxk_ring_open(s->pool, n.c_str(), CXK_RING_CONSUMER, &r)) return;
    struct cxk_obj_stat st;
    if (cxk_ring_payload_max(r) + CXK_RING_CELL_HDR != s->slot_bytes ||
        cxk_obj_stat(s->pool, n.c_str(), &st) != 0 || st.off != cxk_ring_offset(r)) {
        cxk_ring_close(r);  // not made for this server's geometry, or replaced just now
        return;
    }
    if (holder_dead(s->pool, s->name, k)) {
        cxk_ring_close(r);  // left by a client that died: take its slot back
        reclaim_if_dead(s->pool, s->name, k, s->host);
        return;
    }
    std::string rn = ring_name(s->name, k, "rep");
    cxk_obj_destroy(s->pool, rn.c_str());  // a reply ring left for an earlier client k
    cxk_ring *rep = nullptr;
    if (cxk_ring_create(s->pool, rn.c_str(), s->slot_bytes, s->depth, CXK_RING_PRODUCER, &rep)) {
        cxk_ring_close(r);
        return;
    }
    s->req[k] = r, s->rep[k] = rep;
    s->req_off[k] = st.off, s->req_gen[k] = st.generation;
    ++s->connected;
    s->live_stale = true;
}

// the server's waiter: every request ring's wake-up counters
void server_wake(const void *owner, struct cxk_ring_wake_stats *sum) {
    for (const cxk_ring *r : static_cast<const cxk_rpc_server *>(owner)->req)
        cxk::ring::wake_stats_add(r, sum);
}

}  // namespace

extern "C" {

int cxk_rpc_server_create(cxk_pool *p, const char *name, uint32_t max_clients,
                          uint32_t slot_bytes, uint32_t depth, cxk_rpc_server **out) {
    if (!p || !name || !out || !good_name(name) || max_clients == 0 || max_clients > 4096)
        return -EINVAL;
    if (!slot_bytes) slot_bytes = 256;
    if (!depth) depth = 128;
    if (cxk_ring_bytes(slot_bytes, depth) == 0 || slot_bytes < 128) return -EINVAL;
    struct cxk_pool_stat ps;
    if (int rc = cxk_pool_stat(p, &ps)) return rc;
    auto *s = new (std::nothrow) cxk_rpc_server;
    if (s) s->waiter = {nullptr, &s->spin, s, server_wake};
    if (!s) return -ENOMEM;
    s->pool = p, s->name = name, s->max_clients = max_clients, s->host = ps.host_id;
    s->slot_bytes = slot_bytes, s->depth = depth;
    s->req.assign(max_clients, nullptr), s->rep.assign(max_clients, nullptr);
    s->req_off.assign(max_clients, 0), s->req_gen.assign(max_clients, 0);
    cxk_spin_init(&s->spin);
    std::string srv = "rpc." + s->name + ".srv";
    struct cxk_obj_stat st;
    if (cxk_obj_stat(p, srv.c_str(), &st) == 0) {
        // an earlier server: ours to replace if it ran on this host and its process is gone
        SrvHdr h{};
        if (st.state == CXK_OBJ_LIVE && st.nbytes >= sizeof h) {
            cxk_pool_invalidate(p, st.off, sizeof h);
            std::memcpy(&h, static_cast<uint8_t *>(cxk_pool_base(p)) + st.off, sizeof h);
        }
        // not yet published: another process is creating it now (a dead creator's object
        // is reclaimed by the pool's lease rule, not here)
        bool alive = st.state == CXK_OBJ_CREATING || (h.boot == boot_hash() && !pid_gone(h.pid));
        if (st.host != ps.host_id || alive) {
            delete s;
            return -EBUSY;
        }
        cxk_obj_destroy(p, srv.c_str());
        for (uint32_t k = 0; k < max_clients; ++k) {
            std::string rn = ring_name(s->name, k, "rep");
            cxk_obj_destroy(p, rn.c_str());
        }
    }
    int rc = cxk_obj_create(p, srv.c_str(), sizeof(SrvHdr), &s->obj_off);
    if (!rc) {
        auto *h = reinterpret_cast<SrvHdr *>(static_cast<uint8_t *>(cxk_pool_base(p)) + s->obj_off);
        *h = SrvHdr{kSrvMagic, max_clients, slot_bytes, depth, ps.host_id, uint64_t(getpid()),
                    boot_hash(), {}};
        rc = cxk_obj_publish(p, s->obj_off, 0);
        if (rc) cxk_obj_destroy(p, srv.c_str()), cxk_obj_close(p, s->obj_off);
    }
    if (rc) {
        delete s;
        return rc;
    }
    *out = s;
    return 0;
}

void cxk_rpc_server_close(cxk_rpc_server *s) {
    if (!s) return;
    // the service object goes first: a client that sees its reply ring closed then finds
    // the server gone, not a server that dropped it for a corrupt ring
    std::string srv = "rpc." + s->name + ".srv";
    cxk_obj_destroy(s->pool, srv.c_str());
    for (uint32_t k = 0; k < s->max_clients; ++k) drop_client(s, k);
    cxk_obj_close(s->pool, s->obj_off);
    delete s;
}

uint32_t cxk_rpc_server_clients(const cxk_rpc_server *s) { return s ? s->connected : 0; }

int cxk_rpc_server_next(cxk_rpc_server *s, cxk_rpc_req *req) {
    if (!s || !req) return -EINVAL;
    if (s->cur >= 0 && s->req[size_t(s->cur)]) cxk_ring_release(s->req[size_t(s->cur)]);
    s->cur = -1;
    // a new client is looked for now and then, and whenever there is nothing to do
    if ((++s->polls & 63) == 0 || s->connected == 0) scan_clients(s);
    for (uint32_t i = 0; i < s->max_clients; ++i) {
        uint32_t k = (s->next + i) % s->max_clients;
        if (!s->req[k]) continue;
        const void *pl;
        uint32_t n, kind;
        int rc = cxk_ring_peek(s->req[k], &pl, &n, &kind);
        if (rc == -EAGAIN) continue;
        if (rc == -EPIPE || rc == -EBADMSG || (rc == 0 && n < sizeof(SlotHdr))) {
            drop_client(s, k);  // closed, or writing garbage: forget it
            continue;
        }
        if (rc) return rc;
        SlotHdr h;
        std::memcpy(&h, pl, sizeof h);
        *req = cxk_rpc_req{k, h.method, h.id, static_cast<const uint8_t *>(pl) + sizeof h,
                           uint32_t(n - sizeof h), 0};
        cxk::ring::adapt_end(&s->spin);  // the wait for work (if one idled) is answered
        s->cur = int(k);
        s->next = k;  // stay with a busy client: its batch is consecutive
        return 0;
    }
    scan_clients(s);
    s->next = (s->next + 1) % s->max_clients;
    return -EAGAIN;
}

int cxk_rpc_server_reply(cxk_rpc_server *s, uint32_t client, uint64_t id, int32_t status,
                         const void *data, uint32_t nbytes, unsigned flags) {
    if (!s || client >= s->max_clients || (!data && nbytes) || (flags & ~CXK_RPC_DEFER))
        return -EINVAL;
    cxk_ring *r = s->rep[client];
    if (!r) return -EPIPE;
    if (nbytes > cxk_ring_payload_max(r) - sizeof(SlotHdr)) return -EMSGSIZE;
    void *cell;
    if (int rc = cxk_ring_reserve(r, &cell)) {
        // a client keeps at most depth requests outstanding and publishes its head before
        // one could need an unpublished cell (cxk_rpc_submit), so a full reply ring means the
        // client broke the protocol: forget it rather than stop serving everyone else. A head
        // outside its range (-EBADMSG: the client's or a corrupted word) is the same case.
        if (rc != -EAGAIN && rc != -EBADMSG) return rc;
        drop_client(s, client);
        if (s->cur == int(client)) s->cur = -1;
        return -EPIPE;
    }
    SlotHdr h{id, 0, status};
    std::memcpy(cell, &h, sizeof h);
    if (nbytes) std::memcpy(static_cast<uint8_t *>(cell) + sizeof h, data, nbytes);
    return cxk_ring_commit_ex(r, uint32_t(sizeof h + nbytes), 0,
                              flags & CXK_RPC_DEFER ? CXK_RING_DEFER : 0);
}

int cxk_rpc_server_flush(cxk_rpc_server *s) {
    if (!s) return -EINVAL;
    for (auto *r : s->rep)
        if (r) cxk_ring_publish(r);
    return 0;
}

}  // extern "C"

namespace {

// Claim client slot k: our identity "rpc.<svc>.<k>.cli" (taking the slot back first when its
// holder is provably gone), then our request ring. -EBUSY: held by a live or unprovable
// holder; -EAGAIN: a dead holder's, being taken back by another process just now.
int claim_slot(cxk_rpc_client *c, uint32_t k, const SrvHdr &h, uint32_t host) {
    c->stale_gen = 0, c->stale_host = UINT32_MAX;
    std::string cn = ring_name(c->name, k, "cli");
    uint64_t off;
    int rc = cxk_obj_create(c->pool, cn.c_str(), sizeof(CliHdr), &off);
    if (rc == -EEXIST) {
        const Reclaim r = reclaim_if_dead(c->pool, c->name, k, host);
        if (r == Reclaim::contended) return -EAGAIN;
        if (r == Reclaim::freed) rc = cxk_obj_create(c->pool, cn.c_str(), sizeof(CliHdr), &off);
    }
    if (rc == -EEXIST) return -EBUSY;
    if (rc) return rc;
    auto *id = reinterpret_cast<CliHdr *>(static_cast<uint8_t *>(cxk_pool_base(c->pool)) + off);
    *id = CliHdr{kCliMagic, uint64_t(getpid()), boot_hash(), host, {}};
    rc = cxk_obj_publish(c->pool, off, 0);
    if (rc) {
        cxk_obj_destroy(c->pool, cn.c_str()), cxk_obj_close(c->pool, off);
        return rc;
    }
    c->cli_off = off, c->k = k;
    // the reply ring an earlier holder of k had, until the server drops it, is not ours
    std::string rn = ring_name(c->name, k, "rep");
    struct cxk_obj_stat st;
    if (cxk_obj_stat(c->pool, rn.c_str(), &st) == 0) c->stale_gen = st.generation, c->stale_host = st.host;
    rn = ring_name(c->name, k, "req");
    rc = cxk_ring_create(c->pool, rn.c_str(), h.slot_bytes, h.depth, CXK_RING_PRODUCER, &c->req);
    // a request ring without a live identity: a client of an older library, or one being
    // taken back; not ours to touch
    return rc == -EEXIST ? -EBUSY : rc;
}

// Drop our identity (after our request ring: the order claim_slot makes them in reverse).
void drop_identity(cxk_rpc_client *c) {
    if (!c->cli_off) return;
    std::string cn = ring_name(c->name, c->k, "cli");
    cxk_obj_destroy(c->pool, cn.c_str());
    cxk_obj_close(c->pool, c->cli_off);
    c->cli_off = 0;
}

// Our reply ring: the one the server made for us, not one an earlier holder of the slot or a
// dead server left. -EAGAIN: not there yet.
int open_reply_ring(cxk_rpc_client *c) {
    std::string rn = ring_name(c->name, c->k, "rep");
    struct cxk_obj_stat st;
    int rc = cxk_obj_stat(c->pool, rn.c_str(), &st);
    if (rc == -ENOENT) return -EAGAIN;
    if (rc) return rc;
    if (st.state != CXK_OBJ_LIVE || (st.generation == c->stale_gen && st.host == c->stale_host))
        return -EAGAIN;
    rc = cxk_ring_open(c->pool, rn.c_str(), CXK_RING_CONSUMER, &c->rep);
    if (rc == -ENOENT) return -EAGAIN;
    if (rc == 0 && cxk_ring_offset(c->rep) != st.off) {  // replaced since the stat
        cxk_ring_close(c->rep), c->rep = nullptr;
        return -EAGAIN;
    }
    return rc;
}

// One try at connecting: open the service object, take a client slot, wait for the server to
// make our reply ring. -EAGAIN: the object found belongs to a server that is gone (a new one
// will replace it): try again.
int connect_once(cxk_rpc_client *c, int64_t deadline) {
    std::string srv = "rpc." + c->name + ".srv";
    struct cxk_obj_stat st;
    int rc;
    while ((rc = cxk_obj_open(c->pool, srv.c_str(), &st)) == -ENOENT || rc == -EAGAIN) {
        if (now_ms() > deadline) return -ETIMEDOUT;
        usleep(1000);
    }
    if (rc) return rc;
    SrvHdr h;
    cxk_pool_invalidate(c->pool, st.off, sizeof h);
    std::memcpy(&h, static_cast<uint8_t *>(cxk_pool_base(c->pool)) + st.off, sizeof h);
    c->srv_off = st.off, c->srv_gen = st.generation;
    c->srv_pid = h.pid, c->srv_boot = h.boot;
    if (st.nbytes < sizeof h || h.magic != kSrvMagic || h.max_clients == 0 ||
        h.max_clients > 4096 || cxk_ring_bytes(h.slot_bytes, h.depth) == 0 || h.slot_bytes < 128)
        return -EBADMSG;
    if (server_gone(c)) return -EAGAIN;  // a dead server's object, not yet replaced
    c->depth = h.depth;
    struct cxk_pool_stat ps;
    if ((rc = cxk_pool_stat(c->pool, &ps)) != 0) return rc;
    rc = -EBUSY;  // every client slot taken
    bool contended = false;  // a dead holder's slot was being taken back by another process
    for (uint32_t k = 0; k < h.max_clients && (rc == -EBUSY || rc == -EAGAIN); ++k) {
        rc = claim_slot(c, k, h, ps.host_id);
        if (rc == -EBUSY || rc == -EAGAIN) drop_identity(c);
        contended |= rc == -EAGAIN;
    }
    if ((rc == -EBUSY || rc == -EAGAIN) && contended) return -EAGAIN;  // try again: it frees
    if (rc) return rc;
    // the server makes our reply ring when it notices us
    while ((rc = open_reply_ring(c)) != 0) {
        if (rc != -EAGAIN) return rc;
        if (now_ms() > deadline) return -ETIMEDOUT;
        if (server_gone(c)) return -EAGAIN;
        usleep(200);
    }
    // a reply ring left by a dead server for an earlier client k is not ours
    return server_gone(c) ? -EAGAIN : 0;
}

// Undo a try: our request ring (the server sees -EPIPE), the reply ring, the service object.
void disconnect(cxk_rpc_client *c) {
    if (c->rep) cxk_ring_close(c->rep), c->rep = nullptr;
    if (c->req) {
        cxk_ring_close(c->req), c->req = nullptr;
        std::string rn = ring_name(c->name, c->k, "req");
        cxk_obj_destroy(c->pool, rn.c_str());
    }
    drop_identity(c);
    if (c->srv_off) cxk_obj_close(c->pool, c->srv_off), c->srv_off = 0;
}

// the client's waiter: its reply ring's wake-up counters
void client_wake(const void *owner, struct cxk_ring_wake_stats *sum) {
    cxk::ring::wake_stats_add(static_cast<const cxk_rpc_client *>(owner)->rep, sum);
}

}  // namespace

extern "C" {

int cxk_rpc_connect(cxk_pool *p, const char *name, uint32_t timeout_ms, cxk_rpc_client **out) {
    if (!p || !name || !out || !good_name(name)) return -EINVAL;
    using cxk::config::Id;
    if (int rc = cxk::config::check({Id::MSG_SPIN_US, Id::MSG_YIELD_US, Id::MSG_SLEEP_US}))
        return rc;  // the wait below reads them where nothing can fail
    const int64_t deadline = now_ms() + (timeout_ms ? timeout_ms : 10000);
    auto *c = new (std::nothrow) cxk_rpc_client;
    if (!c) return -ENOMEM;
    c->waiter = {&c->wait, &c->spin, c, client_wake};
    c->pool = p, c->name = name;
    if (timeout_ms) c->timeout_ms = timeout_ms;
    cxk_wait_opts_init(&c->wait);
    cxk_spin_init(&c->spin);
    int rc;
    while ((rc = connect_once(c, deadline)) == -EAGAIN) {
        disconnect(c);
        if (now_ms() > deadline) {
            rc = -ETIMEDOUT;
            break;
        }
        usleep(1000);
    }
    if (rc) {
        disconnect(c);
        delete c;
        return rc;
    }
    *out = c;
    return 0;
}

void cxk_rpc_close(cxk_rpc_client *c) {
    if (!c) return;
    disconnect(c);  // the server sees -EPIPE on our request ring and drops us
    delete c;
}

uint32_t cxk_rpc_client_slot(const cxk_rpc_client *c) { return c ? c->k : UINT32_MAX; }

uint32_t cxk_rpc_payload_max(const cxk_rpc_client *c) {
    return c ? cxk_ring_payload_max(c->req) - uint32_t(sizeof(SlotHdr)) : 0;
}

int cxk_rpc_submit(cxk_rpc_client *c, uint32_t method, const void *data, uint32_t nbytes,
                   unsigned flags, uint64_t *id) {
    if (!c || (!data && nbytes) || (flags & ~CXK_RPC_DEFER)) return -EINVAL;
    if (nbytes > cxk_rpc_payload_max(c)) return -EMSGSIZE;
    // at most depth outstanding: the server's reply ring then always has room for ours...
    if (c->outstanding >= c->depth) return -EAGAIN;
    // ...provided the replies we released are released in the server's view too: the ring
    // publishes its head every batch of releases, so up to a batch of consumed replies may
    // still hold cells the server counts as full. Before a request that could need one of
    // those cells for its reply, publish the head.
    if (c->outstanding + c->unsynced >= c->depth) {
        cxk_ring_sync(c->rep);
        c->unsynced = 0;
    }
    void *cell;
    int rc;
    cxk_wait w;
    int64_t next_check = 0;
    bool waiting = false;
    while ((rc = cxk_ring_reserve(c->req, &cell)) == -EAGAIN) {
        // fewer than depth outstanding, so the full cells are requests already answered:
        // the server frees each right after publishing its reply (which we may hold), so
        // the room comes; wait for it rather than fail a submit the depth allows
        if (!waiting) cxk_wait_begin(&w, &c->wait), waiting = true, next_check = kCheckNs;
        const int64_t el = cxk_wait_idle(&w);
        if (el >= next_check) {
            next_check = el + kCheckNs;
            if (server_gone(c)) return -EPIPE;
            if (el > int64_t(c->timeout_ms) * 1000000) return -ETIMEDOUT;
        }
    }
    if (rc) return rc;
    SlotHdr h{c->next_id, method, 0};
    std::memcpy(cell, &h, sizeof h);
    if (nbytes) std::memcpy(static_cast<uint8_t *>(cell) + sizeof h, data, nbytes);
    rc = cxk_ring_commit_ex(c->req, uint32_t(sizeof h + nbytes), 0,
                            flags & CXK_RPC_DEFER ? CXK_RING_DEFER : 0);
    if (rc) return rc;
    if (id) *id = c->next_id;
    ++c->next_id, ++c->outstanding;
    return 0;
}

int cxk_rpc_set_wait(cxk_rpc_client *c, const cxk_wait_opts *o) {
    return c ? cxk_waiter_set_wait(&c->waiter, o) : -EINVAL;  // kept one release
}

int cxk_rpc_flush(cxk_rpc_client *c) { return c ? cxk_ring_publish(c->req) : -EINVAL; }

int cxk_rpc_poll(cxk_rpc_client *c, uint64_t *id, int32_t *status, void *buf, uint32_t cap,
                 uint32_t *nbytes) {
    if (!c || (!buf && cap)) return -EINVAL;
    const void *pl;
    uint32_t n, kind;
    int rc = cxk_ring_peek(c->rep, &pl, &n, &kind);
    if (rc == -EAGAIN && c->outstanding && (++c->idle & 4095) == 0 && server_gone(c)) {
        // a reply published just before the server left is still ours: look once more
        rc = cxk_ring_peek(c->rep, &pl, &n, &kind);
        if (rc == -EAGAIN) return -EPIPE;
    }
    // our reply ring closed by a server still there: it dropped us for what it read in our
    // rings (a head outside its range, cells no correct client writes); the server closes
    // its service object before its rings when it leaves
    if (rc == -EPIPE && !server_gone(c)) return -EBADMSG;
    if (rc) return rc;
    SlotHdr h;
    if (n < sizeof h) return -EBADMSG;
    std::memcpy(&h, pl, sizeof h);
    // replies come in request order: the oldest outstanding id is next_id - outstanding
    if (!c->outstanding || h.id != c->next_id - c->outstanding) return -EBADMSG;
    const uint32_t len = uint32_t(n - sizeof h);
    if (nbytes) *nbytes = len;
    if (len > cap) return -EMSGSIZE;
    if (len) std::memcpy(buf, static_cast<const uint8_t *>(pl) + sizeof h, len);
    if (id) *id = h.id;
    if (status) *status = h.status;
    --c->outstanding;
    ++c->unsynced;
    cxk::ring::adapt_end(&c->spin);  // the wait for a reply (if one idled) is answered
    return cxk_ring_release(c->rep);
}

int cxk_rpc_call(cxk_rpc_client *c, uint32_t method, const void *req, uint32_t nbytes,
                 void *reply, uint32_t cap, uint32_t *reply_nbytes, int32_t *status) {
    if (!c) return -EINVAL;
    if (c->outstanding) return -EPROTO;  // a blocking call would take another's reply
    if (int rc = cxk_rpc_submit(c, method, req, nbytes, 0, nullptr)) return rc;
    int32_t st = 0;
    cxk_wait w;
    cxk_wait_begin(&w, &c->wait);
    int64_t next_check = kCheckNs;
    for (;;) {
        int rc = cxk_rpc_poll(c, nullptr, &st, reply, cap, reply_nbytes);
        if (rc == 0) break;
        if (rc != -EAGAIN) return rc;
        // spin, then sleep until the server's publish wakes us (same-host wake-up)
        const int64_t el = cxk_rpc_wait_idle(c, &w);
        if (el < next_check) continue;
        next_check = el + kCheckNs;
        if (server_gone(c)) {  // its last reply may have landed before it left
            rc = cxk_rpc_poll(c, nullptr, &st, reply, cap, reply_nbytes);
            if (rc == 0) break;
            return rc == -EAGAIN ? -EPIPE : rc;
        }
        if (el > int64_t(c->timeout_ms) * 1000000) return -ETIMEDOUT;
    }
    if (status) *status = st;
    return st < 0 ? st : 0;
}

}  // extern "C"

// ---- waits that a publish ends (the same-host wake-up, native/ring/wake.cpp) ----
extern "C" {

int64_t cxk_rpc_wait_idle(cxk_rpc_client *c, cxk_wait *w) {
    if (!c || !c->rep) return cxk_wait_idle(w);
    // the woke rule looks at whether our request's publish woke the server (read at the
    // wait's first idle only: the adaptive spin looks at it then)
    struct cxk_ring_wake_stats ws {};
    ws.wakes_sent = c->spin.wakes_seen;
    if (w && w->polls == 0) cxk_ring_wake_stats(c->req, &ws);
    return cxk::ring::adapt_idle(&c->spin, w, ws.wakes_sent, &c->rep, 1);
}

int64_t cxk_rpc_server_wait_idle(cxk_rpc_server *s, cxk_wait *w) {
    if (!s) return cxk_wait_idle(w);
    if (s->live_stale) {
        s->live.clear(), s->live_rep.clear();
        for (uint32_t k = 0; k < s->max_clients; ++k)
            if (s->req[k]) s->live.push_back(s->req[k]), s->live_rep.push_back(s->rep[k]);
        s->live_stale = false;
    }
    // a client waits for the replies we deferred: publish them before we sleep (only the
    // connected clients' rings: this runs at every idle poll, max_clients may be 4096)
    for (cxk_ring *r : s->live_rep) cxk_ring_publish(r);
    // no client yet: new ones are looked for between timed sleeps (a connect polls for its
    // reply ring every 200 us; more than 128 clients: timed sleeps too, wake.cpp)
    if (s->live.empty()) return cxk::ring::adapt_idle(&s->spin, w, 0, nullptr, 0);
    // the woke rule looks at whether our replies' publishes woke a client (at the wait's
    // first idle only: the sum walks every connected client)
    uint64_t wakes = s->spin.wakes_seen;
    if (w && w->polls == 0) wakes = 0;
    for (size_t i = 0; w && w->polls == 0 && i < s->live_rep.size(); ++i) {
        cxk_ring *r = s->live_rep[i];
        struct cxk_ring_wake_stats ws {};
        cxk_ring_wake_stats(r, &ws);
        wakes += ws.wakes_sent;
    }
    struct cxk_ring_wake_stats before, after;
    cxk_ring_wake_stats(s->live[0], &before);
    const int64_t el =
        cxk::ring::adapt_idle(&s->spin, w, wakes, s->live.data(), s->live.size());
    cxk_ring_wake_stats(s->live[0], &after);
    if (after.timeouts != before.timeouts) {
        // a new client's rings are not among those we slept on: after a futex sleep that
        // no one ended, look at up to kScanPerSleep client slots (not the one server_next
        // looks at per call), so a connect waits about one sleep (1 ms), not max_clients.
        // Timed sleeps (no wake-up) keep server_next's pace: they come every <= 50 us.
        for (uint32_t i = 0; i < s->max_clients && i < kScanPerSleep; ++i) scan_clients(s);
    }
    return el;
}

cxk_waiter *cxk_rpc_waiter(cxk_rpc_client *c) { return c ? &c->waiter : nullptr; }
cxk_waiter *cxk_rpc_server_waiter(cxk_rpc_server *s) { return s ? &s->waiter : nullptr; }

// kept one release: the waiter's calls (ring/waiter.cpp) under the client's and server's names
int cxk_rpc_wake_stats(const cxk_rpc_client *c, struct cxk_ring_wake_stats *st) {
    return c && c->rep ? cxk::ring::waiter_wake(&c->waiter, st) : -EINVAL;
}
int cxk_rpc_spin_stats(const cxk_rpc_client *c, struct cxk_spin *st) {
    return c ? cxk::ring::waiter_spin(&c->waiter, st) : -EINVAL;
}
int cxk_rpc_server_spin_stats(const cxk_rpc_server *s, struct cxk_spin *st) {
    return s ? cxk::ring::waiter_spin(&s->waiter, st) : -EINVAL;
}
int cxk_rpc_server_wake_stats(const cxk_rpc_server *s, struct cxk_ring_wake_stats *st) {
    return s ? cxk::ring::waiter_wake(&s->waiter, st) : -EINVAL;
}

}  // extern "C"
