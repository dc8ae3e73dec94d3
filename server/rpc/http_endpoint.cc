#include "server/rpc/http_endpoint.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <exception>
#include <system_error>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "common/logging.h"

namespace overlap::rpc {
namespace {

using Clock = std::chrono::steady_clock;

// accept(2) out of file descriptors: wait this long before the next try rather
// than spin on a listening socket that stays readable.
constexpr std::chrono::milliseconds kAcceptPause{100};
// Bytes read from a finished connection before it is closed, so that a request
// body it sent does not turn the close into a reset that loses the answer.
constexpr size_t kMaxDrainBytes = 64 * 1024;

std::string ErrnoText(int error) { return std::strerror(error); }

const char* ReasonPhrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "Error";
  }
}

// HOST:PORT or [V6]:PORT into its parts; an empty host means every address.
absl::Status SplitHostPort(const std::string& address, std::string* host, std::string* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon + 1 == address.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics_listen: \"", address.substr(0, 200), "\" is not HOST:PORT"));
  }
  *host = address.substr(0, colon);
  *port = address.substr(colon + 1);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']') {
    *host = host->substr(1, host->size() - 2);
  }
  int number = 0;
  if (!absl::SimpleAtoi(*port, &number) || number < 0 || number > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics_listen: port \"", port->substr(0, 200), "\" is not 0-65535"));
  }
  return absl::OkStatus();
}

absl::Status CheckOptions(const HttpEndpointOptions& o) {
  if (o.idle_timeout.count() <= 0 || o.request_timeout.count() <= 0 ||
      o.write_timeout.count() <= 0 || o.max_connections < 1 || o.max_request_bytes < 64 ||
      o.workers < 1) {
    return absl::InvalidArgumentError(
        "metrics endpoint: timeouts must be > 0, max_connections and workers >= 1, "
        "max_request_bytes >= 64");
  }
  return absl::OkStatus();
}

std::string Serialize(const HttpResponse& response, bool with_body) {
  std::string out =
      absl::StrCat("HTTP/1.1 ", response.status, " ", ReasonPhrase(response.status),
                   "\r\nContent-Type: ", response.content_type,
                   "\r\nContent-Length: ", response.body.size(), "\r\nConnection: close\r\n\r\n");
  if (with_body) out += response.body;
  return out;
}

HttpResponse Plain(int status, std::string body) {
  HttpResponse response;
  response.status = status;
  response.body = std::move(body);
  return response;
}

bool HeadComplete(const std::string& head) {
  return absl::StrContains(head, "\r\n\r\n") || absl::StrContains(head, "\n\n");
}

// The answer to one request head, serialized; runs the route's handler.
std::string Respond(const HttpEndpoint::Routes& routes, const std::string& head) {
  const std::string line = head.substr(0, head.find_first_of("\r\n"));
  std::vector<std::string> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
  if (parts.size() < 2) return Serialize(Plain(400, "bad request\n"), true);
  const std::string& method = parts[0];
  const std::string target = parts[1].substr(0, parts[1].find('?'));
  const bool head_only = method == "HEAD";
  if (method != "GET" && !head_only) return Serialize(Plain(405, "only GET\n"), true);
  const auto route = routes.find(target);
  if (route == routes.end()) {
    std::string paths;
    for (const auto& [path, handler] : routes) {
      absl::StrAppend(&paths, paths.empty() ? "" : ", ", path);
    }
    return Serialize(Plain(404, absl::StrCat("not found; this endpoint serves ", paths, "\n")),
                     !head_only);
  }
  HttpResponse response;
  try {
    response = route->second();
  } catch (const std::exception& e) {
    GetLogger("metrics")->error("scrape failed: {}", e.what());
    response = Plain(500, absl::StrCat("scrape failed: ", e.what(), "\n"));
  }
  return Serialize(response, !head_only);
}

// Reads what is left to read (bounded) and closes `fd`.
void DrainAndClose(int fd) {
  ::shutdown(fd, SHUT_WR);
  char buffer[4096];
  size_t drained = 0;
  while (drained < kMaxDrainBytes) {
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n <= 0) break;
    drained += static_cast<size_t>(n);
  }
  ::close(fd);
}

// A listening socket on `address`, non-blocking; its port through `port`.
absl::StatusOr<int> Listen(const std::string& address, int* port) {
  std::string host, service;
  if (absl::Status s = SplitHostPort(address, &host, &service); !s.ok()) return s;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int rc =
          ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &found);
      rc != 0) {
    return absl::InvalidArgumentError(absl::StrCat("metrics_listen: cannot resolve \"",
                                                   host.substr(0, 200), "\": ", gai_strerror(rc)));
  }
  int listen_fd = -1;
  std::string why = "no address to listen on";
  for (addrinfo* ai = found; ai != nullptr && listen_fd < 0; ai = ai->ai_next) {
    const int fd =
        ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    if (fd < 0) {
      why = ErrnoText(errno);
      continue;
    }
    const int on = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, SOMAXCONN) != 0) {
      why = ErrnoText(errno);
      ::close(fd);
      continue;
    }
    listen_fd = fd;
  }
  ::freeaddrinfo(found);
  if (listen_fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("metrics_listen: cannot serve metrics on ", address, ": ", why));
  }
  sockaddr_storage bound{};
  socklen_t bound_len = sizeof(bound);
  *port = 0;
  if (::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&bound), &bound_len) == 0) {
    *port = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                        : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  }
  return listen_fd;
}

}  // namespace

// The I/O thread's connections and the queue between it and the workers. Only
// the I/O thread touches `connections_`; the queues are under `mu_`.
class HttpEndpoint::Loop {
 public:
  Loop(int listen_fd, int wake_fd, int port, Routes routes, HttpEndpointOptions options)
      : listen_fd_(listen_fd),
        wake_fd_(wake_fd),
        port_(port),
        routes_(std::move(routes)),
        options_(options) {}
  ~Loop() {
    for (auto& [id, connection] : connections_) ::close(connection.fd);
    ::close(listen_fd_);
    ::close(wake_fd_);
  }

  int port() const { return port_; }
  void Serve();  // the I/O thread, until Stop
  void Work();   // a worker, until Stop
  void Stop();

 private:
  enum class Phase { kReading, kAnswering, kWriting };
  struct Connection {
    int fd = -1;
    Phase phase = Phase::kReading;
    std::string in;
    std::string out;
    size_t sent = 0;
    Clock::time_point opened, last_read, write_deadline;
  };
  struct Request {
    uint64_t id;
    std::string head;
  };
  struct Answer {
    uint64_t id;
    std::string bytes;
  };

  void Wake();
  bool HasWorkOrStopping() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || !requests_.empty();
  }
  bool Stopping() {
    absl::MutexLock lock(&mu_);
    return stopping_;
  }
  void AcceptAll(Clock::time_point now);
  bool CloseOldestReading();
  void Read(uint64_t id, Connection& c, Clock::time_point now);
  void Dispatch(uint64_t id, Connection& c);
  void StartWriting(Connection& c, std::string bytes, Clock::time_point now);
  void Write(uint64_t id, Connection& c);
  void TakeAnswers(Clock::time_point now);
  void ExpireDeadlines(Clock::time_point now);
  Clock::time_point Deadline(const Connection& c) const;
  int PollTimeoutMs(Clock::time_point now) const;
  void Close(uint64_t id);

  const int listen_fd_;
  const int wake_fd_;  // an eventfd: answers are ready, or Stop was called
  const int port_;
  const Routes routes_;
  const HttpEndpointOptions options_;

  std::map<uint64_t, Connection> connections_;  // by id: the oldest first
  uint64_t next_id_ = 1;
  Clock::time_point accept_paused_until_{};

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<Request> requests_ ABSL_GUARDED_BY(mu_);
  std::vector<Answer> answers_ ABSL_GUARDED_BY(mu_);
};

void HttpEndpoint::Loop::Wake() {
  const uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof(one));
}

void HttpEndpoint::Loop::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  Wake();
}

void HttpEndpoint::Loop::Serve() {
  std::vector<pollfd> fds;
  std::vector<uint64_t> ids;  // the connection of fds[i + 2]
  while (true) {
    const Clock::time_point now = Clock::now();
    fds.clear();
    ids.clear();
    const bool accepting = now >= accept_paused_until_;
    fds.push_back({wake_fd_, POLLIN, 0});
    fds.push_back({listen_fd_, static_cast<short>(accepting ? POLLIN : 0), 0});
    for (const auto& [id, c] : connections_) {
      if (c.phase == Phase::kAnswering) continue;
      fds.push_back({c.fd, static_cast<short>(c.phase == Phase::kReading ? POLLIN : POLLOUT), 0});
      ids.push_back(id);
    }
    if (::poll(fds.data(), fds.size(), PollTimeoutMs(now)) < 0 && errno != EINTR) {
      GetLogger("metrics")->error("metrics endpoint stopped: poll: {}", ErrnoText(errno));
      return;
    }
    const Clock::time_point woke = Clock::now();
    if (fds[0].revents != 0) {
      uint64_t count = 0;
      (void)!::read(wake_fd_, &count, sizeof(count));
      if (Stopping()) return;
      TakeAnswers(woke);
    }
    for (size_t i = 0; i < ids.size(); ++i) {
      if (fds[i + 2].revents == 0) continue;
      auto it = connections_.find(ids[i]);
      if (it == connections_.end()) continue;
      if (it->second.phase == Phase::kReading) {
        Read(it->first, it->second, woke);
      } else {
        Write(it->first, it->second);
      }
    }
    if ((fds[1].revents & POLLIN) != 0) AcceptAll(woke);
    ExpireDeadlines(woke);
  }
}

void HttpEndpoint::Loop::AcceptAll(Clock::time_point now) {
  while (true) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        if (!CloseOldestReading()) accept_paused_until_ = now + kAcceptPause;
      }
      return;  // EAGAIN: none left
    }
    if (static_cast<int>(connections_.size()) >= options_.max_connections &&
        !CloseOldestReading()) {
      // Every connection is being answered: this one is told so at once.
      const std::string busy = Serialize(
          Plain(503, "busy: every metrics connection is being answered, try again\n"), true);
      (void)!::send(fd, busy.data(), busy.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      DrainAndClose(fd);
      continue;
    }
    Connection& c = connections_[next_id_++];
    c.fd = fd;
    c.opened = c.last_read = now;
  }
}

bool HttpEndpoint::Loop::CloseOldestReading() {
  for (auto it = connections_.begin(); it != connections_.end(); ++it) {
    if (it->second.phase != Phase::kReading) continue;
    Close(it->first);
    return true;
  }
  return false;
}

void HttpEndpoint::Loop::Read(uint64_t id, Connection& c, Clock::time_point now) {
  char buffer[4096];
  while (true) {
    const size_t room = options_.max_request_bytes + 1 - c.in.size();
    const ssize_t n = ::recv(c.fd, buffer, std::min(room, sizeof(buffer)), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n < 0 || (n == 0 && c.in.empty())) {
      Close(id);
      return;
    }
    if (n == 0) break;  // the client closed its side: answer what came
    c.in.append(buffer, static_cast<size_t>(n));
    c.last_read = now;
    if (HeadComplete(c.in)) break;
    if (c.in.size() > options_.max_request_bytes) {
      StartWriting(c,
                   Serialize(Plain(431, absl::StrCat("request head larger than ",
                                                     options_.max_request_bytes, " bytes\n")),
                             true),
                   now);
      return;
    }
  }
  Dispatch(id, c);
}

void HttpEndpoint::Loop::Dispatch(uint64_t id, Connection& c) {
  c.phase = Phase::kAnswering;
  {
    absl::MutexLock lock(&mu_);
    requests_.push_back({id, std::move(c.in)});
  }
  c.in.clear();
}

void HttpEndpoint::Loop::StartWriting(Connection& c, std::string bytes, Clock::time_point now) {
  c.phase = Phase::kWriting;
  c.out = std::move(bytes);
  c.sent = 0;
  c.write_deadline = now + options_.write_timeout;
}

void HttpEndpoint::Loop::Write(uint64_t id, Connection& c) {
  while (c.sent < c.out.size()) {
    const ssize_t n = ::send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) break;  // the client went away
    c.sent += static_cast<size_t>(n);
  }
  DrainAndClose(c.fd);
  connections_.erase(id);
}

void HttpEndpoint::Loop::TakeAnswers(Clock::time_point now) {
  std::vector<Answer> answers;
  {
    absl::MutexLock lock(&mu_);
    answers.swap(answers_);
  }
  for (Answer& answer : answers) {
    auto it = connections_.find(answer.id);
    if (it == connections_.end()) continue;
    StartWriting(it->second, std::move(answer.bytes), now);
    Write(answer.id, it->second);  // most answers fit the socket's buffer at once
  }
}

Clock::time_point HttpEndpoint::Loop::Deadline(const Connection& c) const {
  switch (c.phase) {
    case Phase::kReading:
      return std::min(c.opened + options_.request_timeout, c.last_read + options_.idle_timeout);
    case Phase::kWriting:
      return c.write_deadline;
    case Phase::kAnswering:
      break;
  }
  return Clock::time_point::max();  // a handler's time is the handler's
}

void HttpEndpoint::Loop::ExpireDeadlines(Clock::time_point now) {
  std::vector<uint64_t> expired;
  for (const auto& [id, c] : connections_) {
    if (Deadline(c) <= now) expired.push_back(id);
  }
  for (uint64_t id : expired) Close(id);
}

int HttpEndpoint::Loop::PollTimeoutMs(Clock::time_point now) const {
  Clock::time_point next = Clock::time_point::max();
  if (now < accept_paused_until_) next = accept_paused_until_;
  for (const auto& [id, c] : connections_) next = std::min(next, Deadline(c));
  if (next == Clock::time_point::max()) return -1;
  if (next <= now) return 0;
  // Rounded up, so that a deadline is past when poll returns.
  return static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1);
}

void HttpEndpoint::Loop::Close(uint64_t id) {
  auto it = connections_.find(id);
  if (it == connections_.end()) return;
  ::close(it->second.fd);
  connections_.erase(it);
}

void HttpEndpoint::Loop::Work() {
  while (true) {
    Request request;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &Loop::HasWorkOrStopping));
      if (stopping_) return;
      request = std::move(requests_.front());
      requests_.pop_front();
    }
    std::string bytes = Respond(routes_, request.head);
    {
      absl::MutexLock lock(&mu_);
      answers_.push_back({request.id, std::move(bytes)});
    }
    Wake();
  }
}

absl::StatusOr<std::unique_ptr<HttpEndpoint>> HttpEndpoint::Start(const std::string& address,
                                                                  Routes routes,
                                                                  HttpEndpointOptions options) {
  if (absl::Status s = CheckOptions(options); !s.ok()) return s;
  int port = 0;
  absl::StatusOr<int> listen_fd = Listen(address, &port);
  if (!listen_fd.ok()) return listen_fd.status();
  const int wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd < 0) {
    const int error = errno;
    ::close(*listen_fd);
    return absl::FailedPreconditionError(
        absl::StrCat("metrics_listen: cannot make an eventfd: ", ErrnoText(error)));
  }
  std::unique_ptr<HttpEndpoint> endpoint(new HttpEndpoint(
      std::make_unique<Loop>(*listen_fd, wake_fd, port, std::move(routes), options)));
  Loop* loop = endpoint->loop_.get();
  try {
    for (int i = 0; i < options.workers; ++i) {
      endpoint->workers_.emplace_back([loop] { loop->Work(); });
    }
    endpoint->io_thread_ = std::thread([loop] { loop->Serve(); });
  } catch (const std::system_error& e) {
    // The destructor stops and joins the threads that did start.
    return absl::FailedPreconditionError(
        absl::StrCat("metrics_listen: cannot start the metrics threads: ", e.what()));
  }
  return endpoint;
}

HttpEndpoint::HttpEndpoint(std::unique_ptr<Loop> loop) : loop_(std::move(loop)) {}

HttpEndpoint::~HttpEndpoint() {
  loop_->Stop();
  if (io_thread_.joinable()) io_thread_.join();
  for (std::thread& worker : workers_) {
    if (worker.joinable()) worker.join();
  }
}

int HttpEndpoint::port() const { return loop_->port(); }

}  // namespace overlap::rpc
