// space.h — private: the room a pool file needs on its filesystem, reserved before anything
// touches it (a page of a sparse file that the filesystem cannot back is a SIGBUS on first
// touch), and the per-slot user locks that tell `pool rm` which slots a process still holds.
#pragma once
#include <cstdint>

#include "pool/pool.h"

namespace cxk::pool {

// Reserve [off, off + len) of a pool file's blocks (fallocate): 0, -ENOSPC / -EDQUOT (no
// room), or another -errno. A filesystem that cannot reserve (-EOPNOTSUPP) counts as 0: it
// has nothing to fault on, or nothing we can do about it.
int reserve(int fd, uint64_t off, uint64_t len);
// The data extents [first, first + k) of a one-file pool, before the allocator hands them
// out: 0, or -EDQUOT when the filesystem has no room for them (a sparse, overcommitted pool
// on a full filesystem; distinct from -ENOSPC, no free extents), or another -errno. Other
// backings (devdax, memfd, striped: reserved whole when made) need nothing: 0.
int reserve_extents(const cxk_pool *p, uint64_t first, uint64_t k);

// Byte of a pool file's superblock page whose OFD read lock every open handle of slot h
// holds for its lifetime (no other lock of the pool uses bytes 64..127).
constexpr uint64_t kUsersLockOff = 64;
// Take slot h's user lock on fd (a read lock: every process of the host holds one at once).
int users_lock(int fd, uint32_t h);
// 1 when some open file description on this machine holds slot h's user lock, 0 when none
// does, or -errno. fd may be read-only.
int users_held(int fd, uint32_t h);

}  // namespace cxk::pool
