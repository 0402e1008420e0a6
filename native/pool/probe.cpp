// probe.cpp — a pool file read without opening the pool (cxk_pool_probe, for `pool rm`): what
// the path is, whether it holds a whole superblock, and which host slots are still in use.
// Only pread: nothing is mapped or written, and no byte read steers a read outside the file.
#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>

#include "pool/checksum.h"
#include "pool/hosts.h"
#include "pool/space.h"
#include "pool/superblock.h"
#include "sys/sys.h"
#include "sys/sys_aio.h"

namespace cxk::pool {
namespace {

// [off, off + n) of the file, zero-filled past its end: 0 or -errno.
int read_at(int fd, uint64_t size, uint64_t off, void *buf, size_t n) {
    std::memset(buf, 0, n);
    if (off >= size) return 0;
    const long got = sys_pread(fd, buf, std::min<uint64_t>(n, size - off), off);
    return got < 0 ? int(got) : 0;
}

// The superblock page checked as open checks it (version 2) or by its own checksum (version
// 1, whose host slots are where version 2 has them). *sb: the fields the slots need.
int check_superblock(const uint8_t *page, uint64_t size, cxk_pool_probe_info *out,
                     Superblock *sb) {
    std::memcpy(sb, page, sizeof *sb);
    out->version = sb->version;
    if (sb->magic != kMagic) return -EMEDIUMTYPE;
    if (sb->version == kVersion1) {
        uint64_t sum;
        std::memcpy(&sum, page + kSbV1ChecksumOff, 8);
        if (sum != ((1ull << 32) | crc32c(page, kSbV1ChecksumOff))) {
            std::snprintf(out->why, sizeof out->why, "checksum does not match its bytes");
            return -EBADMSG;
        }
        if (sb->host_table_off != kSbBytes || sb->max_hosts < 1 || sb->max_hosts > kMaxHosts ||
            sb->lease_timeout_ns == 0) {
            std::snprintf(out->why, sizeof out->why, "max_hosts or host_table_off is broken");
            return -EBADMSG;
        }
        sb->claims_off = 0;  // version 1 has no claim lines
        return sb->total_bytes > size ? -ENXIO : 0;
    }
    if (sb->version != kVersion) return -EPROTONOSUPPORT;
    // a striped pool's backing 0 holds 1/n of it: the geometry is checked against the whole
    uint32_t n = 1;
    std::memcpy(&n, page + offsetof(Superblock, nbackings), sizeof n);
    if (n < 1 || n > CXK_POOL_MAX_BACKINGS) n = 1;
    const char *why = nullptr;
    const int r = validate(page, size * n, n, sb, &why);
    if (why) std::snprintf(out->why, sizeof out->why, "%s", why);
    return r == -EINVAL ? -EBADMSG : r;
}

// Where pool offset off lies in backing 0 of a pool striped over n: false when elsewhere.
bool in_backing0(uint64_t off, uint32_t n, uint64_t *at) {
    const uint64_t g = CXK_POOL_STRIPE_BYTES;
    if (n > 1 && (off / g) % n != 0) return false;
    *at = n > 1 ? (off / g) / n * g + off % g : off;
    return true;
}

// Live (true) or not, for a slot some boot attached to: a process of this machine holds its
// user lock, else a host of another boot beat within the lease timeout. This boot's slot
// without a lock holder has no process left, however fresh its last heartbeat.
int slot_live(int fd, uint32_t h, const HostSlot &s, const Superblock &sb, uint64_t boot) {
    const int held = users_held(fd, h);
    if (held != 0) return held;
    if (s.boot == boot) return 0;
    return now_ns() - s.heartbeat_ns < int64_t(sb.lease_timeout_ns) ? 1 : 0;
}

// Count the slots of the pool in fd that are live and dead (free ones are neither; claimed
// ones are live while the claim is younger than the lease timeout).
int count_hosts(int fd, uint64_t size, const Superblock &sb, cxk_pool_probe_info *out) {
    uint64_t boot = 0;
    if (int r = read_boot_hash(&boot)) return r;
    const uint32_t n = sb.nbackings > 1 && sb.version == kVersion ? sb.nbackings : 1;
    out->max_hosts = sb.max_hosts;
    for (uint32_t h = 0; h < sb.max_hosts; ++h) {
        HostSlot s;
        // line 0 only: tag, boot, heartbeat (the slots lie in backing 0's first granule)
        const uint64_t at = sb.host_table_off + uint64_t(h) * kHostSlotBytes;
        if (int r = read_at(fd, size, at, &s, kLine)) return r;
        if (s.boot == kBootFresh) {
            uint64_t door = 0, at = 0;
            const uint64_t off = sb.claims_off + h * kSlotClaimBytes + offsetof(SlotClaim, door);
            if (sb.claims_off && in_backing0(off, n, &at))
                if (int r = read_at(fd, size, at, &door, sizeof door)) return r;
            if (door && now_ns() - int64_t(door) < int64_t(sb.lease_timeout_ns))
                out->hosts_live++;
            continue;
        }
        const int live = slot_live(fd, h, s, sb, boot);
        if (live < 0) return live;
        (live ? out->hosts_live : out->hosts_dead)++;
    }
    return 0;
}

int probe(const char *path, cxk_pool_probe_info *out) {
    struct stat ls, st;
    if (int r = sys_lstat(path, &ls)) return r;
    out->file_type = ls.st_mode & S_IFMT;
    if (S_ISLNK(ls.st_mode)) return -ELOOP;
    if (!S_ISREG(ls.st_mode)) return -ENODEV;
    // O_NONBLOCK | O_NOFOLLOW: what replaced the file since the lstat is neither waited on
    // (a FIFO) nor followed (a link)
    Fd fd(sys_open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0));
    if (fd.fd < 0) return fd.fd;
    if (int r = sys_fstat(fd.fd, &st)) return r;
    if (!S_ISREG(st.st_mode)) {
        out->file_type = st.st_mode & S_IFMT;
        return -ENODEV;
    }
    out->size = uint64_t(st.st_size);
    out->dev = uint64_t(st.st_dev);
    out->ino = uint64_t(st.st_ino);
    uint8_t page[kSbBytes];
    if (int r = read_at(fd.fd, out->size, 0, page, sizeof page)) return r;
    Superblock sb;
    out->superblock = check_superblock(page, out->size, out, &sb);
    if (out->superblock == 0)
        if (int r = count_hosts(fd.fd, out->size, sb, out)) return r;
    return 0;
}

}  // namespace
}  // namespace cxk::pool

extern "C" int cxk_pool_probe(const char *path, struct cxk_pool_probe_info *out) {
    if (!path || !*path || !out) return -EINVAL;
    std::memset(out, 0, sizeof *out);
    return cxk::pool::probe(path, out);
}
