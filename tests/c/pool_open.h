/* pool_open.h — how the C tests open a pool as one host: the options they vary (size, host
 * slots, coherence), the failure printed with the host id, NULL returned. */
#ifndef CXK_TEST_POOL_OPEN_H
#define CXK_TEST_POOL_OPEN_H
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cxlkit.h"

static inline cxk_pool *test_pool_open(const char *path, int host, unsigned flags, uint64_t size,
                                       uint32_t max_hosts, int coherence) {
    struct cxk_pool_opts o;
    cxk_pool_opts_init(&o);
    o.flags = flags;
    o.size = size;
    o.host_id = host;
    o.max_hosts = max_hosts;
    o.coherence = coherence;
    cxk_pool *p = NULL;
    int r = cxk_pool_open(path, &o, &p);
    if (r) fprintf(stderr, "open %s as host %d: %s\n", path, host, strerror(-r));
    return p;
}
#endif
