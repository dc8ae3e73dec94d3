// LoadDocument on hostile text: every input comes back, at once, as a tree or
// INVALID_ARGUMENT saying where and why. Each parse runs on its own thread
// under a deadline, so that a parse that runs away fails the test instead of
// hanging it (and the test process exits before it eats the machine).
#include "common/yaml_util.h"

#include <chrono>
#include <cstdlib>
#include <future>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace overlap::yaml_util {
namespace {

using ::testing::HasSubstr;

constexpr auto kDeadline = std::chrono::seconds(5);

absl::StatusOr<YAML::Node> LoadWithin(const std::string& text,
                                      const YamlLimits& limits = YamlLimits()) {
  auto parse = std::make_shared<std::packaged_task<absl::StatusOr<YAML::Node>()>>(
      [text, limits] { return LoadDocument(text, "graph.yaml", limits); });
  std::future<absl::StatusOr<YAML::Node>> result = parse->get_future();
  std::thread([parse] { (*parse)(); }).detach();
  if (result.wait_for(kDeadline) != std::future_status::ready) {
    ADD_FAILURE() << "LoadDocument did not return within 5 s on " << ::testing::PrintToString(text);
    std::_Exit(1);  // the runaway parse would take the machine's memory next
  }
  return result.get();
}

void ExpectRefused(const std::string& text, const std::string& reason) {
  absl::StatusOr<YAML::Node> node = LoadWithin(text);
  ASSERT_FALSE(node.ok()) << ::testing::PrintToString(text);
  EXPECT_EQ(node.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(node.status().message(), HasSubstr("graph.yaml: "));
  EXPECT_THAT(node.status().message(), HasSubstr(reason)) << ::testing::PrintToString(text);
}

TEST(YamlUtilTest, ReadsAMappingWithItsQuotingAndKeyOrder) {
  absl::StatusOr<YAML::Node> node = LoadWithin("b: 12\na: \"12\"\nlist: [1, {x: y}]\nnone:\n");
  ASSERT_TRUE(node.ok()) << node.status();
  ASSERT_TRUE(node->IsMap());
  std::vector<std::string> keys;
  for (const auto& entry : *node) keys.push_back(entry.first.Scalar());
  EXPECT_EQ(keys, (std::vector<std::string>{"b", "a", "list", "none"}));
  EXPECT_EQ((*node)["b"].Tag(), "?");  // plain
  EXPECT_EQ((*node)["a"].Tag(), "!");  // quoted
  EXPECT_EQ((*node)["list"].size(), 2u);
  EXPECT_EQ((*node)["list"][1]["x"].Scalar(), "y");
  EXPECT_TRUE((*node)["none"].IsNull());
  EXPECT_EQ(ReadInt64((*node)["b"], 0, 100).value_or(-1), 12);
  EXPECT_FALSE(ReadInt64((*node)["a"], 0, 100).ok());
}

TEST(YamlUtilTest, EmptyTextIsNull) {
  absl::StatusOr<YAML::Node> node = LoadWithin("");
  ASSERT_TRUE(node.ok());
  EXPECT_FALSE(node->IsDefined() && !node->IsNull());
  node = LoadWithin("# only a comment\n");
  ASSERT_TRUE(node.ok());
}

// Tokens yaml-cpp 0.7 takes as an empty document without consuming: LoadAll
// looped on them forever, growing by hundreds of MB a second.
TEST(YamlUtilTest, ATokenYamlCppCannotTakeIsRefusedAtOnce) {
  ExpectRefused(",\"", "line 1, column 1: unexpected ','");
  ExpectRefused(",", "unexpected ','");
  ExpectRefused("]", "malformed YAML/JSON at line 1");
  ExpectRefused("}", "malformed YAML/JSON at line 1");
  ExpectRefused("  ,x", "unexpected ','");
  ExpectRefused("a: 1\n,\n", "malformed YAML/JSON");
  ExpectRefused("[1]\n,\n", "malformed YAML/JSON");
  ExpectRefused("{\"a\": ,\"", "malformed YAML/JSON");
  ExpectRefused("[:", "malformed YAML/JSON");
  ExpectRefused("{:", "malformed YAML/JSON");
  ExpectRefused("{# ke\ny{:", "malformed YAML/JSON");
}

TEST(YamlUtilTest, MoreThanOneDocumentIsRefused) {
  ExpectRefused("a: 1\n---\nb: 2\n", "more than one YAML document");
  ExpectRefused("---\n---\n", "more than one YAML document");
}

TEST(YamlUtilTest, AnchorsAndAliasesAreRefused) {
  ExpectRefused("a: &x [1, 2]\nb: *x\n", "anchors (&name) are not accepted");
  // The "billion laughs": nine levels of ten aliases each.
  std::string laughs = "a0: &a0 [lol, lol]\n";
  for (int i = 1; i < 10; ++i) {
    absl::StrAppend(&laughs, "a", i, ": &a", i, " [");
    for (int j = 0; j < 10; ++j) absl::StrAppend(&laughs, j ? ", " : "", "*a", i - 1);
    absl::StrAppend(&laughs, "]\n");
  }
  ExpectRefused(laughs, "not accepted");
}

// The pre-scan runs first, for every caller: what it refuses never reaches
// yaml-cpp, and the message names the source, the line and the column.
TEST(YamlUtilTest, WhatThePrescanRefusesIsRefusedWithItsPlace) {
  ExpectRefused("a: 1\nb: !!binary eA==\n", "YAML/JSON refused at line 2, column 4: tags");
  ExpectRefused("%YAML 1.2\n---\na: 1\n", "directives");
  ExpectRefused(std::string("a\0b", 3), "UTF-16/32? specs must be UTF-8");
  ExpectRefused(std::string(1 << 20, '['), "line 1, column 33: lists and mappings nested");
}

TEST(YamlUtilTest, ABudgetedDocumentHoldsItsShareUntilItIsGone) {
  ParseBudget budget(64 << 20, absl::Milliseconds(10));
  {
    absl::StatusOr<BudgetedDocument> doc =
        LoadBudgetedDocument("a: [1, 2, 3]\n", "graph.yaml", YamlLimits(), budget);
    ASSERT_TRUE(doc.ok()) << doc.status();
    EXPECT_EQ(doc->root["a"].size(), 3u);
    EXPECT_GT(budget.in_use_bytes(), 0);
  }
  EXPECT_EQ(budget.in_use_bytes(), 0);
  // Refused by the pre-scan: nothing was taken.
  absl::StatusOr<BudgetedDocument> refused =
      LoadBudgetedDocument("a: &x 1\n", "graph.yaml", YamlLimits(), budget);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(budget.peak_bytes() < (1 << 20), true);
}

TEST(YamlUtilTest, LimitsAreKept) {
  YamlLimits limits;
  limits.max_bytes = 100;
  absl::StatusOr<YAML::Node> node = LoadWithin(std::string(101, ' '), limits);
  ASSERT_FALSE(node.ok());
  EXPECT_THAT(node.status().message(), HasSubstr("101 bytes, over the 100 bytes taken"));

  ExpectRefused(std::string(100, '[') + std::string(100, ']'), "nested more than 32 deep");
  ExpectRefused(std::string(100000, '['), "nested more than 32 deep");
  EXPECT_TRUE(LoadWithin(std::string(32, '[') + std::string(32, ']')).ok());

  limits = YamlLimits();
  limits.max_nodes = 1000;
  std::string list = "[";
  for (int i = 0; i < 1000; ++i) absl::StrAppend(&list, i ? "," : "", "0");
  absl::StrAppend(&list, "]");
  node = LoadWithin(list, limits);  // the list and its 1000 values
  ASSERT_FALSE(node.ok());
  EXPECT_THAT(node.status().message(), HasSubstr("more than 1000 values"));
}

// The largest text the defaults take parses in well under the deadline.
TEST(YamlUtilTest, ALargeFlatDocumentParsesInTime) {
  std::string text;
  for (int i = 0; text.size() < (1 << 20); ++i) absl::StrAppend(&text, "key", i, ": value\n");
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<YAML::Node> node = LoadWithin(text);
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(4));
}

}  // namespace
}  // namespace overlap::yaml_util
