#include "server/sessions/session_lanes.h"

#include <pthread.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
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
};

void Clear(int eventfd_fd) {
  uint64_t count = 0;
  while (read(eventfd_fd, &count, sizeof(count)) < 0 && errno == EINTR) {
  }
}

}  // namespace

struct SessionLanes::State {
  State(engine::Engine& engine, LanesOptions options)
      : engine(engine), options(options), devices(engine) {}

  engine::Engine& engine;
  const LanesOptions options;
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
  std::function<void(const std::string&)> on_ended ABSL_GUARDED_BY(mu);

  // The lanes' thread's own.
  LaneDevices devices;
  LaneArbiter arbiter;
  std::vector<std::unique_ptr<SessionRun>> sessions;
  uint64_t next_key = 1;
  const int64_t start_ns = MonotonicNs();

  void Wake() {
    const uint64_t one = 1;
    if (write(wake.get(), &one, sizeof(one)) != sizeof(one)) {
      GetLogger("sessions")->warn("lanes: wake: {}", std::strerror(errno));
    }
  }
  double NowMs() const { return static_cast<double>(MonotonicNs() - start_ns) / 1e6; }

  void Run();
  bool Busy() const;
  void Wait(bool busy);
  bool HandleRequests();
  void Adopt(Request& request);
  void Pass();
  void Dispatch(double now_ms);
  int LaneDepth(int device) const;
  SessionRun* Find(uint64_t key);
  // A failure the lanes found (logged), or an end asked for (End, stopping).
  void FailSession(SessionRun& session, const absl::Status& status);
  void EndSession(SessionRun& session, const absl::Status& status);
  void Retire(size_t index);
  void Publish(std::vector<LaneSpan> spans);
};

absl::StatusOr<std::unique_ptr<SessionLanes>> SessionLanes::Start(engine::Engine& engine,
                                                                  LanesOptions options) {
  if (engine.Shared() == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("sessions need shared memory, which the ",
                                                      engine.Name(), " backend cannot map"));
  }
  auto state = std::make_unique<State>(engine, options);
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
  {
    absl::MutexLock lock(&state_->mu);
    if (state_->counts.count(id) == 0) {
      return absl::NotFoundError(absl::StrCat("no session ", id, " in the lanes"));
    }
    state_->requests.push_back(std::move(request));
  }
  state_->Wake();
  return absl::OkStatus();
}

void SessionLanes::OnEnded(std::function<void(const std::string& id)> callback) {
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

// The lanes' thread.

void SessionLanes::State::Run() {
  pthread_setname_np(pthread_self(), kLanesThreadName);
  while (true) {
    Wait(Busy());
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
void SessionLanes::State::Wait(bool busy) {
  epoll_event events[64];
  const int64_t interval_ns = absl::ToInt64Nanoseconds(options.poll_interval);
  timespec timeout{interval_ns / 1'000'000'000, interval_ns % 1'000'000'000};
  int n = epoll_pwait2(epoll.get(), events, 64, busy ? &timeout : nullptr, nullptr);
  if (n < 0 && errno == ENOSYS) {
    n = epoll_wait(epoll.get(), events, 64,
                   busy ? std::max<int>(1, static_cast<int>(interval_ns / 1'000'000)) : -1);
  }
  for (int i = 0; i < n; ++i) Clear(events[i].data.fd);
}

bool SessionLanes::State::HandleRequests() {
  std::deque<Request> taken;
  bool stop = false;
  {
    absl::MutexLock lock(&mu);
    taken.swap(requests);
    stop = stopping;
  }
  for (Request& request : taken) {
    if (request.kind == Request::Kind::kAdd) {
      Adopt(request);
      continue;
    }
    for (const std::unique_ptr<SessionRun>& session : sessions) {
      if (session->id() == request.id) EndSession(*session, request.why);
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
        SessionRun::Create(engine, devices, std::move(request.setup), next_key++, box);
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
  *request.result = status;
  request.added->Notify();
}

void SessionLanes::State::Pass() {
  const double now_ms = NowMs();
  for (const std::unique_ptr<SessionRun>& session : sessions) {
    if (session->failed()) continue;
    const absl::Status taken = session->Take(arbiter, now_ms);
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

void SessionLanes::State::Dispatch(double now_ms) {
  LaneView view;
  view.critical_pending = [this](int device) { return devices.CriticalPending(device); };
  view.lane_full = [this](int device) {
    return devices.DeferredInFlight(device) >= LaneDepth(device);
  };
  for (int i = 0; i < kMaxGrantsPerPass; ++i) {
    const std::optional<LaneGrant> grant = arbiter.Next(now_ms, view);
    if (!grant.has_value()) break;
    SessionRun* session = Find(grant->session);
    if (session == nullptr || session->failed()) {
      arbiter.Remove(grant->session);
      continue;
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
}

void SessionLanes::State::Retire(size_t index) {
  std::unique_ptr<SessionRun> session = std::move(sessions[index]);
  sessions.erase(sessions.begin() + static_cast<std::ptrdiff_t>(index));
  for (const SessionRank& rank : session->setup().ranks) {
    epoll_ctl(epoll.get(), EPOLL_CTL_DEL, rank.posted_doorbell.get(), nullptr);
  }
  const std::string id = session->id();
  session.reset();  // waits for its devices, releases what it held
  std::function<void(const std::string&)> callback;
  {
    absl::MutexLock lock(&mu);
    auto it = counts.find(id);
    if (it != counts.end()) {
      ended.push_back(it->second->Copy());
      while (ended.size() > kEndedKept) ended.pop_front();
      counts.erase(it);
    }
    callback = on_ended;
  }
  if (callback) callback(id);
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
