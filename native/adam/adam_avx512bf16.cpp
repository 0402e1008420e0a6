// adam_avx512bf16.cpp — the AVX-512F + BW + AVX512_BF16 Adam kernel (traits: adam_avx512.h,
// V512<true>): bf16 copies rounded with vcvtneps2bf16, fixed up to torch's bits where it
// differs (subnormals, NaN); 16-bit copies handled two vectors at a time (BW's word compares).
// Built with -mavx512f -mavx512bw -mavx512bf16 -mf16c -ffp-contract=off (native/adam/isa.cmake).
#include "adam/adam_avx512.h"

namespace cxk::adam {

uint64_t step_avx512bf16(const Coeffs &c, const Span &s) { return run_simd<V512<true>>(c, s); }

}  // namespace cxk::adam
