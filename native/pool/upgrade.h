// upgrade.h — private: converting a version 1 pool (fixed per-host partitions) to version 2
// in place (upgrade.cpp; docs/pool-format.md, "Upgrading a version 1 pool").
#pragma once
#include <cstdint>

#include "cxlkit.h"

namespace cxk::pool {

// Where an upgraded pool keeps its staged superblock (in the superblock page, past every
// field and the OFD lock bytes' meaning is unaffected: locks are not memory). validate()
// reads it when the word at 8 says version 2 but the superblock at 0 fails its checksum (an
// upgrade stopped between its commit and the rewrite of offset 0).
constexpr uint64_t kSbCopyOff = 2048;

// Upgrade the version 1 pool mapped at base (size bytes, one backing) to version 2: checks
// every v1 field before use, refuses while a v1 host is alive (-EBUSY, info->busy_host),
// stages the v2 metadata where v1 reads nothing, then commits with one store of the version
// word and rewrites the superblock at 0. A pool already at version 2 is finished if its
// rewrite was interrupted, else left alone (info->from_version = 2). 0 or -errno.
int upgrade_mapped(uint8_t *base, uint64_t size, struct cxk_pool_upgrade_info *info);

// A read-only view of the version 1 pool file fd of size bytes (CXK_POOL_READ_V1): the file
// mapped copy-on-write, made version 2 in memory (metadata in anonymous memory after it), so
// every v2 check and reader applies and nothing reaches the file. *out / *mapped: unmap with
// cxk_unmap. 0, or v1's -EBADMSG / -EPROTONOSUPPORT / -ENXIO, or mmap's -errno.
int v1_private_view(int fd, uint64_t size, uint8_t **out, uint64_t *mapped);

}  // namespace cxk::pool
