/* config.c — the preload library's configuration from the environment, read through the
 * CXLKIT_* table's one parser (sys/config_parse.c, compiled in here too), and its decision
 * log. Runs inside malloc and before libc is fully set up: no allocation, no stdio streams. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "preload.h"
#include "sys/config_parse.h"

int cxp_log_fd = -1;

static void errf(char *err, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void errf(char *err, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
}

/* Decimal digits at *s into *v (no sign, no overflow past limit). Advances *s. */
static int parse_uint(const char **s, unsigned long long limit, unsigned long long *v) {
    const char *p = *s;
    unsigned long long x = 0;
    if (*p < '0' || *p > '9') return -1;
    while (*p >= '0' && *p <= '9') {
        x = x * 10 + (unsigned)(*p - '0');
        if (x > limit) return -1;
        p++;
    }
    *s = p;
    *v = x;
    return 0;
}

static int parse_stripe(const char *spec, struct cxp_config *c, char *err, size_t cap) {
    const char *s = spec;
    c->nnodes = 0;
    c->round = 0;
    for (;;) {
        unsigned long long node, w;
        if (c->nnodes == CXP_MAX_NODES) {
            errf(err, cap, "CXLKIT_STRIPE=%s: more than %d nodes", spec, CXP_MAX_NODES);
            return -1;
        }
        if (parse_uint(&s, 1u << 20, &node) < 0 || *s++ != ':' ||
            parse_uint(&s, 1u << 20, &w) < 0 || (*s && *s != ',')) {
            errf(err, cap, "CXLKIT_STRIPE=%s: expected node:weight[,node:weight...], "
                 "e.g. 0:3,1:1", spec);
            return -1;
        }
        if (node > CXP_MAX_NODE_ID) {
            errf(err, cap, "CXLKIT_STRIPE=%s: node %llu out of range 0..%d", spec, node,
                 CXP_MAX_NODE_ID);
            return -1;
        }
        if (w < 1 || w > CXP_MAX_WEIGHT) {
            errf(err, cap, "CXLKIT_STRIPE=%s: weight %llu of node %llu out of range 1..%d",
                 spec, w, node, CXP_MAX_WEIGHT);
            return -1;
        }
        for (int i = 0; i < c->nnodes; i++)
            if (c->nodes[i] == (int)node) {
                errf(err, cap, "CXLKIT_STRIPE=%s: node %llu named twice", spec, node);
                return -1;
            }
        c->nodes[c->nnodes] = (int)node;
        c->weights[c->nnodes] = (unsigned)w;
        c->round += (unsigned)w;
        c->nnodes++;
        if (!*s) return 0;
        s++;  /* ',' */
    }
}

/* Row id of the table as a number: the environment's value (refused as libcxlkit and
 * `cxlkit config` refuse it, config_parse.c), else the row's default. 0, or -1 with the
 * one-line refusal in err. */
static int table_number(int id, unsigned long long *v, char *err, size_t cap) {
    const char *s = cxk_cfg_env(id);
    if (!s) return cxk_cfg_number(id, cxk_cfg_rows[id].dflt, v) ? 0 : -1;
    if (cxk_cfg_check(id, s, err, cap) < 0) return -1;
    return cxk_cfg_number(id, s, v) ? 0 : -1;
}

/* A value the table accepts that the preload still cannot use (a page-size rule): refused
 * in the table's words. */
static int refuse_page(int id, const char *rule, size_t page, char *err, size_t cap) {
    char why[96];
    snprintf(why, sizeof why, "expected %s (%zu), e.g. 2M", rule, page);
    cxk_cfg_refusal(id, cxk_cfg_env(id), why, err, cap);
    return -1;
}

int cxp_config_read(size_t page, struct cxp_config *out, char *err, size_t errcap) {
    struct cxp_config c;
    memset(&c, 0, sizeof c);
    const char *stripe = cxk_cfg_env(CXK_CFG_STRIPE);
    if (!stripe) {
        errf(err, errcap, "CXLKIT_STRIPE is not set (expected node:weight[,...], e.g. 0:3,1:1)");
        return -1;
    }
    if (parse_stripe(stripe, &c, err, errcap) < 0) return -1;
    unsigned long long chunk, min, bytes, count;
    if (table_number(CXK_CFG_STRIPE_CHUNK, &chunk, err, errcap) < 0) return -1;
    if (chunk % page) return refuse_page(CXK_CFG_STRIPE_CHUNK, "a multiple of the page size",
                                         page, err, errcap);
    if (table_number(CXK_CFG_MIN_SIZE, &min, err, errcap) < 0) return -1;
    if (min < page) return refuse_page(CXK_CFG_MIN_SIZE, "at least one page", page, err, errcap);
    if (table_number(CXK_CFG_PRELOAD_CACHE, &bytes, err, errcap) < 0 ||
        table_number(CXK_CFG_PRELOAD_CACHE_COUNT, &count, err, errcap) < 0)
        return -1;
    c.chunk_bytes = (size_t)chunk;
    c.min_bytes = (size_t)min;
    c.cache_bytes = (size_t)bytes;
    c.cache_count = (int)count;  /* the table's range, 0..CXP_CACHE_MAX_COUNT */
    *out = c;
    return 0;
}

void cxp_config_format(const struct cxp_config *c, char *buf, size_t cap) {
    size_t at = 0;
    buf[0] = 0;
    for (int i = 0; i < c->nnodes && at < cap; i++) {
        int n = snprintf(buf + at, cap - at, "%s%d:%u", i ? "," : "", c->nodes[i],
                         c->weights[i]);
        if (n < 0) break;
        at += (size_t)n;
    }
}

static void vline(int fd, const char *fmt, va_list ap) {
    char line[512];
    int n = snprintf(line, sizeof line, "cxlkit-preload[%d]: ", (int)getpid());
    if (n < 0) return;
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    if (m < 0) return;
    size_t len = (size_t)n + (size_t)m;
    if (len > sizeof line - 2) len = sizeof line - 2;
    line[len++] = '\n';
    int saved = errno;  /* a wrapper must leave errno as the real call set it */
    ssize_t w = write(fd, line, len);
    (void)w;
    errno = saved;
}

void cxp_log(const char *fmt, ...) {
    if (cxp_log_fd < 0) return;
    va_list ap;
    va_start(ap, fmt);
    vline(cxp_log_fd, fmt, ap);
    va_end(ap);
}

void cxp_warn(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vline(2, fmt, ap);
    va_end(ap);
    if (cxp_log_fd >= 0 && cxp_log_fd != 2) {
        va_start(ap, fmt);
        vline(cxp_log_fd, fmt, ap);
        va_end(ap);
    }
}
