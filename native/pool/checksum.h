// checksum.h — private: crc32c of a byte range (seeded by crc for a running checksum).
#pragma once
#include <cstddef>
#include <cstdint>

namespace cxk::pool {
uint32_t crc32c(const void *data, size_t n, uint32_t crc = 0);
}  // namespace cxk::pool
