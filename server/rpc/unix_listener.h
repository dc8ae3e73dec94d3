// The daemon's unix socket, accepted here rather than by gRPC, so that each
// connection's peer credentials (SO_PEERCRED: the uid of the process that
// connected, which the kernel vouches for) are known before gRPC serves it.
// gRPC C++ tells a server nothing about a unix socket's peer (its auth context
// is empty there); a connection accepted here is handed to the gRPC server
// with AddInsecureChannelFromFd, and the server sees its peer as "fd:N".
// PeerOf maps that name back to the credentials read at accept.
//
// A connection's fd number can be reused once gRPC closes it. By then every
// call of the closed connection is cancelled, so a caller's identity is read
// and then its call checked for cancellation (Caller, caller.h), and a stale
// entry is never used for a live call.
//
// Thread safety: PeerOf from any thread; Start and the destructor from one.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/net/unix_socket.h"

namespace grpc {
class Server;
}

namespace overlap::rpc {

using PeerCredentials = net::PeerCredentials;

class UnixListener {
 public:
  // Binds `path` (its parent must exist; a stale socket there must be gone)
  // under the process's umask and listens. FAILED_PRECONDITION naming the
  // system's reason when it cannot.
  static absl::StatusOr<std::unique_ptr<UnixListener>> Bind(const std::string& path);
  ~UnixListener();  // stops accepting
  UnixListener(const UnixListener&) = delete;
  UnixListener& operator=(const UnixListener&) = delete;

  // Accepts connections and hands each to `server` from now on, until Stop.
  void Start(grpc::Server* server);
  // No more connections; PeerOf still answers for those accepted.
  void Stop();
  // The credentials of the connection gRPC names `peer` ("fd:N"), or nullopt
  // for a peer that is not one of ours.
  std::optional<PeerCredentials> PeerOf(const std::string& peer) const;

 private:
  UnixListener(int listen_fd, int stop_fd) : listen_fd_(listen_fd), stop_fd_(stop_fd) {}
  void Accept(grpc::Server* server);

  const int listen_fd_;
  const int stop_fd_;  // an eventfd: written once to stop accepting
  std::thread thread_;
  mutable absl::Mutex mu_;
  std::map<int, PeerCredentials> peers_ ABSL_GUARDED_BY(mu_);  // by fd
};

}  // namespace overlap::rpc
