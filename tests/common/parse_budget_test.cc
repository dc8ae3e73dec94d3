// The parse budget: a semaphore in bytes that parses share. Values only: the
// waits are generous deadlines that catch a hang, never timings asserted.
#include "common/parse_budget.h"

#include <thread>

#include "absl/synchronization/notification.h"
#include "common/graph_parser.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace overlap {
namespace {

using ::testing::HasSubstr;

TEST(ParseBudgetTest, GrantsWhatFitsAndGivesItBack) {
  ParseBudget budget(100, absl::Milliseconds(10));
  {
    absl::StatusOr<ParseBudget::Grant> a = budget.Acquire(60);
    ASSERT_TRUE(a.ok());
    absl::StatusOr<ParseBudget::Grant> b = budget.Acquire(40);
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(budget.in_use_bytes(), 100);
    absl::StatusOr<ParseBudget::Grant> c = budget.Acquire(1);
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(c.status().message(), HasSubstr("the daemon is parsing too much at once"));
    EXPECT_EQ(budget.refused(), 1);
  }
  EXPECT_EQ(budget.in_use_bytes(), 0);
  EXPECT_EQ(budget.peak_bytes(), 100);
}

// A parse larger than the whole budget runs alone, not never.
TEST(ParseBudgetTest, ARequestLargerThanTheBudgetIsCutToIt) {
  ParseBudget budget(100, absl::Milliseconds(10));
  absl::StatusOr<ParseBudget::Grant> big = budget.Acquire(1 << 30);
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(budget.in_use_bytes(), 100);
}

TEST(ParseBudgetTest, AWaitingParseRunsWhenAnotherEnds) {
  ParseBudget budget(100, absl::Seconds(20));
  absl::StatusOr<ParseBudget::Grant> first = budget.Acquire(100);
  ASSERT_TRUE(first.ok());
  absl::Notification acquired;
  std::thread second([&] {
    absl::StatusOr<ParseBudget::Grant> grant = budget.Acquire(50);
    EXPECT_TRUE(grant.ok());
    acquired.Notify();
  });
  EXPECT_FALSE(acquired.HasBeenNotified());
  *first = ParseBudget::Grant();  // given back
  EXPECT_TRUE(acquired.WaitForNotificationWithTimeout(absl::Seconds(20)));
  second.join();
  EXPECT_EQ(budget.in_use_bytes(), 0);
}

TEST(ParseBudgetTest, AJobSpecParseHoldsItsShareOnlyWhileItRuns) {
  ParseBudget budget(ParseBudget::CapacityFor(1 << 20), absl::Milliseconds(10));
  absl::StatusOr<JobSpec> spec =
      ParseJobSpec("name: x\nops:\n  - {id: a, type: gemm, m: 1, k: 1, n: 1}\n", "", &budget);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_GT(budget.peak_bytes(), 0);
  EXPECT_EQ(budget.in_use_bytes(), 0);
  // A full budget refuses the parse with its own code, before yaml-cpp runs.
  absl::StatusOr<ParseBudget::Grant> all = budget.Acquire(budget.capacity_bytes());
  ASSERT_TRUE(all.ok());
  spec = ParseJobSpec("name: x\nops: []\n", "g.yaml", &budget);
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kResourceExhausted);
  // A refusal by the pre-scan takes nothing from the budget.
  spec = ParseJobSpec(std::string(100, '['), "g.yaml", &budget);
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ParseBudgetTest, ADaemonsBudgetHoldsSeveralOfTheLargestSpecs) {
  EXPECT_GE(ParseBudget::CapacityFor(1 << 20), int64_t{64} << 20);
  EXPECT_GT(ParseBudget::CapacityFor(16 << 20), ParseBudget::CapacityFor(1 << 20));
}

}  // namespace
}  // namespace overlap
