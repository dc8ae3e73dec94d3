// The lanes on the host backend (2 simulated devices, the hazard checker on),
// without sockets: sessions built by hand over memfd tensors, rings and
// eventfds, driven as a client drives them (inputs ready, post, doorbell,
// wait for completed). Outputs against float64; a desync, inputs that never
// come and End() fail with their codes, naming ranks; a deferred session's
// chunks beside a critical session never start inside its collectives
// unless forced.
#include "server/sessions/session_lanes.h"

#include <dirent.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "common/activation.h"
#include "common/graph_parser.h"
#include "server/engine/forwarding_engine.h"
#include "server/sessions/session_run.h"
#include "tests/host_engine_util.h"
#include "tests/slow_engine.h"

namespace overlap::sessions {
namespace {

using ::testing::HasSubstr;

// Shared memory the client creates and maps; the daemon imports or maps the fd.
struct Shm {
  OwnedFd fd;
  void* data = nullptr;
  size_t bytes = 0;
  Shm() = default;
  explicit Shm(size_t size) : bytes(size) {
    fd = OwnedFd(memfd_create("session-test", MFD_CLOEXEC));
    EXPECT_TRUE(fd.valid());
    EXPECT_EQ(ftruncate(fd.get(), static_cast<off_t>(bytes)), 0);
    data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
    EXPECT_NE(data, MAP_FAILED);
  }
  Shm(Shm&& other) noexcept
      : fd(std::move(other.fd)), data(std::exchange(other.data, nullptr)), bytes(other.bytes) {}
  ~Shm() {
    if (data != nullptr) munmap(data, bytes);
  }
  float* floats() { return static_cast<float*>(data); }
};

// One rank as its client holds it: its ring, doorbells, tensors, signals.
struct ClientRank {
  int device = 0;
  Shm ring_memory{kSessionRingBytes};
  Shm signals{kSignalBytes};
  OwnedFd posted;            // the client writes it after posting
  OwnedFd completed;         // the daemon writes it after completing
  std::vector<Shm> x, w, y;  // by op; bytes 0 where the op has none
  SessionRing* ring() { return static_cast<SessionRing*>(ring_memory.data); }
  uint64_t* words() { return static_cast<uint64_t*>(signals.data); }
};

size_t Bytes(int64_t rows, int64_t cols) { return static_cast<size_t>(rows * cols) * 4; }

// A session of `ranks` ranks on devices 0.. for `graph` (f32), each op on
// `schedules`, as the socket would hand it to the lanes; `clients` keeps the
// clients' side.
class Session {
 public:
  Session(engine::Engine& engine, const std::string& id, const std::string& yaml,
          std::vector<ops::Schedule> schedules, int ranks = 2) {
    absl::StatusOr<JobSpec> graph = ParseJobSpec(yaml);
    EXPECT_TRUE(graph.ok()) << graph.status();
    setup.id = id;
    setup.name = id;
    setup.owner = "uid:1000";
    setup.graph = *graph;
    setup.schedules = std::move(schedules);
    setup.step_timeout = absl::Seconds(30);
    for (int r = 0; r < ranks; ++r) {
      ClientRank& c = clients.emplace_back();
      c.device = r;
      c.ring()->magic = kSessionRingMagic;
      c.ring()->version = kSessionRingVersion;
      c.posted = OwnedFd(eventfd(0, EFD_CLOEXEC));
      c.completed = OwnedFd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
      SessionRank& rank = setup.ranks.emplace_back();
      rank.rank = r;
      rank.device = r;
      rank.pid = getpid();
      rank.ring_fd = OwnedFd(dup(c.ring_memory.fd.get()));
      rank.ring = static_cast<SessionRing*>(mmap(nullptr, kSessionRingBytes, PROT_READ | PROT_WRITE,
                                                 MAP_SHARED, rank.ring_fd.get(), 0));
      rank.posted_doorbell = OwnedFd(dup(c.posted.get()));
      rank.completed_doorbell = OwnedFd(dup(c.completed.get()));
      rank.signals = Import(engine, r, c.signals);
      for (const OpSpec& op : setup.graph.ops) {
        const LocalShapes s = LocalShapesFor(op, ranks);
        RankTensors& t = rank.tensors.emplace_back();
        c.x.emplace_back(Bytes(s.a_rows, s.a_cols));
        t.x = Import(engine, r, c.x.back());
        if (s.w_rows > 0) {
          c.w.emplace_back(Bytes(s.w_rows, s.w_cols));
          t.w = Import(engine, r, c.w.back());
        } else {
          c.w.emplace_back();
        }
        c.y.emplace_back(Bytes(s.y_rows, s.y_cols));
        t.y = Import(engine, r, c.y.back());
      }
    }
  }

  static engine::BufferId Import(engine::Engine& engine, int device, const Shm& shm) {
    absl::StatusOr<engine::BufferId> id =
        engine.Shared()->ImportBuffer(device, shm.fd.get(), 0, shm.bytes);
    EXPECT_TRUE(id.ok()) << id.status();
    return id.ok() ? *id : engine::kNoBuffer;
  }

  // Rank r posts command `seq` for `op`; its inputs are ready first unless not.
  void Post(int r, uint64_t seq, int32_t op, bool inputs_ready = true) {
    ClientRank& c = clients[r];
    if (inputs_ready) __atomic_store_n(&c.words()[0], seq, __ATOMIC_RELEASE);
    SessionCommand& slot = c.ring()->slots[seq % kSessionRingSlots];
    slot.seq = seq;
    slot.op = op;
    slot.posted_ns = MonotonicNs();
    c.ring()->posted.store(seq, std::memory_order_release);
    const uint64_t one = 1;
    ASSERT_EQ(write(c.posted.get(), &one, sizeof(one)), static_cast<ssize_t>(sizeof(one)));
  }
  void PostAll(uint64_t seq, int32_t op) {
    for (size_t r = 0; r < clients.size(); ++r) Post(static_cast<int>(r), seq, op);
  }

  // Waits (at most `limit`) until rank r's command `seq` completed or its
  // ring says the session failed: the code, 0 when it completed.
  int32_t Wait(int r, uint64_t seq, absl::Duration limit = absl::Seconds(60)) {
    ClientRank& c = clients[r];
    const absl::Time give_up = absl::Now() + limit;
    while (absl::Now() < give_up) {
      const int32_t failed = c.ring()->failed_code.load(std::memory_order_acquire);
      if (failed != 0) return failed;
      if (c.ring()->completed.load(std::memory_order_acquire) >= seq) return 0;
      pollfd p{c.completed.get(), POLLIN, 0};
      if (poll(&p, 1, 50) > 0) {
        uint64_t count = 0;
        (void)!read(c.completed.get(), &count, sizeof(count));
      }
    }
    ADD_FAILURE() << "rank " << r << ": command " << seq << " neither completed nor failed";
    return -1;
  }
  std::string Message(int r) { return clients[r].ring()->failed_message; }

  SessionSetup setup;
  std::vector<ClientRank> clients;
};

void Fill(Shm& shm, uint64_t seed) {
  const size_t n = shm.bytes / 4;
  for (size_t i = 0; i < n; ++i) {
    shm.floats()[i] = static_cast<float>(((i * 2654435761u + seed * 97) % 1000) / 500.0 - 1.0);
  }
}

// Rows of `rank`'s shards stacked: [rows * ranks, cols] from each [rows, cols].
std::vector<double> StackRows(std::vector<ClientRank>& c, int op, int64_t rows, int64_t cols,
                              bool from_x) {
  std::vector<double> out;
  for (ClientRank& rank : c) {
    const float* p = (from_x ? rank.x[op] : rank.w[op]).floats();
    out.insert(out.end(), p, p + rows * cols);
  }
  return out;
}

// C[m, n] = A[m, k] x B[k, n], row-major, in double.
std::vector<double> MatMul(const std::vector<double>& a, const std::vector<double>& b, int64_t m,
                           int64_t k, int64_t n) {
  std::vector<double> c(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t p = 0; p < k; ++p) {
      for (int64_t j = 0; j < n; ++j) c[i * n + j] += a[i * k + p] * b[p * n + j];
    }
  }
  return c;
}

// The largest |got - want| / (|want| + 1) over `want`.
double MaxError(const float* got, const std::vector<double>& want) {
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst, std::abs(got[i] - want[i]) / (std::abs(want[i]) + 1));
  }
  return worst;
}

constexpr double kTolerance = 1e-4;

ops::Schedule Serial() { return ops::Schedule{OverlapMode::kSerial, 1, Transport::kNccl}; }

constexpr char kAgGemm[] = R"(name: fc1
dtype: f32
ops:
  - {id: fc1, type: ag_gemm, m: 64, k: 32, n: 48, mode: serial, transport: nccl}
)";

// fc1 (ag_gemm), GELU, fc2 (gemm_rs): an MLP block, fc2's X made from fc1's Y.
constexpr char kMlp[] = R"(name: mlp
dtype: f32
ops:
  - {id: fc1, type: ag_gemm, m: 64, k: 32, n: 48, mode: serial, transport: nccl}
  - {id: fc2, type: gemm_rs, m: 64, k: 48, n: 32, mode: serial, transport: nccl, input: fc1, activation: gelu}
)";

// The lanes over the host backend; with `slow_collective`, device 1's
// critical collectives take that long more (SlowEngine).
struct Lanes {
  std::unique_ptr<engine::Engine> host = CheckedHostEngine(2);
  std::unique_ptr<engine::Engine> slow;
  std::unique_ptr<SessionLanes> lanes;
  absl::Mutex mu;
  std::vector<std::string> ended ABSL_GUARDED_BY(mu);
  std::map<std::string, absl::Status> ended_as ABSL_GUARDED_BY(mu);
  explicit Lanes(LanesOptions options = {}, absl::Duration slow_collective = absl::ZeroDuration()) {
    if (slow_collective > absl::ZeroDuration()) {
      slow = std::make_unique<SlowEngine>(*host, 1, absl::ZeroDuration(), slow_collective);
    }
    absl::StatusOr<std::unique_ptr<SessionLanes>> started = SessionLanes::Start(engine(), options);
    EXPECT_TRUE(started.ok()) << started.status();
    lanes = std::move(*started);
    lanes->OnEnded([this](const std::string& id, const absl::Status& status) {
      absl::MutexLock lock(&mu);
      ended.push_back(id);
      ended_as[id] = status;
    });
  }
  bool Ended(const std::string& id) {
    const absl::Time give_up = absl::Now() + absl::Seconds(60);
    while (absl::Now() < give_up) {
      {
        absl::MutexLock lock(&mu);
        if (std::find(ended.begin(), ended.end(), id) != ended.end()) return true;
      }
      absl::SleepFor(absl::Milliseconds(5));
    }
    return false;
  }
  // How session `id` ended, once Ended(id).
  absl::Status EndedAs(const std::string& id) {
    absl::MutexLock lock(&mu);
    return ended_as[id];
  }
  engine::Engine& engine() { return slow != nullptr ? *slow : *host; }
  // Whether the recent intervals satisfy `done` within a minute: the lanes
  // publish a span once they read its events, after its command completed.
  bool IntervalsReach(const std::function<bool(const std::vector<LaneInterval>&)>& done) {
    const absl::Time give_up = absl::Now() + absl::Seconds(60);
    while (absl::Now() < give_up) {
      if (done(lanes->RecentIntervals())) return true;
      absl::SleepFor(absl::Milliseconds(2));
    }
    return false;
  }
  ~Lanes() { lanes.reset(); }  // before the engine
};

TEST(SessionLanesTest, AgGemmStepsMatchFloat64) {
  Lanes lanes;
  Session s(lanes.engine(), "sess-1", kAgGemm, {Serial()});
  std::vector<ClientRank>& c = s.clients;
  ASSERT_TRUE(lanes.lanes->Add(std::move(s.setup)).ok());
  for (uint64_t seq = 1; seq <= 3; ++seq) {
    SCOPED_TRACE(seq);
    for (int r = 0; r < 2; ++r) {
      Fill(c[r].x[0], seq * 10 + r);
      Fill(c[r].w[0], 100 + r);
    }
    s.PostAll(seq, 0);
    ASSERT_EQ(s.Wait(0, seq), 0) << s.Message(0);
    ASSERT_EQ(s.Wait(1, seq), 0) << s.Message(1);
    const std::vector<double> a = StackRows(c, 0, 32, 32, /*from_x=*/true);
    for (int r = 0; r < 2; ++r) {
      const float* w = c[r].w[0].floats();
      const std::vector<double> want = MatMul(a, {w, w + 32 * 24}, 64, 32, 24);
      EXPECT_LE(MaxError(c[r].y[0].floats(), want), kTolerance) << "rank " << r;
      // outputs_ready follows the step.
      EXPECT_EQ(__atomic_load_n(&c[r].words()[1], __ATOMIC_ACQUIRE), seq);
    }
  }
  for (int r = 0; r < 2; ++r) {
    SessionRing& ring = *c[r].ring();
    EXPECT_EQ(ring.taken.load(), 3u);
    EXPECT_EQ(ring.enqueued.load(), 3u);
    EXPECT_EQ(ring.completed.load(), 3u);
    const SessionCommand& slot = ring.slots[3];
    EXPECT_EQ(slot.status, 0);
    EXPECT_GE(slot.enqueued_ns, slot.posted_ns);
    EXPECT_GE(slot.done_ns, slot.enqueued_ns);
    // The rank's own split: its call, the lanes reading it, the enqueue.
    EXPECT_GE(slot.taken_ns, slot.posted_ns);
    EXPECT_LE(slot.taken_ns, slot.enqueued_ns);
  }
  const std::vector<SessionFigures> figures = lanes.lanes->Figures();
  ASSERT_EQ(figures.size(), 1u);
  EXPECT_EQ(figures[0].id, "sess-1");
  EXPECT_FALSE(figures[0].failed);
  EXPECT_EQ(figures[0].steps, 3);
  ASSERT_EQ(figures[0].ops.size(), 1u);
  EXPECT_EQ(figures[0].ops[0].op, "fc1");
  EXPECT_EQ(figures[0].ops[0].steps, 3);
  EXPECT_GT(figures[0].enqueue_p99_us, 0);
  EXPECT_GE(figures[0].enqueue_p99_us, figures[0].enqueue_p50_us);
  // The host backend captures no graphs: every step's op went directly.
  EXPECT_EQ(figures[0].pieces_replayed, 0);
  EXPECT_EQ(figures[0].pieces_direct, 3);
  // Each step's span on both devices, with its step; rank 0's (device 0) are
  // the op's device times: summed, counted, the last one kept.
  ASSERT_TRUE(lanes.IntervalsReach(
      [](const std::vector<LaneInterval>& intervals) { return intervals.size() == 6; }));
  std::map<uint64_t, std::set<int>> devices_of_step;
  double rank0_total = 0, rank0_last = 0;
  for (const LaneInterval& i : lanes.lanes->RecentIntervals()) {
    devices_of_step[i.seq].insert(i.device);
    if (i.device != 0) continue;
    rank0_total += i.end_ms - i.start_ms;
    rank0_last = i.end_ms - i.start_ms;
  }
  EXPECT_EQ(devices_of_step,
            (std::map<uint64_t, std::set<int>>{{1, {0, 1}}, {2, {0, 1}}, {3, {0, 1}}}));
  const SessionOpFigures op = lanes.lanes->Figures()[0].ops[0];
  EXPECT_EQ(op.timed_steps, 3);
  EXPECT_DOUBLE_EQ(op.device_ms_total, rank0_total);
  EXPECT_DOUBLE_EQ(op.last_ms, rank0_last);
  EXPECT_EQ(op.over_bound, 0);  // a critical session has no bound
}

TEST(SessionLanesTest, ALayerCommandRunsTheMlpWithItsActivation) {
  Lanes lanes;
  Session s(lanes.engine(), "sess-mlp", kMlp, {Serial(), Serial()});
  std::vector<ClientRank>& c = s.clients;
  ASSERT_TRUE(lanes.lanes->Add(std::move(s.setup)).ok());
  for (int r = 0; r < 2; ++r) {
    Fill(c[r].x[0], 1 + r);
    Fill(c[r].w[0], 10 + r);
    Fill(c[r].w[1], 20 + r);
  }
  s.PostAll(1, kSessionRunLayer);
  ASSERT_EQ(s.Wait(0, 1), 0) << s.Message(0);
  ASSERT_EQ(s.Wait(1, 1), 0) << s.Message(1);
  // H = gelu(A x [W1_0 | W1_1]); fc2's Y = H x [W2_0; W2_1], rank r's rows.
  const std::vector<double> a = StackRows(c, 0, 32, 32, /*from_x=*/true);
  std::vector<double> w1(32 * 48);
  for (int r = 0; r < 2; ++r) {
    for (int i = 0; i < 32; ++i) {
      for (int j = 0; j < 24; ++j) w1[i * 48 + r * 24 + j] = c[r].w[0].floats()[i * 24 + j];
    }
  }
  std::vector<double> h = MatMul(a, w1, 64, 32, 48);
  for (double& v : h) v = Gelu(v);
  const std::vector<double> w2 = StackRows(c, 1, 24, 32, /*from_x=*/false);
  const std::vector<double> y = MatMul(h, w2, 64, 48, 32);
  for (int r = 0; r < 2; ++r) {
    const std::vector<double> rows(y.begin() + r * 32 * 32, y.begin() + (r + 1) * 32 * 32);
    EXPECT_LE(MaxError(c[r].y[1].floats(), rows), kTolerance) << "rank " << r;
  }
  const std::vector<SessionFigures> figures = lanes.lanes->Figures();
  ASSERT_EQ(figures.size(), 1u);
  EXPECT_EQ(figures[0].steps, 1);
  EXPECT_EQ(figures[0].ops[0].steps, 1);
  EXPECT_EQ(figures[0].ops[1].steps, 1);
}

TEST(SessionLanesTest, ADesyncFailsTheSessionNamingTheRanks) {
  Lanes lanes;
  Session s(lanes.engine(), "sess-desync", kMlp, {Serial(), Serial()});
  ASSERT_TRUE(lanes.lanes->Add(std::move(s.setup)).ok());
  s.PostAll(1, 0);
  ASSERT_EQ(s.Wait(0, 1), 0);
  s.Post(0, 2, 0);
  s.Post(1, 2, 1);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(s.Wait(r, 2), static_cast<int32_t>(absl::StatusCode::kFailedPrecondition));
    EXPECT_EQ(s.Message(r), "desync: rank 0 posted fc1 as command 2, rank 1 posted fc2");
    EXPECT_EQ(s.clients[r].ring()->completed.load(), 1u);
  }
  EXPECT_TRUE(lanes.Ended("sess-desync"));
  const std::vector<SessionFigures> figures = lanes.lanes->Figures();
  ASSERT_EQ(figures.size(), 1u);
  EXPECT_TRUE(figures[0].failed);
  EXPECT_THAT(figures[0].error, HasSubstr("desync"));
}

TEST(SessionLanesTest, InputsThatNeverComeFailWithDeadlineExceeded) {
  Lanes lanes;
  Session s(lanes.engine(), "sess-late", kAgGemm, {Serial()});
  s.setup.step_timeout = absl::Milliseconds(300);
  ASSERT_TRUE(lanes.lanes->Add(std::move(s.setup)).ok());
  s.Post(0, 1, 0);
  s.Post(1, 1, 0, /*inputs_ready=*/false);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(s.Wait(r, 1), static_cast<int32_t>(absl::StatusCode::kDeadlineExceeded));
    EXPECT_THAT(s.Message(r), HasSubstr("rank 1's inputs-ready signal for command 1 never came"));
    EXPECT_EQ(s.clients[r].ring()->completed.load(), 0u);
    EXPECT_EQ(s.clients[r].ring()->slots[1].status,
              static_cast<int32_t>(absl::StatusCode::kDeadlineExceeded));
  }
  EXPECT_TRUE(lanes.Ended("sess-late"));
  EXPECT_EQ(lanes.lanes->End("sess-late", absl::StatusCode::kCancelled, "again").code(),
            absl::StatusCode::kNotFound);
}

TEST(SessionLanesTest, AnOpTheSessionDoesNotHaveFailsIt) {
  Lanes lanes;
  Session s(lanes.engine(), "sess-op", kAgGemm, {Serial()});
  ASSERT_TRUE(lanes.lanes->Add(std::move(s.setup)).ok());
  s.Post(1, 1, 3);
  EXPECT_EQ(s.Wait(0, 1), static_cast<int32_t>(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(s.Message(0), "rank 1 posted op 3 as command 1; the session has 1 ops");
  EXPECT_TRUE(lanes.Ended("sess-op"));
}

TEST(SessionLanesTest, EndFailsPendingCommandsCancelled) {
  Lanes lanes;
  Session s(lanes.engine(), "sess-end", kAgGemm, {Serial()});
  ASSERT_TRUE(lanes.lanes->Add(std::move(s.setup)).ok());
  s.Post(0, 1, 0);  // rank 1 never posts it
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  while (s.clients[0].ring()->taken.load() < 1 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_TRUE(
      lanes.lanes->End("sess-end", absl::StatusCode::kCancelled, "its client went away", 1).ok());
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(s.Wait(r, 1), static_cast<int32_t>(absl::StatusCode::kCancelled));
    EXPECT_THAT(s.Message(r), HasSubstr("rank 1"));
    EXPECT_THAT(s.Message(r), HasSubstr("its client went away"));
  }
  EXPECT_EQ(s.clients[0].ring()->slots[1].status,
            static_cast<int32_t>(absl::StatusCode::kCancelled));
  EXPECT_TRUE(lanes.Ended("sess-end"));
  EXPECT_EQ(lanes.lanes->End("sess-unknown", absl::StatusCode::kCancelled, "x").code(),
            absl::StatusCode::kNotFound);
}

TEST(SessionLanesTest, EndReleasesAStreamWaitingForInputsThatWillNotCome) {
  // Without the hazard checker: the lanes write the word from another stream
  // while the waiting one reads it, which is the point.
  engine::HostEngineOptions host;
  host.device_count = 2;
  std::unique_ptr<engine::Engine> engine = std::move(engine::CreateHostEngine(host)).value();
  absl::StatusOr<std::unique_ptr<SessionLanes>> lanes = SessionLanes::Start(*engine);
  ASSERT_TRUE(lanes.ok()) << lanes.status();
  absl::Notification ended;
  (*lanes)->OnEnded([&](const std::string&, const absl::Status&) { ended.Notify(); });
  Session s(*engine, "sess-gone", kAgGemm, {Serial()});
  s.setup.step_timeout = absl::Hours(1);
  ASSERT_TRUE((*lanes)->Add(std::move(s.setup)).ok());
  s.Post(0, 1, 0);
  s.Post(1, 1, 0, /*inputs_ready=*/false);  // its client is killed before it writes them
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  while (s.clients[1].ring()->enqueued.load() < 1 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  ASSERT_TRUE(
      (*lanes)->End("sess-gone", absl::StatusCode::kUnavailable, "rank 1 (pid 7) is gone", 1).ok());
  EXPECT_EQ(s.Wait(0, 1), static_cast<int32_t>(absl::StatusCode::kUnavailable));
  EXPECT_EQ(s.Message(0), "rank 1 (pid 7) is gone");
  // Released long before the hour the wait had.
  EXPECT_TRUE(ended.WaitForNotificationWithTimeout(absl::Seconds(60)));
  lanes->reset();
}

TEST(SessionLanesTest, ASetupThatDoesNotMatchItsGraphIsRefused) {
  Lanes lanes;
  Session s(lanes.engine(), "sess-bad", kMlp, {Serial()});  // one schedule for two ops
  EXPECT_EQ(lanes.lanes->Add(std::move(s.setup)).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(lanes.lanes->Figures().empty());
  Session again(lanes.engine(), "sess-bad", kMlp, {Serial(), Serial()});
  EXPECT_TRUE(lanes.lanes->Add(std::move(again.setup)).ok());  // the id is free again
  Session twin(lanes.engine(), "sess-bad", kMlp, {Serial(), Serial()});
  EXPECT_EQ(lanes.lanes->Add(std::move(twin.setup)).code(), absl::StatusCode::kAlreadyExists);
}

// A big gradient all-reduce, deferred, cut into 16 chunks of 64 KiB.
constexpr char kGrads[] = R"(name: grads
dtype: f32
ops:
  - {id: grads, type: all_reduce, m: 1024, n: 256, mode: serial, transport: nccl}
)";

TEST(SessionLanesTest, DeferredChunksNeverStartInsideAnotherSessionsCriticalWork) {
  LanesOptions options;
  options.lane_ahead_ms = 0;  // one chunk on a lane at a time
  // Critical collectives long against the slack below: a chunk that went
  // into one would show.
  Lanes lanes(options, absl::Milliseconds(20));
  Session critical(lanes.engine(), "sess-critical", kMlp, {Serial(), Serial()});
  Session deferred(lanes.engine(), "sess-deferred", kGrads, {Serial()});
  deferred.setup.priority = Priority::kDeferred;
  deferred.setup.deferred_bound_ms = 60'000;
  deferred.setup.chunk_bytes = 64 << 10;
  for (int r = 0; r < 2; ++r) {
    Fill(critical.clients[r].x[0], 1 + r);
    Fill(critical.clients[r].w[0], 10 + r);
    Fill(critical.clients[r].w[1], 20 + r);
    Fill(deferred.clients[r].x[0], 30 + r);
  }
  ASSERT_TRUE(lanes.lanes->Add(std::move(critical.setup)).ok());
  ASSERT_TRUE(lanes.lanes->Add(std::move(deferred.setup)).ok());
  std::atomic<bool> deferred_done{false};
  std::thread steps([&] {
    for (uint64_t seq = 1; seq <= 200 && (seq <= 20 || !deferred_done.load()); ++seq) {
      critical.PostAll(seq, kSessionRunLayer);
      ASSERT_EQ(critical.Wait(0, seq), 0) << critical.Message(0);
      ASSERT_EQ(critical.Wait(1, seq), 0) << critical.Message(1);
    }
  });
  constexpr uint64_t kGradSteps = 2;
  for (uint64_t seq = 1; seq <= kGradSteps; ++seq) {
    deferred.PostAll(seq, 0);
    EXPECT_EQ(deferred.Wait(0, seq), 0) << deferred.Message(0);
    EXPECT_EQ(deferred.Wait(1, seq), 0) << deferred.Message(1);
  }
  deferred_done = true;
  steps.join();
  // The all-reduce summed both ranks' gradients.
  for (int r = 0; r < 2; ++r) {
    const float* x0 = deferred.clients[0].x[0].floats();
    const float* x1 = deferred.clients[1].x[0].floats();
    std::vector<double> want(1024 * 256);
    for (size_t i = 0; i < want.size(); ++i) want[i] = double{x0[i]} + x1[i];
    EXPECT_LE(MaxError(deferred.clients[r].y[0].floats(), want), kTolerance) << "rank " << r;
  }
  constexpr int kChunks = static_cast<int>(kGradSteps) * 16 * 2;  // on both devices
  auto chunk_count = [](const std::vector<LaneInterval>& intervals) {
    return std::count_if(intervals.begin(), intervals.end(),
                         [](const LaneInterval& i) { return i.deferred; });
  };
  EXPECT_TRUE(lanes.IntervalsReach(
      [&](const std::vector<LaneInterval>& i) { return chunk_count(i) == kChunks; }));
  const std::vector<LaneInterval> intervals = lanes.lanes->RecentIntervals();
  int chunks = 0, critical_spans = 0;
  // A chunk issued just before a critical op reached its device may start
  // within this of the op's start.
  constexpr double kSlackMs = 10;
  for (const LaneInterval& d : intervals) {
    if (!d.deferred) {
      ++critical_spans;
      continue;
    }
    EXPECT_EQ(d.session_id, "sess-deferred");
    ++chunks;
    if (d.forced) continue;
    for (const LaneInterval& c : intervals) {
      if (c.deferred || c.device != d.device) continue;
      EXPECT_FALSE(d.start_ms > c.start_ms + kSlackMs && d.start_ms < c.end_ms)
          << "chunk " << d.chunk << " on device " << d.device << " started at " << d.start_ms
          << " ms inside " << c.op << " [" << c.start_ms << ", " << c.end_ms << "]";
    }
  }
  EXPECT_EQ(chunks, kChunks);
  EXPECT_GT(critical_spans, 0);
  for (const SessionFigures& f : lanes.lanes->Figures()) {
    if (f.id != "sess-deferred") continue;
    ASSERT_EQ(f.ops.size(), 1u);
    EXPECT_EQ(f.ops[0].chunks, static_cast<int64_t>(kGradSteps) * 16);
    EXPECT_EQ(f.ops[0].chunks_forced, 0);
    EXPECT_EQ(f.steps, static_cast<int64_t>(kGradSteps));
    EXPECT_GT(f.ops[0].max_delay_ms, 0);
  }
}

TEST(SessionLanesTest, ABoundTooTightForcesChunksAndTheFiguresSaySo) {
  Lanes lanes({}, absl::Milliseconds(20));
  Session critical(lanes.engine(), "sess-critical", kMlp, {Serial(), Serial()});
  Session deferred(lanes.engine(), "sess-deferred", kGrads, {Serial()});
  deferred.setup.priority = Priority::kDeferred;
  deferred.setup.deferred_bound_ms = 0.001;
  deferred.setup.chunk_bytes = 64 << 10;
  ASSERT_TRUE(lanes.lanes->Add(std::move(critical.setup)).ok());
  ASSERT_TRUE(lanes.lanes->Add(std::move(deferred.setup)).ok());
  // The critical step is queued on both devices when the gradients are posted.
  critical.PostAll(1, kSessionRunLayer);
  deferred.PostAll(1, 0);
  ASSERT_EQ(deferred.Wait(0, 1), 0) << deferred.Message(0);
  ASSERT_EQ(critical.Wait(0, 1), 0) << critical.Message(0);
  int64_t counted = -1, over_bound = -1;
  for (const SessionFigures& f : lanes.lanes->Figures()) {
    if (f.id != "sess-deferred") continue;
    counted = f.ops[0].chunks_forced;
    over_bound = f.ops[0].over_bound;
  }
  EXPECT_GT(counted, 0);
  EXPECT_EQ(over_bound, 1);  // its one step took longer than 1 us
  // Each forced chunk on both devices, once the lanes read its events.
  EXPECT_TRUE(lanes.IntervalsReach([&](const std::vector<LaneInterval>& intervals) {
    return std::count_if(intervals.begin(), intervals.end(),
                         [](const LaneInterval& i) { return i.forced; }) == 2 * counted;
  }));
}

TEST(SessionLanesTest, WithNoCriticalSessionDeferredChunksGoWithoutWaitingForTheirBound) {
  Lanes lanes;
  Session deferred(lanes.engine(), "sess-alone", kGrads, {Serial()});
  deferred.setup.priority = Priority::kDeferred;
  // A bound every chunk that waited at all would be past: one held back by
  // its lane until the bound would be counted at bound.
  deferred.setup.deferred_bound_ms = 0.001;
  deferred.setup.chunk_bytes = 64 << 10;
  for (int r = 0; r < 2; ++r) Fill(deferred.clients[r].x[0], 40 + r);
  ASSERT_TRUE(lanes.lanes->Add(std::move(deferred.setup)).ok());
  // Back to back, as a training step posts its gradients' all-reduces.
  constexpr uint64_t kCommands = 4;
  for (uint64_t seq = 1; seq <= kCommands; ++seq) deferred.PostAll(seq, 0);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(deferred.Wait(r, kCommands), 0) << deferred.Message(r);
  }
  for (int r = 0; r < 2; ++r) {
    const float* x0 = deferred.clients[0].x[0].floats();
    const float* x1 = deferred.clients[1].x[0].floats();
    std::vector<double> want(1024 * 256);
    for (size_t i = 0; i < want.size(); ++i) want[i] = double{x0[i]} + x1[i];
    EXPECT_LE(MaxError(deferred.clients[r].y[0].floats(), want), kTolerance) << "rank " << r;
  }
  const std::vector<SessionFigures> figures = lanes.lanes->Figures();
  ASSERT_EQ(figures.size(), 1u);
  ASSERT_EQ(figures[0].ops.size(), 1u);
  EXPECT_EQ(figures[0].steps, static_cast<int64_t>(kCommands));
  EXPECT_EQ(figures[0].ops[0].chunks, static_cast<int64_t>(kCommands) * 16);
  EXPECT_EQ(figures[0].ops[0].chunks_forced, 0);  // nothing critical anywhere
  EXPECT_EQ(figures[0].ops[0].chunks_at_bound, 0);
}

// The host backend where Synchronize behaves as CUDA's does beside a
// session that keeps a device busy: a device with a streaming session on it
// never goes idle. Such a wait blocks (at most kHold) and is counted.
class StreamingDevicesEngine : public engine::ForwardingEngine {
 public:
  static constexpr absl::Duration kHold = absl::Seconds(5);
  explicit StreamingDevicesEngine(engine::Engine& inner) : ForwardingEngine(inner) {}

  void SetStreaming(int device, bool streaming) {
    absl::MutexLock lock(&mu_);
    if (streaming) {
      streaming_.insert(device);
    } else {
      streaming_.erase(device);
    }
    changed_.SignalAll();
  }
  int waits_while_streaming() {
    absl::MutexLock lock(&mu_);
    return waits_;
  }
  absl::Status Synchronize(const std::vector<int>& devices) override {
    {
      absl::MutexLock lock(&mu_);
      if (BusyLocked(devices)) {
        ++waits_;
        const absl::Time until = absl::Now() + kHold;
        while (BusyLocked(devices) && absl::Now() < until) changed_.WaitWithDeadline(&mu_, until);
      }
    }
    return ForwardingEngine::Synchronize(devices);
  }

 private:
  bool BusyLocked(const std::vector<int>& devices) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return std::any_of(devices.begin(), devices.end(),
                       [&](int d) { return streaming_.count(d) > 0; });
  }

  absl::Mutex mu_;
  absl::CondVar changed_;
  std::set<int> streaming_ ABSL_GUARDED_BY(mu_);
  int waits_ ABSL_GUARDED_BY(mu_) = 0;
};

constexpr char kOneGemm[] = R"(name: grad
dtype: f32
ops:
  - {id: grad, type: gemm, m: 64, k: 32, n: 32}
)";

TEST(SessionLanesTest, ACriticalSessionStartsWhileADeferredSessionStreams) {
  std::unique_ptr<engine::Engine> host = CheckedHostEngine(2);
  StreamingDevicesEngine engine(*host);
  std::unique_ptr<SessionLanes> lanes = std::move(SessionLanes::Start(engine)).value();
  Session deferred(engine, "sess-stream", kOneGemm, {Serial()}, /*ranks=*/1);
  deferred.setup.priority = Priority::kDeferred;
  Session earlier(engine, "sess-earlier", kAgGemm, {Serial()}, /*ranks=*/1);
  ASSERT_TRUE(lanes->Add(std::move(deferred.setup)).ok());
  ASSERT_TRUE(lanes->Add(std::move(earlier.setup)).ok());
  earlier.PostAll(1, 0);
  ASSERT_EQ(earlier.Wait(0, 1), 0) << earlier.Message(0);

  // The deferred session streams on device 0 until told to stop.
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> streamed{0};
  engine.SetStreaming(0, true);
  std::thread stream([&] {
    for (uint64_t seq = 1; !stop.load() && seq < 100'000; ++seq) {
      deferred.PostAll(seq, 0);
      if (deferred.Wait(0, seq, absl::Seconds(30)) != 0) return;
      streamed = seq;
    }
  });
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (streamed.load() < 3 && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(1));
  ASSERT_GE(streamed.load(), 3u);

  // A critical session ends and another starts on the same device while the
  // deferred one streams: neither waits for the device to go idle.
  ASSERT_TRUE(lanes->End("sess-earlier", absl::StatusCode::kCancelled, "done").ok());
  Session critical(engine, "sess-critical", kAgGemm, {Serial()}, /*ranks=*/1);
  Fill(critical.clients[0].x[0], 7);
  Fill(critical.clients[0].w[0], 8);
  ASSERT_TRUE(lanes->Add(std::move(critical.setup)).ok());
  critical.PostAll(1, 0);
  EXPECT_EQ(critical.Wait(0, 1), 0) << critical.Message(0);
  const uint64_t streamed_when_critical_ran = streamed.load();
  // The deferred session still streams after it: it neither ended nor waited.
  while (streamed.load() < streamed_when_critical_ran + 3 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_GE(streamed.load(), streamed_when_critical_ran + 3);
  EXPECT_EQ(deferred.clients[0].ring()->failed_code.load(), 0);
  const std::vector<double> want = MatMul(
      {critical.clients[0].x[0].floats(), critical.clients[0].x[0].floats() + 64 * 32},
      {critical.clients[0].w[0].floats(), critical.clients[0].w[0].floats() + 32 * 48}, 64, 32, 48);
  EXPECT_LE(MaxError(critical.clients[0].y[0].floats(), want), kTolerance);
  stop = true;
  stream.join();
  engine.SetStreaming(0, false);
  EXPECT_EQ(engine.waits_while_streaming(), 0);
  for (const SessionFigures& f : lanes->Figures()) {
    if (f.id == "sess-critical") {
      EXPECT_EQ(f.steps, 1);
    }
    if (f.id == "sess-stream") {
      EXPECT_FALSE(f.failed) << f.error;
    }
  }
  lanes.reset();
}

// utime + stime of the lanes' thread, in clock ticks; -1 when not found.
int64_t LanesThreadTicks() {
  DIR* tasks = opendir("/proc/self/task");
  if (tasks == nullptr) return -1;
  int64_t ticks = -1;
  while (dirent* entry = readdir(tasks)) {
    const std::string dir = std::string("/proc/self/task/") + entry->d_name;
    std::ifstream comm(dir + "/comm");
    std::string name;
    if (!std::getline(comm, name) || name != kLanesThreadName) continue;
    std::ifstream stat(dir + "/stat");
    std::string line;
    std::getline(stat, line);
    // Fields after the command's closing parenthesis: state is field 3,
    // utime 14 and stime 15.
    std::istringstream rest(line.substr(line.rfind(')') + 2));
    std::vector<std::string> fields;
    for (std::string f; rest >> f;) fields.push_back(f);
    if (fields.size() > 12) ticks = std::stoll(fields[11]) + std::stoll(fields[12]);
  }
  closedir(tasks);
  return ticks;
}

TEST(SessionLanesTest, TheThreadSleepsWhileNothingRuns) {
  Lanes lanes;
  Session s(lanes.engine(), "sess-idle", kAgGemm, {Serial()});
  ASSERT_TRUE(lanes.lanes->Add(std::move(s.setup)).ok());
  s.PostAll(1, 0);
  ASSERT_EQ(s.Wait(0, 1), 0);
  ASSERT_EQ(s.Wait(1, 1), 0);
  absl::SleepFor(absl::Milliseconds(50));  // the last poll after the step
  const int64_t before = LanesThreadTicks();
  ASSERT_GE(before, 0);
  absl::SleepFor(absl::Milliseconds(500));
  // A thread polling every 200 us for half a second would take many ticks.
  EXPECT_LE(LanesThreadTicks() - before, 1);
}

TEST(SessionLanesTest, ASpinningThreadTakesCommandsAndSleepsOnceTheyStop) {
  LanesOptions options;
  options.spin = absl::Milliseconds(20);  // as on a GPU: the rings polled after a post
  Lanes lanes(options);
  Session s(lanes.engine(), "sess-spin", kAgGemm, {Serial()});
  std::vector<ClientRank>& c = s.clients;
  ASSERT_TRUE(lanes.lanes->Add(std::move(s.setup)).ok());
  for (uint64_t seq = 1; seq <= 20; ++seq) {
    for (int r = 0; r < 2; ++r) {
      Fill(c[r].x[0], seq + r);
      Fill(c[r].w[0], 50 + r);
    }
    s.PostAll(seq, 0);
    ASSERT_EQ(s.Wait(0, seq), 0) << s.Message(0);
    ASSERT_EQ(s.Wait(1, seq), 0) << s.Message(1);
  }
  const std::vector<double> a = StackRows(c, 0, 32, 32, /*from_x=*/true);
  for (int r = 0; r < 2; ++r) {
    const float* w = c[r].w[0].floats();
    EXPECT_LE(MaxError(c[r].y[0].floats(), MatMul(a, {w, w + 32 * 24}, 64, 32, 24)), kTolerance);
  }
  EXPECT_EQ(lanes.lanes->Figures()[0].steps, 20);
  absl::SleepFor(absl::Milliseconds(100));  // past the spin window
  const int64_t before = LanesThreadTicks();
  ASSERT_GE(before, 0);
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_LE(LanesThreadTicks() - before, 1);
}

// Steps the session's op 0 `steps` times, one at a time (posted on every
// rank, waited for), as a training loop does.
void StepOneAtATime(Session& s, uint64_t first, uint64_t steps) {
  for (uint64_t seq = first; seq < first + steps; ++seq) {
    s.PostAll(seq, 0);
    for (int r = 0; r < static_cast<int>(s.clients.size()); ++r) {
      ASSERT_EQ(s.Wait(r, seq), 0) << s.Message(r);
    }
  }
}

TEST(SessionLanesTest, WithoutAPollWindowEveryCommandIsTakenAfterAWakeUp) {
  LanesOptions options;
  options.spin = absl::ZeroDuration();
  Lanes lanes(options);
  Session s(lanes.engine(), "sess-doorbell", kAgGemm, {Serial()});
  ASSERT_TRUE(lanes.lanes->Add(std::move(s.setup)).ok());
  StepOneAtATime(s, 1, 6);
  const SessionFigures f = lanes.lanes->Figures()[0];
  EXPECT_EQ(f.steps, 6);
  EXPECT_EQ(f.taken_woken, 6);
  EXPECT_EQ(f.taken_polling, 0);
}

TEST(SessionLanesTest, WithinThePollWindowCommandsAreTakenPolling) {
  LanesOptions options;
  // Longer than the test: after the first post the thread never sleeps again
  // until the lanes stop (their request ends the poll at once).
  options.spin = absl::Minutes(10);
  Lanes lanes(options);
  Session s(lanes.engine(), "sess-polled", kAgGemm, {Serial()});
  ASSERT_TRUE(lanes.lanes->Add(std::move(s.setup)).ok());
  StepOneAtATime(s, 1, 6);
  const SessionFigures f = lanes.lanes->Figures()[0];
  EXPECT_EQ(f.steps, 6);
  EXPECT_EQ(f.taken_polling + f.taken_woken, 6);
  // The first command wakes the thread; a post that lands while a pass is
  // already under way may cost one more wake-up before polling starts.
  EXPECT_LE(f.taken_woken, 2);
  EXPECT_GE(f.taken_polling, 4);
}

TEST(SessionLanesTest, CloseWithEveryCommandCompletedEndsTheSessionCancelled) {
  Lanes lanes;
  Session s(lanes.engine(), "sess-closed", kAgGemm, {Serial()});
  ASSERT_TRUE(lanes.lanes->Add(std::move(s.setup)).ok());
  StepOneAtATime(s, 1, 2);
  ASSERT_TRUE(lanes.lanes->Close("sess-closed", "rank 0 (pid 7) closed the session").ok());
  ASSERT_TRUE(lanes.Ended("sess-closed"));
  const absl::Status ended = lanes.EndedAs("sess-closed");
  EXPECT_EQ(ended.code(), absl::StatusCode::kCancelled) << ended;
  EXPECT_EQ(ended.message(), "rank 0 (pid 7) closed the session");
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(s.clients[r].ring()->failed_code.load(),
              static_cast<int32_t>(absl::StatusCode::kCancelled));
    EXPECT_EQ(s.clients[r].ring()->slots[2].status, 0);  // its last command stays done
  }
  EXPECT_EQ(lanes.lanes->Close("sess-closed", "again").code(), absl::StatusCode::kNotFound);
}

TEST(SessionLanesTest, CloseWithACommandOutstandingFailsTheSessionNamingIt) {
  Lanes lanes;
  Session s(lanes.engine(), "sess-midstep", kAgGemm, {Serial()});
  ASSERT_TRUE(lanes.lanes->Add(std::move(s.setup)).ok());
  StepOneAtATime(s, 1, 1);
  s.Post(0, 2, 0);  // rank 1 never posts command 2
  ASSERT_TRUE(lanes.lanes->Close("sess-midstep", "rank 1 (pid 8) closed the session").ok());
  ASSERT_TRUE(lanes.Ended("sess-midstep"));
  const absl::Status ended = lanes.EndedAs("sess-midstep");
  EXPECT_EQ(ended.code(), absl::StatusCode::kUnavailable) << ended;
  EXPECT_EQ(ended.message(), "rank 1 (pid 8) closed the session with command 2 not completed");
  EXPECT_EQ(s.Wait(0, 2), static_cast<int32_t>(absl::StatusCode::kUnavailable));
}

}  // namespace
}  // namespace overlap::sessions
