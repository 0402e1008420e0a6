/* cxlkit_testing.h — the test machinery of libcxlkit: crash points and protocol mutations.
 * They exist only in a testing build (CMake option CXLKIT_TESTING, which the Makefile's test
 * targets turn on); a release build has neither these functions nor the CXLKIT_MUTATE
 * variable. The fault-injection hook (cxk_fault_inject in cxlkit.h) is part of every build.
 * Unless noted, calls return 0 or -errno. */
#ifndef CXLKIT_TESTING_H
#define CXLKIT_TESTING_H
#include "cxlkit.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Crash points of the pool's mutations ----
 * The nth time (1-based, counted from this call) the pool code reaches crash point `name`,
 * the process exits at once with status 137 as if killed. Points: "create.alloc" (block
 * taken, name not yet entered), "create.entry" (name entered), "publish.header",
 * "destroy.header" (header dead, entry not yet removed), "destroy.free", "locked" (host lock
 * held), "takeover", "claim.reserved", "claim.formatted", "claim.committed", "trim.split",
 * "trim.cleared", "slot.claimed", "slot.x", "gap.split", "gap.started", "gap.cleared",
 * "upgrade.split", "upgrade.staged", "upgrade.committed", "upgrade.rewriting",
 * "fsck.entries". nth == 0 disarms; -EINVAL unknown name. */
CXK_API int cxk_pool_crash_at(const char *name, int nth);
/* At each of the next `count` passages of crash point `name` the process stops itself
 * (SIGSTOP) until a SIGCONT, so a test can interleave processes step by step; "slot.x" is a
 * claimer's nonce just written to a slot's x line. count == 0 disarms; -EINVAL unknown name
 * or count < 0. */
CXK_API int cxk_pool_stop_at(const char *name, int count);

/* ---- Protocol mutations ----
 * cxk_mutate removes one step of a coherence protocol on purpose, so a test shows that the
 * non-coherence simulator catches the missing step: "publish_payload_flush",
 * "read_invalidate", "ring_head_flush", "counter_writeback" (also CXLKIT_MUTATE=name[,name],
 * read when the library loads, for child processes). on: 1 removes the step, 0 puts it back.
 * -EINVAL for an unknown name. */
CXK_API int cxk_mutate(const char *name, int on);
/* The i-th mutation's name, NULL past the last. */
CXK_API const char *cxk_mutation_name(int i);
enum cxk_mutation { /* in the order of cxk_mutation_name */
    CXK_MUT_PUBLISH_PAYLOAD_FLUSH = 0,
    CXK_MUT_READ_INVALIDATE = 1,
    CXK_MUT_RING_HEAD_FLUSH = 2,
    CXK_MUT_COUNTER_WRITEBACK = 3,
};
/* 1 when mutation i (enum cxk_mutation) is on, else 0. */
CXK_API int cxk_mutation_on(int i);

#ifdef __cplusplus
}
#endif
#endif /* CXLKIT_TESTING_H */
