// omp.h — private: the entry points of an OpenMP runtime already loaded in this process,
// found by name (never loaded by us), for teams that run on the process's OpenMP threads.
#pragma once

namespace cxk::adam {

struct Omp {
    // libgomp's ABI (also exported by the LLVM and Intel runtimes): run fn(data) on a team
    // of num_threads (0 = the calling thread's nthreads-var), the caller among them.
    void (*parallel)(void (*fn)(void *), void *data, unsigned num_threads, unsigned flags);
    int (*max_threads)();  // omp_get_max_threads of the calling thread
};

// runtime: path or substring of a loaded library's path, or nullptr = libgomp, libiomp5,
// libomp in that order. 0, -ENOENT (not loaded) or -ENOSYS (no GOMP_parallel).
int find_omp(const char *runtime, Omp *out);

}  // namespace cxk::adam
