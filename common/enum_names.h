// An enum's names as one table, so that its Name and Parse functions read the
// same rows and cannot drift apart. Header only, no state.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"

namespace overlap {

template <typename Enum>
struct EnumName {
  Enum value;
  const char* name;
};

// The name `table` gives `value`; "unknown" for a value it lacks.
template <typename Enum, size_t N>
std::string NameOf(const EnumName<Enum> (&table)[N], Enum value) {
  for (const EnumName<Enum>& row : table) {
    if (row.value == value) return row.name;
  }
  return "unknown";
}

// The value `table` names `name`. INVALID_ARGUMENT otherwise, as
// `unknown KIND "NAME" (expected a, b, c)` with the names in the table's order.
template <typename Enum, size_t N>
absl::StatusOr<Enum> ParseName(const EnumName<Enum> (&table)[N], absl::string_view name,
                               absl::string_view kind) {
  std::vector<absl::string_view> names;
  for (const EnumName<Enum>& row : table) {
    if (name == row.name) return row.value;
    names.push_back(row.name);
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown ", kind, " \"", absl::CHexEscape(name),
                                                 "\" (expected ", absl::StrJoin(names, ", "), ")"));
}

}  // namespace overlap
