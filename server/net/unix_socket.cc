#include "server/net/unix_socket.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace overlap::net {
namespace {

// Connections waiting to be accepted before the kernel refuses more.
constexpr int kListenBacklog = 64;

}  // namespace

absl::StatusOr<OwnedFd> ListenOnUnixSocket(const std::string& path, const char* who) {
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat(who, ": the path is too long for a unix socket: ", path));
  }
  OwnedFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) {
    return absl::FailedPreconditionError(absl::StrCat(who, ": socket(): ", std::strerror(errno)));
  }
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(fd.get(), kListenBacklog) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(who, ": cannot listen on unix:", path, ": ", std::strerror(errno)));
  }
  return fd;
}

absl::Status OpenUnixSocketToGroup(const std::string& path, int gid) {
  if (gid >= 0 && ::chown(path.c_str(), static_cast<uid_t>(-1), static_cast<gid_t>(gid)) != 0) {
    const int error = errno;
    return absl::InvalidArgumentError(
        absl::StrCat("socket_group: cannot give ", path, " to group ", gid, ": ",
                     std::strerror(error), " (overlapd must run as root or be a member of it)"));
  }
  if (::chmod(path.c_str(), 0660) != 0) {
    GetLogger("net")->warn("cannot chmod 0660 {}: {}", path, std::strerror(errno));
  }
  return absl::OkStatus();
}

absl::StatusOr<OwnedFd> AcceptUntilStopped(int listen_fd, int stop_fd, int accept_flags) {
  while (true) {
    pollfd fds[2] = {{listen_fd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return absl::UnavailableError(absl::StrCat("poll: ", std::strerror(errno)));
    }
    if (fds[1].revents != 0) return absl::CancelledError("stopped");
    if ((fds[0].revents & POLLIN) == 0) continue;
    return OwnedFd(::accept4(listen_fd, nullptr, nullptr, accept_flags));
  }
}

absl::StatusOr<PeerCredentials> PeerCredentialsOf(int socket) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(socket, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return absl::UnavailableError(absl::StrCat("no peer credentials (", std::strerror(errno), ")"));
  }
  return PeerCredentials{cred.uid, cred.gid, cred.pid};
}

}  // namespace overlap::net
