// NVML's clocks event reasons, named as node, top and the metrics show them.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/engine/engine.h"

namespace overlap::engine {
namespace {

using Names = std::vector<std::string>;

TEST(ClockLimitNamesTest, NamesEachBitMostTellingFirst) {
  EXPECT_EQ(ClockLimitNames(0), Names{});
  EXPECT_EQ(ClockLimitNames(0x4), Names{"power"});  // what an H200 shows under a long GEMM
  EXPECT_EQ(ClockLimitNames(0x1), Names{"idle"});
  EXPECT_EQ(ClockLimitNames(0x4 | 0x20 | 0x1), (Names{"power", "thermal", "idle"}));
  EXPECT_EQ(ClockLimitNames(0x8 | 0x40 | 0x80),
            (Names{"hw-slowdown", "hw-thermal", "power-brake"}));
  EXPECT_EQ(ClockLimitNames(0x2 | 0x10 | 0x100), (Names{"app-clocks", "sync-boost", "display"}));
}

TEST(ClockLimitNamesTest, BitsNvmlMayAddLaterStayVisible) {
  EXPECT_EQ(ClockLimitNames(0x4 | 0x800), (Names{"power", "0x800"}));
}

}  // namespace
}  // namespace overlap::engine
