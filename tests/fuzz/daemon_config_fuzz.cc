// Fuzz target: the daemon's config file (ParseDaemonConfig). A refusal must be
// INVALID_ARGUMENT; a config that parses must come back from its own YAML
// (ConfigYaml, what `overlapd --print-config` shows) to the same YAML.
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/config.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace overlap;
  const absl::StatusOr<DaemonConfig> config = ParseDaemonConfig(fuzz::Text(data, size));
  if (!config.ok()) {
    FUZZ_CHECK(absl::IsInvalidArgument(config.status()));
    return 0;
  }
  const std::string yaml = ConfigYaml(*config);
  const absl::StatusOr<DaemonConfig> again = ParseDaemonConfig(yaml);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(ConfigYaml(*again) == yaml);
  return 0;
}
