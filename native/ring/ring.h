// ring.h — private: the on-media layout of a ring (single producer, single consumer, fixed
// cells in a pool object) and the handle both sides hold. docs/msg.md has the protocol.
#pragma once
#include <cstdint>

#include "cxlkit.h"
#include "ring/waiter.h"

namespace cxk::ring {

constexpr uint64_t kMagic = 0x31474e49524b5843ull;  // "CXKRING1" little-endian
// 2: the wake-up words (HeadLine::sleeping, ProdLine::wake). A version-1 ring is
// refused (-EBADMSG), as is a version-2 ring by a version-1 library: a peer that never
// wakes a sleeping consumer would cost it a safety-net timeout per message.
constexpr uint32_t kVersion = 2;
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

// Line 1: written by the consumer only.
struct HeadLine {
    uint64_t head;      // cells consumed so far (a running count)
    // Same-host wake-up (coherence "host" only; wake.cpp has the protocol): 1 while the
    // consumer is (about to be) asleep in FUTEX_WAIT on ProdLine::wake, else 0. The producer
    // only reads it: any other value makes it issue a needless FUTEX_WAKE, nothing worse.
    uint32_t sleeping;
    uint32_t reserved0;
    uint8_t pad[48];
};
// Line 2: written by the producer only.
struct ProdLine {
    uint64_t closed;  // 1: the producer is done; the consumer drains, then sees -EPIPE
    // The futex word of the same-host wake-up: bumped (then FUTEX_WAKE) by the producer
    // after a publish that found HeadLine::sleeping set. The consumer only waits on it, with
    // a timeout: a word no correct producer writes delays a wake-up, never hangs it.
    uint32_t wake;
    uint32_t reserved0;
    uint8_t pad[48];
};
static_assert(sizeof(HeadLine) == kLine && sizeof(ProdLine) == kLine, "one line each");

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
    uint64_t stamped = 0;          // producer: cells [stamped, pos) await cxk_ring_publish
    bool peeked = false;           // consumer: the cell at pos was returned by peek
    // Same-host wake-up (wake.cpp): usable while the pool is coherent ("host") and no futex
    // call failed for good on this mapping; the counters are cxk_ring_wake_stats's.
    bool wake = false;
    struct cxk_ring_wake_stats wst {};
    cxk_waiter waiter{};  // its waits take a policy per call: wake-up counters only
};

namespace cxk::ring {
// Both sides of r are of one coherence domain (messaging knows it from its peers' rank
// objects; the pool's coherence says "none" for all): no flush or invalidate from here on.
// Both sides must say so, before either uses the ring.
void set_coherent(cxk_ring *r);
}  // namespace cxk::ring
