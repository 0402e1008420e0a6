// hosts.cpp — the hosts of a pool: shared-memory sync, time and liveness (heartbeat, pids),
// the robust host lock and its recovery on EOWNERDEAD, Lamport's bakery across hosts, picking
// and attaching to a host slot (boot takeover under an OFD lock), and the heartbeat thread.
#include "pool/hosts.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <chrono>
#include <cstdio>
#include <mutex>

#include "pool/crash.h"
#include "pool/leases.h"
#include "pool/recovery.h"
#include "prim/policy.h"
#include "sys/sys.h"

namespace cxk::pool {

void sync_out(const cxk_pool *p, const void *a, size_t n) {
    if (p->nc) cxk_flush(a, n);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);  // mfence: also orders our later loads
}
void sync_in(const cxk_pool *p, const void *a, size_t n) {
    if (p->nc) cxk_invalidate(a, n);
}

int64_t now_ns() {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

bool pid_alive(uint32_t pid) {
    if (pid == 0) return false;
    const int r = sys_kill(int(pid), 0);
    return r == 0 || r == -EPERM;
}

// ---- host state --------------------------------------------------------------------
int read_boot_hash(uint64_t *out) {
    char buf[64] = {};
    const long got = sys_read_small("/proc/sys/kernel/random/boot_id", buf, sizeof buf);
    // no procfs (ENOENT): every process the same boot. Any other failure (EMFILE, EACCES)
    // is the caller's error: a wrong hash would make this host look rebooted to its own
    // running processes, whose slot, leases and objects an open would then take over.
    if (got < 0 && got != -ENOENT) return int(got);
    const size_t n = got > 0 ? size_t(got) : 0;
    *out = name_hash(buf, n) | (1ull << 63);  // never kBootFresh or kBootBusy
    return 0;
}

uint64_t boot_hash() {
    uint64_t h = 1ull << 63;
    read_boot_hash(&h);
    return h;
}

bool host_used(const cxk_pool *p, uint32_t h) {
    HostSlot *s = slot(p, h);
    if (h != p->host) sync_in(p, s, kLine);
    return ld(&s->boot) != kBootFresh;
}

// Another host is alive while its heartbeat is younger than the lease timeout (hosts keep
// their clocks in sync well within it). This host is alive by definition.
bool host_alive(const cxk_pool *p, uint32_t h) {
    if (h == p->host) return true;
    HostSlot *s = slot(p, h);
    sync_in(p, s, kLine);
    return now_ns() - ld(&s->heartbeat_ns) < int64_t(p->geo.lease_timeout_ns);
}

bool slot_ours(const cxk_pool *p) {
    HostSlot *s = slot(p, p->host);
    sync_in(p, s, kLine);
    return ld(&s->boot) == p->boot && ld(&s->epoch) == p->epoch;
}

void beat(cxk_pool *p) {
    HostSlot *s = slot(p, p->host);
    st(&s->heartbeat_ns, now_ns());
    sync_out(p, s, kLine);
}

int init_mutex(pthread_mutex_t *m) {
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
    pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    int r = pthread_mutex_init(m, &a);
    pthread_mutexattr_destroy(&a);
    return -r;
}

// The result of locking host slot s's mutex: on EOWNERDEAD the holder died, and as the
// partition chain is intact everything derived from it (lists, counters, name entries,
// pending/creating lists) is rebuilt before the mutex is marked consistent; we hold it then.
// How long an opener waits for another process of its host that is taking the slot over
// (re-initialising the mutex and running recovery over the whole partition).
constexpr int64_t kTakeoverWaitNs = 30 * 1000000000ll;

int lock_result(cxk_pool *p, HostSlot *s, int e) {
    if (e != EOWNERDEAD) return e;
    const int r = recover(p, nullptr);
    pthread_mutex_consistent(&s->mutex);
    if (r) pthread_mutex_unlock(&s->mutex);  // a broken chain: the caller reports it
    return r ? -r : 0;
}

namespace {
// The kind glibc records in a robust process-shared mutex (a pool written by anyone may
// hold another: glibc aborts on some kinds, so it is checked before every lock).
int mutex_kind_expected() {
    static const int kind = [] {
        pthread_mutex_t m;
        init_mutex(&m);
        const int k = m.__data.__kind;
        pthread_mutex_destroy(&m);
        return k;
    }();
    return kind;
}

int64_t mono_ns() {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return int64_t(t.tv_sec) * 1000000000 + t.tv_nsec;
}

// The longest a holder keeps the host lock or the bakery: critical sections of microseconds
// to milliseconds (recovery of a large chain the longest), bounded by the pool's lease
// timeout clamped to 1..30 s. A lock word or bakery register unchanged for longer is a
// stopped process or a stray write, never a holder at work.
int64_t hold_max_ns(const cxk_pool *p) {
    return std::clamp<int64_t>(int64_t(std::min<uint64_t>(p->geo.lease_timeout_ns,
                                                           uint64_t(INT64_MAX))),
                               1000000000ll, 30000000000ll);
}

// Lock s's mutex; a lock word naming a thread that no longer exists and that the kernel did
// not hand over (EOWNERDEAD) was never a real holder: ENOTRECOVERABLE, which `fsck --repair`
// (CXK_POOL_REPAIR) resets. A live holder is waited for while it makes progress: the host
// lock guards critical sections of microseconds to milliseconds (recovery of a large chain
// the longest), so one owner seen holding it for longer than the pool's lease timeout
// (clamped to 1..30 s) is a lock word that names some unrelated live thread (any user of the
// pool file can write one) or a stopped process: ENOTRECOVERABLE too, never a wait for ever.
int lock_mutex(const cxk_pool *p, HostSlot *s, bool try_only) {
    if (ldr(&s->mutex.__data.__kind) != mutex_kind_expected()) return ENOTRECOVERABLE;
    // Uncontended (the common case), a try takes it without reading the clock for the
    // timed wait below; EOWNERDEAD comes back from it as from the wait.
    const int t = pthread_mutex_trylock(&s->mutex);
    if (try_only || t != EBUSY) return t;
    const int64_t held_max = hold_max_ns(p);
    int dead_seen = 0, held_by = -1;
    int64_t since = 0;
    for (;;) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        t.tv_nsec += 200 * 1000000;  // 200 ms slices
        if (t.tv_nsec >= 1000000000) t.tv_sec++, t.tv_nsec -= 1000000000;
        const int e = pthread_mutex_timedlock(&s->mutex, &t);
        if (e != ETIMEDOUT) return e;
        const int owner = ldr(&s->mutex.__data.__lock) & 0x3fffffff;  // FUTEX_TID_MASK
        if (owner != 0 && sys_kill(owner, 0) == -ESRCH) {
            if (++dead_seen >= 2) return ENOTRECOVERABLE;
            continue;
        }
        dead_seen = 0;
        const int64_t now = mono_ns();
        if (owner != held_by) {  // another holder: the lock is changing hands, not stuck
            held_by = owner;
            since = now;
        } else if (now - since > held_max) {
            return ENOTRECOVERABLE;
        }
    }
}
}  // namespace

int lock_host(cxk_pool *p, bool try_only) {
    HostSlot *s = slot(p, p->host);
    if (!slot_ours(p)) return EKEYREVOKED;  // released while we were stalled: write nothing
    const int e = lock_result(p, s, lock_mutex(p, s, try_only));
    if (e) return e;
    if (!slot_ours(p)) {  // released while we waited for the lock
        pthread_mutex_unlock(&s->mutex);
        return EKEYREVOKED;
    }
    bakery_clear_stale(p);  // we hold the host lock: nobody of this host is in the bakery
    // counts out of range cannot be trusted or iterated, and counters no chain can give
    // refuse creates: rebuild them from the chain
    if (ldr(&s->npending) > kPendingMax || ldr(&s->ncreating_list) > kCreatingMax ||
        counters_impossible(p)) {
        if (int r = recover(p, nullptr)) {
            pthread_mutex_unlock(&s->mutex);
            return -r;
        }
    }
    return 0;
}

void unlock_host(cxk_pool *p) {
    HostSlot *s = slot(p, p->host);
    if (p->needs_recover) {
        recover(p, nullptr);  // an op found lists or links corrupt; the chain is the truth
        p->needs_recover = false;
    }
    sync_out(p, &s->used_bytes, kLine);  // counters, for other hosts' stat
    pthread_mutex_unlock(&s->mutex);
}

int reset_host_lock(cxk_pool *p, int lock_fd) {
    HostSlot *s = slot(p, p->host);
    const uint64_t at = p->geo.host_table_off + uint64_t(p->host) * kHostSlotBytes;
    if (int r = backing_lock(lock_fd, at, kTakeoverWaitNs)) return r;
    int r = init_mutex(&s->mutex);
    sync_out(p, &s->mutex, kLine);
    backing_unlock(lock_fd, at);
    return r;
}

HostLock::HostLock(cxk_pool *pool) : p(pool) {
    err = -lock_host(p, false);
    if (!err) crash_point(Crash::locked);
}

HostLock::~HostLock() {
    if (!err) unlock_host(p);
}

// Lamport's bakery over the host slots: the cross-host lock that keeps names unique. Every
// register is written by its own host only; dead hosts are skipped. Caller holds the
// host lock, so one process per host takes part.
//
// The registers are another host's words, so every wait on them has a bound: a host holds
// the bakery for one critical section (hold_max_ns at most), and a ticket drawn after ours is
// larger than ours. Registers that stay unchanged while they keep us waiting for longer than
// that bound belong to a stopped process or to a stray write: we give up (-ETIMEDOUT naming
// the host) rather than guess, since skipping a real holder would let two hosts in. Values no
// host writes (choosing > 1, number > kTicketMax) are proven stray: skipped at once. A host
// running this code clears its own stray registers at its next lock (its heartbeat takes it
// every lease_timeout / 4), well within the bound.
bool bakery_registers_legal(uint64_t choosing, uint64_t number) {
    return choosing <= 1 && number <= kTicketMax;
}

namespace {
thread_local const cxk_pool *t_wait_pool = nullptr;
thread_local int32_t t_wait_host = -1;

// Host h's registers, read as one line (each a single-writer u64).
void registers_of(const cxk_pool *p, uint32_t h, uint64_t *c, uint64_t *n) {
    HostSlot *s = slot(p, h);
    sync_in(p, &s->choosing, kLine);
    *c = ld(&s->choosing);
    *n = ld(&s->number);
}

// Live hosts other than us and h whose tickets go before ticket n of host h: h may be
// queued behind them, its registers unchanged while it waits. *front: the first of them
// (the one the queue waits for), else h.
uint32_t tickets_before(const cxk_pool *p, uint32_t h, uint64_t n, uint32_t *front) {
    uint32_t ahead = 0;
    uint64_t first = n;
    *front = h;
    for (uint32_t k = 0; k < p->geo.max_hosts; ++k) {
        if (k == p->host || k == h || !host_used(p, k)) continue;
        uint64_t c, m;
        registers_of(p, k, &c, &m);
        if (!bakery_registers_legal(c, m) || m == 0 || !(m < n || (m == n && k < h)) ||
            !host_alive(p, k))
            continue;
        ahead++;
        if (m < first || (m == first && k < *front)) first = m, *front = k;
    }
    return ahead;
}

// Wait while host h's registers say it goes first (waits(choosing, number)): 0 once they do
// not, or h is dead, or its registers are no host's; -ETIMEDOUT once they stayed unchanged
// for longer than a holder holds the bakery, *blame = the host to name. A ticket (queued)
// may wait one bound more for each live ticket before it, as a host queued behind them
// would; then the first of those is named.
template <class Waits>
int bakery_wait(cxk_pool *p, uint32_t h, bool queued, uint32_t *blame, Waits waits) {
    const int64_t bound = hold_max_ns(p);
    uint64_t last_c = 0, last_n = 0;
    int64_t since = 0;
    uint32_t extended = 0;
    for (int spin = 0;; ++spin) {
        uint64_t c, n;
        registers_of(p, h, &c, &n);
        if (!bakery_registers_legal(c, n) || !waits(c, n) || !host_alive(p, h)) return 0;
        if (spin == 0 || c != last_c || n != last_n) {  // moving: a holder at work
            last_c = c, last_n = n;
            since = mono_ns();
        } else if (spin % 64 == 0 && mono_ns() - since > bound) {
            *blame = h;
            if (!queued || extended >= tickets_before(p, h, n, blame)) return -ETIMEDOUT;
            extended++;
            since = mono_ns();
        }
        if (spin > 64) sched_yield();
    }
}

void bakery_clear(cxk_pool *p) {
    HostSlot *me = slot(p, p->host);
    st(&me->number, uint64_t(0));
    st(&me->choosing, uint64_t(0));
    sync_out(p, &me->choosing, kLine);
}
}  // namespace

int32_t wait_host(const cxk_pool *p) { return t_wait_pool == p ? t_wait_host : -1; }

int bakery_lock(cxk_pool *p) {
    HostSlot *me = slot(p, p->host);
    st(&me->choosing, uint64_t(1));
    sync_out(p, &me->choosing, kLine);
    uint64_t mx = 0;
    for (uint32_t h = 0; h < p->geo.max_hosts; ++h) {
        if (h == p->host || !host_used(p, h)) continue;
        uint64_t c, n;
        registers_of(p, h, &c, &n);
        if (bakery_registers_legal(c, n)) mx = std::max(mx, n);  // never past kTicketMax
    }
    const uint64_t mine = mx + 1;
    st(&me->number, mine);
    sync_out(p, &me->choosing, kLine);
    st(&me->choosing, uint64_t(0));
    sync_out(p, &me->choosing, kLine);  // full fence: our number is out before we read theirs
    for (uint32_t h = 0; h < p->geo.max_hosts; ++h) {
        if (h == p->host || !host_used(p, h)) continue;
        uint32_t blame = h;
        int r = bakery_wait(p, h, false, &blame, [](uint64_t c, uint64_t) { return c != 0; });
        if (!r)
            r = bakery_wait(p, h, true, &blame, [&](uint64_t, uint64_t n) {
                return n != 0 && (n < mine || (n == mine && h < p->host));
            });
        if (r) {
            bakery_clear(p);  // nothing of ours stays held: others go on without us
            t_wait_pool = p;
            t_wait_host = int32_t(blame);
            return r;
        }
    }
    return 0;
}

void bakery_unlock(cxk_pool *p) {
    HostSlot *me = slot(p, p->host);
    st(&me->number, uint64_t(0));
    sync_out(p, &me->choosing, kLine);
}

bool bakery_clear_stale(cxk_pool *p) {
    HostSlot *me = slot(p, p->host);
    if (ldr(&me->choosing) == 0 && ldr(&me->number) == 0) return false;
    bakery_clear(p);
    return true;
}

// ---- claiming a free slot across hosts: Fischer's delay in front of a splitter ----------
// Any newcomer writes slot h's claim lines (each alone in its line); every store is flushed
// and fenced before the next load, every load invalidated first, so each line acts as an
// atomic register.
//
// The splitter (x := nonce; if door: lose; door := now; win iff x is still our nonce) lets at
// most one claimer win whatever the timing, but with contention all may lose, and a slot lost
// by all keeps its door closed. Two claimers in lockstep — A writes x, B writes x, A closes
// the door and finds B's x, B finds the door closed — lost every free slot that way and both
// got EBUSY (about 1 round in 300 under --coherence-sim, where the flushes keep
// them in step; every time with tests/pool/test_pool_claims.py's step-by-step claimers).
//
// So a claim by name first runs Fischer's timed arbitration (settle): only a claimer that
// finds the door open writes x; it waits kClaimSettleNs and goes on only if x is still its
// own. A claimer writes x within microseconds of finding the door open, so one whose x
// survived the whole delay is the last of those contenders to write it: it alone reaches the
// door, and the splitter behind has one contender, who wins; the others try the next slot.
// Safety never rests on the delay: a claimer stalled longer than it between its door read and
// its x write can only make the splitter pick nobody (the slot shows as "claim interrupted"
// until `cxlkit pool release`), never two.
constexpr int64_t kClaimSettleNs = 5 * 1000000ll;

bool slot_splitter(cxk_pool *p, uint32_t h, uint64_t nonce, bool settle) {
    SlotClaim *c = slot_claim(p, h);
    if (settle) {
        sync_in(p, &c->door, kLine);
        if (ld(&c->door) != 0) return false;  // a claimer got past the delay: leave its x be
    }
    st(&c->x, nonce);
    sync_out(p, &c->x, kLine);  // flush + full fence: x is in the pool before door is read
    crash_point(Crash::slot_x);
    if (settle) {
        struct timespec d = {0, long(kClaimSettleNs)};
        while (nanosleep(&d, &d) == -1 && errno == EINTR) {
        }
        sync_in(p, &c->x, kLine);
        if (ld(&c->x) != nonce) return false;  // a later contender: it goes on, not us
    }
    sync_in(p, &c->door, kLine);
    if (ld(&c->door) != 0) return false;
    st(&c->door, uint64_t(now_ns()) | 1);
    sync_out(p, &c->door, kLine);  // the door is closed in the pool before x is read again
    sync_in(p, &c->x, kLine);
    const bool won = ld(&c->x) == nonce;
    if (won) crash_point(Crash::slot_claimed);
    return won;
}

void slot_unclaim(cxk_pool *p, uint32_t h) {
    SlotClaim *c = slot_claim(p, h);
    st(&c->x, uint64_t(0));
    sync_out(p, &c->x, kLine);
    st(&c->door, uint64_t(0));
    sync_out(p, &c->door, kLine);
}

bool slot_door_open(const cxk_pool *p, uint32_t h) {
    SlotClaim *c = slot_claim(p, h);
    sync_in(p, &c->door, kLine);
    return ld(&c->door) == 0;
}

namespace {
uint64_t claim_nonce(const cxk_pool *p) {
    uint64_t n = 0;
    if (sys_getrandom(&n, sizeof n) != long(sizeof n)) n = uint64_t(now_ns()) * 0x9e3779b97f4a7c15ull;
    return (n ^ (uint64_t(p->pid) << 32)) | 1;  // never 0 (a fresh line)
}

// An explicit id whose door another claimer closed: that claimer's tag decides (ours: a
// process of this host; another name: -EBUSY). Waits for the winner to write its tag.
int await_winner_tag(cxk_pool *p, HostSlot *s, const char *tag) {
    const int64_t until = now_ns() + 2000000000ll;
    for (;;) {
        sync_in(p, s, kLine);
        if (s->tag[0]) return std::strncmp(s->tag, tag, kTagMax) == 0 ? 0 : -EBUSY;
        if (ld(&s->boot) != kBootFresh && ld(&s->boot) != kBootBusy) return 0;  // attached, untagged
        if (now_ns() > until) return -EBUSY;  // a claim interrupted: `cxlkit pool release`
        sched_yield();
    }
}
}  // namespace

// ---- attaching this process as a process of host h -----------------------------------
// The slot to attach to: host_id, else the slot tagged `tag`, else a free slot (door open)
// in probe order from the tag's hash, not in `taken` (slots another name claimed while we
// looked), that we win with the splitter. attach() then writes the tag.
int pick_slot(cxk_pool *p, int32_t host_id, const char *tag, uint64_t taken) {
    const uint32_t n = p->geo.max_hosts;
    if (host_id >= 0) {
        if (uint32_t(host_id) >= n) return -EDOM;  // not a slot of this pool
        HostSlot *s = slot(p, uint32_t(host_id));
        sync_in(p, s, kLine);
        if (*tag && s->tag[0] && std::strncmp(s->tag, tag, kTagMax) != 0) return -EBUSY;
        return host_id;  // attach() closes its door under the slot's OFD lock
    }
    if (!*tag) return -EINVAL;
    for (uint32_t h = 0; h < n; ++h) {
        HostSlot *s = slot(p, h);
        sync_in(p, s, kLine);
        if (std::strncmp(s->tag, tag, kTagMax) == 0) return int(h);
    }
    const uint32_t start = uint32_t(name_hash(tag, std::strlen(tag)) % n);
    const uint64_t nonce = claim_nonce(p);
    for (uint32_t i = 0; i < n; ++i) {
        uint32_t h = (start + i) % n;
        if (!(taken >> h & 1) && slot_splitter(p, h, nonce, true))
            return int(h);
    }
    return -EBUSY;  // every slot belongs to another host, or was lost to one
}

// How long an opener waits for another process of its host that is taking the slot over
// (re-initialising the mutex and running recovery over the whole partition).

// Make this process one of host p->host's current boot, named `tag` ("" = no name).
//
// Everything here runs under an OFD lock on the slot's byte of backing 0: the kernel keeps
// one per host and drops it when its holder dies, so it serialises the processes of one host
// (and hosts simulated on one machine) without any atomic in the pool. Under it we re-read
// the slot: a tag of another name refuses it (kSlotTaken when we picked it by name, else
// -EBUSY); an empty tag is claimed by writing ours; a boot word that is not ours — a previous
// boot, kBootFresh, or kBootBusy left by a taker that died — means no process of this boot
// uses the slot: we take it over (re-create the mutex unless fresh, recover) and store our
// boot. Other hosts never write the slot. The lock is skipped when the slot is already ours.
int attach(cxk_pool *p, int lock_fd, const char *tag, bool by_name) {
    HostSlot *s = slot(p, p->host);
    sync_in(p, s, kLine);
    // acquire pairs with the taker's release of the boot word: the slot (tag included) is ready
    if (ld(&s->boot) == p->boot && (!*tag || std::strncmp(s->tag, tag, kTagMax) == 0)) {
        p->epoch = ld(&s->epoch);  // the release fence compares it (slot_ours)
        st(&s->opener_pid, uint64_t(p->pid));  // for `pool hosts`; the bakery line's pad
        beat(p);
        return 0;
    }
    const uint64_t at = p->geo.host_table_off + uint64_t(p->host) * kHostSlotBytes;
    if (int r = backing_lock(lock_fd, at, kTakeoverWaitNs)) return r;
    sync_in(p, s, kLine);
    if (*tag && s->tag[0] && std::strncmp(s->tag, tag, kTagMax) != 0) {
        backing_unlock(lock_fd, at);
        return by_name ? kSlotTaken : -EBUSY;
    }
    // an explicit id closes its slot's door, so named newcomers skip it; when another
    // claimer (a name, on any host) closed it first, that claimer's tag decides
    if (!by_name && slot_door_open(p, p->host) &&
        !slot_splitter(p, p->host, claim_nonce(p), false) &&
        *tag) {
        if (int r = await_winner_tag(p, s, tag)) {
            backing_unlock(lock_fd, at);
            return r;
        }
    }
    if (*tag && !s->tag[0]) {
        std::strncpy(s->tag, tag, kTagMax);  // the claim
        sync_out(p, s, kLine);
    }
    const uint64_t b = ld(&s->boot);
    if (b != p->boot) {
        st(&s->boot, kBootBusy);  // for fsck and readers: the slot is being re-initialised
        sync_out(p, s, kLine);
        // A previous boot (or a dead taker) left the mutex in an unknown state and nobody of
        // it is alive: re-create it, then rebuild. A fresh slot's mutex is pristine.
        if (b != kBootFresh) {
            if (int r = init_mutex(&s->mutex)) {
                st(&s->boot, b);
                sync_out(p, s, kLine);
                backing_unlock(lock_fd, at);
                return r;
            }
            if (int rr = recover(p, nullptr)) {
                st(&s->boot, b);  // nothing of ours is in the slot: leave it as we found it
                sync_out(p, s, kLine);
                backing_unlock(lock_fd, at);
                return rr;
            }
        }
        bakery_clear_stale(p);  // no process of this boot is in the bakery yet
        crash_point(Crash::takeover);
        s->epoch++;
        s->heartbeat_ns = now_ns();
        sync_out(p, s, kHostSlotBytes);
        st(&s->boot, p->boot);  // release: the slot is ready; pairs with the acquire above
        sync_out(p, s, kLine);
    }
    p->epoch = ld(&s->epoch);  // ours (after a takeover, the one we wrote)
    backing_unlock(lock_fd, at);
    st(&s->opener_pid, uint64_t(p->pid));
    beat(p);
    return 0;
}

void heart_loop(cxk_pool *p);
void *heart_main(void *arg) {
    heart_loop(static_cast<cxk_pool *>(arg));
    return nullptr;
}

// Start the heartbeat thread before attaching, so a thread that cannot start fails the open
// before it writes anything; it waits for heart_go (or heart_stop) before its first beat.
// heart_start returns only once the thread has started and parked on heart_cv (heart_ready):
// a caller that forks right after an open then forks with the thread parked, not in its
// start-up. Under AddressSanitizer, whose allocator does not take its locks around fork, a
// fork during that start-up handed the child an allocator lock held by a thread it does not
// have (ctest wake's forked child hung about 1 run in 10 starting its own heartbeat thread).
// A fork from another thread during a start-up or a beat keeps that window; glibc's malloc
// is fork-safe, so only sanitizer builds meet it. (Taking every heartbeat's heart_mu around
// fork would close it, but a beat may wait for the coherence simulator's lock while holding
// heart_mu, and the simulator's fork handler holds that lock: a fork could deadlock.)
int heart_start(cxk_pool *p) {
    if (int e = fault_check(Sys::pthread_create)) return e;
    if (int e = pthread_create(&p->heart, nullptr, heart_main, p)) return -e;
    p->heart_started = true;
    std::unique_lock<std::mutex> lk(p->heart_mu);
    p->heart_cv.wait(lk, [p] { return p->heart_ready; });
    return 0;
}

void heart_signal(cxk_pool *p, bool stop) {
    {
        std::lock_guard<std::mutex> lk(p->heart_mu);
        (stop ? p->heart_stop : p->heart_go) = true;
    }
    p->heart_cv.notify_all();
}

void heart_end(cxk_pool *p) {
    if (!p->heart_started) return;
    heart_signal(p, true);
    pthread_join(p->heart, nullptr);
    p->heart_started = false;
}

void heart_loop(cxk_pool *p) {
    const auto period = std::chrono::nanoseconds(p->geo.lease_timeout_ns / 4);
    std::unique_lock<std::mutex> lk(p->heart_mu);
    p->heart_ready = true;  // started and parked: heart_start may return
    p->heart_cv.notify_all();
    p->heart_cv.wait(lk, [p] { return p->heart_go || p->heart_stop; });
    while (!p->heart_stop) {
        if (!slot_ours(p)) break;  // released: the slot is no longer ours to beat in
        beat(p);
        // A process of this host that died holding the host lock is recovered here even
        // when nobody else of this host calls into the pool.
        HostSlot *s = slot(p, p->host);
        if (lock_host(p, true) == 0) {
            clean_leases(p);
            if (s->ndead) sweep_pending(p);  // objects other hosts' readers held
            unlock_host(p);
        }
        p->heart_cv.wait_for(lk, period, [p] { return p->heart_stop; });
    }
}

}  // namespace cxk::pool

extern "C" int cxk_pool_wait_host(const cxk_pool *p) {
    return p ? cxk::pool::wait_host(p) : -1;
}
