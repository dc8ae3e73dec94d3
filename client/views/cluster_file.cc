#include "client/views/cluster_file.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/yaml_util.h"

namespace overlap::client {
namespace {

// A node's keys: where each value goes, and whether it names a file.
struct Key {
  const char* name;
  std::string* (*field)(ClusterNode& node);
  bool names_file;
};
const std::array<Key, 5> kKeys = {{
    {"address", [](ClusterNode& n) { return &n.address; }, false},
    {"tls_ca", [](ClusterNode& n) { return &n.tls.ca_file; }, true},
    {"tls_cert", [](ClusterNode& n) { return &n.tls.cert_file; }, true},
    {"tls_key", [](ClusterNode& n) { return &n.tls.key_file; }, true},
    {"server_name", [](ClusterNode& n) { return &n.tls.server_name; }, false},
}};

std::string KnownKeys() {
  return absl::StrJoin(kKeys, ", ", [](std::string* out, const Key& k) { out->append(k.name); });
}

bool IsUnixSocket(const std::string& address) {
  return absl::StartsWith(address, "unix:") || absl::StartsWith(address, "/");
}

// A file the cluster file names, as overlapctl opens it: relative to the
// cluster file's directory, as kubeconfig's paths are.
std::string Anchored(const std::string& file, const std::string& cluster_file) {
  const std::filesystem::path p(file);
  if (p.is_absolute()) return file;
  return (std::filesystem::path(cluster_file).parent_path() / p).string();
}

// "PATH: nodes[I].KEY: message". (LoadDocument's tree keeps no line marks; a
// syntax error names its line and column.)
absl::Status Error(const std::string& path, int index, absl::string_view key,
                   absl::string_view message) {
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": nodes[", index, "]", key.empty() ? "" : ".", key, ": ", message));
}

absl::StatusOr<ClusterNode> ParseNode(const YAML::Node& entry, int index, const std::string& path) {
  if (!entry.IsMap()) {
    return Error(
        path, index, "",
        absl::StrCat("a node is a mapping with an address (got ", yaml_util::Describe(entry), ")"));
  }
  ClusterNode node;
  for (const auto& pair : entry) {
    const std::string name = pair.first.as<std::string>("");
    const auto key =
        std::find_if(kKeys.begin(), kKeys.end(), [&](const Key& k) { return name == k.name; });
    if (key == kKeys.end()) {
      return Error(path, index, name, absl::StrCat("unknown key (known: ", KnownKeys(), ")"));
    }
    absl::StatusOr<std::string> value = yaml_util::ReadString(pair.second);
    if (!value.ok()) return Error(path, index, name, value.status().message());
    if (value->empty()) return Error(path, index, name, "empty");
    *key->field(node) = key->names_file ? Anchored(*value, path) : *value;
    node.own_tls = node.own_tls || key != kKeys.begin();  // every key but address is TLS
  }
  if (node.address.empty()) return Error(path, index, "address", "missing");
  if (node.own_tls && IsUnixSocket(node.address)) {
    return Error(path, index, "address",
                 "a unix socket takes no TLS (drop its tls_* and server_name)");
  }
  return node;
}

}  // namespace

absl::StatusOr<std::vector<ClusterNode>> ParseClusterFile(absl::string_view text,
                                                          const std::string& path) {
  absl::StatusOr<YAML::Node> root = yaml_util::LoadDocument(text, path);
  if (!root.ok()) return root.status();
  if (!root->IsSequence() || root->size() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": a cluster file is a list of nodes, each with an address (got ",
                     yaml_util::Describe(*root), ")"));
  }
  std::vector<ClusterNode> nodes;
  for (size_t i = 0; i < root->size(); ++i) {
    absl::StatusOr<ClusterNode> node = ParseNode((*root)[i], static_cast<int>(i), path);
    if (!node.ok()) return node.status();
    nodes.push_back(std::move(*node));
  }
  return nodes;
}

std::vector<ClusterNode> ClusterViewNodes(std::vector<ClusterNode> file_nodes,
                                          const std::vector<std::string>& addresses,
                                          const ClientTls& default_tls) {
  std::vector<ClusterNode> nodes = std::move(file_nodes);
  for (const std::string& address : addresses) nodes.push_back({address, {}, false});
  for (ClusterNode& node : nodes) {
    if (!node.own_tls && !IsUnixSocket(node.address)) node.tls = default_tls;
  }
  return nodes;
}

}  // namespace overlap::client
