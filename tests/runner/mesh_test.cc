// A tp x dp mesh on the host backend (4 simulated devices as tp 2 x dp 2, the
// hazard checker on): ops over tp, dp and world groups, every group checked
// against float64, the world all-reduce flat and hierarchical, and a 1 x 1
// mesh that changes nothing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/graph_parser.h"
#include "common/graph_validator.h"
#include "server/runner/job_runner.h"
#include "tests/host_engine_util.h"
#include "tests/job_result_util.h"

namespace overlap::runner {
namespace {

using ::testing::HasSubstr;

JobSpec Parse(const std::string& yaml) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(yaml);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : JobSpec{};
}

const v1::OpResult* Find(const v1::JobResult& result, const std::string& id) {
  for (const v1::OpResult& op : result.ops()) {
    if (op.id() == id) return &op;
  }
  return nullptr;
}

TEST(MeshTest, GroupsAreTpMajor) {
  const Mesh mesh{2, 3};
  EXPECT_EQ(GroupsOf(mesh, OpGroup::kTp, 6),
            (std::vector<std::vector<int>>{{0, 1}, {2, 3}, {4, 5}}));
  EXPECT_EQ(GroupsOf(mesh, OpGroup::kDp, 6), (std::vector<std::vector<int>>{{0, 2, 4}, {1, 3, 5}}));
  EXPECT_EQ(GroupsOf(mesh, OpGroup::kWorld, 6),
            (std::vector<std::vector<int>>{{0, 1, 2, 3, 4, 5}}));
  EXPECT_EQ(GroupSize(mesh, OpGroup::kDp, 6), 3);
  EXPECT_EQ(GroupsOf(Mesh{}, OpGroup::kTp, 2), (std::vector<std::vector<int>>{{0, 1}}));
}

constexpr char kMeshLayer[] = R"(name: mesh-layer
dtype: f32
iterations: 2
warmup: 1
mesh: {tp: 2, dp: 2}
ops:
  - {id: fc1, type: ag_gemm, m: 128, k: 64, n: 96}
  - {id: fc2, type: gemm_rs, m: 128, k: 96, n: 64, mode: chunked, chunks: 2, transport: p2p, after: [fc1]}
  - {id: wgrad, type: gemm, m: 128, k: 64, n: 96, after: [fc2]}
  - {id: grad_ar, type: all_reduce, m: 64, n: 48, group: dp, after: [wgrad]}
  - {id: loss_ar, type: all_reduce, m: 64, n: 32, group: world, algorithm: auto}
)";

TEST(MeshTest, EveryGroupRunsItsOpAndIsCheckedAgainstFloat64) {
  auto engine = CheckedHostEngine(4);
  JobSpec spec = Parse(kMeshLayer);
  ASSERT_TRUE(ValidateJobSpec(spec, ValidationLimits{.device_count = 4}).ok());
  absl::StatusOr<v1::JobResult> result = RunJobResult(*engine, spec, {0, 1, 2, 3}, {}, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->mesh_tp(), 2);
  EXPECT_EQ(result->mesh_dp(), 2);
  for (const auto& [id, group, groups, tp] :
       {std::tuple<std::string, std::string, int, int>{"fc1", "tp", 2, 2},
        {"fc2", "tp", 2, 2},
        {"wgrad", "tp", 2, 2},
        {"grad_ar", "dp", 2, 2},
        {"loss_ar", "world", 0, 4}}) {
    SCOPED_TRACE(id);
    const v1::OpResult* op = Find(*result, id);
    ASSERT_NE(op, nullptr);
    EXPECT_EQ(op->group(), group);
    EXPECT_EQ(op->tp(), tp);
    EXPECT_TRUE(op->verified());
    EXPECT_LE(op->max_rel_error(), op->tolerance());
    EXPECT_EQ(op->group_step_ms_size(), groups);
    if (groups == 0) continue;  // one group: the op's step is its own
    EXPECT_GE(op->slowest_group(), 0);
    EXPECT_LT(op->slowest_group(), groups);
    double slowest = 0;
    for (double ms : op->group_step_ms()) {
      EXPECT_GT(ms, 0);
      slowest = std::max(slowest, ms);
    }
    EXPECT_DOUBLE_EQ(op->group_step_ms(op->slowest_group()), slowest);
  }
  // auto timed the world all-reduce flat and hierarchical, over both transports.
  std::set<std::string> timed;
  for (const v1::CandidateTiming& c : Find(*result, "loss_ar")->candidates()) {
    timed.insert(c.schedule());
  }
  EXPECT_TRUE(timed.count("serial/p2p/hierarchical")) << ::testing::PrintToString(timed);
  EXPECT_TRUE(timed.count("serial/nccl/hierarchical")) << ::testing::PrintToString(timed);
  EXPECT_TRUE(timed.count("serial/p2p")) << ::testing::PrintToString(timed);
  EXPECT_TRUE(result->has_layer_step());
}

class HierarchicalTest : public ::testing::TestWithParam<std::tuple<std::string, int, int>> {};

// Over each transport and mesh shape, alone and as its own layer step: the
// sum of every rank's input on every rank, as float64 says.
TEST_P(HierarchicalTest, SumsOverTheWholeMesh) {
  const auto& [transport, tp, dp] = GetParam();
  auto engine = CheckedHostEngine(tp * dp);
  const int64_t m = 48 * tp * dp;
  JobSpec spec = Parse(absl::StrCat(
      "dtype: bf16\niterations: 2\nwarmup: 1\nmesh: {tp: ", tp, ", dp: ", dp,
      "}\nops:\n  - {id: ar, type: all_reduce, m: ", m,
      ", n: 40, group: world, algorithm: hierarchical, transport: ", transport, "}\n"));
  std::vector<int> devices;
  for (int d = 0; d < tp * dp; ++d) devices.push_back(d);
  absl::StatusOr<v1::JobResult> result = RunJobResult(*engine, spec, devices, {}, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  const v1::OpResult& op = result->ops(0);
  EXPECT_EQ(op.algorithm(), "hierarchical");
  EXPECT_EQ(op.schedule(), "serial/" + transport + "/hierarchical");
  EXPECT_TRUE(op.verified());
  EXPECT_LE(op.max_rel_error(), op.tolerance());
}

INSTANTIATE_TEST_SUITE_P(Meshes, HierarchicalTest,
                         ::testing::Values(std::make_tuple("p2p", 2, 2),
                                           std::make_tuple("nccl", 2, 2),
                                           std::make_tuple("p2p", 2, 3),
                                           std::make_tuple("nccl", 3, 2)));

constexpr char kBackward[] = R"(name: mesh-backward
dtype: f32
iterations: 2
warmup: 1
mesh: {tp: 2, dp: 2}
chunk_kib: 16
ops:
  - {id: dgrad1, type: gemm_rs, m: 128, k: 64, n: 64, mode: serial, transport: nccl}
  - {id: wgrad1, type: gemm, m: 64, k: 128, n: 64, after: [dgrad1]}
  - {id: big_grads, type: all_reduce, m: 256, n: 32, group: dp, transport: p2p, after: [wgrad1]}
  - {id: dgrad2, type: gemm_rs, m: 128, k: 64, n: 64, mode: serial, transport: p2p, after: [dgrad1]}
  - {id: wgrad2, type: gemm, m: 64, k: 128, n: 64, after: [dgrad2]}
  - {id: small_a, type: all_reduce, m: 16, n: 32, group: dp, transport: nccl, after: [wgrad2]}
  - {id: small_b, type: all_reduce, m: 16, n: 32, group: dp, transport: nccl, after: [wgrad2]}
  - {id: dgrad3, type: gemm_rs, m: 128, k: 64, n: 64, mode: serial, transport: nccl, after: [dgrad2]}
  - {id: dgrad4, type: gemm_rs, m: 128, k: 64, n: 64, mode: serial, transport: nccl, after: [dgrad3]}
)";

// The dp gradient all-reduces of a backward step: the large one chunked into
// 16 KiB pieces between the data-gradient GEMMs that follow, the small ones
// bucketed; every output checked again after a layer iteration, with the
// hazard checker watching each piece's hand-off.
TEST(MeshTest, GradientAllReducesAreChunkedOrBucketedBesideTheBackward) {
  auto engine = CheckedHostEngine(4);
  absl::StatusOr<v1::JobResult> result =
      RunJobResult(*engine, Parse(kBackward), {0, 1, 2, 3}, {}, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_TRUE(result->has_layer_step()) << result->layer_note();
  std::map<std::string, v1::LayerDeferral> deferred;
  for (const v1::LayerDeferral& d : result->layer_deferrals()) deferred[d.op()] = d;
  ASSERT_TRUE(deferred.count("big_grads")) << result->DebugString();
  EXPECT_EQ(deferred["big_grads"].how(), "chunked");
  EXPECT_EQ(deferred["big_grads"].pieces(), 2);  // 256 x 32 fp32 = 32 KiB
  EXPECT_EQ(deferred["big_grads"].piece_bytes(), 16 << 10);
  ASSERT_TRUE(deferred.count("bucket(small_a+small_b)")) << result->DebugString();
  EXPECT_EQ(deferred["bucket(small_a+small_b)"].how(), "bucketed");
  EXPECT_GT(result->layer_step_without_deferred().median_ms(), 0);

  // A bound of 0 ms joins each before the next op on the main streams.
  JobSpec bounded = Parse(kBackward);
  bounded.defer_bound_ms = 0;
  result = RunJobResult(*engine, bounded, {0, 1, 2, 3}, {}, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  for (const v1::LayerDeferral& d : result->layer_deferrals()) {
    EXPECT_NE(d.joined_before(), "") << d.op() << " order: " << ::testing::PrintToString(result->layer_order());
  }
}

// A 1 x 1 mesh is the graph without one: the same schedules, the same checks.
TEST(MeshTest, OneByOneChangesNothing) {
  const std::string ops =
      "ops:\n  - {id: fc1, type: ag_gemm, m: 64, k: 32, n: 32, mode: serial, transport: nccl}\n"
      "  - {id: ar, type: all_reduce, m: 16, n: 16, transport: p2p}\n";
  const std::string header = "dtype: f32\niterations: 2\nwarmup: 1\nlayer_step: false\n";
  auto engine = CheckedHostEngine(1);
  absl::StatusOr<v1::JobResult> plain =
      RunJobResult(*engine, Parse(header + ops), {0}, {}, nullptr);
  absl::StatusOr<v1::JobResult> mesh =
      RunJobResult(*engine, Parse(header + "mesh: {tp: 1, dp: 1}\n" + ops), {0}, {}, nullptr);
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_TRUE(mesh.ok()) << mesh.status();
  ASSERT_EQ(plain->ops_size(), mesh->ops_size());
  for (int i = 0; i < plain->ops_size(); ++i) {
    EXPECT_EQ(plain->ops(i).schedule(), mesh->ops(i).schedule());
    EXPECT_EQ(plain->ops(i).tp(), mesh->ops(i).tp());
    EXPECT_EQ(plain->ops(i).max_rel_error(), mesh->ops(i).max_rel_error()) << "the same inputs";
    EXPECT_TRUE(mesh->ops(i).verified());
  }
}

struct Refusal {
  std::string yaml;
  std::string message;
};

class MeshValidationTest : public ::testing::TestWithParam<Refusal> {};

TEST_P(MeshValidationTest, NamesTheField) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(GetParam().yaml);
  absl::Status status = spec.status();
  if (spec.ok()) status = ValidateJobSpec(*spec, ValidationLimits{.device_count = 4}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(GetParam().message));
}

INSTANTIATE_TEST_SUITE_P(
    Refusals, MeshValidationTest,
    ::testing::Values(
        Refusal{"mesh: {tp: 2, dp: 3}\nops: [{id: a, type: all_reduce, m: 8, n: 8}]\n",
                "mesh: tp x dp = 2 x 3 = 6 devices, but the job has 4"},
        Refusal{"ops: [{id: a, type: all_reduce, m: 8, n: 8, group: dp}]\n",
                "ops[0].group: dp is across the replicas of a mesh"},
        Refusal{"mesh: {tp: 2, dp: 2}\nops: [{id: a, type: all_reduce, m: 8, n: 8, group: dp, "
                "algorithm: hierarchical}]\n",
                "ops[0].algorithm: hierarchical reduces inside the tp groups"},
        Refusal{"mesh: {tp: 4, dp: 1}\nops: [{id: a, type: all_reduce, m: 8, n: 8, group: world, "
                "algorithm: hierarchical}]\n",
                "needs group: world and a mesh with tp > 1 and dp > 1"},
        Refusal{"mesh: {tp: 2, dp: 2}\nops: [{id: a, type: all_reduce, m: 9, n: 8, group: dp}]\n",
                "ops[0].m: 9 is not divisible by dp = 2"},
        Refusal{"mesh: {tp: 2, dp: 2}\nops: [{id: a, type: ag_gemm, m: 8, k: 8, n: 5}]\n",
                "ops[0].n: 5 is not divisible by tp = 2"},
        Refusal{"mesh: {tp: 2, dp: 2}\nops: [{id: a, type: all_reduce, m: 6, n: 8, group: world}]\n",
                "ops[0].m: 6 is not divisible by world = 4"},
        Refusal{"mesh: {tp: 2}\nops: [{id: a, type: all_reduce, m: 8, n: 8}]\n",
                "mesh.dp: required field missing"},
        Refusal{"mesh: {tp: 2, dp: 2, pp: 2}\nops: [{id: a, type: all_reduce, m: 8, n: 8}]\n",
                "unknown field \"pp\""},
        Refusal{"ops: [{id: a, type: all_reduce, m: 8, n: 8, group: pipeline}]\n",
                "ops[0].group: unknown group \"pipeline\" (expected tp, dp, world)"}));

}  // namespace
}  // namespace overlap::runner
