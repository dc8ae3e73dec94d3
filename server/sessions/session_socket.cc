#include "server/sessions/session_socket.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/unix_accounts.h"
#include "common/unix_frames.h"
#include "overlap/v1/session.pb.h"
#include "server/net/listen_address.h"
#include "server/net/unix_socket.h"
#include "server/sessions/rank_channel.h"
#include "server/sessions/session_frames.h"

namespace overlap::sessions {
namespace {

auto Log() { return GetLogger("sessions"); }

absl::Status SendStatus(int socket, const absl::Status& status) {
  v1::SessionFrame frame;
  frame.mutable_status()->set_code(static_cast<int>(status.code()));
  frame.mutable_status()->set_message(std::string(status.message()));
  return SendFrame(socket, frame.SerializeAsString());
}

absl::StatusOr<v1::SessionFrame> Receive(int socket, int64_t max_bytes, absl::Duration timeout,
                                         std::vector<OwnedFd>* fds) {
  ASSIGN_OR_RETURN(Frame frame, ReceiveFrame(socket, static_cast<size_t>(max_bytes), timeout));
  v1::SessionFrame parsed;
  if (!parsed.ParseFromString(frame.bytes)) {
    return absl::InvalidArgumentError("a frame that is not a SessionFrame");
  }
  *fds = std::move(frame.fds);
  return parsed;
}

// How a started rank's connection ended.
enum class RankEnd {
  kGone,    // closed without a word (exit, kill), unreadable, or the daemon stops
  kClosed,  // the client sent LeaveSessionRequest: it leaves on purpose
};

// Until the peer closes (or Stop shuts the socket): the rank is alive. A
// close request says it leaves on purpose; other frames mean nothing now.
RankEnd WatchUntilClosed(int socket, int stop_fd, int64_t max_frame_bytes) {
  while (true) {
    pollfd fds[2] = {{socket, POLLIN | POLLRDHUP, 0}, {stop_fd, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return RankEnd::kGone;
    }
    if (fds[1].revents != 0) return RankEnd::kGone;
    // A close request may come just before the hang-up: read what is there first.
    if ((fds[0].revents & POLLIN) == 0) return RankEnd::kGone;
    std::vector<OwnedFd> passed;
    absl::StatusOr<v1::SessionFrame> frame =
        Receive(socket, max_frame_bytes, absl::Seconds(10), &passed);
    if (!frame.ok()) return RankEnd::kGone;  // EOF, or not a frame
    if (frame->has_leave()) return RankEnd::kClosed;
  }
}

// A register request: one fd beside it, a tensor the protocol knows.
absl::Status Register(SessionRegistry& registry, const SessionRegistry::Ticket& ticket,
                      const v1::RegisterTensorRequest& r, const std::vector<OwnedFd>& fds) {
  if (fds.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("a register request carries one fd beside it (got ", fds.size(), ")"));
  }
  if (!ValidTensor(r.tensor())) {
    return absl::InvalidArgumentError("register: tensor is X, W, Y or SIGNALS");
  }
  return registry.Register(ticket, r.op(), static_cast<TensorKind>(r.tensor()), fds[0].get(),
                           r.offset(), r.bytes());
}

}  // namespace

struct SessionSocket::Connection {
  OwnedFd socket;
  uid_t uid = 0;
  pid_t pid = 0;
  std::thread thread;
  std::atomic<bool> done{false};
};

SessionSocket::SessionSocket(SessionSocketOptions options, engine::Engine& engine,
                             const jobs::Admission& admission, int listen_fd, int stop_fd)
    : options_(std::move(options)),
      engine_(engine),
      admission_(admission),
      listen_fd_(listen_fd),
      stop_fd_(stop_fd) {}

absl::StatusOr<std::unique_ptr<SessionSocket>> SessionSocket::Start(
    SessionSocketOptions options, engine::Engine& engine, const jobs::Admission& admission,
    SessionLanes& lanes, jobs::JobQueue* queue) {
  if (engine.Shared() == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "sessions: the ", engine.Name(), " backend cannot map another process's memory"));
  }
  if (options.max_connections_per_uid <= 0) {
    options.max_connections_per_uid =
        options.limits.max_per_owner * std::max(1, engine.DeviceCount()) + 4;
  }
  RETURN_IF_ERROR(net::PrepareUnixSocketPath(options.path));
  ASSIGN_OR_RETURN(OwnedFd listening, net::ListenOnUnixSocket(options.path, "session_socket"));
  if (absl::Status opened = net::OpenUnixSocketToGroup(options.path, options.socket_gid);
      !opened.ok()) {
    ::unlink(options.path.c_str());
    return opened;
  }
  const int listen_fd = listening.Release();
  const int stop_fd = ::eventfd(0, EFD_CLOEXEC);
  if (stop_fd < 0) {
    ::close(listen_fd);
    ::unlink(options.path.c_str());
    return absl::ResourceExhaustedError(absl::StrCat("eventfd(): ", std::strerror(errno)));
  }
  std::unique_ptr<SessionSocket> socket(
      new SessionSocket(std::move(options), engine, admission, listen_fd, stop_fd));
  socket->registry_ = SessionRegistry::Create(engine, lanes, queue, socket->options_.limits);
  socket->accept_thread_ = std::thread([raw = socket.get()] { raw->Accept(); });
  return socket;
}

SessionSocket::~SessionSocket() {
  Stop();
  ::close(listen_fd_);
  ::close(stop_fd_);
}

void SessionSocket::Stop() {
  if (stopped_) return;
  stopped_ = true;
  stopping_.store(true);
  const uint64_t one = 1;
  (void)!::write(stop_fd_, &one, sizeof(one));
  if (accept_thread_.joinable()) accept_thread_.join();
  registry_->Shutdown();
  std::list<std::unique_ptr<Connection>> connections;
  {
    absl::MutexLock lock(&mu_);
    // Wakes every connection thread blocked reading its socket.
    for (const auto& connection : connections_) {
      if (!connection->done.load()) ::shutdown(connection->socket.get(), SHUT_RDWR);
    }
    connections.swap(connections_);
  }
  for (const auto& connection : connections) {
    if (connection->thread.joinable()) connection->thread.join();
  }
  ::unlink(options_.path.c_str());
}

void SessionSocket::ReapLocked() {
  for (auto it = connections_.begin(); it != connections_.end();) {
    if (!(*it)->done.load()) {
      ++it;
      continue;
    }
    if ((*it)->thread.joinable()) (*it)->thread.join();
    it = connections_.erase(it);
  }
}

void SessionSocket::Accept() {
  while (true) {
    absl::StatusOr<OwnedFd> accepted = net::AcceptUntilStopped(listen_fd_, stop_fd_, SOCK_CLOEXEC);
    if (!accepted.ok()) {
      if (!absl::IsCancelled(accepted.status())) {
        Log()->error("session socket: {}", std::string(accepted.status().message()));
      }
      return;
    }
    OwnedFd fd = *std::move(accepted);
    if (!fd.valid()) continue;
    absl::StatusOr<net::PeerCredentials> cred = net::PeerCredentialsOf(fd.get());
    if (!cred.ok()) {
      Log()->warn("session socket: {}: connection refused", std::string(cred.status().message()));
      continue;
    }
    absl::MutexLock lock(&mu_);
    ReapLocked();
    int& count = per_uid_[cred->uid];
    if (count >= options_.max_connections_per_uid) {
      (void)SendStatus(fd.get(), absl::ResourceExhaustedError(
                                     absl::StrCat("uid ", cred->uid, " has ", count,
                                                  " session connections open, the most allowed")));
      continue;
    }
    ++count;
    auto connection = std::make_unique<Connection>();
    connection->socket = std::move(fd);
    connection->uid = cred->uid;
    connection->pid = cred->pid;
    Connection* raw = connection.get();
    connections_.push_back(std::move(connection));
    raw->thread = std::thread([this, raw] {
      Serve(raw);
      absl::MutexLock lock(&mu_);
      if (--per_uid_[raw->uid] == 0) per_uid_.erase(raw->uid);
      raw->socket = OwnedFd();  // closed now, not when the thread is reaped
      raw->done.store(true);
    });
  }
}

void SessionSocket::Serve(Connection* connection) {
  absl::Duration join_timeout;
  std::optional<SessionRegistry::Ticket> ticket = Join(*connection, &join_timeout);
  if (!ticket.has_value()) return;
  const int socket = connection->socket.get();
  if (!RegisterUntilStarted(socket, *ticket, join_timeout)) return;
  const RankEnd end = WatchUntilClosed(socket, stop_fd_, options_.max_frame_bytes);
  registry_->Leave(*ticket, stopping_.load() ? "overlapd is shutting down" : "",
                   end == RankEnd::kClosed && !stopping_.load());
}

std::optional<SessionRegistry::Ticket> SessionSocket::Join(const Connection& connection,
                                                           absl::Duration* join_timeout) {
  const int socket = connection.socket.get();
  std::vector<OwnedFd> fds;
  absl::StatusOr<v1::SessionFrame> first =
      Receive(socket, options_.max_frame_bytes, options_.open_timeout, &fds);
  if (!first.ok()) {
    if (first.status().code() != absl::StatusCode::kUnavailable) {
      (void)SendStatus(socket, first.status());
    }
    return std::nullopt;
  }
  if (!first->has_open()) {
    (void)SendStatus(socket, absl::InvalidArgumentError(
                                 "the first frame on the session socket must be an open request"));
    return std::nullopt;
  }
  RankPeer peer;
  peer.owner = absl::StrCat("uid:", connection.uid);
  std::optional<UnixUser> user = LookupUser(connection.uid);
  peer.owner_name = user ? user->name : absl::StrCat("uid ", connection.uid);
  peer.pid = connection.pid;
  const OpenDefaults defaults{options_.join_timeout, options_.step_timeout,
                              options_.deferred_bound_ms};
  absl::StatusOr<OpenRequest> request = OpenRequestFrom(first->open(), defaults, join_timeout);
  absl::StatusOr<SessionPlan> plan = request.ok()
                                         ? PlanSession(admission_, engine_, request->graph_text)
                                         : absl::StatusOr<SessionPlan>(request.status());
  absl::StatusOr<SessionRegistry::Joined> joined =
      plan.ok() ? registry_->Join(peer, *request, *std::move(plan), socket)
                : absl::StatusOr<SessionRegistry::Joined>(plan.status());
  if (!joined.ok()) {
    (void)SendStatus(socket, joined.status());
    return std::nullopt;
  }
  const SessionRegistry::Ticket ticket = joined->ticket;
  absl::StatusOr<std::unique_ptr<SessionRank>> channel =
      MakeRankChannel(ticket.rank, joined->device, connection.pid);
  if (!channel.ok()) {
    (void)SendStatus(socket, channel.status());
    registry_->Leave(ticket);
    return std::nullopt;
  }
  const std::string reply = OpenReplyFrame(*joined, engine_).SerializeAsString();
  const std::vector<int> reply_fds = {(*channel)->ring_fd.get(), (*channel)->posted_doorbell.get(),
                                      (*channel)->completed_doorbell.get()};
  if (!SendFrame(socket, reply, reply_fds).ok()) {
    ReleaseRank(engine_, **channel);
    registry_->Leave(ticket);
    return std::nullopt;
  }
  registry_->Attach(ticket, *std::move(channel));
  return ticket;
}

bool SessionSocket::RegisterUntilStarted(int socket, const SessionRegistry::Ticket& ticket,
                                         absl::Duration join_timeout) {
  std::vector<OwnedFd> fds;
  while (true) {
    absl::StatusOr<v1::SessionFrame> frame =
        Receive(socket, options_.max_frame_bytes, join_timeout, &fds);
    if (!frame.ok()) {
      // The session failed (closed, a rank late): the rank learns why.
      const absl::Status failure = registry_->FailureOf(ticket);
      if (!failure.ok()) {
        (void)SendStatus(socket, failure);
      } else if (frame.status().code() == absl::StatusCode::kDeadlineExceeded ||
                 frame.status().code() == absl::StatusCode::kResourceExhausted ||
                 frame.status().code() == absl::StatusCode::kInvalidArgument) {
        (void)SendStatus(socket, frame.status());
      }
      registry_->Leave(ticket);
      return false;
    }
    if (frame->has_register_tensor()) {
      const absl::Status registered = Register(*registry_, ticket, frame->register_tensor(), fds);
      fds.clear();
      if (!SendStatus(socket, registered).ok()) {
        registry_->Leave(ticket);
        return false;
      }
      continue;
    }
    fds.clear();
    if (frame->has_start()) {
      const absl::Status started = registry_->Start(ticket, join_timeout);
      if (!SendStatus(socket, started).ok() || !started.ok()) {
        registry_->Leave(ticket);
        return false;
      }
      return true;
    }
    (void)SendStatus(socket, absl::InvalidArgumentError(
                                 "after opening, a rank sends register and start requests only"));
    registry_->Leave(ticket);
    return false;
  }
}

}  // namespace overlap::sessions
