// The session socket end to end on the host backend: a real SessionSocket and
// the lanes in this process, ranks as threads (the C++ client library) or as
// processes (overlapd-session-rank), checked against float64 and for every
// refusal's code.
#include "server/sessions/session_socket.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/session/overlapd_session.h"
#include "common/config.h"
#include "common/dtype.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/engine/host/host_engine.h"
#include "server/jobs/admission.h"
#include "server/sessions/session_lanes.h"
#include "server/sessions/session_plan.h"

namespace overlap::sessions {
namespace {

using session::Session;
using session::SessionOptions;
using session::SharedBuffer;
using session::Tensor;
using session::TensorNeed;
using ::testing::HasSubstr;

constexpr int64_t kM = 16, kK = 8, kN = 12;
constexpr uint64_t kSeed = 77;

std::string AgGemmGraph(int64_t m = kM) {
  return absl::StrCat("name: sess\ndtype: fp32\nops:\n  - {id: fc1, type: ag_gemm, m: ", m,
                      ", k: ", kK, ", n: ", kN, ", mode: auto}\n");
}

int OpenFds() {
  int count = 0;
  DIR* dir = ::opendir("/proc/self/fd");
  while (dir != nullptr && ::readdir(dir) != nullptr) ++count;
  if (dir != nullptr) ::closedir(dir);
  return count;
}

// Lines of /proc/self/<file> that start with `prefix` ("VmRSS:" of status: its kB; or
// every line of maps: the mappings).
int64_t ProcCount(const char* file, const std::string& prefix) {
  std::ifstream in(std::string("/proc/self/") + file);
  std::string line;
  int64_t count = 0;
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) != 0) continue;
    if (prefix.empty()) {
      ++count;
    } else {
      return std::stoll(line.substr(prefix.size()));
    }
  }
  return count;
}

// A rank's tensors as the client allocates them, X and W filled.
struct RankBuffers {
  std::vector<std::pair<TensorNeed, SharedBuffer>> tensors;
  const SharedBuffer& Of(const std::string& op, Tensor tensor) const {
    for (const auto& [need, buffer] : tensors) {
      if (need.op == op && need.tensor == tensor) return buffer;
    }
    std::abort();
  }
};

absl::StatusOr<RankBuffers> AllocateAndRegister(Session& s) {
  RankBuffers out;
  for (const TensorNeed& need : s.needs()) {
    absl::StatusOr<SharedBuffer> buffer = SharedBuffer::Create(static_cast<size_t>(need.bytes));
    if (!buffer.ok()) return buffer.status();
    if (need.tensor == Tensor::kX || need.tensor == Tensor::kW) {
      const uint64_t seed = session::TensorSeed(kSeed, need.op, need.tensor, s.rank());
      for (int64_t i = 0; i < need.rows * need.cols; ++i) {
        StoreFromFloat(buffer->data(), DType::kF32, static_cast<size_t>(i),
                       SeededValue(seed, static_cast<uint64_t>(i)));
      }
    }
    absl::Status registered =
        s.Register(need.op, need.tensor, buffer->fd(), 0, need.bytes, buffer->data());
    if (!registered.ok()) return registered;
    out.tensors.emplace_back(need, *std::move(buffer));
  }
  return out;
}

class SessionSocketTest : public ::testing::Test {
 protected:
  void SetUp() override {
    engine::HostEngineOptions engine_options;
    engine_options.device_count = 2;
    engine_ = std::move(engine::CreateHostEngine(engine_options)).value();
    if (engine_->Shared() == nullptr) GTEST_SKIP() << "the host engine has no shared memory yet";
    admission_ = std::make_unique<jobs::Admission>(*engine_, jobs::AdmissionOptions{});
    lanes_ = std::move(SessionLanes::Start(*engine_)).value();
    std::string pattern =
        (std::filesystem::temp_directory_path() / "overlapd-session-XXXXXX").string();
    dir_ = ::mkdtemp(pattern.data());
    SessionSocketOptions options;
    options.path = dir_ + "/session.sock";
    options.limits.max_per_owner = 3;
    options.join_timeout = absl::Seconds(20);
    options.step_timeout = absl::Seconds(20);
    socket_ =
        std::move(SessionSocket::Start(options, *engine_, *admission_, *lanes_, nullptr)).value();
  }
  void TearDown() override {
    socket_.reset();
    lanes_.reset();
    engine_.reset();
    std::error_code ec;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
  }
  std::string path() const { return socket_->path(); }
  int OpenSessions() {
    int open = 0;
    for (const SessionRow& row : socket_->registry().List("")) {
      open += row.state == "joining" || row.state == "ready" ? 1 : 0;
    }
    return open;
  }
  absl::StatusOr<std::unique_ptr<Session>> Open(const std::string& name, int rank,
                                                const std::string& graph = AgGemmGraph(),
                                                SessionOptions options = {}) {
    options.reply_timeout = absl::Seconds(60);
    return Session::Open(path(), name, graph, rank, options);
  }

  // Both ranks of an AgGemmGraph session `name`, registered and started.
  struct TwoRanks {
    std::unique_ptr<Session> s[2];
    RankBuffers buffers[2];
  };
  absl::Status StartTwoRanks(const std::string& name, TwoRanks& t) {
    for (int r = 0; r < 2; ++r) {
      absl::StatusOr<std::unique_ptr<Session>> s = Open(name, r);
      if (!s.ok()) return s.status();
      t.s[r] = *std::move(s);
      absl::StatusOr<RankBuffers> buffers = AllocateAndRegister(*t.s[r]);
      if (!buffers.ok()) return buffers.status();
      t.buffers[r] = *std::move(buffers);
    }
    absl::Status started1;
    std::thread starter([&] { started1 = t.s[1]->Start(); });
    const absl::Status started0 = t.s[0]->Start();
    starter.join();
    return started0.ok() ? started1 : started0;
  }
  // The session's failure as rank `s` sees it on its ring, within 30 s.
  static absl::Status FailureSeenBy(const Session& s) {
    absl::Status failure;
    for (int i = 0; i < 3000 && failure.ok(); ++i) {
      failure = s.Failure();
      if (failure.ok()) absl::SleepFor(absl::Milliseconds(10));
    }
    return failure;
  }
  // "closed" or "failed" once session `id` ended (within 30 s), else its state.
  std::string EndedState(const std::string& id) {
    std::string state;
    for (int i = 0; i < 3000 && state != "closed" && state != "failed"; ++i) {
      for (const SessionRow& row : socket_->registry().List("")) {
        if (row.id == id) state = row.state;
      }
      if (state != "closed" && state != "failed") absl::SleepFor(absl::Milliseconds(10));
    }
    return state;
  }

  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<jobs::Admission> admission_;
  std::unique_ptr<SessionLanes> lanes_;
  std::unique_ptr<SessionSocket> socket_;
  std::string dir_;
};

TEST_F(SessionSocketTest, TwoRanksRunAgGemmAndYEqualsFloat64) {
  std::vector<std::vector<float>> y(2);
  std::vector<absl::Status> outcome(2);
  auto rank = [&](int r) {
    absl::StatusOr<std::unique_ptr<Session>> s = Open("two", r);
    if (!s.ok()) {
      outcome[r] = s.status();
      return;
    }
    EXPECT_EQ((*s)->world(), 2);
    EXPECT_EQ((*s)->device(), r);
    const TensorNeed* x = (*s)->FindNeed("fc1", Tensor::kX);
    EXPECT_TRUE(x != nullptr && x->rows == kM / 2 && x->cols == kK && x->bytes == kM / 2 * kK * 4);
    absl::StatusOr<RankBuffers> buffers = AllocateAndRegister(**s);
    if (!buffers.ok()) {
      outcome[r] = buffers.status();
      return;
    }
    if (outcome[r] = (*s)->Start(); !outcome[r].ok()) return;
    for (int step = 0; step < 3 && outcome[r].ok(); ++step) {
      absl::StatusOr<uint64_t> seq = (*s)->Post("fc1");
      outcome[r] = seq.ok() ? (*s)->Wait(*seq, absl::Seconds(60)) : seq.status();
    }
    const float* out = static_cast<const float*>(buffers->Of("fc1", Tensor::kY).data());
    y[r].assign(out, out + kM * (kN / 2));
  };
  std::thread t0(rank, 0), t1(rank, 1);
  t0.join();
  t1.join();
  ASSERT_TRUE(outcome[0].ok()) << outcome[0];
  ASSERT_TRUE(outcome[1].ok()) << outcome[1];
  // Y_r = [X_0; X_1] (m x k) times W_r (k x n/2), in float64.
  auto value = [](Tensor tensor, int r, int64_t i) {
    return static_cast<double>(SeededValue(session::TensorSeed(kSeed, "fc1", tensor, r), i));
  };
  for (int r = 0; r < 2; ++r) {
    double worst = 0;
    for (int64_t row = 0; row < kM; ++row) {
      for (int64_t col = 0; col < kN / 2; ++col) {
        double expected = 0;
        for (int64_t k = 0; k < kK; ++k) {
          const int owner = static_cast<int>(row / (kM / 2));
          expected += value(Tensor::kX, owner, (row % (kM / 2)) * kK + k) *
                      value(Tensor::kW, r, k * (kN / 2) + col);
        }
        worst = std::max(worst, std::abs(expected - y[r][row * (kN / 2) + col]));
      }
    }
    EXPECT_LT(worst, 1e-4) << "rank " << r;
  }
}

TEST_F(SessionSocketTest, APipeIsNotSharedMemory) {
  auto s = Open("pipe", 0);
  ASSERT_TRUE(s.ok()) << s.status();
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const TensorNeed* x = (*s)->FindNeed("fc1", Tensor::kX);
  ASSERT_NE(x, nullptr);
  absl::Status status = (*s)->Register("fc1", Tensor::kX, fds[0], 0, x->bytes);
  ::close(fds[0]);
  ::close(fds[1]);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
}

TEST_F(SessionSocketTest, ABufferTooSmallNamesOpTensorAndSizes) {
  auto s = Open("small", 0);
  ASSERT_TRUE(s.ok()) << s.status();
  const TensorNeed* w = (*s)->FindNeed("fc1", Tensor::kW);
  ASSERT_NE(w, nullptr);
  auto buffer = SharedBuffer::Create(static_cast<size_t>(w->bytes));
  ASSERT_TRUE(buffer.ok());
  absl::Status status = (*s)->Register("fc1", Tensor::kW, buffer->fd(), 0, w->bytes - 4);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("fc1"));
  EXPECT_THAT(status.message(), HasSubstr(absl::StrCat(w->bytes)));
  // A memfd smaller than what it claims: the engine refuses it.
  auto tiny = SharedBuffer::Create(64);
  ASSERT_TRUE(tiny.ok());
  status = (*s)->Register("fc1", Tensor::kW, tiny->fd(), 0, w->bytes);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
}

TEST_F(SessionSocketTest, RankOutOfRangeAndDuplicateRank) {
  auto out_of_range = Open("ranks", 2);
  EXPECT_EQ(out_of_range.status().code(), absl::StatusCode::kInvalidArgument);
  auto first = Open("ranks", 1);
  ASSERT_TRUE(first.ok()) << first.status();
  auto again = Open("ranks", 1);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists) << again.status();
  auto other_graph = Open("ranks", 0, AgGemmGraph(2 * kM));
  EXPECT_EQ(other_graph.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(SessionSocketTest, TheSessionCapPerOwner) {
  std::vector<std::unique_ptr<Session>> open;
  for (int i = 0; i < 3; ++i) {
    auto s = Open(absl::StrCat("cap", i), 0);
    ASSERT_TRUE(s.ok()) << s.status();
    open.push_back(*std::move(s));
  }
  auto one_more = Open("cap3", 0);
  EXPECT_EQ(one_more.status().code(), absl::StatusCode::kResourceExhausted) << one_more.status();
}

TEST_F(SessionSocketTest, StartingBeforeRegisteringListsWhatIsMissing) {
  auto s = Open("missing", 0);
  ASSERT_TRUE(s.ok()) << s.status();
  absl::Status started = (*s)->Start();
  EXPECT_EQ(started.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(started.message(), HasSubstr("fc1 W"));
  EXPECT_THAT(started.message(), HasSubstr("SIGNALS"));
}

TEST_F(SessionSocketTest, ARankThatNeverStartsIsNamed) {
  SessionOptions options;
  options.join_timeout_s = 1;
  auto s0 = Open("late", 0, AgGemmGraph(), options);
  ASSERT_TRUE(s0.ok()) << s0.status();
  auto s1 = Open("late", 1, AgGemmGraph(), options);  // joins, never starts
  ASSERT_TRUE(s1.ok()) << s1.status();
  auto buffers = AllocateAndRegister(**s0);
  ASSERT_TRUE(buffers.ok()) << buffers.status();
  absl::Status started = (*s0)->Start();
  EXPECT_EQ(started.code(), absl::StatusCode::kDeadlineExceeded) << started;
  EXPECT_THAT(started.message(), HasSubstr("rank(s) 1 "));
}

TEST_F(SessionSocketTest, AKilledRankFailsTheOthersWaitNamingIt) {
  const std::string graph_path = dir_ + "/graph.yaml";
  {
    std::FILE* f = std::fopen(graph_path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs(AgGemmGraph().c_str(), f);
    std::fclose(f);
  }
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::execl(SESSION_RANK_BIN, SESSION_RANK_BIN, "--socket", path().c_str(), "--name", "kill",
            "--graph", graph_path.c_str(), "--rank", "1", "--steps", "0", "--linger-s", "120",
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  auto s = Open("kill", 0);
  ASSERT_TRUE(s.ok()) << s.status();
  auto buffers = AllocateAndRegister(**s);
  ASSERT_TRUE(buffers.ok()) << buffers.status();
  absl::Status started = (*s)->Start();  // returns once rank 1 has started too
  ::kill(child, SIGKILL);
  int wstatus = 0;
  ::waitpid(child, &wstatus, 0);
  ASSERT_TRUE(started.ok()) << started;
  absl::Status failed;
  for (int i = 0; i < 100 && failed.ok(); ++i) {
    absl::StatusOr<uint64_t> seq = (*s)->Post("fc1");
    failed = seq.ok() ? (*s)->Wait(*seq, absl::Seconds(30)) : seq.status();
  }
  EXPECT_EQ(failed.code(), absl::StatusCode::kUnavailable) << failed;
  EXPECT_THAT(failed.message(), HasSubstr(absl::StrCat("rank 1 (pid ", child, ")")));
}

TEST_F(SessionSocketTest, ARankThatClosesAfterItsLastStepEndsTheSessionClosed) {
  TwoRanks t;
  ASSERT_TRUE(StartTwoRanks("done", t).ok());
  const std::string id = t.s[0]->id();
  for (int step = 0; step < 2; ++step) {
    for (int r = 0; r < 2; ++r) ASSERT_TRUE(t.s[r]->Post("fc1").ok());
    for (int r = 0; r < 2; ++r) ASSERT_TRUE(t.s[r]->Wait(step + 1, absl::Seconds(30)).ok());
  }
  t.s[0]->Close();  // its training is done: it says so
  const absl::Status failure = FailureSeenBy(*t.s[1]);
  EXPECT_EQ(failure.code(), absl::StatusCode::kCancelled) << failure;
  EXPECT_THAT(failure.message(), HasSubstr(absl::StrCat("rank 0 (pid ", ::getpid(), ")")));
  EXPECT_TRUE(t.s[1]->Wait(2, absl::Seconds(1)).ok());  // its last step stays done
  const std::string state = EndedState(id);
  EXPECT_EQ(state, "closed");
}

TEST_F(SessionSocketTest, ARankThatClosesMidStepFailsTheSession) {
  TwoRanks t;
  ASSERT_TRUE(StartTwoRanks("midstep", t).ok());
  const std::string id = t.s[0]->id();
  ASSERT_TRUE(t.s[0]->Post("fc1").ok());  // rank 1 never posts it: the step cannot complete
  t.s[0]->Close();
  const absl::Status failure = FailureSeenBy(*t.s[1]);
  EXPECT_EQ(failure.code(), absl::StatusCode::kUnavailable) << failure;
  EXPECT_THAT(failure.message(), HasSubstr("with command 1 not completed"));
  const std::string state = EndedState(id);
  EXPECT_EQ(state, "failed");
}

TEST_F(SessionSocketTest, ListsSessionsAndClosesThem) {
  auto s = Open("listed", 0);
  ASSERT_TRUE(s.ok()) << s.status();
  std::vector<SessionRow> rows = socket_->registry().List("");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].id, (*s)->id());
  EXPECT_EQ(rows[0].state, "joining");
  EXPECT_EQ(rows[0].ranks_joined, 1);
  EXPECT_EQ(rows[0].world, 2);
  EXPECT_EQ(socket_->registry().Close((*s)->id(), "uid:999999", false, "someone").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(socket_->registry().Close("sess-999999", rows[0].owner, false, "me").code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(socket_->registry().Close((*s)->id(), rows[0].owner, false, "me").ok());
  absl::Status started = (*s)->Start();
  EXPECT_EQ(started.code(), absl::StatusCode::kCancelled) << started;
}

TEST_F(SessionSocketTest, SessionsAreKeyedByOwner) {
  absl::StatusOr<SessionPlan> plan = PlanSession(*admission_, *engine_, AgGemmGraph());
  ASSERT_TRUE(plan.ok()) << plan.status();
  OpenRequest request;
  request.name = "same";
  request.graph_text = AgGemmGraph();
  auto alice = socket_->registry().Join({"uid:1001", "alice", 1}, request, *plan, -1);
  auto bob = socket_->registry().Join({"uid:1002", "bob", 2}, request, *plan, -1);
  ASSERT_TRUE(alice.ok()) << alice.status();
  ASSERT_TRUE(bob.ok()) << bob.status();  // rank 0 of another owner's session of that name
  EXPECT_NE(alice->session_id, bob->session_id);
  EXPECT_EQ(socket_->registry().Close(alice->session_id, "uid:1002", false, "bob").code(),
            absl::StatusCode::kPermissionDenied);
  socket_->registry().Leave(alice->ticket);
  socket_->registry().Leave(bob->ticket);
}

TEST_F(SessionSocketTest, TenThousandCyclesLeaveNothingBehind) {
  // Warm up what is made once (threads, the allocator's arenas).
  {
    auto s = Open("cycle", 0);
    ASSERT_TRUE(s.ok()) << s.status();
  }
  absl::SleepFor(absl::Milliseconds(200));
  const int fds_before = OpenFds();
  const int64_t maps_before = ProcCount("maps", "");
  const int64_t rss_kb_before = ProcCount("status", "VmRSS:");
  for (int i = 0; i < 10000; ++i) {
    auto s = Open("cycle", 0);
    ASSERT_TRUE(s.ok()) << i << ": " << s.status();
    auto buffers = AllocateAndRegister(**s);
    ASSERT_TRUE(buffers.ok()) << i << ": " << buffers.status();
    EXPECT_GT(socket_->registry().MappedBytes(), 0);
    (*s)->Close();
    // The daemon side lets the rank go once it sees the connection close.
    for (int wait = 0; wait < 20000 && OpenSessions() > 0; ++wait) {
      absl::SleepFor(absl::Milliseconds(1));
    }
  }
  for (int wait = 0;
       wait < 3000 && (OpenFds() > fds_before || socket_->registry().MappedBytes() > 0); ++wait) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(socket_->registry().MappedBytes(), 0);
  EXPECT_LE(OpenFds(), fds_before);
  // Every mapping made for a cycle (ring, tensors) is gone, and the memory
  // with it: the client's and the daemon's side live in this process, so 16
  // MiB covers the allocator's arenas, not 10,000 cycles' leaks.
  EXPECT_LE(ProcCount("maps", ""), maps_before + 8);
  EXPECT_LE(ProcCount("status", "VmRSS:"), rss_kb_before + 16 * 1024);
}

TEST(SessionSocketPathTest, BesideTheApiSocketNamedAfterIt) {
  DaemonConfig config;
  config.listen = "unix:/run/x/overlapd.sock";
  EXPECT_EQ(SessionSocketPath(config), "/run/x/overlapd-session.sock");
  config.listen = "unix:/tmp/d/s.sock";
  EXPECT_EQ(SessionSocketPath(config), "/tmp/d/s-session.sock");
  config.listen = "127.0.0.1:7070";
  EXPECT_EQ(SessionSocketPath(config), "");  // no API socket to sit beside
  config.session_socket = "unix:/tmp/mine.sock";
  EXPECT_EQ(SessionSocketPath(config), "/tmp/mine.sock");
  config.session_socket = "off";
  config.listen = "unix:/run/x/overlapd.sock";
  EXPECT_EQ(SessionSocketPath(config), "");
}

}  // namespace
}  // namespace overlap::sessions
