// hosts.h — private: host liveness, the host lock, the cross-host bakery, attaching to a
// host slot and the heartbeat thread (hosts.cpp).
#pragma once
#include <pthread.h>

#include <cstdint>

#include "pool/pool.h"

namespace cxk::pool {

uint64_t boot_hash();  // entropy and messages: a failed read gives a fixed value
// This boot's hash for the host slot: 0, or -errno when boot_id exists but cannot be read.
int read_boot_hash(uint64_t *out);
// The slot was used by some boot (not fresh from formatting).
bool host_used(const cxk_pool *p, uint32_t h);
// Another host is alive while its heartbeat is younger than the lease timeout; we are.
bool host_alive(const cxk_pool *p, uint32_t h);
void beat(cxk_pool *p);
// The release fence: our slot still holds our boot and the epoch we attached at. A `pool
// release` of this host (taken for dead while it was stalled) reset the slot and bumped its
// epoch; from then on every mutation fails with EKEYREVOKED instead of writing into what
// now belongs to others. The slot's line 0 is read from the pool (another host wrote it).
bool slot_ours(const cxk_pool *p);
int init_mutex(pthread_mutex_t *m);  // robust, process-shared; 0 or -errno

// This host's lock (the robust mutex of its slot), held for the object's lifetime when err
// is 0. A holder that died is recovered from (recover) before we get it.
struct HostLock {
    cxk_pool *p;
    int err = 0;
    explicit HostLock(cxk_pool *pool);
    ~HostLock();
    HostLock(const HostLock &) = delete;
    HostLock &operator=(const HostLock &) = delete;
};
// The result of locking s's mutex: EOWNERDEAD is recovered (we hold it then), else e
// (positive errno; EBADMSG when recovery found a broken chain: the lock is released).
int lock_result(cxk_pool *p, HostSlot *s, int e);
// Take / release this host's lock (HostLock does both): 0 or a positive errno. A damaged lock
// (unknown kind, or a lock word naming a thread that is gone) is ENOTRECOVERABLE. Counts out
// of range and counters no chain can give (counters_impossible) are recovered at once, and
// stale bakery registers cleared; p->needs_recover at release runs recovery before unlocking.
int lock_host(cxk_pool *p, bool try_only);
void unlock_host(cxk_pool *p);
// Re-initialise this host's mutex under the slot's OFD lock (repair of a damaged lock).
int reset_host_lock(cxk_pool *p, int lock_fd);

// Lamport's bakery over the host slots: the cross-host lock that keeps names unique.
// pre: the caller holds the host lock. 0, or -ETIMEDOUT when a live host's registers kept
// us waiting, unchanged, for longer than any holder holds the bakery (a stopped process of
// that host, or registers nobody of it writes): our registers are cleared again and
// wait_host() names that host. Registers no host writes (bakery_registers_legal) are skipped.
int bakery_lock(cxk_pool *p);
void bakery_unlock(cxk_pool *p);
// choosing 0 or 1 and number at most kTicketMax: what a host can have written.
bool bakery_registers_legal(uint64_t choosing, uint64_t number);
// Under the host lock no process of this host is in the bakery: registers that are not 0
// (a crash inside it, a stray write) are cleared. true when there were any.
bool bakery_clear_stale(cxk_pool *p);
// The host slot the calling thread's last -ETIMEDOUT on p waited for, or -1.
int32_t wait_host(const cxk_pool *p);

// Claim slot h with the splitter on its claim lines (any newcomer may write them): true
// when we won it (at most one claimer does, whatever the timing). settle (claims by name):
// only when the door is open, and after Fischer's delay, so that of claimers at the same
// instant the last to write x goes on alone and wins (hosts.cpp). slot_door_open: nobody
// claimed it yet.
bool slot_splitter(cxk_pool *p, uint32_t h, uint64_t nonce, bool settle);
bool slot_door_open(const cxk_pool *p, uint32_t h);
void slot_unclaim(cxk_pool *p, uint32_t h);  // reopen the door of a slot we won, unused

// attach(): the slot picked by name was claimed by another name meanwhile: pick again.
constexpr int kSlotTaken = 1;
int pick_slot(cxk_pool *p, int32_t host_id, const char *tag, uint64_t taken);
int attach(cxk_pool *p, int lock_fd, const char *tag, bool by_name);

int heart_start(cxk_pool *p);               // the thread waits for heart_signal
void heart_signal(cxk_pool *p, bool stop);  // start beating (stop = false) or stop
void heart_end(cxk_pool *p);                // stop and join (no-op if not started)

}  // namespace cxk::pool
