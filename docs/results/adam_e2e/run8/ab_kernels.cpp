// A/B of the AVX-512 Adam kernels on one thread, paired rounds in a rotated order: the kernel
// before this branch (runtime flags, integer bf16 rounding), the new avx512 and avx512bf16 levels
// and the traffic loop; bf16 model (bf16 grad, bf16 copy re-read and written, decoupled wd).
// Built (round 8) from the build tree's objects and the previous commit's adam_avx512.cpp,
// compiled with the same flags and its step_avx512 renamed:
//   git show 4267fe9~1:native/adam/adam_avx512.cpp (with adam_simd.h, adam.h) into /tmp/old/adam
//   g++ -std=c++17 -O3 -DNDEBUG -mavx512f -mavx2 -mf16c -ffp-contract=off -I/tmp/old -Iinclude \
//       -c /tmp/old/adam/adam_avx512.cpp -o old.o
//   objcopy --redefine-sym _ZN3cxk4adam11step_avx512ERKNS0_6CoeffsERKNS0_4SpanE=\
//       _ZN3cxk4adam15step_avx512_oldERKNS0_6CoeffsERKNS0_4SpanE old.o
//   g++ -O2 -std=c++17 -Iinclude -Inative ab_kernels.cpp old.o $O/adam_avx512.cpp.o \
//       $O/adam_avx512bf16.cpp.o $O/adam_scalar.cpp.o -o ab   ($O: the build's native/adam objects)
//   ./ab PARAMS ROUNDS bf16|fp32
#include <sys/mman.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include "adam/adam.h"
#include "cxlkit.h"
namespace cxk::adam { uint64_t step_avx512_old(const Coeffs &c, const Span &s); }
static void *big(size_t n) {
    void *p = aligned_alloc(1 << 21, (n + (1 << 21) - 1) / (1 << 21) * (1 << 21));
    madvise(p, n, MADV_HUGEPAGE);
    memset(p, 0, n);
    return p;
}
int main(int argc, char **argv) {
    const size_t n = strtoul(argv[1], 0, 10);
    const int rounds = atoi(argv[2]);
    const bool bf = argc > 3 && !strcmp(argv[3], "bf16");
    float *p = (float *)big(n * 4), *m = (float *)big(n * 4), *v = (float *)big(n * 4);
    void *g = big(n * 4), *c16 = big(n * 2);
    for (size_t i = 0; i < n; ++i) p[i] = 0.02f;
    if (bf) for (size_t i = 0; i < n; ++i) ((uint16_t *)g)[i] = 0x3a83, ((uint16_t *)c16)[i] = cxk::adam::f32_to_bf16(0.02f);
    else for (size_t i = 0; i < n; ++i) ((float *)g)[i] = 1e-3f;
    cxk::adam::Coeffs c{};
    c.scale = 1; c.neg_step = -1e-4f; c.eps = 1e-8f; c.omb1 = 0.1f; c.b2 = 0.999f; c.omb2 = 1e-3f;
    c.decoupled = true; c.decay = 1 - 1e-6f; c.resync = bf;
    cxk::adam::Span s{p, m, v, g, bf ? c16 : nullptr, n, bf ? CXK_DTYPE_BF16 : CXK_DTYPE_F32,
                      bf ? CXK_DTYPE_BF16 : CXK_DTYPE_NONE};
    cxk::adam::Coeffs ct = c; ct.traffic = true; ct.resync = false;
    const char *names[] = {"old_avx512", "new_avx512", "new_avx512bf16", "traffic"};
    std::vector<double> t[4];
    auto run = [&](int k) {
        switch (k) {
            case 0: return cxk::adam::step_avx512_old(c, s);
            case 1: return cxk::adam::step_avx512(c, s);
            case 2: return cxk::adam::step_avx512bf16(c, s);
            default: return cxk::adam::step_avx512bf16(ct, s);
        }
    };
    for (int k = 0; k < 4; ++k) run(k);
    for (int r = 0; r < rounds; ++r)
        for (int j = 0; j < 4; ++j) {
            int k = (j + r) % 4;
            auto t0 = std::chrono::steady_clock::now();
            run(k);
            t[k].push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
    printf("{\"params\": %zu, \"model\": \"%s\", \"rounds\": %d", n, bf ? "bf16" : "fp32", rounds);
    for (int k = 0; k < 4; ++k) {
        std::vector<double> x = t[k]; std::sort(x.begin(), x.end());
        std::vector<double> rel; for (int r = 0; r < rounds; ++r) rel.push_back(t[3][r] / t[k][r]);
        std::sort(rel.begin(), rel.end());
        std::vector<double> vo; for (int r = 0; r < rounds; ++r) vo.push_back(t[0][r] / t[k][r]);
        std::sort(vo.begin(), vo.end());
        printf(", \"%s\": {\"ms\": %.3f, \"min_ms\": %.3f, \"pct_of_traffic\": %.1f, \"old_over_this\": %.3f}",
               names[k], x[rounds / 2] * 1e3, x[0] * 1e3, 100 * rel[rounds / 2], vo[rounds / 2]);
    }
    printf("}\n");
}
