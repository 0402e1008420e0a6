// bind_pool.h — private to the binding floor: what other binding files use of bind_pool.cpp —
// the cxk_pool behind a Python pool object, and the one cxk_obj_stat -> dict conversion.
#pragma once
#include "bind.h"
#include "cxlkit.h"

namespace cxk::py {

// The _native.PoolHandle of `obj`: obj itself, or a cxlkit.Pool's handle (its `_h`).
// TypeError for anything else. Keep the result to keep the pool mapped.
nb::object pool_handle(nb::handle obj);
// The open cxk_pool of a PoolHandle from pool_handle(); ValueError once it is closed.
cxk_pool *pool_of(nb::handle handle);
// name, offset, nbytes, generation, checksum, created_ns, host, state
nb::dict obj_stat_dict(const struct cxk_obj_stat &s);

}  // namespace cxk::py
