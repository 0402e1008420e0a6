// mutate.h — private: switches that remove one step of a coherence protocol on purpose, so
// tests show the simulator catches the missing step and coherent memory does not. They exist
// only in a testing build (CXLKIT_TESTING, native/testing/mutate.cpp); in a release build
// mutated() is a constant false and the compiler drops the branch.
#pragma once
#include <atomic>

namespace cxk {

enum class Mut : int {
    publish_payload_flush,   // cxk_obj_publish: the payload is not written back before LIVE
    read_invalidate,         // cxk_obj_open / cxk_obj_read: another host's payload not invalidated
    ring_head_flush,         // the ring consumer's head index is stored but not written back
    counter_writeback,       // PoolObject.add_u64: the counter's line is not written back
    count_
};

#ifdef CXLKIT_TESTING
extern std::atomic<bool> g_mut_any;
extern std::atomic<bool> g_mut[int(Mut::count_)];

// Is step m removed? (cxk_mutate / CXLKIT_MUTATE turn them on.)
inline bool mutated(Mut m) {
    return __builtin_expect(g_mut_any.load(std::memory_order_relaxed), 0) &&
           g_mut[int(m)].load(std::memory_order_relaxed);
}
#else
constexpr bool mutated(Mut) { return false; }
#endif

}  // namespace cxk
