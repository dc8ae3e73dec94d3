// Sessions through the real overlapd binary: ranks as overlapd-session-rank
// processes on the default session socket (beside the API socket), their Y
// checked against float64, the session listed over the Node service, seen
// in the metrics, `top` and its trace, and sessions of two users with one
// name kept apart.
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/session/overlapd_session.h"
#include "common/dtype.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "overlap/v1/overlap.grpc.pb.h"
#include "tests/http_get.h"
#include "tests/integration/harness.h"

namespace overlap {
namespace {

using session::Tensor;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr int64_t kM = 8, kK = 4, kN = 6;
constexpr uint64_t kSeed = 1234;  // overlapd-session-rank's default --seed

std::string Graph() {
  return absl::StrCat(
      "name: two\ndtype: fp32\ndevices: [0, 1]\nops:\n  - {id: fc1, type: ag_gemm, m: ", kM,
      ", k: ", kK, ", n: ", kN, "}\n");
}

// A .npy the example wrote: float32, rows x cols.
std::vector<float> ReadNpy(const std::string& path) {
  const std::string bytes = testing::ReadFileOrEmpty(path);
  if (bytes.size() < 10) return {};
  const size_t header =
      10 + static_cast<unsigned char>(bytes[8]) + 256 * static_cast<unsigned char>(bytes[9]);
  std::vector<float> out((bytes.size() - header) / sizeof(float));
  std::memcpy(out.data(), bytes.data() + header, out.size() * sizeof(float));
  return out;
}

std::vector<std::string> RankArgs(const std::string& socket, const std::string& name,
                                  const std::string& graph, int rank) {
  return {SESSION_RANK_BIN, "--socket",          socket, "--name", name, "--graph", graph,
          "--rank",         std::to_string(rank)};
}

TEST(SessionDaemonTest, TwoRankProcessesMatchFloat64AndAreListed) {
  testing::TempDir dir;
  testing::Daemon daemon(dir.path());
  ASSERT_TRUE(daemon.Start());
  const std::string socket = dir.File("s-session.sock");  // beside s.sock
  const std::string graph = dir.File("graph.yaml");
  std::ofstream(graph) << Graph();
  std::vector<std::unique_ptr<testing::Child>> ranks;
  for (int r = 0; r < 2; ++r) {
    std::vector<std::string> args = RankArgs(socket, "two", graph, r);
    args.insert(args.end(), {"--steps", "2", "--out-dir", dir.path(), "--json"});
    ranks.push_back(testing::Child::Spawn(args, dir.path()));
  }
  for (int r = 0; r < 2; ++r) {
    testing::RunResult result = ranks[r]->Wait(std::chrono::seconds(120));
    ASSERT_EQ(result.exit_code, 0) << testing::Describe(result) << daemon.Log();
    EXPECT_THAT(result.out, HasSubstr(absl::StrCat("\"rank\": ", r)));
  }
  auto value = [](Tensor tensor, int r, int64_t i) {
    return static_cast<double>(SeededValue(session::TensorSeed(kSeed, "fc1", tensor, r), i));
  };
  for (int r = 0; r < 2; ++r) {
    const std::vector<float> y = ReadNpy(dir.File(absl::StrCat("fc1.rank", r, ".npy")));
    ASSERT_EQ(y.size(), static_cast<size_t>(kM * kN / 2));
    double worst = 0;
    for (int64_t row = 0; row < kM; ++row) {
      for (int64_t col = 0; col < kN / 2; ++col) {
        double expected = 0;
        for (int64_t k = 0; k < kK; ++k) {
          expected +=
              value(Tensor::kX, static_cast<int>(row / (kM / 2)), (row % (kM / 2)) * kK + k) *
              value(Tensor::kW, r, k * (kN / 2) + col);
        }
        worst = std::max(worst, std::abs(expected - y[row * (kN / 2) + col]));
      }
    }
    EXPECT_LT(worst, 1e-5) << "rank " << r;
  }
  // The session ends with its ranks (the daemon sees their sockets close,
  // after they exit); the Node service still lists it.
  auto channel = grpc::CreateChannel(daemon.address(), grpc::InsecureChannelCredentials());
  auto node = v1::Node::NewStub(channel);
  v1::ListSessionsResponse response;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  do {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    response.Clear();
    ASSERT_TRUE(node->ListSessions(&context, v1::ListSessionsRequest(), &response).ok());
    ASSERT_EQ(response.sessions_size(), 1);
    if (response.sessions(0).state() == "closed") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (std::chrono::steady_clock::now() < give_up);
  const v1::SessionInfo& info = response.sessions(0);
  EXPECT_EQ(info.state(), "closed");
  EXPECT_EQ(info.name(), "two");
  EXPECT_EQ(info.world(), 2);
  EXPECT_EQ(info.devices_size(), 2);
  EXPECT_EQ(info.mapped_bytes(), 0);  // released
  EXPECT_THAT(info.opened_at(), HasSubstr("T"));
  grpc::ClientContext close_context;
  v1::CloseSessionRequest close;
  close.set_session_id(info.session_id());
  v1::CloseSessionResponse closed;
  EXPECT_EQ(node->CloseSession(&close_context, close, &closed).error_code(),
            grpc::StatusCode::NOT_FOUND);  // no longer open
}

TEST(SessionDaemonTest, AnotherUsersSessionOfTheSameNameIsItsOwn) {
  if (std::string why = testing::CannotSwitchUsers(SESSION_RANK_BIN); !why.empty()) {
    GTEST_SKIP() << why;
  }
  testing::TempDir dir;
  testing::OpenToOthers(dir.path());
  testing::Daemon daemon(dir.path(),
                         {"--socket-group", "nogroup", "--session-join-timeout-s", "2"});
  ASSERT_TRUE(daemon.Start());
  const std::string socket = dir.File("s-session.sock");
  const std::string graph = dir.File("graph.yaml");
  std::ofstream(graph) << Graph();
  ::chmod(graph.c_str(), 0644);
  // Root holds rank 0 of "shared".
  auto mine = session::Session::Open(socket, "shared", Graph(), 0);
  ASSERT_TRUE(mine.ok()) << mine.status();
  // nobody's rank 0 of "shared" is another session: it opens, and then waits
  // for its own rank 1, which never comes.
  std::vector<std::string> args = testing::AsUser(testing::kNobody, testing::kNobody);
  for (const std::string& arg : RankArgs(socket, "shared", graph, 0)) args.push_back(arg);
  testing::RunResult result =
      testing::Child::Spawn(args, dir.path())->Wait(std::chrono::seconds(60));
  EXPECT_EQ(result.exit_code, 1) << testing::Describe(result);
  EXPECT_THAT(result.err, HasSubstr("DEADLINE_EXCEEDED"));
  EXPECT_THAT(result.err, Not(HasSubstr("ALREADY_EXISTS")));
}

class SessionJobsTest : public testing::DaemonTest {};

TEST_F(SessionJobsTest, AStartWaitsForARunningJobAndNamesIt) {
  StartDaemon({"--session-join-timeout-s", "2"});
  const std::string job = Submit(long_graph_);
  testing::PollJob(*daemon_, job, testing::StateIs("RUNNING"));
  const std::string graph = dir_.File("graph.yaml");
  std::ofstream(graph) << Graph();
  std::vector<std::unique_ptr<testing::Child>> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.push_back(testing::Child::Spawn(RankArgs(dir_.File("s-session.sock"), "busy", graph, r),
                                          dir_.path()));
  }
  for (int r = 0; r < 2; ++r) {
    testing::RunResult result = ranks[r]->Wait(std::chrono::seconds(60));
    EXPECT_EQ(result.exit_code, 1) << testing::Describe(result);
    EXPECT_THAT(result.err, HasSubstr("UNAVAILABLE"));
    EXPECT_THAT(result.err, HasSubstr("job " + job));
  }
  EXPECT_EQ(daemon_->Ctl({"cancel", job}).exit_code, 0);
}

TEST_F(SessionJobsTest, AJobWaitsWhileASessionHoldsItsDevices) {
  StartDaemon();
  auto held = session::Session::Open(dir_.File("s-session.sock"), "hold", Graph(), 0);
  ASSERT_TRUE(held.ok()) << held.status();
  const std::string job = Submit(small_graph_);  // every device, 0 and 1 among them
  absl::SleepFor(absl::Seconds(1));
  testing::RunResult get = daemon_->Ctl({"get", job, "--json"});
  ASSERT_EQ(get.exit_code, 0) << testing::Describe(get);
  EXPECT_EQ(testing::ParseJson(get.out).value("state", ""), "QUEUED");
  EXPECT_THAT(testing::ParseJson(get.out).value("waiting", ""),
              HasSubstr("is held by session sess-000001"));
  (*held)->Close();  // the session ends with its only rank: the devices are free
  testing::PollJob(*daemon_, job, testing::StateIs("SUCCEEDED"), std::chrono::seconds(120));
}

TEST_F(SessionJobsTest, SigtermEndsARunningSessionAndTheDaemonExits) {
  StartDaemon();
  const std::string graph = dir_.File("graph.yaml");
  std::ofstream(graph) << Graph();
  std::vector<std::unique_ptr<testing::Child>> ranks;
  for (int r = 0; r < 2; ++r) {
    std::vector<std::string> args = RankArgs(dir_.File("s-session.sock"), "stay", graph, r);
    args.insert(args.end(), {"--steps", "1", "--linger-s", "120"});
    ranks.push_back(testing::Child::Spawn(args, dir_.path()));
  }
  // Both ranks ran their step and linger with the session open.
  for (int i = 0;
       i < 600 && daemon_->Log().find("session sess-000001 started") == std::string::npos; ++i) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  absl::SleepFor(absl::Milliseconds(300));
  testing::RunResult stopped = daemon_->Terminate(std::chrono::seconds(60));
  EXPECT_EQ(stopped.exit_code, 0) << testing::Describe(stopped);
  EXPECT_THAT(stopped.err, HasSubstr("overlapd stopped"));
}

// The first session's steps as `overlapctl sessions --json` lists them, once
// they reach `steps` (or -1 after 60 s).
int64_t WaitForSteps(testing::Daemon& daemon, int64_t steps) {
  for (int i = 0; i < 600; ++i) {
    testing::RunResult listed = daemon.Ctl({"sessions", "--json"});
    if (listed.exit_code == 0) {
      const nlohmann::json json = testing::ParseJson(listed.out);
      if (json.contains("sessions") && !json["sessions"].empty()) {
        const nlohmann::json& first = json["sessions"][0];
        const nlohmann::json& value = first.value("steps", nlohmann::json(0));
        const int64_t now =
            value.is_string() ? std::stoll(value.get<std::string>()) : value.get<int64_t>();
        if (now >= steps) return now;
      }
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  return -1;
}

TEST_F(SessionJobsTest, AnOpenSessionIsInTheMetricsTopAndItsTrace) {
  const int port = testing::FreeLoopbackPort();
  ASSERT_GT(port, 0);
  StartDaemon({"--metrics-listen", "127.0.0.1:" + std::to_string(port)});
  const std::string graph = dir_.File("graph.yaml");
  std::ofstream(graph) << Graph();
  std::vector<std::unique_ptr<testing::Child>> ranks;
  for (int r = 0; r < 2; ++r) {
    std::vector<std::string> args = RankArgs(dir_.File("s-session.sock"), "seen", graph, r);
    args.insert(args.end(), {"--steps", "3", "--linger-s", "120"});
    ranks.push_back(testing::Child::Spawn(args, dir_.path()));
  }
  ASSERT_EQ(WaitForSteps(*daemon_, 3), 3) << daemon_->Log();
  const std::string labels =
      absl::StrCat("session=\"sess-000001\",name=\"seen\",owner=\"uid:", getuid(), "\"");

  const std::string metrics = testing::HttpGet(port, "/metrics");
  EXPECT_THAT(metrics,
              HasSubstr(absl::StrCat("overlapd_sessions_open{owner=\"uid:", getuid(), "\"} 1\n")));
  EXPECT_THAT(metrics, HasSubstr("overlapd_session_steps_total{" + labels + "} 3\n"));
  // Rank 0's device time of each of the three steps, in a summary.
  EXPECT_THAT(metrics,
              HasSubstr("overlapd_session_op_seconds_count{" + labels + ",op=\"fc1\"} 3\n"));
  EXPECT_THAT(metrics, HasSubstr("overlapd_session_op_seconds{" + labels +
                                 ",op=\"fc1\",quantile=\"0.5\"} "));
  EXPECT_THAT(metrics, HasSubstr("overlapd_session_lane_wait_seconds_total{" + labels +
                                 ",op=\"fc1\",lane=\"critical\"} 0\n"));
  // fc1's X (kM/2 x kK), W (kK x kN/2) and Y (kM x kN/2), fp32, and SIGNALS, on each rank.
  const int64_t mapped = 2 * (4 * (kM / 2 * kK + kK * kN / 2 + kM * kN / 2) + 16);
  EXPECT_THAT(metrics, HasSubstr(absl::StrCat("overlapd_session_mapped_bytes{", labels, "} ",
                                              mapped, "\n")));
  // A critical session has no deferred series.
  EXPECT_THAT(metrics, Not(HasSubstr("overlapd_session_deferred_over_bound_total{")));

  testing::RunResult top = daemon_->Ctl({"top", "--count", "1"});
  ASSERT_EQ(top.exit_code, 0) << testing::Describe(top);
  EXPECT_THAT(top.out, HasSubstr("SESSION"));
  EXPECT_THAT(top.out, HasSubstr("STEPS/S"));
  EXPECT_THAT(top.out, ::testing::ContainsRegex("sess-000001 +seen +[^ ]+ +critical +3 "));
  testing::RunResult top_json = daemon_->Ctl({"top", "--count", "1", "--json"});
  ASSERT_EQ(top_json.exit_code, 0) << testing::Describe(top_json);
  const nlohmann::json sample = testing::ParseJson(top_json.out);
  for (int device : {0, 1}) {
    const nlohmann::json& held = sample["devices"][device]["sessions"];
    ASSERT_EQ(held.size(), 1u) << sample.dump();
    EXPECT_EQ(held[0]["id"], "sess-000001");
    EXPECT_EQ(held[0]["rank"], device);
    EXPECT_EQ(held[0]["steps"], 3);
    EXPECT_GT(held[0]["step_ms"].get<double>(), 0);
  }
  EXPECT_TRUE(sample["devices"][2]["sessions"].empty());

  testing::RunResult traced = daemon_->Ctl({"sessions", "trace", "sess-000001"});
  ASSERT_EQ(traced.exit_code, 0) << testing::Describe(traced);
  const nlohmann::json trace = testing::ParseJson(traced.out);
  std::vector<uint64_t> steps;
  std::map<uint64_t, std::set<int>> devices_of_step;
  std::set<std::string> lanes;
  for (const nlohmann::json& event : trace["traceEvents"]) {
    if (event["ph"] == "M" && event["name"] == "thread_name") {
      lanes.insert(event["args"]["name"].get<std::string>());
    }
    if (event["ph"] != "X") continue;
    EXPECT_EQ(event["name"], "fc1");
    EXPECT_EQ(event["cat"], "critical");
    EXPECT_GE(event["dur"].get<double>(), 0);
    steps.push_back(event["args"]["step"].get<uint64_t>());
    devices_of_step[steps.back()].insert(event["pid"].get<int>());
  }
  EXPECT_TRUE(std::is_sorted(steps.begin(), steps.end()));
  EXPECT_EQ(steps.size(), 6u);  // three steps on two devices
  EXPECT_EQ(devices_of_step,
            (std::map<uint64_t, std::set<int>>{{1, {0, 1}}, {2, {0, 1}}, {3, {0, 1}}}));
  EXPECT_EQ(lanes, std::set<std::string>{"critical"});
  testing::RunResult last = daemon_->Ctl({"sessions", "trace", "sess-000001", "--steps", "1"});
  ASSERT_EQ(last.exit_code, 0) << testing::Describe(last);
  int last_spans = 0;
  const nlohmann::json last_trace = testing::ParseJson(last.out);
  for (const nlohmann::json& event : last_trace["traceEvents"]) {
    if (event["ph"] != "X") continue;
    EXPECT_EQ(event["args"]["step"], 3);
    ++last_spans;
  }
  EXPECT_EQ(last_spans, 2) << last.out;
  EXPECT_NE(daemon_->Ctl({"sessions", "trace", "sess-000009"}).exit_code, 0);

  // Once the session ends its series go.
  for (auto& rank : ranks) rank->Signal(SIGKILL);
  for (auto& rank : ranks) rank->Wait(std::chrono::seconds(30));
  std::string after;
  for (int i = 0; i < 300; ++i) {
    after = testing::HttpGet(port, "/metrics");
    if (after.find("overlapd_session_steps_total{") == std::string::npos) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_THAT(after, Not(HasSubstr("overlapd_session_steps_total{")));
  EXPECT_THAT(after, Not(HasSubstr("overlapd_sessions_open{")));
  EXPECT_THAT(after, HasSubstr("# TYPE overlapd_session_steps_total counter"));
}

}  // namespace
}  // namespace overlap
