# Per-file ISA flags for SIMD kernels (included by CMakeLists.txt). The files are chosen at
# run time by cpuid, so only they may use these instructions. -ffp-contract=off keeps GCC
# from fusing intrinsics into FMA: the Adam kernels must give the scalar reference's bits.
# GCC 12's AVX-512 headers self-initialise their "undefined" vectors and then warn about them
# under -Wextra (a header false positive), hence the -Wno-*uninitialized for that file.
set_source_files_properties(${PROJECT_SOURCE_DIR}/native/adam/adam_scalar.cpp PROPERTIES
  COMPILE_OPTIONS "-ffp-contract=off")
set_source_files_properties(${PROJECT_SOURCE_DIR}/native/adam/adam_avx2.cpp PROPERTIES
  COMPILE_OPTIONS "-mavx2;-mf16c;-ffp-contract=off")
set_source_files_properties(${PROJECT_SOURCE_DIR}/native/adam/adam_avx512.cpp PROPERTIES
  COMPILE_OPTIONS "-mavx512f;-mavx2;-mf16c;-ffp-contract=off;-Wno-uninitialized;-Wno-maybe-uninitialized")
set_source_files_properties(${PROJECT_SOURCE_DIR}/native/adam/adam_avx512bf16.cpp PROPERTIES
  COMPILE_OPTIONS "-mavx512f;-mavx512bw;-mavx512bf16;-mavx2;-mf16c;-ffp-contract=off;-Wno-uninitialized;-Wno-maybe-uninitialized")
