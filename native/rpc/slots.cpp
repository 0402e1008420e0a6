// slots.cpp — who holds an RPC client slot: the holder's identity object, its liveness
// (pid and boot, as ring peers: ring/liveness), and taking back the slot of a dead holder.
#include "rpc/slots.h"

#include <cerrno>
#include <cstring>

#include "ring/liveness.h"
#include "rpc/rpc.h"

namespace cxk::rpc {

using cxk::ring::boot_hash;
using cxk::ring::pid_gone;

namespace {

const uint8_t *pool_at(cxk_pool *p, uint64_t off) {
    return static_cast<const uint8_t *>(cxk_pool_base(p)) + off;
}

}  // namespace

std::string ring_name(const std::string &svc, uint32_t k, const char *what) {
    return "rpc." + svc + "." + std::to_string(k) + "." + what;
}

// The holder of client slot k is provably gone: its identity says it ran on this boot and
// its process has ended. No identity, another machine's, or a malformed one: not provable,
// and the slot stays taken.
bool holder_dead(cxk_pool *p, const std::string &svc, uint32_t k) {
    std::string n = ring_name(svc, k, "cli");
    struct cxk_obj_stat st;
    if (cxk_obj_open(p, n.c_str(), &st) != 0) return false;
    CliHdr h{};
    const bool sized = st.nbytes >= sizeof h;
    if (sized) {
        cxk_pool_invalidate(p, st.off, sizeof h);
        std::memcpy(&h, pool_at(p, st.off), sizeof h);
    }
    cxk_obj_close(p, st.off);
    return sized && h.magic == kCliMagic && h.boot == boot_hash() && pid_gone(h.pid);
}

// Take back client slot k if its holder is provably gone: its request ring, then its
// identity (the reverse of the order a holder makes them). Under the slot's reclaim lock
// "rpc.<svc>.<k>.lck", an object of this host never published (the pool removes it if we die
// holding it): the identity judged dead can then change only by its holder (dead) or another
// reclaimer (locked out), and a new claimer makes its ring only after its own identity, so
// what is destroyed is what was judged. A host destroys only its own objects: another host's
// holder is left to that host (and never judged here: its pid is not this machine's).
Reclaim reclaim_if_dead(cxk_pool *p, const std::string &svc, uint32_t k, uint32_t host) {
    std::string cl = ring_name(svc, k, "cli"), lock = ring_name(svc, k, "lck");
    struct cxk_obj_stat st;
    if (cxk_obj_stat(p, cl.c_str(), &st) != 0 || st.host != host) return Reclaim::kept;
    uint64_t lock_off;
    int rc = cxk_obj_create(p, lock.c_str(), kLine, &lock_off);
    if (rc == -EEXIST) return Reclaim::contended;
    if (rc) return Reclaim::kept;
    Reclaim out = Reclaim::kept;
    if (holder_dead(p, svc, k)) {
        std::string rq = ring_name(svc, k, "req");
        const int r1 = cxk_obj_destroy(p, rq.c_str());
        if ((r1 == 0 || r1 == -ENOENT) && cxk_obj_destroy(p, cl.c_str()) == 0)
            out = Reclaim::freed;
    }
    cxk_obj_destroy(p, lock.c_str());
    cxk_obj_close(p, lock_off);
    return out;
}

}  // namespace cxk::rpc

