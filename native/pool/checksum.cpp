// checksum.cpp — crc32c (Castagnoli): SSE4.2 when the CPU has it, else a table. The checksum
// of superblocks, object headers and payloads.
#include "pool/checksum.h"

#include "cxlkit.h"

#include <cstring>

namespace cxk::pool {

namespace {
uint32_t crc_table_entry(uint32_t c) {
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1u)));
    return c;
}
__attribute__((target("sse4.2"))) uint32_t crc32c_hw(const uint8_t *d, size_t n, uint32_t c) {
    uint64_t c64 = c;
    for (; n >= 8; n -= 8, d += 8) {
        uint64_t v;
        std::memcpy(&v, d, 8);
        c64 = __builtin_ia32_crc32di(c64, v);
    }
    c = uint32_t(c64);
    for (; n; --n, ++d) c = __builtin_ia32_crc32qi(c, *d);
    return c;
}
}  // namespace

uint32_t crc32c(const void *data, size_t n, uint32_t crc) {
    static const bool hw = (cxk_cpu_features() & CXK_CPU_SSE42) != 0;
    const uint8_t *d = static_cast<const uint8_t *>(data);
    crc = ~crc;
    if (hw) {
        crc = crc32c_hw(d, n, crc);
    } else {
        static uint32_t table[256];
        static bool init = [] {
            for (uint32_t i = 0; i < 256; ++i) table[i] = crc_table_entry(i);
            return true;
        }();
        (void)init;
        for (size_t i = 0; i < n; ++i) crc = table[(crc ^ d[i]) & 0xff] ^ (crc >> 8);
    }
    return ~crc;
}

}  // namespace cxk::pool
