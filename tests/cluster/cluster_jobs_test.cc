// The coordinator's side of ClusterJobs in-process, its peers played by a
// fake PeerLink: who may call what (each call only from the node it
// concerns), the checks of a part's owner, name and priority, the store's
// limits, the reservation race (a part that starts at once asks to hold
// before AdmitPart has returned its id) and its release, and the tables of
// the coordinator's phases and of its slots' phases.
#include "server/cluster/cluster_jobs.h"

#include <atomic>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/cluster/schedule_wire.h"
#include "tests/host_engine_util.h"

namespace overlap::cluster {
namespace {

using ::testing::HasSubstr;

constexpr char kSelf[] = "127.0.0.1:7001";
constexpr char kPeer[] = "127.0.0.1:7002";
constexpr char kStranger[] = "127.0.0.1:7009";

// A graph over the one peer: its devices, an all-reduce across them.
constexpr char kGraph[] = R"(name: race
iterations: 1
warmup: 0
ops:
  - {id: ar, type: all_reduce, m: 8, n: 8}
)";

peer::PeerCaller From(const std::string& node) {
  peer::PeerCaller caller;
  caller.node = node;
  return caller;
}

// Plays the peer: what AdmitPart does there is the test's `on_admit`.
class FakeLink : public PeerLink {
 public:
  std::function<absl::StatusOr<v1::AdmitPartResponse>(const v1::AdmitPartRequest&)> on_admit;

  absl::StatusOr<v1::HelloResponse> Hello(const std::string&, absl::Duration) override {
    return v1::HelloResponse();
  }
  absl::StatusOr<v1::AdmitPartResponse> AdmitPart(const std::string&,
                                                  const v1::AdmitPartRequest& request,
                                                  absl::Duration) override {
    // The coordinator checks its nodes before it reserves them.
    if (request.check_only()) {
      checks++;
      return v1::AdmitPartResponse();
    }
    return on_admit(request);
  }
  std::atomic<int> checks{0};
  absl::Status CancelPart(const std::string&, const v1::CancelPartRequest&,
                          absl::Duration) override {
    cancels++;
    return absl::OkStatus();
  }
  std::atomic<int> cancels{0};
  absl::StatusOr<v1::HoldPartResponse> HoldPart(const std::string&, const v1::HoldPartRequest&,
                                                absl::Duration) override {
    return absl::UnimplementedError("not a part here");
  }
  absl::Status ReportPart(const std::string&, const v1::ReportPartRequest&,
                          absl::Duration) override {
    return absl::OkStatus();
  }
  absl::Status StoreSet(const std::string&, const v1::StoreSetRequest&, absl::Duration) override {
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> StoreGet(const std::string&, const v1::StoreGetRequest&,
                                       absl::Duration) override {
    return std::string();
  }
};

class ClusterJobsTest : public ::testing::Test {
 protected:
  ClusterJobsTest()
      : engine_(CheckedHostEngine(2)), admission_(*engine_, jobs::AdmissionOptions()) {
    MakeCluster(absl::Seconds(10));
  }

  void MakeCluster(absl::Duration hold_timeout) {
    ClusterOptions options;
    options.node_name = kSelf;
    options.peers = {kPeer, kStranger};
    options.hold_timeout = hold_timeout;
    options.max_user_priority = 10;
    cluster_ = std::make_unique<ClusterJobs>(options, *engine_, admission_, link_);
  }

  // The coordinator's job over the peer, as the job queue would hand it over.
  static v1::Job CoordinatedJob() {
    v1::Job job;
    job.set_id("job-000007");
    job.set_name("race");
    job.set_spec(kGraph);
    job.add_nodes(kPeer);
    job.set_owner("uid:1000");
    return job;
  }

  static v1::GlobalJobId Id() {
    v1::GlobalJobId id;
    id.set_coordinator(kSelf);
    id.set_job_id("job-000007");
    return id;
  }

  // Runs the coordination on its own thread; the job's outcome lands in outcome_.
  void Coordinate() {
    runner_ = std::thread([this] {
      runner::RunHooks hooks;
      hooks.cancelled = [this] { return stop_.load(); };
      const v1::Job job = CoordinatedJob();
      absl::StatusOr<JobSpec> spec = admission_.Parse(job.spec(), job.id());
      absl::StatusOr<jobs::GraphPtr> graph =
          spec.ok()
              ? admission_.AdmitSpan(std::move(*spec), {job.nodes().begin(), job.nodes().end()})
              : spec.status();
      absl::StatusOr<v1::JobResult> result =
          graph.ok() ? cluster_->Run(job, *graph, hooks) : graph.status();
      absl::MutexLock lock(&mu_);
      outcome_ = result.status();
      done_ = true;
    });
  }

  absl::Status WaitOutcome() {
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(&done_), absl::Seconds(30));
    return outcome_;
  }

  void TearDown() override {
    stop_ = true;
    if (runner_.joinable()) runner_.join();
  }

  std::unique_ptr<engine::Engine> engine_;
  jobs::Admission admission_;
  FakeLink link_;
  std::unique_ptr<ClusterJobs> cluster_;
  std::thread runner_;
  std::atomic<bool> stop_{false};
  absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status outcome_ ABSL_GUARDED_BY(mu_);
};

// The part starts at once and asks to hold while the coordinator still waits
// for AdmitPart's answer: it must be told to wait, then to start, never to
// let go (which cost a whole hold timeout and a retry).
TEST_F(ClusterJobsTest, APartThatAsksBeforeItsIdIsRecordedWaitsAndStarts) {
  std::atomic<int> decision{-1};
  absl::Notification asked;
  std::thread part;
  link_.on_admit = [&](const v1::AdmitPartRequest& request) -> absl::StatusOr<v1::AdmitPartResponse> {
    part = std::thread([&, id = request.global_id()] {
      v1::HoldPartRequest hold;
      *hold.mutable_global_id() = id;
      hold.set_node_index(0);
      hold.set_part_id("job-000042");
      hold.set_wait_ms(3000);
      asked.Notify();
      absl::StatusOr<v1::HoldPartResponse> answer = cluster_->HoldPart(From(kPeer), hold);
      decision = answer.ok() ? answer->decision() : -2;
    });
    asked.WaitForNotification();
    absl::SleepFor(absl::Milliseconds(200));  // the hold arrives first
    v1::AdmitPartResponse response;
    response.set_part_id("job-000042");
    return response;
  };
  const absl::Time start = absl::Now();
  Coordinate();
  // Once started, the part fails on purpose: the coordination ends with its report.
  for (int i = 0; i < 300 && decision.load() < 0; ++i) absl::SleepFor(absl::Milliseconds(10));
  part.join();
  EXPECT_EQ(decision.load(), v1::HoldPartResponse::START);
  v1::ReportPartRequest report;
  *report.mutable_global_id() = Id();
  report.set_node_index(0);
  report.set_part_id("job-000042");
  report.set_error_code(static_cast<int>(absl::StatusCode::kAborted));
  report.set_error("the test ends here");
  ASSERT_TRUE(cluster_->ReportPart(From(kPeer), report).ok());
  const absl::Status outcome = WaitOutcome();
  EXPECT_THAT(std::string(outcome.message()), HasSubstr("the test ends here"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5)) << "the reservation was released and retried";
}

// A part that does not hold in time frees its slot: the coordinator cancels
// it, tells it to let go when it asks, and reserves the node again with a
// new part, which starts.
TEST_F(ClusterJobsTest, ASlotNotHeldInTimeIsReleasedAndReservedAgain) {
  MakeCluster(absl::Seconds(1));
  std::atomic<int> admits{0};
  std::atomic<int> second_decision{-1};
  std::thread second;
  link_.on_admit =
      [&](const v1::AdmitPartRequest& request) -> absl::StatusOr<v1::AdmitPartResponse> {
    const int attempt = ++admits;
    v1::AdmitPartResponse response;
    response.set_part_id(absl::StrCat("job-10", attempt));
    if (attempt == 2) {  // the second part starts at once
      second = std::thread([&, id = request.global_id()] {
        v1::HoldPartRequest hold;
        *hold.mutable_global_id() = id;
        hold.set_node_index(0);
        hold.set_part_id("job-102");
        hold.set_wait_ms(5000);
        absl::StatusOr<v1::HoldPartResponse> answer = cluster_->HoldPart(From(kPeer), hold);
        second_decision = answer.ok() ? answer->decision() : -2;
      });
    }
    return response;
  };
  Coordinate();
  for (int i = 0; i < 2000 && second_decision.load() < 0; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  if (second.joinable()) second.join();
  EXPECT_EQ(second_decision.load(), v1::HoldPartResponse::START);
  EXPECT_EQ(admits.load(), 2);
  EXPECT_GE(link_.cancels.load(), 1) << "the first part was not cancelled";
  v1::HoldPartRequest late;
  *late.mutable_global_id() = Id();
  late.set_node_index(0);
  late.set_part_id("job-101");
  late.set_wait_ms(0);
  absl::StatusOr<v1::HoldPartResponse> first = cluster_->HoldPart(From(kPeer), late);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->decision(), v1::HoldPartResponse::RELEASE);
  v1::ReportPartRequest report;
  *report.mutable_global_id() = Id();
  report.set_node_index(0);
  report.set_part_id("job-102");
  report.set_error_code(static_cast<int>(absl::StatusCode::kAborted));
  report.set_error("the test ends here");
  ASSERT_TRUE(cluster_->ReportPart(From(kPeer), report).ok());
  EXPECT_THAT(std::string(WaitOutcome().message()), HasSubstr("the test ends here"));
}

// The coordinator decides every op's schedule and sends it with the part:
// the part has nothing left to choose.
TEST_F(ClusterJobsTest, TheCoordinatorSendsEveryOpsScheduleWithThePart) {
  absl::Mutex sent_mu;
  std::vector<v1::AdmitPartRequest> sent;
  link_.on_admit = [&](const v1::AdmitPartRequest& request) -> absl::StatusOr<v1::AdmitPartResponse> {
    absl::MutexLock lock(&sent_mu);
    sent.push_back(request);
    return absl::FailedPreconditionError("the test ends here");
  };
  Coordinate();
  EXPECT_THAT(std::string(WaitOutcome().message()), HasSubstr("the test ends here"));
  EXPECT_EQ(link_.checks.load(), 1) << "the coordinator checks its nodes before it reserves";
  absl::MutexLock lock(&sent_mu);
  ASSERT_EQ(sent.size(), 1u);
  ASSERT_EQ(sent[0].schedules_size(), 1);
  EXPECT_EQ(sent[0].schedules(0).op_id(), "ar");
  EXPECT_EQ(sent[0].schedules(0).mode(), "serial");
  EXPECT_EQ(sent[0].schedules(0).transport(), "nccl");
  EXPECT_EQ(sent[0].schedules(0).chunks(), 1);
  EXPECT_EQ(sent[0].schedules(0).algorithm(), "default");
}

// Hold, report and the store, each from a node other than the one it
// concerns: PERMISSION_DENIED, and nothing changes.
TEST_F(ClusterJobsTest, OnlyTheNodeACallConcernsMayMakeIt) {
  absl::Notification admitted;
  link_.on_admit = [&](const v1::AdmitPartRequest&) -> absl::StatusOr<v1::AdmitPartResponse> {
    v1::AdmitPartResponse response;
    response.set_part_id("job-000042");
    admitted.Notify();
    return response;
  };
  Coordinate();
  ASSERT_TRUE(admitted.WaitForNotificationWithTimeout(absl::Seconds(10)));

  v1::HoldPartRequest hold;
  *hold.mutable_global_id() = Id();
  hold.set_part_id("job-000042");
  hold.set_wait_ms(0);
  absl::StatusOr<v1::HoldPartResponse> held = cluster_->HoldPart(From(kStranger), hold);
  EXPECT_EQ(held.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(held.status().message()),
              HasSubstr("node 127.0.0.1:7009 may not hold the part of node 0 (127.0.0.1:7002)"));

  v1::ReportPartRequest report;
  *report.mutable_global_id() = Id();
  report.set_part_id("job-000042");
  report.set_error_code(static_cast<int>(absl::StatusCode::kInternal));
  report.set_error("forged");
  EXPECT_EQ(cluster_->ReportPart(From(kStranger), report).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(cluster_->ReportPart(From(kSelf), report).code(), absl::StatusCode::kPermissionDenied);
  report.set_node_index(5);
  EXPECT_EQ(cluster_->ReportPart(From(kPeer), report).code(), absl::StatusCode::kInvalidArgument);

  v1::StoreSetRequest set;
  *set.mutable_global_id() = Id();
  set.set_key("rank_0");
  set.set_value("addr");
  EXPECT_EQ(cluster_->StoreSet(From(kStranger), set).code(), absl::StatusCode::kPermissionDenied);
  v1::StoreGetRequest get;
  *get.mutable_global_id() = Id();
  get.set_key("rank_0");
  get.set_timeout_ms(0);
  EXPECT_EQ(cluster_->StoreGet(From(kStranger), get).status().code(),
            absl::StatusCode::kPermissionDenied);
  // Nothing was set by the stranger; the job's node sets and reads.
  EXPECT_EQ(cluster_->StoreGet(From(kPeer), get).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(cluster_->StoreSet(From(kPeer), set).ok());
  EXPECT_EQ(cluster_->StoreGet(From(kPeer), get).value_or(""), "addr");

  // The store's limits: a value past 4 MiB, a key past 256 bytes.
  set.set_value(std::string((4 << 20) + 1, 'x'));
  EXPECT_EQ(cluster_->StoreSet(From(kPeer), set).code(), absl::StatusCode::kResourceExhausted);
  set.set_key(std::string(300, 'k'));
  set.set_value("v");
  EXPECT_EQ(cluster_->StoreSet(From(kPeer), set).code(), absl::StatusCode::kInvalidArgument);
  // 64 MiB in all.
  set.set_value(std::string(4 << 20, 'x'));
  absl::Status last;
  for (int i = 0; i < 20 && last.ok(); ++i) {
    set.set_key(absl::StrCat("big_", i));
    last = cluster_->StoreSet(From(kPeer), set);
  }
  EXPECT_EQ(last.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(last.message()), HasSubstr("over its 67108864"));

  // The real part's report ends the job.
  report.set_node_index(0);
  report.set_error("the test ends here");
  report.set_error_code(static_cast<int>(absl::StatusCode::kAborted));
  ASSERT_TRUE(cluster_->ReportPart(From(kPeer), report).ok());
  EXPECT_THAT(std::string(WaitOutcome().message()), HasSubstr("the test ends here"));
}

// A part is admitted and cancelled only by its job's coordinator, and its
// owner, name and priority meet the rules a user's job meets.
TEST_F(ClusterJobsTest, APartIsAdmittedOnlyFromItsCoordinatorAndWithinTheRules) {
  v1::AdmitPartRequest request;
  request.mutable_global_id()->set_coordinator(kPeer);
  request.mutable_global_id()->set_job_id("job-000001");
  request.set_spec(kGraph);
  request.add_nodes(kPeer);
  request.add_nodes(kSelf);
  request.set_node_index(1);
  request.set_owner("uid:1000");
  request.set_name("mlp");
  request.set_priority(3);
  AddDecidedSchedules({{"ar", ops::Schedule{OverlapMode::kSerial, 1, Transport::kNccl}}}, nullptr, request);
  struct Case {
    std::string what;
    std::string caller;
    std::function<void(v1::AdmitPartRequest&)> change;
    absl::StatusCode code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"another node as the coordinator", kStranger, [](v1::AdmitPartRequest&) {},
       absl::StatusCode::kPermissionDenied,
       "node 127.0.0.1:7009 may not admit a part of a job coordinated by 127.0.0.1:7002"},
      {"a coordinator not in peers", "127.0.0.1:7777",
       [](v1::AdmitPartRequest& r) { r.mutable_global_id()->set_coordinator("127.0.0.1:7777"); },
       absl::StatusCode::kPermissionDenied, "is not in the peers: of 127.0.0.1:7001"},
      {"a priority above max_user_priority", kPeer,
       [](v1::AdmitPartRequest& r) { r.set_priority(2147483647); },
       absl::StatusCode::kPermissionDenied, "priority: 2147483647 is above 10"},
      {"an escape in the name", kPeer, [](v1::AdmitPartRequest& r) { r.set_name("x\x1b[2Jy"); },
       absl::StatusCode::kInvalidArgument, "name: must not hold control characters"},
      {"a bidi override in the name", kPeer,
       [](v1::AdmitPartRequest& r) { r.set_name("job \xe2\x80\xae" "1-boj"); },
       absl::StatusCode::kInvalidArgument, "name: must not hold control characters"},
      {"a newline in the owner", kPeer,
       [](v1::AdmitPartRequest& r) { r.set_owner("uid:0\nuid:1"); },
       absl::StatusCode::kInvalidArgument, "owner: must not hold control characters"},
      {"no owner", kPeer, [](v1::AdmitPartRequest& r) { r.clear_owner(); },
       absl::StatusCode::kInvalidArgument, "owner: must not be empty"},
      {"the spec `,\"`", kPeer, [](v1::AdmitPartRequest& r) { r.set_spec(",\""); },
       absl::StatusCode::kInvalidArgument, "malformed YAML/JSON at line 1, column 1"},
      {"no schedules", kPeer, [](v1::AdmitPartRequest& r) { r.clear_schedules(); },
       absl::StatusCode::kInvalidArgument, "schedules: none was decided for op ar"},
      {"a schedule that is no schedule", kPeer,
       [](v1::AdmitPartRequest& r) { r.mutable_schedules(0)->set_mode("auto"); },
       absl::StatusCode::kInvalidArgument, "schedules: op \"ar\": auto is a choice left open"},
      {"a schedule this node would not run across daemons", kPeer,
       [](v1::AdmitPartRequest& r) { r.mutable_schedules(0)->set_transport("p2p"); },
       absl::StatusCode::kFailedPrecondition, "the coordinator decided serial/p2p"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    v1::AdmitPartRequest changed = request;
    c.change(changed);
    const absl::Time start = absl::Now();
    absl::StatusOr<v1::AdmitPartResponse> admitted = cluster_->AdmitPart(From(c.caller), changed);
    EXPECT_EQ(admitted.status().code(), c.code);
    EXPECT_THAT(std::string(admitted.status().message()), HasSubstr(c.message));
    EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << "refused without waiting on anything";
  }
  // An admin's part may ask for more; the rest of the request is fine.
  v1::AdmitPartRequest admin = request;
  admin.set_priority(50);
  admin.set_owner_admin(true);
  const absl::StatusOr<v1::AdmitPartResponse> checked = cluster_->AdmitPart(From(kPeer), admin);
  // No queue here: everything before it passed.
  EXPECT_EQ(checked.status().code(), absl::StatusCode::kUnavailable);

  v1::CancelPartRequest cancel;
  *cancel.mutable_global_id() = request.global_id();
  EXPECT_EQ(cluster_->CancelPart(From(kStranger), cancel).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(cluster_->CancelPart(From(kPeer), cancel).code(), absl::StatusCode::kNotFound);
}

// The coordinator's states and the only moves between them.
TEST(CoordinatorPhaseTest, EveryMoveTheTableAllowsAndNoOther) {
  using P = CoordinatorPhase;
  const std::vector<P> all = {P::kChecking, P::kReserving, P::kReleasing, P::kHolding,
                              P::kRunning,  P::kReporting, P::kEnded};
  std::set<std::pair<std::string, std::string>> allowed;
  for (P from : all) {
    for (P to : all) {
      if (CoordinatorMayMove(from, to)) {
        allowed.insert({CoordinatorPhaseName(from), CoordinatorPhaseName(to)});
      }
    }
  }
  const std::set<std::pair<std::string, std::string>> expected = {
      {"checking", "reserving"}, {"reserving", "holding"},  {"reserving", "releasing"},
      {"releasing", "reserving"}, {"holding", "running"},   {"running", "reporting"},
      {"checking", "ended"},      {"reserving", "ended"},   {"releasing", "ended"},
      {"holding", "ended"},       {"running", "ended"},     {"reporting", "ended"},
  };
  EXPECT_EQ(allowed, expected);
}

// A node's slot and the only moves between its phases: forward one step (a
// part may end before it held), back to idle from anywhere but idle.
TEST(CoordinatorSlotTest, EveryMoveTheTableAllowsAndNoOther) {
  using S = SlotPhase;
  const std::vector<S> all = {S::kIdle, S::kAdmitting, S::kAdmitted, S::kHeld, S::kReported};
  std::set<std::pair<std::string, std::string>> allowed;
  for (S from : all) {
    for (S to : all) {
      if (SlotMayMove(from, to)) allowed.insert({SlotPhaseName(from), SlotPhaseName(to)});
    }
  }
  const std::set<std::pair<std::string, std::string>> expected = {
      {"idle", "admitting"},    {"admitting", "admitted"}, {"admitted", "held"},
      {"admitted", "reported"}, {"held", "reported"},      {"admitting", "idle"},
      {"admitted", "idle"},     {"held", "idle"},          {"reported", "idle"},
  };
  EXPECT_EQ(allowed, expected);
}

}  // namespace
}  // namespace overlap::cluster
