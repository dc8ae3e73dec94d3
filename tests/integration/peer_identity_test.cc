// Who a peer is, in key mode, through the real daemons: each node signs its
// calls with its own node key, so that a node holding the cluster key cannot
// speak as another; a token is good for one call; the callee signs its
// answers, so that a process on a stopped peer's port is never sent a job;
// and a caller who proves nothing never makes the daemon read its request.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "overlap/v1/peer.grpc.pb.h"
#include "tests/integration/cluster_harness.h"
#include "tests/integration/harness.h"

namespace overlap::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr char kMeshLayer[] = R"(name: mesh-layer
mesh: {tp: 2, dp: 2}
iterations: 3
warmup: 1
ops:
  - {id: grads, type: all_reduce, m: 64, n: 64, group: dp}
)";

// Two daemons that list each other, and a third node's identity (its key
// listed by both, no daemon, in neither's peers): a holder of the cluster key
// with a node key of its own.
class PeerIdentityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::vector<int> ports = FreeLoopbackPorts(3);
    for (int port : ports) names_.push_back(absl::StrCat("127.0.0.1:", port));
    key_ = WriteClusterKey(dir_.File("cluster.key"));
    keys_ = MakeTestNodeKeys(dir_.path(), names_);
    ASSERT_EQ(keys_.error, "");
  }
  void TearDown() override {
    if (!HasFailure()) return;
    for (size_t i = 0; i < daemons_.size(); ++i) {
      if (daemons_[i] != nullptr) std::cerr << "--- node " << i << ":\n" << daemons_[i]->Log();
    }
  }

  // Starts the daemon of node `i` (0 or 1), which lists the other as its peer.
  void StartNode(size_t i) {
    node_dirs_.resize(2);
    daemons_.resize(2);
    node_dirs_[i] = std::make_unique<TempDir>();
    const std::string config = node_dirs_[i]->File("overlapd.yaml");
    WriteFileOrDie(config, absl::StrCat("peer_listen: \"", names_[i], "\"\npeer_key_file: \"", key_,
                                        "\"\n", keys_.ConfigFor(i), "peers: [\"", names_[1 - i],
                                        "\"]\ncluster_hold_timeout_ms: 3000\n"
                                        "cluster_collective_timeout_ms: 20000\n"));
    daemons_[i] = std::make_unique<Daemon>(
        node_dirs_[i]->path(), std::vector<std::string>{"--config", config, "--host-devices", "2"});
    ASSERT_TRUE(daemons_[i]->Start()) << daemons_[i]->Log();
  }

  // peer_call to node `to`'s peer port with `args`; its output lines.
  std::vector<std::string> PeerCall(size_t to, const std::string& method,
                                    std::vector<std::string> args) {
    std::vector<std::string> argv = {PEER_CALL_BIN, names_[to], method};
    argv.insert(argv.end(), args.begin(), args.end());
    RunResult r = Child::Spawn(argv, dir_.path())->Wait(std::chrono::seconds(60));
    EXPECT_EQ(r.exit_code, 0) << Describe(r);
    return absl::StrSplit(r.out, '\n', absl::SkipEmpty());
  }

  // The arguments that make peer_call a holder of the cluster key signing
  // with node `signer`'s key and speaking as node `as`.
  std::vector<std::string> Signed(size_t signer, size_t as) {
    return {"--key-file", key_, "--node-key-file", keys_.key_files[signer], "--as", names_[as]};
  }

  std::string Write(const std::string& name, const std::string& text) {
    WriteFileOrDie(dir_.File(name), text);
    return dir_.File(name);
  }

  TempDir dir_;
  std::vector<std::string> names_;  // node 0, node 1, the third node
  std::string key_;
  TestNodeKeys keys_;
  std::vector<std::unique_ptr<TempDir>> node_dirs_;
  std::vector<std::unique_ptr<Daemon>> daemons_;
};

nlohmann::json PartOn(const Daemon& daemon, const std::string& state) {
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  RunResult list;
  while (Clock::now() < deadline) {
    list = daemon.Ctl({"list", "--json"}, std::chrono::seconds(10));
    if (list.exit_code == 0) {
      const nlohmann::json jobs = ParseJson(list.out)["jobs"];
      for (const nlohmann::json& job : jobs) {
        if (!job.value("coordinator", "").empty() && job.value("state", "") == state) return job;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ADD_FAILURE() << "no part " << state << ": " << Describe(list);
  return nlohmann::json::object();
}

// The third node holds the cluster key and a node key of its own: speaking as
// node 0 (the coordinator) or node 1 (the part) with it is refused for every
// call, a token is good once, and the job runs on untouched. The third node
// speaking as itself is proven, and then not allowed.
TEST_F(PeerIdentityTest, ANodeWithTheClusterKeyCannotSpeakAsAnotherNorReplayAToken) {
  ASSERT_NO_FATAL_FAILURE(StartNode(0));
  ASSERT_NO_FATAL_FAILURE(StartNode(1));
  RunResult submit = daemons_[0]->Ctl(
      {"submit", Write("long.yaml", kLongLayer), "--peers", names_[0] + "," + names_[1]});
  ASSERT_EQ(submit.exit_code, 0) << Describe(submit);
  const std::string id = Trim(submit.out);
  const nlohmann::json part = PartOn(*daemons_[1], "RUNNING");
  const std::string global = part.value("global_job_id", "");
  ASSERT_FALSE(global.empty()) << part.dump(2);

  auto with = [](std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  const std::vector<std::string> on_part = {"--coordinator", names_[0], "--job", global};
  const std::vector<std::string> on_job = {"--coordinator", names_[0], "--job", id,
                                           "--node-index",  "1"};
  struct Attack {
    std::string what;
    std::vector<std::string> answer;
    std::string expected;
  };
  const std::string not_signed_by = "UNAUTHENTICATED the call is not signed by the node key of ";
  const std::vector<Attack> attacks = {
      {"cancel the part on node 1 as node 0",
       PeerCall(1, "CancelPart", with(Signed(2, 0), on_part)), not_signed_by + names_[0]},
      {"report node 1's part failed, as node 1",
       PeerCall(0, "ReportPart", with(Signed(2, 1), on_job)), not_signed_by + names_[1]},
      {"hold node 1's part, as node 1", PeerCall(0, "HoldPart", with(Signed(2, 1), on_job)),
       not_signed_by + names_[1]},
      {"set a key in the job's store, as node 1",
       PeerCall(0, "StoreSet", with(Signed(2, 1), {"--coordinator", names_[0], "--job", id})),
       not_signed_by + names_[1]},
      {"the cluster key alone, as node 0",
       PeerCall(1, "CancelPart", with({"--key-file", key_, "--as", names_[0]}, on_part)),
       "UNAUTHENTICATED the call from " + names_[0] + " is not signed with a node key"},
      {"as itself: proven, and not the job's coordinator",
       PeerCall(1, "CancelPart", with(Signed(2, 2), on_part)),
       "PERMISSION_DENIED node " + names_[2] + " may not cancel a part"},
      {"node 0's own Hello, sent twice", PeerCall(1, "Hello", with(Signed(0, 0), {"--times", "2"})),
       ""},
  };
  for (const Attack& attack : attacks) {
    SCOPED_TRACE(attack.what);
    if (attack.expected.empty()) continue;
    ASSERT_EQ(attack.answer.size(), 1u);
    EXPECT_THAT(attack.answer[0], StartsWith(attack.expected));
  }
  const std::vector<std::string>& replay = attacks.back().answer;
  ASSERT_EQ(replay.size(), 2u);
  EXPECT_THAT(replay[0], StartsWith("OK"));
  EXPECT_THAT(replay[1], StartsWith("UNAUTHENTICATED the call's token was replayed"));

  // Nothing changed: the job and its part run on.
  EXPECT_EQ(PollJob(*daemons_[0], id, StateIs("RUNNING")).value("state", ""), "RUNNING");
  PartOn(*daemons_[1], "RUNNING");
  EXPECT_THAT(daemons_[1]->Log(), HasSubstr("refused CancelPart from " + names_[0]));
  ASSERT_EQ(daemons_[0]->Ctl({"cancel", id}).exit_code, 0);
  PollJob(*daemons_[0], id, StateIs("CANCELLED"), std::chrono::seconds(60));
}

// What answers on a stopped peer's port when it is not that peer's daemon: a
// plain gRPC server that says the right things but cannot sign them. It
// records the calls it gets.
class FakePeer final : public v1::Peers::Service {
 public:
  explicit FakePeer(std::string name) : name_(std::move(name)) {}
  grpc::Status Hello(grpc::ServerContext*, const v1::HelloRequest*,
                     v1::HelloResponse* response) override {
    ++hellos;
    response->set_version(OVERLAP_VERSION);
    response->set_backend("host");
    response->set_device_count(2);
    response->set_node(name_);
    return grpc::Status::OK;
  }
  grpc::Status AdmitPart(grpc::ServerContext*, const v1::AdmitPartRequest* request,
                         v1::AdmitPartResponse* response) override {
    ++admits;
    response->set_part_id("stolen-" + std::to_string(request->spec().size()));
    return grpc::Status::OK;
  }
  std::atomic<int> hellos{0};
  std::atomic<int> admits{0};

 private:
  std::string name_;
};

TEST_F(PeerIdentityTest, AProcessOnAStoppedPeersPortIsNeverSentTheJob) {
  ASSERT_NO_FATAL_FAILURE(StartNode(0));
  FakePeer fake(names_[1]);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(names_[1], grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&fake);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  ASSERT_NE(port, 0);

  const auto start = Clock::now();
  RunResult submit = daemons_[0]->Ctl(
      {"submit", Write("layer.yaml", kMeshLayer), "--peers", names_[0] + "," + names_[1], "--wait"},
      std::chrono::seconds(60));
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(30));
  EXPECT_NE(submit.exit_code, 0) << Describe(submit);
  EXPECT_THAT(submit.err, HasSubstr("UNAUTHENTICATED")) << Describe(submit);
  EXPECT_THAT(submit.err, HasSubstr("node " + names_[1] + " answered without proof"))
      << Describe(submit);
  EXPECT_GT(fake.hellos.load(), 0) << "the coordinator never called the fake";
  EXPECT_EQ(fake.admits.load(), 0) << "the job's spec went to an impostor";
  server->Shutdown();
}


// Sixteen 60 MiB StoreSets at once from a caller without the key: each
// refused UNAUTHENTICATED before its request is read, so that the daemon's
// memory barely moves, and it is idle after.
TEST_F(PeerIdentityTest, UnauthenticatedCallsAreRefusedBeforeTheirBodiesAreRead) {
  ASSERT_NO_FATAL_FAILURE(StartNode(0));
  const pid_t pid = daemons_[0]->pid();
  ASSERT_TRUE(BecomesIdle(pid));
  const int64_t rss_before = ProcessRssBytes(pid);
  // Resets VmHWM to the current RSS (Linux 4.0+), so that it shows this
  // flood's peak alone.
  const bool peak_reset =
      static_cast<bool>(std::ofstream("/proc/" + std::to_string(pid) + "/clear_refs") << "5");
  std::atomic<bool> flooding{true};
  std::atomic<int64_t> sampled_peak{rss_before};
  std::thread sampler([&] {
    while (flooding) {
      sampled_peak = std::max<int64_t>(sampled_peak, ProcessRssBytes(pid));
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  const auto start = Clock::now();
  const std::vector<std::string> answers =
      PeerCall(0, "StoreSet",
               {"--as", names_[1], "--coordinator", names_[0], "--job", "job-000001",
                "--value-bytes", "62914560", "--parallel", "16"});
  const auto took = Clock::now() - start;
  flooding = false;
  sampler.join();
  ASSERT_EQ(answers.size(), 16u);
  for (const std::string& answer : answers) {
    EXPECT_THAT(answer, StartsWith("UNAUTHENTICATED the call carries no overlapd-auth token"));
  }
  EXPECT_LT(took, std::chrono::seconds(30));
  const int64_t peak =
      std::max<int64_t>(sampled_peak, peak_reset ? PeakRssBytes(pid) : sampled_peak.load());
  std::cerr << "daemon RSS before " << (rss_before >> 20) << " MiB, peak during the flood "
            << (peak >> 20) << " MiB" << (peak_reset ? " (VmHWM)" : " (sampled)") << "\n";
  // Read and parsed, the 16 bodies were ~1 GB; refused first, a few MiB.
  EXPECT_LT(peak - rss_before, int64_t{128} << 20);
  EXPECT_TRUE(BecomesIdle(pid)) << "the daemon kept a core busy";
  EXPECT_LT(ProcessRssBytes(pid), rss_before + (int64_t{64} << 20));
  EXPECT_THAT(daemons_[0]->Log(), HasSubstr("refused StoreSet from " + names_[1]));
}

}  // namespace
}  // namespace overlap::testing
