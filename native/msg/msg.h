// msg.h — private to native/msg/: the rank object's layout in the pool, the cell format of
// messages, and the comm / request structures the messaging files share (comm.cpp: join,
// liveness, finalize; p2p.cpp: matching and progress; coll.cpp: barrier, bcast, allreduce;
// rdv.cpp: rendezvous buffers; mem.cpp: pool-resident user memory and its one-copy sends).
#pragma once
#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "cxlkit.h"
#include "ring/waiter.h"
#include "ring/wake.h"

namespace cxk::msg {

constexpr uint64_t kLine = 64;
constexpr uint64_t kRankMagic = 0x314b4e41524b5843ull;  // "CXKRANK1"
constexpr uint64_t kRdvMagic = 0x31564452584b5843ull;   // "CXKRDV1"
constexpr uint64_t kMemMagic = 0x314d454d584b5843ull;   // "CXKMEM1"
// 2: kShort cells. A rank object of another version is not joined (its rank never joins).
constexpr uint32_t kVersion = 2;

// ---- the rank object "msg.<job>.<rank>.rank", written by that rank only ----
struct RankHdr {           // line 0: written before publish, immutable afterwards
    uint64_t magic;
    uint32_t version;
    uint32_t nranks;
    uint32_t rank;
    uint32_t host;         // the rank's pool host slot
    uint64_t pid;
    uint64_t boot;         // hash of the machine's boot id: pid means something only there
    uint64_t session;      // rank 0's nonce: every rank of one run carries the same
    uint32_t domain;       // the rank's coherence domain (cxk_msg_opts.domain; 0: unknown,
                           // and in a rank object of an older library)
    uint8_t pad[12];
};
struct RankLive {          // line 1: the rank's heartbeat thread
    uint64_t beat;         // +1 every 100 ms while the rank is in the job
    uint8_t pad[56];
};
struct RankSeq {           // line 2: the rank's barrier entries so far
    uint64_t barrier;
    // same-host wake-up of the barrier (coll.cpp; zero in a rank object of an
    // older library: its peers then sleep to their futex timeout, 1 ms): both written by
    // this rank only. bwake: futex word, bumped after an entry that found a peer's bsleep
    // set; bsleep: 1 while this rank sleeps in a barrier on a peer's bwake.
    uint32_t bwake;
    uint32_t bsleep;
    uint8_t pad[48];
};
// From line 3: uint64_t ring_off[nranks], the offset of the ring this rank writes to each
// peer (0: none yet). A hint only: readers open the ring by name.
constexpr uint64_t kDirOff = 3 * kLine;
static_assert(sizeof(RankHdr) == kLine && sizeof(RankLive) == kLine && sizeof(RankSeq) == kLine,
              "one line each");
inline uint64_t rank_obj_bytes(uint32_t nranks) {
    return (kDirOff + 8ull * nranks + kLine - 1) & ~(kLine - 1);
}

// ---- rendezvous buffer "msg.<job>.<rank>.rdv.<k>": line 0 by the sender, then data ----
struct RdvHdr {
    uint64_t magic;
    uint64_t cookie;       // the message the data belongs to (written before any data)
    uint64_t ready;        // bytes of data written so far (written after them)
    uint32_t crc;          // kCrc: the message's checksum, written before ready reaches its
                           // length (computed chunk by chunk as the data goes in)
    uint32_t reserved;
    uint8_t pad[32];
};
static_assert(sizeof(RdvHdr) == kLine, "one line");

// ---- pool-resident user memory "msg.<job>.<rank>.mem.<k>" (cxk_msg_alloc_mem): line 0 by
// its rank, written before publish and immutable afterwards, then the user's bytes (written
// by that rank only; a receiver reads them between the RTS naming them and its FIN) ----
struct MemHdr {
    uint64_t magic;
    uint64_t nbytes;       // user bytes after this line
    uint8_t pad[48];
};
static_assert(sizeof(MemHdr) == kLine, "one line");

// ---- cells: the ring's kind field says what a cell holds ----
enum Kind : uint32_t {
    kEager = 1,  // MsgHdr + the first bytes; the rest in ncells - 1 kCont cells after it
    kCont = 2,   // raw bytes of the message before it
    kRts = 3,    // MsgHdr only: data in rendezvous buffer rdv_index of the sender
    kFin = 4,    // CtlMsg: the receiver copied rendezvous `cookie` out (buffer free again)
    kAck = 5,    // CtlMsg: a synchronous eager send `cookie` was matched
    kRma = 6,    // RmaHdr + operands: a one-sided operation for the receiver's window
    kRmaReply = 7,  // CtlMsg: the answer to RMA request `cookie` (value: fetched bytes)
    kDrop = 8,   // CtlMsg: the sender removed its rendezvous buffer `cookie`: drop the view
    kShort = 9,  // ShortHdr + at most kShortMax bytes: a whole message in the stamp's line
};
constexpr uint32_t kSync = 1;  // MsgHdr.flags: answer kAck when matched
// MsgHdr.flags of a kRts: the data lies in the sender's own memory object rdv_index
// ("msg.<job>.<sender>.mem.<k>") at byte rdv_off of its user bytes (one copy: the receiver
// copies straight out of it; untrusted: checked against the object before use)
constexpr uint32_t kInPool = 2;
// MsgHdr.flags: `reserved` holds the message's checksum: crc32c of its ctx, tag and length
// (hdr_crc), continued over its bytes (a rendezvous: RdvHdr.crc holds it instead). Sent by a comm in checksum mode (cxk_msg_set_checksum);
// verified by every receiver, and required by one in checksum mode.
constexpr uint32_t kCrc = 4;
constexpr uint64_t kDropMem = 1;  // kDrop's value: the cookie names a memory object, not a
                                  // rendezvous buffer
struct MsgHdr {
    uint32_t ctx;          // 0 user messages, 1 collectives
    int32_t tag;
    uint64_t len;          // message bytes
    uint64_t cookie;       // sender's id for the message (FIN / ACK name it)
    uint32_t flags;
    uint32_t ncells;       // kEager: cells the message spans, this one included
    uint64_t rdv_off;      // kRts: payload offset of the buffer (a hint; opened by name);
                           // with kInPool: the data's byte offset in the memory object
    uint32_t rdv_index;    // kRts: k of "msg.<job>.<sender>.rdv.<k>" (kInPool: of ".mem.<k>")
    uint32_t reserved;
};
// The first cell of a message of at most kShortMax bytes: header and bytes share the line of
// the cell's stamp, so on coherence "none" one flush sends it and one invalidate reads it
// (a MsgHdr leaves no byte of the message in that line).
struct ShortHdr {
    uint32_t ctx;
    int32_t tag;
    uint32_t len;          // message bytes, <= kShortMax
    uint32_t flags;        // kSync, kCrc (as MsgHdr.flags)
    uint64_t cookie;
    uint32_t crc;          // kCrc: as MsgHdr.reserved
    uint32_t reserved;
};
constexpr uint32_t kShortMax = uint32_t(kLine) - CXK_RING_CELL_HDR - sizeof(ShortHdr);
static_assert(kShortMax >= 8, "a double fits the stamp's line");
struct CtlMsg {
    uint64_t cookie;
    uint64_t value;
};
struct Ctl {
    uint32_t kind;
    uint64_t cookie;
    uint64_t value;
};

// One-sided requests (kRma). Puts of whole lines and gets go straight to the target's window
// memory; everything else is applied by the target when it reads its ring, one at a time, so
// no two hosts ever write one line and no atomic crosses hosts.
enum RmaWhat : uint16_t {
    kRmaPut = 1,      // bytes at off (parts of lines, coherence "none")
    kRmaAcc = 2,      // count elements of type, op
    kRmaFop = 3,      // one element: fetch, then op; reply value = old
    kRmaCas = 4,      // one element: compare (operand 0) and swap (operand 1); reply old
    kRmaFlush = 5,    // reply once everything before it is applied
    kRmaLock = 6,     // op = 1 shared / 2 exclusive; reply when granted
    kRmaUnlock = 7,   // release, reply (everything before it applied)
};
struct RmaHdr {
    uint32_t win;
    uint16_t what;
    uint8_t type;
    uint8_t op;
    uint64_t off;      // bytes into the target's window
    uint64_t count;    // elements (acc, fop, cas) or bytes (put)
    uint64_t cookie;   // for the reply
};

}  // namespace cxk::msg

// ---- process-local state ----
struct cxk_msg_req {
    enum Kind { kSend, kRecv } kind = kSend;
    enum State { kQueued, kActive, kDone } state = kQueued;
    const void *sbuf = nullptr;   // send
    void *rbuf = nullptr;         // recv
    uint64_t count = 0;           // send: bytes; recv: capacity
    int peer = 0;                 // send: dest; recv: source (or ANY)
    int tag = 0;
    uint32_t ctx = 0;
    unsigned flags = 0;
    uint64_t cookie = 0;          // send: id FIN/ACK will name
    int rdv = -1;                 // send: rendezvous buffer held until FIN
    int mem = -1;                 // send from pool memory: my memory object k, read by the
                                  // receiver until FIN
    cxk_msg_status status{};
};

namespace cxk::msg {

struct Unexpected {
    int src;
    int tag;
    uint32_t ctx;
    uint64_t len;
    uint32_t flags;
    uint64_t cookie;
    bool rts;                     // data still in the sender's rendezvous buffer
    uint32_t rdv_index;
    uint64_t rdv_off;             // kInPool: the data's offset in memory object rdv_index
    uint32_t crc;                 // kCrc: the checksum the sender wrote
    std::vector<uint8_t> data;    // eager: the whole message
};

// A message's checksum to verify (kCrc): the sender's, and the header's part of it.
struct CrcWant {
    uint32_t seed;                // hdr_crc of the header as received
    uint32_t want;                // MsgHdr.reserved
};

struct RmaWait {                  // an RMA request of mine awaiting its reply
    uint64_t cookie;
    int target;
    bool done = false;
    uint64_t value = 0;
};

struct RdvBuf {                   // one of my rendezvous buffers
    uint64_t off = 0;             // payload offset in the pool
    uint64_t cap = 0;             // data bytes it holds (payload - header)
    bool busy = false;            // a receiver may still copy out: until its FIN
    int peer = -1;                // busy: that receiver
    uint64_t cookie = 0;          // ... and the send's cookie its FIN names (the send itself
                                  // completed once its data was in: start_sends)
};
struct RdvView {                  // a peer's rendezvous buffer I opened (lease held)
    uint64_t off = 0, nbytes = 0, gen = 0;
};
struct MemBuf {                   // one of my pool-resident user memory objects
    uint64_t off = 0;             // payload offset in the pool (MemHdr, then the user bytes)
    uint64_t nbytes = 0;          // user bytes
    uint32_t sends = 0;           // sends from it awaiting their FIN
};

struct Peer {
    uint64_t obj_off = 0, obj_gen = 0;  // their rank object (lease held)
    uint64_t pid = 0, boot = 0;
    uint32_t host = 0;
    uint32_t domain = 0;                // their RankHdr.domain
    // messages to and from them flush and invalidate (pair_nc): false only on coherence
    // "none" for myself and for a rank of my coherence domain
    bool nc = true;
    cxk_ring *out = nullptr;            // ring I write to them
    cxk_ring *in = nullptr;             // ring they write to me
    std::deque<cxk_msg_req *> sendq;    // sends not yet started, in order
    std::deque<Ctl> ctlq;               // FIN / ACK / RMA replies to send
    std::vector<RdvView> rdv;           // their rendezvous buffers by index
    std::vector<RdvView> mem;           // their memory objects by index (views, as rdv)
    uint64_t beat = 0;                  // heartbeat last seen
    int64_t beat_seen_ns = 0;           // when it last changed
    int broken = 0;                     // -errno once their ring held garbage
    bool gone = false;
};

}  // namespace cxk::msg

struct cxk_comm {
    cxk_pool *pool = nullptr;
    uint8_t *base = nullptr;
    bool nc = false;                          // the pool: "none" or "sim" (Peer::nc per pair)
    bool sim = false;                         // the pool: "sim" (one view per host slot)
    uint32_t domain = 0;                      // cxk_msg_opts.domain
    std::string job;
    int rank = 0, nranks = 0;
    cxk_msg_opts opts{};
    uint64_t eager = 0;
    uint32_t host = 0;
    uint64_t boot = 0, session = 0;
    uint64_t obj_off = 0;                     // my rank object
    std::vector<cxk::msg::Peer> peers;
    std::deque<cxk_msg_req *> posted;         // receives not yet matched, in post order
    std::deque<cxk::msg::Unexpected> unexpected;
    std::vector<cxk_msg_req *> waiting;       // started sends awaiting FIN / ACK
    std::vector<cxk::msg::RdvBuf> rdv;        // my rendezvous buffers by index (off 0: free)
    std::vector<cxk::msg::MemBuf> mem;        // my memory objects by index (off 0: free)
    uint64_t rdv_bytes = 0;                   // their total size
    uint64_t rdv_limit = 0;                   // above it idle ones are recycled (half my
                                              // partition)
    int64_t rdv_released_ns = 0;              // when idle ones were last removed
    bool rdv_nt = false;                      // copy in with non-temporal stores ("host")
    uint64_t rdv_chunk = 256 * 1024;          // bytes behind each ready count
    uint64_t next_cookie = 1;
    uint64_t barrier_seq = 0;
    // the error a barrier of this rank failed with (0: none): every later barrier returns it
    // at once, so this rank's entry never runs ahead of peers still in the failed one (they
    // would read that as corruption, not as the loss it is)
    int barrier_failed = 0;
    uint32_t scan_next = 0;                   // next peer whose directory to look at
    uint64_t polls = 0;
    uint64_t focus_polls = 0;                 // looks of waits on one peer (p2p.cpp)
    uint64_t events = 0;                      // cells read from any ring so far (waits spin
                                              // again after progress)
    uint64_t completed = 0;                   // requests a cell completed so far (a drain
                                              // hands them back before it reads on)
    cxk_wait_opts wait{};                     // the wait policy (cxk_msg_set_wait)
    cxk_waiter waiter{};                      // wait, spin and the rings' wake-up counters
    cxk_spin spin{};                          // the adaptive spin of its waits (ring/spin.cpp)
    std::vector<cxk_ring *> sleep_on;         // a wait's in rings (Waiter::check), reused
    std::vector<cxk_win *> wins;              // by window id (nullptr once freed)
    std::vector<cxk::msg::RmaWait *> rma_waits;  // my RMA requests awaiting a reply
    int failed_rank = -1;
    // a rank object of another format version was seen while joining (another cxlkit's)
    bool foreign_version = false;
    bool crc = false;                         // checksum mode (cxk_msg_set_checksum)
    pthread_t heart{};
    bool heart_started = false;
    std::atomic<bool> heart_stop{false};
};

namespace cxk::msg {

// comm.cpp
int64_t now_ns();
std::string obj_name(const cxk_comm *c, int rank, const char *what, long index = -1);
// Publish my object `name` at off (its header written and flushed); on failure remove it
// (destroy the name, close my lease) and return the error.
int publish_own(cxk_comm *c, const std::string &name, uint64_t off);
inline RankHdr *rank_hdr(const cxk_comm *c, uint64_t off) {
    return reinterpret_cast<RankHdr *>(c->base + off);
}
// 0 while peer r may still act; -ETIMEDOUT (failed_rank = r) once it is gone.
int check_peer(cxk_comm *c, int r);
// One wait of the comm: check() after every poll that found nothing spins, yields or sleeps
// by the comm's wait policy (cxk_wait_*: spin time restarts whenever a cell arrived), and
// about every millisecond gives -ETIMEDOUT when timeout_ms passed since the wait began or a
// peer the wait depends on (one rank, or all for -1) is gone.
struct Waiter {
    cxk_comm *c;
    int need;               // rank the wait depends on, -1 every rank
    cxk_wait w;             // the policy's state (restarted on progress)
    int64_t begun_ns;       // when the wait began (timeout_ms counts from here)
    int64_t next_check_ns;  // next deadline / liveness look
    int64_t next_intr_ns;   // next call of the thread's interrupt hook (cxk_msg_set_interrupt)
    uint64_t events;        // c->events when the spin last (re)started
    Waiter(cxk_comm *comm, int need_rank);
    ~Waiter();
    // on_rings: what the wait is for arrives as a cell of an incoming ring (a message, an RTS,
    // a FIN or ACK, an RMA request or reply), so on coherence "host" it may sleep on them
    // (the same-host wake-up) when nothing of ours waits for room in a peer's ring and every
    // peer's ring to us exists; else it sleeps on the timer.
    // barrier: also sleep on that peer's barrier word (ring/wake.h Extra), with on_rings.
    int check(bool on_rings = false, const cxk::ring::Extra *barrier = nullptr);
};

// Whether messages between me and `rank` (of that domain) need the flushes of a non-coherent
// pool: on "none" not with myself nor with a rank of my non-zero domain (one machine's caches
// keep the bytes coherent); on "sim" always (each host slot sees a view of its own, and each
// rank of the MPI shim has a slot of its own).
inline bool pair_nc(const cxk_comm *c, int rank, uint32_t domain) {
    if (!c->nc) return false;
    if (c->sim) return true;
    if (rank == c->rank) return false;
    return !c->domain || domain != c->domain;
}
inline bool nc_with(const cxk_comm *c, int rank) { return c->peers[size_t(rank)].nc; }

// p2p.cpp
// The header's part of a message checksum (kCrc): crc32c of ctx, tag and len.
uint32_t hdr_crc(uint32_t ctx, int32_t tag, uint64_t len);
// crc32c continued over n bytes at p (invalidated first when nc).
uint32_t crc_more(bool nc, uint32_t crc, const void *p, uint64_t n);
// Bytes [pos, pos + n) of a message at src: the part that fits copied into dst (capacity
// cap); *crc (NULL: none) continued over the bytes as delivered, then the rest at src.
void copy_part(void *dst, uint64_t cap, uint64_t pos, const void *src, uint64_t n,
               uint32_t *crc = nullptr);
// Checksum mode: set kCrc and the checksum of r's bytes in its header m (sender side).
void seal(const cxk_comm *c, MsgHdr &m, const cxk_msg_req *r);
int progress(cxk_comm *c);
int ensure_out(cxk_comm *c, int peer);   // my ring to peer exists
void free_req(cxk_msg_req *r);
int isend_ctx(cxk_comm *c, const void *buf, uint64_t count, int dest, int tag, uint32_t ctx,
              unsigned flags, cxk_msg_req **out);
int irecv_ctx(cxk_comm *c, void *buf, uint64_t count, int source, int tag, uint32_t ctx,
              cxk_msg_req **out);
void close_rings(cxk_comm *c);
int send_ctl(cxk_comm *c, int dest);

// rdv.cpp
// The index of an idle rendezvous buffer of mine holding len bytes (made if need be);
// -EAGAIN when memory must come back first (a FIN, peers dropping views of recycled ones),
// -ENOSPC when it cannot.
int rdv_pick(cxk_comm *c, uint64_t len);
// Peer src's object `what`/index (a rendezvous buffer or a memory block), opened by name once
// (a lease) into views[index] and revalidated on each use; -EBADMSG for an index past the
// view space, a name that is gone, another host's object or one below min_bytes (untrusted).
int peer_view(cxk_comm *c, int src, const char *what, std::vector<RdvView> &views,
              uint64_t min_bytes, uint32_t index, RdvView **out);
int rdv_view(cxk_comm *c, int src, uint32_t index, RdvView **out);  // peer_view of "rdv"
// 0 when a message of len bytes fits src's rendezvous buffer `index` (opened as rdv_view),
// and *out (may be NULL) its view, valid until a view of src is opened again; -EBADMSG when
// it does not (an untrusted RTS), -ETIMEDOUT when src is gone with its buffer.
int rdv_fits(cxk_comm *c, int src, uint32_t index, uint64_t len, RdvView **out = nullptr);
// A kDrop cell from src: close my view of the buffer it names.
int rdv_drop_view(cxk_comm *c, int src, const void *pl, uint32_t n);
// A FIN from src for a send that completed when its data was in my buffer: the buffer is idle
// again. -EBADMSG when no buffer of mine waits for that FIN.
int rdv_fin(cxk_comm *c, int src, uint64_t cookie);

// mem.cpp
// The memory object of mine holding [buf, buf + len) entirely: its index, and buf's offset
// in its user bytes; -1 when the bytes are not (all) in one.
int mem_find(const cxk_comm *c, const void *buf, uint64_t len, uint64_t *off);
// Send side: r's bytes lie in my memory object k at off; write its RTS (kInPool) to peer p.
// No copy: the receiver copies out and answers FIN (r->mem = k until then).
int mem_send_start(cxk_comm *c, Peer &p, cxk_msg_req *r, int k, uint64_t off);
// [off, off + len) of src's memory object `index` (both untrusted): 0 and *data (may be NULL)
// when the bytes lie in the object, -EBADMSG when not, -ETIMEDOUT when src is gone with it.
int mem_span(cxk_comm *c, int src, uint32_t index, uint64_t off, uint64_t len,
             const uint8_t **data);
// Receive side of a send from pool memory: copy min(len, cap) bytes out of src's memory
// object `index` at `off` (both untrusted: -EBADMSG unless they lie in the object), then
// queue FIN; with crc, -EBADMSG (after the FIN) when the bytes fail their checksum.
int mem_recv(cxk_comm *c, int src, uint64_t len, uint64_t cookie, uint32_t index, uint64_t off,
             void *dst, uint64_t cap, const CrcWant *crc);
// A kDrop cell naming a memory object (value kDropMem): close my view of it.
void mem_drop_view(cxk_comm *c, int src, uint64_t index);
// finalize: my views of peers' objects closed, my objects removed.
void mem_release_all(cxk_comm *c);

// win.cpp
int rma_request(cxk_comm *c, int src, const void *pl, uint32_t n);   // a kRma cell
int rma_reply(cxk_comm *c, int src, const CtlMsg &m);                // a kRmaReply cell
void free_wins(cxk_comm *c);

}  // namespace cxk::msg
