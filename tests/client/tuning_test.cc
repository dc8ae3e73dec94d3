// `overlapctl tuning`: the filter flags and the table, exactly.
#include "client/views/tuning.h"

#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

namespace overlap::client {
namespace {

TEST(TuningFilterTest, ParsesOpShapeAndStale) {
  auto filter = ParseTuningFilter("gemm_rs", "8192x4096x4096", true);
  ASSERT_TRUE(filter.ok()) << filter.status();
  EXPECT_EQ(filter->op_type(), "gemm_rs");
  EXPECT_EQ(filter->m(), 8192);
  EXPECT_EQ(filter->k(), 4096);
  EXPECT_EQ(filter->n(), 4096);
  EXPECT_TRUE(filter->stale_only());
  auto empty = ParseTuningFilter("", "", false);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->op_type(), "");
  EXPECT_EQ(empty->m(), 0);
  EXPECT_FALSE(empty->stale_only());
  // A collective alone has no k.
  EXPECT_TRUE(ParseTuningFilter("all_reduce", "8192x0x8192", false).ok());
}

TEST(TuningFilterTest, RefusesWhatIsNoOpOrShape) {
  for (const auto& [op, shape, message] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"gemm_xx", "", "--op: unknown op type \"gemm_xx\""},
           {"", "8192x4096", "--shape: want MxKxN"},
           {"", "8192xax4096", "--shape: want MxKxN"},
           {"", "0x4096x4096", "--shape: want MxKxN"},
           {"", "-8x4096x4096", "--shape: want MxKxN"}}) {
    auto filter = ParseTuningFilter(op, shape, false);
    EXPECT_EQ(filter.status().code(), absl::StatusCode::kInvalidArgument) << op << shape;
    EXPECT_EQ(filter.status().message().rfind(message, 0), 0u) << filter.status();
  }
}

v1::TunedSchedule Entry(const std::string& op, int64_t m, const std::string& schedule, double ms,
                        bool current) {
  v1::TunedSchedule t;
  t.set_op_type(op);
  t.set_m(m);
  t.set_k(4096);
  t.set_n(4096);
  t.set_dtype("bf16");
  t.set_tp(2);
  t.set_requested("auto/0/auto");
  t.set_schedule(schedule);
  t.set_step_ms(ms);
  t.set_tuned_unix_ms(1796131294000);  // 2026-12-01T13:21:34Z
  t.set_current(current);
  return t;
}

TEST(TuningTableTest, ExactRowsAndTheStaleNote) {
  v1::ListTunedSchedulesResponse response;
  *response.add_schedules() = Entry("ag_gemm", 8192, "ring/2/p2p", 0.2014, true);
  *response.add_schedules() = Entry("gemm_rs", 16384, "bulk/p2p", 1.375, false);
  EXPECT_EQ(FormatTunedSchedules(response),
            "OP       SHAPE            DTYPE  TP  ASKED        CHOSEN      STEP_MS  TUNED      "
            "           USABLE\n" +
                std::string(99, '-') +
                "\n"
                "ag_gemm  8192x4096x4096   bf16    2  auto/0/auto  ring/2/p2p    0.201  2026-12-01T"
                "13:21:34Z  yes\n"
                "gemm_rs  16384x4096x4096  bf16    2  auto/0/auto  bulk/p2p      1.375  2026-12-01T"
                "13:21:34Z  stale\n"
                "1 stale: tuned under another overlapd build, GPU model, driver, library or "
                "NCCL_*/CUDA_* setting (`--json` shows each one's environment); "
                "`overlapctl tuning forget --stale` drops them\n");
  EXPECT_EQ(FormatTunedSchedules(v1::ListTunedSchedulesResponse()), "no tuned schedules\n");
}

}  // namespace
}  // namespace overlap::client
