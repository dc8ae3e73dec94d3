// The charts' arithmetic: ticks at even 1-2-5 steps with one number of
// decimals, words wrapped to a width, legends broken into rows.
#include "client/format/chart_layout.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace overlap::client {
namespace {

std::vector<std::string> Labels(const AxisTicks& t) {
  std::vector<std::string> out;
  for (int i = 0; i <= t.intervals; ++i) out.push_back(t.Label(i));
  return out;
}

TEST(ChartLayoutTest, TicksStepByOneTwoOrFiveWithOneNumberOfDecimals) {
  // The examples: 0.5 beside 1.00, and quarters (1.25, 3.75).
  EXPECT_EQ(Labels(NiceTicks(1.3)), (std::vector<std::string>{"0.0", "0.5", "1.0", "1.5"}));
  EXPECT_EQ(Labels(NiceTicks(3.9)), (std::vector<std::string>{"0", "1", "2", "3", "4"}));
  EXPECT_EQ(Labels(NiceTicks(100)), (std::vector<std::string>{"0", "20", "40", "60", "80", "100"}));
  EXPECT_EQ(Labels(NiceTicks(0.0123)),
            (std::vector<std::string>{"0.000", "0.005", "0.010", "0.015"}));
  EXPECT_EQ(Labels(NiceTicks(15.004, 6)), (std::vector<std::string>{"0", "5", "10", "15", "20"}));
  const AxisTicks exact = NiceTicks(0.3);
  EXPECT_DOUBLE_EQ(exact.step, 0.1);
  EXPECT_EQ(exact.intervals, 3) << "0.3 / 0.1 must not round up to a fourth step";
  for (double most : {0.0, -1.0, std::nan("")}) {
    EXPECT_EQ(Labels(NiceTicks(most)),
              (std::vector<std::string>{"0.0", "0.2", "0.4", "0.6", "0.8", "1.0"}));
  }
}

TEST(ChartLayoutTest, TicksCoverTheLargestValueInAtMostTheStepsAsked) {
  for (double most = 0.001; most < 5e4; most *= 1.37) {
    const AxisTicks t = NiceTicks(most, 5);
    EXPECT_GE(t.Top(), most * (1 - 1e-9)) << most;
    EXPECT_LE(t.intervals, 5) << most;
    EXPECT_LT(t.Top() - t.step, most) << most << ": a step too many";
  }
}

TEST(ChartLayoutTest, WrapsAtSpacesWithinTheWidth) {
  const std::vector<std::string> lines =
      WrapWords("step over ideal, ideal = max(GEMM alone, comm alone); lower is better", 200, 15);
  ASSERT_GT(lines.size(), 1u);
  for (const std::string& line : lines) EXPECT_LE(TextWidth(line, 15), 200) << line;
  EXPECT_EQ(WrapWords("", 100, 12), (std::vector<std::string>{""}));
  EXPECT_EQ(WrapWords("unbreakable_word_longer_than_the_width", 20, 12).size(), 1u);
}

TEST(ChartLayoutTest, LegendBreaksIntoRowsThatFit) {
  const std::vector<std::string> names = {"A job-000010", "B job-000011", "world/hierarchical",
                                          "nccl/ring", "p2p"};
  const std::vector<LegendSlot> slots = LayOutLegend(names, 300);
  ASSERT_EQ(slots.size(), names.size());
  EXPECT_EQ(slots[0].row, 0);
  EXPECT_EQ(slots[0].x, 0);
  for (size_t i = 0; i < slots.size(); ++i) {
    EXPECT_LE(slots[i].x + kSwatchPx + 6 + TextWidth(names[i], kLegendFontPx), 300) << names[i];
    if (i > 0 && slots[i].row == slots[i - 1].row) {
      EXPECT_GT(slots[i].x, slots[i - 1].x);
    }
  }
  EXPECT_GT(slots.back().row, 0);
}

}  // namespace
}  // namespace overlap::client
