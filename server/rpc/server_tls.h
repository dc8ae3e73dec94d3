// TLS on overlapd's TCP port: the server's certificate and key, and optionally
// a CA whose certificates clients must present (mutual TLS). With mutual TLS
// the port may face the network (listen_address.h); without a client CA, TLS
// only encrypts, and anyone who reaches the port may run jobs.
#pragma once

#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/net/listen_address.h"

namespace overlap::rpc {

struct ServerTls {
  std::string cert_file;       // PEM certificate chain (tls_cert)
  std::string key_file;        // PEM private key (tls_key)
  std::string client_ca_file;  // PEM CA bundle clients' certificates must chain to (tls_client_ca)

  bool enabled() const {
    return !cert_file.empty() || !key_file.empty() || !client_ca_file.empty();
  }
  bool clients_authenticated() const { return !client_ca_file.empty(); }
};

// INVALID_ARGUMENT when the settings do not go together (a certificate without
// its key, a client CA without a certificate) or a file is unreadable or holds
// no PEM block of its kind. Insecure credentials when TLS is not enabled.
absl::Status ValidateServerTls(const ServerTls& tls);
// ResolveListenAddress with these TLS settings: mutual TLS lets a non-loopback
// host in, and TLS on a unix socket is INVALID_ARGUMENT (its file mode guards it).
absl::StatusOr<net::ListenTarget> ResolveListenWithTls(const std::string& listen,
                                                  bool allow_insecure_tcp, const ServerTls& tls);
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFor(const ServerTls& tls);

}  // namespace overlap::rpc
