// kv.h — private to native/kv.cpp and its binding: the streaming checksum state, so a copy
// loop can fold bytes in as it writes them and still equal cxk_kv_checksum of the whole image.
#pragma once
#include <cstddef>
#include <cstdint>

namespace cxk::kv {

// Fletcher-style sums over 64-bit little-endian words, word i feeding lane i % 4; bytes that do
// not fill a word wait in `carry` until the next update or finish() (which zero-pads them).
struct Checksum {
    uint64_t a[4] = {0, 0, 0, 0};
    uint64_t b[4] = {0, 0, 0, 0};
    uint64_t words = 0;   // words folded so far
    uint64_t nbytes = 0;  // bytes seen so far
    uint8_t carry[8] = {};
    unsigned ncarry = 0;

    void update(const void *p, size_t n) noexcept;
    uint64_t finish() noexcept;  // never 0
};

// Copy n bytes from src to dst and fold them into c in the same pass (copy_sum.cpp): the
// state afterwards equals update(dst, n)'s. pre: dst and src do not overlap.
void copy_fold(Checksum &c, void *dst, const void *src, size_t n) noexcept;

}  // namespace cxk::kv
