// ring.h — private: the on-media layout of a ring (single producer, single consumer, fixed
// cells in a pool object) and the handle both sides hold. docs/msg.md has the protocol.
#pragma once
#include <cstdint>

#include "cxlkit.h"

namespace cxk::ring {

constexpr uint64_t kMagic = 0x31474e49524b5843ull;  // "CXKRING1" little-endian
constexpr uint32_t kVersion = 1;
constexpr uint64_t kLine = 64;
constexpr uint32_t kCellHdr = 16;                   // stamp + length + kind
constexpr uint32_t kMaxCellBytes = 1u << 20;
constexpr uint32_t kMaxCells = 1u << 20;

// Line 0: written once by the creator before the object is published; immutable after.
struct Header {
    uint64_t magic;
    uint32_t version;
    uint32_t cell_bytes;   // multiple of 64, 64..kMaxCellBytes
    uint32_t ncells;       // power of two, 2..kMaxCells
    uint32_t reserved0;
    uint64_t cells_off;    // bytes from the ring start to cell 0 (== CXK_RING_HDR_BYTES)
    uint8_t reserved[32];
};
static_assert(sizeof(Header) == kLine, "one line");

// Line 1: written by the consumer only: cells consumed so far (a running count).
struct HeadLine {
    uint64_t head;
    uint8_t pad[56];
};
// Line 2: written by the producer only.
struct ProdLine {
    uint64_t closed;  // 1: the producer is done; the consumer drains, then sees -EPIPE
    uint8_t pad[56];
};

// The first 16 bytes of every cell (line-aligned), written by the producer only. stamp is
// written last: ring index + 1 of the message the cell holds (the cell's "tail index").
struct CellHdr {
    uint64_t stamp;
    uint32_t nbytes;
    uint32_t kind;
};
static_assert(sizeof(CellHdr) == kCellHdr, "cell header");

}  // namespace cxk::ring

struct cxk_ring {
    cxk_pool *pool = nullptr;
    uint8_t *base = nullptr;       // ring start in this mapping
    uint64_t off = 0;              // ring start, pool offset
    uint64_t obj_off = 0;          // object payload holding our lease (0: none)
    bool nc = false;               // coherence "none": flush on publish, invalidate on read
    int role = 0;                  // CXK_RING_PRODUCER / CXK_RING_CONSUMER
    uint32_t cell_bytes = 0, ncells = 0, mask = 0;
    uint64_t pos = 0;              // producer: next index to write; consumer: next to read
    uint64_t head_seen = 0;        // producer: last head read (credit)
    uint64_t head_pub = 0;         // consumer: head last published
    uint32_t batch = 1;            // consumer: publish head every `batch` cells
    bool reserved = false;         // producer: a cell is reserved and not committed
    bool peeked = false;           // consumer: the cell at pos was returned by peek
};
