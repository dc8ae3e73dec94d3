// The real overlapd binary (OVERLAPD_BIN) with the host backend and the real job
// runner: systemd readiness and stop notifications, the exit status of a drain,
// a real job over gRPC, and queued jobs surviving a restart.
#include <fcntl.h>
#include <grpcpp/create_channel.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "overlap/v1/overlap.grpc.pb.h"
#include "tests/server/test_util.h"

namespace overlap {
namespace {

using ::overlap::testing::TempDir;

constexpr char kSmallJob[] =
    "name: small\ndevices: [0, 1]\niterations: 2\nwarmup: 1\n"
    "ops:\n  - {id: fc1, type: ag_gemm, m: 64, k: 64, n: 64, mode: serial}\n";

// Long enough to still be running when the daemon is told to stop.
constexpr char kLongJob[] =
    "name: long\ndevices: [0]\niterations: 10000\nwarmup: 0\nverify: false\n"
    "ops:\n  - {id: big, type: gemm_ar, m: 256, k: 256, n: 256, mode: serial}\n";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A unix datagram socket standing in for systemd's notify socket.
class NotifySocket {
 public:
  explicit NotifySocket(const std::string& path) : path_(path) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
    bound_ = ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~NotifySocket() { ::close(fd_); }
  bool bound() const { return bound_; }
  const std::string& path() const { return path_; }
  // Reads what has come, without waiting: a socket nobody reads fills after a
  // few datagrams (net.unix.max_dgram_qlen), and sd_notify then blocks.
  void Drain() {
    char buffer[4096];
    while (::recv(fd_, buffer, sizeof(buffer), MSG_DONTWAIT) > 0) {
    }
  }

  // The next datagram, or "" after `timeout`.
  std::string Receive(std::chrono::seconds timeout) {
    timeval tv{static_cast<time_t>(timeout.count()), 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    char buffer[4096];
    const ssize_t n = ::recv(fd_, buffer, sizeof(buffer), 0);
    return n > 0 ? std::string(buffer, static_cast<size_t>(n)) : "";
  }

 private:
  std::string path_;
  int fd_ = -1;
  bool bound_ = false;
};

class Daemon {
 public:
  // Starts overlapd with `args`; NOTIFY_SOCKET set when `notify_socket` is given.
  Daemon(const std::vector<std::string>& args, const std::string& log_path,
         const std::string& notify_socket = "",
         const std::vector<std::pair<std::string, std::string>>& env = {}) {
    pid_ = ::fork();
    if (pid_ == 0) {
      const int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      ::dup2(log, 1);
      ::dup2(log, 2);
      if (!notify_socket.empty()) ::setenv("NOTIFY_SOCKET", notify_socket.c_str(), 1);
      for (const auto& [name, value] : env) ::setenv(name.c_str(), value.c_str(), 1);
      std::vector<char*> argv;
      argv.push_back(const_cast<char*>(OVERLAPD_BIN));
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(OVERLAPD_BIN, argv.data());
      ::_exit(127);
    }
  }
  ~Daemon() {
    if (pid_ > 0 && !exited_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  void Signal(int sig) { ::kill(pid_, sig); }
  // The exit status, or -1 when it did not exit within `timeout` (or was killed).
  int Wait(std::chrono::seconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
};

class OverlapdBinaryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::access(OVERLAPD_BIN, X_OK), 0)
        << OVERLAPD_BIN << " is not built: build the overlapd target first";
    address_ = "unix:" + dir_.path() + "/d.sock";
  }

  std::vector<std::string> Args(std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {
        "--backend", "host",   "--host-devices", "2",
        "--listen",  address_, "--state-dir",    dir_.path() + "/state"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }

  std::unique_ptr<v1::Jobs::Stub> Stub() {
    return v1::Jobs::NewStub(grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  }

  grpc::Status Submit(v1::Jobs::Stub& stub, const std::string& spec, v1::Job* job) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::SubmitJobRequest request;
    request.set_spec(spec);
    v1::SubmitJobResponse response;
    grpc::Status status = stub.SubmitJob(&context, request, &response);
    *job = response.job();
    return status;
  }

  v1::Job AwaitState(v1::Jobs::Stub& stub, const std::string& id, v1::JobState state) {
    v1::Job job;
    for (int i = 0; i < 600; ++i) {
      grpc::ClientContext context;
      v1::GetJobRequest request;
      request.set_id(id);
      v1::GetJobResponse response;
      if (stub.GetJob(&context, request, &response).ok()) {
        job = response.job();
        if (job.state() == state) return job;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ADD_FAILURE() << id << " never reached " << v1::JobState_Name(state) << "; last state "
                  << v1::JobState_Name(job.state()) << " error: " << job.error();
    return job;
  }

  std::string Log() { return ReadFile(dir_.path() + "/overlapd.log"); }

  TempDir dir_;
  std::string address_;
};

TEST_F(OverlapdBinaryTest, NotifiesSystemdAndDrainsOnSigterm) {
  NotifySocket notify(dir_.path() + "/notify.sock");
  ASSERT_TRUE(notify.bound());
  Daemon daemon(Args(), dir_.path() + "/overlapd.log", notify.path());
  const std::string ready = notify.Receive(std::chrono::seconds(30));
  ASSERT_NE(ready.find("READY=1"), std::string::npos) << "got \"" << ready << "\"\n" << Log();

  // READY means the socket answers: a real job runs and verifies.
  auto stub = Stub();
  v1::Job job;
  grpc::Status status = Submit(*stub, kSmallJob, &job);
  ASSERT_TRUE(status.ok()) << status.error_message();
  job = AwaitState(*stub, job.id(), v1::SUCCEEDED);
  EXPECT_EQ(job.result().backend(), "host");
  ASSERT_EQ(job.result().ops_size(), 1);
  EXPECT_TRUE(job.result().ops(0).verified());
  EXPECT_EQ(Submit(*stub, "ops: [", &job).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  daemon.Signal(SIGTERM);
  const std::string stopping = notify.Receive(std::chrono::seconds(30));
  EXPECT_NE(stopping.find("STOPPING=1"), std::string::npos) << "got \"" << stopping << "\"";
  EXPECT_EQ(daemon.Wait(std::chrono::seconds(30)), 0) << Log();
  EXPECT_NE(::access((dir_.path() + "/d.sock").c_str(), F_OK), 0) << "socket file left behind";
}

// SIGTERM with a job running and one queued: after the drain timeout the running
// job is cancelled, the queued one stays queued, and the next start runs it
// under its old id while new ids continue the sequence.
TEST_F(OverlapdBinaryTest, QueuedJobsRunAfterRestart) {
  std::string running_id, queued_id;
  {
    NotifySocket notify(dir_.path() + "/notify.sock");
    Daemon daemon(Args({"--drain-timeout", "0.5"}), dir_.path() + "/overlapd.log", notify.path());
    ASSERT_NE(notify.Receive(std::chrono::seconds(30)).find("READY=1"), std::string::npos) << Log();
    auto stub = Stub();
    v1::Job job;
    ASSERT_TRUE(Submit(*stub, kLongJob, &job).ok());
    running_id = job.id();
    AwaitState(*stub, running_id, v1::RUNNING);
    ASSERT_TRUE(Submit(*stub, kSmallJob, &job).ok());
    queued_id = job.id();
    EXPECT_EQ(job.state(), v1::QUEUED);
    daemon.Signal(SIGTERM);
    ASSERT_EQ(daemon.Wait(std::chrono::seconds(30)), 0) << Log();
  }
  NotifySocket notify(dir_.path() + "/notify2.sock");
  Daemon daemon(Args(), dir_.path() + "/overlapd.log", notify.path());
  ASSERT_NE(notify.Receive(std::chrono::seconds(30)).find("READY=1"), std::string::npos) << Log();
  auto stub = Stub();
  v1::Job queued = AwaitState(*stub, queued_id, v1::SUCCEEDED);
  EXPECT_EQ(queued.id(), "job-000002");
  v1::Job cancelled = AwaitState(*stub, running_id, v1::CANCELLED);
  EXPECT_EQ(cancelled.error(), "cancelled: overlapd shut down (drain timeout 0.5s)");
  v1::Job next;
  ASSERT_TRUE(Submit(*stub, kSmallJob, &next).ok());
  EXPECT_EQ(next.id(), "job-000003");
  daemon.Signal(SIGINT);
  EXPECT_EQ(daemon.Wait(std::chrono::seconds(30)), 0) << Log();
}

// Under WatchdogSec= the daemon pings systemd while idle and while a job runs
// (the job queue's heartbeat, not a job's progress), and while it drains asks
// for more stop time (EXTEND_TIMEOUT_USEC) so that a drain longer than
// TimeoutStopSec is honoured.
TEST_F(OverlapdBinaryTest, FeedsTheWatchdogAndExtendsTheStopTimeoutWhileDraining) {
  NotifySocket notify(dir_.path() + "/notify.sock");
  ASSERT_TRUE(notify.bound());
  Daemon daemon(Args({"--drain-timeout", "7"}), dir_.path() + "/overlapd.log", notify.path(),
                {{"WATCHDOG_USEC", "400000"}});
  ASSERT_NE(notify.Receive(std::chrono::seconds(30)).find("READY=1"), std::string::npos) << Log();
  int pings = 0;
  for (int i = 0; i < 10 && pings < 2; ++i) {
    if (notify.Receive(std::chrono::seconds(2)) == "WATCHDOG=1") ++pings;
  }
  EXPECT_EQ(pings, 2) << "no watchdog pings while idle\n" << Log();

  auto stub = Stub();
  v1::Job job;
  ASSERT_TRUE(Submit(*stub, kLongJob, &job).ok());
  AwaitState(*stub, job.id(), v1::RUNNING);
  pings = 0;
  for (int i = 0; i < 10 && pings < 2; ++i) {
    if (notify.Receive(std::chrono::seconds(2)) == "WATCHDOG=1") ++pings;
  }
  EXPECT_EQ(pings, 2) << "no watchdog pings while a job runs\n" << Log();

  daemon.Signal(SIGTERM);
  std::vector<std::string> extends;
  bool stopping = false;
  for (int i = 0; i < 200 && extends.size() < 2; ++i) {
    const std::string message = notify.Receive(std::chrono::seconds(10));
    if (message.empty()) break;
    if (message.find("STOPPING=1") != std::string::npos) stopping = true;
    if (message.rfind("EXTEND_TIMEOUT_USEC=", 0) == 0) extends.push_back(message);
  }
  EXPECT_TRUE(stopping);
  ASSERT_EQ(extends.size(), 2u) << "the 7 s drain asked for more time in 5 s slices\n" << Log();
  // A 5 s slice, the 10 s cancel grace and 5 s to exit.
  EXPECT_EQ(extends[0], "EXTEND_TIMEOUT_USEC=20000000");
  // Read on, as systemd does, while it finishes: the pings go on to the end.
  int exit_code = -1;
  for (int i = 0; i < 60 && exit_code == -1; ++i) {
    notify.Drain();
    exit_code = daemon.Wait(std::chrono::seconds(1));
  }
  EXPECT_EQ(exit_code, 0) << Log();
}

TEST_F(OverlapdBinaryTest, BadConfigurationExitsWithUsageStatus) {
  {
    Daemon daemon(Args({"--listen", "0.0.0.0:5555"}), dir_.path() + "/overlapd.log");
    EXPECT_EQ(daemon.Wait(std::chrono::seconds(10)), 2);
  }
  EXPECT_NE(Log().find("allow_insecure_tcp"), std::string::npos) << Log();
  {
    Daemon daemon(Args({"--config", dir_.path() + "/missing.yaml"}),
                  dir_.path() + "/overlapd.log");
    EXPECT_EQ(daemon.Wait(std::chrono::seconds(10)), 2);
  }
  // A config the engine refuses (here the host backend's) is the operator's to
  // fix as well: systemd must not restart into it.
  const std::string config = dir_.path() + "/bad-engine.yaml";
  std::ofstream(config) << "host_fail_op: no_such_op\n";
  Daemon daemon(Args({"--config", config}), dir_.path() + "/overlapd.log");
  EXPECT_EQ(daemon.Wait(std::chrono::seconds(10)), 2);
  EXPECT_NE(Log().find("no_such_op"), std::string::npos) << Log();
}

// The config file's booleans hold unless a flag names them (CLI11 used to
// write false into every boolean flag not given, so `nccl_nonblocking: true`,
// the default, was silently off), and --print-config shows what is in effect.
TEST_F(OverlapdBinaryTest, BooleanFlagsOverrideTheConfigFileOnlyWhenGiven) {
  const std::string config = dir_.path() + "/overlapd.yaml";
  std::ofstream(config) << "hazard_checks: true\nnccl_nonblocking: false\n";
  auto printed = [&](std::vector<std::string> extra) {
    std::remove((dir_.path() + "/print.txt").c_str());
    Daemon daemon(Args(extra), dir_.path() + "/print.txt");
    EXPECT_EQ(daemon.Wait(std::chrono::seconds(10)), 0);
    return ReadFile(dir_.path() + "/print.txt");
  };
  auto has = [](const std::string& yaml, const std::string& line) {
    return yaml.find("\n" + line + " ") != std::string::npos;
  };
  std::string yaml = printed({"--print-config"});
  EXPECT_TRUE(has(yaml, "nccl_nonblocking: true")) << yaml;
  EXPECT_TRUE(has(yaml, "graph_replay: true")) << yaml;
  EXPECT_TRUE(has(yaml, "programmatic_edges: false")) << yaml;
  EXPECT_TRUE(has(yaml, "hazard_checks: false")) << yaml;
  EXPECT_TRUE(has(yaml, "backend: \"host\"")) << yaml;

  yaml = printed({"--config", config, "--print-config"});
  EXPECT_TRUE(has(yaml, "hazard_checks: true")) << yaml;
  EXPECT_TRUE(has(yaml, "nccl_nonblocking: false")) << yaml;
  EXPECT_TRUE(has(yaml, "graph_replay: true")) << yaml;

  yaml =
      printed({"--config", config, "--no-hazard-checks", "--nccl-nonblocking", "--no-graph-replay",
               "--programmatic-edges", "--no-launch-gate", "--print-config"});
  EXPECT_TRUE(has(yaml, "hazard_checks: false")) << yaml;
  EXPECT_TRUE(has(yaml, "nccl_nonblocking: true")) << yaml;
  EXPECT_TRUE(has(yaml, "graph_replay: false")) << yaml;
  EXPECT_TRUE(has(yaml, "programmatic_edges: true")) << yaml;
  EXPECT_TRUE(has(yaml, "launch_gate: false")) << yaml;

  yaml = printed({"--ranks-per-gpu", "2", "--print-config"});
  EXPECT_TRUE(has(yaml, "ranks_per_gpu: 2")) << yaml;
}

// Library failures injected into the host backend through the config: a failed
// collective fails that job with ABORTED and the next job runs; a sticky error
// (a lost device) fails the job, and the daemon drains and exits 1 so that
// systemd restarts it.
TEST_F(OverlapdBinaryTest, InjectedFailuresFailTheJobOrRestartTheDaemon) {
  {
    const std::string config = dir_.path() + "/abort.yaml";
    std::ofstream(config) << "host_fail_op: all_gather\nhost_fail_after: 1\n";
    NotifySocket notify(dir_.path() + "/notify.sock");
    Daemon daemon(Args({"--config", config}), dir_.path() + "/overlapd.log", notify.path());
    ASSERT_NE(notify.Receive(std::chrono::seconds(30)).find("READY=1"), std::string::npos) << Log();
    auto stub = Stub();
    v1::Job job;
    ASSERT_TRUE(Submit(*stub, kSmallJob, &job).ok());
    job = AwaitState(*stub, job.id(), v1::ABORTED);
    EXPECT_NE(job.error().find("injected NCCL failure"), std::string::npos) << job.error();
    EXPECT_EQ(job.error_code(), static_cast<int>(absl::StatusCode::kAborted));
    ASSERT_TRUE(Submit(*stub, kSmallJob, &job).ok());
    AwaitState(*stub, job.id(), v1::SUCCEEDED);
    daemon.Signal(SIGTERM);
    EXPECT_EQ(daemon.Wait(std::chrono::seconds(30)), 0) << Log();
  }
  const std::string config = dir_.path() + "/sticky.yaml";
  std::ofstream(config) << "host_fail_op: gemm\nhost_fail_after: 2\nhost_fail_sticky: true\n";
  NotifySocket notify(dir_.path() + "/notify2.sock");
  Daemon daemon(Args({"--config", config}), dir_.path() + "/overlapd.log", notify.path());
  ASSERT_NE(notify.Receive(std::chrono::seconds(30)).find("READY=1"), std::string::npos) << Log();
  auto stub = Stub();
  v1::Job job;
  ASSERT_TRUE(Submit(*stub, kSmallJob, &job).ok());
  job = AwaitState(*stub, job.id(), v1::FAILED);
  EXPECT_NE(job.error().find("injected cuBLAS failure"), std::string::npos) << job.error();
  EXPECT_EQ(daemon.Wait(std::chrono::seconds(30)), 1) << Log();
  EXPECT_NE(Log().find("unhealthy"), std::string::npos);
}

// A job whose collective aborts names it from the flight recorder: the
// sequence number on its communicator, the op and the ranks it failed on,
// in the one-line error that `overlapctl get` prints.
TEST_F(OverlapdBinaryTest, AnAbortedCollectiveIsNamedByTheFlightRecorder) {
  const std::string config = dir_.path() + "/flight.yaml";
  std::ofstream(config) << "host_fail_op: all_gather\nhost_fail_after: 3\n";
  NotifySocket notify(dir_.path() + "/notify.sock");
  Daemon daemon(Args({"--config", config}), dir_.path() + "/overlapd.log", notify.path());
  ASSERT_NE(notify.Receive(std::chrono::seconds(30)).find("READY=1"), std::string::npos) << Log();
  auto stub = Stub();
  v1::Job job;
  ASSERT_TRUE(Submit(*stub, kSmallJob, &job).ok());
  job = AwaitState(*stub, job.id(), v1::ABORTED);
  EXPECT_NE(job.error().find("injected NCCL failure"), std::string::npos) << job.error();
  // The third all-gather is the tenth collective on channel 0, after the
  // runner's barriers and the first two all-gathers.
  EXPECT_NE(job.error().find("; flight: collective #10 all_gather (channel 0 ranks [0,1], "
                             "critical lane, job " +
                             job.id() + " op fc1) reached by 0,1, failed on 0,1"),
            std::string::npos)
      << job.error();

  // The rings behind it (`overlapctl flight`): both ranks' channel 0, the
  // failed all-gather last, and the same verdict.
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::GetFlightRequest request;
  request.set_id(job.id());
  v1::GetFlightResponse flight;
  ASSERT_TRUE(stub->GetFlight(&context, request, &flight).ok());
  EXPECT_EQ(job.error().substr(job.error().find("flight: ")), flight.verdict());
  EXPECT_EQ(flight.entries_per_ring(), 2000);
  EXPECT_GT(flight.recorder_bytes(), 0);
  int channel0 = 0;
  for (const v1::FlightRing& ring : flight.rings()) {
    if (ring.comm() != "channel 0 ranks [0,1]") continue;
    ++channel0;
    ASSERT_EQ(ring.entries_size(), 10);
    EXPECT_EQ(ring.entries(9).seq(), 10u);
    EXPECT_EQ(ring.entries(9).op(), "all_gather");
    EXPECT_EQ(ring.entries(9).state(), "failed");
    // With the library's error, kept although the runner's drain after the
    // failed op consumed it again.
    EXPECT_NE(ring.entries(9).error().find("ABORTED: injected NCCL failure"), std::string::npos)
        << ring.entries(9).error();
    EXPECT_EQ(ring.entries(9).job_op(), "fc1");
    EXPECT_EQ(ring.lane(), "critical");
  }
  EXPECT_EQ(channel0, 2);
  daemon.Signal(SIGTERM);
  EXPECT_EQ(daemon.Wait(std::chrono::seconds(30)), 0) << Log();
}

// flight_recorder_entries 0 turns the recorder off (its cost is measured against
// that): a job with collectives runs and leaves no ring behind.
TEST_F(OverlapdBinaryTest, FlightRecorderEntriesZeroRecordsNothing) {
  const std::string config = dir_.path() + "/flight-off.yaml";
  std::ofstream(config) << "flight_recorder_entries: 0\n";
  NotifySocket notify(dir_.path() + "/notify.sock");
  Daemon daemon(Args({"--config", config}), dir_.path() + "/overlapd.log", notify.path());
  ASSERT_NE(notify.Receive(std::chrono::seconds(30)).find("READY=1"), std::string::npos) << Log();
  auto stub = Stub();
  v1::Job job;
  ASSERT_TRUE(Submit(*stub, kSmallJob, &job).ok());
  AwaitState(*stub, job.id(), v1::SUCCEEDED);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::GetFlightRequest request;
  request.set_id(job.id());
  v1::GetFlightResponse flight;
  ASSERT_TRUE(stub->GetFlight(&context, request, &flight).ok());
  EXPECT_EQ(flight.rings_size(), 0);
  EXPECT_EQ(flight.recorder_bytes(), 0);
  daemon.Signal(SIGTERM);
  EXPECT_EQ(daemon.Wait(std::chrono::seconds(30)), 0) << Log();
}

}  // namespace
}  // namespace overlap
