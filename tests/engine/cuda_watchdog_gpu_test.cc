// The collective watchdog on real GPUs. Rank 1's collective is held back behind
// seconds of GEMMs on its stream, so rank 0's NCCL kernel waits for a peer that
// does not come within collective_timeout_s: Synchronize must end ABORTED (not
// hang), the engine must stay healthy, and the next collective on the same
// devices must rebuild the communicator and be exact. Non-blocking communicators
// (the default): with blocking ones the host waited inside NCCL for the peer, so
// the watchdog never got control. Skips without two GPUs.
#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/dtype.h"
#include "common/seeded_random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/cuda/cuda_engine.h"

namespace overlap::cuda {
namespace {

using engine::BufferId;
using engine::StreamRole;
using ::testing::HasSubstr;

// Also the communicator-creation timeout: a cold process needs seconds for that.
constexpr double kTimeoutS = 5.0;
constexpr int64_t kGemmSize = 8192;  // ~1.5 ms per bf16 GEMM on an H200
constexpr int kBatch = 8;            // ~12 ms per launch
// ~8 s, well past the timeout, in few launches: with thousands the host
// blocks on the launch queue and the GPU has drained most of it by the gather.
constexpr int kHoldBackLaunches = 700;

TEST(CudaWatchdogGpuTest, HungCollectiveIsAbortedAndTheNextOneRuns) {
  DaemonConfig config;
  config.pool_bytes_per_device = int64_t{4} << 30;
  config.gemm_workspace_bytes = int64_t{32} << 20;
  config.collective_timeout_s = kTimeoutS;
  config.nccl_nonblocking = true;
  absl::StatusOr<std::unique_ptr<CudaEngine>> created = CreateCudaEngineTyped(config);
  if (!created.ok() && created.status().code() == absl::StatusCode::kUnavailable) {
    GTEST_SKIP() << created.status().message();
  }
  ASSERT_TRUE(created.ok()) << created.status();
  CudaEngine& eng = **created;
  if (eng.DeviceCount() < 2) GTEST_SKIP() << "needs 2 GPUs, " << eng.DeviceCount() << " visible";
  const std::vector<int> devices{0, 1};
  const DType dtype = DType::kBF16;
  const size_t elem = DTypeSize(dtype);

  // The all-gather both attempts use.
  const size_t count = 1 << 20;
  engine::CollectiveArgs gather;
  gather.dtype = dtype;
  gather.count = count;
  for (int r = 0; r < 2; ++r) {
    const engine::StreamId stream = eng.GetStream(r, StreamRole::kComm, 0);
    absl::StatusOr<BufferId> send = eng.Allocate(r, count * elem);
    absl::StatusOr<BufferId> recv = eng.Allocate(r, 2 * count * elem);
    ASSERT_TRUE(send.ok() && recv.ok());
    gather.ranks.push_back(engine::RankBuffers{r, stream, {*send, 0, count * elem},
                                               {*recv, 0, 2 * count * elem}});
    ASSERT_TRUE(eng.FillRandom(stream, gather.ranks[r].send, dtype, 40 + r, 1.0f).ok());
  }

  // The communicator exists and is connected before anything hangs.
  ASSERT_TRUE(eng.AllGather(gather).ok());
  ASSERT_TRUE(eng.Synchronize(devices).ok());

  // Seconds of GEMMs on rank 1's comm stream, ahead of its part of the gather.
  const size_t matrix_bytes = kGemmSize * kGemmSize * elem;
  const engine::StreamId held = eng.GetStream(1, StreamRole::kComm, 0);
  std::vector<BufferId> mats;
  for (int i = 0; i < 3; ++i) {
    const size_t bytes = i == 2 ? kBatch * matrix_bytes : matrix_bytes;  // C: one per batch
    absl::StatusOr<BufferId> m = eng.Allocate(1, bytes);
    ASSERT_TRUE(m.ok()) << m.status();
    mats.push_back(*m);
    ASSERT_TRUE(eng.FillRandom(held, {*m, 0, bytes}, dtype, 7 + i, 0.01f).ok());
  }
  engine::GemmArgs g;
  g.dtype = dtype;
  g.m = g.n = g.k = kGemmSize;
  g.a = {mats[0], 0, kGemmSize};
  g.b = {mats[1], 0, kGemmSize};
  g.c = {mats[2], 0, kGemmSize};
  g.batch = kBatch;
  g.stride_c = kGemmSize * kGemmSize;
  ASSERT_TRUE(eng.Gemm(held, g).ok());  // tunes the shape
  ASSERT_TRUE(eng.Synchronize(devices).ok());
  for (int i = 0; i < kHoldBackLaunches; ++i) ASSERT_TRUE(eng.Gemm(held, g).ok());

  const auto start = std::chrono::steady_clock::now();
  const absl::Status enqueued = eng.AllGather(gather);
  const absl::Status hung = enqueued.ok() ? eng.Synchronize(devices) : enqueued;
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(hung.code(), absl::StatusCode::kAborted) << hung;
  EXPECT_THAT(std::string(hung.message()), HasSubstr("aborted")) << hung;
  // The timeout, then the drain (the held-back GEMMs finish); never a hang.
  EXPECT_GE(waited, kTimeoutS * 0.9);
  EXPECT_LT(waited, kTimeoutS + 20.0);
  EXPECT_TRUE(eng.Monitor()->Healthy());

  // A fresh gather on the same devices rebuilds the communicator and is exact.
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(eng.FillConstant(gather.ranks[r].stream, gather.ranks[r].recv, dtype, NAN).ok());
  }
  const absl::Status again = eng.AllGather(gather);
  ASSERT_TRUE(again.ok()) << again;
  ASSERT_TRUE(eng.Synchronize(devices).ok());
  std::vector<uint8_t> want(2 * count * elem);
  for (int r = 0; r < 2; ++r) {
    for (size_t i = 0; i < count; ++i) {
      StoreFromFloat(want.data(), dtype, r * count + i, SeededUniform(40 + r, i));
    }
  }
  for (int r = 0; r < 2; ++r) {
    std::vector<uint8_t> got(2 * count * elem);
    ASSERT_TRUE(eng.CopyToHost(got.data(), gather.ranks[r].recv, r).ok());
    EXPECT_TRUE(got == want) << "rank " << r;
  }
}

}  // namespace
}  // namespace overlap::cuda
