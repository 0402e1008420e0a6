// config.cpp — the CXLKIT_* table (sys/config_table.h) for libcxlkit: the typed reads of
// config.h over the one parser (sys/config_parse.c, which the preload library compiles too),
// and the C ABI that lists the table (cxk_config_*).
#include "sys/config.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "sys/config_parse.h"
#include "sys/sys.h"

namespace cxk::config {
namespace {

constexpr int kCount = CXK_CFG_COUNT;
static_assert(kCount == int(Id::count_), "one Id per row");

// One refusal per thread, handed out once by cxk_config_error.
thread_local char t_pending[256];
thread_local char t_given[256];

const cxk_cfg_row &row(Id id) { return cxk_cfg_rows[int(id)]; }

// "" when v is well-formed for row i, else the one-line refusal naming the variable
// (config_parse.c; a fault spec's grammar is sys's own).
std::string refusal(int i, const char *v) {
    char msg[512];
    if (cxk_cfg_rows[i].type == CXK_CONFIG_FAULTS) {
        const std::string why = fault_spec_check(v);
        if (why.empty()) return "";
        cxk_cfg_refusal(i, v, why.c_str(), msg, sizeof msg);
        return msg;
    }
    return cxk_cfg_check(i, v, msg, sizeof msg) == 0 ? "" : msg;
}

int refuse(const char *msg) {
    std::snprintf(t_pending, sizeof t_pending, "%s", msg);
    return -EINVAL;
}

// The entry's value now, else its default; -EINVAL (message kept) when malformed.
int value_of(Id id, const char **v) {
    const char *env = cxk_cfg_env(int(id));
    *v = env ? env : row(id).dflt;
    if (!env) return 0;
    const std::string msg = refusal(int(id), env);
    return msg.empty() ? 0 : refuse(msg.c_str());
}

}  // namespace

int get_u64(Id id, uint64_t *out) noexcept {
    const char *v;
    if (int rc = value_of(id, &v)) return rc;
    unsigned long long x = 0;
    if (!cxk_cfg_number(int(id), v, &x)) return -EINVAL;  // a default outside its own range: a table bug
    *out = x;
    return 0;
}

int get_u32(Id id, uint32_t *out) noexcept {
    uint64_t x = 0;
    if (int rc = get_u64(id, &x)) return rc;
    if (x > 0xffffffffu) {
        char msg[256];
        const char *v = cxk_cfg_env(int(id));
        cxk_cfg_refusal(int(id), v ? v : row(id).dflt, "above 2^32-1", msg, sizeof msg);
        return refuse(msg);
    }
    *out = uint32_t(x);
    return 0;
}

int get_fraction(Id id, double *out) noexcept {
    const char *v;
    if (int rc = value_of(id, &v)) return rc;
    return cxk_cfg_fraction(v, out) ? 0 : -EINVAL;
}

int get_choice(Id id, int *out) noexcept {
    const char *v;
    if (int rc = value_of(id, &v)) return rc;
    *out = cxk_cfg_choice(row(id).choices, v);
    return *out >= 0 ? 0 : -EINVAL;
}

int get_text(Id id, std::string *out) {
    const char *v;
    if (int rc = value_of(id, &v)) return rc;
    *out = v;
    return 0;
}

int check(std::initializer_list<Id> ids) noexcept {
    for (Id id : ids) {
        const char *v;
        if (int rc = value_of(id, &v)) return rc;
    }
    return 0;
}

uint32_t u32_or(Id id, uint32_t dflt) noexcept {
    uint32_t x = dflt;
    if (get_u32(id, &x) == 0) return x;
    t_pending[0] = '\0';  // no call of this thread's fails for it: not its error to report
    return dflt;
}

// The C ABI's view of a row.
static void fill(int i, struct cxk_config_entry *out) {
    static std::string ranges[kCount];  // built once per row, under the static's guard
    static const bool built = [] {
        for (int k = 0; k < kCount; ++k) {
            const cxk_cfg_row &e = cxk_cfg_rows[k];
            const bool num = e.type == CXK_CONFIG_UINT || e.type == CXK_CONFIG_MICROS ||
                             e.type == CXK_CONFIG_SIZE;
            ranges[k] = e.type == CXK_CONFIG_CHOICE     ? e.choices
                        : e.type == CXK_CONFIG_BOOL     ? "0|1"
                        : e.type == CXK_CONFIG_FRACTION ? "0..1"
                        : num ? std::to_string(e.lo) + ".." + std::to_string(e.hi) +
                                    (e.type == CXK_CONFIG_MICROS ? "|forever" : "")
                              : "";
        }
        return true;
    }();
    (void)built;
    const cxk_cfg_row &e = cxk_cfg_rows[i];
    out->type = e.type;
    out->name = e.name;
    out->default_value = e.dflt;
    out->range = ranges[i].c_str();
    out->reader = e.reader;
    out->doc = e.doc;
    out->value = cxk_cfg_env(i);
    const std::string why = out->value ? refusal(i, out->value) : "";
    out->valid = why.empty();
    std::snprintf(out->why, sizeof out->why, "%s", why.c_str());
}

}  // namespace cxk::config

extern "C" {

int cxk_config_count(void) { return cxk::config::kCount; }

int cxk_config_entry(int i, struct cxk_config_entry *out) {
    if (!out || out->struct_size < sizeof *out) return -EINVAL;
    if (i < 0 || i >= cxk::config::kCount) return -ERANGE;
    try {
        cxk::config::fill(i, out);
    } catch (...) {
        return -ENOMEM;
    }
    return 0;
}

int cxk_config_check(const char *name, char *why, size_t cap) {
    if (!name) return -EINVAL;
    for (int i = 0; i < cxk::config::kCount; ++i) {
        if (std::strcmp(name, cxk_cfg_rows[i].name) != 0) continue;
        struct cxk_config_entry e{};
        e.struct_size = sizeof e;
        if (int rc = cxk_config_entry(i, &e)) return rc;
        if (why && cap) std::snprintf(why, cap, "%s", e.why);
        return e.valid ? 0 : -EINVAL;
    }
    return -ENOENT;
}

const char *cxk_config_error(void) {
    std::memcpy(cxk::config::t_given, cxk::config::t_pending, sizeof cxk::config::t_given);
    cxk::config::t_pending[0] = '\0';
    return cxk::config::t_given;
}

}  // extern "C"
