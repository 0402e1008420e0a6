// comm.cpp — joining a job (rank object, session agreement, stale objects of a crashed run),
// peer liveness (pid on this machine, heartbeat elsewhere), the wait deadline, finalize.
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <random>

#include "msg/msg.h"
#include "ring/liveness.h"
#include "ring/spin.h"
#include "ring/waiter.h"
#include "sys/config.h"

namespace cxk::msg {

using cxk::ring::boot_hash;
using cxk::ring::pid_gone;

// How often a wait looks at its deadline and its peers' liveness (a heartbeat moves every
// 100 ms, a peer is dead after dead_ms: a millisecond is fine-grained enough, and cheap).
constexpr int64_t kCheckNs = 1000000;
// How often a wait calls the thread's interrupt hook: the Python binding's takes the GIL to
// run pending signal handlers, too costly for every millisecond; 20 ms is below what a person
// pressing Ctrl-C notices.
constexpr int64_t kInterruptNs = 20000000;
thread_local cxk_msg_interrupt_fn t_interrupt = nullptr;
thread_local void *t_interrupt_arg = nullptr;

int64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

std::string obj_name(const cxk_comm *c, int rank, const char *what, long index) {
    std::string s = "msg." + c->job + "." + std::to_string(rank) + "." + what;
    if (index >= 0) s += "." + std::to_string(index);
    return s;
}

int publish_own(cxk_comm *c, const std::string &name, uint64_t off) {
    int rc = cxk_obj_publish(c->pool, off, 0);
    if (rc) {
        cxk_obj_destroy(c->pool, name.c_str());
        cxk_obj_close(c->pool, off);
    }
    return rc;
}

namespace {

// The waiter's wake-up counters: every peer's ring to us and ours to it.
void comm_wake(const void *owner, struct cxk_ring_wake_stats *sum) {
    for (const Peer &p : static_cast<const cxk_comm *>(owner)->peers)
        for (const cxk_ring *r : {p.in, p.out}) cxk::ring::wake_stats_add(r, sum);
}

// The options left 0 from the environment (CXLKIT_MSG_*), and the rendezvous switches.
// 0, or -EINVAL for a malformed variable (cxk_config_error names it).
int env_opts(cxk_msg_opts *o, uint32_t *rdv_nt, uint32_t *rdv_chunk) {
    using cxk::config::Id;
    namespace cfg = cxk::config;
    if (int rc = cfg::check({Id::MSG_SPIN_US, Id::MSG_YIELD_US, Id::MSG_SLEEP_US})) return rc;
    const struct { uint32_t *field; Id id; } reads[] = {
        {&o->cell_bytes, Id::MSG_CELL_BYTES}, {&o->ncells, Id::MSG_CELLS},
        {&o->timeout_ms, Id::MSG_TIMEOUT_MS}, {&o->dead_ms, Id::MSG_DEAD_MS}};
    for (const auto &r : reads)
        if (!*r.field)
            if (int rc = cfg::get_u32(r.id, r.field)) return rc;
    if (!o->eager_bytes)
        if (int rc = cfg::get_u64(Id::MSG_EAGER, &o->eager_bytes)) return rc;
    if (int rc = cfg::get_u32(Id::MSG_RDV_NT, rdv_nt)) return rc;
    return cfg::get_u32(Id::MSG_RDV_CHUNK, rdv_chunk);
}

bool good_job(const char *job) {
    size_t n = std::strlen(job);
    if (n == 0 || n > CXK_MSG_JOB_MAX) return false;
    for (size_t i = 0; i < n; ++i) {
        char ch = job[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '-'))
            return false;
    }
    return true;
}

void *heartbeat(void *arg) {
    auto *c = static_cast<cxk_comm *>(arg);
    auto *live = reinterpret_cast<RankLive *>(c->base + c->obj_off + kLine);
    while (!c->heart_stop.load(std::memory_order_acquire)) {
        __atomic_store_n(&live->beat, live->beat + 1, __ATOMIC_RELEASE);
        if (c->nc) cxk_flush(live, kLine), cxk_sfence();
        timespec ts{0, 100 * 1000 * 1000};
        nanosleep(&ts, nullptr);
    }
    return nullptr;
}

// Remove every object this rank of this job left on this host (a crashed earlier run).
// -EBUSY when its rank object names a live process of this machine or is another host's,
// -EEXIST when another of its objects is another host's.
int clear_stale(cxk_comm *c) {
    std::string rank_name = obj_name(c, c->rank, "rank");
    struct cxk_obj_stat st;
    int rc = cxk_obj_stat(c->pool, rank_name.c_str(), &st);
    if (rc == 0 && st.host != c->host) return -EBUSY;  // another host's: not ours to remove
    if (rc == 0 && st.state == CXK_OBJ_LIVE && st.nbytes >= sizeof(RankHdr)) {
        RankHdr h;
        cxk_pool_invalidate(c->pool, st.off, sizeof h);
        std::memcpy(&h, c->base + st.off, sizeof h);
        if (h.magic == kRankMagic && h.boot == c->boot && h.pid != uint64_t(getpid()) &&
            !pid_gone(h.pid))
            return -EBUSY;
    }
    size_t n = 0;
    if ((rc = cxk_obj_list(c->pool, nullptr, 0, &n))) return rc;
    std::vector<struct cxk_obj_stat> all(n + 16);
    if ((rc = cxk_obj_list(c->pool, all.data(), all.size(), &n))) return rc;
    std::string prefix = "msg." + c->job + "." + std::to_string(c->rank) + ".";
    n = std::min(n, all.size());
    // names of this rank are written by it only: another host's (an earlier run placed the
    // rank there) would make a create fail mid-job; refuse now, before any traffic
    for (size_t i = 0; i < n; ++i)
        if (all[i].host != c->host && std::strncmp(all[i].name, prefix.c_str(), prefix.size()) == 0)
            return -EEXIST;
    for (size_t i = 0; i < n; ++i)
        if (std::strncmp(all[i].name, prefix.c_str(), prefix.size()) == 0)
            cxk_obj_destroy(c->pool, all[i].name);
    return 0;
}

int create_rank_obj(cxk_comm *c) {
    std::string name = obj_name(c, c->rank, "rank");
    uint64_t nbytes = rank_obj_bytes(uint32_t(c->nranks)), off;
    int rc = cxk_obj_create(c->pool, name.c_str(), nbytes, &off);
    if (rc) return rc;
    auto *h = rank_hdr(c, off);
    h->magic = kRankMagic;
    h->version = kVersion;
    h->nranks = uint32_t(c->nranks);
    h->rank = uint32_t(c->rank);
    h->host = c->host;
    h->pid = uint64_t(getpid());
    h->boot = c->boot;
    h->session = c->session;
    h->domain = c->domain;
    if ((rc = publish_own(c, name, off))) return rc;
    c->obj_off = off;
    return 0;
}

// Open rank r's object if it belongs to this run (same session, unless session is 0:
// rank 0's, any live one). 0 and the peer filled in; -EAGAIN to look again later.
int try_join_peer(cxk_comm *c, int r, uint64_t session) {
    std::string name = obj_name(c, r, "rank");
    struct cxk_obj_stat st;
    int rc = cxk_obj_open(c->pool, name.c_str(), &st);
    if (rc == -ENOENT || rc == -EAGAIN) return -EAGAIN;
    if (rc) return rc;
    RankHdr h;
    bool ok = st.nbytes >= rank_obj_bytes(uint32_t(c->nranks));
    if (ok) {
        cxk_pool_invalidate(c->pool, st.off, sizeof h);
        std::memcpy(&h, c->base + st.off, sizeof h);
        ok = h.magic == kRankMagic && h.version == kVersion && h.rank == uint32_t(r) &&
             h.nranks == uint32_t(c->nranks) && h.host == st.host;
        // the rank runs a library of another format: said when the join gives up (a stale
        // object of an older run may still be replaced, so this is no reason to stop now)
        if (h.magic == kRankMagic && h.version != kVersion) c->foreign_version = true;
    }
    // a stale object of a crashed run on this machine: wait for the rank to replace it
    if (ok && h.boot == c->boot && pid_gone(h.pid)) ok = false;
    if (ok && session && h.session != session) ok = false;
    if (!ok) {
        cxk_obj_close(c->pool, st.off);
        return -EAGAIN;
    }
    cxk::msg::Peer &p = c->peers[size_t(r)];
    p.obj_off = st.off;
    p.obj_gen = st.generation;
    p.pid = h.pid;
    p.boot = h.boot;
    p.host = h.host;
    p.domain = h.domain;
    p.nc = pair_nc(c, r, h.domain);
    p.beat_seen_ns = now_ns();
    if (session == 0) c->session = h.session;
    return 0;
}

// The join's deadline passed: -EPROTONOSUPPORT when the rank waited for showed an object of
// another format version (a library of another version), -ETIMEDOUT otherwise.
int join_gave_up(const cxk_comm *c) {
    return c->foreign_version ? -EPROTONOSUPPORT : -ETIMEDOUT;
}

int join(cxk_comm *c) {
    const int64_t deadline = now_ns() + int64_t(c->opts.join_ms) * 1000000;
    int rc;
    if (c->rank == 0) {
        std::random_device rd;
        c->session = (uint64_t(rd()) << 32 | rd()) | 1;
    } else {
        // adopt rank 0's session: its object must be live (a crashed run's is skipped)
        while ((rc = try_join_peer(c, 0, 0)) == -EAGAIN) {
            if (now_ns() > deadline) return c->failed_rank = 0, join_gave_up(c);
            usleep(1000);
        }
        if (rc) return rc;
    }
    if ((rc = create_rank_obj(c))) return rc;
    for (int r = 0; r < c->nranks; ++r) {
        if (c->peers[size_t(r)].obj_off) continue;
        if (r == c->rank) {
            struct cxk_obj_stat st;
            if ((rc = cxk_obj_stat_at(c->pool, c->obj_off, &st))) return rc;
            auto &p = c->peers[size_t(r)];
            p.obj_off = c->obj_off, p.obj_gen = st.generation, p.pid = uint64_t(getpid());
            p.boot = c->boot, p.host = c->host;
            p.domain = c->domain, p.nc = pair_nc(c, r, c->domain);
            continue;
        }
        while ((rc = try_join_peer(c, r, c->session)) == -EAGAIN) {
            if (now_ns() > deadline) return c->failed_rank = r, join_gave_up(c);
            usleep(1000);
        }
        if (rc) return rc;
    }
    return 0;
}

void release_all(cxk_comm *c) {
    free_wins(c);
    close_rings(c);
    mem_release_all(c);
    for (size_t r = 0; r < c->peers.size(); ++r) {
        auto &p = c->peers[r];
        for (auto &v : p.rdv)
            if (v.off) cxk_obj_close(c->pool, v.off);
        if (int(r) != c->rank && p.obj_off) cxk_obj_close(c->pool, p.obj_off);
    }
    for (size_t k = 0; k < c->rdv.size(); ++k) {
        if (!c->rdv[k].off) continue;  // recycled slot
        std::string name = obj_name(c, c->rank, "rdv", long(k));
        cxk_obj_destroy(c->pool, name.c_str());
        cxk_obj_close(c->pool, c->rdv[k].off);
    }
    if (c->obj_off) {
        std::string name = obj_name(c, c->rank, "rank");
        cxk_obj_destroy(c->pool, name.c_str());
        cxk_obj_close(c->pool, c->obj_off);
    }
    for (auto *r : c->posted) free_req(r);
    for (auto *r : c->waiting) free_req(r);
    for (auto &p : c->peers)
        for (auto *r : p.sendq) free_req(r);
}

}  // namespace

int check_peer(cxk_comm *c, int r) {
    Peer &p = c->peers[size_t(r)];
    if (r == c->rank) return 0;
    if (!p.gone) {
        if (cxk_obj_validate(c->pool, p.obj_off, p.obj_gen) != 0) {
            p.gone = true;  // finalized or removed: it will not write again
        } else {
            auto *live = reinterpret_cast<RankLive *>(c->base + p.obj_off + kLine);
            if (c->nc) cxk_invalidate(live, kLine);
            uint64_t beat = __atomic_load_n(&live->beat, __ATOMIC_ACQUIRE);
            int64_t now = now_ns();
            if (beat != p.beat) p.beat = beat, p.beat_seen_ns = now;
            const int64_t silent = now - p.beat_seen_ns;
            // On this machine a missing process ends it once its heartbeat (every 100 ms)
            // has also stopped: a pid alone can mislead across pid namespaces.
            if (silent > int64_t(c->opts.dead_ms) * 1000000) p.gone = true;
            else if (p.boot == c->boot && silent > 300 * 1000000ll) p.gone = pid_gone(p.pid);
        }
    }
    if (!p.gone) return 0;
    c->failed_rank = r;
    return -ETIMEDOUT;
}

Waiter::Waiter(cxk_comm *comm, int need_rank) : c(comm), need(need_rank) {
    cxk_wait_begin(&w, &c->wait);
    begun_ns = w.start_ns;
    next_check_ns = begun_ns + kCheckNs;
    next_intr_ns = begun_ns + kInterruptNs;
    events = c->events;
}

// The wait is over (answered, or failed): the adaptive spin learns how long it took.
Waiter::~Waiter() { cxk::ring::adapt_end(&c->spin); }

namespace {

// The wake-ups the comm's publishes sent so far (its rings to every peer).
uint64_t wakes_sent(const cxk_comm *c) {
    struct cxk_ring_wake_stats ws {};
    for (const Peer &p : c->peers) cxk::ring::wake_stats_add(p.out, &ws);
    return ws.wakes_sent;
}

// The rings a wait for incoming cells may sleep on (empty: sleep on the timer): every peer's
// ring to us, when each exists (a peer's first ring is found by progress's directory scan,
// which a futex sleep would not end) and nothing of ours waits for room in a peer's ring
// (room comes with the peer's head, which wakes no one).
void rings_to_sleep_on(cxk_comm *c) {
    c->sleep_on.clear();
    if (c->nc || c->nranks < 2 || c->nranks - 1 > 128) return;
    for (int r = 0; r < c->nranks; ++r) {
        if (r == c->rank) continue;
        const Peer &p = c->peers[size_t(r)];
        if (!p.in || !p.sendq.empty() || !p.ctlq.empty()) return c->sleep_on.clear();
        c->sleep_on.push_back(p.in);
    }
}

}  // namespace

int Waiter::check(bool on_rings, const cxk::ring::Extra *barrier) {
    if (c->events != events) {  // a cell arrived since the spin began: spin afresh
        events = c->events;
        cxk::ring::adapt_end(&c->spin);
        cxk_wait_begin(&w, &c->wait);
    }
    const bool first = w.polls == 0;
    // the rings matter only to a sleep: gathered at the first idle (the adaptive spin may
    // skip the spin) and once the spin is over, not on every poll of the spin
    const uint32_t a = w.adapt & ~CXK_WAIT_ADAPT_YIELD;
    const int64_t spin_ns = a ? int64_t(a - 1) * 1000
                              : (w.opts.spin_us == CXK_WAIT_FOREVER ? INT64_MAX
                                                                    : int64_t(w.opts.spin_us) * 1000);
    if (!on_rings) c->sleep_on.clear();
    else if (first || w.now_ns - w.start_ns >= spin_ns) rings_to_sleep_on(c);
    cxk::ring::adapt_idle(&c->spin, &w, first ? wakes_sent(c) : c->spin.wakes_seen,
                          c->sleep_on.data(), c->sleep_on.size(), barrier);
    if (w.now_ns < next_check_ns) return 0;
    next_check_ns = w.now_ns + kCheckNs;
    if (t_interrupt && w.now_ns >= next_intr_ns) {
        next_intr_ns = w.now_ns + kInterruptNs;
        if (t_interrupt(t_interrupt_arg)) return c->failed_rank = -1, -ETIMEDOUT;
    }
    if (c->opts.timeout_ms && w.now_ns - begun_ns > int64_t(c->opts.timeout_ms) * 1000000) {
        c->failed_rank = need;
        return -ETIMEDOUT;
    }
    if (need >= 0) return check_peer(c, need);
    for (int r = 0; r < c->nranks; ++r)
        if (int rc = check_peer(c, r)) return rc;
    return 0;
}

}  // namespace cxk::msg

using namespace cxk::msg;

// The eager floor: the payload of one 4096-byte cell (4096 - 64 bytes of cell and message
// headers), below which a rendezvous did not pay in the crossover measurement.
constexpr uint64_t kEagerFloor = 4032;

extern "C" {

void cxk_msg_opts_init(cxk_msg_opts *o) {
    if (o) std::memset(o, 0, sizeof *o);
}

int cxk_msg_init(cxk_pool *p, const char *job, int rank, int nranks, const cxk_msg_opts *opts,
                 cxk_comm **out) {
    if (!p || !job || !out || !good_job(job) || nranks < 1 || nranks > CXK_MSG_MAX_RANKS ||
        rank < 0 || rank >= nranks)
        return -EINVAL;
    cxk_msg_opts o{};
    if (opts) o = *opts;
    uint32_t rdv_nt = 0, rdv_chunk = 0;
    if (int rc = env_opts(&o, &rdv_nt, &rdv_chunk)) return rc;
    if (!o.join_ms) o.join_ms = 60000;
    if (cxk_ring_bytes(o.cell_bytes, o.ncells) == 0 || o.cell_bytes < 128 || o.ncells < 4)
        return -EINVAL;
    // one message may fill half the ring: the other half keeps room for FIN / ACK cells
    const uint64_t pmax = o.cell_bytes - CXK_RING_CELL_HDR;
    const uint64_t cap = (pmax - sizeof(MsgHdr)) + pmax * (o.ncells / 2 - 1);
    // Eager up to what one cell carries, but at least what one 4 KiB cell carries (4032 B):
    // measured for cells of 1, 4, 16 and 64 KiB in both coherence modes (docs/msg.md, "Eager
    // or rendezvous"), rendezvous overtook eager at about one cell for cells of 4 KiB and
    // more, and at about 4 KiB for 1 KiB cells (a rendezvous's request and FIN cost more
    // than a few small cells). Never more than the ring takes. The rings' geometry
    // (CXLKIT_MSG_CELL_BYTES) sets it per job and pool.
    if (!o.eager_bytes) {
        const uint64_t one_cell = pmax - sizeof(MsgHdr);
        o.eager_bytes = std::min<uint64_t>(std::max<uint64_t>(one_cell, kEagerFloor), cap);
    }
    if (o.eager_bytes > cap) return -EINVAL;

    struct cxk_pool_stat ps;
    if (int rc = cxk_pool_stat(p, &ps)) return rc;
    cxk_comm *c = new (std::nothrow) cxk_comm;
    if (!c) return -ENOMEM;
    c->waiter = {&c->wait, &c->spin, c, comm_wake};
    c->pool = p;
    c->base = static_cast<uint8_t *>(cxk_pool_base(p));
    c->nc = ps.coherence != CXK_COHERENCE_HOST;  // "none" or "sim"
    c->sim = ps.coherence == CXK_COHERENCE_SIM;
    c->domain = o.domain;
    c->job = job;
    c->rank = rank;
    c->nranks = nranks;
    c->opts = o;
    c->eager = o.eager_bytes;
    c->host = ps.host_id;
    c->boot = boot_hash();
    c->rdv_limit = ps.partition_bytes / 2;
    // the rendezvous copy's A/B switches (docs/msg.md, fifth round): non-temporal stores
    // into the pool buffer under "host", and the chunk behind each ready count
    c->rdv_nt = rdv_nt != 0;
    c->rdv_chunk = rdv_chunk;
    cxk_wait_opts_init(&c->wait);
    cxk_spin_init(&c->spin);
    c->peers.resize(size_t(nranks));
    int rc = clear_stale(c);
    if (!rc) rc = join(c);
    if (!rc) {
        if (pthread_create(&c->heart, nullptr, heartbeat, c) == 0) c->heart_started = true;
        else rc = -EAGAIN;
    }
    if (rc) {
        release_all(c);
        delete c;
        return rc;
    }
    *out = c;
    return 0;
}

int cxk_msg_finalize(cxk_comm *c) { return cxk_msg_finalize_ex(c, nullptr); }

int cxk_msg_peer_coherent(const cxk_comm *c, int peer) {
    if (!c || peer < 0 || peer >= c->nranks) return -EINVAL;
    return cxk::msg::nc_with(c, peer) ? 0 : 1;
}

namespace {

// Stop the heartbeat, remove this rank's objects, free c: its peers see it gone.
void leave(cxk_comm *c) {
    if (c->heart_started) {
        c->heart_stop.store(true, std::memory_order_release);
        pthread_join(c->heart, nullptr);
    }
    release_all(c);
    delete c;
}

}  // namespace

int cxk_msg_finalize_ex(cxk_comm *c, int *failed_rank) {
    if (failed_rank) *failed_rank = -1;
    if (!c) return -EINVAL;
    // peers may still be busy for long: only a gone peer (or timeout_ms) ends the wait
    int rc = cxk_msg_barrier(c);
    if (failed_rank && rc) *failed_rank = c->failed_rank;
    leave(c);
    return rc;
}

int cxk_msg_abandon(cxk_comm *c) {
    if (!c) return -EINVAL;
    leave(c);
    return 0;
}

int cxk_msg_set_checksum(cxk_comm *c, int on) {
    if (!c || (on != 0 && on != 1)) return -EINVAL;
    c->crc = on;
    return 0;
}

cxk_waiter *cxk_msg_waiter(cxk_comm *c) { return c ? &c->waiter : nullptr; }

// kept one release: the waiter's calls (ring/waiter.cpp) under the comm's names
int cxk_msg_set_wait(cxk_comm *c, const cxk_wait_opts *o) {
    return c ? cxk_waiter_set_wait(&c->waiter, o) : -EINVAL;
}
int cxk_msg_get_wait(const cxk_comm *c, cxk_wait_opts *o) {
    return c ? cxk_waiter_get_wait(&c->waiter, o) : -EINVAL;
}
int cxk_msg_spin_stats(const cxk_comm *c, struct cxk_spin *st) {
    return c ? cxk::ring::waiter_spin(&c->waiter, st) : -EINVAL;
}
int cxk_msg_wake_stats(const cxk_comm *c, struct cxk_ring_wake_stats *st) {
    return c ? cxk::ring::waiter_wake(&c->waiter, st) : -EINVAL;
}

int cxk_msg_rank(const cxk_comm *c) { return c ? c->rank : -EINVAL; }
int cxk_msg_size(const cxk_comm *c) { return c ? c->nranks : -EINVAL; }
int cxk_msg_failed_rank(const cxk_comm *c) { return c ? c->failed_rank : -1; }

void cxk_msg_set_interrupt(cxk_msg_interrupt_fn fn, void *arg) {
    t_interrupt_arg = arg;
    t_interrupt = fn;
}
uint64_t cxk_msg_eager_bytes(const cxk_comm *c) { return c ? c->eager : 0; }

}  // extern "C"
