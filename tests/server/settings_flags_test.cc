// overlapd's flags come from the one table of settings (common/config.cc):
// every config key has a flag of its name, --help shows each one's real
// default, a flag overrides the file only when given, and a bad value is a
// usage error (exit 2) naming the flag.
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/daemon_settings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/server/test_util.h"

namespace overlap {
namespace {

using ::testing::HasSubstr;

struct Outcome {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

Outcome Overlapd(const std::string& args) {
  Outcome run;
  FILE* pipe = ::popen(absl::StrCat(OVERLAPD_BIN, " ", args, " 2>&1").c_str(), "r");
  if (pipe == nullptr) return run;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) run.output.append(buffer, n);
  const int status = ::pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

// The help lines of one flag: its names' line, and the description that
// CLI11 puts on the next line when the names are long.
std::string HelpOf(const std::string& help, const std::string& flag) {
  const std::vector<std::string> lines = absl::StrSplit(help, '\n');
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string names = lines[i].substr(0, lines[i].find(' ', 2));
    for (absl::string_view name : absl::StrSplit(absl::StripLeadingAsciiWhitespace(names), ',')) {
      if (name == flag || absl::StartsWith(name, flag + " ")) {
        return i + 1 < lines.size() ? lines[i] + "\n" + lines[i + 1] : lines[i];
      }
    }
  }
  return "";
}

TEST(SettingsFlagsTest, EveryKeyHasItsFlagAndHelpShowsItsRealDefault) {
  const Outcome help = Overlapd("--help");
  ASSERT_EQ(help.exit_code, 0) << help.output;
  EXPECT_THAT(help.output, ::testing::Not(HasSubstr("{false}")));
  EXPECT_THAT(help.output, ::testing::Not(HasSubstr("{true}")));
  const std::vector<SettingDescription> settings = DescribeSettings();
  ASSERT_GT(settings.size(), 40u);
  for (const SettingDescription& s : settings) {
    const std::string lines = HelpOf(help.output, FlagName(s.key));
    ASSERT_FALSE(lines.empty()) << s.key << " has no flag " << FlagName(s.key);
    EXPECT_THAT(lines, HasSubstr(absl::StrCat("(default: ", s.default_value, ")"))) << s.key;
    if (s.is_bool) {
      EXPECT_FALSE(HelpOf(help.output, "--no-" + FlagName(s.key).substr(2)).empty()) << s.key;
    }
  }
  // The defaults shown are what the daemon runs with.
  EXPECT_THAT(HelpOf(help.output, "--launch-gate"), HasSubstr("(default: true)"));
  // The shipped config lists each key commented out at that default, the test-only ones not.
  const Outcome defaults = Overlapd("--print-default-config");
  for (const SettingDescription& s : settings) {
    const std::string line = absl::StrCat("\n#", s.key, ": ", s.default_value);
    if (s.test_only) {
      EXPECT_THAT(defaults.output, ::testing::Not(HasSubstr(s.key + ":"))) << s.key;
    } else {
      EXPECT_THAT(defaults.output, HasSubstr(line)) << s.key;
    }
  }
}

TEST(SettingsFlagsTest, AFlagOverridesTheFileOnlyWhenGiven) {
  testing::TempDir dir;
  const std::string config = dir.path() + "/o.yaml";
  std::ofstream(config) << "launch_gate: false\nmax_spec_bytes: 2MiB\npreheat_ms: 10\n"
                           "peer_listen: \"127.0.0.1:7000\"\n";
  const Outcome run = Overlapd(absl::StrCat(
      "--config ", config,
      " --launch-gate --max-spec-bytes 8MiB --host-devices 3 --pool-bytes-per-device 80% "
      "--peers '[\"127.0.0.1:7001\", \"127.0.0.1:7002\"]' --nccl-env '[NCCL_DEBUG=INFO]' "
      "--no-graph-replay --print-config"));
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("launch_gate: true "));
  EXPECT_THAT(run.output, HasSubstr("max_spec_bytes: 8MiB "));
  EXPECT_THAT(run.output, HasSubstr("preheat_ms: 10 "));  // the file's, no flag given
  EXPECT_THAT(run.output, HasSubstr("host_device_count: 3 "));
  EXPECT_THAT(run.output, HasSubstr("pool_bytes_per_device: 80% "));
  EXPECT_THAT(run.output, HasSubstr("peers: [\"127.0.0.1:7001\", \"127.0.0.1:7002\"] "));
  EXPECT_THAT(run.output, HasSubstr("nccl_env: [\"NCCL_DEBUG=INFO\"] "));
  EXPECT_THAT(run.output, HasSubstr("graph_replay: false "));
  // A value that starts as YAML would is still the text given.
  const Outcome path = Overlapd("--state-dir '[odd]#dir' --print-config");
  EXPECT_THAT(path.output, HasSubstr("state_dir: \"[odd]#dir\""));
}

TEST(SettingsFlagsTest, ABadValueIsAUsageErrorNamingTheFlag) {
  const struct {
    std::string args;
    std::string says;
  } cases[] = {
      {"--max-spec-bytes 0", "--max-spec-bytes: must be greater than zero"},
      {"--ranks-per-gpu 9", "--ranks-per-gpu: "},
      {"--backend gpu", "--backend: must be auto, cuda or host"},
      {"--host-devices two", "--host-device-count: "},
      {"--preheat-ms -1", "--preheat-ms: must be a non-negative number"},
      {"--peers '[\"127.0.0.1:1\"]'", "peers: needs peer_listen"},
      {"--nccl-env '[FOO=1]'", "nccl_env[0]: \"FOO=1\" is not NCCL_NAME=value"},
  };
  for (const auto& c : cases) {
    const Outcome run = Overlapd(c.args + " --print-config");
    EXPECT_EQ(run.exit_code, 2) << c.args << "\n" << run.output;
    EXPECT_THAT(run.output, HasSubstr(c.says)) << c.args;
  }
}

}  // namespace
}  // namespace overlap
