/* msg_pair.h — what the two-rank messaging tests share: a byte pattern a receiver can check,
 * and one forked rank's life (join a job on its pool, run its side, finalize, close). */
#ifndef CXK_TEST_MSG_PAIR_H
#define CXK_TEST_MSG_PAIR_H
#include <stddef.h>

#include "cxlkit.h"

static inline void fill(unsigned char *b, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; ++i) b[i] = (unsigned char)(seed * 131 + i * 7);
}
static inline int same(const unsigned char *b, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; ++i)
        if (b[i] != (unsigned char)(seed * 131 + i * 7)) return 0;
    return 1;
}

/* Rank r of a 2-rank job named job on pool p (NULL: not opened): rank 0 runs sender, rank 1
 * receiver. The child's exit status: the side's result, 99 no pool, 98 no join, 97 the
 * finalize failed. */
static inline int msg_pair_rank(cxk_pool *p, const char *job, int r, int (*sender)(cxk_comm *),
                                int (*receiver)(cxk_comm *)) {
    if (!p) return 99;
    struct cxk_msg_opts o;
    cxk_msg_opts_init(&o);
    o.join_ms = 20000;
    o.timeout_ms = 60000;
    cxk_comm *c = NULL;
    if (cxk_msg_init(p, job, r, 2, &o, &c)) return 98;
    int res = r == 0 ? sender(c) : receiver(c);
    if (cxk_msg_finalize(c)) res = 97;
    cxk_pool_close(p);
    return res;
}
#endif
