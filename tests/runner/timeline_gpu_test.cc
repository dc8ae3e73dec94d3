// Timelines on real GPUs (every visible GPU in the group; with
// OVERLAP_TEST_RANKS_PER_GPU=2, two ranks on one): the traced iteration of a
// ring schedule has each rank's GEMM pieces and transfers, in order on each
// stream, within the traced step. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/config.h"
#include "server/cuda/cuda_engine.h"
#include "server/runner/job_runner.h"
#include "tests/gpu_ranks_util.h"
#include "tests/job_result_util.h"

namespace overlap::runner {
namespace {

class TimelineGpuTest : public ::testing::TestWithParam<Transport> {
 protected:
  void SetUp() override {
    auto engine = CreateTestCudaEngine(int64_t{2} << 30);
    if (!engine.ok()) GTEST_SKIP() << "no GPU visible: " << engine.status().message();
    engine_ = std::move(*engine);
    for (int d = 0; d < engine_->DeviceCount(); ++d) devices_.push_back(d);
  }
  // While static destructors run, the CUDA runtime and NCCL may already be gone.
  void TearDown() override { engine_.reset(); }

  std::unique_ptr<engine::Engine> engine_;
  std::vector<int> devices_;
};

TEST_P(TimelineGpuTest, RingIterationHasEveryPieceInOrderWithinTheStep) {
  const int tp = static_cast<int>(devices_.size());
  JobSpec spec;
  spec.name = "timeline-gpu";
  spec.dtype = DType::kBF16;
  spec.iterations = 4;
  spec.warmup = 2;
  OpSpec op;
  op.id = "fc2";
  op.type = OpType::kGemmRs;
  op.m = 1024 * tp;
  op.k = 1024 * tp;
  op.n = 2048;
  op.mode = tp > 1 ? OverlapMode::kRing : OverlapMode::kSerial;
  op.chunks = tp > 1 ? 2 : 0;
  op.transport = GetParam();
  spec.ops = {op};
  auto result = RunJobResult(*engine_, spec, devices_, {}, nullptr);
  ASSERT_TRUE(result.ok()) << result.status();
  const v1::OpResult& r = result->ops(0);
  EXPECT_TRUE(r.verified());
  ASSERT_TRUE(r.has_timeline());
  const v1::Timeline& t = r.timeline();
  EXPECT_GT(t.step_ms(), 0);

  std::map<std::pair<int, std::string>, std::vector<const v1::TimelineSpan*>> lanes;
  std::map<int, int> gemms, own_pieces, transfers;
  for (const v1::TimelineSpan& s : t.spans()) {
    lanes[{s.rank(), s.lane()}].push_back(&s);
    EXPECT_GE(s.start_ms(), 0) << s.name();
    EXPECT_LE(s.end_ms(), t.step_ms() + 1e-3) << s.name();
    if (s.kind() == "gemm") {
      ++gemms[s.rank()];
      EXPECT_GT(s.end_ms(), s.start_ms()) << s.name();
      if (s.name().find("+=") != std::string::npos) ++own_pieces[s.rank()];
    } else {
      ++transfers[s.rank()];
    }
  }
  for (int rank = 0; rank < tp; ++rank) {
    if (tp == 1) {
      EXPECT_EQ(gemms[rank], 1);
      continue;
    }
    // Each peer's block and the own block, in two pieces each.
    EXPECT_EQ(gemms[rank], 2 * tp) << "rank " << rank;
    EXPECT_EQ(own_pieces[rank], 2) << "rank " << rank;
    EXPECT_GT(transfers[rank], 0) << "rank " << rank;
  }
  // A stream runs one thing at a time: its spans follow one another (to within
  // the events' resolution).
  for (auto& [lane, spans] : lanes) {
    std::sort(spans.begin(), spans.end(),
              [](const auto* a, const auto* b) { return a->start_ms() < b->start_ms(); });
    for (size_t i = 1; i < spans.size(); ++i) {
      EXPECT_GE(spans[i]->start_ms(), spans[i - 1]->end_ms() - 1e-3)
          << "rank " << lane.first << " " << lane.second << ": " << spans[i]->name() << " after "
          << spans[i - 1]->name();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, TimelineGpuTest,
                         ::testing::Values(Transport::kNccl, Transport::kP2p),
                         [](const auto& info) { return TransportName(info.param); });

}  // namespace
}  // namespace overlap::runner
