/* config_parse.h — the one parser of the CXLKIT_* table (sys/config_table.h), in C: libcxlkit
 * (sys/config.cpp) and the preload library (native/preload/, C and libc only, no libcxlkit)
 * both compile config_parse.c, so a value means the same and a refused one reads the same in
 * both. Nothing here allocates (the preload library runs it inside malloc): results go into
 * the caller's buffers. Private to those two builds (hidden symbols in each). */
#ifndef CXLKIT_CONFIG_PARSE_H
#define CXLKIT_CONFIG_PARSE_H
#include <stddef.h>

#include "cxlkit.h"
#include "sys/config_table.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One row of the table (config_table.h says what each column means). */
struct cxk_cfg_row {
    const char *name;
    enum cxk_config_type type;
    const char *dflt;
    unsigned long long lo, hi;
    const char *choices;
    const char *reader;
    const char *doc;
};

enum cxk_cfg_id {
#define CXK_CFG_ID(id, ...) CXK_CFG_##id,
    CXK_CONFIG_TABLE(CXK_CFG_ID)
#undef CXK_CFG_ID
    CXK_CFG_COUNT
};

extern const struct cxk_cfg_row cxk_cfg_rows[CXK_CFG_COUNT];

/* Row id's value in the environment now; NULL when unset or empty (the default applies). */
const char *cxk_cfg_env(int id);

/* The number v means for row id (uint, bool, micros: "forever" is 2^32-1, size: bytes):
 * 1 with *x set when well-formed and within the row's range, else 0. */
int cxk_cfg_number(int id, const char *v, unsigned long long *x);
/* A fraction in [0, 1]: 1 with *f set, else 0. */
int cxk_cfg_fraction(const char *v, double *f);
/* The index of word v in '|'-separated choices, or -1. */
int cxk_cfg_choice(const char *choices, const char *v);

/* 0 when v is well-formed for row id (text, path, stripe and faults rows: their grammar is
 * their reader's, not checked here), else -EINVAL with the one-line refusal in msg:
 * "NAME=v: expected ...; unset it or give a valid value". */
int cxk_cfg_check(int id, const char *v, char *msg, size_t cap);
/* That refusal for a reason found by the reader itself (a fault spec, a range of 32 bits). */
void cxk_cfg_refusal(int id, const char *v, const char *why, char *msg, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
