// liveness.cpp — boot id hash and process-ended checks for peers of this machine.
#include "ring/liveness.h"

#include "cxlkit.h"
#include "sys/sys.h"

#include <sched.h>
#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace cxk::ring {

uint64_t boot_hash() {
    char buf[64] = {};
    if (sys_read_small("/proc/sys/kernel/random/boot_id", buf, sizeof buf) < 0) buf[0] = 0;
    uint64_t h = 1469598103934665603ull;
    for (const char *p = buf; *p && *p != '\n'; ++p) h = (h ^ uint8_t(*p)) * 1099511628211ull;
    return h;
}

}  // namespace cxk::ring

extern "C" uint64_t cxk_boot_hash(void) {
    // boot_hash of an unreadable boot id is the hash of nothing (FNV-1a's offset basis)
    const uint64_t h = cxk::ring::boot_hash();
    return h == 1469598103934665603ull ? 0 : h;
}

extern "C" int cxk_cpu_affinity(uint64_t *mask, uint32_t words) {
    if (!mask || words == 0) return -EINVAL;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (int e = cxk::sys_getaffinity_self(sizeof set, &set)) return e;
    std::memset(mask, 0, size_t(words) * sizeof *mask);
    int n = 0;
    for (int c = 0; c < CPU_SETSIZE && uint32_t(c / 64) < words; ++c)
        if (CPU_ISSET(c, &set)) mask[c / 64] |= uint64_t(1) << (c % 64), ++n;
    return n;
}

namespace cxk::ring {

bool pid_gone(uint64_t pid) {
    if (pid == 0 || pid > 0x7fffffff) return true;
    if (sys_kill(int(pid), 0) == -ESRCH) return true;
    char path[64], buf[512];
    std::snprintf(path, sizeof path, "/proc/%llu/stat", static_cast<unsigned long long>(pid));
    const long got = sys_read_small(path, buf, sizeof buf);
    if (got < 0) return got == -ENOENT;
    const char *close = std::strrchr(buf, ')');  // the command name may hold anything
    return close && close[1] == ' ' && (close[2] == 'Z' || close[2] == 'X');
}

}  // namespace cxk::ring
