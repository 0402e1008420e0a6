// sim_branch.cpp — what the non-coherence simulator costs production: cxk_flush and
// cxk_sfence (the check of the simulator's flag, then the instruction) against the same
// instructions without the check, timed alternately in one run.
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <vector>

#include "bench/bench.h"
#include "cxlkit.h"
#include "prim/memops_raw.h"

namespace {

using Flush = void (*)(const void *, size_t);
using Fence = void (*)();

// Nanoseconds per call of n calls (through a pointer, as a caller in another library calls).
double time_flush(Flush f, const void *line, uint32_t n) {
    const uint64_t t0 = cxk::bench::now_ns();
    for (uint32_t i = 0; i < n; ++i) f(line, 64);
    return double(cxk::bench::now_ns() - t0) / n;
}
double time_fence(Fence f, uint32_t n) {
    const uint64_t t0 = cxk::bench::now_ns();
    for (uint32_t i = 0; i < n; ++i) f();
    return double(cxk::bench::now_ns() - t0) / n;
}
double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

}  // namespace

extern "C" int cxk_bench_sim_branch(uint32_t rounds, uint32_t calls, double out[6]) {
    if (!out || rounds == 0 || calls == 0) return -EINVAL;
    alignas(64) static uint64_t line[8];
    // volatile pointers: the compiler may not see through them and fold the calls away
    Flush volatile with_check = cxk_flush, raw = cxk::prim::flush_raw;
    Fence volatile fwith = cxk_sfence, fraw = cxk::prim::sfence_raw;
    std::vector<double> a, b, c, d;
    for (uint32_t r = 0; r < rounds; ++r) {
        line[r % 8] = r;  // the line is dirty again each round
        if (r % 2) {
            a.push_back(time_flush(with_check, line, calls));
            b.push_back(time_flush(raw, line, calls));
            c.push_back(time_fence(fwith, calls));
            d.push_back(time_fence(fraw, calls));
        } else {
            b.push_back(time_flush(raw, line, calls));
            a.push_back(time_flush(with_check, line, calls));
            d.push_back(time_fence(fraw, calls));
            c.push_back(time_fence(fwith, calls));
        }
    }
    // paired: the ratio of each round's two timings, which load that drifts between rounds
    // leaves alone
    std::vector<double> pf, ps;
    for (uint32_t r = 0; r < rounds; ++r) {
        pf.push_back(a[r] / b[r]);
        ps.push_back(c[r] / d[r]);
    }
    out[0] = median(a);
    out[1] = median(b);
    out[2] = median(c);
    out[3] = median(d);
    out[4] = median(pf);
    out[5] = median(ps);
    return 0;
}
