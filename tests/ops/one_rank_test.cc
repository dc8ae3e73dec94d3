// Over a group of one rank a collective costs nothing: every op and schedule
// makes no engine collective call (no launch), a collective's output is its
// input (no copy either), the ops with a GEMM are that GEMM alone, and every
// output matches the float64 reference, on the host backend with the hazard
// checker on. A job at tp 1 reports "one rank: no collective".
#include "common/one_rank.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "server/ops/layer_ops.h"
#include "server/ops/reference.h"
#include "server/runner/job_runner.h"
#include "tests/forwarding_engine.h"
#include "tests/host_engine_util.h"
#include "tests/op_spec_util.h"

namespace overlap::ops {
namespace {

// Counts the calls that would launch a collective (or a send/recv group, or a
// barrier) and the peer copies, and forwards everything.
class CountingEngine : public ForwardingEngine {
 public:
  using ForwardingEngine::ForwardingEngine;
  int collectives = 0;
  int copies = 0;

  absl::Status AllGather(const engine::CollectiveArgs& args) override {
    ++collectives;
    return inner().AllGather(args);
  }
  absl::Status ReduceScatter(const engine::CollectiveArgs& args) override {
    ++collectives;
    return inner().ReduceScatter(args);
  }
  absl::Status AllReduce(const engine::CollectiveArgs& args) override {
    ++collectives;
    return inner().AllReduce(args);
  }
  absl::Status SendRecv(int channel, const std::vector<int>& group,
                        const std::vector<engine::Transfer>& transfers, bool beside_gemm) override {
    ++collectives;
    return inner().SendRecv(channel, group, transfers, beside_gemm);
  }
  absl::Status Barrier(int channel, const std::vector<int>& devices,
                       const std::vector<engine::StreamId>& streams) override {
    ++collectives;
    return inner().Barrier(channel, devices, streams);
  }
  absl::Status PeerCopy(engine::StreamId stream, engine::BufferRef dst, int dst_device,
                        engine::BufferRef src, int src_device) override {
    ++copies;
    return inner().PeerCopy(stream, dst, dst_device, src, src_device);
  }
};

OpSpec SmallOp(OpType type) {
  OpSpec op;
  op.id = "op";
  op.type = type;
  op.m = 32;
  op.k = IsCollectiveOnly(type) ? 0 : 24;
  op.n = 16;
  return op;
}

// Runs `s` twice on one rank (poisoned output first) and checks the output
// against float64 each time; returns the engine's counts.
struct Counts {
  int collectives = 0;
  int copies = 0;
};
Counts RunAndVerify(OpType type, const Schedule& s) {
  CountingEngine engine(CheckedHostEngine(1));
  const OpSpec op = SmallOp(type);
  auto ctx = OpContext::Create(engine, op, DType::kF32, {0}, BuffersFor(op, 1, s));
  EXPECT_TRUE(ctx.ok()) << ctx.status();
  if (!ctx.ok()) return {};
  EXPECT_TRUE(FillInputs(**ctx, 7, 0).ok());
  EXPECT_TRUE(engine.Synchronize({0}).ok());
  engine.collectives = engine.copies = 0;
  for (int iteration = 0; iteration < 2; ++iteration) {
    EXPECT_TRUE(PoisonOutputs(**ctx).ok());
    absl::Status st = EnqueueOp(**ctx, s);
    EXPECT_TRUE(st.ok()) << s.Name() << ": " << st;
    EXPECT_TRUE(engine.Synchronize({0}).ok());
    auto v = VerifyOutputs(**ctx, 7, 0, /*max_rows=*/1000);
    EXPECT_TRUE(v.ok()) << s.Name() << ": " << v.status();
    if (!v.ok()) continue;
    EXPECT_EQ(v->rows_checked, (*ctx)->shapes().y_rows);
    EXPECT_LT(v->max_rel_error, 1e-5) << s.Name();
  }
  // The collective alone, as the runner times it, is nothing at one rank too.
  EXPECT_TRUE(EnqueueCommAlone(**ctx, s.transport).ok());
  EXPECT_TRUE(engine.Synchronize({0}).ok());
  return {engine.collectives, engine.copies};
}

using Param = std::tuple<OpType, OverlapMode, Transport>;
class OneRankGemmOpTest : public ::testing::TestWithParam<Param> {};

TEST_P(OneRankGemmOpTest, IsTheGemmAloneWithNoCollective) {
  const auto [type, mode, transport] = GetParam();
  const int chunks = mode == OverlapMode::kChunked || mode == OverlapMode::kRing ? 2 : 1;
  const Counts counts = RunAndVerify(type, Schedule{mode, chunks, transport});
  EXPECT_EQ(counts.collectives, 0);
  EXPECT_EQ(counts.copies, 0);  // the GEMM reads A and writes Y: nothing to move
}

INSTANTIATE_TEST_SUITE_P(
    EveryMode, OneRankGemmOpTest,
    ::testing::Combine(::testing::Values(OpType::kAgGemm, OpType::kGemmRs, OpType::kGemmAr),
                       ::testing::Values(OverlapMode::kSerial, OverlapMode::kBulk,
                                         OverlapMode::kChunked, OverlapMode::kRing),
                       ::testing::Values(Transport::kNccl, Transport::kP2p)));

class OneRankCollectiveTest : public ::testing::TestWithParam<std::tuple<OpType, Transport>> {};

TEST_P(OneRankCollectiveTest, IsItsInputWithNoCallAtAll) {
  const auto [type, transport] = GetParam();
  const Counts counts = RunAndVerify(type, Schedule{OverlapMode::kSerial, 1, transport});
  EXPECT_EQ(counts.collectives, 0);
  EXPECT_EQ(counts.copies, 0);  // an alias: the output is the input buffer
}

INSTANTIATE_TEST_SUITE_P(EveryCollective, OneRankCollectiveTest,
                         ::testing::Combine(::testing::Values(OpType::kAllGather,
                                                              OpType::kReduceScatter,
                                                              OpType::kAllReduce),
                                            ::testing::Values(Transport::kNccl, Transport::kP2p)));

TEST(OneRankCollectiveTest, OutputIsTheInputBuffer) {
  CountingEngine engine(CheckedHostEngine(1));
  const OpSpec op = SmallOp(OpType::kAllReduce);
  const Schedule s{OverlapMode::kSerial, 1, Transport::kNccl};
  auto ctx = OpContext::Create(engine, op, DType::kF32, {0}, BuffersFor(op, 1, s));
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  EXPECT_TRUE((*ctx)->OutputAliasesInput(0));
  EXPECT_EQ((*ctx)->rank(0).y, (*ctx)->rank(0).a);
  // Two ranks keep their own output.
  CountingEngine two(CheckedHostEngine(2));
  auto ctx2 = OpContext::Create(two, op, DType::kF32, {0, 1}, BuffersFor(op, 2, s));
  ASSERT_TRUE(ctx2.ok()) << ctx2.status();
  EXPECT_FALSE((*ctx2)->OutputAliasesInput(0));
}

// A chunked gradient all-reduce (the layer step's pieces) over groups of one
// rank each, as `group: dp` in a mesh with dp 1 has: no call, outputs equal
// the inputs.
TEST(OneRankCollectiveTest, RowPiecesOverGroupsOfOneRankCallNothing) {
  CountingEngine engine(CheckedHostEngine(2));
  const OpSpec op = SmallOp(OpType::kAllReduce);
  const Schedule s{OverlapMode::kSerial, 1, Transport::kNccl};
  RankLayout layout;
  layout.group_size = 1;
  auto ctx = OpContext::Create(engine, op, DType::kF32, {0, 1}, BuffersFor(op, 1, s), layout);
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  ASSERT_TRUE(FillInputs(**ctx, 3, 0).ok());
  ASSERT_TRUE(engine.Synchronize({0, 1}).ok());
  engine.collectives = engine.copies = 0;
  ASSERT_TRUE(EnqueueAllReduceRows(**ctx, s, RowRange{0, 16}).ok());
  ASSERT_TRUE(EnqueueAllReduceRows(**ctx, s, RowRange{16, 16}).ok());
  ASSERT_TRUE(engine.Synchronize({0, 1}).ok());
  EXPECT_EQ(engine.collectives, 0);
  EXPECT_EQ(engine.copies, 0);
  auto v = VerifyOutputs(**ctx, 3, 0, /*max_rows=*/1000);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_LT(v->max_rel_error, 1e-5);
}

// A job on one device: every op verified, no engine collective, and the
// report's note for the ops with a collective says why.
TEST(OneRankJobTest, RunsNoCollectiveAndSaysSo) {
  CountingEngine engine(CheckedHostEngine(1));
  JobSpec spec;
  spec.name = "one";
  spec.dtype = DType::kF32;
  spec.iterations = 2;
  spec.warmup = 1;
  spec.ops = {MakeOp("fc1", OpType::kAgGemm, 64, 32, 48),
              MakeOp("fc2", OpType::kGemmRs, 64, 48, 32, {"fc1"}),
              MakeOp("out", OpType::kGemmAr, 64, 32, 16, {"fc2"}),
              MakeOp("grads", OpType::kAllReduce, 64, 0, 16),
              MakeOp("gather", OpType::kAllGather, 64, 0, 16),
              MakeOp("scatter", OpType::kReduceScatter, 64, 0, 16)};
  auto report = runner::RunJob(engine, spec, {0}, runner::RunHooks{}, nullptr);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(engine.collectives, 0);
  ASSERT_EQ(report->ops.size(), spec.ops.size());
  for (const runner::OpReport& op : report->ops) {
    EXPECT_TRUE(op.verified) << op.id;
    EXPECT_EQ(op.tp, 1) << op.id;
    EXPECT_EQ(op.auto_reason, kOneRankNote) << op.id;
  }
}

}  // namespace
}  // namespace overlap::ops
