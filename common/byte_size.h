// Human-readable byte sizes for config files and flags: "2GiB", "512MiB", "4096".
// Thread-safe pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace overlap {

// A non-negative decimal integer with an optional unit: B; KiB, MiB, GiB, TiB
// (powers of 1024); KB, MB, GB, TB (powers of 1000). Units are case-insensitive
// and may follow a space ("2 GiB"). INVALID_ARGUMENT on anything else or when
// the result does not fit in int64.
absl::StatusOr<int64_t> ParseByteSize(absl::string_view text);

// The largest binary unit that represents `bytes` exactly: 2147483648 -> "2GiB",
// 1000 -> "1000" (no unit). ParseByteSize(FormatByteSize(x)) == x for x >= 0.
std::string FormatByteSize(int64_t bytes);

// For people, two decimals in the largest unit that fits: "2.00 GiB",
// "512.00 MiB", "17 B".
std::string FormatBytes(int64_t bytes);

}  // namespace overlap
