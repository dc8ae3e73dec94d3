// A GPU's buffer pool sized from a share of its memory (config
// `pool_bytes_per_device: 80%`), and capped at 90% of what is free.
#include <cuda_runtime_api.h>

#include <memory>

#include "gtest/gtest.h"
#include "server/cuda/device_pool.h"

namespace overlap::cuda {
namespace {

constexpr size_t kGranularity = size_t{2} << 20;  // the pool's size is whole 2 MiB units

class DevicePoolGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
      GTEST_SKIP() << "no GPU visible";
    }
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ASSERT_EQ(cudaMemGetInfo(&free_, &total_), cudaSuccess);
  }

  size_t free_ = 0;
  size_t total_ = 0;
};

TEST_F(DevicePoolGpuTest, AShareOfTheGpuSizesThePool) {
  absl::StatusOr<std::unique_ptr<DevicePool>> pool =
      DevicePool::Create(0, /*requested_bytes=*/1, /*sharers=*/1, /*percent_of_gpu=*/10);
  ASSERT_TRUE(pool.ok()) << pool.status();
  EXPECT_EQ((*pool)->device_total_bytes(), total_);
  const size_t tenth = total_ / 10;
  EXPECT_LE((*pool)->capacity(), tenth);
  EXPECT_GT((*pool)->capacity(), tenth - kGranularity);
}

TEST_F(DevicePoolGpuTest, TheWholeGpuIsCappedAtNinetyPercentOfWhatIsFree) {
  absl::StatusOr<std::unique_ptr<DevicePool>> pool = DevicePool::Create(0, 1, 1, 100);
  ASSERT_TRUE(pool.ok()) << pool.status();
  const double capacity = static_cast<double>((*pool)->capacity());
  EXPECT_LE(capacity, 0.9 * static_cast<double>(free_));
  // Free memory moves a little between the readings (the context, other pools).
  EXPECT_GT(capacity, 0.85 * static_cast<double>(free_));
}

TEST_F(DevicePoolGpuTest, MoreThanTheGpuIsRefused) {
  absl::StatusOr<std::unique_ptr<DevicePool>> pool = DevicePool::Create(0, 1, 1, 150);
  ASSERT_FALSE(pool.ok());
  EXPECT_EQ(pool.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(pool.status().message().find("more than the whole GPU"), std::string::npos)
      << pool.status();
}

}  // namespace
}  // namespace overlap::cuda
