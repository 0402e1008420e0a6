// wake.cpp — the same-host wake-up of rings: a consumer in the sleep phase of its
// wait sleeps in FUTEX_WAIT on its producer's futex word instead of on the timer, and the
// producer's publish wakes it at once, as the kernel wakes a socket's reader.
//
// The protocol (a Dekker pair: each side stores, fences, then loads the other's word):
//   consumer: v = ProdLine::wake; HeadLine::sleeping = 1; full fence; look at the ring;
//             if still empty FUTEX_WAIT(&ProdLine::wake, v, safety-net timeout);
//             HeadLine::sleeping = 0.
//   producer: store the stamps (or the closed flag); full fence; if HeadLine::sleeping:
//             ProdLine::wake += 1, FUTEX_WAKE(&ProdLine::wake).
// Either the consumer's second look sees the publish, or the producer sees sleeping == 1;
// then it bumps the word: a consumer not yet in FUTEX_WAIT gets EAGAIN (the value changed
// since v), one already in it is woken. A bump before v was read was for an earlier sleep,
// and its publish preceded it, so the second look sees that publish. Each word has one
// writer (DESIGN.md principle 1): sleeping the consumer, wake the producer.
//
// Only where every party shares one coherence domain (coherence "host": processes of one
// machine): a futex does not cross hosts, and a non-coherent pool gives the fences no
// meaning across hosts. Everything read is untrusted: a bad wake word makes FUTEX_WAIT
// return at once or on its timeout, a bad sleeping word costs the producer a FUTEX_WAKE.
#include "ring/wake.h"

#include <cerrno>

#include "ring/ring.h"
#include "ring/wait.h"
#include "sys/sys.h"

namespace cxk::ring {
namespace {

HeadLine *head_line(const cxk_ring *r) { return reinterpret_cast<HeadLine *>(r->base + kLine); }
ProdLine *prod_line(const cxk_ring *r) {
    return reinterpret_cast<ProdLine *>(r->base + 2 * kLine);
}

// Consumer: whether a poll would find something (a cell, the closed flag, or a stamp no
// correct producer writes: the poll reports that). Read after the arming fence.
bool ready(const cxk_ring *r) {
    const CellHdr *c = reinterpret_cast<const CellHdr *>(
        r->base + CXK_RING_HDR_BYTES + uint64_t(r->pos & r->mask) * r->cell_bytes);
    const uint64_t stamp = __atomic_load_n(&c->stamp, __ATOMIC_ACQUIRE);
    const uint64_t old = r->pos + 1 > r->ncells ? r->pos + 1 - r->ncells : 0;
    if (stamp != old) return true;
    return __atomic_load_n(&prod_line(r)->closed, __ATOMIC_ACQUIRE) != 0;
}

// A futex error that will not go away on this mapping or kernel: the handle leaves the
// wake-up for timed sleeps (-ENOSYS: no futex or no futex_waitv; -EFAULT, -EINVAL: memory
// that cannot hold a futex, e.g. a device mapping without struct pages; -EPERM: a filter).
bool fatal(int rc) { return rc == -ENOSYS || rc == -EFAULT || rc == -EINVAL || rc == -EPERM; }

struct Set {
    cxk_ring *const *rings;
    size_t n;
    const Extra *extra;  // a word beside the rings (may be null)
};

// Whether a wait on s may sleep on futexes: 1..128 consumer rings (127 with an extra word),
// each with the wake-up.
bool usable(const Set *s) {
    bool ok = s->n >= 1 && s->n + (s->extra ? 1 : 0) <= kFutexWaitvMax;
    for (size_t i = 0; ok && i < s->n; ++i)
        ok = s->rings[i] && s->rings[i]->wake && s->rings[i]->role == CXK_RING_CONSUMER;
    return ok;
}

// The sleep phase of a wait on s->n consumer rings: a futex sleep when every ring may use
// the wake-up, else the timed sleep of ns.
void ring_sleep(void *ctx, int64_t ns) {
    const Set *s = static_cast<const Set *>(ctx);
    const int64_t tmo = cxk::wait::wake_timeout_ns();
    if (tmo <= 0 || !usable(s)) return cxk::wait::sleep_precise(ns);
    const uint32_t *words[kFutexWaitvMax];
    uint32_t vals[kFutexWaitvMax];
    for (size_t i = 0; i < s->n; ++i) {
        ProdLine *pl = prod_line(s->rings[i]);
        words[i] = &pl->wake;
        // acquire pairs with the producer's release bump: a bump seen here was for an
        // earlier sleep, and its stamps are visible to the look below
        vals[i] = __atomic_load_n(&pl->wake, __ATOMIC_ACQUIRE);
        __atomic_store_n(&head_line(s->rings[i])->sleeping, uint32_t(1), __ATOMIC_RELAXED);
    }
    const Extra *x = s->extra;
    size_t nw = s->n;
    if (x) {
        // as for a ring: acquire pairs with the owner's release bump of the word
        words[nw] = x->word;
        vals[nw++] = __atomic_load_n(x->word, __ATOMIC_ACQUIRE);
        __atomic_store_n(x->sleeping, uint32_t(1), __ATOMIC_RELAXED);
    }
    // the consumer half of the Dekker pair: sleeping stored before the ring is looked at
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    bool any = x && __atomic_load_n(x->seq, __ATOMIC_ACQUIRE) >= x->want;
    for (size_t i = 0; i < s->n && !any; ++i) any = ready(s->rings[i]);
    int rc = 0;
    if (any) {
        for (size_t i = 0; i < s->n; ++i) ++s->rings[i]->wst.rechecks;
    } else {
        rc = nw == 1 ? cxk::sys_futex_wait(words[0], vals[0], tmo)
                     : cxk::sys_futex_waitv(words, vals, unsigned(nw), tmo);
        for (size_t i = 0; i < s->n; ++i) {
            struct cxk_ring_wake_stats &st = s->rings[i]->wst;
            ++st.futex_waits;
            if (rc >= 0 || rc == -EAGAIN) {
                // woken (rc: the index for waitv), or the word moved before we slept
                // (the extra word, index n, counts for every ring: a wake ended the sleep)
                if (rc == -EAGAIN || nw == 1 || size_t(rc) == i || size_t(rc) == s->n)
                    ++st.woken;
            } else if (rc == -ETIMEDOUT) {
                ++st.timeouts;
            } else if (rc == -EINTR) {
                ++st.interrupted;
            } else if (fatal(rc)) {
                ++st.fallbacks;
                s->rings[i]->wake = false;
            }
        }
    }
    for (size_t i = 0; i < s->n; ++i)
        __atomic_store_n(&head_line(s->rings[i])->sleeping, uint32_t(0), __ATOMIC_RELAXED);
    if (x) __atomic_store_n(x->sleeping, uint32_t(0), __ATOMIC_RELAXED);
    if (fatal(rc)) cxk::wait::sleep_precise(ns);  // this sleep still happens, on the timer
}

}  // namespace

int64_t wait_idle_rings_extra(cxk_wait *w, cxk_ring *const *rings, size_t n, const Extra *extra) {
    if (!rings || n == 0 || !w) return cxk_wait_idle(w);
    Set s{rings, n, extra};
    return cxk::wait::idle_with(w, ring_sleep, &s);
}

void wake_attach(cxk_ring *r, bool coherent) {
    r->wake = coherent;
    r->wst = {};
}

void wake_notify(cxk_ring *r) {
    if (!r->wake) return;
    // the producer half of the Dekker pair: the stamps stored before sleeping is read
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (__atomic_load_n(&head_line(r)->sleeping, __ATOMIC_RELAXED) == 0) return;
    ProdLine *pl = prod_line(r);
    // the producer is this word's one writer: a plain read of our own value, a release
    // store (pairs with the consumer's acquire load of the word)
    __atomic_store_n(&pl->wake, pl->wake + 1, __ATOMIC_RELEASE);
    const int rc = cxk::sys_futex_wake(&pl->wake, 1);
    ++r->wst.wakes_sent;
    // a failed wake costs the consumer one safety-net timeout; the handle keeps waking (a
    // FUTEX_WAKE that fails for good has a FUTEX_WAIT beside it that fails alike, and the
    // consumer then stops sleeping on it and setting sleeping)
    if (rc < 0) ++r->wst.fallbacks;
}

}  // namespace cxk::ring

extern "C" {

int64_t cxk_wait_idle_rings(cxk_wait *w, cxk_ring *const *rings, size_t n) {
    if (!rings || n == 0 || !w) return cxk_wait_idle(w);
    // the policy's phases as they are (docs/msg.md, "Same-host wake-up": a shorter spin
    // before the futex sleep locked two idle-machine processes into waking each other)
    return cxk::ring::wait_idle_rings_extra(w, rings, n, nullptr);
}

int cxk_ring_wake_stats(const cxk_ring *r, struct cxk_ring_wake_stats *st) {
    if (!r || !st) return -EINVAL;
    *st = r->wst;
    st->enabled = r->wake ? 1 : 0;
    return 0;
}

}  // extern "C"

namespace cxk::ring {

void wake_stats_add(const cxk_ring *r, struct cxk_ring_wake_stats *sum) {
    struct cxk_ring_wake_stats one {};
    if (!r || cxk_ring_wake_stats(r, &one)) return;
    sum->enabled |= one.enabled;
    sum->futex_waits += one.futex_waits, sum->woken += one.woken;
    sum->timeouts += one.timeouts, sum->interrupted += one.interrupted;
    sum->fallbacks += one.fallbacks, sum->rechecks += one.rechecks;
    sum->wakes_sent += one.wakes_sent;
}

}  // namespace cxk::ring
