// NCCL communicators across processes on the CUDA backend (engine.h,
// CrossProcessCollective), as far as one GPU can take them: NCCL refuses two
// ranks of one communicator on one GPU, across processes too, so here each
// communicator has one rank, made from an id as a peer daemon's would be, and
// one whose other rank never comes must fail within the init timeout. The
// two-GPU run between two daemons is what verifies the rest.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "absl/time/clock.h"
#include "common/config.h"
#include "server/cuda/cuda_engine.h"

namespace overlap::cuda {
namespace {

using engine::Engine;

class CrossProcessGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DaemonConfig config;
    config.pool_bytes_per_device = int64_t{1} << 30;
    auto engine = CreateCudaEngine(config);
    if (!engine.ok()) GTEST_SKIP() << "no GPU visible: " << engine.status().message();
    engine_ = std::move(*engine);
  }

  // count floats on device 0, each `value`, and a receive buffer of recv_count.
  engine::CollectiveArgs Args(size_t count, size_t recv_count, float value) {
    engine::CollectiveArgs args;
    args.dtype = DType::kF32;
    args.count = count;
    engine::RankBuffers rank;
    rank.device = 0;
    rank.stream = engine_->GetStream(0, engine::StreamRole::kComm);
    const size_t send_count = std::max(count, recv_count);
    send_ = *engine_->Allocate(0, send_count * sizeof(float));
    recv_ = *engine_->Allocate(0, recv_count * sizeof(float));
    rank.send = {send_, 0, send_count * sizeof(float)};
    rank.recv = {recv_, 0, recv_count * sizeof(float)};
    EXPECT_TRUE(engine_->FillConstant(rank.stream, rank.send, DType::kF32, value).ok());
    EXPECT_TRUE(engine_->FillConstant(rank.stream, rank.recv, DType::kF32, -1).ok());
    args.ranks.push_back(rank);
    return args;
  }

  std::vector<float> Received(size_t count) {
    std::vector<float> out(count);
    EXPECT_TRUE(engine_->CopyToHost(out.data(), {recv_, 0, count * sizeof(float)}, 0).ok());
    return out;
  }

  // Null only with ranks_per_gpu above 1; SetUp makes the engine with one.
  engine::CrossProcessCollectives& cross() { return *engine_->CrossProcess(); }

  std::unique_ptr<engine::Engine> engine_;
  engine::BufferId send_ = engine::kNoBuffer, recv_ = engine::kNoBuffer;
};

TEST_F(CrossProcessGpuTest, IdsAreNcclUniqueIdsAndDiffer) {
  ASSERT_NE(engine_->CrossProcess(), nullptr);
  absl::StatusOr<std::string> a = cross().NewCommunicatorId();
  absl::StatusOr<std::string> b = cross().NewCommunicatorId();
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
  EXPECT_EQ(a->size(), 128u);
  EXPECT_NE(*a, *b);
  EXPECT_EQ(cross()
                .CrossProcessCollective(engine::CollectiveOp::kAllReduce, "short", 1, {0},
                                        Args(16, 16, 1))
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CrossProcessGpuTest, ACommunicatorMadeFromAnIdSumsGathersAndScatters) {
  const std::string id = *cross().NewCommunicatorId();
  const size_t n = 4096;
  // One rank: the sum is the input, the gather and the scatter its own block.
  ASSERT_TRUE(
      cross()
          .CrossProcessCollective(engine::CollectiveOp::kAllReduce, id, 1, {0}, Args(n, n, 1.5f))
          .ok());
  ASSERT_TRUE(engine_->Synchronize({0}).ok());
  for (float v : Received(n)) ASSERT_EQ(v, 1.5f);
  ASSERT_TRUE(
      cross()
          .CrossProcessCollective(engine::CollectiveOp::kAllGather, id, 1, {0}, Args(n, n, 2.5f))
          .ok());
  ASSERT_TRUE(engine_->Synchronize({0}).ok());
  for (float v : Received(n)) ASSERT_EQ(v, 2.5f);
  ASSERT_TRUE(cross()
                  .CrossProcessCollective(engine::CollectiveOp::kReduceScatter, id, 1, {0},
                                          Args(n, n, 3.5f))
                  .ok());
  ASSERT_TRUE(engine_->Synchronize({0}).ok());
  for (float v : Received(n)) ASSERT_EQ(v, 3.5f);
}

TEST_F(CrossProcessGpuTest, ACommunicatorWhoseOtherRankNeverComesFailsWithinTheInitTimeout) {
  const std::string id = *cross().NewCommunicatorId();
  const absl::Time start = absl::Now();
  const absl::Status status = cross().CrossProcessCollective(engine::CollectiveOp::kAllReduce, id,
                                                             2, {0}, Args(256, 256, 1));
  EXPECT_FALSE(status.ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(90)) << status;
  // The engine goes on: a one-rank communicator still works.
  const std::string other = *cross().NewCommunicatorId();
  EXPECT_TRUE(cross()
                  .CrossProcessCollective(engine::CollectiveOp::kAllReduce, other, 1, {0},
                                          Args(256, 256, 1))
                  .ok());
  EXPECT_TRUE(engine_->Synchronize({0}).ok());
}

}  // namespace
}  // namespace overlap::cuda
