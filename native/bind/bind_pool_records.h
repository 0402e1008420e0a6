// bind_pool_records.h — private to the binding floor: the pool's result records as the user
// holds them. Each is the C struct itself (a PoolStat adds the pool's label), bound with
// read-only attributes that convert one field when read: no dict or dataclass in between.
#pragma once
#include "bind/bind.h"
#include "cxlkit.h"

namespace cxk::py {

// cxlkit.PoolStat: cxk_pool_stat and the path the pool was opened with (its label).
struct PoolStatRecord : cxk_pool_stat {
    nb::str path;
};

// cxlkit.HostInfo, cxlkit.FsckReport and cxlkit.ObjectInfo are cxk_pool_host,
// cxk_fsck_report and cxk_obj_stat bound as they are.

}  // namespace cxk::py
