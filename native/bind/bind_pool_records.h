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

// _native.PoolUpgradeInfo: what cxk_pool_upgrade found, and what it returned.
struct PoolUpgradeRecord : cxk_pool_upgrade_info {
    int error;  // 0, or the errno of its -errno (the caller names the error: it knows the host)
};

// cxlkit.HostInfo, cxlkit.FsckReport, cxlkit.ObjectInfo and _native.PoolProbeInfo are
// cxk_pool_host, cxk_fsck_report, cxk_obj_stat and cxk_pool_probe_info bound as they are.

}  // namespace cxk::py
