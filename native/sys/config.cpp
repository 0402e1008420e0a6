// config.cpp — the CXLKIT_* table (sys/config_table.h): one parser per type, the typed reads
// of config.h, and the C ABI that lists the table (cxk_config_*).
#include "sys/config.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "sys/sys.h"

namespace cxk::config {
namespace {

struct Entry {
    const char *name;
    cxk_config_type type;
    const char *dflt;
    unsigned long long lo, hi;
    const char *choices;
    const char *reader;
    const char *doc;
};

const Entry kTable[] = {
#define CXK_CONFIG_ROW(id, name, type, dflt, lo, hi, choices, reader, doc) \
    {name, type, dflt, lo, hi, choices, reader, doc},
    CXK_CONFIG_TABLE(CXK_CONFIG_ROW)
#undef CXK_CONFIG_ROW
};
constexpr int kCount = int(sizeof kTable / sizeof kTable[0]);
static_assert(kCount == int(Id::count_), "one Id per row");

constexpr uint64_t kForever = 0xffffffffu;  // CXK_WAIT_FOREVER: a micros value never left

// One refusal per thread, handed out once by cxk_config_error.
thread_local char t_pending[256];
thread_local char t_given[256];

const char *env_of(const Entry &e) {
    const char *v = std::getenv(e.name);
    return v && *v ? v : nullptr;
}

// Digits only (no sign, no space), within 64 bits.
bool parse_digits(const char *s, const char **end, unsigned long long *v) {
    if (*s < '0' || *s > '9') return false;
    unsigned long long x = 0;
    for (; *s >= '0' && *s <= '9'; ++s) {
        const unsigned d = unsigned(*s - '0');
        if (x > (~0ull - d) / 10) return false;
        x = x * 10 + d;
    }
    *end = s;
    *v = x;
    return true;
}

// digits [K|M|G [iB]] [B], either case.
bool parse_size(const char *s, unsigned long long *v) {
    unsigned long long x;
    if (!parse_digits(s, &s, &x)) return false;
    int shift = 0;
    switch (*s) {
        case 'k': case 'K': shift = 10; ++s; break;
        case 'm': case 'M': shift = 20; ++s; break;
        case 'g': case 'G': shift = 30; ++s; break;
        default: break;
    }
    if (shift && (*s == 'i' || *s == 'I')) {
        ++s;
        if (*s != 'b' && *s != 'B') return false;
    }
    if (*s == 'b' || *s == 'B') ++s;
    if (*s || (shift && x > (~0ull >> shift))) return false;
    *v = x << shift;
    return true;
}

// Index of word v in '|'-separated choices, or -1.
int choice_index(const char *choices, const char *v) {
    const size_t n = std::strlen(v);
    int i = 0;
    for (const char *p = choices; *p; ++i) {
        const char *bar = std::strchr(p, '|');
        const size_t len = bar ? size_t(bar - p) : std::strlen(p);
        if (len == n && std::strncmp(p, v, n) == 0) return i;
        if (!bar) break;
        p = bar + 1;
    }
    return -1;
}

// The number a value means (uint, bool, micros, size); false when malformed or out of range.
bool number_of(const Entry &e, const char *v, unsigned long long *x) {
    if (e.type == CXK_CONFIG_MICROS && std::strcmp(v, "forever") == 0) return *x = kForever, true;
    const char *end = nullptr;
    const bool ok = e.type == CXK_CONFIG_SIZE ? parse_size(v, x) : parse_digits(v, &end, x) && !*end;
    return ok && *x >= e.lo && *x <= e.hi;
}

bool fraction_of(const char *v, double *f) {
    char *end = nullptr;
    errno = 0;
    *f = std::strtod(v, &end);
    return end != v && !*end && !errno && *f >= 0 && *f <= 1;
}

// What a well-formed value of e looks like, for the message of a refused one.
std::string expected(const Entry &e) {
    const std::string range = std::to_string(e.lo) + ".." + std::to_string(e.hi);
    switch (e.type) {
        case CXK_CONFIG_UINT: return "expected decimal digits within " + range;
        case CXK_CONFIG_BOOL: return "expected 0 or 1";
        case CXK_CONFIG_CHOICE: return std::string("expected one of ") + e.choices;
        case CXK_CONFIG_MICROS:
            return "expected decimal microseconds within " + range + " or forever";
        case CXK_CONFIG_FRACTION: return "expected a number within 0..1";
        case CXK_CONFIG_SIZE:
            return "expected bytes within " + range + " (digits, then K, M or G)";
        default: return "";
    }
}

// "" when v is well-formed for e, else why not.
std::string check_value(const Entry &e, const char *v) {
    unsigned long long x;
    double f;
    switch (e.type) {
        case CXK_CONFIG_STRING: case CXK_CONFIG_PATH: case CXK_CONFIG_STRIPE: return "";
        case CXK_CONFIG_FAULTS: return fault_spec_check(v);
        case CXK_CONFIG_CHOICE: return choice_index(e.choices, v) >= 0 ? "" : expected(e);
        case CXK_CONFIG_FRACTION: return fraction_of(v, &f) ? "" : expected(e);
        default: return number_of(e, v, &x) ? "" : expected(e);
    }
}

std::string message(const Entry &e, const char *v, const std::string &why) {
    return std::string(e.name) + "=" + v + ": " + why + "; unset it or give a valid value";
}

int refuse(const Entry &e, const char *v, const std::string &why) {
    std::snprintf(t_pending, sizeof t_pending, "%s", message(e, v, why).c_str());
    return -EINVAL;
}

// The entry's value now, else its default; -EINVAL (message kept) when malformed.
int value_of(Id id, const Entry **e, const char **v) {
    *e = &kTable[int(id)];
    const char *env = env_of(**e);
    *v = env ? env : (*e)->dflt;
    if (!env) return 0;
    const std::string why = check_value(**e, env);
    return why.empty() ? 0 : refuse(**e, env, why);
}

}  // namespace

int get_u64(Id id, uint64_t *out) noexcept {
    const Entry *e;
    const char *v;
    if (int rc = value_of(id, &e, &v)) return rc;
    unsigned long long x = 0;
    if (!number_of(*e, v, &x)) return -EINVAL;  // a default outside its own range: a table bug
    *out = x;
    return 0;
}

int get_u32(Id id, uint32_t *out) noexcept {
    uint64_t x = 0;
    if (int rc = get_u64(id, &x)) return rc;
    if (x > 0xffffffffu) return refuse(kTable[int(id)], env_of(kTable[int(id)]), "above 2^32-1");
    *out = uint32_t(x);
    return 0;
}

int get_fraction(Id id, double *out) noexcept {
    const Entry *e;
    const char *v;
    if (int rc = value_of(id, &e, &v)) return rc;
    return fraction_of(v, out) ? 0 : -EINVAL;
}

int get_choice(Id id, int *out) noexcept {
    const Entry *e;
    const char *v;
    if (int rc = value_of(id, &e, &v)) return rc;
    *out = choice_index(e->choices, v);
    return *out >= 0 ? 0 : -EINVAL;
}

int get_text(Id id, std::string *out) {
    const Entry *e;
    const char *v;
    if (int rc = value_of(id, &e, &v)) return rc;
    *out = v;
    return 0;
}

int check(std::initializer_list<Id> ids) noexcept {
    for (Id id : ids) {
        const Entry *e;
        const char *v;
        if (int rc = value_of(id, &e, &v)) return rc;
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
            const Entry &e = kTable[k];
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
    const Entry &e = kTable[i];
    out->type = e.type;
    out->name = e.name;
    out->default_value = e.dflt;
    out->range = ranges[i].c_str();
    out->reader = e.reader;
    out->doc = e.doc;
    out->value = env_of(e);
    const std::string why = out->value ? check_value(e, out->value) : "";
    out->valid = why.empty();
    std::snprintf(out->why, sizeof out->why, "%s",
                  why.empty() ? "" : message(e, out->value, why).c_str());
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
        if (std::strcmp(name, cxk::config::kTable[i].name) != 0) continue;
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
