#include "common/stats.h"

#include <vector>

#include "gtest/gtest.h"

namespace overlap {
namespace {

TEST(StatsTest, SummarizeOddCount) {
  const Summary s = Summarize({5.0, 1.0, 3.0, 9.0, 2.0});
  EXPECT_EQ(s.samples, 5);
  EXPECT_DOUBLE_EQ(s.median, 3.0);
  EXPECT_DOUBLE_EQ(s.min, 1.0);
  EXPECT_DOUBLE_EQ(s.max, 9.0);
}

TEST(StatsTest, SummarizeEvenCountAveragesMiddlePair) {
  const Summary s = Summarize({4.0, 1.0, 10.0, 2.0});
  EXPECT_EQ(s.samples, 4);
  EXPECT_DOUBLE_EQ(s.median, 3.0);
  EXPECT_DOUBLE_EQ(s.min, 1.0);
  EXPECT_DOUBLE_EQ(s.max, 10.0);
  EXPECT_DOUBLE_EQ(Summarize({7.0, 8.0}).median, 7.5);
}

TEST(StatsTest, SummarizeSingleAndEmpty) {
  const Summary one = Summarize({2.5});
  EXPECT_EQ(one.samples, 1);
  EXPECT_DOUBLE_EQ(one.median, 2.5);
  EXPECT_DOUBLE_EQ(one.min, 2.5);
  EXPECT_DOUBLE_EQ(one.max, 2.5);
  const Summary none = Summarize({});
  EXPECT_EQ(none.samples, 0);
  EXPECT_DOUBLE_EQ(none.median, 0);
}

TEST(StatsTest, PercentileIsTheNearestRank) {
  const std::vector<double> ten = {10, 1, 9, 2, 8, 3, 7, 4, 6, 5};
  EXPECT_DOUBLE_EQ(Percentile(ten, 50), 5);   // rank ceil(5) = 5
  EXPECT_DOUBLE_EQ(Percentile(ten, 55), 6);   // rank ceil(5.5) = 6
  EXPECT_DOUBLE_EQ(Percentile(ten, 99), 10);  // rank ceil(9.9) = 10
  EXPECT_DOUBLE_EQ(Percentile(ten, 0), 1);    // rank at least 1
  EXPECT_DOUBLE_EQ(Percentile(ten, 100), 10);
  EXPECT_DOUBLE_EQ(Percentile({}, 50), 0);
}

TEST(StatsTest, AlgBw) {
  // 1 GB in 1 ms = 1000 GB/s.
  EXPECT_DOUBLE_EQ(AlgBwGBps(1e9, 1.0), 1000.0);
  EXPECT_DOUBLE_EQ(AlgBwGBps(256e6, 2.0), 128.0);
  EXPECT_DOUBLE_EQ(AlgBwGBps(1e9, 0.0), 0.0);
}

TEST(StatsTest, BusBwFactorsMatchNcclTests) {
  EXPECT_DOUBLE_EQ(BusBwFactor(Collective::kAllGather, 8), 7.0 / 8.0);
  EXPECT_DOUBLE_EQ(BusBwFactor(Collective::kReduceScatter, 2), 0.5);
  EXPECT_DOUBLE_EQ(BusBwFactor(Collective::kAllReduce, 2), 1.0);
  EXPECT_DOUBLE_EQ(BusBwFactor(Collective::kAllReduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(BusBwFactor(Collective::kAllReduce, 1), 0.0);
  // 8 ranks, 1 GB all-reduce buffer in 10 ms: algbw 100 GB/s, busbw 175 GB/s.
  EXPECT_DOUBLE_EQ(BusBwGBps(Collective::kAllReduce, 1e9, 10.0, 8), 175.0);
  EXPECT_DOUBLE_EQ(BusBwGBps(Collective::kAllGather, 1e9, 10.0, 4), 75.0);
}

}  // namespace
}  // namespace overlap
