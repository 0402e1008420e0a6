// aio_workers.cpp — the two ways the engine moves chunks: worker threads doing positional
// reads/writes, or one thread owning an io_uring with up to queue_depth chunks in flight.
#include <cerrno>
#include <vector>

#include "aio/aio.h"

namespace cxk::aio {
namespace {

// Moves a whole chunk with pread/pwrite (short transfers continue); bytes or -errno.
long move_sync(const Chunk &c) {
    uint64_t done = 0;
    while (done < c.n) {
        long r = c.write ? sys_pwrite(c.fd, c.buf + done, c.n - done, c.off + done)
                         : sys_pread(c.fd, c.buf + done, c.n - done, c.off + done);
        if (r < 0) return r;
        if (r == 0) return -EIO;  // end of file before the chunk's end: the file is short
        done += uint64_t(r);
    }
    return long(done);
}

}  // namespace

void run_threads(cxk_aio *a) {
    std::unique_lock<std::mutex> g(a->mu);
    for (;;) {
        a->cv_work.wait(g, [a] { return a->stop || !a->pending.empty(); });
        if (a->pending.empty()) return;  // stop, and nothing left
        Chunk c = a->pending.front();
        a->pending.pop_front();
        a->stats.chunks++;
        g.unlock();
        long r = move_sync(c);
        g.lock();
        complete_locked(a, c, r);
    }
}

namespace {

struct Slot {
    Chunk c;
    uint64_t done;  // bytes of c already moved (short transfers resubmit the rest)
};

}  // namespace

void run_uring(cxk_aio *a) {
    const uint32_t qd = a->opts.queue_depth;
    std::vector<Slot> slots(qd);
    std::vector<uint32_t> free_ids;
    for (uint32_t i = qd; i-- > 0;) free_ids.push_back(i);
    uint32_t inflight = 0;
    bool ring_ok = true;  // a failed submit leaves the ring unusable: finish synchronously
    std::unique_lock<std::mutex> g(a->mu);
    for (;;) {
        a->cv_work.wait(g, [&] { return a->stop || !a->pending.empty() || inflight > 0; });
        if (a->pending.empty() && inflight == 0) return;  // only when stop
        std::vector<uint32_t> queued;
        while (!a->pending.empty() && (!ring_ok || !free_ids.empty())) {
            Chunk c = a->pending.front();
            a->pending.pop_front();
            a->stats.chunks++;
            if (!ring_ok) {
                g.unlock();
                long r = move_sync(c);
                g.lock();
                complete_locked(a, c, r);
                continue;
            }
            uint32_t id = free_ids.back();
            int rc = a->ring.prep(c.fd, c.write, c.buf, unsigned(c.n), c.off, id);
            if (rc < 0) {
                complete_locked(a, c, rc);
                continue;
            }
            free_ids.pop_back();
            slots[id] = Slot{c, 0};
            queued.push_back(id);
        }
        g.unlock();
        if (!queued.empty()) {
            int rc = a->ring.submit();
            if (rc < 0) {
                // the entries stay unsubmitted in the ring; never touch it again
                ring_ok = false;
                g.lock();
                for (uint32_t id : queued) complete_locked(a, slots[id].c, rc);
                continue;
            }
            inflight += uint32_t(queued.size());
        }
        if (inflight == 0) {
            g.lock();
            continue;
        }
        UringCqe cqe;
        int rc = a->ring.wait(&cqe);
        g.lock();
        if (rc < 0) {
            // cannot reap: fail every chunk in flight and stop using the ring (their
            // buffers may still be the kernel's until the ring is torn down at destroy)
            ring_ok = false;
            std::vector<char> is_free(qd, 0);
            for (uint32_t id : free_ids) is_free[id] = 1;
            for (uint32_t id = 0; id < qd; ++id)
                if (!is_free[id]) complete_locked(a, slots[id].c, rc);
            inflight = 0;
            continue;
        }
        uint32_t id = uint32_t(cqe.user);
        Slot &s = slots[id];
        inflight--;
        if (cqe.res > 0 && uint64_t(cqe.res) < s.c.n) {
            // short transfer: the rest goes back to the front of the queue as a new chunk
            Chunk rest = s.c;
            rest.buf += cqe.res;
            rest.off += uint64_t(cqe.res);
            rest.n -= uint64_t(cqe.res);
            a->stats.chunks--;  // counted again when re-issued
            if (s.c.write) a->stats.bytes_written += uint64_t(cqe.res);
            else a->stats.bytes_read += uint64_t(cqe.res);
            a->pending.push_front(rest);
        } else {
            complete_locked(a, s.c, cqe.res == 0 ? -EIO : cqe.res);
        }
        free_ids.push_back(id);
    }
}

}  // namespace cxk::aio
