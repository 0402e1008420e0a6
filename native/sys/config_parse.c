/* config_parse.c — the CXLKIT_* table's rows and its one parser per type (config_parse.h). */
#include "sys/config_parse.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const struct cxk_cfg_row cxk_cfg_rows[CXK_CFG_COUNT] = {
#define CXK_CFG_ROW(id, name, type, dflt, lo, hi, choices, reader, doc) \
    {name, type, dflt, lo, hi, choices, reader, doc},
    CXK_CONFIG_TABLE(CXK_CFG_ROW)
#undef CXK_CFG_ROW
};

#define FOREVER 0xffffffffull /* CXK_WAIT_FOREVER: a micros value never left */

const char *cxk_cfg_env(int id) {
    const char *v = getenv(cxk_cfg_rows[id].name);
    return v && *v ? v : NULL;
}

/* Digits only (no sign, no space), within 64 bits; *end past them. */
static int parse_digits(const char *s, const char **end, unsigned long long *v) {
    if (*s < '0' || *s > '9') return 0;
    unsigned long long x = 0;
    for (; *s >= '0' && *s <= '9'; ++s) {
        const unsigned d = (unsigned)(*s - '0');
        if (x > (~0ull - d) / 10) return 0;
        x = x * 10 + d;
    }
    *end = s;
    *v = x;
    return 1;
}

/* digits [K|M|G [iB]] [B], either case. */
static int parse_size(const char *s, unsigned long long *v) {
    unsigned long long x;
    if (!parse_digits(s, &s, &x)) return 0;
    int shift = 0;
    switch (*s) {
        case 'k': case 'K': shift = 10; ++s; break;
        case 'm': case 'M': shift = 20; ++s; break;
        case 'g': case 'G': shift = 30; ++s; break;
        default: break;
    }
    if (shift && (*s == 'i' || *s == 'I')) {
        ++s;
        if (*s != 'b' && *s != 'B') return 0;
    }
    if (*s == 'b' || *s == 'B') ++s;
    if (*s || (shift && x > (~0ull >> shift))) return 0;
    *v = x << shift;
    return 1;
}

int cxk_cfg_choice(const char *choices, const char *v) {
    const size_t n = strlen(v);
    int i = 0;
    for (const char *p = choices; *p; ++i) {
        const char *bar = strchr(p, '|');
        const size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && strncmp(p, v, n) == 0) return i;
        if (!bar) break;
        p = bar + 1;
    }
    return -1;
}

int cxk_cfg_number(int id, const char *v, unsigned long long *x) {
    const struct cxk_cfg_row *r = &cxk_cfg_rows[id];
    if (r->type == CXK_CONFIG_MICROS && strcmp(v, "forever") == 0) {
        *x = FOREVER;
        return 1;
    }
    const char *end = NULL;
    const int ok = r->type == CXK_CONFIG_SIZE ? parse_size(v, x)
                                              : parse_digits(v, &end, x) && !*end;
    return ok && *x >= r->lo && *x <= r->hi;
}

int cxk_cfg_fraction(const char *v, double *f) {
    char *end = NULL;
    errno = 0;
    *f = strtod(v, &end);
    return end != v && !*end && !errno && *f >= 0 && *f <= 1;
}

/* What a well-formed value of row id looks like, for the refusal of another. */
static void expected(const struct cxk_cfg_row *r, char *out, size_t cap) {
    switch (r->type) {
        case CXK_CONFIG_UINT:
            snprintf(out, cap, "expected decimal digits within %llu..%llu", r->lo, r->hi);
            break;
        case CXK_CONFIG_BOOL: snprintf(out, cap, "expected 0 or 1"); break;
        case CXK_CONFIG_CHOICE: snprintf(out, cap, "expected one of %s", r->choices); break;
        case CXK_CONFIG_MICROS:
            snprintf(out, cap, "expected decimal microseconds within %llu..%llu or forever",
                     r->lo, r->hi);
            break;
        case CXK_CONFIG_FRACTION: snprintf(out, cap, "expected a number within 0..1"); break;
        case CXK_CONFIG_SIZE:
            snprintf(out, cap, "expected bytes within %llu..%llu (digits, then K, M or G)",
                     r->lo, r->hi);
            break;
        default: snprintf(out, cap, "not well-formed"); break;
    }
}

static int well_formed(int id, const char *v) {
    unsigned long long x;
    double f;
    switch (cxk_cfg_rows[id].type) {
        case CXK_CONFIG_STRING: case CXK_CONFIG_PATH: case CXK_CONFIG_STRIPE:
        case CXK_CONFIG_FAULTS: return 1;
        case CXK_CONFIG_CHOICE: return cxk_cfg_choice(cxk_cfg_rows[id].choices, v) >= 0;
        case CXK_CONFIG_FRACTION: return cxk_cfg_fraction(v, &f);
        default: return cxk_cfg_number(id, v, &x);
    }
}

void cxk_cfg_refusal(int id, const char *v, const char *why, char *msg, size_t cap) {
    snprintf(msg, cap, "%s=%s: %s; unset it or give a valid value", cxk_cfg_rows[id].name, v,
             why);
}

int cxk_cfg_check(int id, const char *v, char *msg, size_t cap) {
    if (well_formed(id, v)) return 0;
    char why[128];
    expected(&cxk_cfg_rows[id], why, sizeof why);
    cxk_cfg_refusal(id, v, why, msg, cap);
    return -EINVAL;
}
