#include "server/sessions/session_registry.h"

#include <sys/socket.h>

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/logging.h"
#include "common/text.h"
#include "server/sessions/rank_channel.h"

namespace overlap::sessions {
namespace {

// Ended sessions ListSessions still shows.
constexpr size_t kEndedKept = 32;
// How often the last rank to start looks again for a job on its devices.
constexpr absl::Duration kJobPoll = absl::Milliseconds(20);

std::string Quoted(const std::string& name) { return QuotedExcerpt(name, 80); }

}  // namespace

struct SessionRegistry::Session {
  enum class State { kJoining, kStarting, kReady, kEnded };
  std::string id;
  std::string name;
  std::string owner;
  std::string owner_name;
  std::string graph_text;
  SessionPlan plan;
  OpenRequest settings;  // the first rank's
  absl::Time opened_at;
  State state = State::kJoining;
  absl::Status failure;                             // why it failed, once it has
  std::string ended_state;                          // closed | failed, once ended
  std::vector<std::unique_ptr<SessionRank>> ranks;  // by rank; to the lanes at start
  std::vector<char> joined;
  std::vector<char> started;
  std::vector<pid_t> pids;
  std::vector<int> sockets;  // the ranks' connections, -1 when gone
  // Bytes registered by rank and (op index, tensor kind): for the quota and
  // to tell a rank what it has not registered.
  std::vector<std::map<std::pair<int, int>, int64_t>> registered;
  int64_t mapped_bytes = 0;

  int JoinedCount() const { return static_cast<int>(std::count(joined.begin(), joined.end(), 1)); }
  bool AllStarted() const {
    return std::all_of(started.begin(), started.end(), [](char c) { return c != 0; });
  }
  void ShutDownSockets() const {
    // Reading ends: each rank's connection thread sees EOF and leaves, after
    // it has sent any answer it owes.
    for (int fd : sockets) {
      if (fd >= 0) ::shutdown(fd, SHUT_RD);
    }
  }
};

std::shared_ptr<SessionRegistry> SessionRegistry::Create(engine::Engine& engine,
                                                         SessionLanes& lanes, jobs::JobQueue* queue,
                                                         SessionLimits limits) {
  std::shared_ptr<SessionRegistry> registry(new SessionRegistry(engine, lanes, queue, limits));
  std::weak_ptr<SessionRegistry> weak = registry;
  lanes.OnEnded([weak](const std::string& id, const absl::Status& ended) {
    if (std::shared_ptr<SessionRegistry> alive = weak.lock()) alive->Ended(id, ended);
  });
  return registry;
}

absl::StatusOr<SessionRegistry::Joined> SessionRegistry::Join(const RankPeer& peer,
                                                              const OpenRequest& request,
                                                              SessionPlan plan, int socket) {
  absl::MutexLock lock(&mu_);
  std::shared_ptr<Session> session;
  int owned = 0;
  for (const auto& [id, open] : open_) {
    if (open->owner != peer.owner) continue;
    ++owned;
    if (open->name == request.name) session = open;
  }
  if (session != nullptr) {
    if (session->graph_text != request.graph_text) {
      return absl::FailedPreconditionError(
          absl::StrCat("session ", Quoted(request.name), " (", session->id,
                       ") was opened with another graph: every rank must send the same one"));
    }
    if (session->state != Session::State::kJoining || !session->failure.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "session ", Quoted(request.name), " (", session->id, ") is past joining",
          session->failure.ok() ? "" : absl::StrCat(" (", session->failure.message(), ")"),
          ": open it again once its ranks have closed"));
    }
  }
  const int world = session != nullptr ? session->plan.world : plan.world;
  if (request.rank < 0 || request.rank >= world) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", request.rank, " is out of range: session ", Quoted(request.name),
                     " has ", world, " rank(s), 0..", world - 1));
  }
  if (session == nullptr) {
    if (owned >= limits_.max_per_owner) {
      return absl::ResourceExhaustedError(
          absl::StrCat(peer.owner_name, " (", peer.owner, ") has ", owned,
                       " session(s) open, the most session_max_per_owner allows"));
    }
    session = std::make_shared<Session>();
    session->id = absl::StrFormat("sess-%06d", next_id_++);
    session->name = request.name;
    session->owner = peer.owner;
    session->owner_name = peer.owner_name;
    session->graph_text = request.graph_text;
    session->plan = std::move(plan);
    session->settings = request;
    session->settings.graph_text.clear();
    session->opened_at = absl::Now();
    const size_t n = static_cast<size_t>(world);
    session->ranks.resize(n);
    session->joined.assign(n, 0);
    session->started.assign(n, 0);
    session->pids.assign(n, 0);
    session->sockets.assign(n, -1);
    session->registered.resize(n);
    open_[session->id] = session;
    if (queue_ != nullptr) queue_->HoldDevices(session->id, session->plan.devices);
    GetLogger("sessions")
        ->info("session {} ({}) of {} opened: {} rank(s) on device(s) {}", session->id,
               Excerpt(session->name, 80), session->owner, world,
               absl::StrJoin(session->plan.devices, ","));
  }
  const size_t r = static_cast<size_t>(request.rank);
  if (session->joined[r]) {
    return absl::AlreadyExistsError(absl::StrCat("rank ", request.rank, " of session ",
                                                 Quoted(request.name), " (", session->id,
                                                 ") is taken (pid ", session->pids[r], ")"));
  }
  session->joined[r] = 1;
  session->pids[r] = peer.pid;
  session->sockets[r] = socket;
  Joined joined;
  joined.ticket = Ticket{session, request.rank};
  joined.session_id = session->id;
  joined.device = session->plan.devices[r];
  joined.plan = &session->plan;
  return joined;
}

void SessionRegistry::Attach(const Ticket& ticket, std::unique_ptr<SessionRank> channel) {
  channel->tensors.assign(ticket.session->plan.graph.ops.size(), RankTensors{});
  absl::MutexLock lock(&mu_);
  ticket.session->ranks[static_cast<size_t>(ticket.rank)] = std::move(channel);
}

absl::Status SessionRegistry::Register(const Ticket& ticket, const std::string& op, TensorKind kind,
                                       int fd, int64_t offset, int64_t bytes) {
  Session& s = *ticket.session;
  const size_t r = static_cast<size_t>(ticket.rank);
  const TensorNeed* need = FindNeed(s.plan, op, kind);
  GetLogger("sessions")->debug("session {} rank {}: register {} ({} bytes)", s.id, r, op, bytes);
  const std::string what =
      kind == TensorKind::kSignals
          ? std::string("SIGNALS")
          : absl::StrCat("op ", Excerpt(op, 80), " tensor ", TensorKindName(kind));
  if (need == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": the session's graph needs no such tensor (OpenSessionReply.needs)"));
  }
  if (offset < 0 || bytes < need->bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": ", bytes, " bytes at offset ", offset, " registered, it needs ", need->bytes, " (",
        need->rows, " x ", need->cols, " ",
        kind == TensorKind::kSignals ? std::string("u64") : DTypeName(need->dtype), ")"));
  }
  const std::pair<int, int> key{need->op, static_cast<int>(kind)};
  int device = 0;
  {
    absl::MutexLock lock(&mu_);
    if (!s.failure.ok()) return s.failure;
    if (s.state != Session::State::kJoining || s.started[r]) {
      return absl::FailedPreconditionError(
          absl::StrCat(what, ": rank ", ticket.rank, " has started: it registers nothing more"));
    }
    if (s.registered[r].count(key) > 0) {
      return absl::AlreadyExistsError(absl::StrCat(what, ": registered already"));
    }
    int64_t& owner_bytes = mapped_by_owner_[s.owner];
    if (bytes > limits_.max_mapped_bytes_per_owner - owner_bytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat(what, ": ", bytes, " more bytes would take ", s.owner_name, " (", s.owner,
                       ") over ", limits_.max_mapped_bytes_per_owner,
                       " mapped bytes (session_max_mapped_bytes; ", owner_bytes, " mapped now)"));
    }
    owner_bytes += bytes;
    s.mapped_bytes += bytes;
    s.registered[r][key] = bytes;  // reserved: a second register waits for no import
    device = s.ranks[r] != nullptr ? s.ranks[r]->device : s.plan.devices[r];
  }
  absl::StatusOr<engine::BufferId> buffer;
  {
    absl::MutexLock lock(&import_mu_);
    buffer = engine_.Shared()->ImportBuffer(device, fd, static_cast<size_t>(offset),
                                            static_cast<size_t>(bytes));
  }
  absl::MutexLock lock(&mu_);
  SessionRank* rank = s.ranks[r].get();
  if (!buffer.ok() || rank == nullptr) {
    s.registered[r].erase(key);
    mapped_by_owner_[s.owner] -= bytes;
    s.mapped_bytes -= bytes;
    if (buffer.ok()) {
      absl::MutexLock import(&import_mu_);
      engine_.Free(*buffer);
    }
    if (!buffer.ok()) {
      return absl::Status(buffer.status().code(),
                          absl::StrCat(what, ": ", buffer.status().message()));
    }
    return absl::FailedPreconditionError(absl::StrCat(what, ": the rank has no channel"));
  }
  rank->mapped_bytes += bytes;
  if (kind == TensorKind::kSignals) {
    rank->signals = *buffer;
  } else {
    RankTensors& tensors = rank->tensors[static_cast<size_t>(need->op)];
    (kind == TensorKind::kX ? tensors.x : kind == TensorKind::kW ? tensors.w : tensors.y) = *buffer;
  }
  return absl::OkStatus();
}

absl::Status SessionRegistry::Start(const Ticket& ticket, absl::Duration join_timeout) {
  const std::shared_ptr<Session>& session = ticket.session;
  Session& s = *session;
  const size_t r = static_cast<size_t>(ticket.rank);
  GetLogger("sessions")->debug("session {} rank {}: start", s.id, r);
  absl::MutexLock lock(&mu_);
  if (!s.failure.ok()) return s.failure;
  std::vector<std::string> missing;
  for (const TensorNeed& need : s.plan.needs) {
    if (s.registered[r].count({need.op, static_cast<int>(need.kind)}) > 0) continue;
    missing.push_back(need.kind == TensorKind::kSignals
                          ? std::string("SIGNALS")
                          : absl::StrCat(Excerpt(need.op_id, 80), " ", TensorKindName(need.kind)));
  }
  if (!missing.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", ticket.rank, " has not registered: ", absl::StrJoin(missing, ", ")));
  }
  s.started[r] = 1;
  changed_.SignalAll();
  const absl::Time deadline = absl::Now() + join_timeout;
  while (s.state == Session::State::kJoining && s.failure.ok() && !s.AllStarted()) {
    changed_.WaitWithDeadline(&mu_, deadline);
    if (absl::Now() < deadline || s.state != Session::State::kJoining || !s.failure.ok() ||
        s.AllStarted()) {
      continue;
    }
    std::vector<std::string> late;
    for (size_t i = 0; i < s.started.size(); ++i) {
      if (s.started[i]) continue;
      late.push_back(s.joined[i] ? absl::StrCat(i) : absl::StrCat(i, " (never joined)"));
    }
    FailLocked(s,
               absl::DeadlineExceededError(absl::StrCat(
                   "session ", Quoted(s.name), " (", s.id, "): rank(s) ", absl::StrJoin(late, ", "),
                   " did not start within ", absl::FormatDuration(join_timeout))));
  }
  if (!s.failure.ok()) return s.failure;
  if (s.state == Session::State::kJoining) {
    s.state = Session::State::kStarting;
    mu_.Unlock();
    absl::Status handed = HandOff(session, deadline);
    mu_.Lock();
    if (handed.ok() && s.failure.ok()) {
      s.state = Session::State::kReady;
      GetLogger("sessions")->info("session {} started", s.id);
    } else {
      if (handed.ok()) {  // closed while it was handed over
        const absl::Status why = s.failure;
        mu_.Unlock();
        (void)lanes_.End(s.id, why.code(), std::string(why.message()));
        mu_.Lock();
      }
      s.state = Session::State::kJoining;
      FailLocked(s, handed.ok() ? s.failure : handed);
    }
    changed_.SignalAll();
  }
  while (s.state == Session::State::kStarting) changed_.Wait(&mu_);
  if (!s.failure.ok()) return s.failure;
  if (s.state != Session::State::kReady) return absl::CancelledError("the session ended");
  return absl::OkStatus();
}

absl::Status SessionRegistry::HandOff(const std::shared_ptr<Session>& session,
                                      absl::Time deadline) {
  Session& s = *session;
  std::vector<int> devices = s.plan.devices;
  std::sort(devices.begin(), devices.end());
  devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
  if (queue_ != nullptr) {
    while (true) {
      const std::string job = queue_->RunningOn(devices);
      if (job.empty()) break;
      {
        absl::MutexLock lock(&mu_);
        if (!s.failure.ok()) return s.failure;  // closed, or the daemon stops
      }
      if (absl::Now() >= deadline) {
        return absl::UnavailableError(absl::StrCat(
            "session ", Quoted(s.name), " (", s.id, "): job ", job, " runs on device(s) ",
            absl::StrJoin(devices, ","), " and did not end within the join timeout"));
      }
      absl::SleepFor(kJobPoll);
    }
  }
  SessionSetup setup;
  {
    absl::MutexLock lock(&mu_);
    if (!s.failure.ok()) return s.failure;
    setup.id = s.id;
    setup.name = s.name;
    setup.owner = s.owner;
    setup.owner_name = s.owner_name;
    setup.graph = s.plan.graph;
    setup.schedules = s.plan.schedules;
    setup.priority = s.settings.priority;
    setup.deferred_bound_ms = s.settings.deferred_bound_ms;
    setup.chunk_bytes = s.settings.chunk_bytes;
    setup.step_timeout = s.settings.step_timeout;
    setup.opened_at = s.opened_at;
    for (std::unique_ptr<SessionRank>& rank : s.ranks) {
      setup.ranks.push_back(std::move(*rank));
      rank.reset();
    }
  }
  GetLogger("sessions")->debug("session {}: handed to the lanes", s.id);
  return lanes_.Add(std::move(setup));
}

void SessionRegistry::Leave(const Ticket& ticket, const std::string& given_why,
                            bool closed_on_purpose) {
  if (ticket.session == nullptr) return;
  Session& s = *ticket.session;
  const size_t r = static_cast<size_t>(ticket.rank);
  std::unique_ptr<SessionRank> rank;
  {
    absl::MutexLock lock(&mu_);
    s.sockets[r] = -1;
    if (s.state == Session::State::kReady && closed_on_purpose) {
      // How it ends (closed, or failed with a command outstanding) is the
      // lanes' to say: Ended learns it.
      const std::string why =
          absl::StrCat("rank ", ticket.rank, " (pid ", s.pids[r], ") closed the session");
      const std::string id = s.id;
      mu_.Unlock();
      (void)lanes_.Close(id, why);
      mu_.Lock();
      return;
    }
    if (s.state == Session::State::kReady) {
      const std::string why =
          !given_why.empty()
              ? given_why
              : absl::StrCat("rank ", ticket.rank, " (pid ", s.pids[r], ") closed its connection");
      if (s.failure.ok()) s.failure = absl::UnavailableError(why);
      const std::string id = s.id;
      mu_.Unlock();
      (void)lanes_.End(id, absl::StatusCode::kUnavailable, why, ticket.rank);
      mu_.Lock();
      return;
    }
    if (s.state == Session::State::kEnded) return;
    rank = std::move(s.ranks[r]);
    for (const auto& [key, bytes] : s.registered[r]) {
      mapped_by_owner_[s.owner] -= bytes;
      s.mapped_bytes -= bytes;
    }
    s.registered[r].clear();
    s.joined[r] = 0;
    s.started[r] = 0;
    if (s.JoinedCount() == 0) RetireLocked(s, s.failure.ok() ? "closed" : "failed");
  }
  if (rank != nullptr) {
    absl::MutexLock lock(&import_mu_);
    ReleaseRank(engine_, *rank);
  }
}

absl::Status SessionRegistry::FailureOf(const Ticket& ticket) const {
  absl::MutexLock lock(&mu_);
  return ticket.session->failure;
}

absl::Status SessionRegistry::Close(const std::string& id, const std::string& owner, bool admin,
                                    const std::string& who) {
  mu_.Lock();
  auto it = open_.find(id);
  if (it == open_.end()) {
    mu_.Unlock();
    return absl::NotFoundError(absl::StrCat("no open session ", Excerpt(id, 80)));
  }
  Session& s = *it->second;
  if (s.owner != owner && !admin) {
    mu_.Unlock();
    return absl::PermissionDeniedError(absl::StrCat("session ", id, " is ", s.owner_name,
                                                    "'s: only its owner or an admin may close it"));
  }
  const absl::Status why = absl::CancelledError(absl::StrCat("closed by ", who));
  if (s.state == Session::State::kReady) {
    if (s.failure.ok()) s.failure = why;
    mu_.Unlock();
    absl::Status ended = lanes_.End(id, why.code(), std::string(why.message()));
    return ended.code() == absl::StatusCode::kNotFound ? absl::OkStatus() : ended;
  }
  FailLocked(s, why);
  mu_.Unlock();
  return absl::OkStatus();
}

void SessionRegistry::Ended(const std::string& id, const absl::Status& ended) {
  absl::MutexLock lock(&mu_);
  auto it = open_.find(id);
  if (it == open_.end()) return;
  Session& s = *it->second;
  // The lanes' first cause stands over what a caller asked for meanwhile.
  if (!ended.ok()) s.failure = ended;
  s.ShutDownSockets();
  RetireLocked(
      s, s.failure.ok() || s.failure.code() == absl::StatusCode::kCancelled ? "closed" : "failed");
}

void SessionRegistry::FailLocked(Session& session, absl::Status why) {
  if (session.failure.ok()) session.failure = std::move(why);
  session.ShutDownSockets();
  changed_.SignalAll();
}

void SessionRegistry::RetireLocked(Session& session, const std::string& state) {
  const std::shared_ptr<Session> keep = open_[session.id];
  open_.erase(session.id);
  mapped_by_owner_[session.owner] -= session.mapped_bytes;
  if (mapped_by_owner_[session.owner] == 0) mapped_by_owner_.erase(session.owner);
  session.mapped_bytes = 0;
  if (queue_ != nullptr) queue_->ReleaseDevices(session.id);
  session.state = Session::State::kEnded;
  session.ended_state = state;
  ended_.push_back(RowLocked(session));
  while (ended_.size() > kEndedKept) ended_.pop_front();
  changed_.SignalAll();
  GetLogger("sessions")
      ->info("session {} {}{}", session.id, state,
             session.failure.ok() ? "" : absl::StrCat(": ", session.failure.message()));
}

SessionRow SessionRegistry::RowLocked(const Session& s) const {
  SessionRow row;
  row.id = s.id;
  row.name = s.name;
  row.owner = s.owner;
  row.owner_name = s.owner_name;
  switch (s.state) {
    case Session::State::kJoining:
    case Session::State::kStarting:
      row.state = s.failure.ok() ? "joining" : "failed";
      break;
    case Session::State::kReady:
      row.state = "ready";
      break;
    case Session::State::kEnded:
      row.state = s.ended_state;
      break;
  }
  row.priority = s.settings.priority;
  row.world = s.plan.world;
  row.ranks_joined = s.JoinedCount();
  row.devices = s.plan.devices;
  row.mapped_bytes = s.mapped_bytes;
  row.deferred_bound_ms = s.settings.deferred_bound_ms;
  row.error = s.failure.ok() ? "" : std::string(s.failure.message());
  row.opened_at = s.opened_at;
  return row;
}

std::vector<SessionRow> SessionRegistry::List(const std::string& owner) const {
  absl::MutexLock lock(&mu_);
  std::vector<SessionRow> rows;
  for (const SessionRow& row : ended_) {
    if (owner.empty() || row.owner == owner) rows.push_back(row);
  }
  for (const auto& [id, session] : open_) {
    if (owner.empty() || session->owner == owner) rows.push_back(RowLocked(*session));
  }
  return rows;
}

int64_t SessionRegistry::MappedBytes() const {
  absl::MutexLock lock(&mu_);
  int64_t total = 0;
  for (const auto& [owner, bytes] : mapped_by_owner_) total += bytes;
  return total;
}

void SessionRegistry::Shutdown() {
  absl::MutexLock lock(&mu_);
  for (const auto& [id, session] : open_) {
    if (session->state != Session::State::kReady) {
      FailLocked(*session, absl::UnavailableError("overlapd is shutting down"));
    }
  }
}

}  // namespace overlap::sessions
