// omp.cpp — finds the OpenMP runtime this process already runs (PyTorch ships its own
// libgomp in torch/lib): dl_iterate_phdr over the loaded objects, then dlopen(RTLD_NOLOAD),
// which only takes a reference on a library that is already mapped.
#include "adam/omp.h"

#include <dlfcn.h>
#include <link.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace cxk::adam {
namespace {

struct Search {
    const char *needle;
    std::string found;
};

int match(struct dl_phdr_info *info, size_t, void *arg) {
    auto *s = static_cast<Search *>(arg);
    if (info->dlpi_name && *info->dlpi_name && std::strstr(info->dlpi_name, s->needle)) {
        s->found = info->dlpi_name;
        return 1;  // stops the iteration
    }
    return 0;
}

std::string loaded(const char *needle) {
    Search s{needle, {}};
    dl_iterate_phdr(match, &s);
    return s.found;
}

}  // namespace

int find_omp(const char *runtime, Omp *out) {
    static const char *const kDefaults[] = {"libgomp", "libiomp5", "libomp"};
    std::string path;
    if (runtime) {
        path = loaded(runtime);
    } else {
        for (const char *n : kDefaults)
            if (!(path = loaded(n)).empty()) break;
    }
    if (path.empty()) return -ENOENT;
    // The handle is kept for the life of the process: a team must never outlive its runtime.
    void *h = dlopen(path.c_str(), RTLD_LAZY | RTLD_NOLOAD);
    if (!h) return -ENOENT;
    out->parallel = reinterpret_cast<decltype(out->parallel)>(dlsym(h, "GOMP_parallel"));
    out->max_threads = reinterpret_cast<decltype(out->max_threads)>(dlsym(h, "omp_get_max_threads"));
    if (!out->parallel || !out->max_threads) {
        dlclose(h);
        return -ENOSYS;
    }
    return 0;
}

}  // namespace cxk::adam
