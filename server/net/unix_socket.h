// What both unix sockets of the daemon (the API socket, rpc/unix_listener.h,
// and the session socket, sessions/session_socket.h) do alike: bind and
// listen, open the socket file to a group, accept until told to stop, and
// read the peer's credentials (SO_PEERCRED: the kernel vouches for them).
//
// Thread safety: free functions; AcceptUntilStopped blocks its caller.
#pragma once

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/unix_frames.h"

namespace overlap::net {

// A socket bound to `path` (its parent must exist; a stale socket there must
// be gone: PrepareUnixSocketPath) under the process's umask, listening.
// INVALID_ARGUMENT for a path too long for a unix socket; FAILED_PRECONDITION
// naming the system's reason when it cannot bind or listen. `who` starts the
// messages ("listen", "session_socket").
absl::StatusOr<OwnedFd> ListenOnUnixSocket(const std::string& path, const char* who);

// Group members may connect; others may not. The socket was bound under the
// daemon's umask (0077), so this only ever widens it: chown to `gid` (none
// when negative) and chmod 0660 (a failure of the chmod is logged, not
// returned). INVALID_ARGUMENT naming socket_group when the chown fails.
absl::Status OpenUnixSocketToGroup(const std::string& path, int gid);

// Waits for the next connection on `listen_fd` until `stop_fd` (an eventfd)
// is readable, and accepts it with `accept_flags` (accept4). An invalid fd
// when the connection went away first or fds ran out (take the next);
// CANCELLED once stopped; UNAVAILABLE naming poll's error.
absl::StatusOr<OwnedFd> AcceptUntilStopped(int listen_fd, int stop_fd, int accept_flags);

// Who connected: the process at the other end of a unix socket.
struct PeerCredentials {
  uid_t uid = 0;
  gid_t gid = 0;
  pid_t pid = 0;
};

// The credentials of the process at the other end of a unix socket;
// UNAVAILABLE naming the system's reason.
absl::StatusOr<PeerCredentials> PeerCredentialsOf(int socket);

}  // namespace overlap::net
