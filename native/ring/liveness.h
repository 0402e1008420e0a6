// liveness.h — private: is the process at the other end of a ring still there? What the
// ring users (messaging, RPC) record about a peer: its pid and its machine's boot id.
#pragma once
#include <cstdint>

namespace cxk::ring {

// FNV-1a of /proc/sys/kernel/random/boot_id: a pid means something only on that boot.
uint64_t boot_hash();
// The process ended (zombies included: a launcher may not have reaped a killed peer yet).
bool pid_gone(uint64_t pid);

}  // namespace cxk::ring
