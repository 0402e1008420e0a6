/* xcore.h — the cross-core copy baseline of osu memcpy (xcore.c): what any two-process
 * transport can reach on this machine, measured with two threads on two CPUs. */
#ifndef CXLKIT_OSU_XCORE_H
#define CXLKIT_OSU_XCORE_H
#include <stddef.h>

/* MB/s of a receiver thread copying an n-byte buffer of a sender thread out `window` times
 * per window, windows handed over by flags as osu bw's messages are; written: the sender
 * rewrites the buffer before every window, else it wrote it once and holds it. 0 when the
 * process may run on one CPU only. Exits 3 when a copy differs from its source. */
double xcore_rate(size_t n, int window, int written);
/* The two CPUs it uses ("0,1"), or why there are none. */
const char *xcore_cpus(void);
#endif
