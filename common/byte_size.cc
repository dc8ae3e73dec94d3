#include "common/byte_size.h"

#include <limits>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace overlap {
namespace {

struct Unit {
  const char* name;  // lower case
  int64_t multiplier;
};

constexpr Unit kUnits[] = {
    {"", 1},
    {"b", 1},
    {"kib", int64_t{1} << 10},
    {"mib", int64_t{1} << 20},
    {"gib", int64_t{1} << 30},
    {"tib", int64_t{1} << 40},
    {"kb", 1000},
    {"mb", 1000 * 1000},
    {"gb", 1000 * 1000 * 1000},
    {"tb", int64_t{1000} * 1000 * 1000 * 1000},
};

absl::Status Invalid(absl::string_view text, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(why, " (got \"", absl::CHexEscape(text), "\")"));
}

}  // namespace

absl::StatusOr<int64_t> ParseByteSize(absl::string_view text) {
  const absl::string_view trimmed = absl::StripAsciiWhitespace(text);
  size_t digits = 0;
  while (digits < trimmed.size() &&
         absl::ascii_isdigit(static_cast<unsigned char>(trimmed[digits]))) {
    ++digits;
  }
  constexpr absl::string_view kExpected = "must be a byte size like 4096, 512MiB or 2GiB";
  if (digits == 0) return Invalid(text, kExpected);
  const std::string unit =
      absl::AsciiStrToLower(absl::StripLeadingAsciiWhitespace(trimmed.substr(digits)));
  int64_t number = 0;
  if (!absl::SimpleAtoi(trimmed.substr(0, digits), &number)) {
    return Invalid(text, "byte size does not fit in 64 bits");
  }
  for (const Unit& u : kUnits) {
    if (unit != u.name) continue;
    if (number > std::numeric_limits<int64_t>::max() / u.multiplier) {
      return Invalid(text, "byte size does not fit in 64 bits");
    }
    return number * u.multiplier;
  }
  return Invalid(text, kExpected);
}

std::string FormatByteSize(int64_t bytes) {
  static constexpr Unit kBinary[] = {{"TiB", int64_t{1} << 40},
                                     {"GiB", int64_t{1} << 30},
                                     {"MiB", int64_t{1} << 20},
                                     {"KiB", int64_t{1} << 10}};
  if (bytes > 0) {
    for (const Unit& u : kBinary) {
      if (bytes % u.multiplier == 0) return absl::StrCat(bytes / u.multiplier, u.name);
    }
  }
  return absl::StrCat(bytes);
}

std::string FormatBytes(int64_t bytes) {
  constexpr double kKiB = 1024.0;
  const double b = static_cast<double>(bytes);
  if (b >= kKiB * kKiB * kKiB) return absl::StrFormat("%.2f GiB", b / (kKiB * kKiB * kKiB));
  if (b >= kKiB * kKiB) return absl::StrFormat("%.2f MiB", b / (kKiB * kKiB));
  if (b >= kKiB) return absl::StrFormat("%.2f KiB", b / kKiB);
  return absl::StrCat(bytes, " B");
}

}  // namespace overlap
