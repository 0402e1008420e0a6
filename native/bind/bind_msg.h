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

// The waiter's counters now (bind_waiter.cpp binds them: _native.WaiterStats); raises the
// OSError of a failed call naming `what`. Call as the owner's own calls are made (holding
// a comm's or an RPC end's mutex; a ring has none: one thread uses it).
struct cxk_waiter_stats waiter_stats(const cxk_waiter *w, const std::string &what);

}  // namespace cxk::py
