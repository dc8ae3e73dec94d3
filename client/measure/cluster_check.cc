#include "client/measure/cluster_check.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/core/command_io.h"
#include "client/format/device_health.h"
#include "client/format/report.h"
#include "client/format/table.h"
#include "client/format/verify_cell.h"
#include "client/jobs/progress_printer.h"
#include "common/status_macros.h"

namespace overlap::client {

namespace {

// The pair's all-reduce: rows of kPairN bf16 columns per rank.
constexpr int64_t kPairN = 4096;

constexpr char kHostTimingNote[] =
    "host backend: these timings are CPU threads' and say nothing about GPUs or the network "
    "between nodes, so nothing is called slow; every job still ran";

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

template <typename T>
bool Contains(const std::vector<T>& v, const T& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

std::string PairName(const ClusterCheckResult& r, const NodePairCheck& p) {
  return absl::StrCat(r.nodes[p.a].address, " - ", r.nodes[p.b].address);
}

// The PAIR cell: one word, so that awk splits the row, as --nodes takes them.
std::string PairCell(const ClusterCheckResult& r, const NodePairCheck& p) {
  return absl::StrCat(r.nodes[p.a].address, ",", r.nodes[p.b].address);
}

// Why no job can span `a` and `b` (their answers at the start); "" when one can.
std::string WhyPairCannotRun(const NodeAnswer& a, const NodeAnswer& b) {
  for (const NodeAnswer* n : {&a, &b}) {
    if (n->info->node_name().empty()) {
      return absl::StrCat(n->address, " has no peer listener (config peer_listen)");
    }
    if (n->info->cross_daemon_transport().empty()) {
      return absl::StrCat(n->address, ": ",
                          n->info->cross_daemon_note().empty() ? "runs no jobs across daemons"
                                                               : n->info->cross_daemon_note());
    }
  }
  for (const auto& [n, other] : {std::pair{&a, &b}, std::pair{&b, &a}}) {
    if (!Contains(std::vector<std::string>(n->info->peers().begin(), n->info->peers().end()),
                  other->info->node_name())) {
      return absl::StrCat(n->address, " does not list ", other->address, "'s peer address ",
                          other->info->node_name(), " in its peers");
    }
  }
  return "";
}

}  // namespace

std::string PairCheckSpec(const std::vector<int>& devices, const CheckOptions& o) {
  const int64_t rows = o.link_mib * (int64_t{1} << 20) / (kPairN * 2);
  return absl::StrFormat(
      "name: check-nodes\ndevices: [%s]\nmesh: {tp: %d, dp: 2}\ndtype: bf16\niterations: %d\n"
      "warmup: %d\nverify: true\nlayer_step: false\nops:\n"
      "  - {id: link, type: all_reduce, m: %d, n: %d, group: dp, transport: nccl}\n",
      absl::StrJoin(devices, ", "), devices.size(), o.iterations, kCheckWarmup, rows, kPairN);
}

double MedianGemmMs(const NodeCheck& node) {
  std::vector<double> ms;
  for (const GpuCheck& g : node.gpus) {
    if (g.gemm_ms > 0) ms.push_back(g.gemm_ms);
  }
  return Median(ms);
}

bool ClusterVerdict::Clean() const {
  return slow_nodes.empty() && slow_gpus.empty() && slow_link_nodes.empty() && slow_pairs.empty() &&
         failed_pairs.empty() && unhealthy_gpus.empty() && unhealthy_nodes.empty();
}

ClusterVerdict JudgeCluster(const ClusterCheckResult& r) {
  ClusterVerdict v;
  for (size_t i = 0; i < r.nodes.size(); ++i) {
    if (!r.nodes[i].problems.empty()) v.unhealthy_nodes.push_back(i);
    for (size_t g = 0; g < r.nodes[i].gpus.size(); ++g) {
      if (!r.nodes[i].gpus[g].health_problems.empty()) v.unhealthy_gpus.push_back({i, g});
    }
  }
  for (size_t p = 0; p < r.pairs.size(); ++p) {
    if (!r.pairs[p].failed.empty()) v.failed_pairs.push_back(p);
  }
  // Links: a healthy node has a good pair with some other healthy node, so
  // the median of each node's best pair stands for a good link even where one
  // bad node slows most pairs (2 of 3 with three nodes).
  std::vector<double> best(r.nodes.size(), 0);
  for (const NodePairCheck& p : r.pairs) {
    if (!p.ran()) continue;
    best[p.a] = std::max(best[p.a], p.busbw_gbps);
    best[p.b] = std::max(best[p.b], p.busbw_gbps);
  }
  std::vector<double> bests;
  for (double b : best) {
    if (b > 0) bests.push_back(b);
  }
  v.link_reference_gbps = Median(bests);
  // Below: what is slow, which only GPUs' and networks' timings can say.
  if (!r.timings_judged) return v;
  // GEMMs: each node's median against the fastest node's, then each GPU of
  // the others against the fastest GPU of all.
  std::vector<double> medians, all;
  std::vector<std::pair<size_t, size_t>> where;
  for (size_t i = 0; i < r.nodes.size(); ++i) {
    medians.push_back(MedianGemmMs(r.nodes[i]));
    for (size_t g = 0; g < r.nodes[i].gpus.size(); ++g) {
      all.push_back(r.nodes[i].gpus[g].gemm_ms);
      where.push_back({i, g});
    }
  }
  v.slow_nodes = SlowerThanFastest(medians);
  for (size_t k : SlowerThanFastest(all)) {
    if (!Contains(v.slow_nodes, where[k].first)) v.slow_gpus.push_back(where[k]);
  }
  const double floor = v.link_reference_gbps * (1 - kSlowNodeLinkFraction);
  for (size_t i = 0; i < best.size(); ++i) {
    if (best[i] > 0 && best[i] < floor) v.slow_link_nodes.push_back(i);  // every pair below
  }
  for (size_t k = 0; k < r.pairs.size(); ++k) {
    const NodePairCheck& p = r.pairs[k];
    if (p.ran() && p.busbw_gbps < floor && !Contains(v.slow_link_nodes, p.a) &&
        !Contains(v.slow_link_nodes, p.b)) {
      v.slow_pairs.push_back(k);
    }
  }
  return v;
}

std::string FormatClusterCheck(const ClusterCheckResult& r, const CheckOptions& o) {
  const ClusterVerdict v = JudgeCluster(r);
  std::string out;
  if (!r.timings_judged) {
    absl::StrAppend(
        &out, kHostTimingNote,
        r.pairs.empty() ? "" : ", and each pair's all-reduce was verified against float64", "\n");
  }
  absl::StrAppendFormat(&out, "GPUs: a %dx%dx%d bf16 GEMM on each GPU of %d nodes, all at once\n",
                        o.gemm_size, o.gemm_size, o.gemm_size, r.nodes.size());
  std::vector<double> all;
  for (const NodeCheck& n : r.nodes) {
    for (const GpuCheck& g : n.gpus) all.push_back(g.gemm_ms);
  }
  const size_t fastest_gpu = FastestIndex(all);
  const double fastest = fastest_gpu < all.size() ? all[fastest_gpu] : 0;
  bool capped = false;
  for (const NodeCheck& n : r.nodes) {
    for (const GpuCheck& g : n.gpus) capped = capped || g.capped_valid;
  }
  TextTable gpus(GemmCheckColumns(capped, /*with_node=*/true));
  for (size_t i = 0; i < r.nodes.size(); ++i) {
    for (size_t k = 0; k < r.nodes[i].gpus.size(); ++k) {
      const GpuCheck& g = r.nodes[i].gpus[k];
      const bool slow = Contains(v.slow_nodes, i) || Contains(v.slow_gpus, std::pair{i, k});
      std::vector<std::string> row = {r.nodes[i].address, absl::StrCat(g.device),
                                      FormatMs(g.gemm_ms), absl::StrFormat("%.1f", g.tflops),
                                      fastest > 0 ? SignedPercent(g.gemm_ms / fastest - 1) : "-"};
      if (capped) {
        row.push_back(CappedShare(g, g.power_capped));
        row.push_back(CappedShare(g, g.thermal_capped));
      }
      row.push_back(slow ? "SLOW" : "");
      gpus.AddRow(row);
    }
  }
  out += gpus.Render();
  std::vector<double> medians;
  for (const NodeCheck& n : r.nodes) medians.push_back(MedianGemmMs(n));
  const size_t fastest_node = FastestIndex(medians);
  TextTable nodes(Columns({Words({"NODE", "PEER"}),
                           Figures({"GPUS", "MEDIAN_GEMM_MS", "VS_FASTEST_NODE"}), Words({""})}));
  for (size_t i = 0; i < r.nodes.size(); ++i) {
    const bool has = fastest_node < medians.size() && medians[i] > 0;
    nodes.AddRow({r.nodes[i].address, r.nodes[i].peer.empty() ? "-" : r.nodes[i].peer,
                  absl::StrCat(r.nodes[i].gpus.size()), FormatMs(medians[i]),
                  has ? SignedPercent(medians[i] / medians[fastest_node] - 1) : "-",
                  Contains(v.slow_nodes, i) ? "SLOW" : ""});
  }
  out += nodes.Render();
  if (!r.pairs.empty()) {
    absl::StrAppendFormat(&out,
                          "links between nodes: an all-reduce of %d MiB per rank over each pair, "
                          "tp %d x dp 2 (each GPU with its peer on the other node, all at once), "
                          "verified; busbw per GPU, as nccl-tests counts it\n",
                          o.link_mib, r.pair_devices);
    TextTable links(Columns({Words({"PAIR", "JOB"}),
                             Figures({"MS", "BUSBW_GBPS", "VS_REFERENCE", "MAX_REL_ERR"}),
                             Words({"VERIFY", ""})}));
    for (size_t k = 0; k < r.pairs.size(); ++k) {
      const NodePairCheck& p = r.pairs[k];
      if (!p.ran()) {  // nothing was verified: no figures, and the line under the table says why
        links.AddRow({PairCell(r, p), p.job.empty() ? "-" : p.job, "-", "-", "-", "-", "-",
                      p.failed.empty() ? "NOT_CHECKED" : "FAILED"});
        continue;
      }
      const bool slow = Contains(v.slow_pairs, k) || Contains(v.slow_link_nodes, p.a) ||
                        Contains(v.slow_link_nodes, p.b);
      VerifyTally verify;
      verify.Add(p.verified, p.max_rel_error, p.tolerance);
      links.AddRow({PairCell(r, p), p.job, FormatMs(p.ms), FormatRate(p.busbw_gbps),
                    v.link_reference_gbps > 0
                        ? SignedPercent(p.busbw_gbps / v.link_reference_gbps - 1)
                        : "-",
                    FormatRelError(verify), FormatVerify(verify), slow ? "SLOW" : ""});
    }
    out += links.Render();
  }
  // The findings, one line each.
  for (size_t i : v.slow_nodes) {
    absl::StrAppendFormat(&out,
                          "slow node: %s, its GPUs' median GEMM %.1f%% slower than the fastest "
                          "node's (%s; more than %.0f%%): `overlapctl --addr %s node` shows its "
                          "clocks, power and temperature\n",
                          r.nodes[i].address, 100 * (medians[i] / medians[fastest_node] - 1),
                          r.nodes[fastest_node].address, 100 * kSlowRankFraction,
                          r.nodes[i].address);
  }
  for (const auto& [i, k] : v.slow_gpus) {
    const GpuCheck& g = r.nodes[i].gpus[k];
    absl::StrAppendFormat(&out,
                          "slow GPU: %s GPU %d, its GEMM %.1f%% slower than the fastest GPU of "
                          "the nodes (more than %.0f%%)\n",
                          r.nodes[i].address, g.device, 100 * (g.gemm_ms / fastest - 1),
                          100 * kSlowRankFraction);
  }
  const double ref = v.link_reference_gbps;
  for (size_t i : v.slow_link_nodes) {
    absl::StrAppendFormat(&out,
                          "slow node link: %s, every pair with it more than %.0f%% below the "
                          "reference %s GB/s (the median of each node's best pair): its NIC, "
                          "cable or switch port rather than the others'\n",
                          r.nodes[i].address, 100 * kSlowNodeLinkFraction, FormatRate(ref));
  }
  for (size_t k : v.slow_pairs) {
    absl::StrAppendFormat(&out,
                          "slow link: %s, %s GB/s, more than %.0f%% below the reference %s GB/s\n",
                          PairName(r, r.pairs[k]), FormatRate(r.pairs[k].busbw_gbps),
                          100 * kSlowNodeLinkFraction, FormatRate(ref));
  }
  for (size_t k : v.failed_pairs) {
    absl::StrAppend(&out, "link failed: ", PairName(r, r.pairs[k]), ": ", r.pairs[k].failed, "\n");
  }
  size_t ran = 0;
  for (const NodePairCheck& p : r.pairs) {
    ran += p.ran() ? 1 : 0;
    if (!p.not_checked.empty()) {
      absl::StrAppend(&out, "not checked: ", PairName(r, p), ": ", p.not_checked, "\n");
    }
  }
  if (r.timings_judged) {
    if (ran == 1) absl::StrAppend(&out, "one link ran: its busbw is shown, with none to compare\n");
    if (v.slow_nodes.empty() && v.slow_gpus.empty() && v.slow_link_nodes.empty() &&
        v.slow_pairs.empty()) {
      absl::StrAppend(&out, "no slow node, GPU or link\n");
    }
  }
  for (size_t i : v.unhealthy_nodes) {
    for (const std::string& p : r.nodes[i].problems) {
      absl::StrAppend(&out, "unhealthy node: ", r.nodes[i].address, ", ", p, "\n");
    }
  }
  for (const auto& [i, k] : v.unhealthy_gpus) {
    for (const std::string& p : r.nodes[i].gpus[k].health_problems) {
      absl::StrAppend(&out, "unhealthy GPU: ", r.nodes[i].address, " GPU ",
                      r.nodes[i].gpus[k].device, ", ", p, "\n");
    }
  }
  return out;
}

nlohmann::json ClusterCheckJson(const ClusterCheckResult& r, const CheckOptions& o) {
  const ClusterVerdict v = JudgeCluster(r);
  nlohmann::json j = {
      {"gemm_size", o.gemm_size},           {"link_mib", o.link_mib},
      {"iterations", o.iterations},         {"pair_devices", r.pair_devices},
      {"timings_judged", r.timings_judged}, {"link_reference_gbps", v.link_reference_gbps}};
  j["nodes"] = nlohmann::json::array();
  for (const NodeCheck& n : r.nodes) {
    nlohmann::json node = {{"address", n.address},
                           {"peer", n.peer},
                           {"median_gemm_ms", MedianGemmMs(n)},
                           {"problems", n.problems},
                           {"gpus", nlohmann::json::array()}};
    for (const GpuCheck& g : n.gpus) node["gpus"].push_back(GpuJson(g));
    j["nodes"].push_back(std::move(node));
  }
  j["pairs"] = nlohmann::json::array();
  for (const NodePairCheck& p : r.pairs) {
    nlohmann::json pair = {
        {"a", r.nodes[p.a].address}, {"b", r.nodes[p.b].address}, {"job", p.job}};
    if (!p.not_checked.empty()) pair["not_checked"] = p.not_checked;
    if (!p.failed.empty()) pair["failed"] = p.failed;
    if (p.ran()) {
      pair["ms"] = p.ms;
      pair["busbw_gbps"] = p.busbw_gbps;
      pair["verified"] = p.verified;
      pair["max_rel_error"] = p.max_rel_error;
      pair["tolerance"] = p.tolerance;
    }
    j["pairs"].push_back(std::move(pair));
  }
  auto addresses = [&](const std::vector<size_t>& nodes) {
    nlohmann::json a = nlohmann::json::array();
    for (size_t i : nodes) a.push_back(r.nodes[i].address);
    return a;
  };
  auto gpu_list = [&](const std::vector<std::pair<size_t, size_t>>& gpus) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& [i, k] : gpus) {
      a.push_back({{"node", r.nodes[i].address}, {"device", r.nodes[i].gpus[k].device}});
    }
    return a;
  };
  auto pair_list = [&](const std::vector<size_t>& pairs) {
    nlohmann::json a = nlohmann::json::array();
    for (size_t k : pairs)
      a.push_back({r.nodes[r.pairs[k].a].address, r.nodes[r.pairs[k].b].address});
    return a;
  };
  j["slow_nodes"] = addresses(v.slow_nodes);
  j["slow_gpus"] = gpu_list(v.slow_gpus);
  j["slow_link_nodes"] = addresses(v.slow_link_nodes);
  j["slow_links"] = pair_list(v.slow_pairs);
  j["failed_links"] = pair_list(v.failed_pairs);
  j["unhealthy_nodes"] = addresses(v.unhealthy_nodes);
  j["unhealthy_gpus"] = gpu_list(v.unhealthy_gpus);
  return j;
}

int RunClusterCheck(std::vector<NodeClient>& nodes, const CheckOptions& options, bool json,
                    std::ostream& out, std::ostream& err) {
  CheckOptions o = options;
  const std::vector<NodeAnswer> start = GetEveryNodeInfo(nodes);
  bool host = false;
  for (const NodeAnswer& n : start) {
    if (!n.info.ok()) return ReportCallError(n.info.status(), n.address, err);
    if (n.info->ranks_per_gpu() > 1) {
      err << "overlapctl: check: " << n.address << " runs " << n.info->ranks_per_gpu()
          << " ranks per GPU (config ranks_per_gpu); check needs one rank per GPU to find a "
             "slow GPU or link\n";
      return kExitRefused;
    }
    host = host || n.info->backend() == "host";
  }
  if (host) UseHostSizes(&o, err);
  ClusterCheckResult result;
  result.timings_judged = !host;
  std::vector<CheckOptions> per_node(nodes.size(), o);
  for (size_t i = 0; i < nodes.size(); ++i) {
    const v1::GetNodeInfoResponse& info = *start[i].info;
    if (per_node[i].devices.empty()) {
      for (const v1::Device& d : info.devices()) per_node[i].devices.push_back(d.index());
    }
    NodeCheck node{nodes[i].address, info.node_name(), {}, {}};
    if (!info.healthy()) {
      node.problems.push_back("the daemon says it is not healthy (draining, or its engine failed)");
    }
    result.nodes.push_back(std::move(node));
  }
  // Every GPU of every node at once, then follow each node's.
  const auto gemm_start = std::chrono::steady_clock::now();
  std::vector<std::vector<std::string>> ids;
  size_t gpus = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    absl::StatusOr<std::vector<std::string>> submitted =
        SubmitGpuChecks(*nodes[i].client, per_node[i]);
    if (!submitted.ok()) return ReportCallError(submitted.status(), nodes[i].address, err);
    gpus += submitted->size();
    ids.push_back(*std::move(submitted));
  }
  ProgressStream(err) << "check: GEMM on " << gpus << " GPU(s) of " << nodes.size() << " node(s)\n";
  for (size_t i = 0; i < nodes.size(); ++i) {
    const int rc = CollectGpuChecks(*nodes[i].client, per_node[i], ids[i], nodes[i].address + ": ",
                                    err, &result.nodes[i].gpus);
    if (rc != kExitOk) return rc;
  }
  const std::vector<NodeAnswer> after = GetEveryNodeInfo(nodes);
  const double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - gemm_start).count();
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!after[i].info.ok()) continue;
    for (GpuCheck& g : result.nodes[i].gpus)
      SetCappedShares(*start[i].info, *after[i].info, wall_s, &g);
  }
  if (o.links) {
    const size_t total = nodes.size() * (nodes.size() - 1) / 2;
    for (size_t a = 0; a < nodes.size(); ++a) {
      for (size_t b = a + 1; b < nodes.size(); ++b) {
        NodePairCheck p;
        p.a = a;
        p.b = b;
        p.not_checked = WhyPairCannotRun(start[a], start[b]);
        if (!p.not_checked.empty()) {
          result.pairs.push_back(std::move(p));
          continue;
        }
        std::vector<int> devices = o.devices;
        if (devices.empty()) {
          const int d = std::min(start[a].info->devices_size(), start[b].info->devices_size());
          for (int k = 0; k < d; ++k) devices.push_back(k);
        }
        result.pair_devices = static_cast<int>(devices.size());
        ProgressStream(err) << "check: nodes " << nodes[a].address << " - " << nodes[b].address
                            << " (" << result.pairs.size() + 1 << "/" << total << ")\n";
        DaemonClient& coordinator = *nodes[a].client;
        absl::StatusOr<v1::Job> job =
            coordinator.SubmitJob(PairCheckSpec(devices, o), "check",
                                  {start[a].info->node_name(), start[b].info->node_name()});
        if (job.ok()) job = coordinator.WatchJob(job->id(), [](const v1::Job&) {});
        if (!job.ok()) return ReportCallError(job.status(), nodes[a].address, err);
        p.job = job->id();
        if (job->state() != v1::SUCCEEDED || job->result().ops_size() != 1) {
          p.failed = FormatJobLine(*job);
          while (!p.failed.empty() && p.failed.back() == '\n') p.failed.pop_back();
        } else {
          const v1::OpResult& op = job->result().ops(0);
          p.ms = op.comm_alone().median_ms();
          p.busbw_gbps = op.busbw_gbps();
          p.verified = op.verified();
          p.max_rel_error = op.max_rel_error();
          p.tolerance = op.tolerance();
        }
        result.pairs.push_back(std::move(p));
      }
    }
  }
  // Health at the end, and the NVLink errors the traffic made since the start.
  const std::vector<NodeAnswer> end = GetEveryNodeInfo(nodes);
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!end[i].info.ok()) return ReportCallError(end[i].info.status(), nodes[i].address, err);
    for (GpuCheck& g : result.nodes[i].gpus) SetHealthFindings(*start[i].info, *end[i].info, &g);
  }
  out << (json ? ClusterCheckJson(result, o).dump(1) + "\n" : FormatClusterCheck(result, o));
  return JudgeCluster(result).Clean() ? kExitOk : kExitJobFailed;
}

}  // namespace overlap::client
