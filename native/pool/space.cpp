// space.cpp — reserving a pool file's blocks before they are touched (space.h), and the
// per-slot user locks of open handles.
#include "pool/space.h"

#include <fcntl.h>

#include <cerrno>

#include "sys/sys.h"

namespace cxk::pool {

int reserve(int fd, uint64_t off, uint64_t len) {
    if (len == 0) return 0;
    const int r = sys_fallocate(fd, (long long)off, (long long)len);
    return r == -EOPNOTSUPP ? 0 : r;
}

int reserve_extents(const cxk_pool *p, uint64_t first, uint64_t k) {
    if (p->file_fd < 0 || p->geo.nbackings != 1) return 0;
    // already-reserved blocks cost a lookup each: a pool made without overcommit passes
    // through quickly, a sparse one gets its blocks here or an error instead of a SIGBUS
    const int r = reserve(p->file_fd, ext_off(p, first), k * p->geo.extent_bytes);
    return r == -ENOSPC ? -EDQUOT : r;
}

int users_lock(int fd, uint32_t h) {
    return sys_ofd_lock(fd, (long long)(kUsersLockOff + h), F_RDLCK);
}

int users_held(int fd, uint32_t h) {
    return sys_ofd_held(fd, (long long)(kUsersLockOff + h), F_WRLCK);
}

}  // namespace cxk::pool
