// crash.h — private: the crash points of the pool's mutations (tests arm them by name). They
// exist only in a testing build (CXLKIT_TESTING, native/testing/crash.cpp); in a release build
// crash_point() is an empty inline function.
#pragma once

namespace cxk::pool {
enum class Crash { create_alloc, create_entry, publish_header, destroy_header, destroy_free,
                   locked, takeover, claim_reserved, claim_formatted,
                   claim_committed, trim_split, trim_cleared, slot_claimed, slot_x,
                   gap_split, gap_started, gap_cleared,
                   upgrade_split, upgrade_staged, upgrade_committed, upgrade_rewriting,
                   fsck_entries, count_ };
#ifdef CXLKIT_TESTING
// Exits the process (status 137, as a SIGKILL) at the armed passage; stops it (SIGSTOP) at each
// passage armed by cxk_pool_stop_at; else returns at once.
void crash_point(Crash c);
#else
inline void crash_point(Crash) {}
#endif
}  // namespace cxk::pool
