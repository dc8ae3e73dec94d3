#include "server/rpc/unix_listener.h"

#include <fcntl.h>
#include <grpcpp/server.h>
#include <grpcpp/server_posix.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/strip.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace overlap::rpc {

absl::StatusOr<std::unique_ptr<UnixListener>> UnixListener::Bind(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::FailedPreconditionError(absl::StrCat("listen: socket(): ", std::strerror(errno)));
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 64) != 0) {
    const int error = errno;
    ::close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat("listen: cannot listen on unix:", path, ": ", std::strerror(error)));
  }
  const int stop_fd = ::eventfd(0, EFD_CLOEXEC);
  if (stop_fd < 0) {
    const int error = errno;
    ::close(fd);
    return absl::FailedPreconditionError(absl::StrCat("listen: eventfd(): ", std::strerror(error)));
  }
  return std::unique_ptr<UnixListener>(new UnixListener(fd, stop_fd));
}

UnixListener::~UnixListener() {
  Stop();
  ::close(listen_fd_);
  ::close(stop_fd_);
}

void UnixListener::Stop() {
  const uint64_t one = 1;
  (void)!::write(stop_fd_, &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
}

void UnixListener::Start(grpc::Server* server) {
  thread_ = std::thread([this, server] { Accept(server); });
}

void UnixListener::Accept(grpc::Server* server) {
  while (true) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      GetLogger("rpc")->error("unix socket: poll: {}", std::strerror(errno));
      return;
    }
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & POLLIN) == 0) continue;
    // gRPC's endpoints want non-blocking sockets.
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) continue;  // the client went away, or fds ran out: take the next one
    ucred cred{};
    socklen_t len = sizeof(cred);
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
      GetLogger("rpc")->warn("unix socket: no peer credentials ({}): connection refused",
                             std::strerror(errno));
      ::close(fd);
      continue;
    }
    {
      absl::MutexLock lock(&mu_);
      peers_[fd] = PeerCredentials{cred.uid, cred.gid, cred.pid};
    }
    grpc::AddInsecureChannelFromFd(server, fd);
  }
}

std::optional<PeerCredentials> UnixListener::PeerOf(const std::string& peer) const {
  absl::string_view name = peer;
  int fd = -1;
  if (!absl::ConsumePrefix(&name, "fd:") || !absl::SimpleAtoi(name, &fd)) return std::nullopt;
  absl::MutexLock lock(&mu_);
  auto it = peers_.find(fd);
  if (it == peers_.end()) return std::nullopt;
  return it->second;
}

}  // namespace overlap::rpc
