#include "client/views/cluster_view.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/core/command_io.h"
#include "client/format/device_health.h"
#include "client/format/table.h"

namespace overlap::client {
namespace {

std::string OrDash(const std::string& text) { return text.empty() ? "-" : text; }

// Values in order of first appearance, each with the addresses that have it.
using Groups = std::vector<std::pair<std::string, std::vector<std::string>>>;

Groups GroupBy(const std::vector<NodeAnswer>& nodes,
               const std::function<std::string(const v1::GetNodeInfoResponse&)>& value) {
  Groups groups;
  for (const NodeAnswer& n : nodes) {
    if (!n.info.ok()) continue;
    const std::string v = value(*n.info);
    auto it =
        std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == v; });
    if (it == groups.end()) {
      groups.push_back({v, {n.address}});
    } else {
      it->second.push_back(n.address);
    }
  }
  return groups;
}

// "0.1.0 (a) on A, B; 0.1.1 (b) on C".
std::string DescribeGroups(const Groups& groups) {
  std::vector<std::string> parts;
  for (const auto& [value, addresses] : groups) {
    parts.push_back(absl::StrCat(OrDash(value), " on ", absl::StrJoin(addresses, ", ")));
  }
  return absl::StrJoin(parts, "; ");
}

std::string NcclVersion(const v1::GetNodeInfoResponse& node) { return node.nccl_version(); }

std::string CudaCell(const v1::GetNodeInfoResponse& node) {
  if (node.cuda_runtime_version().empty() || node.cuda_runtime_version() == "n/a") {
    return OrDash(node.cuda_runtime_version());
  }
  return absl::StrCat("runtime ", node.cuda_runtime_version(), ", driver ",
                      OrDash(node.cuda_driver_version()));
}

std::string EnvCell(const v1::GetNodeInfoResponse& node) {
  std::vector<std::string> env;
  for (const auto& [name, value] :
       std::map<std::string, std::string>(node.library_env().begin(), node.library_env().end())) {
    env.push_back(absl::StrCat(name, "=", value));
  }
  return OrDash(absl::StrJoin(env, " "));
}

std::string DevicesCell(const v1::GetNodeInfoResponse& node) {
  std::set<std::string> names;
  for (const v1::Device& d : node.devices()) names.insert(d.name());
  if (names.size() == 1 && !names.begin()->empty()) {
    return absl::StrCat(node.devices_size(), " x ", *names.begin());
  }
  return absl::StrCat(node.devices_size());
}

std::string GpuHealthCell(const v1::GetNodeInfoResponse& node) {
  if (!HasHealth(node)) return "-";
  const int most = MostNvlinksActive(node);
  std::vector<std::string> bad;
  for (const v1::Device& d : node.devices()) {
    if (!HealthProblems(d, most).empty()) {
      bad.push_back(absl::StrCat("GPU ", d.index(), ": ", HealthTags(d, most)));
    }
  }
  return bad.empty() ? "ok" : absl::StrJoin(bad, "; ");
}

std::string BetweenDaemonsCell(const v1::GetNodeInfoResponse& node) {
  if (node.node_name().empty()) return "- (no peer listener)";
  return node.cross_daemon_transport().empty() ? "none" : node.cross_daemon_transport();
}

struct Row {
  std::string title;
  std::function<std::string(const v1::GetNodeInfoResponse&)> cell;
  // What the last column says when the row's values differ between nodes
  // ("" for rows expected to differ, such as the hostname).
  std::string when_differs;
};

std::vector<Row> Rows() {
  using Info = v1::GetNodeInfoResponse;
  return {
      {"peer name", [](const Info& n) { return OrDash(n.node_name()); }, ""},
      {"peers", [](const Info& n) { return OrDash(absl::StrJoin(n.peers(), ",")); }, ""},
      {"hostname", [](const Info& n) { return OrDash(n.hostname()); }, ""},
      {"backend", [](const Info& n) { return OrDash(n.backend()); }, "differs"},
      {"overlapd", OverlapdVersion, "MISMATCH"},
      {"nccl", [](const Info& n) { return OrDash(n.nccl_version()); }, "MISMATCH"},
      {"cuda", CudaCell, "differs"},
      {"cublas", [](const Info& n) { return OrDash(n.cublas_version()); }, "differs"},
      {"env", EnvCell, "differs"},
      {"devices", DevicesCell, ""},
      {"between daemons", BetweenDaemonsCell, ""},
  };
}

}  // namespace

absl::StatusOr<std::vector<NodeClient>> ConnectNodes(const std::vector<ClusterNode>& nodes) {
  if (nodes.empty()) {
    return absl::InvalidArgumentError("give the daemons: --nodes A,B,... or --cluster-file FILE");
  }
  std::vector<NodeClient> clients;
  std::set<std::string> seen;
  for (const ClusterNode& node : nodes) {
    if (node.address.empty()) return absl::InvalidArgumentError("--nodes: an empty address");
    if (!seen.insert(node.address).second) {
      return absl::InvalidArgumentError(absl::StrCat(node.address, " is given twice"));
    }
    absl::StatusOr<std::unique_ptr<DaemonClient>> client =
        DaemonClient::Create(node.address, node.tls);
    if (!client.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(node.address, ": ", client.status().message()));
    }
    clients.push_back({node.address, std::move(*client)});
  }
  return clients;
}

std::vector<NodeAnswer> GetEveryNodeInfo(std::vector<NodeClient>& nodes) {
  std::vector<absl::StatusOr<v1::GetNodeInfoResponse>> infos =
      CallEveryNode<v1::GetNodeInfoResponse>(nodes,
                                             [](DaemonClient& c) { return c.GetNodeInfo(); });
  std::vector<NodeAnswer> answers;
  for (size_t i = 0; i < nodes.size(); ++i) answers.push_back({nodes[i].address, infos[i]});
  return answers;
}

std::string NoAnswerText(const absl::Status& status) {
  if (IsUnreachable(status)) return absl::StrCat("cannot reach overlapd: ", status.message());
  return absl::StrCat(absl::StatusCodeToString(status.code()), ": ", status.message());
}

nlohmann::json NoAnswerJson(const absl::Status& status) {
  return {{"code", absl::StatusCodeToString(status.code())},
          {"message", std::string(status.message())},
          {"unreachable", IsUnreachable(status)}};
}

std::string OverlapdVersion(const v1::GetNodeInfoResponse& node) {
  return absl::StrCat(OrDash(node.overlapd_version()),
                      node.git_commit().empty() ? "" : " (" + node.git_commit() + ")");
}

std::vector<std::string> NodeHealthProblems(const v1::GetNodeInfoResponse& node) {
  std::vector<std::string> problems;
  if (!node.healthy()) {
    problems.push_back("the daemon says it is not healthy (draining, or its engine failed)");
  }
  const int most = MostNvlinksActive(node);
  for (const v1::Device& d : node.devices()) {
    for (const std::string& p : HealthProblems(d, most)) {
      problems.push_back(absl::StrCat("GPU ", d.index(), ": ", p));
    }
  }
  return problems;
}

ClusterFindings FindClusterProblems(const std::vector<NodeAnswer>& nodes) {
  ClusterFindings f;
  const Groups versions = GroupBy(nodes, OverlapdVersion);
  const Groups nccl = GroupBy(nodes, NcclVersion);
  f.version_mismatch = versions.size() > 1;
  f.nccl_mismatch = nccl.size() > 1;
  if (f.version_mismatch)
    f.lines.push_back("version mismatch: overlapd " + DescribeGroups(versions));
  if (f.nccl_mismatch) f.lines.push_back("NCCL mismatch: " + DescribeGroups(nccl));
  for (const NodeAnswer& n : nodes) {
    if (!n.info.ok()) {
      f.unanswered.push_back(n.address);
      f.lines.push_back(
          absl::StrCat("no answer from ", n.address, ": ", NoAnswerText(n.info.status())));
      continue;
    }
    const std::vector<std::string> problems = NodeHealthProblems(*n.info);
    if (!problems.empty()) f.unhealthy.push_back(n.address);
    for (const std::string& p : problems) {
      f.lines.push_back(absl::StrCat("unhealthy node: ", n.address, ": ", p));
    }
  }
  return f;
}

std::string FormatClusterNodes(const std::vector<NodeAnswer>& nodes) {
  std::vector<TextTable::Column> columns = {{"address"}};
  for (const NodeAnswer& n : nodes) columns.push_back({n.address});
  columns.push_back({""});
  TextTable table(columns);
  // `flag` says what the last column holds, from the values of the nodes that answered.
  using Flag = std::function<std::string(const std::set<std::string>& values)>;
  auto add = [&](const std::string& title,
                 const std::function<std::string(const NodeAnswer&)>& cell, const Flag& flag) {
    std::vector<std::string> row = {title};
    std::set<std::string> values;
    for (const NodeAnswer& n : nodes) {
      row.push_back(cell(n));
      if (n.info.ok()) values.insert(row.back());
    }
    row.push_back(flag(values));
    table.AddRow(row);
  };
  auto if_differs = [](const std::string& label) -> Flag {
    return [label](const std::set<std::string>& values) { return values.size() > 1 ? label : ""; };
  };
  add(
      "answered",
      [](const NodeAnswer& n) {
        return n.info.ok() ? std::string("yes")
                           : absl::StrCat("no: ", absl::StatusCodeToString(n.info.status().code()));
      },
      [](const std::set<std::string>&) { return ""; });
  add(
      "healthy",
      [](const NodeAnswer& n) { return n.info.ok() ? (n.info->healthy() ? "yes" : "no") : "-"; },
      [](const std::set<std::string>& values) { return values.count("no") ? "UNHEALTHY" : ""; });
  add(
      "GPU health", [](const NodeAnswer& n) { return n.info.ok() ? GpuHealthCell(*n.info) : "-"; },
      [](const std::set<std::string>& values) {
        for (const std::string& v : values) {
          if (v != "ok" && v != "-") return "UNHEALTHY";
        }
        return "";
      });
  for (const Row& r : Rows()) {
    add(
        r.title, [&r](const NodeAnswer& n) { return n.info.ok() ? r.cell(*n.info) : "-"; },
        if_differs(r.when_differs));
  }
  std::string out = table.Render();
  const ClusterFindings f = FindClusterProblems(nodes);
  for (const std::string& line : f.lines) absl::StrAppend(&out, line, "\n");
  if (f.lines.empty()) {
    absl::StrAppend(&out, "all ", nodes.size(),
                    " nodes answered, run the same overlapd and NCCL, and are healthy\n");
  }
  return out;
}

nlohmann::json ClusterNodesJson(const std::vector<NodeAnswer>& nodes) {
  nlohmann::json j;
  j["nodes"] = nlohmann::json::array();
  for (const NodeAnswer& n : nodes) {
    nlohmann::json node = {{"address", n.address}, {"answered", n.info.ok()}};
    if (n.info.ok()) {
      node["info"] = nlohmann::json::parse(ToJson(*n.info), nullptr, /*allow_exceptions=*/false);
      node["health_problems"] = NodeHealthProblems(*n.info);
    } else {
      node["error"] = NoAnswerJson(n.info.status());
    }
    j["nodes"].push_back(std::move(node));
  }
  const ClusterFindings f = FindClusterProblems(nodes);
  j["version_mismatch"] = f.version_mismatch;
  j["nccl_mismatch"] = f.nccl_mismatch;
  j["unhealthy_nodes"] = f.unhealthy;
  j["unanswered_nodes"] = f.unanswered;
  j["findings"] = f.lines;
  return j;
}

int RunClusterNode(std::vector<NodeClient>& nodes, bool json, std::ostream& out,
                   std::ostream& err) {
  const std::vector<NodeAnswer> answers = GetEveryNodeInfo(nodes);
  out << (json ? ClusterNodesJson(answers).dump(1) + "\n" : FormatClusterNodes(answers));
  int rc = kExitOk;
  for (const NodeAnswer& n : answers) {
    if (n.info.ok()) continue;
    const int failed = ReportCallError(n.info.status(), n.address, err);
    if (rc == kExitOk) rc = failed;
  }
  if (rc != kExitOk) return rc;
  const ClusterFindings f = FindClusterProblems(answers);
  return f.version_mismatch || f.nccl_mismatch || !f.unhealthy.empty() ? kExitJobFailed : kExitOk;
}

}  // namespace overlap::client
