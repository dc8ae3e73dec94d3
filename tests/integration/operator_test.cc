// What an operator meets running the real daemon for a team: metrics from the
// binary that ships (CUDA-linked wherever the toolkit is), the socket opened to
// a chosen group and nothing created more open than meant whatever the umask,
// clients finding the system daemon, large specs, paged lists, and a cap on
// watchers.
#include <grp.h>
#include <grpcpp/create_channel.h>
#include <sys/stat.h>

#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "overlap/v1/overlap.grpc.pb.h"
#include "tests/http_get.h"
#include "tests/integration/harness.h"

namespace overlap::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class OperatorTest : public DaemonTest {};

// The build the README makes links cuBLASLt, NCCL and OpenBLAS wherever the
// CUDA toolkit is found; their static TLS once kept the metrics server's
// threads from starting at all.
TEST_F(OperatorTest, TheDaemonBinaryServesMetricsAndNamesWhyItCannot) {
  const int port = FreeLoopbackPort();
  ASSERT_GT(port, 0);
  const std::string address = "127.0.0.1:" + std::to_string(port);
  StartDaemon({"--metrics-listen", address});
  const std::string metrics = HttpGet(port, "/metrics");
  EXPECT_THAT(metrics, HasSubstr("200 OK"));
  EXPECT_THAT(metrics, HasSubstr("text/plain; version=0.0.4"));
  EXPECT_THAT(metrics, HasSubstr("overlapd_healthy{backend=\"host\"} 1\n"));
  EXPECT_THAT(metrics, HasSubstr("pci_bus_id=\"host:3\",cuda_device=\"3\"} 0\n"));
  EXPECT_THAT(metrics, HasSubstr("overlapd_build_info{version=\""));
  EXPECT_THAT(HttpGet(port, "/healthz"), HasSubstr("200 OK"));
  EXPECT_THAT(HttpGet(port, "/other"), HasSubstr("404 Not Found"));

  RunResult taken = Child::Spawn({OVERLAPD_BIN, "--backend", "host", "--listen",
                                  "unix:" + dir_.File("second.sock"), "--state-dir",
                                  dir_.File("second-state"), "--metrics-listen", address},
                                 dir_.path())
                        ->Wait(std::chrono::seconds(30));
  EXPECT_EQ(taken.exit_code, 2) << Describe(taken);
  EXPECT_THAT(taken.err, HasSubstr("metrics_listen: cannot serve metrics on " + address +
                                   ": Address already in use"));
  // The first daemon still serves.
  EXPECT_THAT(HttpGet(port, "/metrics"), HasSubstr("200 OK"));
}

// No client holds the metrics port: with 32 connections that send nothing
// and 8 that send half a request, /healthz and /metrics are answered at once
// (one connection at a time, 10 idle ones held /healthz for 50 s), and the
// idle ones are closed after the 5 s idle timeout.
TEST_F(OperatorTest, IdleConnectionsDoNotHoldTheMetricsPort) {
  const int port = FreeLoopbackPort();
  ASSERT_GT(port, 0);
  StartDaemon({"--metrics-listen", "127.0.0.1:" + std::to_string(port)});
  const int64_t rss_before = ProcessRssBytes(daemon_->pid());
  const auto opened = Clock::now();
  std::vector<int> idle;
  for (int i = 0; i < 32; ++i) idle.push_back(OpenIdleConnection(port));
  for (int i = 0; i < 8; ++i) {
    idle.push_back(OpenIdleConnection(port, "GET /healthz HTTP/1.1\r\nHost: x\r\n"));
  }
  const auto asked = Clock::now();
  EXPECT_THAT(HttpGet(port, "/healthz", 20), HasSubstr("200 OK"));
  EXPECT_THAT(HttpGet(port, "/metrics", 20), HasSubstr("overlapd_healthy{backend=\"host\"} 1\n"));
  EXPECT_LT(Clock::now() - asked, std::chrono::seconds(5)) << "answered behind idle connections";
  for (int fd : idle) {
    ASSERT_GE(fd, 0);
    EXPECT_TRUE(ClosedBy(fd, opened + std::chrono::seconds(5 + 10)));
    ::close(fd);
  }
  EXPECT_TRUE(daemon_->running());
  EXPECT_TRUE(BecomesIdle(daemon_->pid()));
  EXPECT_LT(ProcessRssBytes(daemon_->pid()), rss_before + (64 << 20));
}

// Under umask 000 the socket, the state directory and the job database are
// never more open than meant: the socket 0660 to socket_group, the rest private.
TEST_F(OperatorTest, SocketGoesToItsGroupAndStateStaysPrivateWhateverTheUmask) {
  StartDaemon({"--socket-group", "nogroup"},
              {"/bin/sh", "-c", "umask 000 && exec \"$@\"", "overlapd-under-umask-000"});
  const std::string socket = daemon_->address().substr(std::string("unix:").size());
  struct stat st {};
  ASSERT_EQ(::stat(socket.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0660u);
  EXPECT_EQ(static_cast<int>(st.st_gid), getgrnam("nogroup")->gr_gid);
  ASSERT_EQ(::stat(daemon_->state_dir().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0077, 0u) << std::oct << (st.st_mode & 07777);
  Submit(small_graph_);
  for (const char* name : {"overlapd.db", "overlapd.db-wal", "overlapd.highest-id"}) {
    const std::string path = daemon_->state_dir() + "/" + name;
    ASSERT_EQ(::stat(path.c_str(), &st), 0) << path;
    EXPECT_EQ(st.st_mode & 0077, 0u) << path << " " << std::oct << (st.st_mode & 07777);
  }

  const std::string cannot = CannotSwitchUsers(OVERLAPCTL_BIN);
  if (!cannot.empty()) GTEST_SKIP() << "the group's members reaching it: " << cannot;
  OpenToOthers(dir_.path());
  std::vector<std::string> member = AsUser(kNobody, kNobody);
  member.insert(member.end(), {OVERLAPCTL_BIN, "--addr", daemon_->address(), "node"});
  RunResult in_group = Child::Spawn(member, dir_.path())->Wait(std::chrono::seconds(30));
  EXPECT_EQ(in_group.exit_code, 0) << Describe(in_group);
  std::vector<std::string> outsider = AsUser(kNobody, 1);
  outsider.insert(outsider.end(), {OVERLAPCTL_BIN, "--addr", daemon_->address(), "node"});
  RunResult other = Child::Spawn(outsider, dir_.path())->Wait(std::chrono::seconds(30));
  EXPECT_EQ(other.exit_code, 2) << Describe(other);
  EXPECT_THAT(other.err, HasSubstr("is not open to uid 65534"));
  EXPECT_THAT(other.err, HasSubstr("socket_group"));
}

TEST_F(OperatorTest, AnUnknownSocketGroupIsAConfigurationError) {
  RunResult run = Child::Spawn({OVERLAPD_BIN, "--backend", "host", "--listen",
                                "unix:" + dir_.File("s.sock"), "--state-dir",
                                dir_.File("state"), "--socket-group", "no-such-group-here"},
                               dir_.path())
                      ->Wait(std::chrono::seconds(30));
  EXPECT_EQ(run.exit_code, 2) << Describe(run);
  EXPECT_THAT(run.err, HasSubstr("socket_group: no group named \"no-such-group-here\""));
}

// A user without a daemon of their own reaches the system one (the installed
// unit's socket) with no --addr.
TEST_F(OperatorTest, UsersWithoutADaemonOfTheirOwnReachTheSystemOne) {
  const std::string system_socket = "/run/overlapd/overlapd.sock";
  const std::string cannot = CannotSwitchUsers(OVERLAPCTL_BIN);
  if (!cannot.empty()) GTEST_SKIP() << cannot;
  struct stat st {};
  if (::stat(system_socket.c_str(), &st) == 0) GTEST_SKIP() << system_socket << " is in use";
  daemon_ = std::make_unique<Daemon>(dir_.path(),
                                     std::vector<std::string>{"--socket-group", "nogroup"});
  daemon_->set_address("unix:" + system_socket);
  ASSERT_TRUE(daemon_->Start());
  OpenToOthers(dir_.path());
  std::vector<std::string> argv = AsUser(kNobody, kNobody);
  argv.insert(argv.end(), {"/usr/bin/env", "-u", "OVERLAPD_ADDR", "-u", "XDG_RUNTIME_DIR",
                           OVERLAPCTL_BIN, "node", "--json"});
  RunResult node = Child::Spawn(argv, dir_.path())->Wait(std::chrono::seconds(30));
  EXPECT_EQ(node.exit_code, 0) << Describe(node);
  EXPECT_THAT(node.out, HasSubstr(system_socket));
  EXPECT_EQ(daemon_->Terminate(std::chrono::seconds(20)).exit_code, 0);
}

// Specs up to max_spec_bytes are taken even above gRPC's default 4 MiB.
TEST_F(OperatorTest, MaxSpecBytesAboveFourMiBIsHonoured) {
  StartDaemon({"--max-spec-bytes", "8MiB"});
  std::string padding;
  const std::string line = "# " + std::string(1022, 'p') + "\n";
  while (padding.size() < (5u << 20)) padding += line;
  const std::string big = dir_.File("big.yaml");
  WriteFileOrDie(big, padding + kSmallGraph);
  RunResult ok = daemon_->Ctl({"submit", big, "--wait", "--json"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_EQ(ParseJson(ok.out)["state"], "SUCCEEDED");

  const std::string too_big = dir_.File("too-big.yaml");
  WriteFileOrDie(too_big, padding + padding + kSmallGraph);
  RunResult refused = daemon_->Ctl({"submit", too_big});
  EXPECT_EQ(refused.exit_code, 3) << refused.err;
  EXPECT_THAT(refused.err, HasSubstr("INVALID_ARGUMENT"));
  EXPECT_THAT(refused.err, HasSubstr("over max_spec_bytes"));
}

// ListJobs answers summaries a page at a time, newest first: no spec and no
// ops, however large the jobs are.
TEST_F(OperatorTest, ListJobsPagesSummariesNewestFirst) {
  StartDaemon();
  std::string padding;
  const std::string line = "# " + std::string(1022, 'p') + "\n";
  while (padding.size() < (900u << 10)) padding += line;
  const std::string heavy = dir_.File("heavy.yaml");
  WriteFileOrDie(heavy, padding + kSmallGraph);
  std::vector<std::string> ids;
  for (int i = 0; i < 5; ++i) {
    RunResult done = daemon_->Ctl({"submit", heavy, "--wait", "--json"});
    ASSERT_EQ(done.exit_code, 0) << done.err;
    ids.push_back(ParseJson(done.out)["id"]);
  }

  auto channel = grpc::CreateChannel(daemon_->address(), grpc::InsecureChannelCredentials());
  auto stub = v1::Jobs::NewStub(channel);
  std::vector<std::string> seen;
  std::string token;
  int pages = 0;
  do {
    grpc::ClientContext context;
    v1::ListJobsRequest request;
    request.set_limit(2);
    request.set_page_token(token);
    v1::ListJobsResponse page;
    grpc::Status status = stub->ListJobs(&context, request, &page);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_LT(page.ByteSizeLong(), 16u << 10) << "summaries, not 900 KiB specs";
    EXPECT_LE(page.jobs_size(), 2);
    for (const v1::Job& job : page.jobs()) {
      seen.push_back(job.id());
      EXPECT_EQ(job.spec(), "");
      EXPECT_EQ(job.result().ops_size(), 0);
      EXPECT_EQ(job.ops_finished(), 3) << job.id();
      EXPECT_GT(job.result().total_step_ms(), 0) << job.id();
    }
    token = page.next_page_token();
    ++pages;
  } while (!token.empty() && pages < 10);
  EXPECT_EQ(pages, 3);
  EXPECT_EQ(seen, (std::vector<std::string>{ids[4], ids[3], ids[2], ids[1], ids[0]}));

  grpc::ClientContext context;
  v1::ListJobsRequest bad;
  bad.set_page_token("not-a-token");
  v1::ListJobsResponse ignored;
  grpc::Status status = stub->ListJobs(&context, bad, &ignored);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("page_token"));

  // overlapctl follows the pages; --limit stops early.
  RunResult all = daemon_->Ctl({"list", "--json"});
  ASSERT_EQ(all.exit_code, 0) << all.err;
  EXPECT_EQ(ParseJson(all.out)["jobs"].size(), 5u);
  RunResult two = daemon_->Ctl({"list", "--limit", "2"});
  ASSERT_EQ(two.exit_code, 0) << two.err;
  EXPECT_THAT(two.out, HasSubstr(ids[4]));
  EXPECT_THAT(two.out, Not(HasSubstr(ids[2])));
  // get still returns the whole job.
  RunResult get = daemon_->Ctl({"get", ids[0], "--json"});
  ASSERT_EQ(get.exit_code, 0) << get.err;
  EXPECT_GT(ParseJson(get.out)["spec"].get<std::string>().size(), 900u << 10);
}

// Each watch holds a server thread: past max_watchers the next is refused
// with RESOURCE_EXHAUSTED naming the setting, and a slot frees when one ends.
TEST_F(OperatorTest, WatchersPastTheCapAreRefused) {
  StartDaemon({"--max-watchers", "2"});
  const std::string id = Submit(long_graph_);
  std::vector<std::unique_ptr<Child>> watchers;
  for (int i = 0; i < 2; ++i) watchers.push_back(daemon_->CtlAsync({"watch", id}));
  // Both are in once each has printed the job's first event.
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  for (const std::unique_ptr<Child>& watcher : watchers) {
    while (ReadFileOrEmpty(watcher->err_path()).find("job " + id) == std::string::npos &&
           Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  RunResult third = daemon_->Ctl({"watch", id}, std::chrono::seconds(20));
  EXPECT_EQ(third.exit_code, 3) << Describe(third);
  EXPECT_THAT(third.err, HasSubstr("RESOURCE_EXHAUSTED"));
  EXPECT_THAT(third.err, HasSubstr("max_watchers = 2"));

  RunResult cancel = daemon_->Ctl({"cancel", id});
  ASSERT_EQ(cancel.exit_code, 0) << Describe(cancel);
  for (std::unique_ptr<Child>& watcher : watchers) {
    RunResult ended = watcher->Wait(std::chrono::seconds(30));
    EXPECT_EQ(ended.exit_code, 1) << Describe(ended);  // the job was cancelled
  }
  RunResult after = daemon_->Ctl({"watch", id});
  EXPECT_EQ(after.exit_code, 1) << Describe(after);
  EXPECT_THAT(after.err, Not(HasSubstr("RESOURCE_EXHAUSTED")));
}

}  // namespace
}  // namespace overlap::testing
