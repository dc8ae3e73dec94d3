// The daemon's settings as the command line offers them. common/config.cc
// describes each key once (its parser, its printer, its doc line); the config
// file, --print-config and overlapd's flags all come from that one table, so
// every key has a flag of its name (max_spec_bytes: --max-spec-bytes) whose
// help shows the real default.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/config.h"

namespace overlap {

struct SettingDescription {
  std::string key;            // "max_spec_bytes"
  std::string doc;            // the line --print-default-config prints beside it
  std::string default_value;  // as the config file writes it: "1MiB", "true", "[]"
  bool is_bool = false;       // a switch: --KEY and --no-KEY
  bool test_only = false;     // fault injection for tests: not in the shipped config
};

// Every key, in the order the config file lists them.
std::vector<SettingDescription> DescribeSettings();

// "--max-spec-bytes" for "max_spec_bytes".
std::string FlagName(absl::string_view key);

// Sets `key` from a command-line value, read as that key's value in the
// config file would be: "8MiB", "80%", "true"; a list as YAML (["a:1", "b:2"]).
// INVALID_ARGUMENT "--flag: why" for a bad value or an unknown key.
absl::Status ApplySetting(absl::string_view key, absl::string_view value, DaemonConfig* config);

// The checks across keys a config file gets (peers against peer_listen,
// nccl_env's names), to run again once flags are applied.
absl::Status ValidateAcrossKeys(const DaemonConfig& config);

}  // namespace overlap
