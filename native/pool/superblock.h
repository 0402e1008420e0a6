// superblock.h — private: geometry, formatting and validation of the superblock.
#pragma once
#include <cstddef>
#include <cstdint>

#include "pool/pool.h"

namespace cxk::pool {
uint64_t round_up(uint64_t v, uint64_t a);
// The layout of a pool of total bytes: 0, -ERANGE (too small) or -EINVAL.
int geometry(uint64_t total, const cxk_pool_opts &o, uint32_t nbackings, Superblock *sb);
// Write the layout (magic last). dirty: the medium may hold old bytes (zero the metadata).
int format(cxk_pool *p, const Superblock &sb, bool dirty);
bool all_zero(const uint8_t *b, size_t n);
// data_off's alignment: extents are claimed, reserved and mapped in these units from it.
constexpr uint64_t kDataAlign = 65536;
// Read-only checks of a superblock against the bytes behind it (mapped: the mapping's size,
// or the file's; base must hold kSbBytes): 0 with *out filled, or -EMEDIUMTYPE /
// -EPROTONOSUPPORT / -EBADMSG / -ENXIO / -EINVAL. With -EBADMSG, *why (when why is given)
// names the field or rule that is broken, as static text.
int validate(const uint8_t *base, uint64_t mapped, uint32_t nbackings, Superblock *out,
             const char **why = nullptr);
}  // namespace cxk::pool
