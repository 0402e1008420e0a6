// objects.h — private: name lookups across hosts and the checks of caller-given offsets
// (objects.cpp).
#pragma once
#include <cstddef>
#include <cstdint>

#include "pool/pool.h"

namespace cxk::pool {
struct Found {
    uint32_t host;
    uint64_t block, gen, entry;
    uint32_t state;  // entry state
};
// The name in host h's table (CREATING or LIVE) whose header matches it.
bool find_in(const cxk_pool *p, uint32_t h, const char *name, size_t len, uint64_t hash,
             Found *f);
// First host (by slot) holding the name published, else one holding it reserved.
bool find_any(const cxk_pool *p, const char *name, size_t len, uint64_t hash, Found *f);
bool utf8_valid(const char *s, size_t n);
// 0, -EINVAL (null), -ENAMETOOLONG or -EILSEQ (not UTF-8).
int check_name(const char *name, size_t *len);
// The header's payload checksum: 0 recorded, -ENODATA none, -EBADMSG dropped or malformed.
int checksum_state(const ObjHeader *o);
void fill_stat(const cxk_pool *p, uint32_t h, uint64_t block, struct cxk_obj_stat *st_);
bool snapshot_header(const cxk_pool *p, uint32_t h, uint64_t block, ObjHeader *out);
void fill_stat_from(uint32_t h, uint64_t block, const ObjHeader &o, struct cxk_obj_stat *st_);
// The block of a payload offset inside a run of host *host, or 0; *run_end (may be null):
// the end of that run.
uint64_t block_of(const cxk_pool *p, uint64_t off, uint32_t *host, uint64_t *run_end = nullptr);
// The end of host h's run holding block (0: in no run of h).
uint64_t block_run_end(const cxk_pool *p, uint32_t h, uint64_t block);
// A block that fits a run of host h, a payload that fits the block, a name length in
// range: nothing is read through a header that fails this.
bool header_sane(const cxk_pool *p, uint32_t h, uint64_t block, const ObjHeader *o);
// The same against the end of the run that holds block, as the caller just read it from the
// maps (0: in no run): no map is read.
bool header_fits(uint64_t block, uint64_t run_end, const ObjHeader *o);
}  // namespace cxk::pool
