// rpc.h — private to native/rpc/: the service object's layout and the slot header.
#pragma once
#include <cstdint>

namespace cxk::rpc {

constexpr uint64_t kSrvMagic = 0x3156525343505243ull;  // "CRPCSRV1"
constexpr uint64_t kLine = 64;

// "rpc.<name>.srv": written by the server before publish, immutable afterwards.
struct SrvHdr {
    uint64_t magic;
    uint32_t max_clients;
    uint32_t slot_bytes;
    uint32_t depth;
    uint32_t host;
    uint64_t pid;
    uint64_t boot;       // hash of the boot id: pid means something only on that machine
    uint8_t pad[24];
};
static_assert(sizeof(SrvHdr) == kLine, "one line");

constexpr uint64_t kCliMagic = 0x31494c4343505243ull;  // "CRPCCLI1"

// "rpc.<name>.<k>.cli": who holds client slot k, written by that client before it makes its
// request ring, immutable afterwards; destroyed after the ring. A slot whose holder ran on
// this boot and whose process has ended is taken back (by the server or a new client).
struct CliHdr {
    uint64_t magic;
    uint64_t pid;
    uint64_t boot;       // hash of the boot id: pid means something only on that machine
    uint32_t host;
    uint8_t pad[36];
};
static_assert(sizeof(CliHdr) == kLine, "one line");

// The first bytes of every request and reply slot (ring payload).
struct SlotHdr {
    uint64_t id;
    uint32_t method;     // request: the method; reply: unused
    int32_t status;      // reply: the server's status
};
static_assert(sizeof(SlotHdr) == 16, "slot header");

}  // namespace cxk::rpc
