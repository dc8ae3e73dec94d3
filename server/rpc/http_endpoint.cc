#include "server/rpc/http_endpoint.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <system_error>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/logging.h"

namespace overlap::rpc {
namespace {

// A scraper that sends nothing, or sends slowly, is cut off after this long so
// that the next scrape is not held up.
constexpr int kRequestTimeoutMs = 5000;
// Request line and headers; a scrape's are a few hundred bytes.
constexpr size_t kMaxRequestBytes = 16 * 1024;

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
    case 500:
      return "Internal Server Error";
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

// Sends all of `data`; false when the peer went away.
bool SendAll(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

// The request line and headers, read until the blank line, the size cap or the
// timeout; empty when the client sent nothing usable.
std::string ReadRequestHead(int fd) {
  std::string head;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kRequestTimeoutMs);
  char buffer[4096];
  while (head.size() < kMaxRequestBytes && !absl::StrContains(head, "\r\n\r\n") &&
         !absl::StrContains(head, "\n\n")) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) return "";
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(left));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return "";
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the client closed its side: take what came
    head.append(buffer, static_cast<size_t>(n));
  }
  return head;
}

std::string Serialize(const HttpResponse& response, bool with_body) {
  std::string out = absl::StrCat("HTTP/1.1 ", response.status, " ", ReasonPhrase(response.status),
                                 "\r\nContent-Type: ", response.content_type,
                                 "\r\nContent-Length: ", response.body.size(),
                                 "\r\nConnection: close\r\n\r\n");
  if (with_body) out += response.body;
  return out;
}

HttpResponse Plain(int status, std::string body) {
  HttpResponse response;
  response.status = status;
  response.body = std::move(body);
  return response;
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpEndpoint>> HttpEndpoint::Start(const std::string& address,
                                                                  Routes routes) {
  std::string host, port;
  if (absl::Status s = SplitHostPort(address, &host, &port); !s.ok()) return s;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints,
                                   &found);
      rc != 0) {
    return absl::InvalidArgumentError(absl::StrCat("metrics_listen: cannot resolve \"",
                                                   host.substr(0, 200), "\": ", gai_strerror(rc)));
  }
  int listen_fd = -1;
  std::string why = "no address to listen on";
  for (addrinfo* ai = found; ai != nullptr && listen_fd < 0; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      why = ErrnoText(errno);
      continue;
    }
    const int on = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, 16) != 0) {
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
  int bound_port = 0;
  if (::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&bound), &bound_len) == 0) {
    bound_port = bound.ss_family == AF_INET6
                     ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                     : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  }
  const int stop_fd = ::eventfd(0, EFD_CLOEXEC);
  if (stop_fd < 0) {
    const int error = errno;
    ::close(listen_fd);
    return absl::FailedPreconditionError(
        absl::StrCat("metrics_listen: cannot make an eventfd: ", ErrnoText(error)));
  }
  std::unique_ptr<HttpEndpoint> endpoint(
      new HttpEndpoint(listen_fd, stop_fd, bound_port, std::move(routes)));
  try {
    endpoint->thread_ = std::thread([e = endpoint.get()] { e->Serve(); });
  } catch (const std::system_error& e) {
    return absl::FailedPreconditionError(
        absl::StrCat("metrics_listen: cannot start the metrics thread: ", e.what()));
  }
  return endpoint;
}

HttpEndpoint::HttpEndpoint(int listen_fd, int stop_fd, int port, Routes routes)
    : listen_fd_(listen_fd), stop_fd_(stop_fd), port_(port), routes_(std::move(routes)) {}

HttpEndpoint::~HttpEndpoint() {
  const uint64_t one = 1;
  (void)!::write(stop_fd_, &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
  ::close(listen_fd_);
  ::close(stop_fd_);
}

void HttpEndpoint::Serve() {
  while (true) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      GetLogger("metrics")->error("metrics endpoint stopped: poll: {}", ErrnoText(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;  // the client went away, or fds ran out: try the next one
    Answer(fd);
    ::close(fd);
  }
}

void HttpEndpoint::Answer(int fd) {
  const std::string head = ReadRequestHead(fd);
  const std::string line = head.substr(0, head.find_first_of("\r\n"));
  std::vector<std::string> parts = absl::StrSplit(line, ' ', absl::SkipEmpty());
  if (parts.size() < 2) {
    SendAll(fd, Serialize(Plain(400, "bad request\n"), true));
    return;
  }
  const std::string& method = parts[0];
  const std::string target = parts[1].substr(0, parts[1].find('?'));
  const bool head_only = method == "HEAD";
  if (method != "GET" && !head_only) {
    SendAll(fd, Serialize(Plain(405, "only GET\n"), true));
    return;
  }
  const auto route = routes_.find(target);
  if (route == routes_.end()) {
    std::string paths;
    for (const auto& [path, handler] : routes_)
      absl::StrAppend(&paths, paths.empty() ? "" : ", ", path);
    SendAll(fd, Serialize(Plain(404, absl::StrCat("not found; this endpoint serves ", paths, "\n")),
                          !head_only));
    return;
  }
  HttpResponse response;
  try {
    response = route->second();
  } catch (const std::exception& e) {
    GetLogger("metrics")->error("scrape failed: {}", e.what());
    response = Plain(500, absl::StrCat("scrape failed: ", e.what(), "\n"));
  }
  SendAll(fd, Serialize(response, !head_only));
}

}  // namespace overlap::rpc
