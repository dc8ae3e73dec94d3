// Jobs on the session lanes, through the real overlapd binary on the host
// backend: a deferred-class job with deferred all-reduces (scheduler: dynamic)
// runs beside a critical session stepping on the same devices, both verified
// against float64, and the node's lanes it shared are read back from
// ListSessions (device_lanes) and `overlapctl sessions --lanes`; a
// critical-class job still waits for the session and says why.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "client/session/overlapd_session.h"
#include "common/dtype.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "overlap/v1/overlap.grpc.pb.h"
#include "tests/integration/harness.h"

namespace overlap {
namespace {

using session::Session;
using session::SharedBuffer;
using session::Tensor;
using session::TensorNeed;
using ::testing::HasSubstr;

constexpr int64_t kM = 64, kK = 32, kN = 48;
constexpr uint64_t kSeed = 4242;

// A critical session of two ranks on devices 0 and 1: fc1's all-gather is
// critical work on both while pending.
std::string SessionGraph() {
  return absl::StrCat(
      "name: crit\ndtype: fp32\ndevices: [0, 1]\nops:\n  - {id: fc1, type: ag_gemm, m: ", kM,
      ", k: ", kK, ", n: ", kN, "}\n");
}

// A deferred-class backward of two layers on every device (tp 2 x dp 2):
// its gradient all-reduces go chunk by chunk on the deferred lane, with a
// bound long enough that none needs to go beside critical work.
constexpr char kDeferredJob[] = R"(name: grads
dtype: f32
iterations: 3
warmup: 1
mesh: {tp: 2, dp: 2}
scheduler: dynamic
priority_class: deferred
chunk_kib: 16
bucket_mib: 0
defer_bound_ms: 30000
ops:
  - {id: fc2_dgrad, type: ag_gemm, m: 128, k: 128, n: 256, mode: serial, transport: nccl}
  - {id: fc2_wgrad, type: gemm, m: 128, k: 128, n: 256, after: [fc2_dgrad]}
  - {id: fc1_dgrad, type: gemm_rs, m: 128, k: 512, n: 128, mode: serial, transport: nccl, after: [fc2_dgrad]}
  - {id: fc1_wgrad, type: gemm, m: 128, k: 128, n: 512, after: [fc1_dgrad]}
  - {id: fc2_grads, type: all_reduce, m: 128, n: 128, group: dp, transport: nccl, input: fc2_wgrad}
  - {id: fc1_grads, type: all_reduce, m: 128, n: 256, group: dp, transport: nccl, input: fc1_wgrad}
)";

// When the ranks stop: both post fc1 the same number of times (a command runs
// once every rank posted it), then close only once both are done, so that
// neither ends the session under the other's last step.
class Steps {
 public:
  // Whether `rank` may post its step `index` (0-based); counts it posted.
  bool MayPost(int rank, int64_t index) {
    absl::MutexLock lock(&mu_);
    if (index >= limit_) return false;
    posted_[rank] = index + 1;
    return true;
  }
  // No rank posts past what the furthest has posted.
  void Stop() {
    absl::MutexLock lock(&mu_);
    limit_ = std::max(posted_[0], posted_[1]);
  }
  // Waits (at most `timeout`) until both ranks are done stepping.
  void Done(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    ++done_;
    mu_.AwaitWithTimeout(absl::Condition(
                             +[](int* done) { return *done >= 2; }, &done_),
                         timeout);
  }

 private:
  absl::Mutex mu_;
  int64_t limit_ ABSL_GUARDED_BY(mu_) = 200000;  // a job that never runs cannot keep them forever
  int64_t posted_[2] ABSL_GUARDED_BY(mu_) = {0, 0};
  int done_ ABSL_GUARDED_BY(mu_) = 0;
};

// One rank stepping fc1 until told to stop; what it saw.
struct RankRun {
  absl::Status status;
  int64_t steps = 0;
  std::vector<float> y;  // fc1's Y after the last step
};

void StepRank(const std::string& socket, int rank, Steps& steps, std::atomic<int>& started,
              RankRun* out) {
  auto s = Session::Open(socket, "crit", SessionGraph(), rank);
  if (!s.ok()) {
    out->status = s.status();
    return;
  }
  std::map<Tensor, SharedBuffer> buffers;
  for (const TensorNeed& need : (*s)->needs()) {
    absl::StatusOr<SharedBuffer> buffer = SharedBuffer::Create(static_cast<size_t>(need.bytes));
    if (!buffer.ok()) {
      out->status = buffer.status();
      return;
    }
    if (need.tensor == Tensor::kX || need.tensor == Tensor::kW) {
      const uint64_t seed = session::TensorSeed(kSeed, need.op, need.tensor, rank);
      for (int64_t i = 0; i < need.rows * need.cols; ++i) {
        StoreFromFloat(buffer->data(), DType::kF32, static_cast<size_t>(i),
                       SeededValue(seed, static_cast<uint64_t>(i)));
      }
    }
    out->status = (*s)->Register(need.op, need.tensor, buffer->fd(), 0, need.bytes, buffer->data());
    if (!out->status.ok()) return;
    buffers.emplace(need.tensor, *std::move(buffer));
  }
  out->status = (*s)->Start();
  if (!out->status.ok()) return;
  ++started;
  for (int64_t i = 0; steps.MayPost(rank, i); ++i) {
    absl::StatusOr<uint64_t> seq = (*s)->Post("fc1");
    out->status = seq.status();
    if (seq.ok()) out->status = (*s)->Wait(*seq, absl::Seconds(60));
    if (!out->status.ok()) break;
    ++out->steps;
  }
  steps.Done(absl::Seconds(120));
  if (!out->status.ok()) return;
  const SharedBuffer& y = buffers.at(Tensor::kY);
  out->y.resize(y.size() / sizeof(float));
  for (size_t i = 0; i < out->y.size(); ++i) {
    out->y[i] = LoadAsFloat(y.data(), DType::kF32, i);
  }
}

// The largest error of rank r's fc1 Y (kM x kN/2, the all-gathered X times
// its W columns) against float64.
double WorstError(const std::vector<float>& y, int r) {
  auto value = [](Tensor tensor, int rank, int64_t i) {
    return static_cast<double>(
        SeededValue(session::TensorSeed(kSeed, "fc1", tensor, rank), static_cast<uint64_t>(i)));
  };
  double worst = 0;
  for (int64_t row = 0; row < kM; ++row) {
    for (int64_t col = 0; col < kN / 2; ++col) {
      double expected = 0;
      for (int64_t k = 0; k < kK; ++k) {
        expected += value(Tensor::kX, static_cast<int>(row / (kM / 2)), (row % (kM / 2)) * kK + k) *
                    value(Tensor::kW, r, k * (kN / 2) + col);
      }
      worst = std::max(worst, std::abs(expected - y[row * (kN / 2) + col]));
    }
  }
  return worst;
}

class LanesJobsTest : public testing::DaemonTest {
 protected:
  v1::ListSessionsResponse ListSessions() {
    auto channel = grpc::CreateChannel(daemon_->address(), grpc::InsecureChannelCredentials());
    auto node = v1::Node::NewStub(channel);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::ListSessionsRequest request;
    request.set_lanes(true);
    v1::ListSessionsResponse response;
    const grpc::Status status = node->ListSessions(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response;
  }
};

const v1::LaneUserFigures& User(const v1::DeviceLaneState& device, const std::string& user) {
  for (const v1::LaneUserFigures& u : device.users()) {
    if (u.user() == user) return u;
  }
  static const v1::LaneUserFigures none;
  ADD_FAILURE() << "no " << user << " figures on device " << device.device();
  return none;
}

TEST_F(LanesJobsTest, ADeferredJobSharesTheLanesOfACriticalSessionOnItsDevices) {
  StartDaemon();
  const std::string socket = dir_.File("s-session.sock");
  Steps steps;
  std::atomic<int> started{0};
  RankRun runs[2];
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back(StepRank, socket, r, std::ref(steps), std::ref(started), &runs[r]);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (started.load() < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (started.load() < 2) {
    steps.Stop();
    for (std::thread& t : ranks) t.join();
    FAIL() << "the session did not start: " << runs[0].status << "; " << runs[1].status;
  }

  const std::string graph = dir_.File("grads.yaml");
  testing::WriteFileOrDie(graph, kDeferredJob);
  const std::string job = Submit(graph);
  const nlohmann::json done =
      testing::PollJob(*daemon_, job, testing::StateIs("SUCCEEDED"), std::chrono::seconds(300));
  steps.Stop();
  for (std::thread& t : ranks) t.join();

  // It ran while the session held its devices: never waited for it.
  EXPECT_EQ(done.value("waiting", ""), "");
  for (const nlohmann::json& op : done["result"]["ops"]) {
    EXPECT_TRUE(op["verified"].get<bool>()) << op.dump();
  }
  ASSERT_EQ(done["result"]["layer_chains"].size(), 2u) << done.dump();
  for (const nlohmann::json& c : done["result"]["layer_chains"]) {
    EXPECT_LE(c["max_rel_error"].get<double>(), c["tolerance"].get<double>()) << c.dump();
  }
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE(runs[r].status.ok()) << "rank " << r << ": " << runs[r].status;
    EXPECT_GT(runs[r].steps, 0);
    ASSERT_EQ(runs[r].y.size(), static_cast<size_t>(kM * kN / 2));
    EXPECT_LT(WorstError(runs[r].y, r), 1e-4) << "rank " << r;
  }

  const v1::ListSessionsResponse listed = ListSessions();
  ASSERT_EQ(listed.device_lanes_size(), 4) << listed.DebugString();
  for (int d = 0; d < 2; ++d) {
    const v1::DeviceLaneState& device = listed.device_lanes(d);
    SCOPED_TRACE(absl::StrCat("device ", d));
    const v1::LaneUserFigures& session = User(device, "session");
    const v1::LaneUserFigures& jobs = User(device, "job");
    EXPECT_GT(session.critical_issued(), 0);
    EXPECT_GT(jobs.deferred_sent(), 0);
    // Its chunks waited for the session's critical work (none of its own pending there).
    EXPECT_GT(jobs.deferred_yielded_to_other(), 0);
    // The bound (30 s) never came near: no chunk went beside critical work.
    EXPECT_EQ(jobs.deferred_over_bound(), 0);
    EXPECT_EQ(jobs.critical_pending(), 0);
    EXPECT_EQ(session.critical_pending(), 0);
  }
  testing::RunResult lanes = daemon_->Ctl({"sessions", "--lanes"});
  ASSERT_EQ(lanes.exit_code, 0) << testing::Describe(lanes);
  EXPECT_THAT(lanes.out, HasSubstr("CRITICAL_PENDING"));
  EXPECT_THAT(lanes.out, HasSubstr("OVER_BOUND"));
}

// Devices 0 and 1 held by a session's first rank: a deferred-class job starts
// beside it; a critical one waits and says why.
TEST_F(LanesJobsTest, ACriticalJobStillWaitsForTheSessionAndSaysWhy) {
  StartDaemon();
  auto held = Session::Open(dir_.File("s-session.sock"), "hold", SessionGraph(), 0);
  ASSERT_TRUE(held.ok()) << held.status();
  const std::string deferred_graph = dir_.File("deferred.yaml");
  testing::WriteFileOrDie(deferred_graph,
                          absl::StrCat("priority_class: deferred\n", testing::kSmallGraph));
  const std::string deferred = Submit(deferred_graph);
  const nlohmann::json ran = testing::PollJob(*daemon_, deferred, testing::StateIs("SUCCEEDED"),
                                              std::chrono::seconds(300));
  EXPECT_EQ(ran.value("priority_class", ""), "DEFERRED");

  const std::string critical = Submit(small_graph_);
  const nlohmann::json queued = testing::PollJob(
      *daemon_, critical, [](const nlohmann::json& j) { return !j.value("waiting", "").empty(); },
      std::chrono::seconds(30));
  EXPECT_EQ(queued.value("state", ""), "QUEUED");
  EXPECT_EQ(queued.value("priority_class", ""), "CRITICAL");
  EXPECT_EQ(queued.value("waiting", ""), "device 0 is held by session sess-000001");
  testing::RunResult get = daemon_->Ctl({"get", critical});
  ASSERT_EQ(get.exit_code, 0) << testing::Describe(get);
  EXPECT_THAT(get.out, HasSubstr("waiting:   device 0 is held by session sess-000001"));

  (*held)->Close();
  testing::PollJob(*daemon_, critical, testing::StateIs("SUCCEEDED"), std::chrono::seconds(300));
}

}  // namespace
}  // namespace overlap
