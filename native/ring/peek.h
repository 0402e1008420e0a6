// peek.h — private: the consumer's look at its next cell for a caller that learns of a
// producer's end another way (the messaging layer: its peers' heartbeats and leases).
#pragma once
#include <cstdint>

#include "cxlkit.h"

namespace cxk::ring {

// cxk_ring_peek for a caller that reads every cell as it arrives and learns of the
// producer's end another way. drain true: an empty ring is -EAGAIN even once the producer
// closed it (the closed flag's line is not read: an empty look costs one invalidate on
// coherence "none", not two), and the head is published every batch cells only, never on
// an empty look (a drained ring's producer is at most batch - 1 cells short of the whole
// ring, batch <= ncells / 8: more than the half one message may fill, so no send waits for
// the credit; the empty look right after a message costs no flush and fence).
int peek(cxk_ring *r, const void **payload, uint32_t *nbytes, uint32_t *kind, bool drain);

}  // namespace cxk::ring
