// memops_raw.h — private: the instructions behind cxk_flush and cxk_sfence without the
// simulator's check (coherence "sim"), so a benchmark can price that check in one run.
#pragma once
#include <cstddef>

namespace cxk::prim {

// Write back the lines of [addr, addr + nbytes) (clwb, else clflushopt, else clflush).
// pre: nbytes > 0.
void flush_raw(const void *addr, size_t nbytes);
void sfence_raw();

}  // namespace cxk::prim
