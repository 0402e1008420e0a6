// bind_msg.h — private to the binding floor: what the messaging and RPC bindings share.
#pragma once
#include <string>
#include <vector>

#include "bind/bind.h"
#include "cxlkit.h"

namespace cxk::py {

// A pool handle of the binding's own on the same backing paths, as the same host (the RPC
// ends' pool; a comm and a ring use the caller's handle). Raises OSError.
cxk_pool *open_private(const std::vector<std::string> &paths, int host_id,
                       const std::string &tag, int coherence);

// A wait policy from Python's (spin_us, yield_us, sleep_us); raises ValueError when the
// library refuses it (cxk_wait_opts_check), naming `what`.
cxk_wait_opts wait_opts(uint32_t spin_us, uint32_t yield_us, uint32_t sleep_us,
                        const std::string &what);

// the same-host wake-up's counters and the adaptive spin's state as dicts.
nb::dict wake_dict(const struct cxk_ring_wake_stats &w);
nb::dict spin_dict(const struct cxk_spin &s);

}  // namespace cxk::py
