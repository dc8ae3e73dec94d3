#include "client/measure/check.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/core/command_io.h"
#include "client/format/device_health.h"
#include "client/format/report.h"
#include "client/format/table.h"
#include "client/jobs/progress_printer.h"
#include "common/status_macros.h"

namespace overlap::client {
namespace {

// The link check's all-gather: shards of kLinkK bf16 columns, a GEMM of
// kLinkN columns after it that costs next to nothing.
constexpr int64_t kLinkK = 4096;
constexpr int64_t kLinkN = 128;

int64_t LinkShardRows(const CheckOptions& o) {
  return o.link_mib * (int64_t{1} << 20) / (kLinkK * 2);
}

std::string JobHead(const std::string& name, const std::vector<int>& devices,
                    const CheckOptions& o) {
  return absl::StrFormat(
      "name: %s\ndevices: [%s]\ndtype: bf16\niterations: %d\nwarmup: %d\nverify: false\nops:\n",
      name, absl::StrJoin(devices, ", "), o.iterations, kCheckWarmup);
}

// Submits `spec` and follows it to its end.
absl::StatusOr<v1::Job> RunJob(DaemonClient& client, const std::string& spec) {
  ASSIGN_OR_RETURN(const v1::Job job, client.SubmitJob(spec, "check"));
  return client.WatchJob(job.id(), [](const v1::Job&) {});
}

}  // namespace

std::string GpuCheckSpec(int device, const CheckOptions& o) {
  const int64_t s = o.gemm_size;
  return JobHead(absl::StrCat("check-gpu-", device), {device}, o) +
         absl::StrFormat("  - {id: gemm, type: ag_gemm, m: %d, k: %d, n: %d, mode: serial}\n", s, s,
                         s);
}

std::string LinkCheckSpec(int a, int b, const CheckOptions& o) {
  return JobHead(absl::StrCat("check-link-", a, "-", b), {a, b}, o) +
         absl::StrFormat(
             "  - {id: link, type: ag_gemm, m: %d, k: %d, n: %d, mode: serial, transport: p2p}\n",
             2 * LinkShardRows(o), kLinkK, 2 * kLinkN);
}

double LinkGbps(const CheckOptions& o, double ms) {
  const double bytes = static_cast<double>(LinkShardRows(o)) * kLinkK * 2;
  return ms > 0 ? bytes / (ms * 1e-3) / 1e9 : 0;
}

namespace {

double BestLinkGbps(const CheckResult& r) {
  double best = 0;
  for (const LinkCheck& l : r.links) best = std::max(best, l.p2p_gbps);
  return best;
}

std::vector<double> GemmTimes(const CheckResult& r) {
  std::vector<double> ms;
  for (const GpuCheck& g : r.gpus) ms.push_back(g.gemm_ms);
  return ms;
}

}  // namespace

std::vector<size_t> SlowGpus(const CheckResult& r) { return SlowerThanFastest(GemmTimes(r)); }

namespace {

const v1::Device* DeviceIn(const v1::GetNodeInfoResponse& node, int index) {
  for (const v1::Device& d : node.devices()) {
    if (d.index() == index) return &d;
  }
  return nullptr;
}

bool AnyCapped(const CheckResult& r) {
  for (const GpuCheck& g : r.gpus) {
    if (g.capped_valid) return true;
  }
  return false;
}

}  // namespace

void SetCappedShares(const v1::GetNodeInfoResponse& before, const v1::GetNodeInfoResponse& after,
                     double wall_s, GpuCheck* gpu) {
  const v1::Device* a = DeviceIn(before, gpu->device);
  const v1::Device* b = DeviceIn(after, gpu->device);
  if (a == nullptr || b == nullptr || !a->capped_time_valid() || !b->capped_time_valid() ||
      !(wall_s > 0)) {
    return;
  }
  gpu->capped_valid = true;
  gpu->power_capped = std::clamp((b->power_capped_s() - a->power_capped_s()) / wall_s, 0.0, 1.0);
  gpu->thermal_capped =
      std::clamp((b->thermal_capped_s() - a->thermal_capped_s()) / wall_s, 0.0, 1.0);
}

void SetHealthFindings(const v1::GetNodeInfoResponse& start, const v1::GetNodeInfoResponse& end,
                       GpuCheck* gpu) {
  const v1::Device* now = DeviceIn(end, gpu->device);
  if (now == nullptr || !HasHealth(*now)) return;
  gpu->health = HealthJson(*now);
  gpu->health_problems = HealthProblems(*now, MostNvlinksActive(end));
  if (const v1::Device* then = DeviceIn(start, gpu->device); then != nullptr) {
    const std::string grew = NvlinkErrorsBetween(*then, *now, "during the check");
    if (!grew.empty()) gpu->health_problems.push_back(grew);
  }
}

std::vector<size_t> UnhealthyGpus(const CheckResult& r) {
  std::vector<size_t> out;
  for (size_t i = 0; i < r.gpus.size(); ++i) {
    if (!r.gpus[i].health_problems.empty()) out.push_back(i);
  }
  return out;
}

std::vector<size_t> SlowLinks(const CheckResult& r) {
  std::vector<size_t> slow;
  const double best = BestLinkGbps(r);
  for (size_t i = 0; i < r.links.size(); ++i) {
    if (r.links[i].p2p_gbps < best * (1 - kSlowLinkFraction)) slow.push_back(i);
  }
  return slow;
}

std::string FormatCheck(const CheckResult& r, const CheckOptions& o) {
  std::string out;
  const std::vector<size_t> slow_gpus = SlowGpus(r), slow_links = SlowLinks(r);
  auto is_in = [](const std::vector<size_t>& v, size_t i) {
    return std::find(v.begin(), v.end(), i) != v.end();
  };
  const std::vector<double> gemm_ms = GemmTimes(r);
  const size_t fastest_index = FastestIndex(gemm_ms);
  const double fastest = fastest_index < gemm_ms.size() ? gemm_ms[fastest_index] : 0;
  absl::StrAppendFormat(&out, "GPUs: a %dx%dx%d bf16 GEMM on each, all at once\n", o.gemm_size,
                        o.gemm_size, o.gemm_size);
  const bool capped = AnyCapped(r);
  TextTable gpus(GemmCheckColumns(capped, /*with_node=*/false));
  for (size_t i = 0; i < r.gpus.size(); ++i) {
    const GpuCheck& g = r.gpus[i];
    std::vector<std::string> row = {absl::StrCat(g.device), FormatMs(g.gemm_ms),
                                    absl::StrFormat("%.1f", g.tflops),
                                    fastest > 0 ? SignedPercent(g.gemm_ms / fastest - 1) : "-"};
    if (capped) {
      row.push_back(CappedShare(g, g.power_capped));
      row.push_back(CappedShare(g, g.thermal_capped));
    }
    row.push_back(is_in(slow_gpus, i) ? "SLOW" : "");
    gpus.AddRow(row);
  }
  out += gpus.Render();
  out += FormatCheckEnergy(r);
  if (!r.links.empty()) {
    const double best = BestLinkGbps(r);
    absl::StrAppendFormat(&out,
                          "links: a two-rank all-gather of %d MiB shards per pair, both "
                          "directions at once; GB/s per direction\n",
                          o.link_mib);
    TextTable links(Columns({Words({"PAIR"}),
                             Figures({"P2P_MS", "P2P_GBPS", "NCCL_MS", "NCCL_GBPS", "P2P_VS_BEST"}),
                             Words({""})}));
    for (size_t i = 0; i < r.links.size(); ++i) {
      const LinkCheck& l = r.links[i];
      links.AddRow({absl::StrCat(l.a, "-", l.b), FormatMs(l.p2p_ms),
                    absl::StrFormat("%.1f", l.p2p_gbps), FormatMs(l.nccl_ms),
                    absl::StrFormat("%.1f", l.nccl_gbps),
                    best > 0 ? SignedPercent(l.p2p_gbps / best - 1) : "-",
                    is_in(slow_links, i) ? "SLOW" : ""});
    }
    out += links.Render();
  }
  for (size_t i : slow_gpus) {
    const GpuCheck& g = r.gpus[i];
    absl::StrAppendFormat(&out,
                          "slow GPU: %d, its GEMM %.1f%% slower than the fastest GPU's (more "
                          "than %.0f%%)",
                          g.device, 100 * (g.gemm_ms / fastest - 1), 100 * kSlowRankFraction);
    if (g.capped_valid && (g.power_capped > 0 || g.thermal_capped > 0)) {
      absl::StrAppendFormat(&out,
                            "; its clocks were held back by the power limit %.0f%% and by heat "
                            "%.0f%% of the GEMM phase",
                            100 * g.power_capped, 100 * g.thermal_capped);
    }
    absl::StrAppend(&out,
                    ": `overlapctl node` shows its clocks, power, temperature and what "
                    "limits them now\n");
  }
  for (size_t i : slow_links) {
    absl::StrAppendFormat(&out,
                          "slow link: %d-%d, %.1f GB/s over the copy engines, more than %.0f%% "
                          "below the best pair's\n",
                          r.links[i].a, r.links[i].b, r.links[i].p2p_gbps, 100 * kSlowLinkFraction);
  }
  if (slow_gpus.empty() && slow_links.empty()) {
    absl::StrAppend(&out, "no slow GPU", r.links.empty() ? "" : " or link", "\n");
  }
  bool health_read = false;
  for (const GpuCheck& g : r.gpus) {
    health_read = health_read || !g.health.is_null();
    for (const std::string& problem : g.health_problems) {
      absl::StrAppend(&out, "unhealthy GPU: ", g.device, ", ", problem, "\n");
    }
  }
  if (health_read && UnhealthyGpus(r).empty()) {
    absl::StrAppend(&out, "no health problem (PCIe link, NVLinks, ECC, row remaps, Xids)\n");
  }
  return out;
}

std::string FormatCheckEnergy(const CheckResult& r) {
  std::string out;
  for (const GpuCheck& g : r.gpus) {
    if (!g.energy_valid) continue;
    absl::StrAppendFormat(&out, "energy: GPU %d, %.3g J/TFLOP at %.0f W average\n", g.device,
                          g.joules_per_tflop, g.watts);
  }
  return out;
}

nlohmann::json GpuJson(const GpuCheck& g) {
  nlohmann::json gpu = {{"device", g.device}, {"gemm_ms", g.gemm_ms}, {"tflops", g.tflops}};
  if (g.energy_valid) {
    gpu["joules_per_tflop"] = g.joules_per_tflop;
    gpu["watts"] = g.watts;
  }
  if (g.capped_valid) {
    gpu["power_capped_share"] = g.power_capped;
    gpu["thermal_capped_share"] = g.thermal_capped;
  }
  if (!g.health.is_null()) {
    gpu["health"] = g.health;
    gpu["health_problems"] = g.health_problems;
  }
  return gpu;
}

nlohmann::json CheckJson(const CheckResult& r, const CheckOptions& o) {
  nlohmann::json j;
  j["gemm_size"] = o.gemm_size;
  j["link_mib"] = o.link_mib;
  j["iterations"] = o.iterations;
  j["gpus"] = nlohmann::json::array();
  for (const GpuCheck& g : r.gpus) j["gpus"].push_back(GpuJson(g));
  j["links"] = nlohmann::json::array();
  for (const LinkCheck& l : r.links) {
    j["links"].push_back({{"a", l.a},
                          {"b", l.b},
                          {"p2p_ms", l.p2p_ms},
                          {"p2p_gbps", l.p2p_gbps},
                          {"nccl_ms", l.nccl_ms},
                          {"nccl_gbps", l.nccl_gbps}});
  }
  j["slow_gpus"] = nlohmann::json::array();
  for (size_t i : SlowGpus(r)) j["slow_gpus"].push_back(r.gpus[i].device);
  j["slow_links"] = nlohmann::json::array();
  for (size_t i : SlowLinks(r)) j["slow_links"].push_back({r.links[i].a, r.links[i].b});
  j["unhealthy_gpus"] = nlohmann::json::array();
  for (size_t i : UnhealthyGpus(r)) j["unhealthy_gpus"].push_back(r.gpus[i].device);
  return j;
}

// Sizes a host backend can run, where the user left them alone: GPU-sized
// ones take minutes per iteration on CPU cores.
void UseHostSizes(CheckOptions* o, std::ostream& err) {
  if (o->gemm_size_given && o->link_mib_given) return;
  if (!o->gemm_size_given) o->gemm_size = kHostCheckGemmSize;
  if (!o->link_mib_given) o->link_mib = kHostCheckLinkMib;
  err << "check: host backend: a " << o->gemm_size << "x" << o->gemm_size << "x" << o->gemm_size
      << " GEMM and " << o->link_mib
      << " MiB shards (GPU-sized ones would take minutes on CPU cores; --gemm-size and "
         "--link-mib set them)\n";
}

GpuCheck GpuCheckOf(int device, const v1::OpResult& op, const CheckOptions& o) {
  GpuCheck g{device, op.gemm_alone().median_ms(), 0};
  const double s = static_cast<double>(o.gemm_size);
  if (g.gemm_ms > 0) g.tflops = 2 * s * s * s / (g.gemm_ms * 1e-3) / 1e12;
  if (op.has_energy()) {
    g.energy_valid = true;
    g.joules_per_tflop = op.energy().joules_per_tflop();
    g.watts = op.energy().step_watts();
  }
  return g;
}

absl::StatusOr<std::vector<std::string>> SubmitGpuChecks(DaemonClient& client,
                                                         const CheckOptions& o) {
  std::vector<std::string> ids;
  for (int d : o.devices) {
    ASSIGN_OR_RETURN(const v1::Job job, client.SubmitJob(GpuCheckSpec(d, o), "check"));
    ids.push_back(job.id());
  }
  return ids;
}

int CollectGpuChecks(DaemonClient& client, const CheckOptions& o,
                     const std::vector<std::string>& ids, const std::string& where,
                     std::ostream& err, std::vector<GpuCheck>* gpus) {
  for (size_t i = 0; i < ids.size(); ++i) {
    absl::StatusOr<v1::Job> job = client.WatchJob(ids[i], [](const v1::Job&) {});
    if (!job.ok()) return ReportCallError(job.status(), client.address(), err);
    if (job->state() != v1::SUCCEEDED || job->result().ops_size() != 1) {
      err << where << FormatJobLine(*job);
      return kExitJobFailed;
    }
    const GpuCheck g = GpuCheckOf(o.devices[i], job->result().ops(0), o);
    gpus->push_back(g);
  }
  return kExitOk;
}

int RunCheck(DaemonClient& client, const CheckOptions& options, bool json, std::ostream& out,
             std::ostream& err) {
  CheckOptions o = options;
  absl::StatusOr<v1::GetNodeInfoResponse> node = client.GetNodeInfo();
  if (!node.ok()) return ReportCallError(node.status(), client.address(), err);
  if (node->ranks_per_gpu() > 1) {
    // Its devices are ranks sharing GPUs: their GEMMs queue on one GPU and their
    // "links" are local copies, so any GPU or pair would look slow or fine for nothing.
    err << "overlapctl: check: the daemon runs " << node->ranks_per_gpu()
        << " ranks per GPU (config ranks_per_gpu); check needs one rank per GPU to find a "
           "slow GPU or link\n";
    return kExitRefused;
  }
  if (o.devices.empty()) {
    for (const v1::Device& d : node->devices()) o.devices.push_back(d.index());
  }
  if (node->backend() == "host") UseHostSizes(&o, err);
  CheckResult result;
  // NVML's cumulative capped times around the GEMM phase say what held a slow
  // GPU back while it ran.
  const auto gemm_start = std::chrono::steady_clock::now();
  // Every GPU's job first, so that they run at once; then follow each.
  absl::StatusOr<std::vector<std::string>> ids = SubmitGpuChecks(client, o);
  if (!ids.ok()) return ReportCallError(ids.status(), client.address(), err);
  ProgressStream(err) << "check: GEMM on " << ids->size() << " GPU(s)\n";
  if (int rc = CollectGpuChecks(client, o, *ids, "", err, &result.gpus); rc != kExitOk) return rc;
  if (absl::StatusOr<v1::GetNodeInfoResponse> after = client.GetNodeInfo(); after.ok()) {
    const double wall_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - gemm_start).count();
    for (GpuCheck& g : result.gpus) SetCappedShares(*node, *after, wall_s, &g);
  }
  if (o.links && o.devices.size() > 1) {
    const size_t pairs = o.devices.size() * (o.devices.size() - 1) / 2;
    size_t done = 0;
    for (size_t i = 0; i < o.devices.size(); ++i) {
      for (size_t j = i + 1; j < o.devices.size(); ++j) {
        const int a = o.devices[i], b = o.devices[j];
        ProgressStream(err) << "check: link " << a << "-" << b << " (" << ++done << "/" << pairs
                            << ")\n";
        absl::StatusOr<v1::Job> job = RunJob(client, LinkCheckSpec(a, b, o));
        if (!job.ok()) return ReportCallError(job.status(), client.address(), err);
        if (job->state() != v1::SUCCEEDED || job->result().ops_size() != 1) {
          err << FormatJobLine(*job);
          return kExitJobFailed;
        }
        const v1::OpResult& op = job->result().ops(0);
        LinkCheck l{a, b, op.comm_alone_p2p().median_ms(), op.comm_alone_nccl().median_ms()};
        l.p2p_gbps = LinkGbps(o, l.p2p_ms);
        l.nccl_gbps = LinkGbps(o, l.nccl_ms);
        result.links.push_back(l);
      }
    }
  }
  // Health at the end: what NVML says now, and the NVLink errors the GEMMs and
  // the link traffic made since the start.
  absl::StatusOr<v1::GetNodeInfoResponse> end = client.GetNodeInfo();
  if (!end.ok()) return ReportCallError(end.status(), client.address(), err);
  for (GpuCheck& g : result.gpus) SetHealthFindings(*node, *end, &g);
  out << (json ? CheckJson(result, o).dump(1) + "\n" : FormatCheck(result, o));
  return SlowGpus(result).empty() && SlowLinks(result).empty() && UnhealthyGpus(result).empty()
             ? kExitOk
             : kExitJobFailed;
}

std::string SignedPercent(double x) { return absl::StrFormat("%+.1f%%", 100 * x); }

std::string CappedShare(const GpuCheck& g, double share) {
  return g.capped_valid ? absl::StrFormat("%.0f", 100 * share) : "-";
}

std::vector<TextTable::Column> GemmCheckColumns(bool capped, bool with_node) {
  std::vector<TextTable::Column> columns;
  if (with_node) columns.push_back({"NODE"});
  for (const char* name : {"GPU", "GEMM_MS", "TFLOPS", "VS_FASTEST"}) {
    columns.push_back({name, Align::kRight});
  }
  if (capped) {
    columns.push_back({"POWER_CAPPED_%", Align::kRight});
    columns.push_back({"HEAT_CAPPED_%", Align::kRight});
  }
  columns.push_back({""});
  return columns;
}

}  // namespace overlap::client
