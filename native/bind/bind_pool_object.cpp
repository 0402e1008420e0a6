// bind_pool_object.cpp — PoolObject (bind_pool_object.h): a leased object's calls. Every
// range Python passes is checked against the object, then against the pool's data region
// (or this host's extents, to write) under a hold of the pool: no address outlives a call.
#include <cstring>
#include <string>

#include "bind/bind_pool_object.h"
#ifdef CXLKIT_TESTING
#include "cxlkit_testing.h"
#endif

namespace cxk::py {
namespace {

// The counter_writeback mutation drops add_u64's write-back (testing builds only).
bool counter_writeback_mutated() {
#ifdef CXLKIT_TESTING
    return cxk_mutation_on(CXK_MUT_COUNTER_WRITEBACK) != 0;
#else
    return false;
#endif
}

[[noreturn]] void not_a_word(uint64_t off, const std::string &name) {
    throw nb::value_error(("offset " + std::to_string(off) + " in object " + name +
                           ": not a multiple of 8 (a u64 word)").c_str());
}

}  // namespace

PoolObject::PoolObject(nb::handle handle, const std::string &name, uint64_t off,
                       uint64_t nbytes, uint64_t gen, uint32_t host, bool writable)
    : owner_(nb::borrow(handle)), h_(&nb::cast<PoolHandle &>(handle)), name_(name), off_(off),
      nbytes_(nbytes), gen_(gen), host_(host), writable_(writable) {
    h_->hold();  // the closed error once the pool is closing
    if (writable && host != h_->host_id())
        raise_errno(EPERM, "object " + name + " (owned by host " + std::to_string(host) +
                               ") in pool " + h_->label());
    h_->attach(this);
}

PoolObject::~PoolObject() {
    // GIL held: a closing handle is still mapped (close() unmaps only after it clears its
    // cxk_pool with the GIL), and its close drops every lease anyway
    if (!closed_ && h_->raw()) cxk_obj_close(h_->raw(), off_);
    h_->detach(this);
}

PoolHold PoolObject::hold() const {
    if (closed_) throw nb::value_error(("object " + name_ + " is closed").c_str());
    return h_->hold();
}

// as hold(), then PermissionError for an object opened read-only (the closed error first)
PoolHold PoolObject::hold_writable() const {
    if (!writable_ && !closed()) raise_errno(EACCES, what() + " (opened read-only)");
    return hold();
}

// [pos, pos + n) of the payload from Python's arguments (n None: to the end); ValueError
// naming the object when it does not fit
std::pair<uint64_t, uint64_t> PoolObject::range(int64_t pos, std::optional<int64_t> n) const {
    if (pos < 0 || uint64_t(pos) > nbytes_ || (n && *n < 0)) bad_range(pos, n.value_or(0));
    const uint64_t len = n ? uint64_t(*n) : nbytes_ - uint64_t(pos);
    if (len > nbytes_ - uint64_t(pos)) bad_range(pos, len);
    return {uint64_t(pos), len};
}

// every offset names a whole aligned u64 of the payload; else ValueError naming the object
void PoolObject::check_words(const U64Array &offsets) const {
    const uint64_t *off = offsets.data();
    for (size_t i = 0; i < offsets.shape(0); ++i) {
        if (off[i] % 8) not_a_word(off[i], name_);
        if (nbytes_ < 8 || off[i] > nbytes_ - 8) bad_range(off[i], 8);
    }
}

ExportedRange PoolObject::exported() const {
    // no new view once close() has begun: it checked for views before marking closing
    if (closed()) return {nullptr, 0, true, "pool object is closed"};
    return {static_cast<char *>(cxk_pool_base(h_->raw())) + off_, Py_ssize_t(nbytes_),
            !writable_, nullptr};
}

uintptr_t PoolObject::address() const {
    PoolHold use = hold();
    return uintptr_t(use.base() + off_);
}

void PoolObject::close() {
    if (closed_) return;
    if (exports > 0)
        throw nb::buffer_error(("object " + name_ +
                                " is closed while views of it exist; drop them first").c_str());
    if (!h_->closed()) {  // else the pool's close drops the lease
        PoolHold use = h_->hold();
        check(cxk_obj_close(use.get(), off_), what());
    }
    closed_ = true;
}

void PoolObject::publish(bool checksum) {
    PoolHold use = hold();
    int r;
    {
        nb::gil_scoped_release unlock;
        r = cxk_obj_publish(use.get(), off_, checksum ? CXK_PUBLISH_CHECKSUM : 0);
    }
    check(r, what());
}

bool PoolObject::valid() const {
    PoolHold use = hold();
    return cxk_obj_validate(use.get(), off_, gen_) == 0;
}

void PoolObject::verify() {
    PoolHold use = hold();
    int r;
    {
        nb::gil_scoped_release unlock;
        r = cxk_obj_verify(use.get(), off_);
    }
    check(r, what());
}

void PoolObject::read_into(nb::handle dst, uint64_t pos) {
    PoolHold use = hold();
    Buffer v(dst, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS);
    int r;
    {
        nb::gil_scoped_release unlock;
        r = cxk_obj_read(use.get(), off_, gen_, pos, v.data(), v.size());
    }
    v.release();
    check(r, what());
}

void PoolObject::write_at(int64_t pos, nb::handle data) {
    PoolHold use = hold_writable();
    Buffer v(data, PyBUF_C_CONTIGUOUS);
    auto [at, n] = range(pos, int64_t(v.size()));
    use.check_range(off_ + at, n, true);  // a forged PoolObject writes nowhere else
    char *dst = use.base() + off_ + at;
    if (n >= (1u << 20)) {
        nb::gil_scoped_release unlock;
        std::memmove(dst, v.data(), n);
    } else {
        std::memmove(dst, v.data(), n);
    }
}

void PoolObject::flush(int64_t offset, std::optional<int64_t> nbytes) {
    PoolHold use = hold();
    auto [at, n] = range(offset, nbytes);
    use.check_range(off_ + at, n, false);
    cxk_pool_flush(use.get(), off_ + at, n);
}

void PoolObject::invalidate(int64_t offset, std::optional<int64_t> nbytes) {
    PoolHold use = hold();
    auto [at, n] = range(offset, nbytes);
    use.check_range(off_ + at, n, false);
    cxk_pool_invalidate(use.get(), off_ + at, n);
}

void PoolObject::store_u64(const U64Array &offsets, uint64_t value) {
    PoolHold use = hold_writable();
    check_words(offsets);
    use.check_range(off_, nbytes_, true);
    char *b = use.base() + off_;
    const uint64_t *off = offsets.data();
    for (size_t i = 0; i < offsets.shape(0); ++i)
        __atomic_store_n(reinterpret_cast<uint64_t *>(b + off[i]), value, __ATOMIC_RELAXED);
}

U64Out PoolObject::load_u64(const U64Array &offsets) const {
    PoolHold use = hold();
    check_words(offsets);
    use.check_range(off_, nbytes_, false);
    const size_t n = offsets.shape(0);
    auto *out = new uint64_t[n];
    nb::capsule owner(out, [](void *q) noexcept { delete[] static_cast<uint64_t *>(q); });
    const char *b = use.base() + off_;
    const uint64_t *off = offsets.data();
    for (size_t i = 0; i < n; ++i)
        out[i] = __atomic_load_n(reinterpret_cast<const uint64_t *>(b + off[i]),
                                 __ATOMIC_RELAXED);
    return U64Out(out, {n}, owner);
}

// One u64 of the payload at an aligned offset inside the object (never past its end,
// whatever the object's size), added to atomically: processes of one host are one coherence
// domain, so a relaxed add is exact among them; other hosts only read it. Only the owner's
// writable objects. On a non-coherent pool the word's line is written back so other hosts'
// reads (which invalidate first) see it.
uint64_t PoolObject::add_u64(uint64_t offset, uint64_t value) {
    PoolHold use = hold_writable();
    if (offset % 8) not_a_word(offset, name_);
    if (nbytes_ < 8 || offset > nbytes_ - 8) bad_range(offset, 8);
    use.check_range(off_ + offset, 8, true);
    auto *w = reinterpret_cast<uint64_t *>(use.base() + off_ + offset);
    const uint64_t now = __atomic_add_fetch(w, value, __ATOMIC_RELAXED);
    if (!counter_writeback_mutated()) cxk_pool_flush(use.get(), off_ + offset, 8);
    return now;
}

// flush_at / invalidate_at: sync (cxk_flush or cxk_invalidate, which fences each range itself)
// nbytes at each payload offset when the pool is non-coherent, then one full fence, as
// cxk_pool_flush / cxk_pool_invalidate end with: it orders the write-backs before our later
// stores and our later loads after the dropped lines (the pairs of the other host's
// invalidate / flush)
void PoolObject::sync_each(const U64Array &offsets, int64_t nbytes,
                           void (*sync)(const void *, size_t)) {
    PoolHold use = hold();
    if (nbytes < 0 || uint64_t(nbytes) > nbytes_) bad_range(0, nbytes);
    const uint64_t n = uint64_t(nbytes), *off = offsets.data();
    const size_t count = offsets.shape(0);
    for (size_t i = 0; i < count; ++i)
        if (off[i] > nbytes_ - n) bad_range(off[i], n);
    use.check_range(off_, nbytes_, false);
    if (use.geometry().nc) {
        const char *b = use.base() + off_;
        for (size_t i = 0; i < count; ++i) sync(b + off[i], n);
    }
    cxk_mfence();
}

void PoolObject::flush_at(const U64Array &offsets, int64_t nbytes) {
    sync_each(offsets, nbytes, cxk_flush);
}

void PoolObject::invalidate_at(const U64Array &offsets, int64_t nbytes) {
    sync_each(offsets, nbytes, cxk_invalidate);
}

}  // namespace cxk::py
