// The job runner on the host backend: results, autotune and its cache,
// cancellation, progress, and the memory estimate used to refuse jobs.
#include "server/runner/job_runner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/deferred_collectives.h"
#include "common/graph_parser.h"
#include "common/planner/planner.h"
#include "server/engine/host/host_engine.h"
#include "server/ops/reference.h"
#include "server/runner/layer_members.h"
#include "server/runner/layer_step.h"
#include "server/runner/op_phases.h"
#include "server/runner/tuning_cache.h"
#include "tests/auto_reason_util.h"
#include "tests/host_engine_util.h"
#include "tests/job_result_util.h"
#include "tests/op_spec_util.h"

namespace overlap::runner {
namespace {

JobSpec SmallJob() {
  JobSpec spec;
  spec.name = "t";
  spec.dtype = DType::kF32;
  spec.iterations = 3;
  spec.warmup = 1;
  OpSpec fc1;
  fc1.id = "fc1";
  fc1.type = OpType::kAgGemm;
  fc1.m = 128;
  fc1.k = 64;
  fc1.n = 96;
  OpSpec fc2 = fc1;
  fc2.id = "fc2";
  fc2.type = OpType::kGemmRs;
  fc2.k = 96;
  fc2.n = 64;
  fc2.mode = OverlapMode::kChunked;
  fc2.chunks = 2;
  fc2.transport = Transport::kP2p;
  fc2.after = {"fc1"};
  // Listed first but runs second: it depends on fc2.
  OpSpec out = fc2;
  out.id = "out";
  out.type = OpType::kGemmAr;
  out.mode = OverlapMode::kRing;
  out.transport = Transport::kNccl;
  out.after = {"fc2"};
  spec.ops = {out, fc1, fc2};
  return spec;
}

std::unique_ptr<engine::Engine> Engine() { return CheckedHostEngine(); }

TEST(JobRunnerTest, SustainedGemmAloneRunsBackToBackAndKeepsItsSecondHalf) {
  EXPECT_EQ(SustainedIterations(1000, 1.5, 20), 667);
  EXPECT_EQ(SustainedIterations(1000, 400, 20), 20) << "never fewer than the rounds' iterations";
  EXPECT_EQ(SustainedIterations(1000, 400, 0), 3);
  EXPECT_EQ(SustainedIterations(1000, 0, 7), 7) << "no GEMM time to divide by";
  EXPECT_EQ(SustainedIterations(60000, 1e-6, 1), 100000);

  auto engine = Engine();
  JobSpec spec = SmallJob();
  spec.gemm_alone_sustain_ms = 2;
  std::map<std::string, int> sustained;  // op -> iterations counted by its progress
  RunHooks hooks;
  hooks.on_progress = [&](const Progress& p) {
    if (p.phase == "gemm_alone sustained") sustained[p.op_id] = p.iterations;
  };
  auto result = RunJobResult(*engine, spec, {0, 1}, hooks, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(sustained.size(), 3u) << "every op has a GEMM";
  for (const v1::OpResult& op : result->ops()) {
    const int iterations = sustained[op.id()];
    EXPECT_GE(iterations, spec.iterations);
    EXPECT_EQ(op.gemm_alone().samples(), iterations - iterations / 2) << op.id();
    EXPECT_GT(op.gemm_alone().median_ms(), 0);
    EXPECT_TRUE(op.verified());
  }
}

TEST(JobRunnerTest, ReportsEveryOpInDependencyOrder) {
  auto engine = Engine();
  std::vector<std::string> phases;
  RunHooks hooks;
  hooks.on_progress = [&](const Progress& p) { phases.push_back(p.op_id + ":" + p.phase); };
  std::vector<std::string> finished;  // each op as it finished
  double step_so_far = 0;
  hooks.on_op_done = [&](const JobReport& header, const OpReport& op) {
    EXPECT_TRUE(header.ops.empty()) << "one op per call, not the ops before it";
    EXPECT_EQ(header.backend, "host");
    step_so_far += op.step.median;
    EXPECT_DOUBLE_EQ(header.total_step_ms, step_so_far);
    finished.push_back(op.id);
  };
  auto result = RunJobResult(*engine, SmallJob(), {0, 1}, hooks, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(finished, (std::vector<std::string>{"fc1", "fc2", "out"}));
  ASSERT_EQ(result->ops_size(), 3);
  EXPECT_EQ(result->ops(0).id(), "fc1");
  EXPECT_EQ(result->ops(1).id(), "fc2");
  EXPECT_EQ(result->ops(2).id(), "out");
  EXPECT_EQ(result->backend(), "host");
  // Explicit schedules run as asked; auto resolves to a concrete mode.
  EXPECT_EQ(result->ops(1).mode(), "chunked");
  EXPECT_EQ(result->ops(1).chunks(), 2);
  EXPECT_EQ(result->ops(1).transport(), "p2p");
  EXPECT_EQ(result->ops(2).mode(), "ring");
  EXPECT_NE(result->ops(0).mode(), "auto");
  EXPECT_NE(result->ops(0).transport(), "auto");
  double total = 0;
  for (const v1::OpResult& op : result->ops()) {
    EXPECT_TRUE(op.verified());
    EXPECT_LT(op.max_rel_error(), 1e-4);
    EXPECT_EQ(op.step().samples(), 3);
    EXPECT_GT(op.step().median_ms(), 0);
    EXPECT_GT(op.gemm_alone().median_ms(), 0);
    // Per rank, in rank order; each iteration's figure is the max over ranks,
    // so its median is at least every rank's median.
    ASSERT_EQ(op.gemm_alone_rank_ms_size(), 2);
    for (double ms : op.gemm_alone_rank_ms()) {
      EXPECT_GT(ms, 0);
      EXPECT_LE(ms, op.gemm_alone().median_ms());
    }
    EXPECT_GT(op.comm_alone().median_ms(), 0);
    EXPECT_LE(op.comm_alone().median_ms(),
              std::max(op.comm_alone_nccl().median_ms(), op.comm_alone_p2p().median_ms()));
    EXPECT_LE(op.step().min_ms(), op.step().median_ms());
    EXPECT_LE(op.hidden_fraction(), 1.0);
    EXPECT_GT(op.tflops(), 0);
    EXPECT_GT(op.busbw_gbps(), 0);
    total += op.step().median_ms();
  }
  EXPECT_DOUBLE_EQ(result->total_step_ms(), total);
  EXPECT_NE(std::find(phases.begin(), phases.end(), "fc1:verify"), phases.end());
  // Timed iterations ran behind launch gates, and the runner opened every one
  // (a hold left closed lets go only after 500 ms, and is counted).
  ASSERT_NE(engine->Gates(), nullptr);
  EXPECT_EQ(engine->Gates()->GateTimeouts(0) + engine->Gates()->GateTimeouts(1), 0);
}

// A collective alone: an all-reduce of m x n after `after`.
OpSpec AllReduceAfter(const std::string& id, int64_t m, int64_t n, const std::string& after,
                      Transport transport = Transport::kAuto) {
  OpSpec op;
  op.id = id;
  op.type = OpType::kAllReduce;
  op.m = m;
  op.n = n;
  op.transport = transport;
  op.after = {after};
  return op;
}

// A bf16 sum over four ranks rounds four times on its way (NCCL's ring too):
// the ops that sum the ranks' partials are held to 4 x 2^-8, the all-gather's
// GEMM to the plain bf16 bound.
TEST(JobRunnerTest, ToleranceWidensForSumsOverMoreRanks) {
  engine::HostEngineOptions options;
  options.device_count = 4;
  options.hazard_checks = true;
  auto engine = std::move(engine::CreateHostEngine(options)).value();
  JobSpec spec = SmallJob();
  spec.dtype = DType::kBF16;
  auto result = RunJobResult(*engine, spec, {0, 1, 2, 3}, {}, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  for (const v1::OpResult& op : result->ops()) {
    EXPECT_DOUBLE_EQ(op.tolerance(), op.type() == "ag_gemm" ? 1e-2 : 4.0 / 256) << op.id();
    EXPECT_TRUE(op.verified()) << op.id();
    EXPECT_LE(op.max_rel_error(), op.tolerance()) << op.id();
  }
}

// An op's inputs are drawn by its id: the same op measures the same error
// (bf16 rounding on the same data) whether other ops come before it or not,
// and another id draws other data.
TEST(JobRunnerTest, AnOpKeepsItsInputsWhenOpsAreAddedBeforeIt) {
  auto engine = Engine();
  auto run = [&](const std::string& graph) -> v1::OpResult {
    absl::StatusOr<JobSpec> spec = ParseJobSpec(graph);
    EXPECT_TRUE(spec.ok()) << spec.status();
    spec->layer_step = false;
    spec->timeline = false;
    auto result = RunJobResult(*engine, *spec, {0, 1}, {}, nullptr);
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? result->ops(result->ops_size() - 1) : v1::OpResult();
  };
  constexpr char kHead[] = "dtype: bf16\niterations: 1\nwarmup: 0\nops:\n";
  constexpr char kFc1[] =
      "  - {id: fc1, type: ag_gemm, m: 64, k: 64, n: 64, mode: serial, transport: p2p}\n";
  const v1::OpResult alone = run(absl::StrCat(kHead, kFc1));
  const v1::OpResult after = run(absl::StrCat(
      kHead, "  - {id: x, type: gemm_rs, m: 64, k: 64, n: 64, mode: serial, transport: p2p}\n",
      kFc1));
  const v1::OpResult renamed = run(absl::StrCat(
      kHead, "  - {id: fc9, type: ag_gemm, m: 64, k: 64, n: 64, mode: serial, transport: p2p}\n"));
  ASSERT_EQ(after.id(), "fc1");
  EXPECT_GT(alone.max_rel_error(), 0);
  EXPECT_EQ(after.max_rel_error(), alone.max_rel_error());
  EXPECT_NE(renamed.max_rel_error(), alone.max_rel_error());
  // Stable across builds and daemons (FNV-1a), so that nodes agree.
  EXPECT_EQ(ops::InputKeyOf("a"), 0xaf63dc4c8601ec8cull);
}

// An fp8 graph: every op verified, its gathers counted in fp8 bytes and its
// sums in bf16 ones (what an fp8 layer moves), and the whole layer step too.
TEST(JobRunnerTest, Fp8GraphGathersFp8AndSumsBf16) {
  auto engine = Engine();
  JobSpec spec = SmallJob();
  spec.dtype = DType::kFP8;
  spec.ops.push_back(AllReduceAfter("grads", 256, 64, "out"));
  OpSpec gather = AllReduceAfter("gather", 128, 64, "out");
  gather.type = OpType::kAllGather;
  spec.ops.push_back(gather);
  auto result = RunJobResult(*engine, spec, {0, 1}, {}, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->ops_size(), 5);
  std::map<std::string, double> bytes_per_element;
  const std::map<std::string, double> elements = {{"fc1", 128.0 * 64},
                                                  {"fc2", 128.0 * 64},
                                                  {"out", 128.0 * 64},
                                                  {"grads", 256.0 * 64},
                                                  {"gather", 128.0 * 64}};
  for (const v1::OpResult& op : result->ops()) {
    EXPECT_EQ(op.dtype(), "fp8") << op.id();
    EXPECT_TRUE(op.verified()) << op.id();
    EXPECT_LE(op.max_rel_error(), op.tolerance()) << op.id();
    EXPECT_DOUBLE_EQ(op.tolerance(), 1e-2) << op.id();
    ASSERT_GT(op.algbw_gbps(), 0) << op.id();
    // algbw = bytes / comm alone: the bytes per element it was counted with.
    bytes_per_element[op.id()] =
        op.algbw_gbps() * 1e9 * op.comm_alone().median_ms() * 1e-3 / elements.at(op.id());
  }
  EXPECT_NEAR(bytes_per_element["fc1"], 1, 1e-9);     // A gathered in fp8
  EXPECT_NEAR(bytes_per_element["gather"], 1, 1e-9);  // an all_gather of fp8
  EXPECT_NEAR(bytes_per_element["fc2"], 2, 1e-9);     // the bf16 partial reduce-scattered
  EXPECT_NEAR(bytes_per_element["out"], 2, 1e-9);
  EXPECT_NEAR(bytes_per_element["grads"], 2, 1e-9);  // gradients summed in bf16
  // The layer step checks every output again (it fails the job otherwise).
  ASSERT_TRUE(result->has_layer_step()) << result->layer_note();
  EXPECT_THAT(result->layer_deferred(), ::testing::Contains("grads"));
}

// A collective alone in a layer graph: its steps are its comm alone, all of it
// exposed; no GEMM phases run, and its busbw follows nccl-tests' factors.
TEST(JobRunnerTest, CollectiveAloneIsAllExposedCommunication) {
  auto engine = Engine();
  JobSpec spec = SmallJob();
  spec.ops.push_back(AllReduceAfter("grads", 256, 64, "out"));
  std::vector<std::string> phases;
  RunHooks hooks;
  hooks.on_progress = [&](const Progress& p) {
    if (p.op_id == "grads") phases.push_back(p.phase);
  };
  auto result = RunJobResult(*engine, spec, {0, 1}, hooks, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->ops_size(), 4);
  const v1::OpResult& op = result->ops(3);
  EXPECT_EQ(op.id(), "grads");
  EXPECT_EQ(op.type(), "all_reduce");
  EXPECT_EQ(op.mode(), "serial");
  EXPECT_EQ(op.gemm_alone().samples(), 0);
  EXPECT_GT(op.step().median_ms(), 0);
  EXPECT_DOUBLE_EQ(op.comm_alone().median_ms(), op.step().median_ms());
  EXPECT_DOUBLE_EQ(op.exposed_comm_ms(), op.step().median_ms());
  EXPECT_DOUBLE_EQ(op.hidden_fraction(), 0);
  EXPECT_DOUBLE_EQ(op.tflops(), 0);
  // 2(N-1)/N at N = 2: busbw equals algbw, which is the buffer over the step.
  EXPECT_NEAR(op.busbw_gbps(), 256 * 64 * 4 / (op.step().median_ms() * 1e-3) / 1e9, 1e-9);
  EXPECT_TRUE(op.verified());
  EXPECT_LE(op.max_rel_error(), op.tolerance());
  for (const std::string& phase : phases) {
    EXPECT_EQ(phase.find("gemm"), std::string::npos) << phase;
    EXPECT_EQ(phase.find("comm_alone"), std::string::npos) << phase;
  }
  EXPECT_EQ(result->gpu(), "host-rank-0");
  EXPECT_THAT(result->overlapd_version(), ::testing::StartsWith(OVERLAP_VERSION));
  EXPECT_DOUBLE_EQ(result->total_exposed_comm_ms(),
                   result->ops(0).exposed_comm_ms() + result->ops(1).exposed_comm_ms() +
                       result->ops(2).exposed_comm_ms() + op.exposed_comm_ms());
}

// After the ops ran alone, the graph runs as one step: the collective alone
// that nothing waits on is deferred to a side stream (the hazard checker
// watches its hand-offs), and every output is checked again.
TEST(JobRunnerTest, LayerStepDefersTheCollectiveNothingWaitsOn) {
  auto engine = Engine();
  JobSpec spec = SmallJob();
  const OpSpec grads = AllReduceAfter("grads", 256, 64, "fc1");
  spec.ops.push_back(grads);
  std::vector<std::string> layer_phases;
  RunHooks hooks;
  hooks.on_progress = [&](const Progress& p) {
    if (p.op_id == "layer" && (layer_phases.empty() || layer_phases.back() != p.phase)) {
      layer_phases.push_back(p.phase);
    }
  };
  auto result = RunJobResult(*engine, spec, {0, 1}, hooks, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->layer_step().samples(), spec.iterations);
  EXPECT_GT(result->layer_step().median_ms(), 0);
  double gemms_ms = 0;
  for (const v1::OpResult& op : result->ops()) gemms_ms += op.gemm_alone().median_ms();
  EXPECT_EQ(result->layer_activation_ms(), 0) << "no op reads another's output";
  EXPECT_DOUBLE_EQ(result->layer_exposed_comm_ms(),
                   std::max(0.0, result->layer_step().median_ms() - gemms_ms));
  ASSERT_EQ(result->layer_deferred_size(), 1);
  EXPECT_EQ(result->layer_deferred(0), "grads");
  EXPECT_TRUE(result->layer_note().empty());
  EXPECT_EQ(layer_phases, (std::vector<std::string>{"setup", "step", "step without deferred",
                                                    "timeline", "verify"}));
  // What was deferred, how, and how much of it hid behind fc2 and out.
  ASSERT_EQ(result->layer_deferrals_size(), 1);
  const v1::LayerDeferral& deferral = result->layer_deferrals(0);
  EXPECT_EQ(deferral.op(), "grads");
  EXPECT_EQ(deferral.how(), "whole");
  EXPECT_EQ(deferral.pieces(), 1);
  EXPECT_EQ(deferral.joined_before(), "");
  EXPECT_GT(deferral.alone_ms(), 0);
  EXPECT_EQ(result->layer_step_without_deferred().samples(), spec.iterations);
  EXPECT_GE(result->layer_deferred_hidden_fraction(), 0.0);
  EXPECT_LE(result->layer_deferred_hidden_fraction(), 1.0);

  // The layer order sent grads right after fc1, ahead of fc2 and out.
  EXPECT_EQ(std::vector<std::string>(result->layer_order().begin(), result->layer_order().end()),
            (std::vector<std::string>{"fc1", "grads", "fc2", "out"}));

  // Waited on, the collective still runs beside fc2 and out, and joins before
  // the op that waits on it; without the layer step, or with one op, nothing
  // is timed as a layer.
  OpSpec after_grads = spec.ops[1];  // fc1's shape
  after_grads.id = "tail";
  after_grads.after = {"grads"};
  spec.ops.push_back(after_grads);
  result = RunJobResult(*engine, spec, {0, 1}, {}, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_GT(result->layer_step().samples(), 0);
  ASSERT_EQ(result->layer_joined_before_size(), 1);
  EXPECT_EQ(result->layer_joined_before(0), "tail");
  spec.layer_step = false;
  result = RunJobResult(*engine, spec, {0, 1}, {}, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_FALSE(result->has_layer_step());
  spec.layer_step = true;
  spec.ops = {grads};
  spec.ops[0].after.clear();
  result = RunJobResult(*engine, spec, {0, 1}, {}, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_FALSE(result->has_layer_step());
}

// A backward MLP block as Megatron runs it with sequence parallelism: the
// all-gather of X for fc1's weight gradient runs on the side stream beside
// fc1's data-gradient GEMM and joins before the weight-gradient GEMM that
// waits on it; the gradient all-reduce runs to the end of the step. The GEMMs
// alone (weight gradients) have no collective to time or hide.
TEST(JobRunnerTest, BackwardGraphRunsTheGatherBesideTheDataGradient) {
  auto engine = Engine();
  JobSpec spec;
  spec.name = "mlp-backward";
  spec.dtype = DType::kF32;
  spec.iterations = 3;
  spec.warmup = 1;
  // s = 64 tokens, h = 32, 4h = 128.
  spec.ops = {MakeOp("dgrad2", OpType::kAgGemm, 64, 32, 128, {}),
              MakeOp("wgrad2", OpType::kGemm, 32, 64, 128, {"dgrad2"}),
              MakeOp("x_gather", OpType::kAllGather, 64, 0, 32, {"dgrad2"}),
              MakeOp("dgrad1", OpType::kGemmRs, 64, 128, 32, {"dgrad2"}),
              MakeOp("wgrad1", OpType::kGemm, 32, 64, 128, {"dgrad1", "x_gather"}),
              MakeOp("grads", OpType::kAllReduce, 64, 0, 128, {"wgrad1", "wgrad2"})};
  std::vector<std::string> phases;
  RunHooks hooks;
  hooks.on_progress = [&](const Progress& p) {
    if (p.op_id == "wgrad1") phases.push_back(p.phase);
  };
  auto result = RunJobResult(*engine, spec, {0, 1}, hooks, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->ops_size(), 6);
  const v1::OpResult& wgrad1 = result->ops(4);
  EXPECT_EQ(wgrad1.id(), "wgrad1");
  EXPECT_EQ(wgrad1.type(), "gemm");
  EXPECT_EQ(wgrad1.schedule(), "serial");
  EXPECT_EQ(wgrad1.transport(), "none");
  EXPECT_EQ(wgrad1.auto_reason(), "only one schedule applies");
  EXPECT_EQ(wgrad1.comm_alone().samples(), 0);
  EXPECT_EQ(wgrad1.comm_alone_nccl().samples(), 0);
  EXPECT_EQ(wgrad1.gemm_beside_comm().samples(), 0);
  EXPECT_DOUBLE_EQ(wgrad1.gemm_alone().median_ms(), wgrad1.step().median_ms());
  EXPECT_EQ(wgrad1.gemm_alone_rank_ms_size(), 2);
  EXPECT_DOUBLE_EQ(wgrad1.exposed_comm_ms(), 0);
  EXPECT_DOUBLE_EQ(wgrad1.busbw_gbps(), 0);
  EXPECT_NEAR(wgrad1.tflops(), 2.0 * 32 * 64 * 128 / (wgrad1.step().median_ms() * 1e-3) / 1e12,
              1e-12);
  EXPECT_TRUE(wgrad1.verified());
  EXPECT_LE(wgrad1.max_rel_error(), wgrad1.tolerance());
  for (const std::string& phase : phases) {
    EXPECT_EQ(phase.find("comm"), std::string::npos) << phase;
    EXPECT_EQ(phase.find("gemm_alone"), std::string::npos) << phase;
  }

  const std::vector<std::string> deferred(result->layer_deferred().begin(),
                                          result->layer_deferred().end());
  const std::vector<std::string> joined(result->layer_joined_before().begin(),
                                        result->layer_joined_before().end());
  EXPECT_EQ(deferred, (std::vector<std::string>{"x_gather", "grads"}));
  EXPECT_EQ(joined, (std::vector<std::string>{"wgrad1", ""}));
  EXPECT_EQ(result->layer_step().samples(), spec.iterations);

  // An op on the side streams that waits on the gather runs after it there:
  // the gather still joins before the first op on the main streams that
  // waits on it, even when the side waiter went into a bucket.
  JobSpec side_waiter = spec;
  side_waiter.ops.insert(side_waiter.ops.begin() + 4,
                         MakeOp("x_sum", OpType::kAllReduce, 64, 0, 32, {"x_gather"}));
  // One transport, so that they share a bucket whatever autotune would pick.
  for (OpSpec& o : side_waiter.ops) {
    if (o.type == OpType::kAllReduce) o.transport = Transport::kP2p;
  }
  result = RunJobResult(*engine, side_waiter, {0, 1}, {}, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(
      std::vector<std::string>(result->layer_deferred().begin(), result->layer_deferred().end()),
      (std::vector<std::string>{"x_gather", "bucket(x_sum+grads)"}));
  EXPECT_EQ(std::vector<std::string>(result->layer_joined_before().begin(),
                                     result->layer_joined_before().end()),
            (std::vector<std::string>{"wgrad1", ""}));

  // With nothing between it and the op that waits on it, the gather has
  // nothing to run beside and stays on the main streams.
  spec.ops[2].after = {"dgrad1"};
  result = RunJobResult(*engine, spec, {0, 1}, {}, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(
      std::vector<std::string>(result->layer_deferred().begin(), result->layer_deferred().end()),
      (std::vector<std::string>{"grads"}));
}

// Small deferred all-reduces merge into buckets of up to bucket_mib, fired
// where the last of them ran; a large one, or another transport, stays apart.
TEST(JobRunnerTest, LayerStepBucketsSmallDeferredAllReduces) {
  auto engine = Engine();
  JobSpec spec = SmallJob();
  spec.bucket_mib = 1;
  auto grads = [](const std::string& id, int64_t m, Transport transport) {
    return AllReduceAfter(id, m, 256, "fc1", transport);
  };
  // fp32: 64 rows x 256 = 64 KiB; 1024 rows = 1 MiB
  spec.ops.push_back(grads("g1", 64, Transport::kP2p));
  spec.ops.push_back(grads("g2", 128, Transport::kP2p));
  spec.ops.push_back(grads("big", 2048, Transport::kP2p));
  spec.ops.push_back(grads("g3", 64, Transport::kP2p));
  spec.ops.push_back(grads("g4", 64, Transport::kNccl));
  auto result = RunJobResult(*engine, spec, {0, 1}, {}, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  std::vector<std::string> deferred(result->layer_deferred().begin(),
                                    result->layer_deferred().end());
  // The bucket fires where g3 ran, after big; g4 (NCCL) closes it and stays alone.
  EXPECT_EQ(deferred, (std::vector<std::string>{"big", "bucket(g1+g2+g3)", "g4"}));
  EXPECT_GT(result->layer_step().median_ms(), 0);

  spec.bucket_mib = 0;
  result = RunJobResult(*engine, spec, {0, 1}, {}, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->layer_deferred_size(), 5);
}

// Deferred all-reduces with another algorithm stay apart from a bucket; those
// with the same one share it, and the bucket runs their algorithm (verified
// with the rest of the layer step).
TEST(JobRunnerTest, LayerStepBucketsOnlyAllReducesOfOneAlgorithm) {
  auto engine = Engine();
  JobSpec spec = SmallJob();
  spec.bucket_mib = 1;
  auto grads = [](const std::string& id, AllReduceAlgorithm algorithm) {
    OpSpec op = AllReduceAfter(id, 64, 256, "fc1", Transport::kP2p);
    op.algorithm = algorithm;
    return op;
  };
  spec.ops.push_back(grads("t1", AllReduceAlgorithm::kTree));
  spec.ops.push_back(grads("t2", AllReduceAlgorithm::kTree));
  spec.ops.push_back(grads("r1", AllReduceAlgorithm::kRing));
  spec.ops.push_back(grads("d1", AllReduceAlgorithm::kDefault));
  auto result = RunJobResult(*engine, spec, {0, 1}, {}, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  std::vector<std::string> deferred(result->layer_deferred().begin(),
                                    result->layer_deferred().end());
  EXPECT_EQ(deferred, (std::vector<std::string>{"bucket(t1+t2)", "r1", "d1"}));
  std::map<std::string, std::string> schedules;
  for (const v1::OpResult& op : result->ops()) schedules[op.id()] = op.schedule();
  EXPECT_EQ(schedules["t1"], "serial/p2p/tree");
  EXPECT_EQ(schedules["r1"], "serial/p2p/ring");
  EXPECT_EQ(schedules["d1"], "serial/p2p");
}

// One all-reduce whose transport and layout auto chooses: 5 candidates on the
// host backend.
JobSpec AllReduceOverEveryLayout() {
  JobSpec spec = SmallJob();
  spec.ops = {AllReduceAfter("grads", 63, 256, "", Transport::kAuto)};
  spec.ops[0].after.clear();
  spec.ops[0].algorithm = AllReduceAlgorithm::kAuto;
  return spec;
}

// autotune_budget_s bounds autotune: past it no further candidate run starts
// (the first always does), auto picks from what it measured, and its reason
// says what the budget cut.
TEST(JobRunnerTest, AutotuneBudgetCutsTheTuningShortAndSaysSo) {
  auto engine = CheckedHostEngine(3);
  JobSpec spec = AllReduceOverEveryLayout();
  spec.autotune_budget_s = 1e-9;
  auto result = RunJobResult(*engine, spec, {0, 1, 2}, {}, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  const v1::OpResult& op = result->ops(0);
  EXPECT_EQ(op.schedule(), "serial/nccl") << "the one candidate timed: serial over NCCL, first";
  EXPECT_THAT(op.auto_reason(),
              ::testing::HasSubstr("; autotune_budget_s (1e-09 s) cut autotune short after 1 of "
                                   "its 10 first-stage runs: 1 of 5 candidates timed"));
  EXPECT_TRUE(op.verified());
}

// algorithm: auto tunes over every layout the backend has (the host's library
// collectives have one: no nccl/ring or nccl/tree), verifies what it chose,
// names it, and keys the tuning cache by what was asked.
TEST(JobRunnerTest, AllReduceAlgorithmAutoTunesOverTheLayouts) {
  auto engine = CheckedHostEngine(3);
  JobSpec spec = AllReduceOverEveryLayout();
  auto result = RunJobResult(*engine, spec, {0, 1, 2}, {}, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  const v1::OpResult& op = result->ops(0);
  std::set<std::string> timed;
  for (const v1::CandidateTiming& c : op.candidates()) timed.insert(c.schedule());
  EXPECT_EQ(timed, (std::set<std::string>{"serial/nccl", "serial/p2p", "serial/p2p/ring",
                                          "serial/p2p/tree", "serial/p2p/ps"}));
  EXPECT_TRUE(timed.count(op.schedule())) << op.schedule();
  EXPECT_EQ(op.schedule(), op.algorithm().empty()
                               ? absl::StrCat("serial/", op.transport())
                               : absl::StrCat("serial/", op.transport(), "/", op.algorithm()));
  EXPECT_THAT(op.auto_reason(), IsFreshlyAutotuned());
  EXPECT_TRUE(op.verified());
  EXPECT_LT(op.max_rel_error(), 1e-5);
}

// A bucket runs its members as one, where the last of them ran: an op that
// waits on a member (an all-reduce, or any op on the side streams) closes the
// bucket first, so that the member still runs before it.
TEST(JobRunnerTest, LayerStepNeverBucketsPastAnOpThatWaits) {
  auto engine = Engine();
  JobSpec spec = SmallJob();
  spec.bucket_mib = 1;
  // g2 waits on g1; x, an all-gather on the side streams, on g3; g4 and g5 are free.
  spec.ops.push_back(AllReduceAfter("g1", 64, 256, "fc1", Transport::kP2p));
  spec.ops.push_back(AllReduceAfter("g2", 64, 256, "g1", Transport::kP2p));
  spec.ops.push_back(AllReduceAfter("g3", 64, 256, "fc1", Transport::kP2p));
  OpSpec x = MakeOp("x", OpType::kAllGather, 64, 0, 256, {"g3"});
  x.transport = Transport::kP2p;
  spec.ops.push_back(x);
  spec.ops.push_back(AllReduceAfter("g4", 64, 256, "fc1", Transport::kP2p));
  spec.ops.push_back(AllReduceAfter("g5", 64, 256, "fc1", Transport::kP2p));
  auto result = RunJobResult(*engine, spec, {0, 1}, {}, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  // The layer order sends g1 and g3 first (ops wait on them). They share a
  // bucket, which x closes; g2 goes after x, with the free ones.
  EXPECT_EQ(
      std::vector<std::string>(result->layer_deferred().begin(), result->layer_deferred().end()),
      (std::vector<std::string>{"bucket(g1+g3)", "x", "bucket(g2+g4+g5)"}));

  // With x waiting on fc1 instead, only g1 goes first, and g2, which waits on
  // it, closes its bucket: g1 runs alone.
  spec.ops[spec.ops.size() - 3].after = {"fc1"};  // x
  result = RunJobResult(*engine, spec, {0, 1}, {}, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(
      std::vector<std::string>(result->layer_deferred().begin(), result->layer_deferred().end()),
      (std::vector<std::string>{"g1", "x", "bucket(g2+g3+g4+g5)"}));
}

// Every op fits alone, but not all of them at once: the ops' results stand and
// the layer step says why it is missing.
TEST(JobRunnerTest, LayerStepThatDoesNotFitIsSkippedWithAReason) {
  engine::HostEngineOptions options;
  options.device_count = 2;
  options.device_memory_bytes = (5 << 20) / 2;  // one op fits, two do not
  auto engine = std::move(engine::CreateHostEngine(options)).value();
  JobSpec spec;
  spec.name = "big";
  spec.dtype = DType::kF32;
  spec.iterations = 1;
  spec.warmup = 0;
  spec.verify = false;
  for (const char* id : {"a", "b"}) {
    OpSpec op;
    op.id = id;
    op.type = OpType::kAllGather;
    op.m = 512;
    op.n = 512;  // X 0.5 MiB + Y 1 MiB per rank
    op.mode = OverlapMode::kSerial;
    op.transport = Transport::kP2p;
    spec.ops.push_back(op);
  }
  auto result = RunJobResult(*engine, spec, {0, 1}, {}, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->ops_size(), 2);
  EXPECT_FALSE(result->has_layer_step());
  EXPECT_THAT(result->layer_note(), ::testing::StartsWith("no layer step: the buffers of every op "
                                                          "do not fit in device memory at once"));
}

TEST(JobRunnerTest, HeadStartCoversTheEnqueueWithFewGemmShapes) {
  // 1 ms GEMM over 1024 rows. A graph's 0.05 ms enqueue: an eighth of the rows
  // (0.125 ms) covers 1.25 x 0.05 + 0.02 = 0.0825 ms, a sixteenth would not.
  HeadStartPlan p = PlanHeadStart(0.05, 1.0, 1024);
  EXPECT_EQ(p.whole_gemms, 0);
  EXPECT_EQ(p.rows, 128);
  // A 2 ms NCCL enqueue needs 2.52 ms: two whole GEMMs, then all rows again
  // (half the rows, 0.5 ms, would fall short of the 0.52 left).
  p = PlanHeadStart(2.0, 1.0, 1024);
  EXPECT_EQ(p.whole_gemms, 2);
  EXPECT_EQ(p.rows, 1024);
  // Never below a sixteenth of the rows, however short the enqueue.
  p = PlanHeadStart(0.0, 10.0, 1024);
  EXPECT_EQ(p.whole_gemms, 0);
  EXPECT_EQ(p.rows, 64);
  // Odd row counts are not split.
  EXPECT_EQ(PlanHeadStart(0.0, 10.0, 999).rows, 999);
  EXPECT_EQ(PlanHeadStart(0.0, 10.0, 6).rows, 3);
}

// The shapes the setup runs once so that none is first seen (and tuned) inside
// a timed phase: every row count PlanHeadStart can choose short of m.
TEST(JobRunnerTest, HeadStartRowsListEveryShareAHeadStartMayTake) {
  EXPECT_EQ(HeadStartRows(1024), (std::vector<int64_t>{512, 256, 128, 64}));
  EXPECT_EQ(HeadStartRows(16), (std::vector<int64_t>{8, 4, 2, 1}));
  EXPECT_EQ(HeadStartRows(6), (std::vector<int64_t>{3}));
  EXPECT_TRUE(HeadStartRows(999).empty());
  for (const int64_t m : {int64_t{1024}, int64_t{96}, int64_t{6}, int64_t{999}}) {
    std::vector<int64_t> choosable = HeadStartRows(m);
    choosable.push_back(m);
    for (double host_ms = 0; host_ms < 3; host_ms += 0.01) {
      const int64_t rows = PlanHeadStart(host_ms, 1.0, m).rows;
      EXPECT_NE(std::find(choosable.begin(), choosable.end(), rows), choosable.end())
          << "m " << m << " host " << host_ms << " ms: " << rows << " rows";
    }
  }
}

TEST(JobRunnerTest, PreheatCoversItsTimeInWholeGemmsWithinBounds) {
  EXPECT_EQ(PreheatGemms(300, 1.0), 300);
  EXPECT_EQ(PreheatGemms(300, 0.7), 429);  // rounded up: never shorter than asked
  EXPECT_EQ(PreheatGemms(300, 5.6), 54);
  EXPECT_EQ(PreheatGemms(1, 5.6), 1);
  EXPECT_EQ(PreheatGemms(300, 0.01), kPreheatMaxGemms);
  EXPECT_EQ(PreheatGemms(0, 1.0), 0);    // off
  EXPECT_EQ(PreheatGemms(300, 0.0), 0);  // no heat head start: nothing to run
}

// What the job runner reported doing for op `id`, in order, each phase once
// (progress comes once per iteration).
std::vector<std::string> PhasesOf(const std::vector<Progress>& all, const std::string& id) {
  std::vector<std::string> out;
  for (const Progress& p : all) {
    if (p.op_id == id && (out.empty() || out.back() != p.phase)) out.push_back(p.phase);
  }
  return out;
}

TEST(JobRunnerTest, PreheatsBeforeEachMeasuredPhaseAndAlternatesTheAutotuneOrder) {
  engine::HostEngineOptions options;
  options.device_count = 2;
  options.preheat_ms = 1;
  auto engine = std::move(engine::CreateHostEngine(options)).value();
  std::vector<Progress> progress;
  RunHooks hooks;
  hooks.on_progress = [&](const Progress& p) { progress.push_back(p); };
  auto result = RunJobResult(*engine, SmallJob(), {0, 1}, hooks, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();

  // fc1 is auto: a preheat, autotune's rounds, the collective alone, a
  // preheat, then the timed rounds.
  const std::vector<std::string> fc1 = PhasesOf(progress, "fc1");
  auto at = [&](const std::vector<std::string>& phases, const std::string& prefix, size_t from) {
    for (size_t i = from; i < phases.size(); ++i) {
      if (phases[i].rfind(prefix, 0) == 0) return i;
    }
    return phases.size();
  };
  const size_t first_tune = at(fc1, "autotune", 0);
  ASSERT_LT(first_tune, fc1.size());
  EXPECT_EQ(fc1[first_tune - 1], "preheat");
  const size_t timed = at(fc1, "gemm_alone 1/", 0);
  ASSERT_LT(timed, fc1.size());
  EXPECT_EQ(fc1[timed - 1], "preheat");
  EXPECT_EQ(std::count(fc1.begin(), fc1.end(), "preheat"), 2);
  // Round 2 of stage one runs the candidates in the reverse of round 1's order.
  std::vector<std::string> round1, round2;
  // "autotune round 1/2, candidate 3/7: chunked/4/nccl"
  for (const std::string& phase : fc1) {
    if (phase.rfind("autotune round ", 0) != 0) continue;
    const size_t colon = phase.find(": ");
    ASSERT_NE(colon, std::string::npos) << phase;
    EXPECT_NE(phase.find(", candidate "), std::string::npos) << phase;
    (phase.find("round 1/") != std::string::npos ? round1 : round2)
        .push_back(phase.substr(colon + 2));
  }
  ASSERT_GT(round1.size(), 2u);
  EXPECT_EQ(round2, std::vector<std::string>(round1.rbegin(), round1.rend()));

  // fc2's schedule is fixed: nothing to tune, one preheat before the timed rounds.
  const std::vector<std::string> fc2 = PhasesOf(progress, "fc2");
  EXPECT_EQ(at(fc2, "autotune", 0), fc2.size());
  EXPECT_EQ(std::count(fc2.begin(), fc2.end(), "preheat"), 1);
  EXPECT_EQ(fc2[at(fc2, "gemm_alone 1/", 0) - 1], "preheat");
  // The layer step heats too, right before its timed steps.
  const std::vector<std::string> layer = PhasesOf(progress, "layer");
  const size_t step = at(layer, "step", 0);
  ASSERT_LT(step, layer.size());
  EXPECT_EQ(layer[step - 1], "preheat");
  for (const v1::OpResult& op : result->ops()) EXPECT_TRUE(op.verified());
  EXPECT_EQ(result->preheat_ms(), 1);

  // Off by default on the host backend, and with the idle head start.
  progress.clear();
  auto plain = RunJobResult(*Engine(), SmallJob(), {0, 1}, hooks, nullptr);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->preheat_ms(), 0);
  for (const Progress& p : progress) EXPECT_NE(p.phase, "preheat");
  progress.clear();
  JobSpec idle = SmallJob();
  idle.heat_head_start = false;
  auto idle_result = RunJobResult(*engine, idle, {0, 1}, hooks, nullptr);
  ASSERT_TRUE(idle_result.ok()) << idle_result.status();
  EXPECT_EQ(idle_result->preheat_ms(), 0);
  for (const Progress& p : progress) EXPECT_NE(p.phase, "preheat");
}

TEST(JobRunnerTest, ResultSaysWhatTheGpusDidBeforeEachIteration) {
  auto engine = Engine();
  ASSERT_NE(engine->Gates(), nullptr);
  JobSpec spec = SmallJob();
  auto heat = RunJobResult(*engine, spec, {0, 1}, {}, nullptr);
  ASSERT_TRUE(heat.ok()) << heat.status();
  EXPECT_EQ(heat->head_start(), "heat");
  spec.heat_head_start = false;
  auto idle = RunJobResult(*engine, spec, {0, 1}, {}, nullptr);
  ASSERT_TRUE(idle.ok()) << idle.status();
  EXPECT_EQ(idle->head_start(), "idle");
  for (const v1::OpResult& op : idle->ops()) EXPECT_TRUE(op.verified());
}

TEST(JobRunnerTest, ChunksNarrowAutoToThatCount) {
  auto engine = Engine();
  JobSpec spec = SmallJob();
  spec.ops = {spec.ops[2]};  // fc2, gemm_rs: 64 rows per rank, which 3 does not divide
  spec.ops[0].after.clear();
  spec.ops[0].mode = OverlapMode::kAuto;
  spec.ops[0].chunks = 3;
  auto result = RunJobResult(*engine, spec, {0, 1}, {}, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  const v1::OpResult& op = result->ops(0);
  EXPECT_TRUE(op.verified());
  EXPECT_LT(op.max_rel_error(), 1e-4);
  // serial, bulk, chunked/3 and ring/3 over p2p; nothing with other counts.
  EXPECT_THAT(op.auto_reason(), IsFreshlyAutotuned());
  // Every one measured, fastest first.
  ASSERT_EQ(op.candidates_size(), 4);
  for (int i = 1; i < 4; ++i) {
    EXPECT_LE(op.candidates(i - 1).best_ms(), op.candidates(i).best_ms());
  }
  for (const v1::CandidateTiming& c : op.candidates()) {
    EXPECT_TRUE(c.schedule() == "serial/p2p" || c.schedule() == "bulk/p2p" ||
                c.schedule() == "chunked/3/p2p" || c.schedule() == "ring/3/p2p")
        << c.schedule();
  }
  if (op.mode() == "chunked" || op.mode() == "ring") {
    EXPECT_EQ(op.chunks(), 3);
  }
}

// A path in the temp directory with nothing there yet.
std::string FreshTempPath(const std::string& name) {
  const std::string path = (std::filesystem::temp_directory_path() / name).string();
  std::filesystem::remove(path);
  return path;
}

// The planner and the layer step defer the same collectives (one definition,
// DeferredCollectives): the gradient all-reduce over the tp group that nothing
// waits on runs to the step's end on the side streams, and the planner puts
// it beside the compute; the gather that wgrad waits on is critical to both.
TEST(JobRunnerTest, ThePlannerAndTheLayerStepDeferTheSameCollectives) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(R"(name: agree
dtype: f32
iterations: 2
warmup: 1
ops:
  - {id: dgrad, type: ag_gemm, m: 128, k: 64, n: 64, mode: serial, transport: nccl}
  - {id: x_gather, type: all_gather, m: 128, n: 64, transport: nccl}
  - {id: other, type: gemm, m: 128, k: 64, n: 64, after: [dgrad]}
  - {id: wgrad, type: gemm, m: 64, k: 128, n: 64, after: [x_gather, other]}
  - {id: grads, type: all_reduce, m: 64, n: 32, transport: nccl, input: wgrad}
  - {id: last, type: gemm, m: 128, k: 64, n: 64, after: [wgrad]}
)");
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto engine = Engine();
  auto result = RunJobResult(*engine, *spec, {0, 1}, {}, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  std::vector<std::string> to_the_end, joined;
  for (int i = 0; i < result->layer_deferred_size(); ++i) {
    (result->layer_joined_before(i).empty() ? to_the_end : joined)
        .push_back(result->layer_deferred(i));
  }
  std::vector<std::string> defined;
  const std::vector<bool> deferred = DeferredCollectives(*spec);
  for (size_t i = 0; i < deferred.size(); ++i) {
    if (deferred[i]) defined.push_back(spec->ops[i].id);
  }
  EXPECT_EQ(defined, std::vector<std::string>{"grads"});
  EXPECT_EQ(to_the_end, defined);
  EXPECT_EQ(joined, std::vector<std::string>{"x_gather"}) << "beside `other`, joined before wgrad";
  std::vector<planner::OpPlan> plans(spec->ops.size());
  for (planner::OpPlan& plan : plans) plan.predicted.push_back(planner::SchedulePrediction{});
  EXPECT_EQ(planner::EstimateLayer(*spec, plans, 1.0).deferred, 1);
}

// The layer step charges a collective beside the GEMMs the node's calibrated
// slowdown for its transport, where a calibration for its group size is kept
// and matches this engine; kBesideGemmsFactor otherwise.
TEST(JobRunnerTest, TheLayerStepReadsTheCalibratedSlowdownWhereOneIsKept) {
  const std::string path = FreshTempPath("overlap_beside_gemms_test.db");
  auto engine = Engine();
  JobSpec spec = SmallJob();
  spec.ops.push_back(AllReduceAfter("grads", 256, 64, "fc1"));
  OpSpec gather = spec.ops.back();
  gather.id = "gather";
  gather.type = OpType::kAllGather;
  spec.ops.push_back(gather);
  const std::vector<Transport> transports = {Transport::kNccl, Transport::kP2p, Transport::kP2p,
                                             Transport::kNccl, Transport::kP2p};
  const std::vector<double> fixed(5, kBesideGemmsFactor);
  EXPECT_EQ(BesideGemmsFactors(*engine, spec, {0, 1}, transports, nullptr), fixed);
  auto cache = TuningCache::Open(path);
  ASSERT_TRUE(cache.ok()) << cache.status();
  EXPECT_EQ(BesideGemmsFactors(*engine, spec, {0, 1}, transports, cache->get()), fixed)
      << "none kept";
  planner::Calibration calibration;
  calibration.identity = CalibrationIdentityOf(*engine, 0);
  calibration.gemms = {{128, 64, 96, 0.01}};
  calibration.gemm_slowdown = {{Transport::kNccl, 1.2}, {Transport::kP2p, 1.106}};
  const std::string environment = TuningEnvironment(*engine, 0);
  // Kept for 4 ranks only: not this job's 2.
  ASSERT_TRUE((*cache)
                  ->StoreCalibration(CalibrationKey(environment, 4),
                                     planner::CalibrationToJson(calibration), 1)
                  .ok());
  EXPECT_EQ(BesideGemmsFactors(*engine, spec, {0, 1}, transports, cache->get()), fixed);
  ASSERT_TRUE((*cache)
                  ->StoreCalibration(CalibrationKey(environment, 2),
                                     planner::CalibrationToJson(calibration), 1)
                  .ok());
  EXPECT_EQ(BesideGemmsFactors(*engine, spec, {0, 1}, transports, cache->get()),
            (std::vector<double>{kBesideGemmsFactor, kBesideGemmsFactor, kBesideGemmsFactor, 1.2,
                                 1.106}));
  // Of other hardware: not used.
  calibration.identity.device = "NVIDIA H200";
  ASSERT_TRUE((*cache)
                  ->StoreCalibration(CalibrationKey(environment, 2),
                                     planner::CalibrationToJson(calibration), 1)
                  .ok());
  EXPECT_EQ(BesideGemmsFactors(*engine, spec, {0, 1}, transports, cache->get()), fixed);
  // A job with the cache runs its layer step with it.
  auto result = RunJobResult(*engine, spec, {0, 1}, {}, cache->get());
  ASSERT_TRUE(result.ok()) << result.status();
}

TEST(JobRunnerTest, AutotuneChoiceIsCachedAcrossRuns) {
  const std::string path = FreshTempPath("overlap_tuning_test.db");
  auto engine = Engine();
  JobSpec spec = SmallJob();
  spec.ops.resize(2);  // out (explicit) and fc1 (auto)
  spec.ops[0].after.clear();
  {
    auto cache = TuningCache::Open(path);
    ASSERT_TRUE(cache.ok());
    auto first = RunJobResult(*engine, spec, {0, 1}, {}, cache->get());
    ASSERT_TRUE(first.ok()) << first.status();
    EXPECT_EQ(first->ops(1).auto_reason().find("tuning cache"), std::string::npos);
    EXPECT_FALSE(first->ops(1).graph_replay()) << "the host backend has no graphs";
  }
  // The key names everything the choice depends on, graph replay and the build included.
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    sqlite3_stmt* stmt = nullptr;
    ASSERT_EQ(
        sqlite3_prepare_v2(db, "SELECT key, environment FROM tuned_schedules", -1, &stmt, nullptr),
        SQLITE_OK);
    std::vector<std::string> keys, environments;
    while (sqlite3_step(stmt) == SQLITE_ROW) {
      keys.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0)));
      environments.emplace_back(reinterpret_cast<const char*>(sqlite3_column_text(stmt, 1)));
    }
    sqlite3_finalize(stmt);
    sqlite3_close(db);
    ASSERT_EQ(keys.size(), 1u);
    EXPECT_NE(keys[0].find(" backend=host graphs=off gates=on "), std::string::npos) << keys[0];
    EXPECT_NE(keys[0].find(absl::StrCat(" overlapd=", OVERLAP_VERSION, "+")), std::string::npos)
        << keys[0];
    EXPECT_EQ(environments[0], TuningEnvironment(*engine, 0));
  }
  // A new cache object on the same file: what a restarted daemon sees.
  auto cache = TuningCache::Open(path);
  ASSERT_TRUE(cache.ok());
  auto second = RunJobResult(*engine, spec, {0, 1}, {}, cache->get());
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_NE(second->ops(1).auto_reason().find("tuning cache"), std::string::npos)
      << second->ops(1).auto_reason();
  std::filesystem::remove(path);
}

// A choice the tuning cache cannot keep (here its table is gone; on a node, a
// full disk) leaves the job running, and its reason says so.
TEST(JobRunnerTest, AChoiceTheCacheCannotKeepDoesNotFailTheJob) {
  const std::string path = FreshTempPath("overlap_tuning_lost_test.db");
  auto engine = Engine();
  auto cache = TuningCache::Open(path);
  ASSERT_TRUE(cache.ok());
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "DROP TABLE tuned_schedules;", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);

  JobSpec spec = SmallJob();
  spec.ops.resize(2);  // out (explicit) and fc1 (auto)
  spec.ops[0].after.clear();
  auto result = RunJobResult(*engine, spec, {0, 1}, {}, cache->get());
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->ops(1).verified());
  EXPECT_THAT(result->ops(1).auto_reason(), ::testing::HasSubstr("(not kept in the tuning cache: "))
      << result->ops(1).auto_reason();
  std::filesystem::remove(path);
}

TEST(JobRunnerTest, RetuneIgnoresChoicesFromBeforeTheJob) {
  const std::string path = FreshTempPath("overlap_retune_test.db");
  auto engine = Engine();
  auto cache = TuningCache::Open(path);
  ASSERT_TRUE(cache.ok());
  // Two ops of one shape, both auto: a bench's repeats.
  JobSpec spec = SmallJob();
  spec.ops.resize(2);
  spec.ops[0] = spec.ops[1];
  spec.ops[0].id = "again";
  spec.ops[1].after.clear();
  spec.ops[0].after.clear();
  ASSERT_TRUE(RunJobResult(*engine, spec, {0, 1}, {}, cache->get()).ok());
  // A choice the cache holds from before, to be ignored.
  const std::vector<TunedEntry> before = *(*cache)->List({});
  ASSERT_EQ(before.size(), 1u);

  spec.retune = true;
  auto retuned = RunJobResult(*engine, spec, {0, 1}, {}, cache->get());
  ASSERT_TRUE(retuned.ok()) << retuned.status();
  // The first op of the shape tunes again; the second uses what the first just tuned.
  EXPECT_THAT(retuned->ops(0).auto_reason(), IsFreshlyAutotuned());
  EXPECT_EQ(retuned->ops(1).auto_reason().rfind("tuning cache", 0), 0u)
      << retuned->ops(1).auto_reason();
  const std::vector<TunedEntry> after = *(*cache)->List({});
  ASSERT_EQ(after.size(), 1u);
  EXPECT_GT(after[0].tuned_unix_ms, before[0].tuned_unix_ms);

  spec.retune = false;
  auto cached = RunJobResult(*engine, spec, {0, 1}, {}, cache->get());
  ASSERT_TRUE(cached.ok());
  EXPECT_EQ(cached->ops(0).auto_reason().rfind("tuning cache", 0), 0u);
  std::filesystem::remove(path);
}

TEST(JobRunnerTest, CancelStopsBetweenIterations) {
  auto engine = Engine();
  std::atomic<int> ticks{0};
  RunHooks hooks;
  hooks.on_progress = [&](const Progress&) { ++ticks; };
  hooks.cancelled = [&] { return ticks.load() >= 4; };
  auto result = RunJobResult(*engine, SmallJob(), {0, 1}, hooks, nullptr);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kCancelled);
  // The engine is still usable: the next job runs.
  EXPECT_TRUE(RunJobResult(*engine, SmallJob(), {0, 1}, {}, nullptr).ok());
}

TEST(JobRunnerTest, OutOfMemoryIsResourceExhausted) {
  engine::HostEngineOptions options;
  options.device_count = 2;
  options.device_memory_bytes = 64 << 10;
  auto engine = std::move(engine::CreateHostEngine(options)).value();
  auto result = RunJobResult(*engine, SmallJob(), {0, 1}, {}, nullptr);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_GT(JobBytesPerDevice(SmallJob(), 2), 64 << 10);
}

TEST(JobRunnerTest, MemoryEstimateCoversEveryBufferAndSaturates) {
  JobSpec spec = SmallJob();
  spec.ops.resize(1);
  spec.ops[0].after.clear();  // gemm_ar 128 x 96 x 64, ring, tp 2, fp32
  // a 128x48 + w 48x64 + y 128x64 + 1 slot 64x64 + spare 128x64 (ring keeps the
  // peers' partials in Y itself)
  const int64_t elements = 128 * 48 + 48 * 64 + 128 * 64 + 64 * 64 + 128 * 64;
  EXPECT_EQ(JobBytesPerDevice(spec, 2), elements * 4);
  spec.ops[0].m = spec.ops[0].n = int64_t{1} << 31;
  EXPECT_EQ(JobBytesPerDevice(spec, 2), std::numeric_limits<int64_t>::max());
}

}  // namespace
}  // namespace overlap::runner

namespace overlap::runner {
namespace {

// Library failures injected into the host backend surface with the code the
// real library failure maps to, and the engine keeps running the next job.
TEST(JobRunnerFailureTest, CollectiveFailureAbortsTheJobOnly) {
  engine::HostEngineOptions options;
  options.device_count = 2;
  options.fail_op = "all_gather";
  options.fail_after = 0;
  auto engine = std::move(engine::CreateHostEngine(options)).value();
  auto failed = RunJobResult(*engine, SmallJob(), {0, 1}, {}, nullptr);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kAborted) << failed.status();
  EXPECT_NE(std::string(failed.status().message()).find("injected"), std::string::npos);
  EXPECT_TRUE(engine->Monitor()->Healthy());
  auto next = RunJobResult(*engine, SmallJob(), {0, 1}, {}, nullptr);
  EXPECT_TRUE(next.ok()) << next.status();
}

TEST(JobRunnerFailureTest, StickyErrorMakesTheEngineUnhealthy) {
  engine::HostEngineOptions options;
  options.device_count = 2;
  options.fail_op = "gemm";
  options.fail_after = 3;
  options.inject_sticky_error = true;
  auto engine = std::move(engine::CreateHostEngine(options)).value();
  auto failed = RunJobResult(*engine, SmallJob(), {0, 1}, {}, nullptr);
  EXPECT_FALSE(failed.ok());
  EXPECT_FALSE(engine->Monitor()->Healthy());
  EXPECT_FALSE(RunJobResult(*engine, SmallJob(), {0, 1}, {}, nullptr).ok());
}

TEST(JobRunnerFailureTest, AsynchronousFailureIsReportedAtTheNextSync) {
  engine::HostEngineOptions options;
  options.device_count = 2;
  options.fail_op = "reduce_scatter";
  options.fail_after = 1;
  options.fail_async = true;
  auto engine = std::move(engine::CreateHostEngine(options)).value();
  auto failed = RunJobResult(*engine, SmallJob(), {0, 1}, {}, nullptr);
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kAborted) << failed.status();
  EXPECT_TRUE(RunJobResult(*engine, SmallJob(), {0, 1}, {}, nullptr).ok());
}

}  // namespace
}  // namespace overlap::runner
