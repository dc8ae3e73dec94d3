#include "server/rpc/server_tls.h"

#include "absl/strings/str_cat.h"
#include "common/pem_file.h"
#include "common/status_macros.h"

namespace overlap::rpc {

absl::Status ValidateServerTls(const ServerTls& tls) {
  if (!tls.enabled()) return absl::OkStatus();
  if (tls.cert_file.empty() && tls.key_file.empty()) {
    return absl::InvalidArgumentError(
        "tls_client_ca needs tls_cert and tls_key: the server proves itself first");
  }
  if (tls.cert_file.empty() || tls.key_file.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("tls_cert and tls_key go together (got only ",
                                                   tls.cert_file.empty() ? "tls_key" : "tls_cert",
                                                   ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<net::ListenTarget> ResolveListenWithTls(const std::string& listen,
                                                  bool allow_insecure_tcp, const ServerTls& tls) {
  ASSIGN_OR_RETURN(net::ListenTarget target,
                   net::ResolveListenAddress(listen, allow_insecure_tcp, tls.clients_authenticated()));
  if (tls.enabled() && !target.socket_path.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tls_cert: TLS is for HOST:PORT listen addresses; ", listen,
                     " is a unix socket, which its file mode guards (0660)"));
  }
  return target;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> ServerCredentialsFor(
    const ServerTls& tls) {
  if (!tls.enabled()) return grpc::InsecureServerCredentials();
  RETURN_IF_ERROR(ValidateServerTls(tls));
  grpc::SslServerCredentialsOptions options;
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  ASSIGN_OR_RETURN(pair.cert_chain, ReadPemFile(tls.cert_file, "tls_cert", "CERTIFICATE"));
  ASSIGN_OR_RETURN(pair.private_key, ReadPemFile(tls.key_file, "tls_key", "PRIVATE KEY"));
  options.pem_key_cert_pairs.push_back(std::move(pair));
  if (tls.clients_authenticated()) {
    ASSIGN_OR_RETURN(options.pem_root_certs,
                     ReadPemFile(tls.client_ca_file, "tls_client_ca", "CERTIFICATE"));
    options.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  } else {
    options.client_certificate_request = GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE;
  }
  return grpc::SslServerCredentials(options);
}

}  // namespace overlap::rpc
