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
class FakeLink : public peer::PeerLink {
 public:
  std::function<absl::StatusOr<std::string>(const peer::PartRequest&)> on_admit;

  absl::Status Hello(const std::string&, absl::Duration) override { return absl::OkStatus(); }
  absl::StatusOr<std::string> AdmitPart(const std::string&, const peer::PartRequest& request,
                                        absl::Duration) override {
    // The coordinator checks its nodes before it reserves them.
    if (request.check_only) {
      checks++;
      return std::string();
    }
    return on_admit(request);
  }
  std::atomic<int> checks{0};
  // What CancelPart answers: OK (the part ended there) unless the test says otherwise.
  std::function<absl::Status()> on_cancel;
  absl::Status CancelPart(const std::string&, const peer::CancelRequest&, absl::Duration) override {
    cancels++;
    return on_cancel ? on_cancel() : absl::OkStatus();
  }
  std::atomic<int> cancels{0};
  absl::StatusOr<peer::HoldAnswer> HoldPart(const std::string&, const peer::HoldRequest&,
                                            absl::Duration) override {
    return absl::UnimplementedError("not a part here");
  }
  absl::Status ReportPart(const std::string&, const peer::PartReport&, absl::Duration) override {
    return absl::OkStatus();
  }
  absl::Status StoreSet(const std::string&, const peer::StoreCall&, absl::Duration) override {
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> StoreGet(const std::string&, const peer::StoreCall&,
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
  static jobs::JobRecord CoordinatedJob() {
    jobs::JobRecord job;
    job.id = "job-000007";
    job.name = "race";
    job.spec = kGraph;
    job.nodes = {kPeer};
    job.owner = "uid:1000";
    return job;
  }

  static peer::GlobalJobId Id() { return peer::GlobalJobId{kSelf, "job-000007"}; }

  // Node 0's part `part_id` ended with `code` and the test's message.
  static peer::PartReport Failed(const std::string& part_id, absl::StatusCode code) {
    return peer::PartReport{Id(), 0, part_id, absl::Status(code, "the test ends here")};
  }
  static int Decision(const absl::StatusOr<peer::HoldAnswer>& answer) {
    return answer.ok() ? static_cast<int>(answer->decision) : -2;
  }
  static constexpr int kStart = static_cast<int>(peer::HoldDecision::kStart);

  // Runs the coordination on its own thread; the job's outcome lands in outcome_.
  void Coordinate() {
    runner_ = std::thread([this] {
      runner::RunHooks hooks;
      hooks.cancelled = [this] { return stop_.load(); };
      const jobs::JobRecord job = CoordinatedJob();
      absl::StatusOr<JobSpec> spec = admission_.Parse(job.spec, job.id);
      absl::StatusOr<jobs::GraphPtr> graph =
          spec.ok() ? admission_.AdmitSpan(std::move(*spec), job.nodes) : spec.status();
      absl::StatusOr<runner::JobReport> result =
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
  link_.on_admit = [&](const peer::PartRequest& request) -> absl::StatusOr<std::string> {
    part = std::thread([&, id = request.global_id] {
      const peer::HoldRequest hold{id, 0, "job-000042", absl::Seconds(3)};
      asked.Notify();
      decision = Decision(cluster_->HoldPart(From(kPeer), hold));
    });
    asked.WaitForNotification();
    absl::SleepFor(absl::Milliseconds(200));  // the hold arrives first
    return std::string("job-000042");
  };
  const absl::Time start = absl::Now();
  Coordinate();
  // Once started, the part fails on purpose: the coordination ends with its report.
  for (int i = 0; i < 300 && decision.load() < 0; ++i) absl::SleepFor(absl::Milliseconds(10));
  part.join();
  EXPECT_EQ(decision.load(), kStart);
  ASSERT_TRUE(
      cluster_->ReportPart(From(kPeer), Failed("job-000042", absl::StatusCode::kAborted)).ok());
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
  link_.on_admit = [&](const peer::PartRequest& request) -> absl::StatusOr<std::string> {
    const int attempt = ++admits;
    if (attempt == 2) {  // the second part starts at once
      second = std::thread([&, id = request.global_id] {
        const peer::HoldRequest hold{id, 0, "job-102", absl::Seconds(5)};
        second_decision = Decision(cluster_->HoldPart(From(kPeer), hold));
      });
    }
    return absl::StrCat("job-10", attempt);
  };
  Coordinate();
  for (int i = 0; i < 2000 && second_decision.load() < 0; ++i) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  if (second.joinable()) second.join();
  EXPECT_EQ(second_decision.load(), kStart);
  EXPECT_EQ(admits.load(), 2);
  EXPECT_GE(link_.cancels.load(), 1) << "the first part was not cancelled";
  const peer::HoldRequest late{Id(), 0, "job-101", absl::ZeroDuration()};
  absl::StatusOr<peer::HoldAnswer> first = cluster_->HoldPart(From(kPeer), late);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->decision, peer::HoldDecision::kRelease);
  ASSERT_TRUE(
      cluster_->ReportPart(From(kPeer), Failed("job-102", absl::StatusCode::kAborted)).ok());
  EXPECT_THAT(std::string(WaitOutcome().message()), HasSubstr("the test ends here"));
}

// The coordinator decides every op's schedule and sends it with the part:
// the part has nothing left to choose.
TEST_F(ClusterJobsTest, TheCoordinatorSendsEveryOpsScheduleWithThePart) {
  absl::Mutex sent_mu;
  std::vector<peer::PartRequest> sent;
  link_.on_admit = [&](const peer::PartRequest& request) -> absl::StatusOr<std::string> {
    absl::MutexLock lock(&sent_mu);
    sent.push_back(request);
    return absl::FailedPreconditionError("the test ends here");
  };
  Coordinate();
  EXPECT_THAT(std::string(WaitOutcome().message()), HasSubstr("the test ends here"));
  EXPECT_EQ(link_.checks.load(), 1) << "the coordinator checks its nodes before it reserves";
  absl::MutexLock lock(&sent_mu);
  ASSERT_EQ(sent.size(), 1u);
  ASSERT_EQ(sent[0].schedules.size(), 1u);
  ASSERT_EQ(sent[0].schedules.count("ar"), 1u);
  const ops::Schedule& ar = sent[0].schedules.at("ar");
  EXPECT_EQ(ar.mode, OverlapMode::kSerial);
  EXPECT_EQ(ar.transport, Transport::kNccl);
  EXPECT_EQ(ar.chunks, 1);
  EXPECT_EQ(ar.algorithm, AllReduceAlgorithm::kDefault);
}

// A cancelled job ends once every part confirmed its end; a node that did not
// is named in the job's error, with what it answered.
TEST_F(ClusterJobsTest, ACancelNamesTheNodeThatDidNotConfirmItsPartEnded) {
  absl::Notification admitted;
  link_.on_admit = [&](const peer::PartRequest&) -> absl::StatusOr<std::string> {
    admitted.Notify();
    return std::string("job-000042");
  };
  link_.on_cancel = [] {
    return absl::DeadlineExceededError("part job-000042 was still running 8 s after it was told");
  };
  Coordinate();
  ASSERT_TRUE(admitted.WaitForNotificationWithTimeout(absl::Seconds(10)));
  stop_ = true;
  const absl::Status outcome = WaitOutcome();
  EXPECT_EQ(outcome.code(), absl::StatusCode::kCancelled) << outcome;
  EXPECT_THAT(std::string(outcome.message()),
              HasSubstr("not confirmed ended: node 127.0.0.1:7002: part job-000042 was still "
                        "running"));
  EXPECT_EQ(link_.cancels.load(), 1);
}

// A global id names the coordinator's own job by its id here; anything else
// with no '/' in it is no global id.
TEST_F(ClusterJobsTest, AGlobalIdOfThisNodeNamesItsOwnJob) {
  EXPECT_EQ(cluster_->LocalJobId(absl::StrCat(kSelf, "/job-000007")).value_or(""), "job-000007");
  EXPECT_EQ(cluster_->LocalJobId("job-000007").status().code(), absl::StatusCode::kInvalidArgument);
  jobs::JobRecord part = CoordinatedJob();
  part.coordinator = kPeer;
  part.global_job_id = "job-000003";
  EXPECT_EQ(jobs::GlobalIdOf(part, kSelf), absl::StrCat(kPeer, "/job-000003"));
  EXPECT_EQ(jobs::GlobalIdOf(CoordinatedJob(), kSelf), absl::StrCat(kSelf, "/job-000007"));
  jobs::JobRecord local;
  local.id = "job-000001";
  EXPECT_EQ(jobs::GlobalIdOf(local, kSelf), "");
}

// Hold, report and the store, each from a node other than the one it
// concerns: PERMISSION_DENIED, and nothing changes.
TEST_F(ClusterJobsTest, OnlyTheNodeACallConcernsMayMakeIt) {
  absl::Notification admitted;
  link_.on_admit = [&](const peer::PartRequest&) -> absl::StatusOr<std::string> {
    admitted.Notify();
    return std::string("job-000042");
  };
  Coordinate();
  ASSERT_TRUE(admitted.WaitForNotificationWithTimeout(absl::Seconds(10)));

  const peer::HoldRequest hold{Id(), 0, "job-000042", absl::ZeroDuration()};
  absl::StatusOr<peer::HoldAnswer> held = cluster_->HoldPart(From(kStranger), hold);
  EXPECT_EQ(held.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(held.status().message()),
              HasSubstr("node 127.0.0.1:7009 may not hold the part of node 0 (127.0.0.1:7002)"));

  peer::PartReport report{Id(), 0, "job-000042", absl::InternalError("forged")};
  EXPECT_EQ(cluster_->ReportPart(From(kStranger), report).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(cluster_->ReportPart(From(kSelf), report).code(), absl::StatusCode::kPermissionDenied);
  report.node_index = 5;
  EXPECT_EQ(cluster_->ReportPart(From(kPeer), report).code(), absl::StatusCode::kInvalidArgument);

  peer::StoreCall set{Id(), "rank_0", "addr", absl::ZeroDuration()};
  EXPECT_EQ(cluster_->StoreSet(From(kStranger), set).code(), absl::StatusCode::kPermissionDenied);
  const peer::StoreCall get{Id(), "rank_0", "", absl::ZeroDuration()};
  EXPECT_EQ(cluster_->StoreGet(From(kStranger), get).status().code(),
            absl::StatusCode::kPermissionDenied);
  // Nothing was set by the stranger; the job's node sets and reads.
  EXPECT_EQ(cluster_->StoreGet(From(kPeer), get).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(cluster_->StoreSet(From(kPeer), set).ok());
  EXPECT_EQ(cluster_->StoreGet(From(kPeer), get).value_or(""), "addr");

  // The store's limits: a value past 4 MiB, a key past 256 bytes.
  set.value = std::string((4 << 20) + 1, 'x');
  EXPECT_EQ(cluster_->StoreSet(From(kPeer), set).code(), absl::StatusCode::kResourceExhausted);
  set.key = std::string(300, 'k');
  set.value = "v";
  EXPECT_EQ(cluster_->StoreSet(From(kPeer), set).code(), absl::StatusCode::kInvalidArgument);
  // 64 MiB in all.
  set.value = std::string(4 << 20, 'x');
  absl::Status last;
  for (int i = 0; i < 20 && last.ok(); ++i) {
    set.key = absl::StrCat("big_", i);
    last = cluster_->StoreSet(From(kPeer), set);
  }
  EXPECT_EQ(last.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(last.message()), HasSubstr("over its 67108864"));

  // The real part's report ends the job.
  ASSERT_TRUE(
      cluster_->ReportPart(From(kPeer), Failed("job-000042", absl::StatusCode::kAborted)).ok());
  EXPECT_THAT(std::string(WaitOutcome().message()), HasSubstr("the test ends here"));
}

// A part is admitted and cancelled only by its job's coordinator, and its
// owner, name and priority meet the rules a user's job meets.
TEST_F(ClusterJobsTest, APartIsAdmittedOnlyFromItsCoordinatorAndWithinTheRules) {
  peer::PartRequest request;
  request.global_id = peer::GlobalJobId{kPeer, "job-000001"};
  request.spec = kGraph;
  request.nodes = {kPeer, kSelf};
  request.node_index = 1;
  request.owner = "uid:1000";
  request.name = "mlp";
  request.priority = 3;
  request.schedules = {{"ar", ops::Schedule{OverlapMode::kSerial, 1, Transport::kNccl}}};
  struct Case {
    std::string what;
    std::string caller;
    std::function<void(peer::PartRequest&)> change;
    absl::StatusCode code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"another node as the coordinator", kStranger, [](peer::PartRequest&) {},
       absl::StatusCode::kPermissionDenied,
       "node 127.0.0.1:7009 may not admit a part of a job coordinated by 127.0.0.1:7002"},
      {"a coordinator not in peers", "127.0.0.1:7777",
       [](peer::PartRequest& r) { r.global_id.coordinator = "127.0.0.1:7777"; },
       absl::StatusCode::kPermissionDenied, "is not in the peers: of 127.0.0.1:7001"},
      {"a priority above max_user_priority", kPeer,
       [](peer::PartRequest& r) { r.priority = 2147483647; }, absl::StatusCode::kPermissionDenied,
       "priority: 2147483647 is above 10"},
      {"an escape in the name", kPeer, [](peer::PartRequest& r) { r.name = "x\x1b[2Jy"; },
       absl::StatusCode::kInvalidArgument, "name: must not hold control characters"},
      {"a bidi override in the name", kPeer,
       [](peer::PartRequest& r) {
         r.name =
             "job \xe2\x80\xae"
             "1-boj";
       },
       absl::StatusCode::kInvalidArgument, "name: must not hold control characters"},
      {"a newline in the owner", kPeer, [](peer::PartRequest& r) { r.owner = "uid:0\nuid:1"; },
       absl::StatusCode::kInvalidArgument, "owner: must not hold control characters"},
      {"no owner", kPeer, [](peer::PartRequest& r) { r.owner.clear(); },
       absl::StatusCode::kInvalidArgument, "owner: must not be empty"},
      {"the spec `,\"`", kPeer, [](peer::PartRequest& r) { r.spec = ",\""; },
       absl::StatusCode::kInvalidArgument, "malformed YAML/JSON at line 1, column 1"},
      {"no schedules", kPeer, [](peer::PartRequest& r) { r.schedules.clear(); },
       absl::StatusCode::kInvalidArgument, "schedules: none was decided for op ar"},
      {"a schedule this node would not run across daemons", kPeer,
       [](peer::PartRequest& r) { r.schedules["ar"].transport = Transport::kP2p; },
       absl::StatusCode::kFailedPrecondition, "the coordinator decided serial/p2p"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    peer::PartRequest changed = request;
    c.change(changed);
    const absl::Time start = absl::Now();
    absl::StatusOr<std::string> admitted = cluster_->AdmitPart(From(c.caller), changed);
    EXPECT_EQ(admitted.status().code(), c.code);
    EXPECT_THAT(std::string(admitted.status().message()), HasSubstr(c.message));
    EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << "refused without waiting on anything";
  }
  // An admin's part may ask for more; the rest of the request is fine.
  peer::PartRequest admin = request;
  admin.priority = 50;
  admin.owner_admin = true;
  const absl::StatusOr<std::string> checked = cluster_->AdmitPart(From(kPeer), admin);
  // No queue here: everything before it passed.
  EXPECT_EQ(checked.status().code(), absl::StatusCode::kUnavailable);

  const peer::CancelRequest cancel{request.global_id, ""};
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
