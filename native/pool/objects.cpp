// objects.cpp — the object API: name lookups across hosts, create / publish / open / close /
// destroy / stat / list / validate / read / verify, and the checks of caller-given offsets.
#include "pool/objects.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <vector>

#include "pool/checksum.h"
#include "pool/crash.h"
#include "pool/extents.h"
#include "pool/hosts.h"
#include "sys/sys.h"
#include "pool/leases.h"
#include "pool/recovery.h"
#include "prim/mutate.h"
#include "prim/policy.h"

namespace cxk::pool {

// ---- lookups ---------------------------------------------------------------------------

bool header_matches(const cxk_pool *p, uint32_t h, const EntryView &v, const char *name,
                    size_t len) {
    uint64_t lo, hi;
    if (!run_at(p, h, v.block, &lo, &hi) || v.block + kMinBlock > hi || v.block % kLine)
        return false;
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

// Strict UTF-8 as Python decodes it: no overlong forms, surrogates or code points > U+10FFFF.
bool utf8_valid(const char *s, size_t n) {
    const auto *u = reinterpret_cast<const uint8_t *>(s);
    for (size_t i = 0; i < n;) {
        // Eight ASCII bytes at a time: names are mostly ASCII (kv.<hex>, rank-3) and every
        // create, open and stat checks its name (a KV lookup was ~540 instructions here).
        if (n - i >= 8) {
            uint64_t w;
            memcpy(&w, u + i, 8);
            if (!(w & 0x8080808080808080ull)) {
                i += 8;
                continue;
            }
        }
        const uint8_t c = u[i];
        size_t k;
        uint8_t lo = 0x80, hi = 0xbf;  // range of the second byte
        if (c < 0x80) k = 0;
        else if (c >= 0xc2 && c <= 0xdf) k = 1;
        else if (c >= 0xe0 && c <= 0xef) k = 2, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
        else if (c >= 0xf0 && c <= 0xf4) k = 3, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
        else return false;
        if (k > n - i - 1) return false;
        if (k && (u[i + 1] < lo || u[i + 1] > hi)) return false;
        for (size_t j = 2; j <= k; ++j)
            if ((u[i + j] & 0xc0) != 0x80) return false;
        i += k + 1;
    }
    return true;
}

// Names are 1..kNameMax bytes of UTF-8 (every reader decodes them as such).
int check_name(const char *name, size_t *len) {
    if (!name) return -EINVAL;
    *len = strnlen(name, kNameMax + 1);
    if (*len == 0) return -EINVAL;
    if (*len > kNameMax) return -ENAMETOOLONG;
    if (!utf8_valid(name, *len)) return -EILSEQ;
    return 0;
}

int checksum_state(const ObjHeader *o) {
    const uint64_t c = o->checksum;
    const bool flagged = o->flags & kObjChecksummed;
    if (c == 0) return flagged ? -EBADMSG : -ENODATA;  // flagged: the checksum was dropped
    return (c >> 32) == 1 ? 0 : -EBADMSG;
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

// The block of an object payload offset that lies in a run of some host (*host), or 0;
// *run_end: the end of that run. The extent maps say whose run it is; this host's is asked
// first.
uint64_t block_of(const cxk_pool *p, uint64_t off, uint32_t *host, uint64_t *run_end) {
    const Superblock &g = p->geo;
    if (off < g.data_off + kObjHeaderBytes || off % kLine) return 0;
    const uint64_t block = off - kObjHeaderBytes;
    for (uint32_t i = 0; i < g.max_hosts; ++i) {
        const uint32_t h = i == 0 ? p->host : (i <= p->host ? i - 1 : i);
        uint64_t b, e;
        if (!run_at(p, h, block, &b, &e)) continue;
        if (block + kMinBlock > e) return 0;
        if (host) *host = h;
        if (run_end) *run_end = e;
        return block;
    }
    return 0;
}

// The end of host h's run holding block (0: in no run of h).
uint64_t block_run_end(const cxk_pool *p, uint32_t h, uint64_t block) {
    uint64_t b, e;
    return run_at(p, h, block, &b, &e) ? e : 0;
}

// Does o, at block of a run of host h, describe a block that fits the run with a payload
// that fits the block? Offsets come from callers, and payload bytes may look like a
// header: nothing is read through a header that fails this.
bool header_sane(const cxk_pool *p, uint32_t h, uint64_t block, const ObjHeader *o) {
    return header_fits(block, block_run_end(p, h, block), o);
}

bool header_fits(uint64_t block, uint64_t run_end, const ObjHeader *o) {
    const uint64_t bytes = ld(&o->block_bytes);
    const uint16_t nl = ldr(&o->name_len);
    return run_end > block && o->magic == kObjMagic && bytes >= kMinBlock &&
           bytes % kLine == 0 && bytes <= run_end - block &&
           ldr(&o->nbytes) <= bytes - kObjHeaderBytes &&
           (ld(&o->state) == kFree || (nl >= 1 && nl <= kNameMax));
}

// The header of the object whose payload is at off, its first `sync` bytes synced in when
// another host owns it (its lines may be stale here); nullptr when off is no payload offset.
// *run_end: the end of the run that holds it, as block_of read it.
ObjHeader *header_at(const cxk_pool *p, uint64_t off, uint32_t *host, uint64_t *run_end,
                     size_t sync) {
    const uint64_t block = block_of(p, off, host, run_end);
    if (!block) return nullptr;
    ObjHeader *o = hdr(p, block);
    if (*host != p->host) sync_in(p, o, sync);
    return o;
}

}  // namespace cxk::pool

using namespace cxk::pool;

extern "C" {

int cxk_obj_create(cxk_pool *p, const char *name, uint64_t nbytes, uint64_t *off) {
    return cxk_obj_create_ex(p, name, nbytes, 0, off);
}

int cxk_obj_create_ex(cxk_pool *p, const char *name, uint64_t nbytes, unsigned flags,
                      uint64_t *off) {
    if (p && p->read_only_v1) return -EROFS;  // a version 1 pool
    size_t len;
    if (!p || !off || (flags & ~CXK_OBJ_NOZERO)) return -EINVAL;
    if (int r = check_name(name, &len)) return r;
    if (nbytes == 0 || nbytes > p->geo.data_bytes) return nbytes ? -ENOSPC : -EINVAL;
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
        // full by the counters: rebuilt first when the chain disagrees (they are derived)
        if (s->nlive + s->ncreating >= p->geo.max_objects && (err = counters_heal(p)) != 0)
            goto out;
        if ((err = bakery_lock(p)) != 0) goto out;  // a host holds it past the bound: named
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
            if (b == -ENOSPC) {
                // our runs are full: claim free extents (we hold the bakery), then again
                const int c = extent_claim(p, need);
                b = c ? c : alloc_block(p, need);
            }
            if (b < 0) err = int(b);
        }
        if (!err) {
            block = uint64_t(b);
            ObjHeader *o = hdr(p, block);
            gen = ++s->next_gen;
            o->nbytes = nbytes;
            st(&o->gen, gen);
            // release fence: the new gen is visible before any byte of the name below
            // (pairs with the acquire fence of snapshot_header in list)
            __atomic_thread_fence(__ATOMIC_RELEASE);
            o->checksum = 0;
            o->created_ns = now_ns();
            o->creator_pid = self_pid();
            o->flags = 0;
            o->name_len = uint16_t(len);
            std::memset(o->name, 0, sizeof o->name);
            std::memcpy(o->name, name, len);
            // Non-coherent readers fetch the header line by line: the name's lines reach the
            // pool (write-back, fence) before line 0 may say CREATING, else a reader on another
            // host takes a new state with an old name (the simulator found it). Line 0
            // evicted early still says FREE, which readers refuse.
            sync_out(p, reinterpret_cast<uint8_t *>(o) + kLine, kObjHeaderBytes - kLine);
            // release: the fields above are in place before the state says CREATING
            st(&o->state, uint32_t(kCreating));
            sync_out(p, o, kLine);
            crash_point(Crash::create_alloc);
            s->creating[s->ncreating_list++] = block;
            s->ncreating++;
            entry_write(p, &names(p, p->host)[idx], hash, block, gen, kEntCreating);
            crash_point(Crash::create_entry);
            // under the host lock: a destroy of this CREATING object by another process of
            // this host sees the lease and defers the free
            lease_set(p, uint64_t(li), block, gen, p->host);
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
    {
        std::lock_guard<std::mutex> lk(p->lease_mu);
        p->my_leases.push_back(uint32_t(li));
    }
    *off = block + kObjHeaderBytes;
    return 0;
}


int cxk_obj_publish(cxk_pool *p, uint64_t off, unsigned flags) {
    if (p && p->read_only_v1) return -EROFS;  // a version 1 pool
    if (p && !slot_ours(p)) return -EKEYREVOKED;  // the release fence, before the run checks
    uint32_t h;
    uint64_t end;
    if (!p || (flags & ~CXK_PUBLISH_CHECKSUM)) return -EINVAL;
    const uint64_t block = block_of(p, off, &h, &end);
    if (!block || h != p->host) return -EINVAL;
    ObjHeader *o = hdr(p, block);
    if (o->magic != kObjMagic || ld(&o->state) != kCreating) return -EINVAL;
    if (!header_fits(block, end, o)) return -EBADMSG;
    const uint64_t nbytes = o->nbytes;
    if (flags & CXK_PUBLISH_CHECKSUM) {
        o->checksum = (1ull << 32) | crc32c(p->base + off, nbytes);
        o->flags = uint16_t(o->flags | kObjChecksummed);
    }
    // payload -> flush -> fence, then the header (pairs with the reader's validation)
    if (cxk::mutated(cxk::Mut::publish_payload_flush)) __atomic_thread_fence(__ATOMIC_SEQ_CST);
    else sync_out(p, p->base + off, nbytes);
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
            // any host can write any header: every field is checked against the geometry
            // before a caller maps nbytes from off
            if (!header_sane(p, f.host, f.block, o)) {
                err = -EBADMSG;
                break;
            }
            fill_stat(p, f.host, f.block, st_);
            // Non-coherent pool: the caller may read the payload in place (zero-copy views),
            // so drop any lines of it cached before the owner published (pairs with the
            // owner's flush + fence before its header write).
            if (f.host != p->host && !cxk::mutated(cxk::Mut::read_invalidate))
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
    uint32_t h;
    const uint64_t block = block_of(p, off, &h, nullptr);
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
    // (block_of found it in a run of h, a whole header before the run's end: own_block's
    // checks but the magic)
    if (h == p->host && hdr(p, block)->magic == kObjMagic && ld(&hdr(p, block)->state) == kDead) {
        HostLock hl(p);
        if (!hl.err) sweep_pending(p);
    }
    return 0;
}

int cxk_obj_destroy(cxk_pool *p, const char *name) {
    if (p && p->read_only_v1) return -EROFS;  // a version 1 pool
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
    ObjHeader *o = hdr(p, f.block);
    if (f.host != p->host) sync_in(p, o, kLine);
    if (!header_sane(p, f.host, f.block, o)) return -EBADMSG;
    fill_stat(p, f.host, f.block, st_);
    return 0;
}

int cxk_obj_stat_at(cxk_pool *p, uint64_t off, struct cxk_obj_stat *st_) {
    uint32_t h;
    uint64_t end;
    if (!p || !st_) return -EINVAL;
    ObjHeader *o = header_at(p, off, &h, &end, kObjHeaderBytes);
    if (!o || !header_fits(off - kObjHeaderBytes, end, o) || ld(&o->state) == kFree)
        return -EINVAL;
    fill_stat(p, h, off - kObjHeaderBytes, st_);
    return 0;
}

}  // extern "C"

namespace cxk::pool {
// A consistent copy of the header of a CREATING/LIVE block of host h, or false when its owner
// changed it meanwhile. The owner's create stores gen, a release fence, then the name, then the
// state (release); destroy and free change the state first. So a copy bracketed by equal
// (state, gen) reads, with an acquire fence before the second, is one object's header.
bool snapshot_header(const cxk_pool *p, uint32_t h, uint64_t block, ObjHeader *out) {
    ObjHeader *o = hdr(p, block);
    if (h != p->host) sync_in(p, o, kObjHeaderBytes);
    const uint32_t s1 = ld(&o->state);
    const uint64_t g1 = ld(&o->gen);
    if (s1 != kLive && s1 != kCreating) return false;
    std::memcpy(static_cast<void *>(out), o, sizeof *out);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);  // pairs with create's release fence after gen
    // non-coherent: the re-check reads the pool again, not the copy fetched above (which
    // would always agree with itself: the simulator found a torn name listed)
    if (h != p->host) sync_in(p, o, kLine);
    if (ldr(&o->state) != s1 || ldr(&o->gen) != g1) return false;
    out->state = s1;
    out->gen = g1;
    return header_sane(p, h, block, out);
}

void fill_stat_from(uint32_t h, uint64_t block, const ObjHeader &o, struct cxk_obj_stat *st_) {
    std::memset(st_, 0, sizeof *st_);
    std::memcpy(st_->name, o.name, std::min<size_t>(o.name_len, kNameMax));
    st_->off = block + kObjHeaderBytes;
    st_->nbytes = o.nbytes;
    st_->generation = o.gen;
    st_->checksum = o.checksum;
    st_->created_ns = o.created_ns;
    st_->host = h;
    st_->state = o.state;
}
}  // namespace cxk::pool

extern "C" {

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
            ObjHeader copy;
            if (!snapshot_header(p, h, b.off, &copy)) continue;  // changed under us: gone
            if (count < cap) fill_stat_from(h, b.off, copy, &out[count]);
            ++count;
        }
    }
    *n = count;
    return 0;
}

int cxk_obj_validate(cxk_pool *p, uint64_t off, uint64_t generation) {
    uint32_t h;
    uint64_t end;
    if (!p) return -EINVAL;
    ObjHeader *o = header_at(p, off, &h, &end, kLine);
    if (!o) return -EINVAL;
    if (!header_fits(off - kObjHeaderBytes, end, o)) return -ESTALE;  // not an object now
    return (ld(&o->state) == kLive && ld(&o->gen) == generation) ? 0 : -ESTALE;
}

int cxk_obj_read(cxk_pool *p, uint64_t off, uint64_t generation, uint64_t pos, void *dst,
                 size_t nbytes) {
    uint32_t h;
    uint64_t end;
    if (!p || (nbytes && !dst)) return -EINVAL;
    // one read of the maps for the checks before the copy (the block, its run, its header),
    // and cxk_obj_validate's own after it
    ObjHeader *o = header_at(p, off, &h, &end, kLine);
    if (!o) return -EINVAL;
    if (!header_fits(off - kObjHeaderBytes, end, o)) return -ESTALE;  // not an object now
    if (ld(&o->state) != kLive || ld(&o->gen) != generation) return -ESTALE;
    const uint64_t size = ldr(&o->nbytes), want = o->checksum;
    const int ck = checksum_state(o);
    if (size > end - off) return -ESTALE;  // changed since the check
    if (pos > size || nbytes > size - pos) return -ERANGE;
    if (h != p->host && p->nc && !cxk::mutated(cxk::Mut::read_invalidate))
        cxk_copy_invalidate(dst, p->base + off + pos, nbytes);
    else std::memcpy(dst, p->base + off + pos, nbytes);
    // acquire: the copy is done before the re-check (pairs with the destroyer's release
    // of the DEAD state and the allocator's reuse that follows it)
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (int r = cxk_obj_validate(p, off, generation)) return r;
    // a whole read of a checksummed object is checked: never wrong bytes without an error
    if (ck == -EBADMSG) return -EBADMSG;
    if (ck == 0 && pos == 0 && nbytes == size &&
        ((1ull << 32) | crc32c(dst, nbytes)) != want)
        return -EBADMSG;
    return 0;
}

int cxk_obj_verify(cxk_pool *p, uint64_t off) {
    uint32_t h;
    uint64_t end;
    if (!p) return -EINVAL;
    // an offset that no longer leads to an object (destroyed, or another host's extent map
    // now claims its extent) is the -ESTALE of a read, not a caller's error
    ObjHeader *o = header_at(p, off, &h, &end, kLine);
    if (!o || !header_fits(off - kObjHeaderBytes, end, o) || ld(&o->state) == kFree)
        return -ESTALE;
    const uint64_t want = o->checksum, size = ldr(&o->nbytes);
    if (int r = checksum_state(o)) return r;
    if (size > end - off) return -ESTALE;  // changed since the check
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

}  // extern "C"
