#include "common/graph_parser.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace overlap {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kExampleYaml[] = R"(
name: llama70b-mlp-tp2
devices: [0, 1]        # the TP group; omitted = every device of the backend
dtype: bf16
iterations: 20
warmup: 5
verify: true
priority: 0            # optional, higher runs first
seed: 1234             # optional
ops:
  - {id: fc1, type: ag_gemm, m: 8192, k: 8192, n: 28672, mode: chunked, chunks: 4}
  - {id: fc2, type: gemm_rs, m: 8192, k: 28672, n: 8192, mode: ring, after: [fc1], transport: p2p}
)";

constexpr char kExampleJson[] = R"({
	"name": "llama70b-mlp-tp2",
	"devices": [0, 1],
	"dtype": "bf16",
	"iterations": 20,
	"warmup": 5,
	"verify": true,
	"priority": 0,
	"seed": 1234,
	"ops": [
		{"id": "fc1", "type": "ag_gemm", "m": 8192, "k": 8192, "n": 28672,
		 "mode": "chunked", "chunks": 4},
		{"id": "fc2", "type": "gemm_rs", "m": 8192, "k": 28672, "n": 8192,
		 "mode": "ring", "after": ["fc1"], "transport": "p2p"}
	]
})";

void ExpectExample(const JobSpec& spec) {
  EXPECT_EQ(spec.name, "llama70b-mlp-tp2");
  EXPECT_THAT(spec.devices, ElementsAre(0, 1));
  EXPECT_EQ(spec.dtype, DType::kBF16);
  EXPECT_EQ(spec.iterations, 20);
  EXPECT_EQ(spec.warmup, 5);
  EXPECT_TRUE(spec.verify);
  EXPECT_EQ(spec.priority, 0);
  EXPECT_EQ(spec.seed, 1234u);
  ASSERT_EQ(spec.ops.size(), 2u);
  const OpSpec& fc1 = spec.ops[0];
  EXPECT_EQ(fc1.id, "fc1");
  EXPECT_EQ(fc1.type, OpType::kAgGemm);
  EXPECT_EQ(fc1.m, 8192);
  EXPECT_EQ(fc1.k, 8192);
  EXPECT_EQ(fc1.n, 28672);
  EXPECT_EQ(fc1.mode, OverlapMode::kChunked);
  EXPECT_EQ(fc1.chunks, 4);
  EXPECT_EQ(fc1.transport, Transport::kAuto);
  EXPECT_THAT(fc1.after, IsEmpty());
  const OpSpec& fc2 = spec.ops[1];
  EXPECT_EQ(fc2.id, "fc2");
  EXPECT_EQ(fc2.type, OpType::kGemmRs);
  EXPECT_EQ(fc2.m, 8192);
  EXPECT_EQ(fc2.k, 28672);
  EXPECT_EQ(fc2.n, 8192);
  EXPECT_EQ(fc2.mode, OverlapMode::kRing);
  EXPECT_EQ(fc2.chunks, 0);
  EXPECT_EQ(fc2.transport, Transport::kP2p);
  EXPECT_THAT(fc2.after, ElementsAre("fc1"));
}

TEST(GraphParserTest, ParsesExampleYaml) {
  auto spec = ParseJobSpec(kExampleYaml);
  ASSERT_TRUE(spec.ok()) << spec.status();
  ExpectExample(*spec);
}

TEST(GraphParserTest, ParsesEquivalentJson) {
  auto spec = ParseJobSpec(kExampleJson, "job.json");
  ASSERT_TRUE(spec.ok()) << spec.status();
  ExpectExample(*spec);
}

TEST(GraphParserTest, Defaults) {
  auto spec = ParseJobSpec(R"(
ops:
  - id: only
    type: gemm_ar
    m: 128
    k: 256
    n: 64
    after: fc0
)");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name, "unnamed");
  EXPECT_THAT(spec->devices, IsEmpty());
  EXPECT_EQ(spec->dtype, DType::kBF16);
  EXPECT_EQ(spec->iterations, 20);
  EXPECT_EQ(spec->warmup, 5);
  EXPECT_TRUE(spec->verify);
  EXPECT_TRUE(spec->heat_head_start);
  EXPECT_TRUE(spec->layer_step);
  EXPECT_EQ(spec->bucket_mib, 25);
  EXPECT_FALSE(spec->retune);
  EXPECT_TRUE(spec->timeline);
  EXPECT_EQ(spec->priority, 0);
  EXPECT_EQ(spec->priority_class, PriorityClass::kCritical);
  EXPECT_EQ(spec->seed, 1234u);
  ASSERT_EQ(spec->ops.size(), 1u);
  EXPECT_EQ(spec->ops[0].type, OpType::kGemmAr);
  EXPECT_EQ(spec->ops[0].mode, OverlapMode::kAuto);
  EXPECT_EQ(spec->ops[0].transport, Transport::kAuto);
  EXPECT_EQ(spec->ops[0].chunks, 0);
  EXPECT_THAT(spec->ops[0].after, ElementsAre("fc0"));  // a single string
}

TEST(GraphParserTest, ParsesOtherValues) {
  auto spec = ParseJobSpec(R"(
name: x
dtype: fp16
verify: false
head_start: idle
gemm_alone_sustain_ms: 1500
layer_step: false
bucket_mib: 0
retune: true
timeline: false
priority: -3
seed: 18446744073709551615
iterations: 1
warmup: 0
ops: [{id: a, type: ag_gemm, m: 9223372036854775807, k: 1, n: 1, mode: serial,
       transport: nccl}]
)");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->dtype, DType::kF16);
  EXPECT_FALSE(spec->verify);
  EXPECT_FALSE(spec->heat_head_start);
  EXPECT_EQ(spec->gemm_alone_sustain_ms, 1500);
  EXPECT_FALSE(spec->layer_step);
  EXPECT_EQ(spec->bucket_mib, 0);
  EXPECT_TRUE(spec->retune);
  EXPECT_FALSE(spec->timeline);
  EXPECT_EQ(spec->priority, -3);
  EXPECT_EQ(spec->seed, 18446744073709551615u);
  EXPECT_EQ(spec->iterations, 1);
  EXPECT_EQ(spec->warmup, 0);
  EXPECT_EQ(spec->ops[0].m, 9223372036854775807);
  EXPECT_EQ(spec->ops[0].mode, OverlapMode::kSerial);
  EXPECT_EQ(spec->ops[0].transport, Transport::kNccl);
}

TEST(GraphParserTest, CollectiveAloneTakesNoK) {
  auto spec =
      ParseJobSpec("ops: [{id: grads, type: all_reduce, m: 4096, n: 8192, transport: p2p}]\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->ops[0].type, OpType::kAllReduce);
  EXPECT_EQ(spec->ops[0].k, 0);
  EXPECT_EQ(spec->ops[0].n, 8192);
  EXPECT_EQ(spec->ops[0].transport, Transport::kP2p);
}

TEST(GraphParserTest, AllReduceTakesAnAlgorithm) {
  auto spec = ParseJobSpec(
      "ops: [{id: grads, type: all_reduce, m: 4096, n: 8192, transport: p2p, algorithm: tree},\n"
      "      {id: sum, type: all_reduce, m: 64, n: 8}]\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->ops[0].algorithm, AllReduceAlgorithm::kTree);
  EXPECT_EQ(spec->ops[1].algorithm, AllReduceAlgorithm::kDefault);
  auto bad = ParseJobSpec("ops: [{id: g, type: all_reduce, m: 64, n: 8, algorithm: butterfly}]\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("ops[0].algorithm: unknown algorithm \"butterfly\" (expected default, "
                        "ring, tree, ps, hierarchical, auto)"));
}

struct ErrorCase {
  const char* text;
  const char* message;
};

class GraphParserErrorTest : public ::testing::TestWithParam<ErrorCase> {};

TEST_P(GraphParserErrorTest, RejectsWithOneLineMessageNamingTheField) {
  auto spec = ParseJobSpec(GetParam().text);
  ASSERT_FALSE(spec.ok()) << GetParam().text;
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr(GetParam().message));
  EXPECT_EQ(spec.status().message().find('\n'), absl::string_view::npos);
}

#define OP(extra) "ops: [{id: fc1, type: ag_gemm, m: 8, k: 8, n: 8" extra "}]"

INSTANTIATE_TEST_SUITE_P(
    Cases, GraphParserErrorTest,
    ::testing::Values(
        ErrorCase{"ops:\n  - {id: a, type: ag_gemm, m: 8, k: 8, n: 8}\n"
                  "  - {id: b, type: ag_gemm, m: 8, k: 8, n: 8, chunks: abc}",
                  "ops[1].chunks: must be a positive integer (got \"abc\")"},
        ErrorCase{OP(", chunk: 2"), "ops[0]: unknown field \"chunk\""},
        ErrorCase{"op: []", "unknown top-level field \"op\""},
        ErrorCase{"ops:\n  - {id: a, type: ag_gemm, m: 8, k: 8, n: 8}\n"
                  "  - {id: b, type: ag_gemm, m: 8, k: 8, n: 8}\n"
                  "  - {id: c, type: gemm_xx, m: 8, k: 8, n: 8}",
                  "ops[2].type: unknown op type \"gemm_xx\" (expected ag_gemm, gemm_rs, gemm_ar, "
                  "all_gather, reduce_scatter, all_reduce, gemm)"},
        ErrorCase{"ops: [{id: a, type: ag_gemm, m: 8, n: 8}]", "ops[0].k: required field missing"},
        ErrorCase{"ops: [{id: g, type: all_reduce, m: 8, k: 8, n: 8}]",
                  "ops[0].k: all_reduce is a collective alone, with no GEMM: leave k out"},
        ErrorCase{OP(", chunks: 1.5"), "ops[0].chunks: must be a positive integer (got \"1.5\")"},
        ErrorCase{OP(", chunks: 0"), "ops[0].chunks: must be a positive integer (got \"0\")"},
        ErrorCase{OP(", chunks: \"4\""), "ops[0].chunks: must be a positive integer (got \"4\")"},
        ErrorCase{OP(", chunks: 4294967296"), "ops[0].chunks: must be at most 2147483647"},
        ErrorCase{"ops: [{id: a, type: ag_gemm, m: -8, k: 8, n: 8}]",
                  "ops[0].m: must be a positive integer (got \"-8\")"},
        ErrorCase{"ops: [{id: a, type: ag_gemm, m: 8, k: 1e3, n: 8}]",
                  "ops[0].k: must be a positive integer (got \"1e3\")"},
        ErrorCase{"ops: [{id: a, type: ag_gemm, m: 8, k: 8, n: 9223372036854775808}]",
                  "ops[0].n: must be a positive integer that fits in 64 bits"},
        ErrorCase{"ops: [{id: a, type: ag_gemm, m: [8], k: 8, n: 8}]",
                  "ops[0].m: must be a positive integer (got a list)"},
        ErrorCase{"ops: [{id: a, type: ag_gemm, k: 8, n: 8}]", "ops[0].m: required field missing"},
        ErrorCase{"ops: [{type: ag_gemm, m: 8, k: 8, n: 8}]", "ops[0].id: required field missing"},
        ErrorCase{OP(", mode: fast"), "ops[0].mode: unknown mode \"fast\""},
        ErrorCase{OP(", transport: ib"), "ops[0].transport: unknown transport \"ib\""},
        ErrorCase{OP(", after: {x: 1}"), "ops[0].after: must be an op id or a list of op ids"},
        ErrorCase{OP(", after: [[a]]"), "ops[0].after[0]: must be a string (got a list)"},
        ErrorCase{OP(", m: 16"), "ops[0]: duplicate field \"m\""},
        ErrorCase{"ops: [3]", "ops[0]: must be a mapping (got \"3\")"},
        ErrorCase{"ops: {id: a}", "ops: must be a list of ops (got a mapping)"},
        ErrorCase{"name: x", "ops: required field missing"},
        ErrorCase{"dtype: fp4\n" OP(""), "dtype: unknown dtype \"fp4\""},
        ErrorCase{"iterations: 0\n" OP(""), "iterations: must be a positive integer (got \"0\")"},
        ErrorCase{"iterations: 99999999999\n" OP(""), "iterations: must be at most 2147483647"},
        ErrorCase{"warmup: -1\n" OP(""), "warmup: must be a non-negative integer (got \"-1\")"},
        ErrorCase{"verify: maybe\n" OP(""), "verify: must be true or false (got \"maybe\")"},
        ErrorCase{"verify: yes\n" OP(""), "verify: must be true or false (got \"yes\")"},
        ErrorCase{"head_start: sleep\n" OP(""), "head_start: must be heat or idle (got \"sleep\")"},
        ErrorCase{"layer_step: 1\n" OP(""), "layer_step: must be true or false (got \"1\")"},
        ErrorCase{"bucket_mib: -1\n" OP(""), "bucket_mib: must be a non-negative integer"},
        ErrorCase{"retune: often\n" OP(""), "retune: must be true or false (got \"often\")"},
        ErrorCase{"timeline: 1\n" OP(""), "timeline: must be true or false (got \"1\")"},
        ErrorCase{"priority: high\n" OP(""), "priority: must be an integer (got \"high\")"},
        ErrorCase{"priority_class: urgent\n" OP(""),
                  "priority_class: unknown priority_class \"urgent\" (expected critical, "
                  "deferred)"},
        ErrorCase{"priority_class: [deferred]\n" OP(""),
                  "priority_class: must be a string (got a list)"},
        ErrorCase{"priority_class: 1\n" OP(""), "priority_class: unknown priority_class \"1\""},
        ErrorCase{"seed: -1\n" OP(""), "seed: must be a non-negative integer (got \"-1\")"},
        ErrorCase{"seed: 18446744073709551616\n" OP(""),
                  "seed: must be a non-negative integer that fits in 64 bits"},
        ErrorCase{"devices: [0, x]\n" OP(""),
                  "devices[1]: must be a non-negative integer (got \"x\")"},
        ErrorCase{"devices: [0, -1]\n" OP(""), "devices[1]: must be a non-negative integer"},
        ErrorCase{"devices: []\n" OP(""), "devices: must not be empty"},
        ErrorCase{"devices: 0\n" OP(""), "devices: must be a list of device indices"},
        ErrorCase{"name: [a]\n" OP(""), "name: must be a string (got a list)"},
        ErrorCase{"name: \"a\\nb\"\nbogus: 1\n", "unknown top-level field \"bogus\""},
        ErrorCase{
            "version: 2\n" OP(""),
            "version: this overlapd reads graph version 1; got 2 (a newer overlapd's graph?)"},
        ErrorCase{"version: 0\n" OP(""), "version: must be a positive integer (got \"0\")"},
        ErrorCase{"autotune_budget_s: -1\n" OP(""), "autotune_budget_s: "},
        ErrorCase{"", "job spec is empty"},
        ErrorCase{"- a\n- b\n", "job spec must be a mapping (got a list)"},
        ErrorCase{"{\"name\": \"x\",\n \"ops\": [\n}", "malformed YAML/JSON at line 3, column 1"},
        ErrorCase{"name: x\nops: [\n  {id: a, type: ag_gemm, m: 8, k: 8, n: 8}\n  bad: 1\n",
                  "malformed YAML/JSON at line "}));

#undef OP

// The lane class a job's collectives take beside sessions; `priority` stays
// the queue's rank.
TEST(GraphParserTest, PriorityClassIsApartFromPriority) {
  auto spec = ParseJobSpec(
      "priority: 3\npriority_class: deferred\n"
      "ops: [{id: a, type: ag_gemm, m: 8, k: 8, n: 8}]");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->priority, 3);
  EXPECT_EQ(spec->priority_class, PriorityClass::kDeferred);
  EXPECT_EQ(PriorityClassName(spec->priority_class), "deferred");
}

// The schema version (1, the one this overlapd reads) and the autotune budget.
TEST(GraphParserTest, VersionAndAutotuneBudget) {
  auto spec = ParseJobSpec(
      "version: 1\nautotune_budget_s: 90\nops: [{id: a, type: gemm, m: 8, k: 8, n: 8}]");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->autotune_budget_s, 90);
  auto plain = ParseJobSpec("ops: [{id: a, type: gemm, m: 8, k: 8, n: 8}]");
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->autotune_budget_s, 0) << "no bound by default";
}

TEST(GraphParserTest, SourceNamePrefixesErrors) {
  auto spec = ParseJobSpec("op: []", "mlp.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()),
              HasSubstr("mlp.yaml: unknown top-level field \"op\""));
  spec = ParseJobSpec("a: [", "mlp.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("mlp.yaml: malformed YAML/JSON"));
}

TEST(GraphParserTest, ControlCharactersInValuesAreEscaped) {
  auto spec = ParseJobSpec("ops: [{id: a, type: \"ag\\ngemm\", m: 8, k: 8, n: 8}]");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("\"ag\\ngemm\""));
  EXPECT_EQ(spec.status().message().find('\n'), absl::string_view::npos);
}

}  // namespace
}  // namespace overlap
