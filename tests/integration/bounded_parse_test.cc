// Specs built to make the parser take memory, through the real daemon: a
// MiB of `[` (yaml-cpp read it all ahead, 480 MiB a call, and kept it), the
// most values the pre-scan lets through, one at a time and sixteen at once,
// through submit and validate. Each is answered with its code within a
// generous deadline; the daemon's peak memory stays under a bound measured
// for it, and afterwards it is idle with its memory back within 64 MiB of
// where it was. And the text rules: UTF-16 without a byte-order mark, YAML
// tags, and names that show as nothing.
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/harness.h"

namespace overlap::testing {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;

constexpr size_t kMaxSpecBytes = 1 << 20;  // the daemon's default max_spec_bytes
constexpr auto kAnswerWithin = std::chrono::seconds(20);


void ResetPeak(pid_t pid) { std::ofstream("/proc/" + std::to_string(pid) + "/clear_refs") << "5"; }

// A list of the most values the pre-scan takes, on one line: it passes the
// pre-scan, and yaml-cpp then holds every token of it at once.
std::string MostValues() {
  std::string text = "[1";
  for (int i = 1; i < 199990; ++i) text += ",1";
  return text + "]";
}

class BoundedParseTest : public DaemonTest {
 protected:
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_.File(name);
    WriteFileOrDie(path, text);
    return path;
  }

  // Runs `overlapctl COMMAND path` and expects exit 3 with one of `codes`.
  RunResult Refused(const std::string& command, const std::string& path,
                    const std::vector<std::string>& codes = {"INVALID_ARGUMENT"}) {
    const auto start = Clock::now();
    RunResult r = daemon_->Ctl({command, path}, std::chrono::seconds(60));
    EXPECT_LT(Clock::now() - start, kAnswerWithin) << command << " " << path;
    EXPECT_EQ(r.exit_code, 3) << Describe(r);
    bool known = false;
    for (const std::string& code : codes) {
      known |= r.err.find("overlapctl: " + code + ": ") != std::string::npos;
    }
    EXPECT_TRUE(known) << r.err.substr(0, 300);
    return r;
  }

  // Idle again, its memory back within 64 MiB of `rss_before`.
  void ExpectSettled(int64_t rss_before) {
    EXPECT_TRUE(BecomesIdle(daemon_->pid(), std::chrono::seconds(20))) << "a thread kept a core";
    EXPECT_LT(ProcessRssBytes(daemon_->pid()), rss_before + (64 << 20))
        << "RSS " << (ProcessRssBytes(daemon_->pid()) >> 20) << " MiB, " << (rss_before >> 20)
        << " MiB before";
    EXPECT_EQ(daemon_->Ctl({"node"}).exit_code, 0);
  }

  int64_t SettledRss() {
    EXPECT_TRUE(BecomesIdle(daemon_->pid()));
    return ProcessRssBytes(daemon_->pid());
  }
};

TEST_F(BoundedParseTest, AMebibyteOfBracketsIsRefusedAtOnceThroughSubmitAndValidate) {
  StartDaemon();
  const std::string brackets = Write("brackets.yaml", std::string(kMaxSpecBytes, '['));
  const std::string values = Write("values.json", MostValues());
  const int64_t rss_before = SettledRss();
  ResetPeak(daemon_->pid());
  for (const char* command : {"submit", "validate"}) {
    RunResult r = Refused(command, brackets);
    EXPECT_THAT(r.err, HasSubstr("line 1, column 33: lists and mappings nested more than 32 deep"));
    r = Refused(command, values);
    EXPECT_THAT(r.err, HasSubstr("job spec must be a mapping"));
  }
  const int64_t peak = PeakRssBytes(daemon_->pid());
  std::printf("one call at a time: RSS %lld MiB before, peak %lld MiB\n",
              static_cast<long long>(rss_before >> 20), static_cast<long long>(peak >> 20));
  EXPECT_LT(peak, rss_before + (192 << 20));
  ExpectSettled(rss_before);
}

// Sixteen at once (one user's share of the requests in flight): brackets the
// pre-scan refuses, and lists that pass it and are parsed, which share the
// parse budget; what does not fit in it in time is RESOURCE_EXHAUSTED.
TEST_F(BoundedParseTest, SixteenAtOnceStayWithinTheParseBudget) {
  StartDaemon();
  const std::string brackets = Write("brackets.yaml", std::string(kMaxSpecBytes, '['));
  const std::string values = Write("values.json", MostValues());
  const int64_t rss_before = SettledRss();
  for (const std::string& path : {brackets, values}) {
    ResetPeak(daemon_->pid());
    std::vector<std::unique_ptr<Child>> calls;
    for (int i = 0; i < 16; ++i) {
      calls.push_back(daemon_->CtlAsync({i % 2 ? "validate" : "submit", path}));
    }
    int refused_for_room = 0;
    for (auto& call : calls) {
      RunResult r = call->Wait(std::chrono::seconds(90));
      EXPECT_EQ(r.exit_code, 3) << Describe(r);
      EXPECT_THAT(r.err, AnyOf(HasSubstr("overlapctl: INVALID_ARGUMENT: "),
                               HasSubstr("overlapctl: RESOURCE_EXHAUSTED: the daemon is parsing "
                                         "too much at once")))
          << r.err.substr(0, 300);
      refused_for_room += r.err.find("RESOURCE_EXHAUSTED") != std::string::npos;
    }
    const int64_t peak = PeakRssBytes(daemon_->pid());
    std::printf("16 at once of %s: RSS %lld MiB before, peak %lld MiB, %d refused for room\n",
                path.c_str(), static_cast<long long>(rss_before >> 20),
                static_cast<long long>(peak >> 20), refused_for_room);
    EXPECT_LT(peak, rss_before + (512 << 20)) << path;
    ExpectSettled(rss_before);
  }
}

// A UTF-16 file without a byte-order mark is valid UTF-8 to a byte check:
// its NULs name it.
TEST_F(BoundedParseTest, Utf16WithoutAByteOrderMarkIsRefusedSayingSo) {
  StartDaemon();
  std::string utf16;
  for (char c : std::string(kSmallGraph)) {
    utf16.push_back(c);
    utf16.push_back('\0');
  }
  RunResult r = Refused("submit", Write("utf16.yaml", utf16));
  EXPECT_THAT(r.err, HasSubstr("utf16.yaml: YAML/JSON refused at line 1, column 2: a NUL byte "
                               "(offset 1): UTF-16/32? specs must be UTF-8"));
}

TEST_F(BoundedParseTest, TagsAndAnchorsAreRefusedBeforeParsing) {
  StartDaemon();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"name: !!python/object:os.system x\n", "tags (!name, !!type, !<uri>) are not accepted"},
      {"name: !!binary eA==\n", "tags"},
      {"name: !<tag:yaml.org,2002:str> x\n", "tags"},
      {"name: !local x\n", "tags"},
      {"%YAML 1.2\n---\nname: x\n", "directives (%YAML, %TAG) are not accepted"},
      {"name: &a x\n", "anchors (&name) are not accepted"},
  };
  for (const auto& [text, why] : cases) {
    RunResult r = Refused("validate", Write("tagged.yaml", text + "ops: []\n"));
    EXPECT_THAT(r.err, HasSubstr(why)) << text;
  }
}

// Names that show as nothing, or as a private font's glyph, look like another
// name or like none: refused as control characters are, and quoted escaped.
TEST_F(BoundedParseTest, InvisibleAndPrivateUseCharactersInNamesAreRefused) {
  StartDaemon();
  const std::string op = "ops:\n  - {id: fc1, type: gemm, m: 64, k: 64, n: 64}\n";
  const std::vector<std::pair<std::string, std::string>> names = {
      {"\xe3\x85\xa4", "\\u3164"},        // U+3164 HANGUL FILLER
      {"a\xe1\x85\x9f", "\\u115f"},       // U+115F HANGUL CHOSEONG FILLER
      {"\xe2\xa0\x80", "\\u2800"},        // U+2800 BRAILLE PATTERN BLANK
      {"x\xef\xbf\xbf", "\\uffff"},       // U+FFFF, a noncharacter
      {"x\xee\x80\x80", "\\ue000"},       // U+E000, private use
      {"x\xf3\xb0\x80\x80", "\\uf0000"},  // U+F0000, plane 15
  };
  for (const auto& [name, shown] : names) {
    RunResult r = Refused("validate", Write("name.yaml", "name: \"" + name + "\"\n" + op));
    EXPECT_THAT(r.err, HasSubstr("name: must not hold control characters")) << shown;
    EXPECT_THAT(r.err, HasSubstr(shown));
  }
  RunResult id = Refused(
      "validate", Write("id.yaml",
                        "name: ok\nops:\n  - {id: \"fc\xe3\x85\xa4\", type: gemm, m: 64, k: 64, "
                        "n: 64}\n"));
  EXPECT_THAT(id.err, HasSubstr("ops[0].id: must not hold control characters"));
  // What was taken is taken still.
  EXPECT_EQ(daemon_->Ctl({"validate", Write("ok.yaml", "name: caf\xc3\xa9-\xe7\x81\xab\n" + op)})
                .exit_code,
            0);
}

}  // namespace
}  // namespace overlap::testing
