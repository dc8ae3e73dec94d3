// Fuzz target: byte sizes as the config's keys and overlapctl's flags take
// them (ParseByteSize), and the pool size (ParsePoolSize: a size or a share of
// the GPU). Whatever parses must survive its own formatting (FormatByteSize,
// FormatPoolSize) unchanged; a refusal must be INVALID_ARGUMENT.
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/byte_size.h"
#include "common/config.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace overlap;
  const std::string text = fuzz::Text(data, size);
  const absl::StatusOr<int64_t> bytes = ParseByteSize(text);
  if (bytes.ok()) {
    FUZZ_CHECK(*bytes >= 0);
    const absl::StatusOr<int64_t> again = ParseByteSize(FormatByteSize(*bytes));
    FUZZ_CHECK(again.ok() && *again == *bytes);
    FUZZ_CHECK(!FormatBytes(*bytes).empty());
  } else {
    FUZZ_CHECK(absl::IsInvalidArgument(bytes.status()));
  }

  DaemonConfig pool;
  const absl::Status parsed = ParsePoolSize(text, &pool);
  if (!parsed.ok()) {
    FUZZ_CHECK(absl::IsInvalidArgument(parsed));
    return 0;
  }
  DaemonConfig again;
  FUZZ_CHECK(ParsePoolSize(FormatPoolSize(pool), &again).ok());
  FUZZ_CHECK(FormatPoolSize(again) == FormatPoolSize(pool));
  FUZZ_CHECK(again.pool_bytes_per_device == pool.pool_bytes_per_device);
  return 0;
}
