// fp8 layer ops on the host backend, hazard checker on: every op x mode x chunk
// count x transport, the inputs and the gathered A held in one byte, GEMM
// outputs and partials in bf16, each output against the float64 reference on
// the fp8 inputs as stored.
#include <gtest/gtest.h>

#include <string>
#include <tuple>

#include "server/engine/host/host_engine.h"
#include "server/ops/layer_ops.h"
#include "server/ops/reference.h"

namespace overlap::ops {
namespace {

using Param = std::tuple<OpType, OverlapMode, int /*chunks*/, Transport, int /*tp*/>;

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

std::string Name(const ::testing::TestParamInfo<Param>& info) {
  const auto [type, mode, chunks, transport, tp] = info.param;
  return OpTypeName(type) + "_" + OverlapModeName(mode) + "_c" + std::to_string(chunks) + "_" +
         TransportName(transport) + "_tp" + std::to_string(tp);
}

INSTANTIATE_TEST_SUITE_P(
    Whole, Fp8OpsTest,
    ::testing::Combine(::testing::Values(OpType::kAgGemm, OpType::kGemmRs, OpType::kGemmAr),
                       ::testing::Values(OverlapMode::kSerial, OverlapMode::kBulk),
                       ::testing::Values(1), ::testing::Values(Transport::kNccl, Transport::kP2p),
                       ::testing::Values(2, 3)),
    Name);
INSTANTIATE_TEST_SUITE_P(
    Pieces, Fp8OpsTest,
    ::testing::Combine(::testing::Values(OpType::kAgGemm, OpType::kGemmRs, OpType::kGemmAr),
                       ::testing::Values(OverlapMode::kChunked, OverlapMode::kRing),
                       ::testing::Values(3, 5),
                       ::testing::Values(Transport::kNccl, Transport::kP2p),
                       ::testing::Values(2, 3)),
    Name);
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
TEST(Fp8OpsTest, BuffersAreSizedInTheirOwnDtypes) {
  OpSpec op = Fp8Op(OpType::kAgGemm, 2);
  const Schedule s{OverlapMode::kChunked, 3, Transport::kP2p};
  const BufferSizes sizes = BuffersFor(op, 2, s);
  const double fp8 = BufferBytes(sizes, BufferDTypesFor(op.type, DType::kFP8));
  const double bf16 = BufferBytes(sizes, BufferDTypesFor(op.type, DType::kBF16));
  // Only Y is bf16 in both.
  EXPECT_DOUBLE_EQ(bf16 - fp8, static_cast<double>(sizes.TotalElements() - sizes.y));
  op = Fp8Op(OpType::kGemmRs, 2);
  const BufferSizes rs = BuffersFor(op, 2, s);
  // gemm_rs: only A and W shrink; its partials and slots stay bf16.
  EXPECT_DOUBLE_EQ(BufferBytes(rs, BufferDTypesFor(op.type, DType::kBF16)) -
                       BufferBytes(rs, BufferDTypesFor(op.type, DType::kFP8)),
                   static_cast<double>(rs.a + rs.w));
}

}  // namespace
}  // namespace overlap::ops
