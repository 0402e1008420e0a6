/* pool_open.h — how the C tests open a pool as one host: the options they vary (size, host
 * slots, coherence), the failure printed with the host id, NULL returned. */
#ifndef CXK_TEST_POOL_OPEN_H
#define CXK_TEST_POOL_OPEN_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cxlkit.h"

/* Open with options the caller filled (cxk_pool_opts_init first). */
static inline cxk_pool *test_pool_open_opts(const char *path, const struct cxk_pool_opts *o) {
    cxk_pool *p = NULL;
    int r = cxk_pool_open(path, o, &p);
    if (r) fprintf(stderr, "open %s as host %d: %s\n", path, (int)o->host_id, strerror(-r));
    return p;
}
static inline cxk_pool *test_pool_open(const char *path, int host, unsigned flags, uint64_t size,
                                       uint32_t max_hosts, int coherence) {
    struct cxk_pool_opts o;
    cxk_pool_opts_init(&o);
    o.flags = flags;
    o.size = size;
    o.host_id = host;
    o.max_hosts = max_hosts;
    o.coherence = coherence;
    return test_pool_open_opts(path, &o);
}
/* A failed CHECK exits wherever it is: the pool file goes too, but only the process that
 * named it removes it (a forked child's exit must not pull it from under its parent). */
static const char *test_pool_rm_path;
static pid_t test_pool_rm_pid;
static inline void test_pool_rm(void) {
    if (test_pool_rm_path && getpid() == test_pool_rm_pid) unlink(test_pool_rm_path);
}
static inline void test_pool_remove_at_exit(const char *path) {
    if (!test_pool_rm_path) atexit(test_pool_rm);
    test_pool_rm_path = path;
    test_pool_rm_pid = getpid();
}
#endif
