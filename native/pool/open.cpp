// open.cpp — opening a pool: backings, mapping, formatting or validating, attaching to a host
// slot, the first sweeps; closing it; and the pool-wide stat.
#include "pool/pool.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <memory>
#include <new>
#include <vector>

#include "pool/extents.h"
#include "pool/hosts.h"
#include "pool/leases.h"
#include "pool/recovery.h"
#include "pool/space.h"
#include "pool/superblock.h"
#include "pool/upgrade.h"
#include "prim/policy.h"
#include "sys/sys.h"

namespace cxk::pool {

namespace {
constexpr unsigned kOpenFlags = CXK_POOL_CREATE | CXK_POOL_EXCL | CXK_POOL_FORCE |
                                CXK_POOL_SHARED | CXK_POOL_OVERCOMMIT | CXK_POOL_REPAIR |
                                CXK_POOL_READ_V1;

// open, phase 1: the options, before anything is touched.
int check_opts(const char *const *paths, uint32_t npaths, const cxk_pool_opts &o) {
    const char *tag = o.host_tag ? o.host_tag : "";
    if (std::strlen(tag) > kTagMax) return -ENAMETOOLONG;
    if (o.coherence != CXK_COHERENCE_HOST && o.coherence != CXK_COHERENCE_NONE &&
        o.coherence != CXK_COHERENCE_SIM)
        return -EINVAL;
    if (o.max_hosts > kMaxHosts || o.host_id < -1 || o.numa_node > CXK_MAX_NODE_ID) return -EINVAL;
    if ((o.flags & ~kOpenFlags) != 0) return -EINVAL;
    // owner and group read/write at most: no exec, setuid/setgid/sticky, or other users' write
    if (o.mode & ~0664u) return -EINVAL;
    // a lease outlives 4 heartbeats (timeout / 4 apart) even on a loaded machine
    if (o.lease_timeout_ms && (o.lease_timeout_ms < CXK_POOL_LEASE_TIMEOUT_MIN_MS ||
                               o.lease_timeout_ms > CXK_POOL_LEASE_TIMEOUT_MAX_MS))
        return -EINVAL;
    for (uint32_t i = 0; i < npaths; ++i)
        if (!paths[i] || !*paths[i]) return -EINVAL;
    const bool create = o.flags & CXK_POOL_CREATE;
    if (create && o.size && npaths > 1 && o.size % (uint64_t(CXK_POOL_STRIPE_BYTES) * npaths))
        return -EINVAL;
    return 0;
}

// open, last phase: under this host's lock, expire dead processes' leases and reclaim what
// dead creators and finished readers left. A damaged lock fails the open (ENOTRECOVERABLE)
// unless repair is asked for: then it is re-initialised and the partition recovered.
int first_sweeps(cxk_pool *p, int lock_fd, bool repair) {
    int e = lock_host(p, false);
    if (e == ENOTRECOVERABLE && repair) {
        if (int r = reset_host_lock(p, lock_fd)) return r;
        if ((e = lock_host(p, false)) == 0) p->needs_recover = true;  // recovered at unlock
    }
    if (e) return -e;
    clean_leases(p);
    sweep_creating(p);
    sweep_pending(p);
    unlock_host(p);
    return 0;
}
}  // namespace

namespace {
// The backings of one open attempt and what they are.
struct Opened {
    std::vector<Backing> bs;
    bool made = false, existing = false, devdax = false, memfd = false;
    uint64_t total = 0, align = 0;
};

// open, phase 2: open or create every backing; equal stripes, all made or all existing, big
// enough for a superblock, devices aligned. On error nothing is left behind.
int open_backings(const char *const *paths, uint32_t npaths, const cxk_pool_opts &o,
                  bool try_create, uint32_t mode, Opened *ob) {
    ob->bs.assign(npaths, Backing{});
    // overcommit leaves one file sparse, each extent reserved when claimed (space.h); the
    // stripes of several files are reserved whole, as extents do not map to one file's range
    const unsigned flags = npaths > 1 ? o.flags & ~CXK_POOL_OVERCOMMIT : o.flags;
    uint64_t per = 0;
    int r = 0;
    for (uint32_t i = 0; i < npaths && r == 0; ++i) {
        Backing &b = ob->bs[i];
        b.path = paths[i];
        if (try_create && o.size == 0 && std::strncmp(paths[i], "/dev/dax", 8) != 0) {
            // a file pool is created with a size; without one, only open
            r = backing_open(&b, false, flags, 0, mode);
            if (r == -ENOENT) r = -EINVAL;
        } else {
            r = backing_open(&b, try_create, flags, o.size / npaths, mode);
        }
        if (r) break;
        (b.created ? ob->made : ob->existing) = true;
        ob->devdax |= b.devdax;
        ob->memfd |= b.memfd;
        if (i == 0) per = b.size;
        else if (b.size != per) r = -EINVAL;  // stripes must be equal
        ob->align = std::max(ob->align, b.align);
    }
    if (!r && ob->made && ob->existing) r = -EEXIST;  // part of a striped pool is already there
    ob->total = per * npaths;
    if (!r && ob->total < kSbBytes) r = ob->made ? -ERANGE : -EMEDIUMTYPE;
    if (!r && ob->devdax && ob->align && ob->total % ob->align) r = -EINVAL;  // misaligned
    if (r) backings_discard(ob->bs);
    return r;
}

// format_if_new's result for "another process created the pool first: open theirs".
constexpr int kCreatedByAnother = 1;

// open, phase 3: format what we made (or a blank / forced device), link new files into place.
int format_if_new(cxk_pool *p, Opened &ob, const cxk_pool_opts &o, uint32_t npaths,
                  bool try_create) {
    bool do_format = ob.made;
    if (ob.devdax && try_create) {
        const Superblock *sb = reinterpret_cast<const Superblock *>(p->base);
        if (sb->magic == kMagic) {
            if (o.flags & CXK_POOL_EXCL) return -EEXIST;
        } else if (all_zero(p->base, kSbBytes) || (o.flags & CXK_POOL_FORCE)) {
            do_format = true;
        }
    }
    if (!do_format) return 0;
    Superblock sb;
    if (int r = geometry(ob.total, o, npaths, &sb)) return r;
    // formatting touches the metadata: its blocks exist first (an overcommitted file is sparse)
    if (ob.made && !ob.memfd && npaths == 1)
        if (int r = reserve(ob.bs[0].fd, 0, sb.data_off)) return r == -EDQUOT ? -ENOSPC : r;
    if (int r = format(p, sb, ob.devdax)) return r;
    if (ob.memfd || ob.devdax) return 0;
    const int r = backings_link(ob.bs);
    return r == -EEXIST && !(o.flags & CXK_POOL_EXCL) ? kCreatedByAnother : r;
}

// ---- coherence "sim": from the slot on, this handle runs on slot's view ----
int sim_enter(cxk_pool *p) {
    char key[16];
    std::snprintf(key, sizeof key, "host%u", p->host);
    uint8_t *view = nullptr;
    if (int r = cxk::sim::attach(p->base, p->size, p->align, p->geo.uuid, key, &p->sim, &view))
        return r;
    p->sim_pool = p->base;
    p->base = view;
    return 0;
}
}  // namespace
void sim_leave(cxk_pool *p) {
    if (!p->sim) return;
    cxk::sim::detach(p->sim);
    p->sim = nullptr;
    p->base = p->sim_pool;
    p->sim_pool = nullptr;
}
namespace {

// open, phase 4: pick a slot and attach to it (again when another name took it meanwhile).
// Under "sim" the slot is picked on the pool itself, then everything runs on its host's view.
int attach_host_locked(cxk_pool *p, const cxk_pool_opts &o, const char *tag, int lock_fd) {
    for (uint64_t taken = 0;;) {
        const int r = pick_slot(p, o.host_id, tag, taken);
        if (r < 0) return r;
        p->host = uint32_t(r);
        if (o.coherence == CXK_COHERENCE_SIM)
            if (int e = sim_enter(p)) return e;
        const bool fresh = o.host_id < 0 && !host_used(p, p->host) && !slot(p, p->host)->tag[0];
        const int a = attach(p, lock_fd, tag, o.host_id < 0);
        // a slot we just won by name but could not attach to is reopened: a failed open
        // leaves the pool as it found it
        if (a < 0 && fresh) slot_unclaim(p, p->host);
        if (a != kSlotTaken) return a;
        sim_leave(p);
        taken |= 1ull << p->host;  // another name claimed it since we looked
    }
}

// Processes of one kernel that attach by the same name are serialised by an OFD lock on a
// byte of the superblock page chosen by the name's hash (past the superblock's fields): one
// name never takes two slots here. Across hosts the splitter makes each claim exact.
int attach_host(cxk_pool *p, const cxk_pool_opts &o, const char *tag, int lock_fd) {
    if (o.host_id >= 0 || !*tag) return attach_host_locked(p, o, tag, lock_fd);
    const uint64_t at = 2048 + name_hash(tag, std::strlen(tag)) % 2048;
    if (int r = backing_lock(lock_fd, at, 30 * 1000000000ll)) return r;
    const int r = attach_host_locked(p, o, tag, lock_fd);
    backing_unlock(lock_fd, at);
    return r;
}
}  // namespace

int open_impl(const char *const *paths, uint32_t npaths, const cxk_pool_opts *opts,
              cxk_pool **out) {
    if (!paths || !out || npaths == 0 || npaths > CXK_POOL_MAX_BACKINGS) return -EINVAL;
    cxk_pool_opts o;
    if (opts) o = *opts;
    else cxk_pool_opts_init(&o);
    if (int r = check_opts(paths, npaths, o)) return r;
    const char *tag = o.host_tag ? o.host_tag : "";
    const bool create = o.flags & CXK_POOL_CREATE;
    const uint32_t mode = o.mode ? o.mode : 0600;

    std::unique_ptr<cxk_pool> p(new (std::nothrow) cxk_pool);
    if (!p) return -ENOMEM;
    p->nc = o.coherence != CXK_COHERENCE_HOST;
    p->pid = getpid();

    for (int attempt = 0; attempt < 2; ++attempt) {
        const bool try_create = create && attempt == 0;
        Opened ob;
        if (int r = open_backings(paths, npaths, o, try_create, mode, &ob)) return r;
        uint8_t *base = nullptr;
        if (int r = backings_map(ob.bs, ob.total, ob.align, &base)) {
            backings_discard(ob.bs);
            return r;
        }
        p->base = base;
        p->size = ob.total;
        p->align = ob.align ? ob.align : cxk_page_size();
        std::snprintf(p->kind, sizeof p->kind, "%s", npaths > 1 ? "striped" : ob.devdax ? "devdax"
                                                     : ob.memfd ? "memfd" : "file");
        auto fail = [&](int err) {
            sim_leave(p.get());
            cxk_unmap(p->base, p->size);
            p->base = nullptr;
            backings_discard(ob.bs);
            return err;
        };
        int r;
        if (o.numa_node >= 0) {
            if (ob.devdax) return fail(-EINVAL);  // device memory sits where the device is
            // before the first touch (format); existing pages move
            if ((r = bind_range(p->base, ob.total, o.numa_node, CXK_APPLY_MIGRATE)) != 0)
                return fail(r);
        }
        if ((r = format_if_new(p.get(), ob, o, npaths, try_create)) == kCreatedByAnother) {
            fail(0);  // another process created it first: open theirs
            continue;
        }
        if (r) return fail(r);
        r = validate(base, ob.total, npaths, &p->geo);
        if (r == -EPROTONOSUPPORT && (o.flags & CXK_POOL_READ_V1) && npaths == 1 &&
            !ob.devdax && !ob.memfd && !ob.made) {
            // version 1: a private view made version 2 in memory replaces the shared mapping
            uint8_t *view = nullptr;
            uint64_t vsize = 0;
            if ((r = v1_private_view(ob.bs[0].fd, ob.total, &view, &vsize)) != 0) return fail(r);
            cxk_unmap(p->base, p->size);
            p->base = view;
            p->size = vsize;
            p->read_only_v1 = true;
            r = validate(p->base, p->size, npaths, &p->geo);
        }
        if (r) return fail(r);
        // a host attaching writes its slot, names and leases: on a sparse pool file (made
        // overcommitted, or by an older cxlkit) their blocks must exist before it touches them
        const bool one_file = npaths == 1 && !ob.devdax && !ob.memfd && !p->read_only_v1;
        if (one_file && !ob.made && (r = reserve(ob.bs[0].fd, 0, p->geo.data_off)) != 0)
            return fail(r == -EDQUOT ? -ENOSPC : r);
        // after the backings: a caller's fault on the nth open names the pool's files, and
        // the boot only matters from attach on; one that exists but cannot be read fails the
        // open (a made-up hash would make this host look rebooted to its running processes)
        if ((r = read_boot_hash(&p->boot)) != 0) return fail(r);
        if ((r = heart_start(p.get())) != 0) return fail(r);
        const int lock_fd = ob.bs[0].fd;
        const bool one_file_lock = !ob.devdax && !ob.memfd && !p->read_only_v1;
        if ((r = attach_host(p.get(), o, tag, lock_fd)) != 0 ||
            (r = first_sweeps(p.get(), lock_fd, o.flags & CXK_POOL_REPAIR)) != 0 ||
            // held while this handle lives: `pool rm` sees the slot in use (space.h)
            (one_file_lock && (r = users_lock(lock_fd, p->host)) != 0)) {
            heart_end(p.get());
            return fail(r);
        }
        int &keep = ob.memfd ? p->memfd : p->file_fd;  // memfd: closing it frees the memory;
        if (!ob.devdax && !p->read_only_v1) {          // files: fsck checks their size
            keep = ob.bs[0].fd;
            ob.bs[0].fd = -1;
        }
        backings_discard(ob.bs);  // the mapping keeps the memory
        heart_signal(p.get(), false);
        *out = p.release();
        return 0;
    }
    return -EEXIST;
}

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
    sim_leave(p);  // the last process of a simulated host writes its dirty lines back
    int r = cxk_unmap(p->base, p->size);
    if (p->memfd >= 0) cxk::sys_close(p->memfd);
    if (p->file_fd >= 0) cxk::sys_close(p->file_fd);
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
    st_->size = p->read_only_v1 ? g.claims_off : p->size;  // v1 view: the file, not its maps
    st_->partition_bytes = g.data_bytes;
    st_->extent_bytes = g.extent_bytes;
    st_->nextents = g.nextents;
    st_->max_objects = g.max_objects;
    st_->align = p->align;
    st_->lease_timeout_ns = g.lease_timeout_ns;
    st_->data_off = g.data_off;
    st_->version = p->read_only_v1 ? kVersion1 : g.version;
    st_->max_hosts = g.max_hosts;
    st_->host_id = p->host;
    st_->coherence = p->sim ? CXK_COHERENCE_SIM : p->nc ? CXK_COHERENCE_NONE : CXK_COHERENCE_HOST;
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
        st_->extents_held = extents_held(p, p->host);
        st_->names_host = s->nlive + s->ncreating;
    }
    uint64_t held = 0;
    for (uint32_t h = 0; h < g.max_hosts; ++h) held += extents_held(p, h);
    st_->extents_free = held < g.nextents ? g.nextents - held : 0;
    for (uint32_t h = 0; h < g.max_hosts; ++h) {
        if (!host_used(p, h)) continue;
        if (host_alive(p, h)) st_->hosts_active++;
        HostSlot *s = slot(p, h);
        sync_in(p, &s->used_bytes, kLine);
        st_->objects += ld(&s->nlive);
    }
    return 0;
}

}  // extern "C"
