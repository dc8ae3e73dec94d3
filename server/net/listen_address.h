// Where overlapd listens. `listen` is "unix:PATH" (PATH absolute or relative),
// or "host:port" with host one of localhost, an IPv4 address, or [IPv6]. Only
// loopback hosts (127.0.0.0/8, localhost, [::1]) are allowed unless clients are
// authenticated (mutual TLS, server_tls.h) or allow_insecure_tcp.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace overlap::net {

struct ListenTarget {
  std::string grpc_uri;           // what ServerBuilder::AddListeningPort takes
  std::string socket_path;        // unix only: the socket file; empty for TCP
  // TCP on a non-loopback host with nobody authenticated (allow_insecure_tcp).
  bool insecure_network = false;
};

// INVALID_ARGUMENT naming `listen` for a malformed address, or a non-loopback
// host without clients_authenticated or allow_insecure_tcp.
absl::StatusOr<ListenTarget> ResolveListenAddress(const std::string& listen,
                                                  bool allow_insecure_tcp,
                                                  bool clients_authenticated = false);

// Makes the socket's parent directory (0755) and refuses a socket path that
// another live process is listening on (FAILED_PRECONDITION); a stale socket
// file left by a crash is removed.
absl::Status PrepareUnixSocketPath(const std::string& socket_path);

}  // namespace overlap::net
