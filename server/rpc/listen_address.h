// Where overlapd listens. `listen` is "unix:PATH" (PATH absolute or relative),
// or "host:port" with host one of localhost, an IPv4 address, or [IPv6]. TCP is
// plaintext and unauthenticated, so only loopback hosts (127.0.0.0/8, localhost,
// [::1]) are allowed unless allow_insecure_tcp.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace overlap::rpc {

struct ListenTarget {
  std::string grpc_uri;           // what ServerBuilder::AddListeningPort takes
  std::string socket_path;        // unix only: the socket file; empty for TCP
  bool insecure_network = false;  // TCP on a non-loopback host (allowed by config)
};

// INVALID_ARGUMENT naming `listen` for a malformed address or a non-loopback
// host without allow_insecure_tcp.
absl::StatusOr<ListenTarget> ResolveListenAddress(const std::string& listen,
                                                  bool allow_insecure_tcp);

// Makes the socket's parent directory (0755) and refuses a socket path that
// another live process is listening on (FAILED_PRECONDITION); a stale socket
// file left by a crash is removed.
absl::Status PrepareUnixSocketPath(const std::string& socket_path);

}  // namespace overlap::rpc
