#include "client/measure/commbench.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "client/core/command_io.h"
#include "client/core/proto_json.h"
#include "client/format/html_chart.h"
#include "client/format/report.h"
#include "client/format/table.h"
#include "client/format/verify_cell.h"
#include "client/measure/bench.h"
#include "client/measure/bench_html.h"
#include "common/byte_size.h"
#include "common/dtype.h"

namespace overlap::client {
namespace {

// One op's figures as a commbench cell.
CommBenchResult ResultOf(const v1::OpResult& op) {
  CommBenchResult result;
  result.ms = op.step().median_ms();
  result.min_ms = op.step().min_ms();
  result.max_ms = op.step().max_ms();
  result.algbw_gbps = op.algbw_gbps();
  result.busbw_gbps = op.busbw_gbps();
  result.verified = op.verified();
  result.max_rel_error = op.max_rel_error();
  result.tolerance = op.tolerance();
  return result;
}

// Rows of this many elements where the size allows: long enough rows that a
// row-split collective moves whole cache lines, few enough that small sizes
// still have rows for every rank.
constexpr int64_t kRowElements = 1024;

const char* ShortName(const std::string& collective) {
  if (collective == "all_reduce") return "ar";
  if (collective == "all_gather") return "ag";
  return "rs";
}

using Shape = CollectiveShape;

Shape ShapeFor(int64_t bytes, int64_t element_bytes, int tp) {
  return CollectiveShapeFor(bytes, element_bytes, tp);
}

std::vector<int64_t> Sizes(const CommBenchOptions& o) {
  std::vector<int64_t> sizes;
  for (int64_t b = o.min_bytes; b <= o.max_bytes; b *= o.factor) {
    sizes.push_back(b);
    if (b > o.max_bytes / o.factor) break;  // the next one would overflow or pass the top
  }
  return sizes;
}

int64_t ElementBytes(const std::string& dtype) {
  const absl::StatusOr<DType> parsed = ParseDType(dtype);
  return parsed.ok() ? static_cast<int64_t>(DTypeSize(*parsed)) : 2;
}

}  // namespace

CollectiveShape CollectiveShapeFor(int64_t bytes, int64_t element_bytes, int group) {
  const int64_t elements = std::max<int64_t>(bytes / element_bytes, group);
  CollectiveShape s;
  s.n = elements >= kRowElements * group ? kRowElements : std::max<int64_t>(1, elements / group);
  s.m = std::max<int64_t>(group, elements / s.n / group * group);
  return s;
}

absl::Status ValidateCommBenchOptions(const CommBenchOptions& o) {
  for (const std::string& c : o.collectives) {
    if (c != "all_reduce" && c != "all_gather" && c != "reduce_scatter") {
      return absl::InvalidArgumentError(
          absl::StrCat("--collectives: unknown collective \"", c,
                       "\" (all_reduce, all_gather, reduce_scatter)"));
    }
  }
  if (o.collectives.empty()) return absl::InvalidArgumentError("--collectives: none given");
  for (const std::string& t : o.transports) {
    if (t != "nccl" && t != "p2p") {
      return absl::InvalidArgumentError(
          absl::StrCat("--transports: unknown transport \"", t, "\" (nccl, p2p)"));
    }
  }
  if (o.transports.empty()) return absl::InvalidArgumentError("--transports: none given");
  for (const std::string& a : o.algorithms) {
    if (a != "ring" && a != "tree" && a != "ps") {
      return absl::InvalidArgumentError(
          absl::StrCat("--algorithms: unknown algorithm \"", a, "\" (ring, tree, ps)"));
    }
    if (a == "ps" &&
        std::find(o.transports.begin(), o.transports.end(), "p2p") == o.transports.end()) {
      return absl::InvalidArgumentError(
          "--algorithms: ps (parameter server) runs over the copy engines: add p2p to "
          "--transports");
    }
  }
  if (!o.algorithms.empty() &&
      std::find(o.collectives.begin(), o.collectives.end(), "all_reduce") == o.collectives.end()) {
    return absl::InvalidArgumentError(
        "--algorithms: only all_reduce has them: add all_reduce to --collectives");
  }
  if (o.min_bytes <= 0 || o.max_bytes < o.min_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("--min-bytes ", FormatByteSize(o.min_bytes),
                                                   " and --max-bytes ", FormatByteSize(o.max_bytes),
                                                   ": need 0 < min <= max"));
  }
  if (o.factor < 2) return absl::InvalidArgumentError("--factor: must be at least 2");
  if (!o.nodes.empty()) {
    if (o.nodes.size() < 2) {
      return absl::InvalidArgumentError(
          "--peers: give at least two daemons (their peer addresses, this one's among them)");
    }
    if (o.collectives != std::vector<std::string>{"all_reduce"} ||
        o.transports != std::vector<std::string>{"nccl"} || !o.algorithms.empty()) {
      return absl::InvalidArgumentError(
          "--peers: across daemons commbench times the all_reduce over nccl (Gloo on the host "
          "backend), flat and hierarchical: leave out --collectives, --transports and "
          "--algorithms");
    }
  }
  const absl::StatusOr<DType> dtype = ParseDType(o.dtype);
  if (!dtype.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--dtype: unknown dtype \"", o.dtype, "\""));
  }
  if (*dtype == DType::kFP8) {
    // An fp8 layer gathers fp8 but sums bf16 (GemmOutputDType): one dtype for
    // every collective of the sweep would mislabel its sums.
    return absl::InvalidArgumentError(
        "--dtype fp8: fp8 is only gathered (an fp8 layer reduces in bf16); time the "
        "collectives with --dtype bf16, or an fp8 layer's gathers with `bench --dtype fp8`");
  }
  return absl::OkStatus();
}

std::vector<std::string> CommBenchVariants(const CommBenchOptions& o) {
  std::vector<std::string> variants;
  for (const std::string& t : o.transports) {
    variants.push_back(t);
    for (const std::string& a : o.algorithms) {
      if (t != "p2p" && (a == "ps" || !o.library_algorithms)) continue;
      variants.push_back(absl::StrCat(t, "/", a));
    }
  }
  return variants;
}

double AllReduceBusiestGpuFactor(const std::string& algorithm, int n) {
  if (n < 2) return 0;
  if (algorithm == "ps") return n - 1;  // rank 0 pulls every other input
  if (algorithm == "tree") {
    // Rank r of the binary tree pulls its children's sums, then (below the
    // root) the whole sum from its parent.
    int most = 0;
    for (int r = 0; r < n; ++r) {
      const int children = std::max(0, std::min(n, 2 * r + 3) - (2 * r + 1));
      most = std::max(most, children + (r > 0 ? 1 : 0));
    }
    return most;
  }
  return 2.0 * (n - 1) / n;  // ring and direct: (n-1)/n to reduce, as much to gather
}

std::string BuildCommBenchSpec(const CommBenchOptions& o, int tp) {
  std::string spec = absl::StrFormat(
      "name: commbench\ndtype: %s\niterations: %d\nwarmup: %d\nverify: %s\n"
      "layer_step: false\n",
      o.dtype, o.iterations, o.warmup, o.verify ? "true" : "false");
  if (!o.devices.empty()) {
    absl::StrAppend(&spec, "devices: [", absl::StrJoin(o.devices, ", "), "]\n");
  }
  spec += "ops:\n";
  const int64_t es = ElementBytes(o.dtype);
  for (const std::string& collective : o.collectives) {
    for (int64_t bytes : Sizes(o)) {
      const Shape s = ShapeFor(bytes, es, tp);
      // The variants of one size back to back: drift hits them alike.
      for (const std::string& variant : CommBenchVariants(o)) {
        const size_t slash = variant.find('/');
        const bool pinned = slash != std::string::npos;
        if (pinned && collective != "all_reduce") continue;
        const std::string transport = variant.substr(0, slash);
        absl::StrAppendFormat(
            &spec,
            "  - {id: %s-%d-%s, type: %s, m: %d, n: %d, mode: serial, "
            "transport: %s%s}\n",
            ShortName(collective), s.m * s.n * es, absl::StrReplaceAll(variant, {{"/", "-"}}),
            collective, s.m, s.n, transport,
            pinned ? absl::StrCat(", algorithm: ", variant.substr(slash + 1)) : "");
      }
    }
  }
  return spec;
}

std::vector<CommBenchRow> FoldCommBench(const v1::Job& job) {
  std::vector<CommBenchRow> rows;
  for (const v1::OpResult& op : job.result().ops()) {
    if (!IsCollectiveAlone(op)) continue;
    const int64_t count = op.m() * op.n();
    const int64_t bytes = count * ElementBytes(op.dtype());
    auto row = std::find_if(rows.begin(), rows.end(), [&](const CommBenchRow& r) {
      return r.collective == op.type() && r.count == count;
    });
    if (row == rows.end()) {
      rows.push_back(CommBenchRow{op.type(), bytes, count, {}});
      row = rows.end() - 1;
    }
    row->by_transport[TransportLabel(op)] = ResultOf(op);
  }
  return rows;
}

namespace {

// A variant's three columns, under `label`.
void AddVariantColumns(const std::string& label, std::vector<TextTable::Column>& columns) {
  const std::string name = absl::AsciiStrToUpper(label);
  columns.push_back({name + "_MS", Align::kRight});
  columns.push_back({name + "_ALGBW_GBPS", Align::kRight});
  columns.push_back({name + "_BUSBW_GBPS", Align::kRight});
}

// Appends each variant's ms, algbw and busbw to `cells` ("-" for one the row
// lacks) and folds their verification (a row's cells: the worst error over
// the variants that checked theirs); returns the variants the row has.
std::vector<std::pair<std::string, const CommBenchResult*>> AddVariantCells(
    const CommBenchRow& r, const std::vector<std::string>& variants,
    std::vector<std::string>& cells, VerifyTally& verify) {
  std::vector<std::pair<std::string, const CommBenchResult*>> present;
  for (const std::string& v : variants) {
    auto it = r.by_transport.find(v);
    if (it == r.by_transport.end()) {
      cells.insert(cells.end(), {"-", "-", "-"});
      continue;
    }
    const CommBenchResult& c = it->second;
    cells.insert(cells.end(), {FormatMs(c.ms), FormatRate(c.algbw_gbps), FormatRate(c.busbw_gbps)});
    verify.Add(c.verified, c.max_rel_error, c.tolerance);
    present.emplace_back(v, &c);
  }
  return present;
}

}  // namespace

std::string FormatCommBench(const std::vector<CommBenchRow>& rows,
                            const std::vector<std::string>& variants, int tp,
                            const std::string& dtype, int ranks_per_gpu) {
  std::vector<TextTable::Column> columns = {
      {"COLLECTIVE"}, {"SIZE", Align::kRight}, {"COUNT", Align::kRight}};
  for (const std::string& t : variants) AddVariantColumns(t, columns);
  columns.push_back({"FASTER"});
  columns.push_back({"SPEEDUP", Align::kRight});
  columns.push_back({"MAX_REL_ERR", Align::kRight});
  columns.push_back({"VERIFY"});
  TextTable table(columns);
  // Per collective and transport: the best bus bandwidth and the size it came at.
  std::map<std::pair<std::string, std::string>, std::pair<double, int64_t>> best;
  for (const CommBenchRow& r : rows) {
    std::vector<std::string> cells = {r.collective, FormatByteSize(r.bytes), absl::StrCat(r.count)};
    std::string faster = "-";
    double fastest_ms = 0;
    VerifyTally verify;
    for (const auto& [t, c] : AddVariantCells(r, variants, cells, verify)) {
      if (c->ms > 0 && (fastest_ms == 0 || c->ms < fastest_ms)) {
        fastest_ms = c->ms;
        faster = t;
      }
      auto& b = best[{r.collective, t}];
      if (c->busbw_gbps > b.first) b = {c->busbw_gbps, r.bytes};
    }
    if (r.by_transport.size() < 2) faster = "-";  // nothing to compare with
    std::string speedup = "-";
    if (r.by_transport.size() > 1 && fastest_ms > 0) {
      double other = 0;
      for (const auto& [t, c] : r.by_transport) {
        if (t != faster && (other == 0 || c.ms < other)) other = c.ms;
      }
      if (other > 0) speedup = absl::StrFormat("%.2fx", other / fastest_ms);
    }
    cells.push_back(faster);
    cells.push_back(speedup);
    table.AddRow(WithVerifyCells(std::move(cells), verify));
  }
  std::string out = absl::StrFormat(
      "commbench: %d rank(s), %s; busbw = algbw x 2(N-1)/N "
      "(all_reduce) or (N-1)/N (all_gather, reduce_scatter)\n",
      tp, dtype);
  out += table.Render();
  out += SharedGpuNote(ranks_per_gpu);
  if (tp < 2) {
    out += "one rank: nothing crosses a link, so each time is a local copy and busbw is 0\n";
  }
  std::vector<std::string> layouts;  // the copy-engine all-reduce layouts in the table
  for (const std::string& v : variants) {
    if (v == "p2p" || absl::StartsWith(v, "p2p/")) layouts.push_back(v);
  }
  if (tp >= 2 && layouts.size() > 1) {
    std::vector<std::string> factors;
    for (const std::string& v : layouts) {
      const std::string algorithm = v == "p2p" ? "direct" : v.substr(4);
      factors.push_back(absl::StrFormat("%s %.2f%s", v, AllReduceBusiestGpuFactor(algorithm, tp),
                                        v == "p2p" ? " (direct)" : ""));
    }
    absl::StrAppend(&out, "all_reduce bytes into the busiest GPU, per byte of buffer, at ", tp,
                    " ranks: ", absl::StrJoin(factors, ", "), "\n");
  }
  for (const auto& [key, value] : best) {
    if (value.first <= 0) continue;
    absl::StrAppendFormat(&out, "best busbw: %s over %s %s GB/s (at %s)\n", key.first, key.second,
                          FormatRate(value.first), FormatByteSize(value.second));
  }
  return out;
}

nlohmann::json CommBenchJson(const v1::Job& job, const v1::GetNodeInfoResponse& node,
                             const v1::GetNodeInfoResponse* node_after,
                             const std::vector<CommBenchRow>& rows, const CommBenchOptions& o,
                             int tp) {
  nlohmann::json j = RunHeaderJson(job, node, node_after);
  j["tp"] = tp;
  j["dtype"] = o.dtype;
  j["iterations"] = o.iterations;
  j["warmup"] = o.warmup;
  j["algorithms"] = o.algorithms;
  j["rows"] = nlohmann::json::array();
  for (const CommBenchRow& r : rows) {
    nlohmann::json transports = nlohmann::json::object();
    for (const auto& [t, c] : r.by_transport) {
      transports[t] = {{"ms", c.ms},
                       {"min_ms", c.min_ms},
                       {"max_ms", c.max_ms},
                       {"algbw_gbps", c.algbw_gbps},
                       {"busbw_gbps", c.busbw_gbps},
                       {"verified", c.verified},
                       {"max_rel_error", c.max_rel_error}};
    }
    j["rows"].push_back({{"collective", r.collective},
                         {"bytes", r.bytes},
                         {"count", r.count},
                         {"transports", transports}});
  }
  return j;
}

std::vector<std::string> NodesCommBenchVariants(int tp) {
  std::vector<std::string> variants = {"dp", "world"};
  if (tp > 1) variants.push_back("world/hierarchical");  // tp 1: it is the flat one
  return variants;
}

std::string BuildNodesCommBenchSpec(const CommBenchOptions& o, int tp) {
  const int dp = static_cast<int>(o.nodes.size());
  std::string spec = absl::StrFormat(
      "name: commbench-nodes\nmesh: {tp: %d, dp: %d}\ndtype: %s\niterations: %d\n"
      "warmup: %d\nverify: %s\nlayer_step: false\n",
      tp, dp, o.dtype, o.iterations, o.warmup, o.verify ? "true" : "false");
  if (!o.devices.empty()) {
    absl::StrAppend(&spec, "devices: [", absl::StrJoin(o.devices, ", "), "]\n");
  }
  spec += "ops:\n";
  const int64_t es = ElementBytes(o.dtype);
  for (int64_t bytes : Sizes(o)) {
    // One shape for the three, whole rows for every rank of the world.
    const Shape s = ShapeFor(bytes, es, tp * dp);
    for (const std::string& variant : NodesCommBenchVariants(tp)) {
      const bool hierarchical = variant == "world/hierarchical";
      absl::StrAppendFormat(&spec,
                            "  - {id: %s-%d, type: all_reduce, m: %d, n: %d, group: %s, "
                            "mode: serial, transport: nccl%s}\n",
                            hierarchical ? "hier" : variant, s.m * s.n * es, s.m, s.n,
                            hierarchical ? "world" : variant,
                            hierarchical ? ", algorithm: hierarchical" : "");
    }
  }
  return spec;
}

std::vector<CommBenchRow> FoldNodesCommBench(const v1::Job& job) {
  std::vector<CommBenchRow> rows;
  for (const v1::OpResult& op : job.result().ops()) {
    if (op.type() != "all_reduce") continue;
    const std::string variant = op.group() == "dp"                 ? "dp"
                                : op.algorithm() == "hierarchical" ? "world/hierarchical"
                                                                   : "world";
    const int64_t count = op.m() * op.n();
    auto row = std::find_if(rows.begin(), rows.end(),
                            [&](const CommBenchRow& r) { return r.count == count; });
    if (row == rows.end()) {
      rows.push_back(CommBenchRow{op.type(), count * ElementBytes(op.dtype()), count, {}});
      row = rows.end() - 1;
    }
    row->by_transport[variant] = ResultOf(op);
  }
  return rows;
}

std::string HostFiguresNote(const std::string& backend) {
  if (backend != "host") return "";
  return "host backend: the figures mean nothing: its \"GPUs\" are threads sharing the CPU cores "
         "and the collectives between daemons run over Gloo on TCP, so only the checks (verify) "
         "count; run it on GPU nodes for times and bandwidths\n";
}

std::vector<std::string> CommBenchCaveats(const std::string& backend, int ranks_per_gpu,
                                          bool across_nodes) {
  return CaveatLines(SharedGpuNote(ranks_per_gpu) +
                     (across_nodes ? HostFiguresNote(backend) : HostTimingsNote(backend)));
}

void AddNodesJson(const v1::Job& job, const std::string& backend, nlohmann::json* j) {
  (*j)["nodes"] = std::vector<std::string>(job.nodes().begin(), job.nodes().end());
  (*j)["mesh"] = {{"tp", job.result().mesh_tp()}, {"dp", job.result().mesh_dp()}};
  (*j)["figures_meaningful"] = backend != "host";
  (*j)["figures_note"] = HostFiguresNote(backend);
  (*j)["inter_node_busbw_gbps"] = job.result().inter_node_busbw_gbps();
  (*j)["slowest_node"] = job.result().slowest_node();
  nlohmann::json nodes = nlohmann::json::array();
  for (const v1::NodeResult& n : job.result().node_results()) {
    nodes.push_back(ProtoToJson(n));
  }
  (*j)["node_results"] = nodes;
}

std::string FormatNodesLine(const v1::JobResult& result) {
  std::vector<std::string> nodes;
  for (const v1::NodeResult& n : result.node_results()) {
    nodes.push_back(absl::StrFormat("%d %s ranks %d-%d (%s)", n.node_index(), n.node(),
                                    n.first_rank(), n.first_rank() + n.ranks() - 1,
                                    n.part_id().empty() ? "-" : n.part_id()));
  }
  return nodes.empty() ? "" : absl::StrCat("nodes: ", absl::StrJoin(nodes, ", "), "\n");
}

std::string FormatNodesCommBench(const std::vector<CommBenchRow>& rows, const v1::Job& job, int tp,
                                 const std::string& dtype) {
  const v1::JobResult& result = job.result();
  const int dp = job.nodes_size();
  const std::vector<std::string> variants = NodesCommBenchVariants(tp);
  const bool hierarchical = variants.size() > 2;
  std::vector<TextTable::Column> columns = {{"SIZE", Align::kRight}, {"COUNT", Align::kRight}};
  for (const std::string& v : variants) {
    AddVariantColumns(v == "world/hierarchical" ? "hier" : v, columns);
  }
  if (hierarchical) columns.push_back({"FLAT/HIER", Align::kRight});
  columns.push_back({"MAX_REL_ERR", Align::kRight});
  columns.push_back({"VERIFY"});
  TextTable table(columns);
  std::map<std::string, std::pair<double, int64_t>> best;  // per variant: busbw, size
  for (const CommBenchRow& r : rows) {
    std::vector<std::string> cells = {FormatByteSize(r.bytes), absl::StrCat(r.count)};
    VerifyTally verify;
    for (const auto& [v, c] : AddVariantCells(r, variants, cells, verify)) {
      auto& b = best[v];
      if (c->busbw_gbps > b.first) b = {c->busbw_gbps, r.bytes};
    }
    if (hierarchical) {
      auto flat = r.by_transport.find("world");
      auto hier = r.by_transport.find("world/hierarchical");
      cells.push_back(flat != r.by_transport.end() && hier != r.by_transport.end() &&
                              hier->second.ms > 0
                          ? absl::StrFormat("%.2fx", flat->second.ms / hier->second.ms)
                          : "-");
    }
    table.AddRow(WithVerifyCells(std::move(cells), verify));
  }
  std::string out = absl::StrFormat(
      "commbench: all_reduce across %d nodes x %d device(s) (mesh tp %d x dp %d), %s; "
      "busbw = algbw x 2(N-1)/N, N = %d (dp) or %d (world)\n",
      dp, tp, tp, dp, dtype, dp, tp * dp);
  out += table.Render();
  if (hierarchical) {
    out +=
        "flat/hier: the flat world all-reduce's time over the hierarchical one's (above 1: "
        "hierarchical is faster)\n";
  } else {
    out += "one device per node: the hierarchical all-reduce is the flat one, left out\n";
  }
  for (const std::string& v : variants) {
    auto it = best.find(v);
    if (it == best.end() || it->second.first <= 0) continue;
    absl::StrAppendFormat(&out, "best busbw: %s %s GB/s (at %s)\n", v, FormatRate(it->second.first),
                          FormatByteSize(it->second.second));
  }
  if (result.inter_node_busbw_gbps() > 0) {
    absl::StrAppend(&out, "across nodes: bus bandwidth ",
                    FormatRate(result.inter_node_busbw_gbps()),
                    " GB/s (every op, its bytes over its time)\n");
  }
  out += FormatNodesLine(result);
  out += SharedGpuNote(result.ranks_per_gpu());
  out += HostFiguresNote(result.backend());
  return out;
}

nlohmann::json NodesCommBenchJson(const v1::Job& job, const v1::GetNodeInfoResponse& node,
                                  const v1::GetNodeInfoResponse* node_after,
                                  const std::vector<CommBenchRow>& rows, const CommBenchOptions& o,
                                  int tp) {
  nlohmann::json j = CommBenchJson(job, node, node_after, rows, o, tp);
  j.erase("algorithms");
  AddNodesJson(job, node.backend(), &j);
  // The rows' "transports" are the variants here: dp, world, world/hierarchical.
  for (nlohmann::json& row : j["rows"]) {
    row["variants"] = std::move(row["transports"]);
    row.erase("transports");
  }
  return j;
}

namespace {

int RunNodesCommBench(DaemonClient& client, const v1::GetNodeInfoResponse& node, CommBenchOptions o,
                      const std::string& json_file, bool json, bool err_is_tty, std::ostream& out,
                      std::ostream& err) {
  if (node.backend() == "host") {
    if (!o.min_bytes_given) o.min_bytes = kHostNodesCommBenchMinBytes;
    if (!o.max_bytes_given) o.max_bytes = std::max(o.min_bytes, kHostNodesCommBenchMaxBytes);
    err << "commbench: host backend: sizes " << FormatByteSize(o.min_bytes) << " to "
        << FormatByteSize(o.max_bytes) << " (--min-bytes and --max-bytes set them)\n";
  }
  const int tp = o.devices.empty() ? node.devices_size() : static_cast<int>(o.devices.size());
  v1::Job job;
  if (int rc = SubmitAndFollow(client, BuildNodesCommBenchSpec(o, tp), "commbench", tp,
                               node.backend(), err_is_tty, err, &job, o.nodes);
      rc != kExitOk) {
    return rc;
  }
  const std::vector<CommBenchRow> rows = FoldNodesCommBench(job);
  absl::StatusOr<v1::GetNodeInfoResponse> node_after = client.GetNodeInfo();
  const nlohmann::json j =
      NodesCommBenchJson(job, node, node_after.ok() ? &*node_after : nullptr, rows, o, tp);
  if (int rc = WriteJsonFile(j, json_file, err); rc != kExitOk) return rc;
  if (!o.html_file.empty()) {
    const std::string page =
        CommBenchHtml(rows, NodesCommBenchVariants(tp),
                      absl::StrCat("job ", job.id(), ": the all-reduce across ", o.nodes.size(),
                                   " nodes of ", tp, " ", node.backend(), " device(s), ", o.dtype),
                      CommBenchCaveats(node.backend(), job.result().ranks_per_gpu(), true));
    if (int rc = WriteTextFile(o.html_file, page, err); rc != kExitOk) return rc;
  }
  out << (json ? j.dump(1) + "\n" : FormatNodesCommBench(rows, job, tp, o.dtype));
  return kExitOk;
}

}  // namespace

int RunCommBench(DaemonClient& client, const CommBenchOptions& options,
                 const std::string& json_file, bool json, bool err_is_tty, std::ostream& out,
                 std::ostream& err) {
  if (absl::Status s = ValidateCommBenchOptions(options); !s.ok()) return UsageError(s, err);
  absl::StatusOr<v1::GetNodeInfoResponse> node = client.GetNodeInfo();
  if (!node.ok()) return ReportCallError(node.status(), client.address(), err);
  if (!options.nodes.empty()) {
    return RunNodesCommBench(client, *node, options, json_file, json, err_is_tty, out, err);
  }
  CommBenchOptions o = options;
  if (node->backend() == "host" && !o.max_bytes_given) {
    o.max_bytes = std::max(o.min_bytes, kHostCommBenchMaxBytes);
    err << "commbench: host backend: sizes up to " << FormatByteSize(o.max_bytes)
        << " (--max-bytes sets it)\n";
  }
  if (node->backend() == "host" && !o.algorithms.empty()) {
    o.library_algorithms = false;
    err << "commbench: host backend: its library collectives have one algorithm, so --algorithms "
           "runs over p2p only\n";
  }
  const int tp = o.devices.empty() ? node->devices_size() : static_cast<int>(o.devices.size());
  if (tp < 2 && (o.transports.size() > 1 || !o.algorithms.empty())) {
    // One rank has no peer: every transport and layout is the same local copy.
    o.transports.resize(1);
    o.algorithms.clear();
    err << "commbench: one rank: every transport is a local copy, so it times " << o.transports[0]
        << " alone\n";
  }
  v1::Job job;
  if (int rc = SubmitAndFollow(client, BuildCommBenchSpec(o, tp), "commbench", tp, node->backend(),
                               err_is_tty, err, &job);
      rc != kExitOk) {
    return rc;
  }
  const std::vector<CommBenchRow> rows = FoldCommBench(job);
  absl::StatusOr<v1::GetNodeInfoResponse> node_after = client.GetNodeInfo();
  const nlohmann::json j =
      CommBenchJson(job, *node, node_after.ok() ? &*node_after : nullptr, rows, o, tp);
  if (int rc = WriteJsonFile(j, json_file, err); rc != kExitOk) return rc;
  if (!o.html_file.empty()) {
    const std::string page = CommBenchHtml(
        rows, CommBenchVariants(o),
        absl::StrCat("job ", job.id(), " on ", tp, " ", node->backend(), " device(s) (",
                     node->devices_size() > 0 ? node->devices(0).name() : "", "), ", o.dtype),
        CommBenchCaveats(node->backend(), job.result().ranks_per_gpu(), false));
    if (int rc = WriteTextFile(o.html_file, page, err); rc != kExitOk) return rc;
  }
  out << (json ? j.dump(1) + "\n"
               : FormatCommBench(rows, CommBenchVariants(o), tp, o.dtype,
                                 job.result().ranks_per_gpu()));
  return kExitOk;
}

}  // namespace overlap::client
