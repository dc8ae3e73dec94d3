// `overlapctl top`: one fixed-width line per GPU per sample, and its JSON form.
#include "client/views/top.h"

#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "client/core/proto_json.h"
#include "gtest/gtest.h"

namespace overlap::client {
namespace {

// 2026-12-01 02:58:53.250 UTC.
constexpr int64_t kNowMs = int64_t{1796093933} * 1000 + 250;

v1::GetNodeInfoResponse TwoGpus() {
  v1::GetNodeInfoResponse node;
  v1::Device* d0 = node.add_devices();
  d0->set_index(0);
  d0->set_telemetry_valid(true);
  d0->set_sm_clock_mhz(1980);
  d0->set_mem_clock_mhz(3201);
  d0->set_temperature_c(41);
  d0->set_power_w(306.94);
  d0->set_utilization_pct(99);
  d0->set_memory_used_bytes(int64_t{12} << 30);
  d0->set_max_sm_clock_mhz(1980);
  d0->set_clock_limits_valid(true);
  d0->add_clock_limits("power");
  d0->add_clock_limits("thermal");
  d0->set_capped_time_valid(true);
  d0->set_power_capped_s(12.5);
  d0->set_pcie_valid(true);
  d0->set_pcie_width(16);
  d0->set_pcie_max_width(16);
  v1::Device* d1 = node.add_devices();
  d1->set_index(1);  // no telemetry (host backend, or NVML missing)
  return node;
}

v1::Job RunningOn0() {
  v1::Job job;
  job.set_id("job-000007");
  job.add_devices(0);
  job.mutable_progress()->set_op_id("fc2");
  job.mutable_progress()->set_phase("timed");
  job.mutable_progress()->set_iteration(7);
  job.mutable_progress()->set_iterations(20);
  v1::OpResult* fc1 = job.mutable_result()->add_ops();
  fc1->set_id("fc1");
  fc1->set_type("ag_gemm");
  fc1->set_schedule("ring/p2p");
  fc1->mutable_comm_alone()->set_median_ms(1.5);
  fc1->mutable_step()->set_median_ms(5.25);
  fc1->set_hidden_fraction(0.667);
  fc1->add_compute_wait_rank_ms(0.125);
  return job;
}

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

TEST(TopTest, OneLinePerGpuWithWhatRunsThere) {
  const std::vector<std::string> lines =
      Lines(TopHeader() + FormatTopSample(TwoGpus(), {RunningOn0()}, kNowMs));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].rfind("TIME                  GPU SM_MHZ MEM_MHZ TEMP_C POWER_W UTIL_%", 0), 0u)
      << lines[0];
  // Every line has the header's width: the columns stay put as samples stream.
  EXPECT_EQ(lines[1].size(), lines[0].size());
  EXPECT_EQ(lines[2].size(), lines[0].size());
  const std::vector<std::string> gpu0 = absl::StrSplit(lines[1], ' ', absl::SkipEmpty());
  EXPECT_EQ(gpu0,
            (std::vector<std::string>{"2026-12-01T02:58:53Z", "0", "1980", "3201", "41", "306.9",
                                      "99", "power,therm~", "ok", "12.00GiB", "job-000007", "fc2",
                                      "timed_7/20", "fc1", "5.250", "66.7", "0.125"}));
  const std::vector<std::string> gpu1 = absl::StrSplit(lines[2], ' ', absl::SkipEmpty());
  EXPECT_EQ(gpu1, (std::vector<std::string>{"2026-12-01T02:58:53Z", "1", "-", "-", "-", "-", "-",
                                            "-", "-", "0B", "-", "-", "-", "-", "-", "-", "-"}));

  // What is wrong with a GPU, in short.
  v1::GetNodeInfoResponse sick = TwoGpus();
  sick.mutable_devices(0)->set_pcie_width(8);
  sick.mutable_devices(0)->set_xid_valid(true);
  sick.mutable_devices(0)->set_gpu_xid_errors(1);
  const std::vector<std::string> sick0 =
      absl::StrSplit(Lines(FormatTopSample(sick, {}, kNowMs))[0], ' ', absl::SkipEmpty());
  EXPECT_EQ(sick0[8], "pcie,xid");
}

// An op at one rank moves nothing (comm alone 0): its hidden column is a dash,
// not 100.
TEST(TopTest, OneRankShowsNoHidden) {
  v1::Job job = RunningOn0();
  job.mutable_result()->mutable_ops(0)->mutable_comm_alone()->set_median_ms(0);
  job.mutable_result()->mutable_ops(0)->set_hidden_fraction(1);
  const std::vector<std::string> lines = Lines(FormatTopSample(TwoGpus(), {job}, kNowMs));
  const std::vector<std::string> gpu0 = absl::StrSplit(lines[0], ' ', absl::SkipEmpty());
  ASSERT_GE(gpu0.size(), 3u);
  EXPECT_EQ(gpu0[gpu0.size() - 2], "-");
  EXPECT_EQ(gpu0[gpu0.size() - 3], "5.250");
}

// A GEMM alone has no communication: its hidden column is a dash. An op run
// without a timeline has no wait.
TEST(TopTest, GemmAloneShowsNoHiddenAndUntracedNoWait) {
  v1::Job job = RunningOn0();
  job.mutable_result()->mutable_ops(0)->set_type("gemm");
  job.mutable_result()->mutable_ops(0)->clear_compute_wait_rank_ms();
  const std::vector<std::string> lines = Lines(FormatTopSample(TwoGpus(), {job}, kNowMs));
  const std::vector<std::string> gpu0 = absl::StrSplit(lines[0], ' ', absl::SkipEmpty());
  ASSERT_GE(gpu0.size(), 3u);
  EXPECT_EQ(gpu0.back(), "-");
  EXPECT_EQ(gpu0[gpu0.size() - 2], "-");
  EXPECT_EQ(gpu0[gpu0.size() - 3], "5.250");
}

TEST(TopTest, JsonSampleHasTelemetryOnlyWhereValidAndTheLastOp) {
  const nlohmann::json j = TopSampleJson(TwoGpus(), {RunningOn0()}, kNowMs);
  EXPECT_EQ(j["time_ms"], kNowMs);
  EXPECT_EQ(j["time"], Rfc3339(kNowMs));
  ASSERT_EQ(j["devices"].size(), 2u);
  const nlohmann::json& gpu0 = j["devices"][0];
  EXPECT_EQ(gpu0["sm_clock_mhz"], 1980);
  EXPECT_EQ(gpu0["max_sm_clock_mhz"], 1980);
  EXPECT_EQ(gpu0["clock_limits"], nlohmann::json({"power", "thermal"}));
  EXPECT_DOUBLE_EQ(gpu0["power_capped_s"].get<double>(), 12.5);
  EXPECT_EQ(gpu0["health"]["pcie"]["max_width"], 16);
  EXPECT_EQ(gpu0["health_problems"], nlohmann::json::array());
  // Health readings without clock readings (as the host backend's simulated ones).
  v1::GetNodeInfoResponse health_only = TwoGpus();
  health_only.mutable_devices(0)->set_telemetry_valid(false);
  const nlohmann::json sample = TopSampleJson(health_only, {}, kNowMs);
  EXPECT_EQ(sample["devices"][0]["health"]["pcie"]["max_width"], 16);
  EXPECT_FALSE(sample["devices"][0].contains("sm_clock_mhz"));
  EXPECT_FALSE(j["devices"][1].contains("health"));
  EXPECT_EQ(gpu0["job"], "job-000007");
  EXPECT_EQ(gpu0["phase"], "timed");
  EXPECT_EQ(gpu0["iteration"], 7);
  EXPECT_EQ(gpu0["last_op"]["id"], "fc1");
  EXPECT_EQ(gpu0["last_op"]["schedule"], "ring/p2p");
  EXPECT_DOUBLE_EQ(gpu0["last_op"]["step_ms"].get<double>(), 5.25);
  EXPECT_DOUBLE_EQ(gpu0["last_op"]["compute_wait_ms"].get<double>(), 0.125);
  const nlohmann::json& gpu1 = j["devices"][1];
  EXPECT_FALSE(gpu1.contains("sm_clock_mhz"));
  EXPECT_TRUE(gpu1["job"].is_null());
  EXPECT_TRUE(gpu1["last_op"].is_null());
}

// A session on both GPUs, its steps per second against the previous sample.
TEST(TopTest, OpenSessionsFollowTheGpusWithTheirRate) {
  v1::ListSessionsResponse before;
  v1::SessionInfo* s = before.add_sessions();
  s->set_session_id("sess-000004");
  s->set_name("train");
  s->set_owner("alice (uid:1000)");
  s->set_state("ready");
  s->set_priority("deferred");
  s->add_devices(1);
  s->add_devices(0);
  s->set_steps(100);
  v1::SessionOpStats* fc1 = s->add_ops();
  fc1->set_op("fc1");
  fc1->set_last_ms(1.25);
  v1::SessionOpStats* fc2 = s->add_ops();
  fc2->set_op("fc2");
  fc2->set_last_ms(0.5);
  v1::SessionInfo* closed = before.add_sessions();
  closed->set_session_id("sess-000001");
  closed->set_state("closed");
  const std::vector<TopSession> first = OpenTopSessions(before, {}, 0);
  ASSERT_EQ(first.size(), 1u);  // closed sessions are not shown
  EXPECT_LT(first[0].steps_per_s, 0);
  v1::ListSessionsResponse after = before;
  after.mutable_sessions(0)->set_steps(150);
  const std::vector<TopSession> second = OpenTopSessions(after, first, 2.0);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_DOUBLE_EQ(second[0].steps_per_s, 25.0);

  const std::vector<std::string> lines = Lines(FormatTopSample(TwoGpus(), {}, kNowMs, second));
  ASSERT_EQ(lines.size(), 5u);  // two GPUs, the sessions' header, a line per device
  EXPECT_EQ(std::vector<std::string>(absl::StrSplit(lines[2], ' ', absl::SkipEmpty())),
            (std::vector<std::string>{"TIME", "GPU", "SESSION", "NAME", "OWNER", "LANE", "STEPS",
                                      "STEPS/S", "STEP_MS"}));
  EXPECT_EQ(lines[3].size(), lines[2].size());
  EXPECT_EQ(std::vector<std::string>(absl::StrSplit(lines[3], ' ', absl::SkipEmpty())),
            (std::vector<std::string>{"2026-12-01T02:58:53Z", "1", "sess-000004", "train", "alice",
                                      "deferred", "150", "25.0", "1.750"}));
  EXPECT_EQ(std::vector<std::string>(absl::StrSplit(lines[4], ' ', absl::SkipEmpty()))[1], "0");
  // No rate in a session's first sample.
  EXPECT_EQ(
      std::vector<std::string>(absl::StrSplit(
          Lines(FormatTopSample(TwoGpus(), {}, kNowMs, first))[3], ' ', absl::SkipEmpty()))[7],
      "-");

  const nlohmann::json j = TopSampleJson(TwoGpus(), {}, kNowMs, second);
  const nlohmann::json& on1 = j["devices"][1]["sessions"];
  ASSERT_EQ(on1.size(), 1u);
  EXPECT_EQ(on1[0]["id"], "sess-000004");
  EXPECT_EQ(on1[0]["rank"], 0);
  EXPECT_EQ(on1[0]["lane"], "deferred");
  EXPECT_EQ(on1[0]["steps"], 150);
  EXPECT_DOUBLE_EQ(on1[0]["steps_per_s"].get<double>(), 25.0);
  EXPECT_DOUBLE_EQ(on1[0]["step_ms"].get<double>(), 1.75);
  EXPECT_EQ(j["devices"][0]["sessions"][0]["rank"], 1);
  EXPECT_TRUE(
      TopSampleJson(TwoGpus(), {}, kNowMs, first)["devices"][0]["sessions"][0]["steps_per_s"]
          .is_null());
}

}  // namespace
}  // namespace overlap::client
