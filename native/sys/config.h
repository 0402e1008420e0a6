// config.h — private: typed reads of the CXLKIT_* table (native/sys/config_table.h) for the
// native code. Each read parses the environment's value now; a malformed or out-of-range one
// returns -EINVAL and leaves its message for cxk_config_error() (never the default instead).
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>

#include "cxlkit.h"
#include "sys/config_table.h"

namespace cxk::config {

enum class Id : int {
#define CXK_CONFIG_ID(id, ...) id,
    CXK_CONFIG_TABLE(CXK_CONFIG_ID)
#undef CXK_CONFIG_ID
    count_
};

// A number (uint, bool, micros: "forever" is UINT32_MAX, size: bytes). 0 or -EINVAL.
int get_u64(Id id, uint64_t *out) noexcept;
int get_u32(Id id, uint32_t *out) noexcept;
// A fraction in [0, 1]. 0 or -EINVAL.
int get_fraction(Id id, double *out) noexcept;
// A choice: the index of its word in the entry's choices (the default's when unset).
int get_choice(Id id, int *out) noexcept;
// Text (string, path, faults): the value, or the default when unset. 0 or -EINVAL.
int get_text(Id id, std::string *out);

// 0 when each of ids is unset or well-formed, else -EINVAL for the first that is not: a
// call that reads them later through a path that cannot fail refuses them up front.
int check(std::initializer_list<Id> ids) noexcept;

// The read for a caller that cannot fail (a void C ABI function, a sleep): the value, or dflt
// when it is refused. Such a variable is refused up front by a call that can fail (check).
uint32_t u32_or(Id id, uint32_t dflt) noexcept;

}  // namespace cxk::config
