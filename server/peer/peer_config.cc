#include "server/peer/peer_config.h"

#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_certificate_verifier.h>
#include <grpcpp/security/tls_credentials_options.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/pem_file.h"
#include "common/status_macros.h"
#include "server/net/listen_address.h"
#include "server/peer/certificate_names.h"
#include "server/peer/peer_auth.h"

namespace overlap::peer {
namespace {

absl::Status Invalid(absl::string_view key, const std::string& address, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(key, ": \"", address, "\": ", why));
}

}  // namespace

PeerTls PeerTlsOf(const DaemonConfig& config) {
  return PeerTls{config.peer_tls_cert, config.peer_tls_key, config.peer_tls_ca};
}

absl::StatusOr<PeerTlsPem> ReadPeerTls(const PeerTls& tls) {
  if (tls.cert_file.empty() || tls.key_file.empty() || tls.ca_file.empty()) {
    std::string missing;
    for (const auto& [key, file] :
         {std::pair<const char*, const std::string*>{"peer_tls_cert", &tls.cert_file},
          {"peer_tls_key", &tls.key_file},
          {"peer_tls_ca", &tls.ca_file}}) {
      if (file->empty()) absl::StrAppend(&missing, missing.empty() ? "" : ", ", key);
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "peer_tls_cert, peer_tls_key and peer_tls_ca go together (mutual TLS between daemons); "
        "missing: ",
        missing));
  }
  PeerTlsPem pem;
  ASSIGN_OR_RETURN(pem.cert_chain, ReadPemFile(tls.cert_file, "peer_tls_cert", "CERTIFICATE"));
  ASSIGN_OR_RETURN(pem.private_key, ReadPemFile(tls.key_file, "peer_tls_key", "PRIVATE KEY"));
  ASSIGN_OR_RETURN(pem.ca, ReadPemFile(tls.ca_file, "peer_tls_ca", "CERTIFICATE"));
  return pem;
}

namespace {

std::shared_ptr<grpc::experimental::CertificateProviderInterface> WatchFiles(const PeerTls& tls) {
  return std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      tls.key_file, tls.cert_file, tls.ca_file, tls.reload_s);
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> PeerServerCredentials(const PeerTls& tls) {
  RETURN_IF_ERROR(ReadPeerTls(tls).status());
  grpc::experimental::TlsServerCredentialsOptions options(WatchFiles(tls));
  options.watch_root_certs();
  options.watch_identity_key_cert_pairs();
  options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  return grpc::experimental::TlsServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> PeerChannelCredentials(
    const PeerTls& tls) {
  RETURN_IF_ERROR(ReadPeerTls(tls).status());
  grpc::experimental::TlsChannelCredentialsOptions options;
  options.set_certificate_provider(WatchFiles(tls));
  options.watch_root_certs();
  options.watch_identity_key_cert_pairs();
  // The peer's certificate must name the host it is called by, as with
  // grpc::SslCredentials.
  options.set_certificate_verifier(
      std::make_shared<grpc::experimental::HostNameCertificateVerifier>());
  return grpc::experimental::TlsCredentials(options);
}

absl::StatusOr<ClusterKey> LoadClusterKey(const DaemonConfig& config) {
  ClusterKey key;
  const bool explicit_path = !config.peer_key_file.empty();
  key.path = explicit_path ? config.peer_key_file : config.state_dir + "/cluster.key";
  absl::StatusOr<std::string> bytes = ReadClusterKey(key.path);
  if (bytes.ok()) {
    key.bytes = std::move(*bytes);
    return key;
  }
  if (bytes.status().code() != absl::StatusCode::kNotFound) return bytes.status();
  if (explicit_path) {
    return absl::InvalidArgumentError(absl::StrCat(
        "peer_key_file: ", key.path, ": no such file (make one with `overlapd "
        "--make-cluster-key ", key.path, "` and copy it to every node)"));
  }
  if (PeerTlsOf(config).enabled()) {
    key.path.clear();
    return key;
  }
  ASSIGN_OR_RETURN(key.bytes, CreateClusterKey(key.path));
  key.created = true;
  return key;
}

absl::StatusOr<LoadedNodeKey> LoadNodeKey(const DaemonConfig& config) {
  LoadedNodeKey loaded;
  const bool explicit_path = !config.peer_node_key_file.empty();
  loaded.path = explicit_path ? config.peer_node_key_file : config.state_dir + "/node.key";
  absl::StatusOr<NodeKey> key = ReadNodeKey(loaded.path);
  if (!key.ok() && key.status().code() == absl::StatusCode::kNotFound) {
    if (explicit_path) {
      return absl::InvalidArgumentError(
          absl::StrCat("peer_node_key_file: ", loaded.path,
                       ": no such file (make one with `overlapd "
                       "--make-node-key ",
                       loaded.path,
                       "`, and list the public key it prints in the other "
                       "nodes' peer_known_nodes_file)"));
    }
    key = CreateNodeKey(loaded.path);
    loaded.created = key.ok();
  }
  if (!key.ok()) return key.status();
  loaded.key = std::make_shared<const NodeKey>(std::move(*key));
  return loaded;
}

absl::StatusOr<KnownNodes> LoadKnownNodes(const DaemonConfig& config) {
  if (config.peer_known_nodes_file.empty()) {
    if (!config.peers.empty() && !PeerTlsOf(config).enabled()) {
      return absl::InvalidArgumentError(
          "peer_known_nodes_file: needed when peers are listed without peer TLS: the cluster "
          "key alone proves only that a caller holds it, not which node it is. Make each node's "
          "key with `overlapd --make-node-key PATH` (set peer_node_key_file to PATH) and list "
          "every peer as `NODE PUBLIC_KEY`, one a line (docs/OPERATIONS.md, \"Who may call the "
          "peer port\")");
    }
    return KnownNodes{};
  }
  ASSIGN_OR_RETURN(KnownNodes known, ReadKnownNodes(config.peer_known_nodes_file));
  for (size_t i = 0; i < config.peers.size(); ++i) {
    if (known.count(config.peers[i]) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "peer_known_nodes_file: ", config.peer_known_nodes_file, " lists no key for peers[", i,
          "] ", config.peers[i], " (add its line: NODE PUBLIC_KEY)"));
    }
  }
  return known;
}

absl::StatusOr<PeerAddress> ParsePeerAddress(absl::string_view key, const std::string& address,
                                             bool allow_port_zero) {
  if (address.empty()) return Invalid(key, address, "empty (expected HOST:PORT)");
  // One parser for every address the daemon takes (listen_address.h); with
  // allow_insecure_tcp it reports a non-loopback host instead of refusing it.
  absl::StatusOr<net::ListenTarget> target =
      net::ResolveListenAddress(address, /*allow_insecure_tcp=*/true);
  if (!target.ok()) {
    // "listen: \"ADDRESS\": why" -> "<key>: \"ADDRESS\": why"
    absl::string_view message = target.status().message();
    absl::ConsumePrefix(&message, "listen: ");
    return absl::InvalidArgumentError(absl::StrCat(key, ": ", message));
  }
  if (!target->socket_path.empty()) {
    return Invalid(key, address, "peers speak TCP: expected HOST:PORT, not a unix socket");
  }
  PeerAddress parsed;
  const size_t colon = address.rfind(':');
  parsed.host = address.substr(0, colon);
  if (parsed.host.size() >= 2 && parsed.host.front() == '[') {
    parsed.host = parsed.host.substr(1, parsed.host.size() - 2);
  }
  if (!absl::SimpleAtoi(address.substr(colon + 1), &parsed.port)) {
    return Invalid(key, address, "expected HOST:PORT");  // net::ResolveListenAddress checked it
  }
  if (parsed.port == 0 && !allow_port_zero) {
    return Invalid(key, address, "port 0 names no listener: give the port the peer listens on");
  }
  parsed.loopback = !target->insecure_network;
  return parsed;
}

absl::Status ValidatePeerConfig(const DaemonConfig& config) {
  RETURN_IF_ERROR(ValidateClusterKeys(config));
  if (config.peer_listen.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(const PeerAddress listen,
                   ParsePeerAddress("peer_listen", config.peer_listen, /*allow_port_zero=*/true));
  if (!config.node_name.empty()) {
    RETURN_IF_ERROR(
        ParsePeerAddress("node_name", config.node_name, /*allow_port_zero=*/false).status());
  }
  for (size_t i = 0; i < config.peers.size(); ++i) {
    RETURN_IF_ERROR(ParsePeerAddress(absl::StrCat("peers[", i, "]"), config.peers[i],
                                     /*allow_port_zero=*/false)
                        .status());
  }
  const PeerTls tls = PeerTlsOf(config);
  if (tls.enabled()) {
    ASSIGN_OR_RETURN(const PeerTlsPem pem, ReadPeerTls(tls));
    // Peers check that a caller's certificate names the node it speaks as.
    const std::string& node = config.node_name.empty() ? config.peer_listen : config.node_name;
    RETURN_IF_ERROR(CheckOwnCertificate(pem.cert_chain, tls.cert_file, node, absl::Now()));
    return LoadKnownNodes(config).status();
  }
  if (!listen.loopback) {
    return Invalid("peer_listen", config.peer_listen,
                   "not a loopback address: daemons off loopback speak mutual TLS; set "
                   "peer_tls_cert, peer_tls_key and peer_tls_ca");
  }
  for (size_t i = 0; i < config.peers.size(); ++i) {
    if (!ParsePeerAddress("peers", config.peers[i], false)->loopback) {
      return Invalid(absl::StrCat("peers[", i, "]"), config.peers[i],
                     "not a loopback address: calls to it need mutual TLS; set peer_tls_cert, "
                     "peer_tls_key and peer_tls_ca");
    }
  }
  return LoadKnownNodes(config).status();
}

}  // namespace overlap::peer
