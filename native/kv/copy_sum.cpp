// copy_sum.cpp — a copy that folds the bytes it moves into the block checksum (kv.h's
// Checksum) in the same pass: each 32-byte block is loaded once, stored, and added to the
// four lanes from the register, so a checksummed copy reads its source once instead of twice
// (a memcpy, then cxk_kv_checksum over the result). The sum equals cxk_kv_checksum of the
// bytes stored.
#include <cerrno>
#include <cstring>

#include "cxlkit.h"
#include "kv/kv.h"

namespace cxk::kv {

void copy_fold(Checksum &c, void *dst, const void *src, size_t n) noexcept {
    auto *d = static_cast<uint8_t *>(dst);
    auto *s = static_cast<const uint8_t *>(src);
    if (c.ncarry == 0 && (c.words & 3) == 0 && n >= 32) {
        // the same lane order as Checksum::update's wide loop: word i feeds lane i % 4
        uint64_t la[4] = {c.a[0], c.a[1], c.a[2], c.a[3]};
        uint64_t lb[4] = {c.b[0], c.b[1], c.b[2], c.b[3]};
        size_t chunks = n / 32;
        for (size_t i = 0; i < chunks; ++i) {
            uint64_t w[4];
            std::memcpy(w, s + 32 * i, 32);
            std::memcpy(d + 32 * i, w, 32);
            for (int l = 0; l < 4; ++l) {
                la[l] += w[l];
                lb[l] += la[l];
            }
        }
        for (int l = 0; l < 4; ++l) {
            c.a[l] = la[l];
            c.b[l] = lb[l];
        }
        c.words += 4 * chunks;
        c.nbytes += 32 * chunks;
        d += 32 * chunks;
        s += 32 * chunks;
        n -= 32 * chunks;
    }
    // the tail (and any state a previous call left mid-word): copy, then fold what was stored
    std::memcpy(d, s, n);
    c.update(d, n);
}

}  // namespace cxk::kv

extern "C" int cxk_kv_copy_sum(void *dst, const void *src, size_t nbytes, uint64_t *sum) {
    if (sum == nullptr || (nbytes != 0 && (dst == nullptr || src == nullptr))) return -EINVAL;
    cxk::kv::Checksum c;
    if (nbytes) cxk::kv::copy_fold(c, dst, src, nbytes);
    *sum = c.finish();
    return 0;
}
