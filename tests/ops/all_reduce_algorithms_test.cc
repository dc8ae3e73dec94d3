// The copy-engine all-reduce layouts (all_reduce_p2p.h: ring, tree, parameter
// server) on the host backend with the hazard checker on: every rank's output
// against float64 after poisoning, at group sizes that give the tree one to
// three levels (inner ranks with one child and with two), pieces that do and do
// not split evenly; and the bytes each rank pulls in, which is what tells the
// layouts apart (ring 2(N-1)/N x S everywhere, ps (N-1) x S into rank 0).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/engine/host/host_engine.h"
#include "server/ops/collectives.h"
#include "server/ops/layer_ops.h"
#include "server/ops/reference.h"
#include "tests/forwarding_engine.h"

namespace overlap::ops {
namespace {

// Counts the bytes each device pulls from the others.
class CopyCounter final : public ForwardingEngine {
 public:
  using ForwardingEngine::ForwardingEngine;
  std::map<int, int64_t> bytes_into;
  absl::Status PeerCopy(engine::StreamId s, engine::BufferRef dst, int dst_device,
                        engine::BufferRef src, int src_device) override {
    if (dst_device != src_device) bytes_into[dst_device] += static_cast<int64_t>(src.bytes);
    return inner().PeerCopy(s, dst, dst_device, src, src_device);
  }
};

std::unique_ptr<CopyCounter> MakeEngine(int devices) {
  engine::HostEngineOptions options;
  options.device_count = devices;
  options.device_memory_bytes = 16 << 20;
  options.hazard_checks = true;
  auto host = engine::CreateHostEngine(options);
  EXPECT_TRUE(host.ok()) << host.status();
  return std::make_unique<CopyCounter>(std::move(host).value());
}

std::vector<int> FirstDevices(int tp) {
  std::vector<int> devices;
  for (int d = 0; d < tp; ++d) devices.push_back(d);
  return devices;
}

// Bytes rank r pulls in for an all-reduce of `buffer` bytes split evenly.
int64_t ExpectedBytesInto(AllReduceAlgorithm algorithm, int r, int tp, int64_t buffer) {
  switch (algorithm) {
    case AllReduceAlgorithm::kRing:
      return 2 * (tp - 1) * buffer / tp;
    case AllReduceAlgorithm::kTree: {
      const int children = std::max(0, std::min(tp, 2 * r + 3) - (2 * r + 1));
      return (children + (r > 0 ? 1 : 0)) * buffer;
    }
    case AllReduceAlgorithm::kParameterServer:
      return r == 0 ? (tp - 1) * buffer : buffer;
    case AllReduceAlgorithm::kDefault:
    case AllReduceAlgorithm::kAuto:
    case AllReduceAlgorithm::kHierarchical:  // a mesh's (mesh_test.cc)
      break;
  }
  return -1;
}

using Param = std::tuple<AllReduceAlgorithm, int /*tp*/, int /*rows per rank*/, int /*cols*/>;

class AllReduceAlgorithmTest : public ::testing::TestWithParam<Param> {};

TEST_P(AllReduceAlgorithmTest, MatchesFloat64AndMovesWhatItsLayoutMoves) {
  const auto [algorithm, tp, rows_per_rank, cols] = GetParam();
  auto engine = MakeEngine(8);
  OpSpec op;
  op.id = "ar";
  op.type = OpType::kAllReduce;
  op.m = static_cast<int64_t>(rows_per_rank) * tp;
  op.n = cols;
  op.algorithm = algorithm;
  const Schedule s{OverlapMode::kSerial, 1, Transport::kP2p, algorithm};
  const std::vector<int> devices = FirstDevices(tp);
  auto ctx = OpContext::Create(*engine, op, DType::kF32, devices, BuffersFor(op, tp, s));
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  ASSERT_TRUE(FillInputs(**ctx, 11, 0).ok());
  ASSERT_TRUE(engine->Synchronize(devices).ok());
  // Twice: the second iteration reuses the events and must not build on the first.
  for (int iteration = 0; iteration < 2; ++iteration) {
    ASSERT_TRUE(PoisonOutputs(**ctx).ok());
    engine->bytes_into.clear();
    const absl::Status st = EnqueueOp(**ctx, s);
    ASSERT_TRUE(st.ok()) << s.Name() << ": " << st;
    ASSERT_TRUE(engine->Synchronize(devices).ok());
    auto v = VerifyOutputs(**ctx, 11, 0, /*max_rows=*/100000);
    ASSERT_TRUE(v.ok()) << s.Name() << ": " << v.status();
    EXPECT_EQ(v->rows_checked, op.m);
    EXPECT_LT(v->max_rel_error, 1e-5) << s.Name();
  }
  const int64_t buffer = op.m * op.n * 4;
  // m is tp parts of whole rows, so the ring's parts are even.
  for (int r = 0; r < tp; ++r) {
    EXPECT_EQ(engine->bytes_into[r], ExpectedBytesInto(algorithm, r, tp, buffer))
        << s.Name() << " rank " << r << " of " << tp;
  }
}

std::string Name(const ::testing::TestParamInfo<Param>& info) {
  const auto [algorithm, tp, rows, cols] = info.param;
  return absl::StrCat(AllReduceAlgorithmName(algorithm), "_tp", tp, "_rows", rows, "_cols", cols);
}

INSTANTIATE_TEST_SUITE_P(EveryLayout, AllReduceAlgorithmTest,
                         ::testing::Combine(::testing::Values(AllReduceAlgorithm::kRing,
                                                              AllReduceAlgorithm::kTree,
                                                              AllReduceAlgorithm::kParameterServer),
                                            ::testing::Values(2, 3, 4, 5, 7, 8),
                                            // 16 rows per rank, pieces even; 3 and 1 rows: the
                                            // tree's and server's 4+ pieces uneven, some empty.
                                            ::testing::Values(16, 3, 1), ::testing::Values(8, 5)),
                         Name);

TEST(AllReduceAlgorithmRefusals, InPlaceIsRefused) {
  auto engine = MakeEngine(2);
  OpSpec op;
  op.id = "ar";
  op.type = OpType::kAllReduce;
  op.m = 8;
  op.n = 4;
  const Schedule s{OverlapMode::kSerial, 1, Transport::kP2p, AllReduceAlgorithm::kRing};
  auto ctx = OpContext::Create(*engine, op, DType::kF32, {0, 1}, BuffersFor(op, 2, s));
  ASSERT_TRUE(ctx.ok()) << ctx.status();
  std::vector<engine::BufferId> y = {(*ctx)->rank(0).y, (*ctx)->rank(1).y};
  const absl::Status st = AllReduceRowsInto(**ctx, Transport::kP2p, On::kCompute, y, y, 0, 8, 4, 0,
                                            AllReduceAlgorithm::kTree);
  EXPECT_EQ(st.code(), absl::StatusCode::kInternal) << st;
}

TEST(AllReduceAlgorithmRefusals, HostLibraryCollectivesHaveNoRingOrTree) {
  auto engine = MakeEngine(2);
  EXPECT_FALSE(engine->LibraryAlgorithms());
  OpSpec op;
  op.id = "ar";
  op.type = OpType::kAllReduce;
  op.m = 8;
  op.n = 4;
  for (AllReduceAlgorithm algorithm : {AllReduceAlgorithm::kRing, AllReduceAlgorithm::kTree}) {
    const Schedule s{OverlapMode::kSerial, 1, Transport::kNccl, algorithm};
    auto ctx = OpContext::Create(*engine, op, DType::kF32, {0, 1}, BuffersFor(op, 2, s));
    ASSERT_TRUE(ctx.ok()) << ctx.status();
    const absl::Status st = EnqueueOp(**ctx, s);
    EXPECT_EQ(st.code(), absl::StatusCode::kUnimplemented) << st;
    EXPECT_NE(st.message().find("one algorithm"), std::string::npos) << st;
  }
}

}  // namespace
}  // namespace overlap::ops
