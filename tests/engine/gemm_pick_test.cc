#include "server/cuda/gemm_pick.h"

#include <gtest/gtest.h>

#include <limits>
#include <vector>

namespace overlap::cuda {
namespace {

constexpr float kFailed = std::numeric_limits<float>::infinity();

TEST(GemmPickTest, KeepsTheHeuristicsPickWithinTheMargin) {
  // The challenger is 1.5% faster: inside a 2% margin, so the first pick stays.
  EXPECT_EQ(PickCandidate({1.015f, 1.0f, 1.2f}, 0.02), 0);
  EXPECT_EQ(PickCandidate({1.0f, 1.0f}, 0.02), 0);
}

TEST(GemmPickTest, TakesAChallengerFasterBeyondTheMargin) {
  EXPECT_EQ(PickCandidate({1.05f, 1.2f, 1.0f}, 0.02), 2);
  // With no margin the fastest wins however small its lead.
  EXPECT_EQ(PickCandidate({1.001f, 1.0f}, 0.0), 1);
}

TEST(GemmPickTest, AHugeMarginAlwaysKeepsTheFirstPick) {
  EXPECT_EQ(PickCandidate({9.0f, 1.0f}, 1e9), 0);
}

TEST(GemmPickTest, FailedCandidatesAreNeverKept) {
  // The first pick failed: the fastest of the rest, whatever the margin.
  EXPECT_EQ(PickCandidate({kFailed, 1.3f, 1.1f}, 0.02), 2);
  EXPECT_EQ(PickCandidate({kFailed, 1.3f}, 1e9), 1);
  EXPECT_EQ(PickCandidate({1.0f, kFailed}, 0.0), 0);
  EXPECT_EQ(PickCandidate({kFailed, kFailed}, 0.02), -1);
  EXPECT_EQ(PickCandidate({}, 0.02), -1);
}

}  // namespace
}  // namespace overlap::cuda
