// peek.h — private: the consumer's look at its next cell for a caller that learns of a
// producer's end another way (the messaging layer: its peers' heartbeats and leases).
#pragma once
#include <cstdint>

#include "cxlkit.h"

namespace cxk::ring {

// cxk_ring_peek; with eof false an empty ring is -EAGAIN even once the producer closed it:
// the closed flag's line is not read, so an empty look costs one invalidate instead of two
// (coherence "none"), and a ring's waiting reader polls its stamp twice as often.
int peek(cxk_ring *r, const void **payload, uint32_t *nbytes, uint32_t *kind, bool eof);

}  // namespace cxk::ring
