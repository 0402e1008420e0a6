// bind_pool_object.h — private to the pool's binding files: PoolObject, a leased object of a
// PoolHandle that exports its payload through the buffer protocol (memoryview / numpy /
// torch views without copies). Each method is one bound call (bind_pool.cpp).
#pragma once
#include <nanobind/ndarray.h>

#include <optional>
#include <string>
#include <utility>

#include "bind/bind_pool.h"

namespace cxk::py {

using U64Array = nb::ndarray<const uint64_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
using U64Out = nb::ndarray<nb::numpy, uint64_t, nb::ndim<1>>;

class PoolObject {
  public:
    // adopts the lease that PoolHandle.create/open took for (off, gen); the closed error once
    // the pool is closing, PermissionError for a writable object of another host
    PoolObject(nb::handle handle, const std::string &name, uint64_t off, uint64_t nbytes,
               uint64_t gen, uint32_t host, bool writable);
    ~PoolObject();
    PoolObject(const PoolObject &) = delete;
    PoolObject &operator=(const PoolObject &) = delete;

    const std::string &name() const { return name_; }
    uint64_t offset() const { return off_; }
    uint64_t nbytes() const { return nbytes_; }
    uint64_t generation() const { return gen_; }
    uint32_t host() const { return host_; }
    bool writable() const { return writable_; }
    bool closed() const { return closed_ || h_->closed(); }
    bool has_views() const { return exports > 0; }
    void mark_closed() { closed_ = true; }  // the pool's close dropped the lease
    uintptr_t address() const;
    void close();

    void publish(bool checksum);
    bool valid() const;
    void verify();
    void read_into(nb::handle dst, uint64_t pos);
    void write_at(int64_t pos, nb::handle data);
    void flush(int64_t offset, std::optional<int64_t> nbytes);
    void invalidate(int64_t offset, std::optional<int64_t> nbytes);
    void store_u64(const U64Array &offsets, uint64_t value);
    U64Out load_u64(const U64Array &offsets) const;
    uint64_t add_u64(uint64_t offset, uint64_t value);
    void flush_at(const U64Array &offsets, int64_t nbytes);
    void invalidate_at(const U64Array &offsets, int64_t nbytes);

    // the buffer protocol's side (buffer_slots<PoolObject>)
    ExportedRange exported() const;
    Py_ssize_t exports = 0;

  private:
    std::string what() const { return "object " + name_ + " in pool " + h_->label(); }
    PoolHold hold() const;
    PoolHold hold_writable() const;
    template <typename Pos, typename N> [[noreturn]] void bad_range(Pos pos, N n) const {
        throw nb::value_error(("range [" + std::to_string(pos) + ", +" + std::to_string(n) +
                               ") outside object " + name_ + " of " + std::to_string(nbytes_) +
                               " bytes").c_str());
    }
    std::pair<uint64_t, uint64_t> range(int64_t pos, std::optional<int64_t> n) const;
    void check_words(const U64Array &offsets) const;
    void sync_each(const U64Array &offsets, int64_t nbytes, void (*sync)(const void *, size_t));

    nb::object owner_;  // the PoolHandle: keeps the handle alive while we exist
    PoolHandle *h_;
    std::string name_;
    uint64_t off_, nbytes_, gen_;
    uint32_t host_;
    bool writable_;
    bool closed_ = false;
};

}  // namespace cxk::py
