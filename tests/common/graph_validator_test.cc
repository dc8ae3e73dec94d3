#include "common/graph_validator.h"

#include <string>
#include <utility>
#include <vector>

#include "common/graph_parser.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/op_spec_util.h"

namespace overlap {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

JobSpec TwoOpSpec() {
  JobSpec spec;
  spec.name = "mlp";
  spec.devices = {0, 1};
  spec.ops.push_back(MakeOp("fc1", OpType::kAgGemm, 8192, 8192, 28672));
  spec.ops.push_back(MakeOp("fc2", OpType::kGemmRs, 8192, 28672, 8192, {"fc1"}));
  return spec;
}

ValidationLimits TwoDevices() {
  ValidationLimits limits;
  limits.device_count = 2;
  return limits;
}

void ExpectInvalid(const JobSpec& spec, const std::string& message,
                   ValidationLimits limits = TwoDevices()) {
  auto result = ValidateJobSpec(spec, limits);
  ASSERT_FALSE(result.ok()) << "expected: " << message;
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(result.status().message()), HasSubstr(message));
}

TEST(GraphValidatorTest, AcceptsValidSpecAndResolvesDevices) {
  JobSpec spec = TwoOpSpec();
  auto group = ValidateJobSpec(spec, TwoDevices());
  ASSERT_TRUE(group.ok()) << group.status();
  EXPECT_THAT(*group, ElementsAre(0, 1));

  spec.devices = {1};  // tp = 1: no divisibility constraint beyond 1
  spec.ops[0].m = 8191;
  group = ValidateJobSpec(spec, TwoDevices());
  ASSERT_TRUE(group.ok()) << group.status();
  EXPECT_THAT(*group, ElementsAre(1));

  spec = TwoOpSpec();
  spec.devices.clear();
  ValidationLimits four;
  four.device_count = 4;
  group = ValidateJobSpec(spec, four);
  ASSERT_TRUE(group.ok()) << group.status();
  EXPECT_THAT(*group, ElementsAre(0, 1, 2, 3));

  spec.devices = {3, 1};  // order of the group is kept: it defines the ranks
  group = ValidateJobSpec(spec, four);
  ASSERT_TRUE(group.ok()) << group.status();
  EXPECT_THAT(*group, ElementsAre(3, 1));
}

TEST(GraphValidatorTest, ParsedExampleValidates) {
  auto spec = ParseJobSpec(R"(
name: llama70b-mlp-tp2
devices: [0, 1]
ops:
  - {id: fc1, type: ag_gemm, m: 8192, k: 8192, n: 28672, mode: chunked, chunks: 4}
  - {id: fc2, type: gemm_rs, m: 8192, k: 28672, n: 8192, mode: ring, after: [fc1]}
)");
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto group = ValidateJobSpec(*spec, TwoDevices());
  ASSERT_TRUE(group.ok()) << group.status();
  EXPECT_THAT(*group, ElementsAre(0, 1));
}

TEST(GraphValidatorTest, SpecLevelErrors) {
  JobSpec spec = TwoOpSpec();
  spec.name = "";
  ExpectInvalid(spec, "name: must not be empty");

  spec = TwoOpSpec();
  spec.ops.clear();
  ExpectInvalid(spec, "ops: at least one op is required");

  spec = TwoOpSpec();
  spec.devices = {0, 7};
  ExpectInvalid(spec, "devices[1]: device 7 does not exist (this node has 2)");
  spec.devices = {-1};
  ExpectInvalid(spec, "devices[0]: device -1 does not exist (this node has 2)");
  spec.devices = {1, 1};
  ExpectInvalid(spec, "devices[1]: device 1 is listed twice");
  spec.devices = {};
  ExpectInvalid(spec, "devices: this node has no devices", ValidationLimits{});

  spec = TwoOpSpec();
  spec.iterations = 20000;
  ExpectInvalid(spec, "iterations: 20000 exceeds the limit of 10000");
  spec.iterations = 0;
  ExpectInvalid(spec, "iterations: must be at least 1 (got 0)");
  spec.iterations = 10000;
  EXPECT_TRUE(ValidateJobSpec(spec, TwoDevices()).ok());
  spec.warmup = -1;
  ExpectInvalid(spec, "warmup: must be non-negative (got -1)");
  spec.warmup = 10001;
  ExpectInvalid(spec, "warmup: 10001 exceeds the limit of 10000");
  ValidationLimits tight = TwoDevices();
  tight.max_iterations = 50;
  spec = TwoOpSpec();
  spec.iterations = 51;
  ExpectInvalid(spec, "iterations: 51 exceeds the limit of 50", tight);
}

TEST(GraphValidatorTest, OpIdErrors) {
  JobSpec spec = TwoOpSpec();
  spec.ops[1].id = "";
  ExpectInvalid(spec, "ops[1].id: must not be empty");

  spec = TwoOpSpec();
  spec.ops.push_back(MakeOp("fc3", OpType::kGemmAr, 64, 64, 64));
  spec.ops.push_back(MakeOp("fc1", OpType::kGemmAr, 64, 64, 64));
  ExpectInvalid(spec, "ops[3].id: duplicate id \"fc1\"");

  // What yaml-cpp makes of "fc\0_d": not UTF-8, refused (it would not survive the API's strings).
  spec = TwoOpSpec();
  spec.ops[0].id =
      "fc\xa0"
      "d";
  ExpectInvalid(spec, "ops[0].id: must be UTF-8 text: \"fc\\xa0d\"");
}

TEST(GraphValidatorTest, ShapeErrors) {
  JobSpec spec = TwoOpSpec();
  spec.ops[0].k = 0;
  ExpectInvalid(spec, "ops[0].k: must be positive (got 0)");
  spec = TwoOpSpec();
  spec.ops[1].n = -5;
  ExpectInvalid(spec, "ops[1].n: must be positive (got -5)");

  // ag_gemm splits m and n.
  spec = TwoOpSpec();
  spec.ops[0].m = 8191;
  ExpectInvalid(spec, "ops[0].m: 8191 is not divisible by tp = 2");
  spec = TwoOpSpec();
  spec.ops[0].n = 28671;
  ExpectInvalid(spec, "ops[0].n: 28671 is not divisible by tp = 2");
  spec = TwoOpSpec();
  spec.ops[0].k = 8191;  // k is not split for ag_gemm
  EXPECT_TRUE(ValidateJobSpec(spec, TwoDevices()).ok());

  // gemm_rs and gemm_ar split m and k, not n.
  for (OpType type : {OpType::kGemmRs, OpType::kGemmAr}) {
    spec = TwoOpSpec();
    spec.ops[1].type = type;
    spec.ops[1].n = 8191;
    EXPECT_TRUE(ValidateJobSpec(spec, TwoDevices()).ok()) << OpTypeName(type);
    spec.ops[1].k = 28673;
    ExpectInvalid(spec, "ops[1].k: 28673 is not divisible by tp = 2");
    spec.ops[1].k = 28672;
    spec.ops[1].m = 8193;
    ExpectInvalid(spec, "ops[1].m: 8193 is not divisible by tp = 2");
  }
}

// fp8 GEMMs need each rank's k and n in multiples of 16 (cuBLASLt); the
// error names the field and says whether the split width is what fails.
TEST(GraphValidatorTest, Fp8NeedsWidthsInSixteens) {
  JobSpec spec = TwoOpSpec();
  spec.dtype = DType::kFP8;
  EXPECT_TRUE(ValidateJobSpec(spec, TwoDevices()).ok());
  spec.ops[0].n = 2 * 8200;  // 8200 per rank
  ExpectInvalid(spec, "ops[0].n: n/tp = 8200 is not a multiple of 16, which fp8 GEMMs need");
  spec = TwoOpSpec();
  spec.dtype = DType::kFP8;
  spec.ops[0].k = 8200;  // ag_gemm's k is whole on every rank
  ExpectInvalid(spec, "ops[0].k: 8200 is not a multiple of 16");
  spec = TwoOpSpec();
  spec.dtype = DType::kFP8;
  spec.ops[1].k = 2 * 8200;  // gemm_rs splits k
  ExpectInvalid(spec, "ops[1].k: k/tp = 8200 is not a multiple of 16");
  spec.dtype = DType::kBF16;
  EXPECT_TRUE(ValidateJobSpec(spec, TwoDevices()).ok()) << "bf16 takes any width";

  // A gemm alone too; a collective alone has no GEMM, and any width.
  spec = TwoOpSpec();
  spec.dtype = DType::kFP8;
  spec.ops[1] = MakeOp("wgrad", OpType::kGemm, 8192, 8190, 8192);
  spec.ops[1].transport = Transport::kNone;
  spec.ops[1].mode = OverlapMode::kSerial;
  ExpectInvalid(spec, "ops[1].k: 8190 is not a multiple of 16");
  spec.ops[1] = MakeOp("gather", OpType::kAllGather, 8192, 0, 1000);
  spec.ops[1].mode = OverlapMode::kSerial;
  EXPECT_TRUE(ValidateJobSpec(spec, TwoDevices()).ok());
}

TEST(GraphValidatorTest, OverflowErrors) {
  JobSpec spec = TwoOpSpec();
  spec.ops.pop_back();
  spec.ops[0] = MakeOp("big", OpType::kAgGemm, int64_t{1} << 32, int64_t{1} << 32, 2);
  ExpectInvalid(spec, "ops[0]: m*k overflows 64 bits");
  spec.ops[0] = MakeOp("big", OpType::kAgGemm, 2, int64_t{1} << 32, int64_t{1} << 32);
  ExpectInvalid(spec, "ops[0]: k*n overflows 64 bits");
  spec.ops[0] = MakeOp("big", OpType::kAgGemm, int64_t{1} << 32, 2, int64_t{1} << 32);
  ExpectInvalid(spec, "ops[0]: m*n overflows 64 bits");
  // Each pairwise product fits; the triple does not.
  spec.ops[0] =
      MakeOp("big", OpType::kAgGemm, int64_t{1} << 22, int64_t{1} << 21, int64_t{1} << 22);
  ExpectInvalid(spec, "ops[0]: m*n*k overflows 64 bits");
  // m*n*k = 2^62 fits, but A = m*k = 2^62 elements of 2 bytes does not fit in 63 bits.
  spec.ops[0] = MakeOp("big", OpType::kAgGemm, int64_t{1} << 61, 2, 1);
  ExpectInvalid(spec, "ops[0]: A (m*k) has 4611686018427387904 elements");
  spec.dtype = DType::kF32;
  spec.ops[0] = MakeOp("big", OpType::kAgGemm, 1, 2, int64_t{1} << 61);
  ExpectInvalid(spec, "ops[0]: W (k*n) has");
  spec.ops[0] = MakeOp("big", OpType::kAgGemm, int64_t{1} << 31, 1, int64_t{1} << 31);
  ExpectInvalid(spec, "ops[0]: Y (m*n) has");
  spec.ops[0] = MakeOp("big", OpType::kAgGemm, 2, 1, int64_t{1} << 61);
  ExpectInvalid(spec, "ops[0]: W (k*n) has 2305843009213693952 elements; its size in bytes (fp32)");
  // Largest sizes that still fit are accepted.
  spec.dtype = DType::kBF16;
  spec.ops[0] = MakeOp("big", OpType::kAgGemm, int64_t{1} << 30, int64_t{1} << 30, 2);
  EXPECT_TRUE(ValidateJobSpec(spec, TwoDevices()).ok());
}

// m = k = 2^32: every product of two dims wraps 64 bits' halves; the
// message names the op, the product and its factors.
TEST(GraphValidatorTest, ShapesWhoseBytesOverflowNameTheOpAndTheFactors) {
  JobSpec spec = TwoOpSpec();
  spec.ops.pop_back();
  spec.ops[0] = MakeOp("big", OpType::kAgGemm, int64_t{1} << 32, int64_t{1} << 32, 64);
  ExpectInvalid(spec, "ops[0]: m*k overflows 64 bits (4294967296 x 4294967296)");
  spec.ops[0] = MakeOp("big", OpType::kAgGemm, INT64_MAX, 1, 1);
  ExpectInvalid(spec, "ops[0]: A (m*k) has 9223372036854775807 elements");
  spec.ops[0] = MakeOp("big", OpType::kAgGemm, INT64_MAX - 1, 2, 2);
  ExpectInvalid(spec, "ops[0]: m*k overflows 64 bits (9223372036854775806 x 2)");
}

// The 180-byte graph that took a node down: in 32 bits tp x dp = 6 x 715827883
// is 2 and passed on 2 devices, and 2147483647 x 2 printed "-2 devices".
TEST(GraphValidatorTest, AMeshWhoseDeviceCountWrapsIsRefusedNamingTheMesh) {
  JobSpec spec;
  spec.name = "wrap";
  spec.devices = {0, 1};
  spec.ops.push_back(MakeOp("g", OpType::kAllReduce, 6, 0, 6));
  spec.ops[0].mode = OverlapMode::kSerial;
  spec.mesh = {6, 715827883};
  ExpectInvalid(spec, "mesh: tp x dp = 6 x 715827883 = 4294967298 devices is more than the 65536");
  spec.mesh = {2147483647, 2};
  ExpectInvalid(spec, "mesh: tp x dp = 2147483647 x 2 = 4294967294 devices");
  spec.mesh = {65536, 65536};  // 0 in 32 bits
  ExpectInvalid(spec, "= 4294967296 devices is more than the 65536");
  spec.mesh = {2, -1};
  ExpectInvalid(spec, "mesh.dp: must be at least 1 (got -1)");
  spec.mesh = {2, 3};
  ExpectInvalid(spec, "mesh: tp x dp = 2 x 3 = 6 devices, but the job has 2");
  for (const std::string& message : {std::string("-2"), std::string("devices, but the job has")}) {
    spec.mesh = {2147483647, 2};
    EXPECT_THAT(std::string(ValidateJobSpec(spec, TwoDevices()).status().message()),
                ::testing::Not(HasSubstr(message)));
  }
}

// A mesh that does not cover the devices is never looped over: GroupsOf reads
// it as no mesh (before, dp = 715827883 built that many groups).
TEST(GroupsOfTest, AMeshThatDoesNotCoverTheDevicesBuildsOneGroup) {
  EXPECT_THAT(GroupsOf(Mesh{6, 715827883}, OpGroup::kTp, 2), ElementsAre(ElementsAre(0, 1)));
  EXPECT_THAT(GroupsOf(Mesh{2147483647, 2}, OpGroup::kDp, 2), ElementsAre(ElementsAre(0, 1)));
  EXPECT_THAT(GroupsOf(Mesh{2, 2}, OpGroup::kTp, 4),
              ElementsAre(ElementsAre(0, 1), ElementsAre(2, 3)));
  EXPECT_THAT(GroupsOf(Mesh{2, 2}, OpGroup::kDp, 4),
              ElementsAre(ElementsAre(0, 2), ElementsAre(1, 3)));
}

TEST(GraphParserTest, MeshDegreesPastTheRankLimitAreRefusedWhileParsing) {
  for (const auto& [text, message] : std::vector<std::pair<std::string, std::string>>{
           {"mesh: {tp: 6, dp: 715827883}", "mesh.dp: must be at most 65536 (got \"715827883\")"},
           {"mesh: {tp: 2147483647, dp: 2}", "mesh.tp: must be at most 65536 (got \"2147483647\")"},
           {"mesh: {tp: 4294967298, dp: 1}", "mesh.tp: must be at most 65536"},
           {"mesh: {tp: 9223372036854775808, dp: 1}", "mesh.tp: must be a positive integer"},
           {"mesh: {tp: 2, dp: -1}", "mesh.dp: must be a positive integer"}}) {
    absl::StatusOr<JobSpec> spec =
        ParseJobSpec(text + "\nops: [{id: g, type: all_reduce, m: 6, n: 6}]\n");
    ASSERT_FALSE(spec.ok()) << text;
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(spec.status().message()), HasSubstr(message)) << text;
  }
  absl::StatusOr<JobSpec> spec =
      ParseJobSpec("mesh: {tp: 65536, dp: 65536}\nops: [{id: g, type: all_reduce, m: 6, n: 6}]\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->mesh.tp, 65536);
}

TEST(GraphValidatorTest, ChunkErrors) {
  JobSpec spec = TwoOpSpec();
  spec.ops[0].chunks = 4;
  spec.ops[0].mode = OverlapMode::kSerial;
  ExpectInvalid(spec, "ops[0].chunks: only valid with mode: chunked, ring or auto");
  spec.ops[0].mode = OverlapMode::kBulk;
  ExpectInvalid(spec, "ops[0].chunks: only valid with mode: chunked, ring or auto");
  spec.ops[0].mode = OverlapMode::kAuto;  // narrows auto's chunked and ring candidates
  EXPECT_TRUE(ValidateJobSpec(spec, TwoDevices()).ok());
  spec.ops[0].mode = OverlapMode::kRing;  // sub-chunks of each shard
  EXPECT_TRUE(ValidateJobSpec(spec, TwoDevices()).ok());
  spec.ops[0].mode = OverlapMode::kChunked;
  EXPECT_TRUE(ValidateJobSpec(spec, TwoDevices()).ok());
  spec.ops[0].chunks = 3;  // need not divide m/tp = 4096: the pieces differ a little
  EXPECT_TRUE(ValidateJobSpec(spec, TwoDevices()).ok());
  spec.ops[0].chunks = -1;
  ExpectInvalid(spec, "ops[0].chunks: must be at least 1 (got -1)");
  spec.ops[0].chunks = 4096;
  EXPECT_TRUE(ValidateJobSpec(spec, TwoDevices()).ok());
  spec.ops[0].chunks = 0;  // not given: the schedule picks
  EXPECT_TRUE(ValidateJobSpec(spec, TwoDevices()).ok());
  spec.ops[0].chunks = 4097;
  ExpectInvalid(spec,
                "ops[0].chunks: 4097 is more than m/tp = 4096 rows (every chunk needs at least "
                "one row)");
}

TEST(GraphValidatorTest, DirectTransportOnlyForTheReductionRings) {
  JobSpec spec = TwoOpSpec();
  spec.ops[0].transport = Transport::kDirect;
  ExpectInvalid(spec, "ops[0].transport: direct is only for gemm_rs and gemm_ar");
  spec.ops[0].transport = Transport::kAuto;
  spec.ops[1].transport = Transport::kDirect;
  EXPECT_TRUE(ValidateJobSpec(spec, TwoDevices()).ok());  // mode auto
  spec.ops[1].mode = OverlapMode::kRing;
  spec.ops[1].chunks = 2;
  EXPECT_TRUE(ValidateJobSpec(spec, TwoDevices()).ok());
  spec.ops[1].mode = OverlapMode::kChunked;
  ExpectInvalid(spec, "ops[1].transport: direct only works with mode: ring or auto (got chunked)");
  spec.ops[1].chunks = 0;
  spec.ops[1].mode = OverlapMode::kSerial;
  ExpectInvalid(spec, "(got serial)");
}

// A collective alone: no k, rows split over the ranks, serial or auto, no
// chunks, no direct stores.
TEST(GraphValidatorTest, CollectiveAloneRules) {
  JobSpec spec = TwoOpSpec();
  spec.ops.push_back(MakeOp("grads", OpType::kAllReduce, 4096, 0, 8192, {"fc2"}));
  spec.ops.push_back(MakeOp("gather", OpType::kAllGather, 64, 0, 8));
  spec.ops.push_back(MakeOp("scatter", OpType::kReduceScatter, 64, 0, 8));
  EXPECT_TRUE(ValidateJobSpec(spec, TwoDevices()).ok());
  spec.ops[2].mode = OverlapMode::kSerial;
  spec.ops[2].transport = Transport::kP2p;
  EXPECT_TRUE(ValidateJobSpec(spec, TwoDevices()).ok());

  JobSpec bad = spec;
  bad.ops[2].k = 16;
  ExpectInvalid(bad, "ops[2].k: all_reduce is a collective alone, with no GEMM: leave k out");
  bad = spec;
  bad.ops[3].m = 63;
  ExpectInvalid(bad, "ops[3].m: 63 is not divisible by tp = 2 (required by all_gather)");
  bad = spec;
  bad.ops[4].mode = OverlapMode::kRing;
  ExpectInvalid(bad,
                "ops[4].mode: reduce_scatter has no GEMM to overlap with: mode serial or "
                "auto (got ring)");
  bad = spec;
  bad.ops[4].chunks = 2;
  ExpectInvalid(bad, "ops[4].chunks: only valid for GEMM ops");
  bad = spec;
  bad.ops[2].transport = Transport::kDirect;
  ExpectInvalid(bad, "ops[2].transport: direct is only for gemm_rs and gemm_ar");
  bad = spec;
  bad.ops[2].n = 0;
  ExpectInvalid(bad, "ops[2].n: must be positive (got 0)");
}

// An all_reduce's algorithm: only all_reduce takes one; ps only over the copy
// engines; ring and tree over the library only where the backend can pin them.
TEST(GraphValidatorTest, AllReduceAlgorithmRules) {
  JobSpec spec = TwoOpSpec();
  spec.ops.push_back(MakeOp("grads", OpType::kAllReduce, 4096, 0, 8192, {"fc2"}));
  for (AllReduceAlgorithm a : {AllReduceAlgorithm::kRing, AllReduceAlgorithm::kTree,
                               AllReduceAlgorithm::kAuto, AllReduceAlgorithm::kParameterServer}) {
    spec.ops[2].algorithm = a;
    EXPECT_TRUE(ValidateJobSpec(spec, TwoDevices()).ok()) << AllReduceAlgorithmName(a);
  }
  JobSpec bad = spec;
  bad.ops[1].algorithm = AllReduceAlgorithm::kAuto;
  ExpectInvalid(bad,
                "ops[1].algorithm: only for all_reduce (how it moves its bytes: ring, tree, "
                "ps or auto); gemm_rs takes none");
  bad = spec;
  bad.ops[2].transport = Transport::kNccl;
  ExpectInvalid(bad, "ops[2].algorithm: ps is a copy-engine layout");

  ValidationLimits host = TwoDevices();
  host.library_algorithms = false;
  spec.ops[2].algorithm = AllReduceAlgorithm::kTree;
  ExpectInvalid(spec, "ops[2].algorithm: this backend's library collectives have no tree choice",
                host);
  spec.ops[2].transport = Transport::kNccl;
  ExpectInvalid(spec, "give transport: p2p for the copy-engine tree", host);
  spec.ops[2].transport = Transport::kP2p;
  EXPECT_TRUE(ValidateJobSpec(spec, host).ok());
  spec.ops[2].transport = Transport::kAuto;
  spec.ops[2].algorithm = AllReduceAlgorithm::kParameterServer;
  EXPECT_TRUE(ValidateJobSpec(spec, host).ok());  // auto narrows ps to p2p
  spec.ops[2].transport = Transport::kNccl;
  spec.ops[2].algorithm = AllReduceAlgorithm::kAuto;
  EXPECT_TRUE(ValidateJobSpec(spec, host).ok());  // auto tries what the backend has
}

// A GEMM alone: columns split over the ranks, serial or auto, no chunks, and
// transport none (or auto); no other op takes transport none.
TEST(GraphValidatorTest, GemmAloneRules) {
  JobSpec spec = TwoOpSpec();
  spec.ops.push_back(MakeOp("wgrad", OpType::kGemm, 8192, 4096, 28672, {"fc2"}));
  EXPECT_TRUE(ValidateJobSpec(spec, TwoDevices()).ok());
  spec.ops[2].m = 8191;  // rows are not split
  spec.ops[2].mode = OverlapMode::kSerial;
  spec.ops[2].transport = Transport::kNone;
  EXPECT_TRUE(ValidateJobSpec(spec, TwoDevices()).ok());

  JobSpec bad = spec;
  bad.ops[2].n = 28671;
  ExpectInvalid(bad, "ops[2].n: 28671 is not divisible by tp = 2 (required by gemm)");
  bad = spec;
  bad.ops[2].k = 0;
  ExpectInvalid(bad, "ops[2].k: must be positive (got 0)");
  bad = spec;
  bad.ops[2].mode = OverlapMode::kChunked;
  ExpectInvalid(bad,
                "ops[2].mode: gemm has no collective to overlap with: mode serial or auto (got "
                "chunked)");
  bad = spec;
  bad.ops[2].chunks = 2;
  ExpectInvalid(bad, "ops[2].chunks: only valid for ops with a collective");
  bad = spec;
  bad.ops[2].transport = Transport::kP2p;
  ExpectInvalid(bad,
                "ops[2].transport: gemm moves no data between GPUs: transport none or auto (got "
                "p2p)");
  bad = spec;
  bad.ops[0].transport = Transport::kNone;
  ExpectInvalid(bad,
                "ops[0].transport: none is only for gemm (no collective); ag_gemm needs nccl, p2p "
                "or auto");
  const LocalShapes gemm = LocalShapesFor(MakeOp("g", OpType::kGemm, 8192, 1024, 4096), 4);
  EXPECT_EQ(gemm.a_rows, 8192);
  EXPECT_EQ(gemm.a_cols, 1024);
  EXPECT_EQ(gemm.w_rows, 1024);
  EXPECT_EQ(gemm.w_cols, 1024);
  EXPECT_EQ(gemm.y_rows, 8192);
  EXPECT_EQ(gemm.y_cols, 1024);
  EXPECT_EQ(gemm.gemm_n, 1024);
  EXPECT_EQ(OpFlops(MakeOp("g", OpType::kGemm, 8192, 1024, 4096)), 2.0 * 8192 * 1024 * 4096);
}

TEST(GraphValidatorTest, DependencyErrors) {
  JobSpec spec = TwoOpSpec();
  spec.ops[1].after = {"fc9"};
  ExpectInvalid(spec, "ops[1].after: unknown op \"fc9\"");
  spec.ops[1].after = {"fc1"};
  spec.ops[0].after = {"fc2"};
  ExpectInvalid(spec, "ops: dependency cycle fc1 -> fc2 -> fc1");
  spec.ops[0].after = {"fc1"};
  ExpectInvalid(spec, "ops: dependency cycle fc1 -> fc1");
}

TEST(TopologicalOrderTest, SmallDagStableOrder) {
  //   a   b
  //   |\ /
  //   | c    d (independent)
  //   |/
  //   e
  JobSpec spec;
  spec.ops.push_back(MakeOp("e", OpType::kAgGemm, 8, 8, 8, {"c", "a"}));
  spec.ops.push_back(MakeOp("c", OpType::kAgGemm, 8, 8, 8, {"a", "b"}));
  spec.ops.push_back(MakeOp("a", OpType::kAgGemm, 8, 8, 8));
  spec.ops.push_back(MakeOp("d", OpType::kAgGemm, 8, 8, 8));
  spec.ops.push_back(MakeOp("b", OpType::kAgGemm, 8, 8, 8));
  auto order = TopologicalOrder(spec);
  ASSERT_TRUE(order.ok()) << order.status();
  // Ready first: a(2), d(3), b(4) in file order; a frees nothing alone; after
  // b, c(1) is ready, then e(0).
  EXPECT_THAT(*order, ElementsAre(2, 3, 4, 1, 0));
}

TEST(TopologicalOrderTest, NoDependenciesKeepsFileOrderAndDuplicateAfterIsHarmless) {
  JobSpec spec;
  spec.ops.push_back(MakeOp("x", OpType::kGemmAr, 8, 8, 8));
  spec.ops.push_back(MakeOp("y", OpType::kGemmAr, 8, 8, 8, {"x", "x"}));
  spec.ops.push_back(MakeOp("z", OpType::kGemmAr, 8, 8, 8));
  auto order = TopologicalOrder(spec);
  ASSERT_TRUE(order.ok()) << order.status();
  EXPECT_THAT(*order, ElementsAre(0, 1, 2));
}

TEST(TopologicalOrderTest, LongerCycleIsReportedInExecutionOrder) {
  JobSpec spec;
  spec.ops.push_back(MakeOp("ok", OpType::kGemmAr, 8, 8, 8));
  spec.ops.push_back(MakeOp("p", OpType::kGemmAr, 8, 8, 8, {"r", "ok"}));
  spec.ops.push_back(MakeOp("q", OpType::kGemmAr, 8, 8, 8, {"p"}));
  spec.ops.push_back(MakeOp("r", OpType::kGemmAr, 8, 8, 8, {"q"}));
  spec.ops.push_back(MakeOp("tail", OpType::kGemmAr, 8, 8, 8, {"r"}));
  auto order = TopologicalOrder(spec);
  ASSERT_FALSE(order.ok());
  EXPECT_EQ(order.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(order.status().message(), "ops: dependency cycle p -> q -> r -> p");
}

TEST(TopologicalOrderTest, UnknownAndDuplicateIds) {
  JobSpec spec;
  spec.ops.push_back(MakeOp("a", OpType::kGemmAr, 8, 8, 8, {"nope"}));
  auto order = TopologicalOrder(spec);
  ASSERT_FALSE(order.ok());
  EXPECT_EQ(order.status().message(), "ops[0].after: unknown op \"nope\"");
  spec.ops[0].after.clear();
  spec.ops.push_back(MakeOp("a", OpType::kGemmAr, 8, 8, 8));
  order = TopologicalOrder(spec);
  ASSERT_FALSE(order.ok());
  EXPECT_EQ(order.status().message(), "ops[1].id: duplicate id \"a\"");
}

TEST(LocalShapesTest, PerRankShapesAndFlops) {
  const LocalShapes ag = LocalShapesFor(MakeOp("a", OpType::kAgGemm, 8192, 1024, 4096), 4);
  EXPECT_EQ(ag.a_rows, 2048);
  EXPECT_EQ(ag.a_cols, 1024);
  EXPECT_EQ(ag.w_rows, 1024);
  EXPECT_EQ(ag.w_cols, 1024);
  EXPECT_EQ(ag.y_rows, 8192);
  EXPECT_EQ(ag.y_cols, 1024);
  EXPECT_EQ(ag.gemm_m, 8192);
  EXPECT_EQ(ag.gemm_n, 1024);
  EXPECT_EQ(ag.gemm_k, 1024);

  const LocalShapes rs = LocalShapesFor(MakeOp("r", OpType::kGemmRs, 8192, 1024, 4096), 4);
  EXPECT_EQ(rs.a_rows, 8192);
  EXPECT_EQ(rs.a_cols, 256);
  EXPECT_EQ(rs.w_rows, 256);
  EXPECT_EQ(rs.w_cols, 4096);
  EXPECT_EQ(rs.y_rows, 2048);
  EXPECT_EQ(rs.y_cols, 4096);
  EXPECT_EQ(rs.gemm_m, 8192);
  EXPECT_EQ(rs.gemm_n, 4096);
  EXPECT_EQ(rs.gemm_k, 256);

  const LocalShapes ar = LocalShapesFor(MakeOp("r", OpType::kGemmAr, 8192, 1024, 4096), 4);
  EXPECT_EQ(ar.a_cols, 256);
  EXPECT_EQ(ar.w_rows, 256);
  EXPECT_EQ(ar.y_rows, 8192);
  EXPECT_EQ(ar.y_cols, 4096);
  EXPECT_EQ(ar.gemm_k, 256);

  const LocalShapes one = LocalShapesFor(MakeOp("a", OpType::kAgGemm, 12, 5, 7), 1);
  EXPECT_EQ(one.a_rows, 12);
  EXPECT_EQ(one.w_cols, 7);

  EXPECT_DOUBLE_EQ(OpFlops(MakeOp("a", OpType::kAgGemm, 8192, 8192, 28672)),
                   2.0 * 8192 * 8192 * 28672);

  // The collectives alone: X in A, no W, no GEMM.
  const LocalShapes gather = LocalShapesFor(MakeOp("g", OpType::kAllGather, 8192, 0, 4096), 4);
  EXPECT_EQ(gather.a_rows, 2048);
  EXPECT_EQ(gather.a_cols, 4096);
  EXPECT_EQ(gather.y_rows, 8192);
  EXPECT_EQ(gather.y_cols, 4096);
  EXPECT_EQ(gather.w_rows * gather.w_cols, 0);
  EXPECT_EQ(gather.gemm_m, 0);
  const LocalShapes scatter = LocalShapesFor(MakeOp("s", OpType::kReduceScatter, 8192, 0, 4096), 4);
  EXPECT_EQ(scatter.a_rows, 8192);
  EXPECT_EQ(scatter.y_rows, 2048);
  const LocalShapes reduce = LocalShapesFor(MakeOp("r", OpType::kAllReduce, 8192, 0, 4096), 4);
  EXPECT_EQ(reduce.a_rows, 8192);
  EXPECT_EQ(reduce.y_rows, 8192);
  EXPECT_EQ(OpFlops(MakeOp("r", OpType::kAllReduce, 8192, 0, 4096)), 0);
}

TEST(GraphEnumsTest, NamesRoundTrip) {
  for (OpType t : {OpType::kAgGemm, OpType::kGemmRs, OpType::kGemmAr, OpType::kAllGather,
                   OpType::kReduceScatter, OpType::kAllReduce, OpType::kGemm}) {
    EXPECT_EQ(*ParseOpType(OpTypeName(t)), t);
    EXPECT_EQ(IsCollectiveOnly(t), OpTypeName(t).find("gemm") == std::string::npos);
    EXPECT_EQ(IsGemmOnly(t), OpTypeName(t) == "gemm");
  }
  EXPECT_EQ(OpTypeName(OpType::kReduceScatter), "reduce_scatter");
  for (OverlapMode m : {OverlapMode::kSerial, OverlapMode::kBulk, OverlapMode::kChunked,
                        OverlapMode::kRing, OverlapMode::kAuto}) {
    EXPECT_EQ(*ParseOverlapMode(OverlapModeName(m)), m);
  }
  for (Transport t : {Transport::kAuto, Transport::kNccl, Transport::kP2p, Transport::kDirect,
                      Transport::kNone}) {
    EXPECT_EQ(*ParseTransport(TransportName(t)), t);
  }
  for (AllReduceAlgorithm a :
       {AllReduceAlgorithm::kDefault, AllReduceAlgorithm::kRing, AllReduceAlgorithm::kTree,
        AllReduceAlgorithm::kParameterServer, AllReduceAlgorithm::kAuto}) {
    EXPECT_EQ(*ParseAllReduceAlgorithm(AllReduceAlgorithmName(a)), a);
  }
  EXPECT_EQ(AllReduceAlgorithmName(AllReduceAlgorithm::kParameterServer), "ps");
  // Results and the tuning cache keep the default as "".
  EXPECT_EQ(StoredAllReduceAlgorithm(AllReduceAlgorithm::kDefault), "");
  EXPECT_EQ(StoredAllReduceAlgorithm(AllReduceAlgorithm::kTree), "tree");
  EXPECT_EQ(*ParseStoredAllReduceAlgorithm(""), AllReduceAlgorithm::kDefault);
  EXPECT_EQ(*ParseStoredAllReduceAlgorithm("ps"), AllReduceAlgorithm::kParameterServer);
  EXPECT_FALSE(ParseStoredAllReduceAlgorithm("Ring").ok());
  EXPECT_FALSE(ParseAllReduceAlgorithm("Ring").ok());
  EXPECT_EQ(TransportName(Transport::kDirect), "direct");
  EXPECT_EQ(OpTypeName(OpType::kGemmRs), "gemm_rs");
  EXPECT_EQ(OverlapModeName(OverlapMode::kChunked), "chunked");
  EXPECT_EQ(TransportName(Transport::kP2p), "p2p");
  EXPECT_EQ(ParseOpType("GEMM").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(TransportName(Transport::kNone), "none");
  EXPECT_FALSE(ParseOverlapMode("Chunked").ok());
  EXPECT_FALSE(ParseTransport("").ok());
}

}  // namespace
}  // namespace overlap

namespace overlap {
namespace {

// fc1 [8192, 28672] split by columns feeds fc2's row-parallel input through
// SwiGLU (k = 14336); a mismatch names both ops and both layouts.
TEST(GraphValidatorTest, WiredInputsMustAgreeInShapeAndSplit) {
  JobSpec spec = TwoOpSpec();
  spec.ops[1].k = 14336;
  spec.ops[1].input = "fc1";
  spec.ops[1].activation = Activation::kSwiglu;
  ASSERT_TRUE(ValidateJobSpec(spec, TwoDevices()).ok());

  spec.ops[1].activation = Activation::kGelu;  // the width does not halve
  ExpectInvalid(spec,
                "ops[1].input: \"fc2\" reads \"fc1\"'s output, but \"fc1\" writes [8192, 28672] "
                "split by columns over tp = 2 and \"fc2\" (gemm_rs) reads [8192, 14336] split by "
                "columns over tp = 2");
  spec.ops[1] = MakeOp("fc2", OpType::kAgGemm, 8192, 28672, 8192);  // reads rows
  spec.ops[1].input = "fc1";
  ExpectInvalid(spec, "\"fc2\" (ag_gemm) reads [8192, 28672] split by rows over tp = 2");
  spec.ops[1].input = "fc3";
  ExpectInvalid(spec, "ops[1].input: unknown op \"fc3\"");
  spec.ops[1].input = "fc2";
  ExpectInvalid(spec, "ops[1].input: an op cannot read its own output");

  // On one device any split agrees: only shapes count.
  spec.ops[1].input = "fc1";
  spec.devices = {0};
  EXPECT_TRUE(ValidateJobSpec(spec, TwoDevices()).ok());
}

TEST(GraphValidatorTest, SwigluNeedsAnEvenShareOfColumns) {
  JobSpec spec = TwoOpSpec();
  spec.ops[0].n = 6;  // 3 columns a rank
  spec.ops[1] = MakeOp("fc2", OpType::kGemm, 8192, 3, 8192);
  spec.ops[1].input = "fc1";
  spec.ops[1].activation = Activation::kSwiglu;
  ExpectInvalid(spec,
                "ops[1].activation: swiglu halves each rank's columns of \"fc1\"'s output "
                "(gate, then up), but a rank holds 3");
}

// A dp all_reduce of a tp op's weight gradient sums each device's shard.
TEST(GraphValidatorTest, ADataParallelReductionReadsEachDevicesShard) {
  JobSpec spec;
  spec.name = "grads";
  spec.mesh = {2, 2};
  spec.ops.push_back(MakeOp("wgrad", OpType::kGemm, 4096, 8192, 28672));
  OpSpec grads = MakeOp("grads", OpType::kAllReduce, 4096, 0, 14336, {"wgrad"});
  grads.group = OpGroup::kDp;
  grads.input = "wgrad";
  spec.ops.push_back(grads);
  ValidationLimits four;
  four.device_count = 4;
  ASSERT_TRUE(ValidateJobSpec(spec, four).ok());
  spec.ops[1].n = 28672;
  ExpectInvalid(spec,
                "\"wgrad\" writes [4096, 28672] split by columns over tp = 2, [4096, 14336] on "
                "each device and \"grads\" (all_reduce) reads [4096, 28672] on each device",
                four);
}

TEST(GraphParserTest, InputImpliesAfterAndActivationNeedsAnInput) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(
      "name: x\nops:\n  - {id: a, type: gemm, m: 8, k: 8, n: 8}\n"
      "  - {id: b, type: gemm, m: 8, k: 8, n: 8, input: a, activation: gelu}\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_THAT(spec->ops[1].after, ElementsAre("a"));
  EXPECT_EQ(spec->ops[1].activation, Activation::kGelu);
  spec =
      ParseJobSpec("name: x\nops:\n  - {id: b, type: gemm, m: 8, k: 8, n: 8, activation: gelu}\n");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()),
              HasSubstr("ops[0].activation: applies to another op's output: name that op with "
                        "input"));
  spec = ParseJobSpec(
      "name: x\nops:\n  - {id: b, type: gemm, m: 8, k: 8, n: 8, input: a, activation: relu}\n");
  ASSERT_FALSE(spec.ok());
  EXPECT_THAT(std::string(spec.status().message()), HasSubstr("unknown activation \"relu\""));
}

TEST(GraphValidatorTest, SustainedGemmAloneHasACeiling) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(
      "name: x\ngemm_alone_sustain_ms: 60000\nops:\n  - {id: a, type: gemm, m: 8, k: 8, n: 8}\n");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(ValidateJobSpec(*spec, TwoDevices()).ok());
  spec->gemm_alone_sustain_ms = 60000.5;
  ExpectInvalid(*spec, "gemm_alone_sustain_ms: must be at most 60000 (got 60000.5)");
  EXPECT_FALSE(ParseJobSpec("gemm_alone_sustain_ms: -1\nops: [{id: a, type: gemm, m: 8, k: 8, "
                            "n: 8}]\n")
                   .ok());
}

TEST(GraphValidatorTest, DynamicSchedulerNeedsABoundAndSomethingToDefer) {
  const std::string graph =
      "name: x\nscheduler: dynamic\nops:\n"
      "  - {id: wgrad, type: gemm, m: 64, k: 64, n: 64}\n"
      "  - {id: grads, type: all_reduce, m: 64, n: 32, after: [wgrad]}\n";
  absl::StatusOr<JobSpec> spec = ParseJobSpec(graph);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->scheduler, Scheduler::kDynamic);
  EXPECT_TRUE(ValidateJobSpec(*spec, TwoDevices()).ok());

  JobSpec no_bound = *spec;
  no_bound.defer_bound_ms = 0;
  ExpectInvalid(no_bound, "defer_bound_ms: must be above 0 with scheduler: dynamic");
  // Static takes 0: join at once.
  no_bound.scheduler = Scheduler::kStatic;
  EXPECT_TRUE(ValidateJobSpec(no_bound, TwoDevices()).ok());

  JobSpec waited_on = *spec;  // an op waits on the all-reduce: it is critical, nothing is deferred
  waited_on.ops.push_back(MakeOp("next", OpType::kGemm, 64, 64, 64, {"grads"}));
  ExpectInvalid(waited_on, "scheduler: dynamic: the graph has nothing to defer");

  JobSpec no_gemm = *spec;
  no_gemm.ops.erase(no_gemm.ops.begin());
  no_gemm.ops[0].after.clear();
  ExpectInvalid(no_gemm, "nothing to defer");

  JobSpec no_step = *spec;
  no_step.layer_step = false;
  ExpectInvalid(no_step, "scheduler: dynamic schedules the layer step");

  absl::StatusOr<JobSpec> unknown = ParseJobSpec("name: x\nscheduler: greedy\nops: []\n");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(unknown.status().message()),
              HasSubstr("scheduler: unknown scheduler \"greedy\" (expected static, dynamic)"));
}

}  // namespace
}  // namespace overlap
