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

// The same checksum as sums that add, for an image whose byte ranges are folded in pieces,
// in any order, by any thread (copy_sum.cpp): over the image's 64-bit words i, lane l = i % 4,
// a[l] = sum of w_i and c[l] = sum of (i / 4 + 1) * w_i (mod 2^64). Checksum's b follows at
// the end: b[l] = (K_l + 1) * a[l] - c[l], K_l the words of lane l in the whole image. So two
// parts merge by adding, and a 4-byte value lands as the low or high half of its word.
struct SumParts {
    uint64_t a[4] = {0, 0, 0, 0};
    uint64_t c[4] = {0, 0, 0, 0};

    // Image bytes [off, off + n) held at p. pre: off and n multiples of 4.
    void add(const void *p, uint64_t off, size_t n) noexcept;
    void merge(const SumParts &o) noexcept;
    // Checksum::finish of an image of nbytes (a multiple of 4) whose every byte was added once.
    uint64_t finish(uint64_t nbytes) const noexcept;
};

// Copy n bytes from src to dst and fold them into c in the same pass (copy_sum.cpp): the
// state afterwards equals update(dst, n)'s. pre: dst and src do not overlap.
void copy_fold(Checksum &c, void *dst, const void *src, size_t n) noexcept;

}  // namespace cxk::kv
