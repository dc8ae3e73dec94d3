#include "server/sessions/session_lanes.h"

#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/logging.h"
#include "server/engine/lane_shared_engine.h"
#include "server/flight/flight_engine.h"
#include "server/sessions/lane_arbiter.h"
#include "server/sessions/lane_devices.h"
#include "server/sessions/session_run.h"
#include "server/sessions/session_stats.h"

namespace overlap::sessions {
namespace {

// Grants the thread issues between two looks at the rings and the devices.
constexpr int kMaxGrantsPerPass = 64;
// Ended sessions whose figures Figures() still shows.
constexpr size_t kEndedKept = 16;

// What a caller asks of the lanes' thread.
struct Request {
  enum class Kind { kAdd, kEnd } kind = Kind::kAdd;
  SessionSetup setup;    // kAdd
  absl::Status refusal;  // kAdd: refused before the thread saw it; it releases the setup
  std::shared_ptr<absl::Status> result;  // kAdd: set before `added` is notified
  std::shared_ptr<absl::Notification> added;
  std::string id;  // kEnd
  absl::Status why;
  // kEnd: a rank closed the session on purpose; `why` (CANCELLED) stands
  // only when every command posted has completed.
  bool if_idle = false;
};

void Clear(int eventfd_fd) {
  uint64_t count = 0;
  while (read(eventfd_fd, &count, sizeof(count)) < 0 && errno == EINTR) {
  }
}

// Looks at the rings between two yields of the core while polling: a yield
// lets any other runnable thread on the core go first (a stream worker of the
// host backend, another daemon thread), so polling takes only idle time.
constexpr int kLooksPerYield = 16;

// A spinning thread's pause: lets a sibling hyperthread run, saves power.
inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

absl::Duration SpinOf(const engine::Engine& engine, const LanesOptions& options) {
  if (options.spin.has_value()) return std::max(*options.spin, absl::ZeroDuration());
  return engine.HostWork() == nullptr ? absl::Milliseconds(5) : absl::ZeroDuration();
}

}  // namespace

struct SessionLanes::State {
  State(engine::Engine& base, LanesOptions options, engine::DeviceLanes* node)
      : node(node),
        shared(node != nullptr
                   ? std::make_unique<engine::LaneSharedEngine>(base, *node, AllDevices(base),
                                                                /*graphs=*/options.graphs)
                   : nullptr),
        engine(shared != nullptr ? *shared : base),
        options(options),
        spin_ns(absl::ToInt64Nanoseconds(SpinOf(base, options))),
        devices(engine, node) {}

  static std::vector<int> AllDevices(const engine::Engine& engine) {
    std::vector<int> all;
    for (int d = 0; d < engine.DeviceCount(); ++d) all.push_back(d);
    return all;
  }

  engine::DeviceLanes* const node;  // null: no job shares the devices
  // The engine the lanes call, every call under the devices' enqueue mutexes
  // where jobs share them.
  const std::unique_ptr<engine::LaneSharedEngine> shared;
  engine::Engine& engine;
  const LanesOptions options;
  const int64_t spin_ns;
  OwnedFd epoll;
  OwnedFd wake;  // eventfd: a request is queued
  std::thread thread;

  mutable absl::Mutex mu;
  std::deque<Request> requests ABSL_GUARDED_BY(mu);
  bool stopping ABSL_GUARDED_BY(mu) = false;
  // By id: the sessions added (or being added) and not yet ended.
  std::map<std::string, std::shared_ptr<SessionCountsBox>> counts ABSL_GUARDED_BY(mu);
  std::deque<SessionCounts> ended ABSL_GUARDED_BY(mu);
  std::deque<LaneInterval> intervals ABSL_GUARDED_BY(mu);
  std::function<void(const std::string&, const absl::Status&)> on_ended ABSL_GUARDED_BY(mu);
  // Set with a request queued (before Wake): a spinning thread looks here.
  std::atomic<bool> requested{false};

  // The lanes' thread's own.
  LaneDevices devices;
  LaneArbiter arbiter;
  std::vector<std::unique_ptr<SessionRun>> sessions;
  uint64_t next_key = 1;
  const int64_t start_ns = MonotonicNs();
  int64_t spin_until_ns = 0;  // polls the rings without sleeping until then
  bool polled = false;        // the last Wait polled rather than slept in epoll
  // By device: critical sessions on it (not failed). Their deferred lane
  // holds only a few chunks at once (LaneDepth) while there is one.
  std::vector<int> critical_sessions;

  void Wake() {
    requested.store(true, std::memory_order_release);
    const uint64_t one = 1;
    if (write(wake.get(), &one, sizeof(one)) != sizeof(one)) {
      GetLogger("sessions")->warn("lanes: wake: {}", std::strerror(errno));
    }
  }
  double NowMs() const { return static_cast<double>(MonotonicNs() - start_ns) / 1e6; }
  // Queues an end request for a session the lanes know, and wakes the thread.
  absl::Status PostEnd(Request request) {
    {
      absl::MutexLock lock(&mu);
      if (counts.count(request.id) == 0) {
        return absl::NotFoundError(absl::StrCat("no session ", request.id, " in the lanes"));
      }
      requests.push_back(std::move(request));
    }
    Wake();
    return absl::OkStatus();
  }

  void Run();
  bool Busy() const;
  // Sleeps in epoll or polls the rings (false / true).
  bool Wait(bool busy);
  // Polls the rings and the requests until `until_ns`: true when one came.
  bool Spin(int64_t until_ns);
  bool AnyPosted() const;
  void CountCriticalSessions();
  bool HandleRequests();
  void Adopt(Request& request);
  void Pass();
  void Dispatch(double now_ms);
  // How many chunks a device's deferred lane holds: beside a critical
  // session (LaneDepth), and without one (LaneDepthAlone).
  int LaneDepth(int device) const;
  int LaneDepthAlone(int device) const;
  SessionRun* Find(uint64_t key);
  // A failure the lanes found (logged), or an end asked for (End, stopping).
  void FailSession(SessionRun& session, const absl::Status& status);
  void EndSession(SessionRun& session, const absl::Status& status);
  void Retire(size_t index);
  void LogEndFigures(const SessionCounts& counts);
  void Publish(std::vector<LaneSpan> spans);
};

absl::StatusOr<std::unique_ptr<SessionLanes>> SessionLanes::Start(engine::Engine& engine,
                                                                  LanesOptions options,
                                                                  engine::DeviceLanes* node) {
  if (engine.Shared() == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("sessions need shared memory, which the ",
                                                      engine.Name(), " backend cannot map"));
  }
  auto state = std::make_unique<State>(engine, options, node);
  state->epoll = OwnedFd(epoll_create1(EPOLL_CLOEXEC));
  state->wake = OwnedFd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!state->epoll.valid() || !state->wake.valid()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("session lanes: epoll or eventfd: ", std::strerror(errno)));
  }
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.fd = state->wake.get();
  if (epoll_ctl(state->epoll.get(), EPOLL_CTL_ADD, state->wake.get(), &event) != 0) {
    return absl::InternalError(absl::StrCat("session lanes: epoll_ctl: ", std::strerror(errno)));
  }
  State* raw = state.get();
  state->thread = std::thread([raw] { raw->Run(); });
  return std::unique_ptr<SessionLanes>(new SessionLanes(std::move(state)));
}

SessionLanes::SessionLanes(std::unique_ptr<State> state) : state_(std::move(state)) {}

SessionLanes::~SessionLanes() {
  {
    absl::MutexLock lock(&state_->mu);
    state_->stopping = true;
  }
  state_->Wake();
  state_->thread.join();
}

absl::Status SessionLanes::Add(SessionSetup session) {
  Request request;
  request.kind = Request::Kind::kAdd;
  request.result = std::make_shared<absl::Status>();
  request.added = std::make_shared<absl::Notification>();
  const std::shared_ptr<absl::Status> result = request.result;
  const std::shared_ptr<absl::Notification> added = request.added;
  SessionCounts counts;
  counts.id = session.id;
  for (const OpSpec& op : session.graph.ops) counts.ops.emplace_back().op = op.id;
  bool stopping = false;
  {
    absl::MutexLock lock(&state_->mu);
    stopping = state_->stopping;
    if (!stopping) {
      if (state_->counts.count(session.id) > 0) {
        request.refusal =
            absl::AlreadyExistsError(absl::StrCat("session ", session.id, " is running"));
      } else {
        state_->counts[session.id] = std::make_shared<SessionCountsBox>(std::move(counts));
      }
      request.setup = std::move(session);
      state_->requests.push_back(std::move(request));
    }
  }
  if (stopping) {
    // The thread is gone or going: nothing else touches the setup's buffers.
    SessionRun::Release(state_->engine, session);
    return absl::FailedPreconditionError("the session lanes are stopping");
  }
  state_->Wake();
  added->WaitForNotification();
  return *result;
}

absl::Status SessionLanes::End(const std::string& id, absl::StatusCode code, const std::string& why,
                               int rank) {
  Request request;
  request.kind = Request::Kind::kEnd;
  request.id = id;
  // Named once: a reason that already starts with the rank stays as it is.
  const std::string named = absl::StrCat("rank ", rank);
  const bool name = rank >= 0 && !absl::StartsWith(why, named);
  request.why = absl::Status(code, name ? absl::StrCat(named, ": ", why) : why);
  return state_->PostEnd(std::move(request));
}

absl::Status SessionLanes::Close(const std::string& id, const std::string& why) {
  Request request;
  request.kind = Request::Kind::kEnd;
  request.id = id;
  request.why = absl::CancelledError(why);
  request.if_idle = true;
  return state_->PostEnd(std::move(request));
}

void SessionLanes::OnEnded(
    std::function<void(const std::string& id, const absl::Status& ended)> callback) {
  absl::MutexLock lock(&state_->mu);
  state_->on_ended = std::move(callback);
}

std::vector<SessionFigures> SessionLanes::Figures() const {
  std::vector<std::shared_ptr<SessionCountsBox>> live;
  std::vector<SessionCounts> counts;
  {
    absl::MutexLock lock(&state_->mu);
    for (const auto& [id, box] : state_->counts) live.push_back(box);
    counts.assign(state_->ended.begin(), state_->ended.end());
  }
  for (const auto& box : live) counts.push_back(box->Copy());
  std::vector<SessionFigures> figures;
  for (const SessionCounts& c : counts) figures.push_back(FiguresOf(c));
  return figures;
}

std::vector<LaneInterval> SessionLanes::RecentIntervals(size_t max) const {
  absl::MutexLock lock(&state_->mu);
  const size_t count = std::min(max, state_->intervals.size());
  return {state_->intervals.end() - static_cast<std::ptrdiff_t>(count), state_->intervals.end()};
}

std::vector<engine::DeviceLaneFigures> SessionLanes::DeviceFigures() const {
  if (state_->node == nullptr) return {};
  return state_->node->Figures();
}

// The lanes' thread.

void SessionLanes::State::Run() {
  pthread_setname_np(pthread_self(), kLanesThreadName);
  while (true) {
    polled = Wait(Busy());
    if (!HandleRequests()) break;
    Pass();
  }
  for (const std::unique_ptr<SessionRun>& session : sessions) {
    EndSession(*session, absl::CancelledError("the session lanes are stopping"));
  }
  while (!sessions.empty()) Retire(sessions.size() - 1);
}

bool SessionLanes::State::Busy() const {
  if (devices.Busy() || !arbiter.Empty()) return true;
  return std::any_of(sessions.begin(), sessions.end(),
                     [](const auto& s) { return s->Busy() || s->failed(); });
}

// Sleeps until a doorbell or a request; while work is on the devices, no
// longer than the poll interval (EventDone is how the thread learns it is done).
// Within the spin window after a post it does not sleep: it polls the rings
// (a post is taken within a microsecond) and returns by the poll interval.
bool SessionLanes::State::Wait(bool busy) {
  epoll_event events[64];
  const int64_t interval_ns = absl::ToInt64Nanoseconds(options.poll_interval);
  const int64_t now = MonotonicNs();
  if (now < spin_until_ns) {
    Spin(std::min(spin_until_ns, now + interval_ns));
    return true;
  }
  timespec timeout{interval_ns / 1'000'000'000, interval_ns % 1'000'000'000};
  int n = epoll_pwait2(epoll.get(), events, 64, busy ? &timeout : nullptr, nullptr);
  if (n < 0 && errno == ENOSYS) {
    n = epoll_wait(epoll.get(), events, 64,
                   busy ? std::max<int>(1, static_cast<int>(interval_ns / 1'000'000)) : -1);
  }
  for (int i = 0; i < n; ++i) Clear(events[i].data.fd);
  return false;
}

bool SessionLanes::State::Spin(int64_t until_ns) {
  for (int looks = 1; MonotonicNs() < until_ns; ++looks) {
    if (requested.load(std::memory_order_acquire) || AnyPosted()) return true;
    for (int i = 0; i < 8; ++i) CpuRelax();  // about half a microsecond
    if (looks % kLooksPerYield != 0) continue;
    std::this_thread::yield();
    // A doorbell rung by a stream (the host backend's WakeWhenDone: a
    // command done) is seen now, not at the poll interval.
    epoll_event events[64];
    const int n = epoll_wait(epoll.get(), events, 64, 0);
    for (int i = 0; i < n; ++i) Clear(events[i].data.fd);
    if (n > 0) return true;
  }
  return false;
}

bool SessionLanes::State::AnyPosted() const {
  return std::any_of(sessions.begin(), sessions.end(),
                     [](const auto& s) { return !s->failed() && s->HasPosted(); });
}

void SessionLanes::State::CountCriticalSessions() {
  critical_sessions.assign(static_cast<size_t>(std::max(0, engine.DeviceCount())), 0);
  for (const std::unique_ptr<SessionRun>& session : sessions) {
    if (session->failed() || session->deferred()) continue;
    for (int device : session->Devices()) {
      if (device >= 0 && device < static_cast<int>(critical_sessions.size())) {
        ++critical_sessions[static_cast<size_t>(device)];
      }
    }
  }
}

bool SessionLanes::State::HandleRequests() {
  std::deque<Request> taken;
  bool stop = false;
  {
    absl::MutexLock lock(&mu);
    requested.store(false, std::memory_order_relaxed);
    taken.swap(requests);
    stop = stopping;
  }
  for (Request& request : taken) {
    if (request.kind == Request::Kind::kAdd) {
      Adopt(request);
      continue;
    }
    for (const std::unique_ptr<SessionRun>& session : sessions) {
      if (session->id() != request.id) continue;
      const uint64_t outstanding = request.if_idle ? session->Outstanding() : 0;
      if (outstanding == 0) {
        EndSession(*session, request.why);
      } else {
        EndSession(*session,
                   absl::UnavailableError(absl::StrCat(request.why.message(), " with command ",
                                                       outstanding, " not completed")));
      }
    }
  }
  return !stop;
}

void SessionLanes::State::Adopt(Request& request) {
  if (!request.refusal.ok()) {
    SessionRun::Release(engine, request.setup);
    *request.result = request.refusal;
    request.added->Notify();
    return;
  }
  const std::string id = request.setup.id;
  const int64_t adopt_start_ns = MonotonicNs();
  std::shared_ptr<SessionCountsBox> box;
  {
    absl::MutexLock lock(&mu);
    box = counts[id];
  }
  absl::Status status;
  for (const SessionRank& rank : request.setup.ranks) {
    if (status.ok() && rank.device >= 0 && rank.device < engine.DeviceCount()) {
      status = devices.Use(rank.device);
    }
  }
  GetLogger("sessions")->debug("session {}: devices in use ({})", id, status.ToString());
  std::unique_ptr<SessionRun> session;
  if (status.ok()) {
    absl::StatusOr<std::unique_ptr<SessionRun>> created =
        SessionRun::Create(engine, devices, std::move(request.setup), next_key++, box,
                           options.graphs);
    status = created.status();
    if (created.ok()) session = *std::move(created);
  } else {
    SessionRun::Release(engine, request.setup);
  }
  GetLogger("sessions")->debug("session {}: run made ({})", id, status.ToString());
  size_t watched = 0;
  for (; status.ok() && watched < session->setup().ranks.size(); ++watched) {
    const SessionRank& rank = session->setup().ranks[watched];
    epoll_event event{};
    event.events = EPOLLIN;
    event.data.fd = rank.posted_doorbell.get();
    if (epoll_ctl(epoll.get(), EPOLL_CTL_ADD, rank.posted_doorbell.get(), &event) != 0) {
      status = absl::InvalidArgumentError(absl::StrCat("session ", id, ": rank ", rank.rank,
                                                       "'s doorbell: ", std::strerror(errno)));
    }
  }
  if (status.ok()) {
    sessions.push_back(std::move(session));
    CountCriticalSessions();
  } else {
    // Out of the epoll set before the fds close: the client's copies keep
    // their files open, and the set would keep reporting a closed number.
    for (size_t r = 0; session != nullptr && r < watched; ++r) {
      epoll_ctl(epoll.get(), EPOLL_CTL_DEL, session->setup().ranks[r].posted_doorbell.get(),
                nullptr);
    }
    session.reset();
    absl::MutexLock lock(&mu);
    counts.erase(id);
  }
  const double adopt_ms = static_cast<double>(MonotonicNs() - adopt_start_ns) / 1e6;
  // A start never waits for another session's work: one that took long says
  // so at info level (a GPU run's log then shows where it waited).
  if (adopt_ms > 50) {
    GetLogger("sessions")->info("session {}: the lanes took {:.1f} ms to adopt it", id, adopt_ms);
  } else {
    GetLogger("sessions")->debug("session {}: adopted in {:.3f} ms", id, adopt_ms);
  }
  *request.result = status;
  request.added->Notify();
}

void SessionLanes::State::Pass() {
  const double now_ms = NowMs();
  if (spin_ns > 0 && AnyPosted()) spin_until_ns = MonotonicNs() + spin_ns;
  for (const std::unique_ptr<SessionRun>& session : sessions) {
    if (session->failed()) continue;
    const absl::Status taken = session->Take(arbiter, now_ms, polled);
    if (!taken.ok()) FailSession(*session, taken);
  }
  Publish(devices.Collect());
  Dispatch(now_ms);
  for (const std::unique_ptr<SessionRun>& session : sessions) {
    if (session->failed()) continue;
    const absl::Status polled = session->Poll();
    if (!polled.ok()) FailSession(*session, polled);
  }
  for (size_t i = sessions.size(); i-- > 0;) {
    if (sessions[i]->failed() && sessions[i]->Drained()) Retire(i);
  }
}

int SessionLanes::State::LaneDepth(int device) const {
  const double chunk_ms = devices.ChunkMs(device);
  if (options.lane_ahead_ms <= 0 || chunk_ms <= 0) return 1;
  return std::clamp(static_cast<int>(options.lane_ahead_ms / chunk_ms), 1,
                    std::max(1, options.max_chunks_in_flight));
}

int SessionLanes::State::LaneDepthAlone(int device) const {
  const int most = std::max(2, options.max_chunks_in_flight);
  const double chunk_ms = devices.ChunkMs(device);
  if (chunk_ms <= 0) return most;
  // Two poll intervals of chunks, and one more that runs meanwhile.
  const double ahead_ms = 2 * absl::ToDoubleMilliseconds(options.poll_interval);
  return std::clamp(static_cast<int>(ahead_ms / chunk_ms) + 1, 2, most);
}

void SessionLanes::State::Dispatch(double now_ms) {
  LaneView view;
  // A job's critical work beside the sessions holds their chunks back too.
  view.critical_pending = [this](int device) {
    return devices.CriticalPending(device) ||
           (node != nullptr && node->CriticalPendingOf(device, engine::LaneUser::kJob));
  };
  if (node != nullptr) {
    view.yielded = [this](const std::vector<int>& on, int chunks) {
      const bool own =
          std::any_of(on.begin(), on.end(), [this](int d) { return devices.CriticalPending(d); });
      node->CountYields(on, engine::LaneUser::kSession, chunks, !own);
    };
  }
  // Without a critical session on the device the lane holds enough to stay
  // busy between the thread's looks, and no more: a critical session that
  // opens then finds a few chunks ahead of it, not every one a deferred
  // session posted ahead (on an H100, 32 GEMMs of 1.5 ms each held a new
  // critical session's first steps back).
  auto critical_there = [this](int device) {
    return device >= 0 && device < static_cast<int>(critical_sessions.size()) &&
           critical_sessions[static_cast<size_t>(device)] > 0;
  };
  view.lane_full = [this, critical_there](int device) {
    const int depth = critical_there(device) ? LaneDepth(device) : LaneDepthAlone(device);
    return devices.DeferredInFlight(device) >= depth;
  };
  view.beside_critical = critical_there;
  for (int i = 0; i < kMaxGrantsPerPass; ++i) {
    const std::optional<LaneGrant> grant = arbiter.Next(now_ms, view);
    if (!grant.has_value()) break;
    SessionRun* session = Find(grant->session);
    if (session == nullptr || session->failed()) {
      arbiter.Remove(grant->session);
      continue;
    }
    // The node's gate has the last word: a job's critical work queued since
    // the arbiter looked holds the chunk back; the next pass asks again.
    if (node != nullptr && !node->PassDeferred(grant->devices, engine::LaneUser::kSession,
                                               grant->forced || grant->deadline_near)) {
      break;
    }
    const flight::ScopedFlightLabel flight_label(session->id(), absl::StrCat("op ", grant->op));
    const absl::Status issued = session->Issue(*grant);
    arbiter.Issued(*grant, now_ms);
    if (!issued.ok()) FailSession(*session, issued);
  }
}

SessionRun* SessionLanes::State::Find(uint64_t key) {
  for (const std::unique_ptr<SessionRun>& session : sessions) {
    if (session->key() == key) return session.get();
  }
  return nullptr;
}

void SessionLanes::State::FailSession(SessionRun& session, const absl::Status& status) {
  if (session.failed()) return;
  GetLogger("sessions")->warn("session {} failed: {}", session.id(), status.ToString());
  EndSession(session, status);
}

void SessionLanes::State::EndSession(SessionRun& session, const absl::Status& status) {
  session.Fail(status);
  arbiter.Remove(session.key());
  CountCriticalSessions();
}

void SessionLanes::State::Retire(size_t index) {
  std::unique_ptr<SessionRun> session = std::move(sessions[index]);
  sessions.erase(sessions.begin() + static_cast<std::ptrdiff_t>(index));
  for (const SessionRank& rank : session->setup().ranks) {
    epoll_ctl(epoll.get(), EPOLL_CTL_DEL, rank.posted_doorbell.get(), nullptr);
  }
  const std::string id = session->id();
  const absl::Status ended_as = session->failure();
  const int64_t retire_start_ns = MonotonicNs();
  session.reset();  // waits for its own work, releases what it held
  const double retire_ms = static_cast<double>(MonotonicNs() - retire_start_ns) / 1e6;
  if (retire_ms > 50) {
    GetLogger("sessions")->info("session {}: releasing it took {:.1f} ms", id, retire_ms);
  }
  CountCriticalSessions();
  std::function<void(const std::string&, const absl::Status&)> callback;
  SessionCounts final_counts;
  {
    absl::MutexLock lock(&mu);
    auto it = counts.find(id);
    if (it != counts.end()) {
      ended.push_back(it->second->Copy());
      while (ended.size() > kEndedKept) ended.pop_front();
      counts.erase(it);
      final_counts = ended.back();
    }
    callback = on_ended;
  }
  LogEndFigures(final_counts);
  if (callback) callback(id, ended_as);
}

// A session's host time per command and a deferred session's chunks by how
// they went, at its end: what a GPU run's log shows without a client to ask.
// Logged however the session ended (closed, a rank gone, a failure), before
// the line that says how.
void SessionLanes::State::LogEndFigures(const SessionCounts& c) {
  if (c.id.empty()) return;
  const SessionFigures f = FiguresOf(c);
  if (c.enqueue_us.empty()) {
    GetLogger("sessions")->info("session {}: {} steps, no command enqueued", c.id, c.steps);
  } else {
    GetLogger("sessions")
        ->info(
            "session {}: {} steps; a rank's call to the enqueue p50 {:.1f} us p99 {:.1f} us, of "
            "which to the lanes taking the command p50 {:.1f} us p99 {:.1f} us; commands taken "
            "polling {}, after a wake-up {}; the lanes' part p50: queued behind earlier commands "
            "{:.1f} us, the inputs wait {:.1f} us, "
            "wired inputs {:.1f} us, the ops' launches {:.1f} us; op pieces replayed as graphs "
            "{}, enqueued directly {}",
            c.id, c.steps, f.enqueue_p50_us, f.enqueue_p99_us, f.take_p50_us, f.take_p99_us,
            c.taken_polling, c.taken_woken, PercentileOf(c.queued_us, 50),
            PercentileOf(c.inputs_wait_us, 50),
            PercentileOf(c.wired_us, 50), PercentileOf(c.launch_us, 50), c.pieces_replayed,
            c.pieces_direct);
  }
  for (const OpCounts& op : c.ops) {
    if (op.chunks == 0) continue;
    GetLogger("sessions")
        ->info(
            "session {} op {}: {} chunks, {} at their bound ({} forced past critical work), "
            "{} steps past the bound, the longest {:.3f} ms from runnable to completed",
            c.id, op.op, op.chunks, op.chunks_at_bound, op.chunks_forced, op.over_bound,
            op.max_delay_ms);
  }
}

void SessionLanes::State::Publish(std::vector<LaneSpan> spans) {
  if (spans.empty()) return;
  for (const LaneSpan& span : spans) {
    if (SessionRun* session = Find(span.session)) session->Finished(span);
  }
  absl::MutexLock lock(&mu);
  for (LaneSpan& span : spans) {
    if (!span.read) continue;
    intervals.push_back(std::move(span.interval));
    if (intervals.size() > kRecentSamples) intervals.pop_front();
  }
}

}  // namespace overlap::sessions
