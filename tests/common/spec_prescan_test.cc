// The pre-scan before yaml-cpp: every graph we ship passes with room to spare;
// each refusal names its line, column and limit; quotes, comments and plain
// scalars hide nothing from it, and text inside them is not refused.
#include "common/spec_prescan.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/graph_parser.h"
#include "common/seeded_random.h"
#include "common/yaml_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace overlap {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<PrescanFacts> Prescan(const std::string& text) {
  return PrescanYaml(text, PrescanLimits());
}

void ExpectRefused(const std::string& text, const std::string& where, const std::string& why) {
  absl::StatusOr<PrescanFacts> facts = Prescan(text);
  ASSERT_FALSE(facts.ok()) << ::testing::PrintToString(text.substr(0, 80));
  EXPECT_EQ(facts.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(facts.status().message(), HasSubstr("YAML/JSON refused at " + where + ": "))
      << ::testing::PrintToString(text.substr(0, 80));
  EXPECT_THAT(facts.status().message(), HasSubstr(why))
      << ::testing::PrintToString(text.substr(0, 80));
}

// Passes the pre-scan, and yaml-cpp takes it too: what the pre-scan lets
// through it has not misread.
void ExpectPasses(const std::string& text) {
  absl::StatusOr<PrescanFacts> facts = Prescan(text);
  EXPECT_TRUE(facts.ok()) << facts.status() << " in " << ::testing::PrintToString(text);
  absl::StatusOr<YAML::Node> node = yaml_util::LoadDocument(text, "t");
  EXPECT_TRUE(node.ok()) << node.status() << " in " << ::testing::PrintToString(text);
}

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(SpecPrescanTest, EveryShippedGraphPassesWithRoomToSpare) {
  int graphs = 0;
  for (const auto& entry :
       std::filesystem::directory_iterator(std::string(OVERLAP_SOURCE_DIR) + "/deploy/graphs")) {
    if (entry.path().extension() != ".yaml") continue;
    const std::string text = ReadFile(entry.path());
    absl::StatusOr<PrescanFacts> facts = Prescan(text);
    ASSERT_TRUE(facts.ok()) << entry.path() << ": " << facts.status();
    EXPECT_LE(facts->depth, 6) << entry.path();
    EXPECT_LE(facts->nodes, 1000) << entry.path();
    EXPECT_TRUE(ParseJobSpec(text, entry.path().string()).ok()) << entry.path();
    ++graphs;
  }
  EXPECT_GE(graphs, 5);
}

TEST(SpecPrescanTest, CountsValuesAndDepthAsTheParserSees) {
  absl::StatusOr<PrescanFacts> facts =
      Prescan("name: x\nops:\n  - {id: a, type: gemm, after: [b, c]}\n");
  ASSERT_TRUE(facts.ok()) << facts.status();
  // The root mapping, 4 keys, 5 values, the ops list, the op's mapping, the after list.
  EXPECT_GE(facts->nodes, 12);
  EXPECT_LE(facts->nodes, 16);
  EXPECT_EQ(facts->depth, 4);  // root, ops, the op, after
  facts = Prescan("[[1, [2]], {a: {b: [3]}}]");
  ASSERT_TRUE(facts.ok());
  EXPECT_EQ(facts->depth, 4);
}

TEST(SpecPrescanTest, JsonAndYamlGraphsPass) {
  ExpectPasses(
      "{\"name\":\"x\",\"ops\":[{\"id\":\"a\",\"type\":\"gemm\",\"m\":1,\"k\":1,\"n\":1,"
      "\"after\":[]}]}");
  ExpectPasses("{\n  \"name\": \"it's [\",\n  \"ops\": [\n    {\"id\": \"a\"}\n  ]\n}\n");
  ExpectPasses("\xEF\xBB\xBFname: bom\n");
  ExpectPasses("name: x\r\nops: []\r\n");
  ExpectPasses("---\nname: x\n...\n");
  ExpectPasses("ops:\n- id: a\n  after:\n  - b\n");
}

// What is text to yaml-cpp is text to the pre-scan: brackets, tags, anchors
// and quotes inside quoted values, comments and plain scalars are not counted
// or refused.
TEST(SpecPrescanTest, QuotesCommentsAndPlainScalarsAreText) {
  const std::string deep(40, '[');
  ExpectPasses("name: \"" + deep + "\"\n");
  ExpectPasses("name: '" + deep + " it''s'\n");
  ExpectPasses("name: \"a \\\" " + deep + "\"\n");
  ExpectPasses("# " + deep + " !!binary &a *a 'x\nname: x  # %YAML | > 'y\n");
  ExpectPasses("[a, b] # 'c\n");
  ExpectPasses("name: it's a!b&c*d|e>f\n");
  ExpectPasses("name: x#y\n");
  ExpectPasses("name: foo[1]{2}\n");
  ExpectPasses("name: a -b ?c :d\n");
  ExpectPasses("urls: [http://a:1/x, 'y']\n");
  ExpectPasses("{\"a\":\"b\", 'c':[1]}\n");
  // A plain value over two lines: the quote opening the second is text.
  ExpectPasses("name: first\n  'second\nnext: 1\n");
  ExpectPasses("- a\n  \"b\n- c\n");
}

TEST(SpecPrescanTest, NestingPastTheLimitIsRefusedWhereItStarts) {
  ExpectRefused(std::string(33, '['), "line 1, column 33", "nested more than 32 deep");
  ExpectRefused(std::string(1 << 20, '['), "line 1, column 33", "nested more than 32 deep");
  EXPECT_TRUE(Prescan(std::string(32, '[') + std::string(32, ']')).ok());
  ExpectRefused("a: " + std::string(32, '{'), "line 1, column 35", "nested more than 32 deep");
  // Block nesting counts too: by indentation, and by `- `.
  std::string block;
  for (int i = 0; i < 40; ++i) block += std::string(i, ' ') + "k" + std::to_string(i) + ":\n";
  ExpectRefused(block, "line 33, column 33", "nested more than 32 deep");
  std::string dashes;
  for (int i = 0; i < 40; ++i) dashes += "- ";
  ExpectRefused(dashes + "x\n", "line 1, column 65", "nested more than 32 deep");
  // Brackets in a plain scalar are text to yaml-cpp, but where the scalar
  // ends is the scanner's to say: so many open ones are refused all the same.
  ExpectRefused("name: x" + std::string(40, '['), "line 1, column 39", "nested more than 32 deep");
}

TEST(SpecPrescanTest, MoreValuesThanTheLimitAreRefused) {
  PrescanLimits limits;
  limits.max_nodes = 1000;
  std::string list = "[";
  for (int i = 0; i < 1000; ++i) absl::StrAppend(&list, i ? "," : "", "1");
  absl::StatusOr<PrescanFacts> facts = PrescanYaml(list + "]", limits);
  ASSERT_FALSE(facts.ok());
  EXPECT_THAT(facts.status().message(), HasSubstr("more than 1000 values in one document"));
  EXPECT_THAT(facts.status().message(), HasSubstr("line 1, column 2000"));
  // One MiB of tiny values against the default.
  std::string many = "[";
  while (many.size() < (1 << 20)) many += "1,";
  ExpectRefused(many, "line 1, column 400000", "more than 200000 values");
}

TEST(SpecPrescanTest, TagsAnchorsAliasesAndDirectivesAreRefused) {
  ExpectRefused("a: !!python/object:os.system x\n", "line 1, column 4", "tags (!name");
  ExpectRefused("a: !!binary aGVsbG8=\n", "line 1, column 4", "tags");
  ExpectRefused("a: !<tag:yaml.org,2002:str> x\n", "line 1, column 4", "tags");
  ExpectRefused("a: !local x\n", "line 1, column 4", "tags");
  ExpectRefused("[1, !!str 2]\n", "line 1, column 5", "tags");
  ExpectRefused("{\"a\":!x 1}\n", "line 1, column 6", "tags");
  ExpectRefused("a: &x [1]\nb: *x\n", "line 1, column 4", "anchors (&name)");
  ExpectRefused("b: *x\n", "line 1, column 4", "aliases (*name)");
  ExpectRefused("%YAML 1.2\n---\na: 1\n", "line 1, column 1", "directives (%YAML, %TAG)");
  ExpectRefused("%TAG ! tag:x,2000:\n---\na: 1\n", "line 1, column 1", "directives");
}

TEST(SpecPrescanTest, BlockScalarsAndQuotesOverSeveralLinesAreRefused) {
  ExpectRefused("name: |\n  text\n", "line 1, column 7", "block scalars (| and >)");
  ExpectRefused("- >-\n  text\n", "line 1, column 3", "block scalars");
  ExpectRefused("name: 'two\n  lines'\n", "line 1, column 7", "quoted value runs past");
  ExpectRefused("[\"two\n lines\"]\n", "line 1, column 2", "quoted value runs past");
  // A quote on a plain value's second line is text, and hides nothing after it.
  ExpectRefused("a: b\n  'c\n" + std::string(40, '[') + "\n", "line 3, column 32",
                "nested more than 32 deep");
}

// UTF-16 and UTF-32 text without a byte-order mark is valid UTF-8 to a
// byte check, and full of NULs.
TEST(SpecPrescanTest, ControlBytesAreRefusedNamingThem) {
  const std::string utf16le("n\0a\0m\0e\0:\0 \0x\0\n\0", 16);
  ExpectRefused(utf16le, "line 1, column 2",
                "a NUL byte (offset 1): UTF-16/32? specs must be UTF-8");
  const std::string utf32be("\0\0\0n\0\0\0a", 8);
  ExpectRefused(utf32be, "line 1, column 1", "UTF-16/32? specs must be UTF-8");
  ExpectRefused("name: x\x1b[2J\n", "line 1, column 8", "the control character 0x1b (offset 7)");
  ExpectRefused("a: 1\nb: \x01\n", "line 2, column 4", "0x01");
  ExpectRefused("a: 1\rb: 2\n", "line 1, column 5", "carriage return not followed by a newline");
  ExpectPasses("a:\t1\r\n");
}

// Random texts of YAML's structural characters: whatever the pre-scan lets
// through at depth 3, yaml-cpp never nests past 7. No reading of quotes,
// comments or plain scalars hides nesting from it; what it does not count is
// the mapping yaml-cpp makes of a list entry with a `:` (`[a: b]`, `[[x]: y]`),
// at most one for each list, which no graph writes. Seeded: a failure names
// its seed and text.
TEST(SpecPrescanTest, NothingItPassesNestsFarDeeperInYamlCpp) {
  constexpr char kAlphabet[] = "[[[[{{]]}},,:: --?#'\"!&*|>ab1\n\n  \t";
  PrescanLimits prescan_limits;
  prescan_limits.max_depth = 3;
  yaml_util::YamlLimits yaml_limits;
  yaml_limits.max_depth = 2 * prescan_limits.max_depth + 1;
  int passed = 0;
  for (uint64_t seed = 0; seed < 20000; ++seed) {
    std::string text;
    const size_t length = 1 + SplitMix64(seed) % 60;
    for (size_t i = 0; i < length; ++i) {
      text += kAlphabet[SplitMix64(seed * 131 + i) % (sizeof(kAlphabet) - 1)];
    }
    if (!PrescanYaml(text, prescan_limits).ok()) continue;
    ++passed;
    absl::StatusOr<YAML::Node> node = yaml_util::LoadDocument(text, "", yaml_limits);
    EXPECT_EQ(std::string(node.status().message()).find("nested more than"), std::string::npos)
        << "seed " << seed << ": " << ::testing::PrintToString(text) << ": " << node.status();
  }
  EXPECT_GT(passed, 1000) << "the texts should not all be refused";
}

TEST(SpecPrescanTest, AnEstimateGrowsWithValuesAndText) {
  PrescanFacts few{10, 2};
  PrescanFacts many{100000, 2};
  EXPECT_LT(EstimatedParseBytes(1000, few), EstimatedParseBytes(1000, many));
  EXPECT_LT(EstimatedParseBytes(1000, few), EstimatedParseBytes(1 << 20, few));
}

}  // namespace
}  // namespace overlap
