// slots.h — private to native/rpc/: the names of a service's objects and who holds a client
// slot (its identity "rpc.<name>.<k>.cli", rpc.h CliHdr), with the taking back of a slot
// whose holder is provably gone.
#pragma once
#include <cstdint>
#include <string>

#include "cxlkit.h"

namespace cxk::rpc {

// "rpc.<svc>.<k>.<what>": req, rep, cli, lck
std::string ring_name(const std::string &svc, uint32_t k, const char *what);
// The holder of client slot k ran on this boot and its process has ended. No identity,
// another machine's, or a malformed one: false (not provable).
bool holder_dead(cxk_pool *p, const std::string &svc, uint32_t k);
// Destroy slot k's request ring and identity if holder_dead, under the slot's reclaim lock.
// host: ours; an identity of another host is not ours to destroy (kept).
enum class Reclaim { freed, kept, contended /* another process holds the reclaim lock */ };
Reclaim reclaim_if_dead(cxk_pool *p, const std::string &svc, uint32_t k, uint32_t host);

}  // namespace cxk::rpc
