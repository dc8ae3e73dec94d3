#include "common/checked_size.h"

#include <cstddef>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace overlap {
namespace {

absl::Status Overflow(absl::string_view field, absl::string_view expression) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", expression, " overflows 64 bits"));
}

// The largest byte count both int64_t and size_t hold (size_t may be 32 bits).
constexpr int64_t kMaxBytes =
    std::numeric_limits<size_t>::max() < static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
        ? static_cast<int64_t>(std::numeric_limits<size_t>::max())
        : std::numeric_limits<int64_t>::max();

}  // namespace

absl::StatusOr<int64_t> CheckedMul(int64_t a, int64_t b, absl::string_view field) {
  int64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) return Overflow(field, absl::StrCat(a, " x ", b));
  return product;
}

absl::StatusOr<int64_t> CheckedAdd(int64_t a, int64_t b, absl::string_view field) {
  int64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) return Overflow(field, absl::StrCat(a, " + ", b));
  return sum;
}

absl::StatusOr<int64_t> CheckedProduct(std::initializer_list<int64_t> factors,
                                       absl::string_view field) {
  int64_t product = 1;
  for (int64_t factor : factors) {
    if (__builtin_mul_overflow(product, factor, &product)) {
      return Overflow(field, absl::StrJoin(factors, " x "));
    }
  }
  return product;
}

absl::StatusOr<int64_t> CheckedBytes(int64_t elements, int64_t element_bytes,
                                     absl::string_view field) {
  if (elements < 0 || element_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", elements, " elements of ",
                                                   element_bytes, " bytes is not a size"));
  }
  int64_t bytes = 0;
  if (__builtin_mul_overflow(elements, element_bytes, &bytes) || bytes > kMaxBytes) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", elements, " elements of ",
                                                   element_bytes,
                                                   " bytes: the size in bytes overflows 64 bits"));
  }
  return bytes;
}

int64_t SaturatingMul(int64_t a, int64_t b) {
  int64_t product = 0;
  if (!__builtin_mul_overflow(a, b, &product)) return product;
  return (a < 0) == (b < 0) ? std::numeric_limits<int64_t>::max()
                            : std::numeric_limits<int64_t>::min();
}

absl::StatusOr<int> MeshRanks(int64_t tp, int64_t dp) {
  for (const auto& [name, value] :
       {std::pair<const char*, int64_t>{"mesh.tp", tp}, {"mesh.dp", dp}}) {
    if (value < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": must be at least 1 (got ", value, ")"));
    }
  }
  // With both at least 1, bounding the product bounds each of them too.
  int64_t ranks = 0;
  if (__builtin_mul_overflow(tp, dp, &ranks)) {
    return Overflow("mesh", absl::StrCat("tp x dp = ", tp, " x ", dp));
  }
  if (ranks > kMaxMeshRanks) {
    return absl::InvalidArgumentError(absl::StrCat("mesh: tp x dp = ", tp, " x ", dp, " = ", ranks,
                                                   " devices is more than the ", kMaxMeshRanks,
                                                   " a mesh may span"));
  }
  return static_cast<int>(ranks);
}

bool MeshCovers(int64_t tp, int64_t dp, int64_t device_count) {
  int64_t ranks = 0;
  return tp > 0 && dp > 0 && !__builtin_mul_overflow(tp, dp, &ranks) && ranks == device_count;
}

}  // namespace overlap
