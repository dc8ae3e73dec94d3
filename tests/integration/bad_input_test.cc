// Every kind of bad job spec through the real daemon: overlapctl exits 3 with
// the status code name and a message naming the offending field, and the
// daemon keeps answering afterwards.
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/harness.h"

namespace overlap::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

struct BadSpec {
  std::string name;
  std::string spec;
  std::string code;                   // expected status code name
  std::vector<std::string> mentions;  // substrings of the message
};

// One op with `fields` spliced into a valid ag_gemm (tp = 4 devices).
std::string OneOp(const std::string& fields, const std::string& top = "") {
  return "name: bad\n" + top + "ops:\n  - {id: a, type: ag_gemm, " + fields + "}\n";
}

std::vector<BadSpec> BadSpecs() {
  return {
      {"malformed yaml",
       "name: bad\nops: [ {id: a, type: ag_gemm, m: 64\n",
       "INVALID_ARGUMENT",
       {"line"}},
      {"not a mapping", "- just\n- a list\n", "INVALID_ARGUMENT", {"mapping"}},
      {"unknown op type",
       "ops:\n  - {id: a, type: conv2d, m: 64, k: 64, n: 64}\n",
       "INVALID_ARGUMENT",
       {"ops[0].type", "conv2d"}},
      {"unknown op field",
       OneOp("m: 64, k: 64, n: 64, bogus: 1"),
       "INVALID_ARGUMENT",
       {"ops[0]", "bogus"}},
      {"unknown top-level field",
       OneOp("m: 64, k: 64, n: 64", "colour: blue\n"),
       "INVALID_ARGUMENT",
       {"colour"}},
      {"zero size", OneOp("m: 0, k: 64, n: 64"), "INVALID_ARGUMENT", {"ops[0].m"}},
      {"negative size", OneOp("m: 64, k: -8, n: 64"), "INVALID_ARGUMENT", {"ops[0].k"}},
      {"missing size", OneOp("m: 64, k: 64"), "INVALID_ARGUMENT", {"ops[0].n"}},
      {"m not divisible by tp", OneOp("m: 66, k: 64, n: 64"), "INVALID_ARGUMENT", {"ops[0].m"}},
      {"n not divisible by tp (ag_gemm splits n)",
       OneOp("m: 64, k: 64, n: 66"),
       "INVALID_ARGUMENT",
       {"ops[0].n"}},
      {"k not divisible by tp (gemm_rs splits k)",
       "ops:\n  - {id: a, type: gemm_rs, m: 64, k: 66, n: 64}\n",
       "INVALID_ARGUMENT",
       {"ops[0].k"}},
      {"overflowing product",
       OneOp("m: 4398046511104, k: 4398046511104, n: 4398046511104"),
       "INVALID_ARGUMENT",
       {"ops[0]", "overflows 64 bits"}},
      {"nonexistent device",
       OneOp("m: 64, k: 64, n: 64", "devices: [0, 7]\n"),
       "INVALID_ARGUMENT",
       {"devices[1]", "device 7 does not exist"}},
      {"repeated device",
       OneOp("m: 64, k: 64, n: 64", "devices: [1, 1]\n"),
       "INVALID_ARGUMENT",
       {"devices[1]", "listed twice"}},
      {"direct stores for ag_gemm",
       OneOp("m: 64, k: 64, n: 64, mode: ring, transport: direct"),
       "INVALID_ARGUMENT",
       {"ops[0].transport", "only for gemm_rs and gemm_ar"}},
      {"more chunks than rows per rank",
       OneOp("m: 64, k: 64, n: 64, mode: chunked, chunks: 65"),
       "INVALID_ARGUMENT",
       {"ops[0].chunks"}},
      {"chunks with a mode that has no pieces",
       OneOp("m: 64, k: 64, n: 64, mode: bulk, chunks: 2"),
       "INVALID_ARGUMENT",
       {"ops[0].chunks"}},
      {"unknown mode",
       OneOp("m: 64, k: 64, n: 64, mode: overlapped"),
       "INVALID_ARGUMENT",
       {"ops[0].mode"}},
      {"too many iterations",
       OneOp("m: 64, k: 64, n: 64", "iterations: 10001\n"),
       "INVALID_ARGUMENT",
       {"iterations", "10000"}},
      {"repeated id",
       "ops:\n  - {id: a, type: ag_gemm, m: 64, k: 64, n: 64}\n"
       "  - {id: a, type: gemm_rs, m: 64, k: 64, n: 64}\n",
       "INVALID_ARGUMENT",
       {"ops[1].id", "\"a\""}},
      {"unknown after",
       OneOp("m: 64, k: 64, n: 64, after: [ghost]"),
       "INVALID_ARGUMENT",
       {"ops[0].after", "ghost"}},
      {"cyclic after",
       "ops:\n  - {id: a, type: ag_gemm, m: 64, k: 64, n: 64, after: [b]}\n"
       "  - {id: b, type: gemm_rs, m: 64, k: 64, n: 64, after: [a]}\n",
       "INVALID_ARGUMENT",
       {"ops: dependency cycle", " -> "}},
      {"no ops", "name: empty\nops: []\n", "INVALID_ARGUMENT", {"ops"}},
      // Passes every shape check (divisible, no int64 overflow) but needs far
      // more than the host devices' 2 GiB.
      {"buffers exceed memory",
       OneOp("m: 1048576, k: 1048576, n: 1048576"),
       "RESOURCE_EXHAUSTED",
       {"GiB per device", "device 0 has 2.00 GiB"}},
  };
}

class BadInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    daemon_ = std::make_unique<Daemon>(dir_.path());
    ASSERT_TRUE(daemon_->Start());
  }
  void TearDown() override {
    if (HasFailure() && daemon_) std::cerr << "overlapd log:\n" << daemon_->Log();
  }

  TempDir dir_;
  std::unique_ptr<Daemon> daemon_;
};

TEST_F(BadInputTest, EachIsRefusedWithItsCodeAndFieldAndTheDaemonSurvives) {
  int refused = 0;
  for (const BadSpec& bad : BadSpecs()) {
    SCOPED_TRACE(bad.name + "\n" + bad.spec);
    const std::string file = dir_.File("bad.yaml");
    WriteFileOrDie(file, bad.spec);
    RunResult submit = daemon_->Ctl({"submit", file, "--wait"});
    EXPECT_EQ(submit.exit_code, 3) << Describe(submit);
    EXPECT_THAT(submit.err, StartsWith("overlapctl: " + bad.code + ": "));
    for (const std::string& mention : bad.mentions) EXPECT_THAT(submit.err, HasSubstr(mention));
    EXPECT_EQ(std::count(submit.err.begin(), submit.err.end(), '\n'), 1) << "one line";
    EXPECT_EQ(submit.out, "");
    refused += submit.exit_code == 3;

    RunResult node = daemon_->Ctl({"node"});
    ASSERT_EQ(node.exit_code, 0) << "daemon stopped answering\n" << Describe(node);
  }
  // Nothing was queued, and the daemon counted every refusal.
  RunResult list = daemon_->Ctl({"list", "--json"});
  ASSERT_EQ(list.exit_code, 0) << Describe(list);
  EXPECT_TRUE(ParseJson(list.out)["jobs"].empty()) << list.out;
  RunResult stats = daemon_->Ctl({"stats", "--json"});
  ASSERT_EQ(stats.exit_code, 0) << Describe(stats);
  EXPECT_EQ(ParseJson(stats.out)["jobs_rejected"], refused);
}

TEST_F(BadInputTest, ErrorsNameTheSourceFile) {
  const std::string file = dir_.File("named-graph.yaml");
  WriteFileOrDie(file, OneOp("m: 0, k: 64, n: 64"));
  RunResult submit = daemon_->Ctl({"submit", file});
  EXPECT_EQ(submit.exit_code, 3) << Describe(submit);
  EXPECT_THAT(submit.err, HasSubstr("named-graph.yaml"));
}

}  // namespace
}  // namespace overlap::testing
