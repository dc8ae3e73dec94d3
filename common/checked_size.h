// Size arithmetic on numbers a user wrote: shapes, mesh degrees, device and
// chunk counts, bytes. Every product or sum of such numbers goes through here,
// in 64 bits with an overflow check, so that a graph whose sizes wrap (a mesh
// tp x dp = 6 x 715827883 is 2 in 32 bits) is refused by name instead of
// sizing a loop or a buffer. The validator, the planner and the runner use the
// same functions, so they agree on what fits.
//
// Errors are INVALID_ARGUMENT and start with the field they are about
// ("mesh: tp x dp = 6 x 715827883 = ..."). Thread-safe: pure functions.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace overlap {

// The most ranks a mesh may span: each of tp and dp, and tp x dp. Far above
// any cluster a graph runs on, and small enough that every group list built
// from a mesh stays a few hundred KiB.
inline constexpr int kMaxMeshRanks = 1 << 16;

// a x b, or "<field>: a x b overflows 64 bits".
absl::StatusOr<int64_t> CheckedMul(int64_t a, int64_t b, absl::string_view field);
// a + b, or "<field>: a + b overflows 64 bits".
absl::StatusOr<int64_t> CheckedAdd(int64_t a, int64_t b, absl::string_view field);
// The product of `factors` (1 for none), or "<field>: a x b x ... overflows 64 bits".
absl::StatusOr<int64_t> CheckedProduct(std::initializer_list<int64_t> factors,
                                       absl::string_view field);
// elements x element_bytes, a byte count that fits both int64 and size_t;
// negative elements are refused too.
absl::StatusOr<int64_t> CheckedBytes(int64_t elements, int64_t element_bytes,
                                     absl::string_view field);

// a x b, clamped to the int64 range: for estimates that must not wrap but
// need no error (the planner's piece counts of an already checked op).
int64_t SaturatingMul(int64_t a, int64_t b);

// A mesh's device count, tp x dp: each at least 1 and the product at most
// kMaxMeshRanks. Errors name mesh.tp, mesh.dp or mesh.
absl::StatusOr<int> MeshRanks(int64_t tp, int64_t dp);
// Whether tp x dp is exactly `device_count`, computed without wrapping: the
// group builders (GroupsOf) loop over tp and dp only when it is.
bool MeshCovers(int64_t tp, int64_t dp, int64_t device_count);

}  // namespace overlap
