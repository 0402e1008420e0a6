// liveness.cpp — boot id hash and process-ended checks for peers of this machine.
#include "ring/liveness.h"

#include <signal.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace cxk::ring {

uint64_t boot_hash() {
    char buf[64] = {};
    FILE *f = std::fopen("/proc/sys/kernel/random/boot_id", "re");
    if (f) {
        if (!std::fgets(buf, sizeof buf, f)) buf[0] = 0;
        std::fclose(f);
    }
    uint64_t h = 1469598103934665603ull;
    for (const char *p = buf; *p && *p != '\n'; ++p) h = (h ^ uint8_t(*p)) * 1099511628211ull;
    return h;
}

bool pid_gone(uint64_t pid) {
    if (pid == 0 || pid > 0x7fffffff) return true;
    if (kill(pid_t(pid), 0) != 0 && errno == ESRCH) return true;
    char path[64], buf[512];
    std::snprintf(path, sizeof path, "/proc/%llu/stat", static_cast<unsigned long long>(pid));
    FILE *f = std::fopen(path, "re");
    if (!f) return errno == ENOENT;
    size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    buf[n] = 0;
    const char *close = std::strrchr(buf, ')');  // the command name may hold anything
    return close && close[1] == ' ' && (close[2] == 'Z' || close[2] == 'X');
}

}  // namespace cxk::ring
