// libFuzzer target for what the daemon parses from its callers and its
// operators: a submitted layer graph (parsed, then validated as SubmitJob
// does), the daemon's config, and a byte size as its keys and overlapctl's
// flags take one. Any input must come back as a Status; a crash, a sanitizer
// report, a hang or a size that does not survive its own formatting is a bug.
// Built with -DOVERLAP_BUILD_FUZZERS=ON and clang (scripts/run-sanitizers.sh fuzz).
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/byte_size.h"
#include "common/config.h"
#include "common/graph_parser.h"
#include "common/graph_validator.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<overlap::JobSpec> spec = overlap::ParseJobSpec(text, "fuzz");
  if (spec.ok()) {
    overlap::ValidationLimits limits;
    limits.device_count = 8;
    (void)overlap::ValidateJobSpec(*spec, limits);
  }
  (void)overlap::ParseDaemonConfig(text);
  absl::StatusOr<int64_t> bytes = overlap::ParseByteSize(text);
  if (bytes.ok()) {
    absl::StatusOr<int64_t> again = overlap::ParseByteSize(overlap::FormatByteSize(*bytes));
    if (!again.ok() || *again != *bytes) __builtin_trap();
    (void)overlap::FormatBytes(*bytes);
  }
  return 0;
}
