// pool.cpp — the pool: formatting and validating the superblock, opening (backings, host
// slot, boot takeover, heartbeat), the robust host lock and its recovery, the cross-host
// bakery lock, leases, the object API (create / publish / open / close / destroy / stat /
// list / read / verify) and fsck. Layout: pool_format.h; protocol: docs/pool-format.md.
#include "pool/pool.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "prim/policy.h"
#include "sys/sys.h"

namespace cxk::pool {

// ---- small helpers ------------------------------------------------------------------
void sync_out(const cxk_pool *p, const void *a, size_t n) {
    if (p->nc) cxk_flush(a, n);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);  // mfence: also orders our later loads
}
void sync_in(const cxk_pool *p, const void *a, size_t n) {
    if (p->nc) cxk_invalidate(a, n);
}

namespace {
uint32_t crc_table_entry(uint32_t c) {
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1u)));
    return c;
}
__attribute__((target("sse4.2"))) uint32_t crc32c_hw(const uint8_t *d, size_t n, uint32_t c) {
    uint64_t c64 = c;
    for (; n >= 8; n -= 8, d += 8) {
        uint64_t v;
        std::memcpy(&v, d, 8);
        c64 = __builtin_ia32_crc32di(c64, v);
    }
    c = uint32_t(c64);
    for (; n; --n, ++d) c = __builtin_ia32_crc32qi(c, *d);
    return c;
}
}  // namespace

uint32_t crc32c(const void *data, size_t n, uint32_t crc) {
    static const bool hw = __builtin_cpu_supports("sse4.2");
    const uint8_t *d = static_cast<const uint8_t *>(data);
    crc = ~crc;
    if (hw) {
        crc = crc32c_hw(d, n, crc);
    } else {
        static uint32_t table[256];
        static bool init = [] {
            for (uint32_t i = 0; i < 256; ++i) table[i] = crc_table_entry(i);
            return true;
        }();
        (void)init;
        for (size_t i = 0; i < n; ++i) crc = table[(crc ^ d[i]) & 0xff] ^ (crc >> 8);
    }
    return ~crc;
}

int64_t now_ns() {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

bool pid_alive(uint32_t pid) {
    if (pid == 0) return false;
    return kill(pid_t(pid), 0) == 0 || errno == EPERM;
}

// ---- crash points --------------------------------------------------------------------
namespace {
const char *const kCrashNames[] = {"create.alloc", "create.entry", "publish.header",
                                   "destroy.header", "destroy.free", "locked", "takeover"};
static_assert(sizeof(kCrashNames) / sizeof(kCrashNames[0]) == size_t(Crash::count_), "names");
std::atomic<int> g_crash_left[size_t(Crash::count_)];
}  // namespace

void crash_point(Crash c) {
    std::atomic<int> &left = g_crash_left[size_t(c)];
    if (left.load(std::memory_order_relaxed) == 0) return;
    if (left.fetch_sub(1) == 1) _exit(137);
}

namespace {

// ---- host state --------------------------------------------------------------------
uint64_t boot_hash() {
    char buf[64] = {};
    FILE *f = std::fopen("/proc/sys/kernel/random/boot_id", "re");
    size_t n = 0;
    if (f) {
        n = std::fread(buf, 1, sizeof buf - 1, f);
        std::fclose(f);
    }
    return name_hash(buf, n) | (1ull << 63);  // never kBootFresh or kBootBusy
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

// ---- leases ---------------------------------------------------------------------------
// Does any live reader lease (block, gen)? A half-written (claiming) entry of a live
// process might be for it: count it.
bool leased(const cxk_pool *p, uint64_t block, uint64_t gen) {
    for (uint32_t h = 0; h < p->geo.max_hosts; ++h) {
        if (!host_used(p, h) || !host_alive(p, h)) continue;
        HostSlot *s = slot(p, h);
        const uint64_t hwm = std::min<uint64_t>(ld(&s->lease_hwm), p->geo.lease_slots);
        Lease *t = leases(p, h);
        if (h != p->host) sync_in(p, t, hwm * sizeof(Lease));
        for (uint64_t i = 0; i < hwm; ++i) {
            const uint32_t pid = ld(&t[i].pid);
            if (pid == 0) continue;
            const bool claiming = pid & kClaiming;
            if (!claiming && (ldr(&t[i].block) != block || ldr(&t[i].gen) != gen)) continue;
            if (h != p->host || pid_alive(pid & ~kClaiming)) return true;
        }
    }
    return false;
}

// Clear this host's lease entries whose process is gone; returns how many.
uint64_t clean_leases(cxk_pool *p) {
    Lease *t = leases(p, p->host);
    const uint64_t hwm = std::min<uint64_t>(ld(&slot(p, p->host)->lease_hwm), p->geo.lease_slots);
    uint64_t n = 0;
    for (uint64_t i = 0; i < hwm; ++i) {
        uint32_t pid = ld(&t[i].pid);
        if (pid == 0 || pid_alive(pid & ~kClaiming)) continue;
        // CAS: a live process may have claimed the entry since we read it
        if (__atomic_compare_exchange_n(&t[i].pid, &pid, 0u, false, __ATOMIC_ACQ_REL,
                                        __ATOMIC_RELAXED)) {
            sync_out(p, &t[i], sizeof(Lease));
            ++n;
        }
    }
    return n;
}

int64_t lease_claim(cxk_pool *p) {
    Lease *t = leases(p, p->host);
    HostSlot *s = slot(p, p->host);
    const uint32_t want = uint32_t(getpid()) | kClaiming;
    for (uint64_t i = 0; i < p->geo.lease_slots; ++i) {
        uint32_t z = 0;
        if (ldr(&t[i].pid) != 0) continue;
        // acq_rel CAS among this host's processes: the entry is ours alone from here
        if (!__atomic_compare_exchange_n(&t[i].pid, &z, want, false, __ATOMIC_ACQ_REL,
                                         __ATOMIC_RELAXED))
            continue;
        uint64_t hwm = ld(&s->lease_hwm);
        while (hwm < i + 1 && !__atomic_compare_exchange_n(&s->lease_hwm, &hwm, i + 1, false,
                                                           __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        }
        sync_out(p, s, kLine);
        return int64_t(i);
    }
    return -EMFILE;
}

// Fill a claimed entry and make it visible; the full fence in sync_out orders it before
// the reader's re-validation of the object (pairs with the destroyer's fence between
// marking the header DEAD and scanning leases).
void lease_set(cxk_pool *p, uint64_t i, uint64_t block, uint64_t gen, uint32_t obj_host) {
    Lease *e = &leases(p, p->host)[i];
    str(&e->block, block);
    str(&e->gen, gen);
    str(&e->obj_host, obj_host);
    st(&e->pid, uint32_t(getpid()));
    sync_out(p, e, sizeof *e);
}

void lease_free(cxk_pool *p, uint64_t i) {
    Lease *e = &leases(p, p->host)[i];
    // a child of fork inherits the handle's list but not the leases: they are the parent's
    if ((ldr(&e->pid) & ~kClaiming) != uint32_t(getpid())) return;
    str(&e->block, uint64_t(0));
    st(&e->pid, 0u);
    sync_out(p, e, sizeof *e);
}

// ---- the host lock -------------------------------------------------------------------
int recover(cxk_pool *p, cxk_fsck_report *r);

// The result of locking host slot s's mutex: on EOWNERDEAD the holder died, and as the
// partition chain is intact everything derived from it (lists, counters, name entries,
// pending/creating lists) is rebuilt before the mutex is marked consistent; we hold it then.
int lock_result(cxk_pool *p, HostSlot *s, int e) {
    if (e != EOWNERDEAD) return e;
    recover(p, nullptr);
    pthread_mutex_consistent(&s->mutex);
    return 0;
}

struct HostLock {
    cxk_pool *p;
    int err = 0;
    explicit HostLock(cxk_pool *pool) : p(pool) {
        HostSlot *s = slot(p, p->host);
        err = -lock_result(p, s, pthread_mutex_lock(&s->mutex));
        if (!err) crash_point(Crash::locked);
    }
    ~HostLock() {
        if (err) return;
        HostSlot *s = slot(p, p->host);
        sync_out(p, &s->used_bytes, kLine);  // counters, for other hosts' stat
        pthread_mutex_unlock(&s->mutex);
    }
};

// Lamport's bakery over the host slots: the cross-host lock that keeps names unique. Every
// register is written by its own host only; dead hosts are skipped. Caller holds the
// host lock, so one process per host takes part.
void bakery_lock(cxk_pool *p) {
    HostSlot *me = slot(p, p->host);
    st(&me->choosing, uint64_t(1));
    sync_out(p, &me->choosing, kLine);
    uint64_t mx = 0;
    for (uint32_t h = 0; h < p->geo.max_hosts; ++h) {
        if (h == p->host || !host_used(p, h)) continue;
        HostSlot *s = slot(p, h);
        sync_in(p, &s->choosing, kLine);
        mx = std::max(mx, ld(&s->number));
    }
    const uint64_t mine = mx + 1;
    st(&me->number, mine);
    sync_out(p, &me->choosing, kLine);
    st(&me->choosing, uint64_t(0));
    sync_out(p, &me->choosing, kLine);  // full fence: our number is out before we read theirs
    for (uint32_t h = 0; h < p->geo.max_hosts; ++h) {
        if (h == p->host || !host_used(p, h)) continue;
        HostSlot *s = slot(p, h);
        for (int spin = 0;; ++spin) {
            sync_in(p, &s->choosing, kLine);
            if (!ld(&s->choosing) || !host_alive(p, h)) break;
            if (spin > 64) sched_yield();
        }
        for (int spin = 0;; ++spin) {
            sync_in(p, &s->choosing, kLine);
            const uint64_t n = ld(&s->number);
            if (n == 0 || n > mine || (n == mine && h > p->host) || !host_alive(p, h)) break;
            if (spin > 64) sched_yield();
        }
    }
}

void bakery_unlock(cxk_pool *p) {
    HostSlot *me = slot(p, p->host);
    st(&me->number, uint64_t(0));
    sync_out(p, &me->choosing, kLine);
}

// ---- lookups ---------------------------------------------------------------------------
struct Found {
    uint32_t host;
    uint64_t block, gen, entry;
    uint32_t state;  // entry state
};

bool header_matches(const cxk_pool *p, uint32_t h, const EntryView &v, const char *name,
                    size_t len) {
    const uint64_t lo = part_begin(p, h), hi = part_end(p, h);
    if (v.block < lo || v.block + kMinBlock > hi || v.block % kLine) return false;
    ObjHeader *o = hdr(p, v.block);
    if (h != p->host) sync_in(p, o, kObjHeaderBytes);
    return o->magic == kObjMagic && o->name_len == len && ld(&o->gen) == v.gen &&
           std::memcmp(o->name, name, len) == 0;
}

// The name in host h's table (CREATING or LIVE).
bool find_in(const cxk_pool *p, uint32_t h, const char *name, size_t len, uint64_t hash,
             Found *f) {
    bool hit = false;
    names_probe(p, h, hash, [&](const EntryView &v) {
        if (!header_matches(p, h, v, name, len)) return false;
        *f = {h, v.block, v.gen, v.index, v.state};
        hit = true;
        return true;
    });
    return hit;
}

// First host (by slot) holding the name published, else one holding it reserved.
bool find_any(const cxk_pool *p, const char *name, size_t len, uint64_t hash, Found *f) {
    bool reserved = false;
    Found r{};
    for (uint32_t h = 0; h < p->geo.max_hosts; ++h) {
        if (!host_used(p, h)) continue;
        Found x;
        if (!find_in(p, h, name, len, hash, &x)) continue;
        if (x.state == kEntLive) {
            *f = x;
            return true;
        }
        if (!reserved) r = x, reserved = true;
    }
    if (reserved) *f = r;
    return reserved;
}

int check_name(const char *name, size_t *len) {
    if (!name) return -EINVAL;
    *len = strnlen(name, kNameMax + 1);
    if (*len == 0) return -EINVAL;
    if (*len > kNameMax) return -ENAMETOOLONG;
    return 0;
}

void fill_stat(const cxk_pool *p, uint32_t h, uint64_t block, struct cxk_obj_stat *st_) {
    ObjHeader *o = hdr(p, block);
    std::memset(st_, 0, sizeof *st_);
    std::memcpy(st_->name, o->name, std::min<size_t>(o->name_len, kNameMax));
    st_->off = block + kObjHeaderBytes;
    st_->nbytes = o->nbytes;
    st_->generation = ld(&o->gen);
    st_->checksum = o->checksum;
    st_->created_ns = o->created_ns;
    st_->host = h;
    st_->state = ld(&o->state);
    (void)p;
}

// ---- mutations of this host's tables (caller holds the host lock) ---------------------
void list_del(uint64_t *arr, uint32_t *n, uint64_t v) {
    for (uint32_t i = 0; i < *n; ++i)
        if (arr[i] == v) {
            arr[i] = arr[--*n];
            return;
        }
}

// The own-table entry that points at block (by the name in its header).
bool own_entry_of(const cxk_pool *p, uint64_t block, uint64_t *entry) {
    ObjHeader *o = hdr(p, block);
    bool hit = false;
    names_probe(p, p->host, name_hash(o->name, o->name_len), [&](const EntryView &v) {
        if (v.block != block) return false;
        *entry = v.index;
        hit = true;
        return true;
    });
    return hit;
}

// Remove a CREATING object whose creator died: entry, creating list, block.
void reclaim_creating(cxk_pool *p, uint64_t block) {
    HostSlot *s = slot(p, p->host);
    ObjHeader *o = hdr(p, block);
    uint64_t e;
    if (own_entry_of(p, block, &e)) {
        NameEntry *ne = &names(p, p->host)[e];
        entry_write(p, ne, ne->hash, 0, 0, kTomb);
    }
    st(&o->state, uint32_t(kDead));
    list_del(s->creating, &s->ncreating_list, block);
    s->ncreating--;
    free_block(p, block);
}

void sweep_creating(cxk_pool *p) {
    HostSlot *s = slot(p, p->host);
    for (uint32_t i = 0; i < s->ncreating_list;) {
        uint64_t b = s->creating[i];
        if (!pid_alive(hdr(p, b)->creator_pid)) reclaim_creating(p, b);  // moves the last here
        else ++i;
    }
}

// DEAD blocks that found the pending list full are known to the chain only: bring them into
// the list once it has room, else they would stay DEAD until a repair.
void refill_pending(cxk_pool *p) {
    HostSlot *s = slot(p, p->host);
    std::vector<WalkBlock> blocks;
    if (!walk(p, p->host, &blocks)) return;  // recovery's business
    std::unordered_set<uint64_t> listed(s->pending, s->pending + s->npending);
    for (const auto &b : blocks)
        if (b.state == kDead && s->npending < kPendingMax && !listed.count(b.off))
            s->pending[s->npending++] = b.off;
}

// Free the DEAD blocks nobody leases any more. ndead counts every DEAD block, listed or not.
void sweep_pending(cxk_pool *p) {
    HostSlot *s = slot(p, p->host);
    for (;;) {
        if (s->ndead > s->npending && s->npending < kPendingMax) refill_pending(p);
        const uint64_t before = s->ndead;
        for (uint32_t i = 0; i < s->npending;) {
            uint64_t b = s->pending[i];
            if (!leased(p, b, hdr(p, b)->gen)) {
                s->pending[i] = s->pending[--s->npending];
                s->ndead--;
                free_block(p, b);
            } else {
                ++i;
            }
        }
        // some were freed and more wait outside the list: another round
        if (s->ndead == before || s->ndead <= s->npending) return;
    }
}

// Rebuild this host's derived state from its block chain (the truth): free lists and
// counters, name entries, pending and creating lists; reclaim objects of dead creators and
// dead objects nobody leases; reset our bakery registers; clear dead processes' leases.
int recover(cxk_pool *p, cxk_fsck_report *r) {
    HostSlot *s = slot(p, p->host);
    cxk_fsck_report local{};
    if (!r) r = &local;
    st(&s->choosing, uint64_t(0));
    st(&s->number, uint64_t(0));
    sync_out(p, &s->choosing, kLine);
    r->leases_expired += clean_leases(p);

    std::vector<WalkBlock> blocks;
    if (!walk(p, p->host, &blocks)) {
        r->errors++;
        return -EBADMSG;
    }
    // Blocks to reclaim become FREE first; then one pass coalesces runs of free blocks
    // (each merge is one store of block_bytes, so a crash here is recovered the same way).
    for (auto &b : blocks) {
        ObjHeader *o = hdr(p, b.off);
        if (b.state == kCreating && !pid_alive(o->creator_pid)) {
            r->reclaimed_objects++;
            r->reclaimed_bytes += o->block_bytes;
            st(&o->state, uint32_t(kFree));
            b.state = kFree;
        } else if (b.state == kDead && !leased(p, b.off, b.gen)) {
            r->reclaimed_objects++;
            r->reclaimed_bytes += o->block_bytes;
            st(&o->state, uint32_t(kFree));
            b.state = kFree;
        }
    }
    std::memset(s->free_head, 0, sizeof s->free_head);
    s->used_bytes = s->free_bytes = s->nlive = s->ncreating = s->ndead = 0;
    s->npending = s->ncreating_list = 0;
    uint64_t max_gen = s->next_gen;
    std::unordered_map<uint64_t, const WalkBlock *> held;  // CREATING/LIVE by offset
    std::vector<WalkBlock> kept;
    uint64_t prev_bytes = 0, run = 0;
    auto close_run = [&] {
        if (!run) return;
        ObjHeader *o = hdr(p, run);
        uint32_t c = 63u - uint32_t(__builtin_clzll(o->block_bytes));
        o->link.prev = 0;
        o->link.next = s->free_head[c];
        if (s->free_head[c]) hdr(p, s->free_head[c])->link.prev = run;
        s->free_head[c] = run;
        s->free_bytes += o->block_bytes;
        prev_bytes = o->block_bytes;
        run = 0;
    };
    for (auto &b : blocks) {
        ObjHeader *o = hdr(p, b.off);
        if (b.state == kFree) {
            if (run) {
                st(&hdr(p, run)->block_bytes, hdr(p, run)->block_bytes + o->block_bytes);
            } else {
                run = b.off;
                o->prev_bytes = prev_bytes;
            }
            continue;
        }
        close_run();
        o->prev_bytes = prev_bytes;
        prev_bytes = o->block_bytes;
        s->used_bytes += o->block_bytes;
        max_gen = std::max(max_gen, b.gen);
        kept.push_back(b);
        if (b.state == kLive) s->nlive++;
        else if (b.state == kCreating) {
            s->ncreating++;
            if (s->ncreating_list < kCreatingMax) s->creating[s->ncreating_list++] = b.off;
        } else if (b.state == kDead) {
            s->ndead++;
            if (s->npending < kPendingMax) s->pending[s->npending++] = b.off;
        }
    }
    close_run();
    s->next_gen = max_gen;
    for (auto &b : kept)
        if (b.state == kLive || b.state == kCreating) held[b.off] = &b;

    // Name entries: keep those that match a held block, drop the rest, re-enter held
    // blocks that lost theirs.
    NameEntry *t = names(p, p->host);
    std::unordered_set<uint64_t> entered;
    for (uint64_t i = 0; i < p->geo.name_slots; ++i) {
        NameEntry *e = &t[i];
        const uint32_t state = ldr(&e->state);
        const bool torn = ldr(&e->seq) & 1;
        if (!torn && (state == kEmpty || state == kTomb)) continue;
        auto it = held.find(ldr(&e->block));
        const bool ok = !torn && it != held.end() && it->second->gen == ldr(&e->gen) &&
                        !entered.count(it->first) &&
                        (state == kEntLive) == (it->second->state == kLive);
        if (ok) {
            entered.insert(it->first);
            continue;
        }
        entry_write(p, e, ldr(&e->hash), 0, 0, kTomb);
        r->repaired_entries++;
    }
    for (auto &kv : held) {
        if (entered.count(kv.first)) continue;
        ObjHeader *o = hdr(p, kv.first);
        const uint64_t hash = name_hash(o->name, o->name_len);
        int64_t slot_i = names_slot(p, hash);
        if (slot_i < 0) {
            r->errors++;
            continue;
        }
        entry_write(p, &t[slot_i], hash, kv.first, kv.second->gen,
                    kv.second->state == kLive ? kEntLive : kEntCreating);
        r->repaired_entries++;
    }
    sync_out(p, s, kHostSlotBytes);
    return 0;
}

// ---- format / validate ------------------------------------------------------------------
uint64_t round_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

int geometry(uint64_t total, const cxk_pool_opts &o, uint32_t nbackings, Superblock *sb) {
    std::memset(sb, 0, sizeof *sb);
    const uint32_t hosts = o.max_hosts ? o.max_hosts : 4;
    if (hosts > kMaxHosts) return -EINVAL;
    const uint64_t lease_slots = o.lease_slots ? o.lease_slots : 1024;
    const uint64_t meta0 = kSbBytes + uint64_t(hosts) * kHostSlotBytes;
    if (total < meta0 + hosts * kMinPartition) return -ERANGE;
    uint64_t max_objects = o.max_objects;
    if (!max_objects) max_objects = std::max<uint64_t>(256, (total - meta0) / hosts / 16384);
    if (max_objects > (1ull << 30)) return -EINVAL;
    names_geometry(max_objects, sb);
    sb->magic = kMagic;
    sb->version = kVersion;
    sb->sb_bytes = kSbBytes;
    sb->total_bytes = total;
    sb->max_hosts = hosts;
    sb->host_slot_bytes = kHostSlotBytes;
    sb->lease_slots = lease_slots;
    sb->host_table_off = kSbBytes;
    sb->names_off = meta0;
    sb->names_bytes = round_up(sb->name_slots * sizeof(NameEntry), 4096);
    sb->leases_off = sb->names_off + hosts * sb->names_bytes;
    sb->leases_bytes = round_up(lease_slots * sizeof(Lease), 4096);
    sb->data_off = round_up(sb->leases_off + hosts * sb->leases_bytes, 65536);
    if (sb->data_off >= total) return -ERANGE;
    sb->partition_bytes = (total - sb->data_off) / hosts / 65536 * 65536;
    if (sb->partition_bytes < kMinPartition) return -ERANGE;
    sb->nbackings = nbackings;
    sb->stripe_bytes = nbackings > 1 ? CXK_POOL_STRIPE_BYTES : 0;
    sb->lease_timeout_ns = uint64_t(o.lease_timeout_ms ? o.lease_timeout_ms : 10000) * 1000000;
    sb->created_ns = now_ns();
    if (getrandom(sb->uuid, sizeof sb->uuid, 0) != sizeof sb->uuid) {
        uint64_t a = uint64_t(now_ns()) ^ (uint64_t(getpid()) << 32), b = boot_hash();
        std::memcpy(sb->uuid, &a, 8);
        std::memcpy(sb->uuid + 8, &b, 8);
    }
    sb->checksum = (1ull << 32) | crc32c(sb, offsetof(Superblock, checksum));
    return 0;
}

// Write the layout; the magic is stored last, after everything else is flushed, so a
// pool whose formatting was interrupted reads as blank.
int format(cxk_pool *p, const Superblock &sb, bool dirty) {
    p->geo = sb;
    Superblock *dst = reinterpret_cast<Superblock *>(p->base);
    if (dirty) std::memset(p->base, 0, sb.data_off);  // a device may hold old bytes
    for (uint32_t h = 0; h < sb.max_hosts; ++h) {
        HostSlot *s = slot(p, h);
        if (int r = init_mutex(&s->mutex)) return r;
        s->boot = kBootFresh;
        format_partition(p, h);
    }
    Superblock tmp = sb;
    tmp.magic = 0;
    std::memcpy(dst, &tmp, sizeof tmp);
    cxk_flush(p->base, sb.data_off);  // always: the medium may be shared before anyone opens
    cxk_sfence();
    st(&dst->magic, kMagic);
    cxk_flush(&dst->magic, 8);
    cxk_sfence();
    return 0;
}

bool all_zero(const uint8_t *b, size_t n) {
    for (size_t i = 0; i < n; ++i)
        if (b[i]) return false;
    return true;
}

// Read-only checks of a mapped superblock against the mapping.
int validate(const uint8_t *base, uint64_t mapped, uint32_t nbackings, Superblock *out) {
    Superblock sb;
    std::memcpy(&sb, base, sizeof sb);
    if (sb.magic != kMagic) return -EMEDIUMTYPE;
    if (sb.version != kVersion) return -EPROTONOSUPPORT;
    if (sb.checksum != ((1ull << 32) | crc32c(&sb, offsetof(Superblock, checksum))))
        return -EBADMSG;
    const bool sane = sb.sb_bytes == kSbBytes && sb.host_slot_bytes == kHostSlotBytes &&
                      sb.max_hosts >= 1 && sb.max_hosts <= kMaxHosts &&
                      sb.levels == kLevels && sb.bucket_slots == kBucketSlots &&
                      sb.total_bytes <= mapped && sb.host_table_off == kSbBytes &&
                      sb.names_off >= kSbBytes + sb.max_hosts * kHostSlotBytes &&
                      sb.names_bytes >= sb.name_slots * sizeof(NameEntry) &&
                      sb.leases_off >= sb.names_off + sb.max_hosts * sb.names_bytes &&
                      sb.leases_bytes >= sb.lease_slots * sizeof(Lease) &&
                      sb.data_off >= sb.leases_off + sb.max_hosts * sb.leases_bytes &&
                      sb.partition_bytes >= kMinPartition &&
                      sb.data_off + sb.max_hosts * sb.partition_bytes <= sb.total_bytes &&
                      sb.data_off % kLine == 0 && sb.partition_bytes % kLine == 0 &&
                      sb.lease_timeout_ns > 0;
    if (!sane) return -EBADMSG;
    // the name table: every level has buckets (lookups divide by them) and the entries they
    // hold are the table's, which holds max_objects names
    uint64_t buckets = 0;
    for (uint32_t l = 0; l < kLevels; ++l) {
        if (sb.level_buckets[l] == 0) return -EBADMSG;
        buckets += sb.level_buckets[l];
    }
    if (sb.name_slots != buckets * kBucketSlots || sb.max_objects == 0 ||
        sb.max_objects > sb.name_slots)
        return -EBADMSG;
    if (sb.total_bytes < mapped && sb.nbackings != nbackings) return -EBADMSG;
    if (sb.nbackings != nbackings) return -EINVAL;  // opened with the wrong backing list
    *out = sb;
    return 0;
}

// ---- attaching this process as a process of host h -----------------------------------
// The slot to attach to: host_id, else the slot tagged `tag`, else the first free one (no
// tag, never used) in probe order from the tag's hash that is not in `taken` (slots that
// another name claimed while we looked). attach() makes the claim.
int pick_slot(cxk_pool *p, int32_t host_id, const char *tag, uint64_t taken) {
    const uint32_t n = p->geo.max_hosts;
    if (host_id >= 0) {
        if (uint32_t(host_id) >= n) return -EDOM;  // not a slot of this pool
        HostSlot *s = slot(p, uint32_t(host_id));
        sync_in(p, s, kLine);
        if (*tag && s->tag[0] && std::strncmp(s->tag, tag, kTagMax) != 0) return -EBUSY;
        return host_id;
    }
    if (!*tag) return -EINVAL;
    for (uint32_t h = 0; h < n; ++h) {
        HostSlot *s = slot(p, h);
        sync_in(p, s, kLine);
        if (std::strncmp(s->tag, tag, kTagMax) == 0) return int(h);
    }
    const uint32_t start = uint32_t(name_hash(tag, std::strlen(tag)) % n);
    for (uint32_t i = 0; i < n; ++i) {
        uint32_t h = (start + i) % n;
        if (!(taken >> h & 1) && !slot(p, h)->tag[0] && ld(&slot(p, h)->boot) == kBootFresh)
            return int(h);
    }
    return -EBUSY;  // every slot belongs to another host
}

// How long an opener waits for another process of its host that is taking the slot over
// (re-initialising the mutex and running recovery over the whole partition).
constexpr int64_t kTakeoverWaitNs = 30 * 1000000000ll;
// attach(): the slot picked by name was claimed by another name meanwhile: pick again.
constexpr int kSlotTaken = 1;

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
            recover(p, nullptr);
        }
        crash_point(Crash::takeover);
        s->epoch++;
        s->heartbeat_ns = now_ns();
        sync_out(p, s, kHostSlotBytes);
        st(&s->boot, p->boot);  // release: the slot is ready; pairs with the acquire above
        sync_out(p, s, kLine);
    }
    backing_unlock(lock_fd, at);
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
int heart_start(cxk_pool *p) {
    if (int e = fault_check(Sys::pthread_create)) return e;
    if (int e = pthread_create(&p->heart, nullptr, heart_main, p)) return -e;
    p->heart_started = true;
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
    p->heart_cv.wait(lk, [p] { return p->heart_go || p->heart_stop; });
    while (!p->heart_stop) {
        beat(p);
        // A process of this host that died holding the host lock is recovered here even
        // when nobody else of this host calls into the pool.
        HostSlot *s = slot(p, p->host);
        if (lock_result(p, s, pthread_mutex_trylock(&s->mutex)) == 0) {
            clean_leases(p);
            if (s->ndead) sweep_pending(p);  // objects other hosts' readers held
            sync_out(p, &s->used_bytes, kLine);
            pthread_mutex_unlock(&s->mutex);
        }
        p->heart_cv.wait_for(lk, period, [p] { return p->heart_stop; });
    }
}

int open_impl(const char *const *paths, uint32_t npaths, const cxk_pool_opts *opts,
              cxk_pool **out) {
    if (!paths || !out || npaths == 0 || npaths > CXK_POOL_MAX_BACKINGS) return -EINVAL;
    cxk_pool_opts o;
    if (opts) o = *opts;
    else cxk_pool_opts_init(&o);
    const char *tag = o.host_tag ? o.host_tag : "";
    if (std::strlen(tag) > kTagMax) return -ENAMETOOLONG;
    if (o.coherence != CXK_COHERENCE_HOST && o.coherence != CXK_COHERENCE_NONE) return -EINVAL;
    if (o.max_hosts > kMaxHosts || o.host_id < -1 || o.numa_node > CXK_MAX_NODE_ID) return -EINVAL;
    if ((o.flags & ~(CXK_POOL_CREATE | CXK_POOL_EXCL | CXK_POOL_FORCE)) != 0) return -EINVAL;
    for (uint32_t i = 0; i < npaths; ++i)
        if (!paths[i] || !*paths[i]) return -EINVAL;
    const bool create = o.flags & CXK_POOL_CREATE;
    const uint32_t mode = o.mode ? o.mode : 0600;
    if (create && o.size && npaths > 1 && o.size % (uint64_t(CXK_POOL_STRIPE_BYTES) * npaths))
        return -EINVAL;

    std::unique_ptr<cxk_pool> p(new (std::nothrow) cxk_pool);
    if (!p) return -ENOMEM;
    p->nc = o.coherence == CXK_COHERENCE_NONE;
    p->pid = getpid();
    p->boot = boot_hash();

    for (int attempt = 0; attempt < 2; ++attempt) {
        std::vector<Backing> bs(npaths);
        bool made = false, existing = false, devdax = false, memfd = false;
        uint64_t per = 0, align = 0;
        int r = 0;
        const bool try_create = create && attempt == 0;
        for (uint32_t i = 0; i < npaths && r == 0; ++i) {
            bs[i].path = paths[i];
            if (try_create && o.size == 0 && std::strncmp(paths[i], "/dev/dax", 8) != 0) {
                // a file pool is created with a size; without one, only open
                r = backing_open(&bs[i], false, false, 0, mode);
                if (r == -ENOENT) r = -EINVAL;
            } else {
                r = backing_open(&bs[i], try_create, o.flags & CXK_POOL_EXCL, o.size / npaths,
                                 mode);
            }
            if (r) break;
            (bs[i].created ? made : existing) = true;
            devdax |= bs[i].devdax;
            memfd |= bs[i].memfd;
            if (i == 0) per = bs[i].size;
            else if (bs[i].size != per) r = -EINVAL;  // stripes must be equal
            align = std::max(align, bs[i].align);
        }
        if (!r && made && existing) r = -EEXIST;  // part of a striped pool is already there
        const uint64_t total = per * npaths;
        if (!r && total < kSbBytes) r = made ? -ERANGE : -EMEDIUMTYPE;
        if (!r && devdax && align && total % align) r = -EINVAL;  // misaligned device
        if (r) {
            backings_discard(bs);
            return r;
        }
        uint8_t *base = nullptr;
        if ((r = backings_map(bs, total, align, &base)) != 0) {
            backings_discard(bs);
            return r;
        }
        p->base = base;
        p->size = total;
        p->align = align ? align : cxk_page_size();
        std::snprintf(p->kind, sizeof p->kind, "%s",
                      npaths > 1 ? "striped" : devdax ? "devdax" : memfd ? "memfd" : "file");
        auto fail = [&](int err) {
            cxk_unmap(p->base, p->size);
            p->base = nullptr;
            backings_discard(bs);
            return err;
        };
        if (o.numa_node >= 0) {
            if (devdax) return fail(-EINVAL);  // device memory sits where the device is
            // before the first touch (format); existing pages move
            if ((r = bind_range(p->base, total, o.numa_node, CXK_APPLY_MIGRATE)) != 0)
                return fail(r);
        }
        bool do_format = made;
        if (devdax && try_create) {
            const Superblock *sb = reinterpret_cast<const Superblock *>(base);
            if (sb->magic == kMagic) {
                if (o.flags & CXK_POOL_EXCL) return fail(-EEXIST);
            } else if (all_zero(base, kSbBytes) || (o.flags & CXK_POOL_FORCE)) {
                do_format = true;
            }
        }
        if (do_format) {
            Superblock sb;
            if ((r = geometry(total, o, npaths, &sb)) != 0) return fail(r);
            if ((r = format(p.get(), sb, devdax)) != 0) return fail(r);
            if (!memfd && !devdax) {
                r = backings_link(bs);
                if (r == -EEXIST && !(o.flags & CXK_POOL_EXCL)) {
                    fail(0);  // another process created it first: open theirs
                    continue;
                }
                if (r) return fail(r);
            }
        }
        if ((r = validate(base, total, npaths, &p->geo)) != 0) return fail(r);
        if ((r = heart_start(p.get())) != 0) return fail(r);
        auto fail_beating = [&](int err) {
            heart_end(p.get());
            return fail(err);
        };
        for (uint64_t taken = 0;;) {
            if ((r = pick_slot(p.get(), o.host_id, tag, taken)) < 0) return fail_beating(r);
            p->host = uint32_t(r);
            if ((r = attach(p.get(), bs[0].fd, tag, o.host_id < 0)) == 0) break;
            if (r != kSlotTaken) return fail_beating(r);
            taken |= 1ull << p->host;  // another name claimed it since we looked
        }
        {
            // a lock that fails here (its state damaged: ENOTRECOVERABLE) fails the open
            HostLock lk(p.get());
            if (lk.err) return fail_beating(lk.err);
            clean_leases(p.get());
            sweep_creating(p.get());
            sweep_pending(p.get());
        }
        if (memfd) {
            p->memfd = bs[0].fd;  // closing it would free the memory
            bs[0].fd = -1;
        }
        backings_discard(bs);  // the mapping keeps the memory
        heart_signal(p.get(), false);
        *out = p.release();
        return 0;
    }
    return -EEXIST;
}

}  // namespace
}  // namespace cxk::pool

using namespace cxk::pool;

extern "C" {

void cxk_pool_opts_init(struct cxk_pool_opts *o) {
    if (!o) return;
    std::memset(o, 0, sizeof *o);
    o->host_id = -1;
    o->numa_node = -1;
}

int cxk_pool_open(const char *path, const struct cxk_pool_opts *opts, cxk_pool **out) {
    return open_impl(&path, 1, opts, out);
}

int cxk_pool_open_striped(const char *const *paths, uint32_t npaths,
                          const struct cxk_pool_opts *opts, cxk_pool **out) {
    return open_impl(paths, npaths, opts, out);
}

int cxk_pool_close(cxk_pool *p) {
    if (!p) return 0;
    // A child of fork has the mapping but not the thread (it lives in the parent).
    if (getpid() == p->pid) heart_end(p);
    {
        std::lock_guard<std::mutex> lk(p->lease_mu);
        for (uint32_t i : p->my_leases) lease_free(p, i);
        p->my_leases.clear();
    }
    int r = cxk_unmap(p->base, p->size);
    if (p->memfd >= 0) close(p->memfd);
    // In a child of fork the condition variable may record the parent's heartbeat thread as
    // a waiter, and destroying it would wait forever: leave the small handle behind.
    if (getpid() == p->pid) delete p;
    return r;
}

void *cxk_pool_base(const cxk_pool *p) { return p ? p->base : nullptr; }

int cxk_pool_fd(const cxk_pool *p) {
    if (!p) return -EINVAL;
    return p->memfd >= 0 ? p->memfd : -ENOENT;
}

int cxk_pool_stat(cxk_pool *p, struct cxk_pool_stat *st_) {
    if (!p || !st_) return -EINVAL;
    std::memset(st_, 0, sizeof *st_);
    const Superblock &g = p->geo;
    st_->size = p->size;
    st_->partition_bytes = g.partition_bytes;
    st_->max_objects = g.max_objects;
    st_->align = p->align;
    st_->lease_timeout_ns = g.lease_timeout_ns;
    st_->data_off = g.data_off;
    st_->version = g.version;
    st_->max_hosts = g.max_hosts;
    st_->host_id = p->host;
    st_->coherence = p->nc ? CXK_COHERENCE_NONE : CXK_COHERENCE_HOST;
    st_->nbackings = g.nbackings;
    std::memcpy(st_->uuid, g.uuid, 16);
    std::snprintf(st_->kind, sizeof st_->kind, "%s", p->kind);
    {
        HostLock lk(p);
        if (lk.err) return lk.err;
        HostSlot *s = slot(p, p->host);
        st_->used_bytes = s->used_bytes;
        st_->free_bytes = s->free_bytes;
        st_->objects_host = s->nlive;
    }
    for (uint32_t h = 0; h < g.max_hosts; ++h) {
        if (!host_used(p, h)) continue;
        if (host_alive(p, h)) st_->hosts_active++;
        HostSlot *s = slot(p, h);
        sync_in(p, &s->used_bytes, kLine);
        st_->objects += ld(&s->nlive);
    }
    return 0;
}

int cxk_obj_create(cxk_pool *p, const char *name, uint64_t nbytes, uint64_t *off) {
    return cxk_obj_create_ex(p, name, nbytes, 0, off);
}

int cxk_obj_create_ex(cxk_pool *p, const char *name, uint64_t nbytes, unsigned flags,
                      uint64_t *off) {
    size_t len;
    if (!p || !off || (flags & ~CXK_OBJ_NOZERO)) return -EINVAL;
    if (int r = check_name(name, &len)) return r;
    if (nbytes == 0 || nbytes > p->geo.partition_bytes) return nbytes ? -ENOSPC : -EINVAL;
    const uint64_t need = block_need(nbytes), hash = name_hash(name, len);
    const int64_t li = lease_claim(p);
    if (li < 0) return int(li);
    uint64_t block = 0, gen = 0;
    int err = 0;
    {
        HostLock lk(p);
        if ((err = lk.err) != 0) goto out;
        HostSlot *s = slot(p, p->host);
        if (s->ndead && (++s->ops % 16 == 0 || s->npending == kPendingMax)) sweep_pending(p);
        if (s->ncreating_list == kCreatingMax) sweep_creating(p);
        bakery_lock(p);
        Found f;
        int64_t idx = -ENOSPC, b = -ENOSPC;
        if (find_any(p, name, len, hash, &f)) {
            err = -EEXIST;
        } else if (s->nlive + s->ncreating >= p->geo.max_objects) {
            err = -ENOSPC;  // name table full
        } else if (s->ncreating_list == kCreatingMax) {
            err = -EAGAIN;  // too many objects of this host await publishing
        } else if ((idx = names_slot(p, hash)) < 0) {
            err = int(idx);
        } else {
            b = alloc_block(p, need);
            if (b == -ENOSPC && s->ndead) {
                sweep_pending(p);
                b = alloc_block(p, need);
            }
            if (b < 0) err = int(b);
        }
        if (!err) {
            block = uint64_t(b);
            ObjHeader *o = hdr(p, block);
            gen = ++s->next_gen;
            o->nbytes = nbytes;
            st(&o->gen, gen);
            o->checksum = 0;
            o->created_ns = now_ns();
            o->creator_pid = uint32_t(getpid());
            o->flags = 0;
            o->name_len = uint16_t(len);
            std::memset(o->name, 0, sizeof o->name);
            std::memcpy(o->name, name, len);
            // release: the fields above are in place before the state says CREATING
            st(&o->state, uint32_t(kCreating));
            sync_out(p, o, kObjHeaderBytes);
            crash_point(Crash::create_alloc);
            s->creating[s->ncreating_list++] = block;
            s->ncreating++;
            entry_write(p, &names(p, p->host)[idx], hash, block, gen, kEntCreating);
            crash_point(Crash::create_entry);
        }
        bakery_unlock(p);
    }
out:
    if (err) {
        lease_free(p, uint64_t(li));
        return err;
    }
    // NOZERO: the caller overwrites the payload before publishing; until then the object is
    // CREATING, which open (-EAGAIN) and reads (LIVE check) refuse, so no stale byte leaks
    if (!(flags & CXK_OBJ_NOZERO)) std::memset(p->base + block + kObjHeaderBytes, 0, nbytes);
    lease_set(p, uint64_t(li), block, gen, p->host);
    {
        std::lock_guard<std::mutex> lk(p->lease_mu);
        p->my_leases.push_back(uint32_t(li));
    }
    *off = block + kObjHeaderBytes;
    return 0;
}

}  // extern "C"

namespace cxk::pool {
namespace {
// The block of an object payload offset that lies in host h's partition, or 0.
uint64_t block_of(const cxk_pool *p, uint64_t off, uint32_t *host) {
    const Superblock &g = p->geo;
    if (off < g.data_off + kObjHeaderBytes || off % kLine) return 0;
    const uint64_t block = off - kObjHeaderBytes;
    const uint64_t h = (block - g.data_off) / g.partition_bytes;
    if (h >= g.max_hosts || block + kMinBlock > part_end(p, uint32_t(h))) return 0;
    if (host) *host = uint32_t(h);
    return block;
}

// Does o, at block of host h's partition, describe a block that fits the partition with a
// payload that fits the block? Offsets come from callers, and payload bytes may look like a
// header: nothing is read through a header that fails this.
bool header_sane(const cxk_pool *p, uint32_t h, uint64_t block, const ObjHeader *o) {
    const uint64_t bytes = ld(&o->block_bytes);
    return o->magic == kObjMagic && bytes >= kMinBlock && bytes % kLine == 0 &&
           bytes <= part_end(p, h) - block && ldr(&o->nbytes) <= bytes - kObjHeaderBytes;
}

// The header of the object whose payload is at off, its first `sync` bytes synced in when
// another host owns it (its lines may be stale here); nullptr when off is no payload offset.
ObjHeader *header_at(const cxk_pool *p, uint64_t off, uint32_t *host, size_t sync) {
    const uint64_t block = block_of(p, off, host);
    if (!block) return nullptr;
    ObjHeader *o = hdr(p, block);
    if (*host != p->host) sync_in(p, o, sync);
    return o;
}
}  // namespace
}  // namespace cxk::pool

extern "C" {

int cxk_obj_publish(cxk_pool *p, uint64_t off, unsigned flags) {
    uint32_t h;
    if (!p || (flags & ~CXK_PUBLISH_CHECKSUM)) return -EINVAL;
    const uint64_t block = block_of(p, off, &h);
    if (!block || h != p->host) return -EINVAL;
    ObjHeader *o = hdr(p, block);
    if (o->magic != kObjMagic || ld(&o->state) != kCreating) return -EINVAL;
    const uint64_t nbytes = o->nbytes;
    if (flags & CXK_PUBLISH_CHECKSUM)
        o->checksum = (1ull << 32) | crc32c(p->base + off, nbytes);
    // payload -> flush -> fence, then the header (pairs with the reader's validation)
    sync_out(p, p->base + off, nbytes);
    HostLock lk(p);
    if (lk.err) return lk.err;
    if (ld(&o->state) != kCreating) return -EINVAL;  // destroyed meanwhile
    HostSlot *s = slot(p, p->host);
    st(&o->state, uint32_t(kLive));
    sync_out(p, o, kLine);
    crash_point(Crash::publish_header);
    uint64_t e;
    if (own_entry_of(p, block, &e)) entry_write(p, &names(p, p->host)[e], names(p, p->host)[e].hash,
                                                block, o->gen, kEntLive);
    list_del(s->creating, &s->ncreating_list, block);
    s->ncreating--;
    s->nlive++;
    return 0;
}

int cxk_obj_open(cxk_pool *p, const char *name, struct cxk_obj_stat *st_) {
    size_t len;
    if (!p || !st_) return -EINVAL;
    if (int r = check_name(name, &len)) return r;
    const uint64_t hash = name_hash(name, len);
    const int64_t li = lease_claim(p);
    if (li < 0) return int(li);
    int err = -ENOENT;
    for (int attempt = 0; attempt < 8; ++attempt) {
        Found f;
        if (!find_any(p, name, len, hash, &f)) {
            err = -ENOENT;
            break;
        }
        if (f.state != kEntLive) {
            err = -EAGAIN;
            break;
        }
        lease_set(p, uint64_t(li), f.block, f.gen, f.host);  // ends with a full fence
        ObjHeader *o = hdr(p, f.block);
        if (f.host != p->host) sync_in(p, o, kLine);
        if (ld(&o->state) == kLive && ld(&o->gen) == f.gen) {
            fill_stat(p, f.host, f.block, st_);
            // Non-coherent pool: the caller may read the payload in place (zero-copy views),
            // so drop any lines of it cached before the owner published (pairs with the
            // owner's flush + fence before its header write).
            if (f.host != p->host)
                sync_in(p, reinterpret_cast<const uint8_t *>(o) + kObjHeaderBytes, st_->nbytes);
            std::lock_guard<std::mutex> lk(p->lease_mu);
            p->my_leases.push_back(uint32_t(li));
            return 0;
        }
        // destroyed between lookup and lease: look again (the name may be re-created)
        str(&leases(p, p->host)[li].block, uint64_t(0));
        err = -ENOENT;
    }
    lease_free(p, uint64_t(li));
    return err;
}

int cxk_obj_close(cxk_pool *p, uint64_t off) {
    if (!p) return -EINVAL;
    const uint64_t block = block_of(p, off, nullptr);
    if (!block) return -EINVAL;
    Lease *t = leases(p, p->host);
    bool found = false;
    {
        std::lock_guard<std::mutex> lk(p->lease_mu);
        for (size_t k = 0; k < p->my_leases.size(); ++k) {
            const uint32_t i = p->my_leases[k];
            if (ldr(&t[i].block) != block) continue;
            lease_free(p, i);
            p->my_leases[k] = p->my_leases.back();
            p->my_leases.pop_back();
            found = true;
            break;
        }
    }
    if (!found) return -ENOENT;
    // The last reader of one of our destroyed objects frees it now; other hosts' readers
    // leave it to our next sweep (create, heartbeat).
    if (block >= part_begin(p, p->host) && block < part_end(p, p->host) &&
        ld(&hdr(p, block)->state) == kDead) {
        HostLock hl(p);
        if (!hl.err) sweep_pending(p);
    }
    return 0;
}

int cxk_obj_destroy(cxk_pool *p, const char *name) {
    size_t len;
    if (!p) return -EINVAL;
    if (int r = check_name(name, &len)) return r;
    const uint64_t hash = name_hash(name, len);
    HostLock lk(p);
    if (lk.err) return lk.err;
    Found f;
    if (!find_in(p, p->host, name, len, hash, &f)) {
        Found other;
        return find_any(p, name, len, hash, &other) ? -EPERM : -ENOENT;
    }
    HostSlot *s = slot(p, p->host);
    ObjHeader *o = hdr(p, f.block);
    const uint32_t was = ld(&o->state);
    // header DEAD first, then the full fence in sync_out, then the lease scan: a reader
    // either sees DEAD after publishing its lease, or we see its lease
    st(&o->state, uint32_t(kDead));
    sync_out(p, o, kLine);
    crash_point(Crash::destroy_header);
    NameEntry *e = &names(p, p->host)[f.entry];
    entry_write(p, e, e->hash, 0, 0, kTomb);
    if (was == kCreating) {
        list_del(s->creating, &s->ncreating_list, f.block);
        s->ncreating--;
    } else {
        s->nlive--;
    }
    s->ops++;
    if (leased(p, f.block, f.gen)) {
        s->ndead++;
        if (s->npending < kPendingMax) s->pending[s->npending++] = f.block;
        // else: sweep_pending finds it on the chain once the list has room
        return 0;
    }
    crash_point(Crash::destroy_free);
    free_block(p, f.block);
    return 0;
}

int cxk_obj_stat(cxk_pool *p, const char *name, struct cxk_obj_stat *st_) {
    size_t len;
    if (!p || !st_) return -EINVAL;
    if (int r = check_name(name, &len)) return r;
    Found f;
    if (!find_any(p, name, len, name_hash(name, len), &f)) return -ENOENT;
    fill_stat(p, f.host, f.block, st_);
    return 0;
}

int cxk_obj_stat_at(cxk_pool *p, uint64_t off, struct cxk_obj_stat *st_) {
    uint32_t h;
    if (!p || !st_) return -EINVAL;
    ObjHeader *o = header_at(p, off, &h, kObjHeaderBytes);
    if (!o || !header_sane(p, h, off - kObjHeaderBytes, o) || ld(&o->state) == kFree)
        return -EINVAL;
    fill_stat(p, h, off - kObjHeaderBytes, st_);
    return 0;
}

int cxk_obj_list(cxk_pool *p, struct cxk_obj_stat *out, size_t cap, size_t *n) {
    if (!p || !n || (cap && !out)) return -EINVAL;
    size_t count = 0;
    std::vector<WalkBlock> blocks;
    for (uint32_t h = 0; h < p->geo.max_hosts; ++h) {
        if (!host_used(p, h)) continue;
        blocks.clear();
        walk(p, h, &blocks);  // a chain broken mid-way lists what precedes the break
        for (const auto &b : blocks) {
            if (b.state != kLive && b.state != kCreating) continue;
            if (count < cap) {
                if (h != p->host) sync_in(p, hdr(p, b.off), kObjHeaderBytes);
                fill_stat(p, h, b.off, &out[count]);
            }
            ++count;
        }
    }
    *n = count;
    return 0;
}

int cxk_obj_validate(cxk_pool *p, uint64_t off, uint64_t generation) {
    uint32_t h;
    if (!p) return -EINVAL;
    ObjHeader *o = header_at(p, off, &h, kLine);
    if (!o) return -EINVAL;
    if (!header_sane(p, h, off - kObjHeaderBytes, o)) return -ESTALE;  // not an object now
    return (ld(&o->state) == kLive && ld(&o->gen) == generation) ? 0 : -ESTALE;
}

int cxk_obj_read(cxk_pool *p, uint64_t off, uint64_t generation, uint64_t pos, void *dst,
                 size_t nbytes) {
    uint32_t h;
    if (!p || (nbytes && !dst)) return -EINVAL;
    const uint64_t block = block_of(p, off, &h);
    if (!block) return -EINVAL;
    if (int r = cxk_obj_validate(p, off, generation)) return r;
    ObjHeader *o = hdr(p, block);
    const uint64_t size = ldr(&o->nbytes);
    if (size > part_end(p, h) - off) return -ESTALE;  // changed since the validation
    if (pos > size || nbytes > size - pos) return -ERANGE;
    if (h != p->host && p->nc) cxk_copy_invalidate(dst, p->base + off + pos, nbytes);
    else std::memcpy(dst, p->base + off + pos, nbytes);
    // acquire: the copy is done before the re-check (pairs with the destroyer's release
    // of the DEAD state and the allocator's reuse that follows it)
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    return cxk_obj_validate(p, off, generation);
}

int cxk_obj_verify(cxk_pool *p, uint64_t off) {
    uint32_t h;
    if (!p) return -EINVAL;
    ObjHeader *o = header_at(p, off, &h, kLine);
    if (!o || !header_sane(p, h, off - kObjHeaderBytes, o) || ld(&o->state) == kFree)
        return -EINVAL;
    const uint64_t want = o->checksum, size = ldr(&o->nbytes);
    if (!want) return -ENODATA;
    if (size > part_end(p, h) - off) return -EINVAL;  // changed since the check
    if (h != p->host) sync_in(p, p->base + off, size);
    return ((1ull << 32) | crc32c(p->base + off, size)) == want ? 0 : -EBADMSG;
}

void cxk_pool_flush(cxk_pool *p, uint64_t off, uint64_t nbytes) {
    if (!p || off >= p->size) return;
    sync_out(p, p->base + off, std::min(nbytes, p->size - off));
}

void cxk_pool_invalidate(cxk_pool *p, uint64_t off, uint64_t nbytes) {
    if (!p || off >= p->size) return;
    sync_in(p, p->base + off, std::min(nbytes, p->size - off));
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

int cxk_pool_fsck(cxk_pool *p, unsigned flags, struct cxk_fsck_report *r) {
    if (!p || !r || (flags & ~CXK_FSCK_REPAIR)) return -EINVAL;
    std::memset(r, 0, sizeof *r);
    if (flags & CXK_FSCK_REPAIR) {
        HostLock lk(p);
        if (lk.err) return lk.err;
        recover(p, r);
    }
    std::unordered_map<std::string, int> seen;
    std::vector<WalkBlock> blocks;
    for (uint32_t h = 0; h < p->geo.max_hosts; ++h) {
        if (!host_used(p, h)) continue;
        blocks.clear();
        if (!walk(p, h, &blocks)) r->errors++;
        std::unordered_map<uint64_t, uint64_t> gens;  // held block -> gen
        for (const auto &b : blocks) {
            ObjHeader *o = hdr(p, b.off);
            switch (b.state) {
                case kFree:
                    r->blocks_free++;
                    r->bytes_free += o->block_bytes;
                    r->largest_free = std::max<uint64_t>(r->largest_free, o->block_bytes);
                    break;
                case kCreating: r->objects_creating++; break;
                case kLive: r->objects_live++; break;
                case kDead: r->objects_dead++; break;
                default: r->errors++;
            }
            if (b.state != kFree) r->bytes_used += o->block_bytes;
            if (b.state == kLive || b.state == kCreating) gens[b.off] = b.gen;
            if (b.state == kLive) {
                if (h != p->host) sync_in(p, o, kObjHeaderBytes);
                if (seen[std::string(o->name, o->name_len)]++) r->duplicate_names++;
            }
        }
        // every entry must point at a held block of its generation
        EntryView v;
        for (uint64_t i = 0; i < p->geo.name_slots; ++i) {
            if (!entry_read(p, h, i, &v)) {
                r->errors++;
                continue;
            }
            if (v.state != kEntLive && v.state != kEntCreating) continue;
            auto it = gens.find(v.block);
            if (it == gens.end() || it->second != v.gen) {
                // a live host may have changed it since our walk: read it once more
                ObjHeader *o = hdr(p, v.block);
                if (h != p->host && host_alive(p, h) && v.block >= part_begin(p, h) &&
                    v.block < part_end(p, h) && ld(&o->gen) != v.gen)
                    continue;
                r->errors++;
            }
        }
        // leases held by this host's processes
        HostSlot *s = slot(p, h);
        const uint64_t hwm = std::min<uint64_t>(ld(&s->lease_hwm), p->geo.lease_slots);
        Lease *t = leases(p, h);
        if (h != p->host) sync_in(p, t, hwm * sizeof(Lease));
        const bool alive = host_alive(p, h);
        for (uint64_t i = 0; i < hwm; ++i) {
            const uint32_t pid = ld(&t[i].pid);
            if (!pid) continue;
            const bool live = h == p->host ? pid_alive(pid & ~kClaiming) : alive;
            (live ? r->leases_live : r->leases_expired)++;
        }
    }
    return 0;
}

int cxk_pool_crash_at(const char *name, int nth) {
    if (!name || nth < 0) return -EINVAL;
    for (size_t i = 0; i < size_t(Crash::count_); ++i)
        if (std::strcmp(name, kCrashNames[i]) == 0) {
            g_crash_left[i].store(nth);
            return 0;
        }
    return -EINVAL;
}

}  // extern "C"
