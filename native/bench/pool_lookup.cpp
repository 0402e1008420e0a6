// pool_lookup.cpp — the pool's lookup benchmark (bench/pool.py): cxk_obj_stat timed per name
// in C, so no Python call or exception is part of a lookup's time.
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <new>
#include <vector>

#include "cxlkit.h"

extern "C" {

int cxk_bench_pool_lookup(cxk_pool *p, const char *const *names, size_t n, double *median_ns) {
    if (!p || !median_ns || (n && !names)) return -EINVAL;
    *median_ns = 0;
    if (n == 0) return 0;
    std::vector<int64_t> ns;
    try {
        ns.resize(n);
    } catch (const std::bad_alloc &) {
        return -ENOMEM;
    }
    struct cxk_obj_stat s;
    for (size_t i = 0; i < n; ++i) {
        if (!names[i]) return -EINVAL;
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        (void)cxk_obj_stat(p, names[i], &s);  // a miss (-ENOENT) is a lookup too
        clock_gettime(CLOCK_MONOTONIC, &b);
        ns[i] = (b.tv_sec - a.tv_sec) * 1000000000ll + (b.tv_nsec - a.tv_nsec);
    }
    std::nth_element(ns.begin(), ns.begin() + n / 2, ns.end());
    *median_ns = double(ns[n / 2]);
    return 0;
}

}  // extern "C"
