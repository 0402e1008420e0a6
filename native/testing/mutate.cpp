// mutate.cpp — testing builds only: the names of the protocol mutations (prim/mutate.h) and
// their switches: cxk_mutate, and CXLKIT_MUTATE=name[,name...] read when the library loads
// (for child processes).
#include "prim/mutate.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cxlkit_testing.h"

namespace cxk {

std::atomic<bool> g_mut_any{false};
std::atomic<bool> g_mut[int(Mut::count_)];

namespace {
const char *const kNames[] = {"publish_payload_flush", "read_invalidate", "ring_head_flush",
                              "counter_writeback"};
static_assert(sizeof kNames / sizeof *kNames == size_t(Mut::count_), "a name per mutation");
static_assert(int(Mut::counter_writeback) == CXK_MUT_COUNTER_WRITEBACK &&
              int(Mut::ring_head_flush) == CXK_MUT_RING_HEAD_FLUSH, "the C ABI's numbers");

__attribute__((constructor)) void mutations_from_env() {
    const char *e = std::getenv("CXLKIT_MUTATE");
    if (!e) return;
    std::string s(e);
    for (size_t at = 0; at <= s.size();) {
        size_t end = s.find(',', at);
        if (end == std::string::npos) end = s.size();
        cxk_mutate(s.substr(at, end - at).c_str(), 1);
        at = end + 1;
    }
}
}  // namespace

}  // namespace cxk

extern "C" {

int cxk_mutate(const char *name, int on) {
    if (!name) return -EINVAL;
    for (int i = 0; i < int(cxk::Mut::count_); ++i) {
        if (std::strcmp(name, cxk::kNames[i]) != 0) continue;
        cxk::g_mut[i].store(on != 0, std::memory_order_relaxed);
        bool any = false;
        for (auto &m : cxk::g_mut) any |= m.load(std::memory_order_relaxed);
        cxk::g_mut_any.store(any, std::memory_order_relaxed);
        return 0;
    }
    return -EINVAL;
}

int cxk_mutation_on(int i) {
    return i >= 0 && i < int(cxk::Mut::count_) && cxk::mutated(cxk::Mut(i)) ? 1 : 0;
}

const char *cxk_mutation_name(int i) {
    return i >= 0 && i < int(cxk::Mut::count_) ? cxk::kNames[i] : nullptr;
}

}  // extern "C"
