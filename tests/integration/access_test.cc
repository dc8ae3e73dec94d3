// Who may do what, through the real daemon and a second user (setpriv): jobs
// are owned by the uid the kernel reports for the connection, only owners and
// admins cancel, node-wide changes need an admin, a non-admin's priority is
// capped and queue is limited, an identity a call claims is refused, and a
// /tmp/overlapd-UID directory someone else made is not used.
#include <grpcpp/create_channel.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <thread>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "overlap/v1/overlap.grpc.pb.h"
#include "tests/integration/harness.h"

namespace overlap::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A uid with no passwd entry, in group nogroup so that it reaches the socket.
constexpr int kUnnamed = 65533;

class AccessTest : public DaemonTest {
 protected:
  void SetUp() override {
    DaemonTest::SetUp();
    const std::string cannot = CannotSwitchUsers(OVERLAPCTL_BIN);
    if (!cannot.empty()) GTEST_SKIP() << cannot;
    OpenToOthers(dir_.path());
  }

  // The daemon's socket is 0660 to group nogroup: every user below is in it.
  void StartShared(std::vector<std::string> flags = {}) {
    flags.insert(flags.begin(), {"--socket-group", "nogroup"});
    StartDaemon(std::move(flags));
  }

  // overlapctl as `uid` (group nogroup) against the daemon.
  RunResult As(int uid, const std::vector<std::string>& args) const {
    std::vector<std::string> argv = AsUser(uid, kNobody);
    argv.insert(argv.end(), {OVERLAPCTL_BIN, "--addr", daemon_->address()});
    argv.insert(argv.end(), args.begin(), args.end());
    return Child::Spawn(argv, dir_.path())->Wait(std::chrono::seconds(60));
  }

  // overlapctl as `uid`, not waited for (a watch).
  std::unique_ptr<Child> AsAsync(int uid, const std::vector<std::string>& args) const {
    std::vector<std::string> argv = AsUser(uid, kNobody);
    argv.insert(argv.end(), {OVERLAPCTL_BIN, "--addr", daemon_->address()});
    argv.insert(argv.end(), args.begin(), args.end());
    return Child::Spawn(argv, dir_.path());
  }

  std::string SubmitAs(int uid, const std::string& graph) {
    RunResult submit = As(uid, {"submit", graph});
    EXPECT_EQ(submit.exit_code, 0) << Describe(submit);
    return Trim(submit.out);
  }

  nlohmann::json GetJson(const std::string& id) const {
    RunResult get = daemon_->Ctl({"get", id, "--json"});
    EXPECT_EQ(get.exit_code, 0) << Describe(get);
    return ParseJson(get.out);
  }

  std::string Graph(const std::string& name, const std::string& text) {
    const std::string path = dir_.File(name);
    WriteFileOrDie(path, text);
    return path;
  }
};

TEST_F(AccessTest, EachJobIsOwnedByTheUidOfItsConnectionAcrossRestarts) {
  StartShared();
  const std::string mine = Submit(small_graph_);
  const std::string theirs = SubmitAs(kNobody, small_graph_);
  const std::string unnamed = SubmitAs(kUnnamed, small_graph_);
  for (const std::string& id : {mine, theirs, unnamed}) {
    PollJob(*daemon_, id, StateIs("SUCCEEDED"));
  }
  EXPECT_EQ(GetJson(mine)["owner"], "uid:0");
  EXPECT_EQ(GetJson(mine)["owner_name"], "root");
  EXPECT_EQ(GetJson(theirs)["owner"], "uid:65534");
  EXPECT_EQ(GetJson(theirs)["owner_name"], "nobody");
  EXPECT_EQ(GetJson(unnamed)["owner"], "uid:65533");
  EXPECT_EQ(GetJson(unnamed)["owner_name"], "uid 65533");

  ASSERT_EQ(daemon_->Terminate(std::chrono::seconds(20)).exit_code, 0) << daemon_->Log();
  StartShared();
  EXPECT_EQ(GetJson(theirs)["owner"], "uid:65534");
  RunResult list = As(kNobody, {"list"});
  ASSERT_EQ(list.exit_code, 0) << Describe(list);
  EXPECT_THAT(list.out, ::testing::ContainsRegex(theirs + " +SUCCEEDED +nobody "));
  EXPECT_THAT(list.out, ::testing::ContainsRegex(mine + " +SUCCEEDED +root "));
  RunResult get = daemon_->Ctl({"get", unnamed});
  EXPECT_THAT(get.out, HasSubstr("owner:     uid 65533 (uid:65533)\n"));
}

TEST_F(AccessTest, UsersCancelTheirOwnJobsAndAdminsAnyoneSAndAreLogged) {
  StartShared({"--admin-group", "nogroup"});
  // nobody's primary group is nogroup, the admin group; uid 65533 has no
  // passwd entry, so no groups, and is an ordinary user.
  const std::string root_job = Submit(long_graph_);
  PollJob(*daemon_, root_job, StateIs("RUNNING"));
  const std::string users_job = SubmitAs(kUnnamed, long_graph_);

  RunResult refused = As(kUnnamed, {"cancel", root_job});
  EXPECT_EQ(refused.exit_code, 3) << Describe(refused);
  EXPECT_THAT(refused.err, HasSubstr("PERMISSION_DENIED: job " + root_job +
                                     " belongs to root, not to uid 65533 (uid:65533)"));
  EXPECT_EQ(GetJson(root_job)["state"], "RUNNING");

  RunResult own = As(kUnnamed, {"cancel", users_job});
  EXPECT_EQ(own.exit_code, 0) << Describe(own);
  PollJob(*daemon_, users_job, StateIs("CANCELLED"));

  RunResult by_admin = As(kNobody, {"cancel", root_job});
  EXPECT_EQ(by_admin.exit_code, 0) << Describe(by_admin);
  PollJob(*daemon_, root_job, StateIs("CANCELLED"));
  EXPECT_THAT(daemon_->Log(),
              HasSubstr("job " + root_job + " of root cancelled by the admin nobody (uid:65534)"));
  EXPECT_THAT(daemon_->Log(), Not(HasSubstr("job " + users_job + " of")));
}

TEST_F(AccessTest, NodeWideChangesNeedAnAdmin) {
  StartShared();
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"tuning", "forget", "--all"},
        std::vector<std::string>{"health", "--forget-xids", "0"}}) {
    RunResult refused = As(kNobody, args);
    EXPECT_EQ(refused.exit_code, 3) << args[0] << "\n" << Describe(refused);
    EXPECT_THAT(refused.err, HasSubstr("PERMISSION_DENIED"));
    EXPECT_THAT(refused.err, HasSubstr("admin"));
  }
  RunResult by_root = daemon_->Ctl({"tuning", "forget", "--all"});
  EXPECT_EQ(by_root.exit_code, 0) << Describe(by_root);
}

TEST_F(AccessTest, PriorityAboveTheCapAndAFullQuotaAreRefusedForUsersOnly) {
  StartShared({"--max-user-priority", "5", "--max-queued-jobs-per-user", "2"});
  std::string urgent = kSmallGraph;
  urgent.replace(urgent.find("dtype:"), 0, "priority: 6\n");
  const std::string urgent_graph = Graph("urgent.yaml", urgent);
  RunResult too_high = As(kNobody, {"submit", urgent_graph});
  EXPECT_EQ(too_high.exit_code, 3) << Describe(too_high);
  EXPECT_THAT(too_high.err,
              HasSubstr("PERMISSION_DENIED: priority: 6 is above 5, the highest a user who is not "
                        "an admin may ask for (max_user_priority)"));
  const std::string root_urgent = Submit(urgent_graph);
  EXPECT_EQ(GetJson(root_urgent)["priority"], 6);

  // One running and two queued: the third queued one is over nobody's quota,
  // not over root's.
  const std::string running = SubmitAs(kNobody, long_graph_);
  PollJob(*daemon_, running, StateIs("RUNNING"));
  SubmitAs(kNobody, long_graph_);
  SubmitAs(kNobody, long_graph_);
  RunResult over = As(kNobody, {"submit", long_graph_});
  EXPECT_EQ(over.exit_code, 3) << Describe(over);
  EXPECT_THAT(over.err, HasSubstr("RESOURCE_EXHAUSTED: quota: nobody has 2 jobs queued "
                                  "(max_queued_jobs_per_user = 2)"));
  RunResult others = As(kUnnamed, {"submit", small_graph_});
  EXPECT_EQ(others.exit_code, 0) << Describe(others);
}

// Identity comes from the connection: a call that names a user is refused
// whoever it names, and changes nothing.
TEST_F(AccessTest, ACallThatClaimsAnIdentityIsRefused) {
  StartShared();
  auto stub = v1::Jobs::NewStub(
      grpc::CreateChannel(daemon_->address(), grpc::InsecureChannelCredentials()));
  v1::SubmitJobRequest request;
  request.set_spec(kSmallGraph);
  grpc::ClientContext context;
  context.AddMetadata("overlapd-user", "root");
  v1::SubmitJobResponse response;
  const grpc::Status status = stub->SubmitJob(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::PERMISSION_DENIED) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("may not claim an identity"));
  RunResult list = daemon_->Ctl({"list", "--json"});
  ASSERT_EQ(list.exit_code, 0) << Describe(list);
  EXPECT_EQ(ParseJson(list.out).value("jobs", nlohmann::json::array()).size(), 0u) << list.out;
}

// Plain loopback TCP knows no one: its callers are "anonymous", who may run
// and cancel anonymous jobs and nothing node-wide; the daemon warns.
TEST_F(AccessTest, LoopbackCallersAreAnonymous) {
  const int port = FreeLoopbackPort();
  ASSERT_GT(port, 0);
  daemon_ = std::make_unique<Daemon>(dir_.path());
  daemon_->set_address("127.0.0.1:" + std::to_string(port));
  ASSERT_TRUE(daemon_->Start());
  EXPECT_THAT(daemon_->Log(), HasSubstr("every local user who connects is \"anonymous\""));
  const std::string id = Submit(long_graph_);
  EXPECT_EQ(GetJson(id)["owner"], "anonymous");
  RunResult cancel = daemon_->Ctl({"cancel", id});
  EXPECT_EQ(cancel.exit_code, 0) << Describe(cancel);
  RunResult forget = daemon_->Ctl({"tuning", "forget", "--all"});
  EXPECT_EQ(forget.exit_code, 3) << Describe(forget);
  EXPECT_THAT(forget.err, HasSubstr("PERMISSION_DENIED"));
}

// Whether `watcher` printed job `id`'s first event (it holds a watch slot)
// within 30 s.
bool Watching(const Child& watcher, const std::string& id) {
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (Clock::now() < deadline) {
    if (ReadFileOrEmpty(watcher.err_path()).find("job " + id) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// One user cannot take every watch slot: past their share they are refused
// naming it, while another user and root (an admin) still watch.
TEST_F(AccessTest, OneUserCannotTakeEveryWatchSlot) {
  StartShared({"--max-watchers", "8", "--max-watchers-per-user", "2"});
  const std::string id = Submit(long_graph_);
  std::vector<std::unique_ptr<Child>> watchers;
  for (int i = 0; i < 2; ++i) {
    watchers.push_back(AsAsync(kNobody, {"watch", id}));
    ASSERT_TRUE(Watching(*watchers.back(), id)) << ReadFileOrEmpty(watchers.back()->err_path());
  }
  RunResult third = AsAsync(kNobody, {"watch", id})->Wait(std::chrono::seconds(20));
  EXPECT_EQ(third.exit_code, 3) << Describe(third);
  EXPECT_THAT(third.err, HasSubstr("RESOURCE_EXHAUSTED: the watch share of nobody (uid:65534) "
                                   "is full: 2 watches open (max_watchers_per_user = 2)"));

  watchers.push_back(AsAsync(kUnnamed, {"watch", id}));
  EXPECT_TRUE(Watching(*watchers.back(), id)) << ReadFileOrEmpty(watchers.back()->err_path());
  watchers.push_back(daemon_->CtlAsync({"watch", id}));
  EXPECT_TRUE(Watching(*watchers.back(), id)) << ReadFileOrEmpty(watchers.back()->err_path());

  RunResult cancel = daemon_->Ctl({"cancel", id});
  ASSERT_EQ(cancel.exit_code, 0) << Describe(cancel);
  for (std::unique_ptr<Child>& watcher : watchers) {
    RunResult ended = watcher->Wait(std::chrono::seconds(30));
    EXPECT_EQ(ended.exit_code, 1) << Describe(ended);  // the job was cancelled
  }
}

// A socket whose directory the user cannot enter is not "no socket": the
// client names the directory, the uid and what to ask for.
TEST_F(AccessTest, ASocketDirectoryTheUserCannotEnterIsNamed) {
  StartShared();
  const std::string closed = dir_.File("closed");
  ASSERT_EQ(::mkdir(closed.c_str(), 0700), 0);
  std::vector<std::string> argv = AsUser(kNobody, kNobody);
  argv.insert(argv.end(), {OVERLAPCTL_BIN, "--addr", "unix:" + closed + "/overlapd.sock", "node"});
  RunResult denied = Child::Spawn(argv, dir_.path())->Wait(std::chrono::seconds(30));
  EXPECT_EQ(denied.exit_code, 2) << Describe(denied);
  EXPECT_THAT(denied.err,
              HasSubstr("the socket's directory " + closed + " is not open to uid 65534"));
  EXPECT_THAT(denied.err, HasSubstr("socket_group"));
  EXPECT_THAT(denied.err, Not(HasSubstr("no socket")));

  // The socket itself closed to the user: its group is named.
  const std::string socket = daemon_->address().substr(std::string("unix:").size());
  ASSERT_EQ(::chown(socket.c_str(), 0, 0), 0);
  RunResult refused = As(kNobody, {"node"});
  EXPECT_EQ(refused.exit_code, 2) << Describe(refused);
  EXPECT_THAT(refused.err, HasSubstr("the socket " + socket + " is not open to uid 65534"));
  EXPECT_THAT(refused.err, HasSubstr("group root"));
}

// /tmp/overlapd-UID, where a user without XDG_RUNTIME_DIR listens by
// default: made 0700 when missing, refused by daemon and client alike when
// someone else owns it or others may write it.
class FallbackDirTest : public AccessTest {
 protected:
  void SetUp() override {
    AccessTest::SetUp();
    if (IsSkipped()) return;
    // A uid no one uses, so that its /tmp directory is this test's alone.
    uid_ = 60000 + static_cast<int>(getpid() % 5000);
    fallback_ = "/tmp/overlapd-" + std::to_string(uid_);
    std::error_code ignored;
    std::filesystem::remove_all(fallback_, ignored);
    state_ = dir_.File("user-state");
    ASSERT_EQ(::mkdir(state_.c_str(), 0700), 0);
    ASSERT_EQ(::chown(state_.c_str(), uid_, kNobody), 0);
  }
  void TearDown() override {
    std::error_code ignored;
    if (!fallback_.empty()) std::filesystem::remove_all(fallback_, ignored);
    AccessTest::TearDown();
  }

  // The daemon or overlapctl as the user, without XDG_RUNTIME_DIR or --addr.
  std::vector<std::string> AsTheUser(std::vector<std::string> argv) const {
    std::vector<std::string> all = AsUser(uid_, kNobody);
    all.insert(all.end(), {"/usr/bin/env", "-u", "XDG_RUNTIME_DIR", "-u", "OVERLAPD_ADDR"});
    all.insert(all.end(), argv.begin(), argv.end());
    return all;
  }
  int uid_ = -1;
  std::string fallback_;
  std::string state_;
};

TEST_F(FallbackDirTest, ADirectoryAnotherUserMadeIsRefusedByDaemonAndClient) {
  ASSERT_EQ(::mkdir(fallback_.c_str(), 0755), 0);  // root's, as an attacker's would be
  std::unique_ptr<Child> daemon = Child::Spawn(
      AsTheUser({OVERLAPD_BIN, "--backend", "host", "--host-devices", "2", "--state-dir", state_}),
      dir_.path());
  RunResult refused = daemon->Wait(std::chrono::seconds(30));
  EXPECT_EQ(refused.exit_code, 2) << Describe(refused);
  EXPECT_THAT(refused.err, HasSubstr("listen: refusing " + fallback_ + ": it belongs to uid 0 "
                                     "with mode 0755, and must belong to uid " +
                                     std::to_string(uid_)));

  RunResult client =
      Child::Spawn(AsTheUser({OVERLAPCTL_BIN, "node"}), dir_.path())->Wait(std::chrono::seconds(30));
  EXPECT_NE(client.exit_code, 0) << Describe(client);
  EXPECT_THAT(client.err, HasSubstr("--addr: refusing " + fallback_));
}

TEST_F(FallbackDirTest, TheUsersOwnDirectoryOpenToOthersIsRefusedAndAMissingOneIsMadePrivate) {
  ASSERT_EQ(::mkdir(fallback_.c_str(), 0700), 0);
  ASSERT_EQ(::chown(fallback_.c_str(), uid_, kNobody), 0);
  ASSERT_EQ(::chmod(fallback_.c_str(), 0777), 0);
  RunResult client =
      Child::Spawn(AsTheUser({OVERLAPCTL_BIN, "node"}), dir_.path())->Wait(std::chrono::seconds(30));
  EXPECT_THAT(client.err, HasSubstr("mode 0777"));
  std::unique_ptr<Child> open = Child::Spawn(
      AsTheUser({OVERLAPD_BIN, "--backend", "host", "--host-devices", "2", "--state-dir", state_}),
      dir_.path());
  RunResult refused = open->Wait(std::chrono::seconds(30));
  EXPECT_EQ(refused.exit_code, 2) << Describe(refused);
  EXPECT_THAT(refused.err, HasSubstr("with mode 0777"));

  ASSERT_EQ(::rmdir(fallback_.c_str()), 0);
  std::unique_ptr<Child> daemon = Child::Spawn(
      AsTheUser({OVERLAPD_BIN, "--backend", "host", "--host-devices", "2", "--state-dir", state_}),
      dir_.path());
  RunResult node;
  for (int attempt = 0; attempt < 300; ++attempt) {
    node = Child::Spawn(AsTheUser({OVERLAPCTL_BIN, "node"}), dir_.path())
               ->Wait(std::chrono::seconds(10));
    if (node.exit_code == 0 || !daemon->running()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(node.exit_code, 0) << Describe(node);
  struct stat st {};
  ASSERT_EQ(::lstat(fallback_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  EXPECT_EQ(static_cast<int>(st.st_uid), uid_);
  daemon->Signal(SIGTERM);
  EXPECT_EQ(daemon->Wait(std::chrono::seconds(20)).exit_code, 0);
}

}  // namespace
}  // namespace overlap::testing
