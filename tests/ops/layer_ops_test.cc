// Every op x mode x chunk count x transport x tp on the host backend with the
// hazard checker on, against the float64 reference (which checks row order:
// all input rows differ), after poisoning the output with NaN.
#include "server/ops/layer_ops.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>

#include "server/engine/host/host_engine.h"
#include "server/ops/reference.h"
#include "tests/op_spec_util.h"

namespace overlap::ops {
namespace {

using Param = std::tuple<OpType, OverlapMode, int /*chunks*/, Transport, int /*tp*/>;

class LayerOpsTest : public ::testing::TestWithParam<Param> {};

OpSpec SmallOp(OpType type, int tp) {
  OpSpec op;
  op.id = "op";
  op.type = type;
  op.m = 16 * tp;  // 16 rows per rank: chunks 1, 2, 4, 8 divide it, 3, 5, 6 do not
  op.k = IsCollectiveOnly(type) ? 0 : 24 * tp;
  op.n = 8 * tp;
  return op;
}

absl::Status RunOnce(engine::Engine& engine, OpContext& ctx, const Schedule& s) {
  std::vector<int> devices = ctx.devices();
  absl::Status st = PoisonOutputs(ctx);
  if (!st.ok()) return st;
  st = EnqueueOp(ctx, s);
  if (!st.ok()) return st;
  return engine.Synchronize(devices);
}

TEST_P(LayerOpsTest, MatchesFloat64Reference) {
  const auto [type, mode, chunks, transport, tp] = GetParam();
  engine::HostEngineOptions options;
  options.device_count = 4;
  options.device_memory_bytes = 64 << 20;
  options.hazard_checks = true;
  auto engine = engine::CreateHostEngine(options);
  ASSERT_TRUE(engine.ok()) << engine.status();

  OpSpec op = SmallOp(type, tp);
  const Schedule s{mode, chunks, transport};
  std::vector<int> devices;
  for (int d = 0; d < tp; ++d) devices.push_back(d);
  auto ctx = OpContext::Create(**engine, op, DType::kF32, devices, BuffersFor(op, tp, s));
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  ASSERT_TRUE(FillInputs(**ctx, 7, 0).ok());
  // Inputs are written once, before any iteration (as the job runner does).
  ASSERT_TRUE((*engine)->Synchronize(devices).ok());

  // Twice: the second iteration must recompute everything, not build on the first.
  for (int iteration = 0; iteration < 2; ++iteration) {
    absl::Status st = RunOnce(**engine, **ctx, s);
    ASSERT_TRUE(st.ok()) << s.Name() << ": " << st;
    auto v = VerifyOutputs(**ctx, 7, 0, /*max_rows=*/1000);
    ASSERT_TRUE(v.ok()) << s.Name() << ": " << v.status();
    EXPECT_EQ(v->rows_checked, ctx->get()->shapes().y_rows);
    EXPECT_LT(v->max_rel_error, 1e-5) << s.Name();
  }
}

std::string Name(const ::testing::TestParamInfo<Param>& info) {
  const auto [type, mode, chunks, transport, tp] = info.param;
  return OpTypeName(type) + "_" + OverlapModeName(mode) + "_c" + std::to_string(chunks) + "_" +
         TransportName(transport) + "_tp" + std::to_string(tp);
}

INSTANTIATE_TEST_SUITE_P(
    Whole, LayerOpsTest,
    ::testing::Combine(::testing::Values(OpType::kAgGemm, OpType::kGemmRs, OpType::kGemmAr),
                       ::testing::Values(OverlapMode::kSerial, OverlapMode::kBulk),
                       ::testing::Values(1), ::testing::Values(Transport::kNccl, Transport::kP2p),
                       ::testing::Values(2, 4)),
    Name);

INSTANTIATE_TEST_SUITE_P(
    ChunkedAndRing, LayerOpsTest,
    ::testing::Combine(::testing::Values(OpType::kAgGemm, OpType::kGemmRs, OpType::kGemmAr),
                       ::testing::Values(OverlapMode::kChunked, OverlapMode::kRing),
                       ::testing::Values(1, 2, 4, 8),
                       ::testing::Values(Transport::kNccl, Transport::kP2p),
                       ::testing::Values(2, 4)),
    Name);

// Chunk counts that do not divide the 16 rows per rank: pieces of unequal size
// (the fp8 cases below take them too, on 24 rows, which 5 does not divide).
const auto kUnevenPieces = ::testing::Combine(
    ::testing::Values(OpType::kAgGemm, OpType::kGemmRs, OpType::kGemmAr),
    ::testing::Values(OverlapMode::kChunked, OverlapMode::kRing), ::testing::Values(3, 5),
    ::testing::Values(Transport::kNccl, Transport::kP2p), ::testing::Values(2, 3));
INSTANTIATE_TEST_SUITE_P(UnevenChunks, LayerOpsTest, kUnevenPieces, Name);

INSTANTIATE_TEST_SUITE_P(UnevenDirectRing, LayerOpsTest,
                         ::testing::Combine(::testing::Values(OpType::kGemmRs, OpType::kGemmAr),
                                            ::testing::Values(OverlapMode::kRing),
                                            ::testing::Values(3, 6),
                                            ::testing::Values(Transport::kDirect),
                                            ::testing::Values(2, 3)),
                         Name);

// The GEMM's own stores into the peers' memory: the reduction rings only.
INSTANTIATE_TEST_SUITE_P(
    DirectRing, LayerOpsTest,
    ::testing::Combine(::testing::Values(OpType::kGemmRs, OpType::kGemmAr),
                       ::testing::Values(OverlapMode::kRing), ::testing::Values(1, 2, 4, 8),
                       ::testing::Values(Transport::kDirect), ::testing::Values(2, 3, 4)),
    Name);

// One rank: no communication at all, every schedule degenerates to the GEMM.
INSTANTIATE_TEST_SUITE_P(
    SingleRank, LayerOpsTest,
    ::testing::Combine(::testing::Values(OpType::kAgGemm, OpType::kGemmRs, OpType::kGemmAr),
                       ::testing::Values(OverlapMode::kSerial, OverlapMode::kChunked),
                       ::testing::Values(2), ::testing::Values(Transport::kNccl),
                       ::testing::Values(1)),
    Name);

// The collectives alone (no GEMM), out of place, on both transports; one rank
// copies X to Y.
INSTANTIATE_TEST_SUITE_P(CollectiveAlone, LayerOpsTest,
                         ::testing::Combine(::testing::Values(OpType::kAllGather,
                                                              OpType::kReduceScatter,
                                                              OpType::kAllReduce),
                                            ::testing::Values(OverlapMode::kSerial),
                                            ::testing::Values(1),
                                            ::testing::Values(Transport::kNccl, Transport::kP2p),
                                            ::testing::Values(1, 2, 3, 4)),
                         Name);

// A GEMM alone: each rank multiplies its own A by its columns of W; no transport.
INSTANTIATE_TEST_SUITE_P(GemmAlone, LayerOpsTest,
                         ::testing::Combine(::testing::Values(OpType::kGemm),
                                            ::testing::Values(OverlapMode::kSerial),
                                            ::testing::Values(1),
                                            ::testing::Values(Transport::kNone),
                                            ::testing::Values(1, 2, 3)),
                         Name);

// 16-bit dtypes: stored as such, computed in fp32, within their tolerance.
TEST(LayerOps16BitTest, Bf16AndFp16WithinTolerance) {
  engine::HostEngineOptions options;
  options.device_count = 2;
  options.hazard_checks = true;
  auto engine = engine::CreateHostEngine(options);
  ASSERT_TRUE(engine.ok());
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (OpType type : {OpType::kAgGemm, OpType::kGemmRs, OpType::kGemmAr}) {
      OpSpec op = SmallOp(type, 2);
      op.k = 256;  // a longer reduction makes the rounding visible
      const Schedule s{OverlapMode::kChunked, 2, Transport::kP2p};
      auto ctx = OpContext::Create(**engine, op, dt, {0, 1}, BuffersFor(op, 2, s));
      ASSERT_TRUE(ctx.ok());
      ASSERT_TRUE(FillInputs(**ctx, 11, 3).ok());
      ASSERT_TRUE((*engine)->Synchronize({0, 1}).ok());
      ASSERT_TRUE(RunOnce(**engine, **ctx, s).ok());
      auto v = VerifyOutputs(**ctx, 11, 3);
      ASSERT_TRUE(v.ok()) << v.status();
      EXPECT_LT(v->max_rel_error, DTypeTolerance(dt)) << DTypeName(dt) << " " << OpTypeName(type);
      EXPECT_GT(v->max_rel_error, 0.0) << "16-bit output cannot be exact";
    }
  }
}

// Direct is refused where no GEMM output belongs to another rank, and outside
// the rings, before anything is enqueued.
TEST(LayerOpsDirectTest, RefusedOutsideTheReductionRings) {
  engine::HostEngineOptions options;
  options.device_count = 2;
  auto engine = engine::CreateHostEngine(options);
  ASSERT_TRUE(engine.ok());
  for (OpType type : {OpType::kAgGemm, OpType::kGemmRs}) {
    OpSpec op = SmallOp(type, 2);
    const Schedule ring{OverlapMode::kRing, 1, Transport::kDirect};
    auto ctx = OpContext::Create(**engine, op, DType::kF32, {0, 1}, BuffersFor(op, 2, ring));
    ASSERT_TRUE(ctx.ok());
    const absl::Status st = EnqueueOp(**ctx, type == OpType::kAgGemm
                                                 ? ring
                                                 : Schedule{OverlapMode::kChunked, 2,
                                                            Transport::kDirect});
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_NE(st.message().find("transport direct is only for"), std::string::npos) << st;
  }
}

// A wrong output is caught: skipping the collective leaves rows that differ
// from the reference, and an unwritten (poisoned) output is reported as such.
TEST(LayerOpsVerifyTest, DetectsWrongAndUnwrittenOutputs) {
  engine::HostEngineOptions options;
  options.device_count = 2;
  auto engine = engine::CreateHostEngine(options);
  ASSERT_TRUE(engine.ok());
  OpSpec op = SmallOp(OpType::kGemmAr, 2);
  const Schedule s{OverlapMode::kSerial, 1, Transport::kNccl};
  auto ctx = OpContext::Create(**engine, op, DType::kF32, {0, 1}, BuffersFor(op, 2, s));
  ASSERT_TRUE(ctx.ok());
  ASSERT_TRUE(FillInputs(**ctx, 5, 0).ok());
  ASSERT_TRUE(PoisonOutputs(**ctx).ok());
  ASSERT_TRUE((*engine)->Synchronize({0, 1}).ok());
  auto unwritten = VerifyOutputs(**ctx, 5, 0);
  EXPECT_EQ(unwritten.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(unwritten.status().message()).find("not fully written"),
            std::string::npos);

  // The GEMM alone (no all-reduce) writes every element, but only a partial sum.
  ASSERT_TRUE(EnqueueGemmAlone(**ctx).ok());
  ASSERT_TRUE((*engine)->Synchronize({0, 1}).ok());
  auto partial = VerifyOutputs(**ctx, 5, 0);
  ASSERT_TRUE(partial.ok());
  EXPECT_GT(partial->max_rel_error, 0.05);
}

// A wide op: a row's reference would cost y_cols x k = 4096 x 2048 multiply-adds,
// so 256 of its columns are checked; a right result passes, a partial sum
// (the GEMM alone, no all-reduce) is caught, and the first unwritten element is
// named exactly, however far from the checked columns.
TEST(LayerOpsVerifyTest, WideOutputsAreCheckedOnSampledColumns) {
  engine::HostEngineOptions options;
  options.device_count = 2;
  options.device_memory_bytes = int64_t{256} << 20;
  auto engine = engine::CreateHostEngine(options);
  ASSERT_TRUE(engine.ok());
  const OpSpec op = MakeOp("wide", OpType::kGemmAr, 64, 2048, 4096);
  const Schedule s{OverlapMode::kRing, 2, Transport::kP2p};
  auto ctx = OpContext::Create(**engine, op, DType::kF32, {0, 1}, BuffersFor(op, 2, s));
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  ASSERT_TRUE(FillInputs(**ctx, 9, 0).ok());
  ASSERT_TRUE((*engine)->Synchronize({0, 1}).ok());
  ASSERT_TRUE(RunOnce(**engine, **ctx, s).ok());
  auto v = VerifyOutputs(**ctx, 9, 0);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->cols_checked, 256);
  EXPECT_EQ(v->rows_checked, 48);
  EXPECT_LT(v->max_rel_error, 1e-5);
  // Narrower rows are checked whole.
  auto all_cols = VerifyOutputs(**ctx, 9, 0, 48, /*max_cols=*/4096);
  ASSERT_TRUE(all_cols.ok());
  EXPECT_EQ(all_cols->cols_checked, 4096);
  EXPECT_NEAR(all_cols->max_rel_error, v->max_rel_error, 1e-5);

  ASSERT_TRUE(EnqueueGemmAlone(**ctx).ok());
  ASSERT_TRUE((*engine)->Synchronize({0, 1}).ok());
  auto partial = VerifyOutputs(**ctx, 9, 0);
  ASSERT_TRUE(partial.ok());
  EXPECT_GT(partial->max_rel_error, 0.05);

  // Two elements of rank 1 left unwritten: row 40 col 4001, and later row 63 col 7.
  const engine::BufferId y = ctx->get()->rank(1).y;
  for (const auto& [row, col] : {std::pair<int64_t, int64_t>{63, 7}, {40, 4001}}) {
    const engine::BufferRef one{y, static_cast<size_t>((row * op.n + col) * 4), 4};
    ASSERT_TRUE(
        (*engine)->FillConstant(ctx->get()->rank(1).compute, one, DType::kF32, std::nanf("")).ok());
  }
  ASSERT_TRUE((*engine)->Synchronize({0, 1}).ok());
  auto unwritten = VerifyOutputs(**ctx, 9, 0);
  EXPECT_EQ(unwritten.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(unwritten.status().message()),
              ::testing::HasSubstr("rank 1 row 40 col 4001 is not finite"));
}

// fp8 on the host backend, hazard checker on: every op x mode x chunk count x
// transport, the inputs and the gathered A held in one byte, GEMM outputs and
// partials in bf16, each output against the float64 reference on the fp8
// inputs as stored.
class Fp8OpsTest : public ::testing::TestWithParam<Param> {};

OpSpec Fp8Op(OpType type, int tp) {
  OpSpec op;
  op.id = "op";
  op.type = type;
  op.m = 24 * tp;  // chunks 3 and 4 divide the rank's rows, 5 does not
  op.k = IsCollectiveOnly(type) ? 0 : 32 * tp;
  op.n = 16 * tp;
  return op;
}

TEST_P(Fp8OpsTest, MatchesFloat64ReferenceWithBf16Outputs) {
  const auto [type, mode, chunks, transport, tp] = GetParam();
  engine::HostEngineOptions options;
  options.device_count = tp;
  options.hazard_checks = true;
  auto engine = engine::CreateHostEngine(options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  const OpSpec op = Fp8Op(type, tp);
  const Schedule s{mode, chunks, transport};
  std::vector<int> devices;
  for (int d = 0; d < tp; ++d) devices.push_back(d);
  auto ctx = OpContext::Create(**engine, op, DType::kFP8, devices, BuffersFor(op, tp, s));
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  OpContext& c = **ctx;
  const bool sums = type == OpType::kReduceScatter || type == OpType::kAllReduce;
  EXPECT_EQ(c.DTypeOf(c.rank(0).a), sums ? DType::kBF16 : DType::kFP8);
  EXPECT_EQ(c.DTypeOf(c.rank(0).y), type == OpType::kAllGather ? DType::kFP8 : DType::kBF16);
  if (c.rank(0).full != engine::kNoBuffer) {
    EXPECT_EQ(c.DTypeOf(c.rank(0).full), type == OpType::kAgGemm ? DType::kFP8 : DType::kBF16);
  }
  ASSERT_TRUE(FillInputs(c, 5, 0).ok());
  ASSERT_TRUE((*engine)->Synchronize(devices).ok());
  for (int iteration = 0; iteration < 2; ++iteration) {
    ASSERT_TRUE(PoisonOutputs(c).ok());
    absl::Status st = EnqueueOp(c, s);
    ASSERT_TRUE(st.ok()) << s.Name() << ": " << st;
    st = (*engine)->Synchronize(devices);
    ASSERT_TRUE(st.ok()) << s.Name() << ": " << st;
    auto v = VerifyOutputs(c, 5, 0, /*max_rows=*/1000);
    ASSERT_TRUE(v.ok()) << s.Name() << ": " << v.status();
    EXPECT_EQ(v->rows_checked, c.shapes().y_rows);
    EXPECT_LT(v->max_rel_error, OutputTolerance(type, DType::kFP8, tp)) << s.Name();
    if (type == OpType::kAllGather) {
      EXPECT_EQ(v->max_rel_error, 0) << "gathered fp8 bytes are copied exactly";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Whole, Fp8OpsTest,
    ::testing::Combine(::testing::Values(OpType::kAgGemm, OpType::kGemmRs, OpType::kGemmAr),
                       ::testing::Values(OverlapMode::kSerial, OverlapMode::kBulk),
                       ::testing::Values(1), ::testing::Values(Transport::kNccl, Transport::kP2p),
                       ::testing::Values(2, 3)),
    Name);
INSTANTIATE_TEST_SUITE_P(Pieces, Fp8OpsTest, kUnevenPieces, Name);
INSTANTIATE_TEST_SUITE_P(DirectRing, Fp8OpsTest,
                         ::testing::Combine(::testing::Values(OpType::kGemmRs, OpType::kGemmAr),
                                            ::testing::Values(OverlapMode::kRing),
                                            ::testing::Values(1, 4),
                                            ::testing::Values(Transport::kDirect),
                                            ::testing::Values(2, 3)),
                         Name);
INSTANTIATE_TEST_SUITE_P(Alone, Fp8OpsTest,
                         ::testing::Combine(::testing::Values(OpType::kAllGather,
                                                              OpType::kReduceScatter,
                                                              OpType::kAllReduce, OpType::kGemm),
                                            ::testing::Values(OverlapMode::kSerial),
                                            ::testing::Values(1),
                                            ::testing::Values(Transport::kNccl, Transport::kP2p),
                                            ::testing::Values(1, 2)),
                         Name);

// The memory estimate counts each buffer in its own dtype: an fp8 ag_gemm
// needs about half of what the same op in bf16 does, and no more than that.
TEST(Fp8BuffersTest, AreSizedInTheirOwnDtypes) {
  OpSpec op = Fp8Op(OpType::kAgGemm, 2);
  const Schedule s{OverlapMode::kChunked, 3, Transport::kP2p};
  const BufferSizes sizes = BuffersFor(op, 2, s);
  const double fp8 = BufferBytes(sizes, BufferDTypesFor(op.type, DType::kFP8));
  const double bf16 = BufferBytes(sizes, BufferDTypesFor(op.type, DType::kBF16));
  // Only Y is bf16 in both; fp8 adds its two scales, 16 bytes apart.
  const double scales = 32;
  EXPECT_DOUBLE_EQ(bf16 - fp8, static_cast<double>(sizes.TotalElements() - sizes.y) - scales);
  op = Fp8Op(OpType::kGemmRs, 2);
  const BufferSizes rs = BuffersFor(op, 2, s);
  // gemm_rs: only A and W shrink; its partials and slots stay bf16.
  EXPECT_DOUBLE_EQ(BufferBytes(rs, BufferDTypesFor(op.type, DType::kBF16)) -
                       BufferBytes(rs, BufferDTypesFor(op.type, DType::kFP8)),
                   static_cast<double>(rs.a + rs.w) - scales);
  // A collective alone runs no GEMM: no scales.
  EXPECT_FALSE(BufferDTypesFor(OpType::kAllGather, DType::kFP8).scales);
  EXPECT_FALSE(BufferDTypesFor(OpType::kGemmRs, DType::kBF16).scales);
}

}  // namespace
}  // namespace overlap::ops
