// aio.cpp — the C ABI of the async I/O engine: create/destroy, submit (cut into chunks),
// wait, stats, and the file calls the subgroup store needs (open with an O_DIRECT fallback,
// fdatasync, truncate, OFD locks).
#include "aio/aio.h"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <new>
#include <system_error>

#include "sys/sys.h"

using cxk::aio::Chunk;
using cxk::aio::Req;

namespace {

int check_opts(cxk_aio_opts &o) {
    if (o.backend < CXK_AIO_AUTO || o.backend > CXK_AIO_THREADS) return -EINVAL;
    if (o.queue_depth == 0) o.queue_depth = 32;
    if (o.block_size == 0) o.block_size = 1u << 20;
    if (o.threads == 0) o.threads = o.queue_depth < 4 ? o.queue_depth : 4;
    if (o.queue_depth > 4096 || o.threads > 64) return -EINVAL;
    if (o.block_size % CXK_AIO_ALIGN || o.block_size > (1ull << 30)) return -EINVAL;
    return 0;
}

}  // namespace

namespace cxk::aio {

void complete_locked(cxk_aio *a, const Chunk &c, long res) {
    if (res < 0) {
        a->stats.errors++;
        if (!c.req->err) c.req->err = int(res);
    } else if (c.write) {
        a->stats.bytes_written += uint64_t(res);
    } else {
        a->stats.bytes_read += uint64_t(res);
    }
    if (--c.req->left == 0) {
        c.req->done_ns = now_ns();
        a->cv_done.notify_all();
    }
}

uint64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return uint64_t(ts.tv_sec) * 1000000000ull + uint64_t(ts.tv_nsec);
}

}  // namespace cxk::aio

extern "C" {

int cxk_aio_uring_built(void) { return cxk::Uring::built_in() ? 1 : 0; }

int cxk_aio_create(const struct cxk_aio_opts *opts, cxk_aio **out) {
    if (!out) return -EINVAL;
    cxk_aio_opts o{};
    if (opts) o = *opts;
    if (int e = check_opts(o)) return e;
    auto *a = new (std::nothrow) cxk_aio;
    if (!a) return -ENOMEM;
    a->opts = o;
    if (o.backend != CXK_AIO_THREADS) {
        // entries = queue depth: the owner thread never has more chunks in flight
        int rc = a->ring.init(o.queue_depth);
        if (rc == 0) {
            a->backend = CXK_AIO_URING;
        } else if (o.backend == CXK_AIO_URING) {
            delete a;
            return rc;
        }
    }
    try {
        if (a->backend == CXK_AIO_URING) {
            a->workers.emplace_back(cxk::aio::run_uring, a);
        } else {
            for (uint32_t i = 0; i < o.threads; ++i)
                a->workers.emplace_back(cxk::aio::run_threads, a);
        }
    } catch (const std::system_error &) {
        cxk_aio_destroy(a);
        return -EAGAIN;
    }
    *out = a;
    return 0;
}

void cxk_aio_destroy(cxk_aio *a) {
    if (!a) return;
    {
        std::lock_guard<std::mutex> g(a->mu);
        a->stop = true;  // workers drain pending and in-flight chunks, then exit
    }
    a->cv_work.notify_all();
    for (auto &t : a->workers) t.join();
    delete a;
}

int cxk_aio_backend(const cxk_aio *a) { return a ? a->backend : -EINVAL; }

int cxk_aio_submit(cxk_aio *a, int fd, int write, void *buf, uint64_t nbytes,
                   uint64_t offset, uint64_t *ticket) {
    if (!a || !ticket || fd < 0 || !buf || nbytes == 0) return -EINVAL;
    const uint64_t bs = a->opts.block_size;
    try {
        auto req = std::make_unique<Req>();
        req->submit_ns = cxk::aio::now_ns();
        std::lock_guard<std::mutex> g(a->mu);
        if (a->stop) return -EBADF;
        char *p = static_cast<char *>(buf);
        for (uint64_t at = 0; at < nbytes; at += bs) {
            const uint64_t n = nbytes - at < bs ? nbytes - at : bs;
            a->pending.push_back(Chunk{req.get(), fd, write != 0, p + at, n, offset + at});
            req->left++;
        }
        a->stats.requests++;
        *ticket = a->next_ticket++;
        a->reqs.emplace(*ticket, std::move(req));
    } catch (const std::bad_alloc &) {
        return -ENOMEM;
    }
    a->cv_work.notify_all();
    return 0;
}

int cxk_aio_wait(cxk_aio *a, uint64_t ticket) { return cxk_aio_wait_ex(a, ticket, nullptr); }

int cxk_aio_wait_ex(cxk_aio *a, uint64_t ticket, uint64_t *duration_ns) {
    if (!a) return -EINVAL;
    std::unique_lock<std::mutex> g(a->mu);
    auto it = a->reqs.find(ticket);
    if (it == a->reqs.end()) return -ENOENT;
    Req *r = it->second.get();
    a->cv_done.wait(g, [r] { return r->left == 0; });
    int err = r->err;
    if (duration_ns) *duration_ns = r->done_ns - r->submit_ns;
    a->reqs.erase(it);
    return err;
}

int cxk_aio_done(cxk_aio *a, uint64_t ticket) {
    if (!a) return -EINVAL;
    std::lock_guard<std::mutex> g(a->mu);
    auto it = a->reqs.find(ticket);
    if (it == a->reqs.end()) return -ENOENT;
    return it->second->left == 0 ? 1 : 0;
}

int cxk_aio_stats(const cxk_aio *a, struct cxk_aio_stats *out) {
    if (!a || !out) return -EINVAL;
    std::lock_guard<std::mutex> g(const_cast<cxk_aio *>(a)->mu);
    *out = a->stats;
    return 0;
}

int cxk_aio_open(const char *path, uint32_t flags, int *direct) {
    if (!path || !*path || (flags & ~7u)) return -EINVAL;
    int f = (flags & CXK_AIO_O_WRITE) ? O_RDWR : O_RDONLY;
    if (flags & CXK_AIO_O_CREATE) f |= O_CREAT;
    int fd = -EINVAL;
    if (flags & CXK_AIO_O_DIRECT) {
        fd = cxk::sys_open(path, f | O_DIRECT, 0600);
        // tmpfs (and some FUSE) refuse O_DIRECT with EINVAL: the same file, buffered
        if (fd >= 0) {
            if (direct) *direct = 1;
            return fd;
        }
        if (fd != -EINVAL) return fd;
    }
    fd = cxk::sys_open(path, f, 0600);
    if (fd >= 0 && direct) *direct = 0;
    return fd;
}

int cxk_aio_close(int fd) {
    if (fd < 0) return -EBADF;
    return ::close(fd) == 0 ? 0 : -errno;
}

int cxk_aio_sync(int fd) { return cxk::sys_fdatasync(fd); }

int cxk_aio_truncate(int fd, uint64_t nbytes) {
    return cxk::sys_ftruncate(fd, (long long)nbytes);
}

int cxk_aio_lock(int fd, int kind, int wait, uint64_t at) {
    if (fd < 0 || kind < 0 || kind > 2) return -EINVAL;
    return cxk::sys_ofd_lock(fd, kind, wait != 0, at);
}

}  // extern "C"
