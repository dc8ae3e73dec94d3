// The CUDA engine's sub-allocator: pure host bookkeeping, so these tests run
// everywhere (the GPU pool built on it is covered by cuda_engine_gpu_test).
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "server/cuda/range_allocator.h"

namespace overlap::cuda {
namespace {

TEST(RangeAllocatorTest, AlignsEveryBlockTo256Bytes) {
  RangeAllocator allocator(4096);
  absl::StatusOr<size_t> a = allocator.Allocate(1);
  absl::StatusOr<size_t> b = allocator.Allocate(300);
  absl::StatusOr<size_t> c = allocator.Allocate(0);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(*a, 0u);
  EXPECT_EQ(*b, 256u);
  EXPECT_EQ(*c, 768u);
  EXPECT_EQ(allocator.bytes_in_use(), 256u + 512u + 256u);
}

TEST(RangeAllocatorTest, CapacityRoundsDownToTheAlignment) {
  RangeAllocator allocator(1000);
  EXPECT_EQ(allocator.capacity(), 768u);
  EXPECT_TRUE(allocator.Allocate(768).ok());
  EXPECT_EQ(allocator.bytes_free(), 0u);
}

TEST(RangeAllocatorTest, ExhaustionIsResourceExhaustedWithSizes) {
  RangeAllocator allocator(1024);
  ASSERT_TRUE(allocator.Allocate(512).ok());
  absl::StatusOr<size_t> too_big = allocator.Allocate(600);
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(too_big.status().message().find("requested 600 bytes"), std::string::npos)
      << too_big.status();
  EXPECT_NE(too_big.status().message().find("512 of 1024"), std::string::npos) << too_big.status();
}

TEST(RangeAllocatorTest, FreeCoalescesBothNeighbours) {
  RangeAllocator allocator(1024);
  const size_t a = *allocator.Allocate(256);
  const size_t b = *allocator.Allocate(256);
  const size_t c = *allocator.Allocate(256);
  const size_t d = *allocator.Allocate(256);
  ASSERT_TRUE(allocator.Free(a).ok());
  ASSERT_TRUE(allocator.Free(c).ok());
  EXPECT_EQ(allocator.free_block_count(), 2u);
  EXPECT_FALSE(allocator.Allocate(512).ok());  // fragmented: two 256-byte holes
  ASSERT_TRUE(allocator.Free(b).ok());         // joins a, b and c
  EXPECT_EQ(allocator.free_block_count(), 1u);
  EXPECT_EQ(allocator.largest_free_block(), 768u);
  ASSERT_TRUE(allocator.Free(d).ok());
  EXPECT_EQ(allocator.largest_free_block(), 1024u);
  EXPECT_EQ(allocator.bytes_in_use(), 0u);
}

TEST(RangeAllocatorTest, BestFitPicksTheSmallestHoleThatFits) {
  RangeAllocator allocator(4096);
  const size_t a = *allocator.Allocate(1024);
  const size_t gap1 = *allocator.Allocate(256);
  const size_t b = *allocator.Allocate(512);
  const size_t gap2 = *allocator.Allocate(256);
  ASSERT_TRUE(allocator.Allocate(2048).ok());
  ASSERT_TRUE(allocator.Free(a).ok());  // 1024-byte hole at 0
  ASSERT_TRUE(allocator.Free(b).ok());  // 512-byte hole at 1280
  (void)gap1;
  (void)gap2;
  EXPECT_EQ(*allocator.Allocate(300), 1280u);
}

TEST(RangeAllocatorTest, DoubleFreeAndBadOffsetAreInvalidArgument) {
  RangeAllocator allocator(1024);
  const size_t a = *allocator.Allocate(256);
  ASSERT_TRUE(allocator.Free(a).ok());
  EXPECT_EQ(allocator.Free(a).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(allocator.Free(128).code(), absl::StatusCode::kInvalidArgument);
}

TEST(RangeAllocatorTest, RandomTraceNeverOverlapsAndFullyCoalesces) {
  RangeAllocator allocator(1 << 20);
  std::mt19937 rng(7);
  std::vector<std::pair<size_t, size_t>> live;  // offset, rounded size
  for (int step = 0; step < 4000; ++step) {
    if (live.empty() || rng() % 3 != 0) {
      const size_t bytes = 1 + rng() % 20000;
      absl::StatusOr<size_t> offset = allocator.Allocate(bytes);
      if (!offset.ok()) continue;
      const size_t size = RangeAllocator::RoundUp(bytes);
      EXPECT_EQ(*offset % RangeAllocator::kAlignment, 0u);
      EXPECT_LE(*offset + size, allocator.capacity());
      for (const auto& [o, s] : live) {
        ASSERT_TRUE(*offset + size <= o || o + s <= *offset) << "overlap at step " << step;
      }
      live.emplace_back(*offset, size);
    } else {
      const size_t pick = rng() % live.size();
      ASSERT_TRUE(allocator.Free(live[pick].first).ok());
      live.erase(live.begin() + pick);
    }
  }
  for (const auto& block : live) ASSERT_TRUE(allocator.Free(block.first).ok());
  EXPECT_EQ(allocator.free_block_count(), 1u);
  EXPECT_EQ(allocator.largest_free_block(), allocator.capacity());
}

}  // namespace
}  // namespace overlap::cuda
