// bench.h — private to bench.cpp: the pieces of the benchmark kernels that
// are worth naming on their own (thread pinning, the per-kind sweep of one range).
#pragma once
#include <cstddef>
#include <cstdint>

namespace cxk::bench {

// Pin the calling thread to one CPU (sched_setaffinity with pid 0); cpu < 0 leaves
// it as it is. Returns 0 or -errno.
int pin_self(int cpu) noexcept;

// 0 when every cpus[i] is in the calling thread's allowed set, else -EINVAL.
int check_cpus(const int32_t *cpus, uint32_t ncpus) noexcept;

// One pass of kind (enum cxk_bench_kind) over n bytes (a multiple of 64, 64-byte aligned);
// returns the bytes moved (2n for COPY). src is read by COPY only.
size_t sweep(int kind, char *dst, const char *src, size_t n) noexcept;

// Monotonic nanoseconds.
uint64_t now_ns() noexcept;
// On-CPU nanoseconds of the calling thread.
uint64_t thread_cpu_ns() noexcept;

}  // namespace cxk::bench
