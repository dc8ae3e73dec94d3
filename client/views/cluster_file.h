// The daemons of a cluster view (`overlapctl node|top|check`), each with how it
// is reached: `--nodes` gives user addresses that share the --tls-* flags, a
// cluster file (`--cluster-file`) gives each node its own TLS, so that a TLS
// daemon and a unix-socket one are viewed together. The file is YAML or JSON,
// a list of nodes:
//
//   - address: gpu-a.example:7443   # as --addr takes it (required)
//     tls_ca: ca.pem                # relative paths are the file's directory's
//     tls_cert: client.pem
//     tls_key: client.key
//     server_name: gpu-a.example
//   - address: unix:/run/overlapd/overlapd.sock
//
// A node that names none of the tls_* keys nor server_name takes the --tls-*
// flags, unless it is a unix socket, which takes no TLS. Pure functions.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "client/core/daemon_client.h"

namespace overlap::client {

struct ClusterNode {
  std::string address;
  ClientTls tls;
  bool own_tls = false;  // the file named its TLS: the --tls-* flags do not apply
};

// The nodes of a cluster file's `text`. `path` names the file in messages and
// anchors relative paths. INVALID_ARGUMENT "PATH: nodes[I].KEY: why" for
// a text that is not a list of mappings, a missing or empty address, an
// unknown key, a value that is not a string, or TLS named for a unix socket.
absl::StatusOr<std::vector<ClusterNode>> ParseClusterFile(absl::string_view text,
                                                          const std::string& path);

// The view's nodes: the file's (`file_nodes`), then the --nodes `addresses`;
// `default_tls` (the --tls-* flags) goes to each HOST:PORT node without TLS of
// its own.
std::vector<ClusterNode> ClusterViewNodes(std::vector<ClusterNode> file_nodes,
                                          const std::vector<std::string>& addresses,
                                          const ClientTls& default_tls);

}  // namespace overlap::client
