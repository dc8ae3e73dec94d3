// Every op x mode x dtype x chunk count x transport on real GPUs (all visible
// GPUs form the TP group), against the float64 reference on fresh random
// inputs, output poisoned first. Skips without a GPU.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <tuple>

#include "common/config.h"
#include "common/graph_validator.h"
#include "server/cuda/cuda_engine.h"
#include "server/runner/graph_replay.h"
#include "server/ops/layer_ops.h"
#include "server/ops/reference.h"
#include "tests/gpu_ranks_util.h"
#include "tests/random_op_util.h"

namespace overlap::ops {
namespace {

using Param = std::tuple<OpType, OverlapMode, int /*chunks*/, Transport, DType>;

// One engine for the whole binary (communicators and pools are expensive),
// destroyed in TearDown: while static destructors run, the CUDA runtime and NCCL
// may already be gone.
class EngineEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    DaemonConfig config;
    config.pool_bytes_per_device = int64_t{8} << 30;
    ApplyTestRanksPerGpu(&config);
    // The device runs re-run the NCCL cases with an SM budget (config.h).
    if (const char* ctas = std::getenv("OVERLAP_TEST_NCCL_OVERLAP_CTAS")) {
      config.nccl_overlap_ctas = std::atoi(ctas);
    }
    // ... and the replayed cases with GEMM pieces chained by programmatic edges.
    if (const char* edges = std::getenv("OVERLAP_TEST_PROGRAMMATIC_EDGES")) {
      config.programmatic_edges = std::string(edges) == "1";
    }
    auto e = cuda::CreateCudaEngine(config);
    if (e.ok()) {
      engine_ = std::move(*e);
    } else {
      error_ = std::string(e.status().message());
    }
  }
  void TearDown() override { engine_.reset(); }
  static engine::Engine* engine() { return engine_.get(); }
  static const std::string& error() { return error_; }

 private:
  static inline std::unique_ptr<engine::Engine> engine_;
  static inline std::string error_;
};

[[maybe_unused]] ::testing::Environment* const kEngineEnvironment =
    ::testing::AddGlobalTestEnvironment(new EngineEnvironment);

engine::Engine* SharedEngine(std::string* why) {
  *why = EngineEnvironment::error();
  return EngineEnvironment::engine();
}

OpSpec GpuOp(OpType type, int tp) {
  OpSpec op;
  op.id = "op";
  op.type = type;
  op.m = 512 * tp;
  op.k = IsCollectiveOnly(type) ? 0 : 768 * tp;
  op.n = 384 * tp;
  return op;
}

// Runs `op` under schedule `s` on ranks 0..tp-1 twice on fresh random inputs,
// the output poisoned before each run, against the float64 reference. With
// `replay` (what the job runner times for copy-engine schedules), a direct
// iteration first chooses the GEMM algorithms, then one iteration is captured
// as a graph and both runs replay it.
void ExpectOpMatchesReference(engine::Engine* engine, const OpSpec& op, const Schedule& s,
                              DType dtype, int tp, bool replay) {
  const OpType type = op.type;
  std::vector<int> devices;
  for (int d = 0; d < tp; ++d) devices.push_back(d);
  auto ctx = OpContext::Create(*engine, op, dtype, devices, BuffersFor(op, tp, s));
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  // Fresh inputs for every case and run; the seed is printed on failure.
  const uint64_t seed = (uint64_t{std::random_device{}()} << 32) | std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  ASSERT_TRUE(FillInputs(**ctx, seed, 0).ok());
  ASSERT_TRUE(engine->Synchronize(devices).ok());
  std::optional<engine::GraphId> graph;
  if (replay) {
    ASSERT_TRUE(EnqueueOp(**ctx, s).ok());
    ASSERT_TRUE(engine->Synchronize(devices).ok());
    absl::StatusOr<engine::GraphId> captured =
        runner::CaptureIteration(**ctx, [&] { return EnqueueOp(**ctx, s); });
    ASSERT_TRUE(captured.ok()) << s.Name() << ": " << captured.status();
    graph = *captured;
  }
  for (int iteration = 0; iteration < 2; ++iteration) {
    ASSERT_TRUE(PoisonOutputs(**ctx).ok());
    // A replay starts after rank 0's poison only: the other ranks' must be
    // done before it, or a late one overwrites what the graph wrote.
    if (graph) {
      ASSERT_TRUE(engine->Synchronize(devices).ok());
    }
    absl::Status st = graph ? runner::LaunchIteration(**ctx, *graph) : EnqueueOp(**ctx, s);
    ASSERT_TRUE(st.ok()) << s.Name() << ": " << st;
    st = engine->Synchronize(devices);
    ASSERT_TRUE(st.ok()) << s.Name() << ": " << st;
    auto v = VerifyOutputs(**ctx, seed, 0, /*max_rows=*/64);
    ASSERT_TRUE(v.ok()) << s.Name() << " run " << iteration << ": " << v.status();
    EXPECT_LT(v->max_rel_error, OutputTolerance(type, dtype, tp))
        << s.Name() << " " << DTypeName(dtype);
  }
  if (graph) engine->Graphs()->DestroyGraph(*graph);
}

void ExpectMatchesReference(const Param& param, bool replay) {
  std::string why;
  engine::Engine* engine = SharedEngine(&why);
  if (engine == nullptr) GTEST_SKIP() << "no GPU visible: " << why;
  const auto [type, mode, chunks, transport, dtype] = param;
  const int tp = engine->DeviceCount();
  if (tp < 2 && mode != OverlapMode::kSerial) GTEST_SKIP() << "needs 2 GPUs";
  ExpectOpMatchesReference(engine, GpuOp(type, tp), Schedule{mode, chunks, transport}, dtype, tp,
                           replay);
}

class LayerOpsGpuTest : public ::testing::TestWithParam<Param> {};

TEST_P(LayerOpsGpuTest, MatchesFloat64Reference) { ExpectMatchesReference(GetParam(), false); }

class LayerOpsGraphGpuTest : public ::testing::TestWithParam<Param> {};

TEST_P(LayerOpsGraphGpuTest, ReplayMatchesFloat64Reference) {
  ExpectMatchesReference(GetParam(), true);
}

std::string Name(const ::testing::TestParamInfo<Param>& info) {
  const auto [type, mode, chunks, transport, dtype] = info.param;
  return OpTypeName(type) + "_" + OverlapModeName(mode) + "_c" + std::to_string(chunks) + "_" +
         TransportName(transport) + "_" + DTypeName(dtype);
}

INSTANTIATE_TEST_SUITE_P(
    Whole, LayerOpsGpuTest,
    ::testing::Combine(::testing::Values(OpType::kAgGemm, OpType::kGemmRs, OpType::kGemmAr),
                       ::testing::Values(OverlapMode::kSerial, OverlapMode::kBulk),
                       ::testing::Values(1), ::testing::Values(Transport::kNccl, Transport::kP2p),
                       ::testing::Values(DType::kBF16, DType::kF16, DType::kF32, DType::kFP8)),
    Name);

INSTANTIATE_TEST_SUITE_P(
    ChunkedAndRing, LayerOpsGpuTest,
    ::testing::Combine(::testing::Values(OpType::kAgGemm, OpType::kGemmRs, OpType::kGemmAr),
                       ::testing::Values(OverlapMode::kChunked, OverlapMode::kRing),
                       ::testing::Values(1, 2, 4, 8),
                       ::testing::Values(Transport::kNccl, Transport::kP2p),
                       ::testing::Values(DType::kBF16, DType::kF16, DType::kF32, DType::kFP8)),
    Name);

// The GEMM's epilogue stores into the peer's memory over peer access.
INSTANTIATE_TEST_SUITE_P(
    DirectRing, LayerOpsGpuTest,
    ::testing::Combine(::testing::Values(OpType::kGemmRs, OpType::kGemmAr),
                       ::testing::Values(OverlapMode::kRing), ::testing::Values(1, 2, 4, 8),
                       ::testing::Values(Transport::kDirect),
                       ::testing::Values(DType::kBF16, DType::kF16, DType::kF32, DType::kFP8)),
    Name);

INSTANTIATE_TEST_SUITE_P(
    ReplayedDirectRing, LayerOpsGraphGpuTest,
    ::testing::Combine(::testing::Values(OpType::kGemmRs, OpType::kGemmAr),
                       ::testing::Values(OverlapMode::kRing), ::testing::Values(1, 4),
                       ::testing::Values(Transport::kDirect),
                       ::testing::Values(DType::kBF16, DType::kF32)),
    Name);

// Chunk counts that do not divide the 512 rows per rank (at tp = 2): pieces of
// 176, 168 and 168 rows (3) or 88 and 80 rows (6), on whole 8-row units.
INSTANTIATE_TEST_SUITE_P(
    UnevenChunks, LayerOpsGpuTest,
    ::testing::Combine(::testing::Values(OpType::kAgGemm, OpType::kGemmRs, OpType::kGemmAr),
                       ::testing::Values(OverlapMode::kChunked, OverlapMode::kRing),
                       ::testing::Values(3, 6),
                       ::testing::Values(Transport::kNccl, Transport::kP2p),
                       ::testing::Values(DType::kBF16, DType::kF32, DType::kFP8)),
    Name);

INSTANTIATE_TEST_SUITE_P(
    ReplayedUnevenChunks, LayerOpsGraphGpuTest,
    ::testing::Combine(::testing::Values(OpType::kAgGemm, OpType::kGemmRs, OpType::kGemmAr),
                       ::testing::Values(OverlapMode::kChunked, OverlapMode::kRing),
                       ::testing::Values(3), ::testing::Values(Transport::kP2p),
                       ::testing::Values(DType::kBF16)),
    Name);

INSTANTIATE_TEST_SUITE_P(UnevenDirectRing, LayerOpsGraphGpuTest,
                         ::testing::Combine(::testing::Values(OpType::kGemmRs, OpType::kGemmAr),
                                            ::testing::Values(OverlapMode::kRing),
                                            ::testing::Values(3, 6),
                                            ::testing::Values(Transport::kDirect),
                                            ::testing::Values(DType::kBF16)),
                         Name);

// Every copy-engine schedule (the ones the job runner replays).
INSTANTIATE_TEST_SUITE_P(
    ReplayedWhole, LayerOpsGraphGpuTest,
    ::testing::Combine(::testing::Values(OpType::kAgGemm, OpType::kGemmRs, OpType::kGemmAr),
                       ::testing::Values(OverlapMode::kSerial, OverlapMode::kBulk),
                       ::testing::Values(1), ::testing::Values(Transport::kP2p),
                       ::testing::Values(DType::kBF16)),
    Name);

INSTANTIATE_TEST_SUITE_P(
    ReplayedChunkedAndRing, LayerOpsGraphGpuTest,
    ::testing::Combine(::testing::Values(OpType::kAgGemm, OpType::kGemmRs, OpType::kGemmAr),
                       ::testing::Values(OverlapMode::kChunked, OverlapMode::kRing),
                       ::testing::Values(1, 2, 4, 8), ::testing::Values(Transport::kP2p),
                       ::testing::Values(DType::kBF16, DType::kF32)),
    Name);

// The collectives alone, out of place, enqueued and replayed (one GPU: a copy).
// The all-reduce layouts: NCCL pinned to ring or tree, and the copy-engine
// ring, tree and parameter server, enqueued and replayed.
using AlgorithmParam = std::tuple<AllReduceAlgorithm, Transport, DType, bool /*replay*/>;
class AllReduceAlgorithmGpuTest : public ::testing::TestWithParam<AlgorithmParam> {};

TEST_P(AllReduceAlgorithmGpuTest, MatchesFloat64Reference) {
  std::string why;
  engine::Engine* engine = SharedEngine(&why);
  if (engine == nullptr) GTEST_SKIP() << "no GPU visible: " << why;
  const auto [algorithm, transport, dtype, replay] = GetParam();
  const int tp = engine->DeviceCount();
  OpSpec op = GpuOp(OpType::kAllReduce, tp);
  op.algorithm = algorithm;
  ExpectOpMatchesReference(engine, op, Schedule{OverlapMode::kSerial, 1, transport, algorithm},
                           dtype, tp, replay && transport == Transport::kP2p);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, AllReduceAlgorithmGpuTest,
    ::testing::Combine(::testing::Values(AllReduceAlgorithm::kRing, AllReduceAlgorithm::kTree),
                       ::testing::Values(Transport::kNccl, Transport::kP2p),
                       ::testing::Values(DType::kBF16, DType::kF32), ::testing::Bool()));
INSTANTIATE_TEST_SUITE_P(ParameterServer, AllReduceAlgorithmGpuTest,
                         ::testing::Combine(::testing::Values(AllReduceAlgorithm::kParameterServer),
                                            ::testing::Values(Transport::kP2p),
                                            ::testing::Values(DType::kBF16, DType::kF32),
                                            ::testing::Bool()));

INSTANTIATE_TEST_SUITE_P(
    CollectiveAlone, LayerOpsGpuTest,
    ::testing::Combine(::testing::Values(OpType::kAllGather, OpType::kReduceScatter,
                                         OpType::kAllReduce),
                       ::testing::Values(OverlapMode::kSerial), ::testing::Values(1),
                       ::testing::Values(Transport::kNccl, Transport::kP2p),
                       ::testing::Values(DType::kBF16, DType::kF16, DType::kF32, DType::kFP8)),
    Name);
INSTANTIATE_TEST_SUITE_P(
    ReplayedCollectiveAlone, LayerOpsGraphGpuTest,
    ::testing::Combine(::testing::Values(OpType::kAllGather, OpType::kReduceScatter,
                                         OpType::kAllReduce),
                       ::testing::Values(OverlapMode::kSerial), ::testing::Values(1),
                       ::testing::Values(Transport::kP2p), ::testing::Values(DType::kBF16)),
    Name);

// A GEMM alone (a weight gradient): every dtype, enqueued and replayed.
INSTANTIATE_TEST_SUITE_P(
    GemmAlone, LayerOpsGpuTest,
    ::testing::Combine(::testing::Values(OpType::kGemm), ::testing::Values(OverlapMode::kSerial),
                       ::testing::Values(1), ::testing::Values(Transport::kNone),
                       ::testing::Values(DType::kBF16, DType::kF16, DType::kF32, DType::kFP8)),
    Name);
INSTANTIATE_TEST_SUITE_P(ReplayedGemmAlone, LayerOpsGraphGpuTest,
                         ::testing::Combine(::testing::Values(OpType::kGemm),
                                            ::testing::Values(OverlapMode::kSerial),
                                            ::testing::Values(1),
                                            ::testing::Values(Transport::kNone),
                                            ::testing::Values(DType::kBF16)),
                         Name);

// Seeded random ops (tests/random_op_util.h) of every type: shapes that are no
// multiple of anything, so pieces start on odd rows and GEMM operands, copies
// and the reduction kernel on addresses of any alignment; half of them scaled
// up by odd factors to thousands of rows and columns, where cuBLASLt picks its
// large kernels. Every group size from 1 to the engine's ranks, every dtype;
// half of the copy-engine schedules replayed as the job runner times them.
TEST(RandomShapesGpuTest, EveryDrawnOpMatchesFloat64) {
  std::string why;
  engine::Engine* engine = SharedEngine(&why);
  if (engine == nullptr) GTEST_SKIP() << "no GPU visible: " << why;
  // OVERLAP_TEST_SEED draws another set (for exploring on a GPU machine).
  const char* seed = std::getenv("OVERLAP_TEST_SEED");
  std::mt19937 rng(seed != nullptr ? std::strtoul(seed, nullptr, 10) : 20261201);
  const std::vector<OpType> types = {OpType::kAgGemm,    OpType::kGemmRs,        OpType::kGemmAr,
                                     OpType::kAllGather, OpType::kReduceScatter, OpType::kAllReduce,
                                     OpType::kGemm};
  const DType dtypes[] = {DType::kBF16, DType::kF16, DType::kF32};
  for (int i = 0; i < 120; ++i) {
    const int tp = RandomInt(rng, 1, engine->DeviceCount());
    OpSpec op = RandomOp(rng, tp, types, "op", engine->LibraryAlgorithms());
    // Odd factors keep every split dimension divisible by tp.
    if (RandomInt(rng, 0, 1) == 1) {
      op.m *= 2 * RandomInt(rng, 0, 48) + 1;
      op.k *= 2 * RandomInt(rng, 0, 48) + 1;
      op.n *= 2 * RandomInt(rng, 0, 48) + 1;
    }
    const DType dtype = dtypes[RandomInt(rng, 0, 2)];
    const Schedule schedule = ScheduleOf(op);
    const bool replay = schedule.transport != Transport::kNccl && RandomInt(rng, 0, 1) == 1;
    SCOPED_TRACE(absl::StrCat("case ", i, ": ", DescribeOp(op), " ", DTypeName(dtype), " at tp ",
                              tp, replay ? ", replayed" : ""));

    JobSpec spec;
    spec.name = "random";
    spec.ops = {op};
    for (int d = 0; d < tp; ++d) spec.devices.push_back(d);
    spec.dtype = dtype;
    ValidationLimits limits;
    limits.device_count = engine->DeviceCount();
    const absl::StatusOr<std::vector<int>> valid = ValidateJobSpec(spec, limits);
    ASSERT_TRUE(valid.ok()) << valid.status();

    ExpectOpMatchesReference(engine, op, schedule, dtype, tp, replay);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace overlap::ops
