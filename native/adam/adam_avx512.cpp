// adam_avx512.cpp — the AVX-512F Adam kernel (traits: adam_avx512.h, V512<false>); bf16
// copies rounded with integer ops. Built with -mavx512f -mf16c -ffp-contract=off
// (native/adam/isa.cmake).
#include "adam/adam_avx512.h"

namespace cxk::adam {

uint64_t step_avx512(const Coeffs &c, const Span &s) { return run_simd<V512<false>>(c, s); }

}  // namespace cxk::adam
