/* config.c — the preload library's configuration from the environment and its decision log.
 * Runs inside malloc and before libc is fully set up: no allocation, no stdio streams. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "preload.h"

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

/* A size as docs/units.md has it: digits, then K/M/G (1024^n) optionally followed by "iB" or
 * "B", either case. 0 and the value, or -1. */
static int parse_size(const char *s, unsigned long long *out) {
    unsigned long long v;
    if (parse_uint(&s, 1ull << 50, &v) < 0) return -1;
    int shift = 0;
    switch (*s) {
    case 'k': case 'K': shift = 10; s++; break;
    case 'm': case 'M': shift = 20; s++; break;
    case 'g': case 'G': shift = 30; s++; break;
    default: break;
    }
    if (shift && (*s == 'i' || *s == 'I')) {
        s++;
        if (*s != 'b' && *s != 'B') return -1;
    }
    if (*s == 'b' || *s == 'B') s++;
    if (*s) return -1;
    *out = v << shift;
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

int cxp_config_parse(const char *stripe, const char *chunk, const char *min_size,
                     size_t page, struct cxp_config *out, char *err, size_t errcap) {
    struct cxp_config c;
    memset(&c, 0, sizeof c);
    if (!stripe || !*stripe) {
        errf(err, errcap, "CXLKIT_STRIPE is not set (expected node:weight[,...], e.g. 0:3,1:1)");
        return -1;
    }
    if (parse_stripe(stripe, &c, err, errcap) < 0) return -1;
    unsigned long long v = 2ull << 20;
    if (chunk && *chunk && (parse_size(chunk, &v) < 0 || v == 0 || v % page)) {
        errf(err, errcap, "CXLKIT_STRIPE_CHUNK=%s: expected a positive multiple of the page "
             "size (%zu), e.g. 2M", chunk, page);
        return -1;
    }
    c.chunk_bytes = (size_t)v;
    v = 2ull << 20;
    if (min_size && *min_size && (parse_size(min_size, &v) < 0 || v < page)) {
        errf(err, errcap, "CXLKIT_MIN_SIZE=%s: expected a size of at least one page (%zu), "
             "e.g. 2M", min_size, page);
        return -1;
    }
    c.min_bytes = (size_t)v;
    *out = c;
    return 0;
}

int cxp_cache_config_parse(const char *bytes, const char *count, struct cxp_config *out,
                           char *err, size_t errcap) {
    unsigned long long b = CXP_CACHE_DEFAULT_BYTES, n = CXP_CACHE_DEFAULT_COUNT;
    if (bytes && *bytes && parse_size(bytes, &b) < 0) {
        errf(err, errcap, "CXLKIT_PRELOAD_CACHE=%s: expected a size, e.g. 64M (0: no cache)",
             bytes);
        return -1;
    }
    const char *s = count;
    if (count && *count && (parse_uint(&s, CXP_CACHE_MAX_COUNT, &n) < 0 || *s)) {
        errf(err, errcap, "CXLKIT_PRELOAD_CACHE_COUNT=%s: expected a count 0..%d (0: no cache)",
             count, CXP_CACHE_MAX_COUNT);
        return -1;
    }
    out->cache_bytes = (size_t)b;
    out->cache_count = (int)n;
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
