#include "server/rpc/unix_listener.h"

#include <grpcpp/server.h>
#include <grpcpp/server_posix.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/logging.h"

namespace overlap::rpc {

absl::StatusOr<std::unique_ptr<UnixListener>> UnixListener::Bind(const std::string& path) {
  absl::StatusOr<OwnedFd> fd = net::ListenOnUnixSocket(path, "listen");
  if (!fd.ok()) return fd.status();
  const int stop_fd = ::eventfd(0, EFD_CLOEXEC);
  if (stop_fd < 0) {
    return absl::FailedPreconditionError(absl::StrCat("listen: eventfd(): ", std::strerror(errno)));
  }
  return std::unique_ptr<UnixListener>(new UnixListener(fd->Release(), stop_fd));
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
    // gRPC's endpoints want non-blocking sockets.
    absl::StatusOr<OwnedFd> fd =
        net::AcceptUntilStopped(listen_fd_, stop_fd_, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (!fd.ok()) {
      if (!absl::IsCancelled(fd.status())) {
        GetLogger("rpc")->error("unix socket: {}", std::string(fd.status().message()));
      }
      return;
    }
    if (!fd->valid()) continue;  // the client went away, or fds ran out: take the next one
    absl::StatusOr<PeerCredentials> cred = net::PeerCredentialsOf(fd->get());
    if (!cred.ok()) {
      GetLogger("rpc")->warn("unix socket: {}: connection refused",
                             std::string(cred.status().message()));
      continue;
    }
    {
      absl::MutexLock lock(&mu_);
      peers_[fd->get()] = *cred;
    }
    grpc::AddInsecureChannelFromFd(server, fd->Release());
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
