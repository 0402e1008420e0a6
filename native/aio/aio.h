// aio.h — private: the async I/O engine behind cxk_aio_* (include/cxlkit.h): requests cut
// into chunks, run by one io_uring owner thread or by a pool of pread/pwrite workers.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cxlkit.h"
#include "sys/sys_aio.h"

namespace cxk::aio {

struct Req {
    uint64_t left = 0;  // chunks not yet completed; guarded by Engine::mu
    int err = 0;        // first failure (-errno); guarded by Engine::mu
    uint64_t submit_ns = 0, done_ns = 0;  // CLOCK_MONOTONIC; done_ns set with left -> 0
};

uint64_t now_ns();

struct Chunk {
    Req *req;
    int fd;
    bool write;
    char *buf;
    uint64_t n;
    uint64_t off;
};

}  // namespace cxk::aio

struct cxk_aio {
    cxk_aio_opts opts{};
    int backend = CXK_AIO_THREADS;
    std::mutex mu;
    std::condition_variable cv_work;  // pending chunks or stop, for the workers
    std::condition_variable cv_done;  // a request finished, for waiters
    std::deque<cxk::aio::Chunk> pending;
    std::unordered_map<uint64_t, std::unique_ptr<cxk::aio::Req>> reqs;
    uint64_t next_ticket = 1;
    uint64_t busy = 0;  // chunks taken by a worker and not yet completed
    bool stop = false;
    struct cxk_aio_stats stats{};
    cxk::Uring ring;  // owned by the io_uring thread once it runs
    std::vector<std::thread> workers;
};

namespace cxk::aio {
// Worker loops (aio_workers.cpp).
void run_threads(cxk_aio *a);
void run_uring(cxk_aio *a);
// Record a chunk's outcome (res: bytes moved or -errno), under a->mu taken by the caller.
void complete_locked(cxk_aio *a, const Chunk &c, long res);
}  // namespace cxk::aio
