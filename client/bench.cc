#include "client/bench.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/commands.h"
#include "client/commbench.h"
#include "client/progress_printer.h"
#include "client/report.h"
#include "client/table.h"
#include "client/timeline.h"
#include "common/byte_size.h"
#include "common/graph_parser.h"
#include "common/library_env.h"
#include "common/status_macros.h"

namespace overlap::client {
namespace {

std::string ShapeName(const BenchShape& s) {
  return absl::StrCat(s.op, "-", s.m, "x", s.k, "x", s.n);
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double Spread(const std::vector<double>& v) {
  if (v.empty()) return 0;
  auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return *hi - *lo;
}

double GeoMean(const std::vector<double>& v) {
  if (v.empty()) return 0;
  double log_sum = 0;
  for (double x : v) log_sum += std::log(x);
  return std::exp(log_sum / static_cast<double>(v.size()));
}

}  // namespace

double DensePeakTflops(const std::string& dtype) {
  absl::StatusOr<DType> parsed = ParseDType(dtype);
  if (!parsed.ok()) return 989;
  switch (*parsed) {
    case DType::kFP8:
      return 1979;
    case DType::kF32:
      return 67;
    case DType::kBF16:
    case DType::kF16:
      break;
  }
  return 989;
}

std::vector<BenchShape> DefaultBenchShapes() {
  std::vector<BenchShape> shapes = {
      {"ag_gemm", 4096, 8192, 8192},  {"ag_gemm", 8192, 8192, 28672},
      {"ag_gemm", 16384, 8192, 28672}, {"ag_gemm", 8192, 4096, 4096},
      {"ag_gemm", 16384, 8192, 7168},
  };
  const std::vector<BenchShape> rs = {
      {"gemm_rs", 4096, 8192, 8192},  {"gemm_rs", 8192, 28672, 8192},
      {"gemm_rs", 16384, 28672, 8192}, {"gemm_rs", 8192, 4096, 4096},
      {"gemm_rs", 16384, 7168, 8192},
  };
  for (const BenchShape& s : rs) shapes.push_back(s);
  for (BenchShape s : rs) {
    s.op = "gemm_ar";
    shapes.push_back(s);
  }
  return shapes;
}

bool ParseShapeDims(absl::string_view text, int64_t* m, int64_t* k, int64_t* n) {
  std::vector<absl::string_view> dims = absl::StrSplit(text, 'x');
  return dims.size() == 3 && absl::SimpleAtoi(dims[0], m) && absl::SimpleAtoi(dims[1], k) &&
         absl::SimpleAtoi(dims[2], n);
}

absl::StatusOr<std::vector<BenchShape>> ParseBenchShapes(const std::string& text) {
  std::vector<BenchShape> out;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    std::vector<std::string> parts = absl::StrSplit(item, ':');
    BenchShape s;
    if (parts.size() != 2 || !ParseShapeDims(parts[1], &s.m, &s.k, &s.n) ||
        (parts[0] != "ag_gemm" && parts[0] != "gemm_rs" && parts[0] != "gemm_ar")) {
      return absl::InvalidArgumentError(
          absl::StrCat("--shapes: bad item \"", item, "\" (expected op:MxKxN, e.g. ag_gemm:4096x8192x8192)"));
    }
    s.op = parts[0];
    out.push_back(s);
  }
  if (out.empty()) return absl::InvalidArgumentError("--shapes: no shapes given");
  return out;
}

absl::StatusOr<GraphBench> BenchFromGraph(const std::string& text, const std::string& source) {
  ASSIGN_OR_RETURN(JobSpec spec, ParseJobSpec(text, source));
  GraphBench out;
  out.dtype = DTypeName(spec.dtype);
  out.devices = spec.devices;
  for (const OpSpec& op : spec.ops) {
    if (op.type != OpType::kAgGemm && op.type != OpType::kGemmRs && op.type != OpType::kGemmAr) {
      continue;
    }
    const BenchShape shape{OpTypeName(op.type), op.m, op.k, op.n};
    const bool seen = std::any_of(out.shapes.begin(), out.shapes.end(), [&](const BenchShape& s) {
      return s.op == shape.op && s.m == shape.m && s.k == shape.k && s.n == shape.n;
    });
    if (!seen) out.shapes.push_back(shape);
  }
  if (out.shapes.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source,
                     ": no ag_gemm, gemm_rs or gemm_ar op to sweep (the sweep times "
                     "overlapped ops; submit the graph to time it whole)"));
  }
  return out;
}

std::string BuildBenchSpec(const BenchOptions& o) {
  const std::vector<BenchShape> shapes = o.shapes.empty() ? DefaultBenchShapes() : o.shapes;
  std::string spec = absl::StrFormat(
      "name: bench\ndtype: %s\niterations: %d\nwarmup: %d\nverify: %s\nhead_start: %s\n"
      "layer_step: false\nseed: %d\nretune: %s\n",
      o.dtype, o.iterations, o.warmup, o.verify ? "true" : "false", o.head_start, o.seed,
      o.retune ? "true" : "false");
  if (!o.devices.empty()) {
    absl::StrAppend(&spec, "devices: [", absl::StrJoin(o.devices, ", "), "]\n");
  }
  spec += "ops:\n";
  // Interleaved repeats: auto and serial alternate so that drift hits both.
  for (const BenchShape& s : shapes) {
    for (int r = 0; r < o.repeats; ++r) {
      for (const char* mode : {"auto", "serial"}) {
        std::string transport = std::string(mode) == "serial" ? "nccl" : o.transport;
        // ag_gemm's GEMM stores nothing remotely: it keeps every transport.
        if (transport == "direct" && s.op == "ag_gemm") transport = "auto";
        const std::string chunks =
            std::string(mode) == "auto" && o.chunks > 0 ? absl::StrCat(", chunks: ", o.chunks) : "";
        absl::StrAppendFormat(&spec,
                              "  - {id: %s-%s-%d, type: %s, m: %d, k: %d, n: %d, mode: %s, "
                              "transport: %s%s}\n",
                              ShapeName(s), mode, r, s.op, s.m, s.k, s.n, mode, transport, chunks);
      }
    }
  }
  return spec;
}

std::vector<BenchRow> FoldBench(const v1::Job& job, const BenchOptions& o) {
  const std::vector<BenchShape> shapes = o.shapes.empty() ? DefaultBenchShapes() : o.shapes;
  std::map<std::string, const v1::OpResult*> by_id;
  for (const v1::OpResult& r : job.result().ops()) by_id[r.id()] = &r;
  std::vector<BenchRow> rows;
  for (const BenchShape& s : shapes) {
    BenchRow row;
    row.shape = s;
    row.ranks_per_gpu = std::max(1, job.result().ranks_per_gpu());
    row.host_backend = job.result().backend() == "host";
    std::vector<double> gemm, comm, nccl, p2p, tflops, busbw, slowdown, host, err;
    std::vector<std::vector<double>> gemm_rank;
    for (int r = 0; r < o.repeats; ++r) {
      auto a = by_id.find(absl::StrCat(ShapeName(s), "-auto-", r));
      auto b = by_id.find(absl::StrCat(ShapeName(s), "-serial-", r));
      if (a == by_id.end() || b == by_id.end()) continue;
      const v1::OpResult& x = *a->second;
      row.tp = x.tp();
      row.mode = ScheduleLabel(x);
      row.auto_repeats.push_back(x.step().median_ms());
      row.auto_reasons.push_back(x.auto_reason());
      if (row.candidates.empty()) {
        row.candidates.assign(x.candidates().begin(), x.candidates().end());
      }
      row.timeline = x.timeline();
      row.serial_repeats.push_back(b->second->step().median_ms());
      gemm.push_back(x.gemm_alone().median_ms());
      gemm_rank.resize(std::max<size_t>(gemm_rank.size(), x.gemm_alone_rank_ms_size()));
      for (int i = 0; i < x.gemm_alone_rank_ms_size(); ++i) {
        gemm_rank[i].push_back(x.gemm_alone_rank_ms(i));
      }
      comm.push_back(x.comm_alone().median_ms());
      nccl.push_back(x.comm_alone_nccl().median_ms());
      p2p.push_back(x.comm_alone_p2p().median_ms());
      tflops.push_back(x.tflops());
      busbw.push_back(x.busbw_gbps());
      slowdown.push_back(x.gemm_slowdown());
      host.push_back(x.host_enqueue_ms());
      err.push_back(std::max(x.max_rel_error(), b->second->max_rel_error()));
    }
    if (row.auto_repeats.empty()) continue;
    row.step_ms = Median(row.auto_repeats);
    row.serial_ms = Median(row.serial_repeats);
    row.step_spread = Spread(row.auto_repeats);
    row.serial_spread = Spread(row.serial_repeats);
    row.gemm_spread = Spread(gemm);
    row.comm_spread = Spread(comm);
    row.comm_nccl_spread = Spread(nccl);
    row.comm_p2p_spread = Spread(p2p);
    row.gemm_ms = Median(gemm);
    row.comm_ms = Median(comm);
    row.comm_nccl_ms = Median(nccl);
    row.comm_p2p_ms = Median(p2p);
    row.exposed_ms = std::max(0.0, row.step_ms - row.gemm_ms);
    row.hidden = row.comm_ms > 0 ? 1 - row.exposed_ms / row.comm_ms : 1;
    row.tflops = 2.0 * s.m * s.k * s.n / (row.step_ms * 1e-3) / 1e12;
    row.mfu = row.tflops / (o.peak_tflops * std::max(1, row.tp));
    row.busbw = Median(busbw);
    row.ideal_ms = std::max(row.gemm_ms, row.comm_ms);
    row.gemm_slowdown = Median(slowdown);
    row.floor_ms = std::max(row.gemm_ms * std::max(1.0, row.gemm_slowdown), row.comm_ms);
    row.host_ms = Median(host);
    row.max_rel_error = *std::max_element(err.begin(), err.end());
    for (const std::vector<double>& t : gemm_rank) row.gemm_rank_ms.push_back(Median(t));
    row.devices.assign(job.devices().begin(), job.devices().end());
    rows.push_back(row);
  }
  return rows;
}

std::string FormatBench(const std::vector<BenchRow>& rows) {
  TextTable t({{"op"},
               {"shape (m x k x n)"},
               {"tp", Align::kRight},
               {"auto mode"},
               {"step ms", Align::kRight},
               {"host ms", Align::kRight},
               {"serial ms", Align::kRight},
               {"GEMM alone", Align::kRight},
               {"comm alone", Align::kRight},
               {"nccl/p2p", Align::kRight},
               {"exposed", Align::kRight},
               {"hidden %", Align::kRight},
               {"TFLOP/s", Align::kRight},
               {"MFU %", Align::kRight},
               {"busbw", Align::kRight},
               {"step/ideal", Align::kRight},
               {"GEMM slow", Align::kRight},
               {"step/floor", Align::kRight},
               {"GEMMs +%", Align::kRight},
               {"waited", Align::kRight},
               {"max err", Align::kRight}});
  std::vector<double> ratios, floor_ratios, speedups;
  int hidden_checked = 0, hidden_ok = 0, auto_ok = 0;
  for (const BenchRow& r : rows) {
    const double ratio = r.ideal_ms > 0 ? r.step_ms / r.ideal_ms : 0;
    if (ratio > 0) ratios.push_back(ratio);
    const double floor_ratio = r.floor_ms > 0 ? r.step_ms / r.floor_ms : 0;
    if (floor_ratio > 0) floor_ratios.push_back(floor_ratio);
    if (r.step_ms > 0) speedups.push_back(r.serial_ms / r.step_ms);
    if (r.comm_ms > 0 && r.comm_ms <= r.gemm_ms) {  // one rank has no comm to hide
      ++hidden_checked;
      hidden_ok += r.hidden >= 0.85;
    }
    const double allowed = std::max(0.02 * r.serial_ms, 2 * std::max(r.step_spread, r.serial_spread));
    auto_ok += r.step_ms <= r.serial_ms + allowed;
    // From the traced iteration, for the rank that finished last: its GEMMs'
    // time over the GEMM alone (pieces, contention) and its compute stream's wait.
    std::string gemms_over = "-", waited = "-";
    if (!r.timeline.spans().empty() && r.gemm_ms > 0) {
      const RankTimeline last = LastRank(r.timeline);
      gemms_over = absl::StrFormat("%+.1f", 100 * (last.gemm_ms / r.gemm_ms - 1));
      waited = FormatMs(last.waiting_ms);
    }
    t.AddRow({r.shape.op,
              absl::StrFormat("%d x %d x %d", r.shape.m, r.shape.k, r.shape.n),
              absl::StrCat(r.tp),
              r.mode,
              FormatMs(r.step_ms),
              FormatMs(r.host_ms),
              FormatMs(r.serial_ms),
              FormatMs(r.gemm_ms),
              FormatMs(r.comm_ms),
              absl::StrFormat("%.3f/%.3f", r.comm_nccl_ms, r.comm_p2p_ms),
              FormatMs(r.exposed_ms),
              r.comm_ms > 0 ? FormatHidden(r.hidden) : "-",
              absl::StrFormat("%.0f", r.tflops),
              absl::StrFormat("%.1f", 100 * r.mfu),
              absl::StrFormat("%.0f", r.busbw),
              absl::StrFormat("%.3f", ratio),
              r.gemm_slowdown > 0 ? absl::StrFormat("%.3f", r.gemm_slowdown) : "-",  // one rank
              absl::StrFormat("%.3f", floor_ratio),
              gemms_over,
              waited,
              absl::StrFormat("%.1e", r.max_rel_error)});
  }
  std::string out = t.Render();
  for (const BenchRow& r : rows) {
    // Ranks that share a GPU ran their GEMMs alone one after the other, and host
    // ranks share the CPU cores: a rank's GEMM says nothing of a GPU there.
    if (r.ranks_per_gpu > 1 || r.host_backend) continue;
    const std::string slow = SlowRankNote(r.gemm_rank_ms, r.devices);
    if (slow.empty()) continue;
    absl::StrAppendFormat(&out, "slow GPU? %s %d x %d x %d: %s\n", r.shape.op, r.shape.m, r.shape.k,
                          r.shape.n, slow);
  }
  if (!ratios.empty()) {
    absl::StrAppendFormat(
        &out,
        "step/ideal: geomean %.3f, worst %.3f (target <= 1.05, none above 1.12)\n"
        "auto vs serial: geomean speedup %.3fx; auto within max(2%%, 2x spread) of serial on %d/%d\n"
        "hidden >= 85%% where comm alone <= GEMM alone: %d/%d shapes\n",
        GeoMean(ratios), *std::max_element(ratios.begin(), ratios.end()), GeoMean(speedups),
        auto_ok, static_cast<int>(rows.size()), hidden_ok, hidden_checked);
    if (!floor_ratios.empty()) {
      absl::StrAppendFormat(
          &out,
          "step/floor: geomean %.3f, worst %.3f (floor = max(GEMM beside the collective, comm "
          "alone): the contention no schedule removes)\n",
          GeoMean(floor_ratios), *std::max_element(floor_ratios.begin(), floor_ratios.end()));
    }
  }
  if (!rows.empty()) out += SharedGpuNote(rows[0].ranks_per_gpu);
  if (!rows.empty() && rows[0].tp == 1) {
    out +=
        "one GPU: nothing to communicate, so auto and serial run the same schedule and their "
        "difference is noise; run the sweep on the TP group you train with\n";
  }
  return out;
}

namespace {

nlohmann::json Telemetry(const v1::GetNodeInfoResponse& node) {
  nlohmann::json out = nlohmann::json::array();
  for (const v1::Device& d : node.devices()) {
    if (!d.telemetry_valid()) continue;
    nlohmann::json device = {{"device", d.index()}};
    AddTelemetryJson(d, &device);
    out.push_back(std::move(device));
  }
  return out;
}

}  // namespace

nlohmann::json RunHeaderJson(const v1::Job& job, const v1::GetNodeInfoResponse& node,
                             const v1::GetNodeInfoResponse* node_after) {
  nlohmann::json j;
  j["job_id"] = job.id();
  j["backend"] = node.backend();
  j["git_commit"] = node.git_commit();
  j["overlapd_version"] = node.overlapd_version();
  j["cuda_runtime"] = node.cuda_runtime_version();
  j["cuda_driver"] = node.cuda_driver_version();
  j["nccl"] = node.nccl_version();
  j["cublas"] = node.cublas_version();
  j["hostname"] = node.hostname();
  j["gpus"] = nlohmann::json::array();
  for (const v1::Device& d : node.devices()) j["gpus"].push_back(d.name());
  j["client_env"] = LibraryEnvironment();
  // What NCCL and CUDA read is the daemon's environment, not the client's.
  j["daemon_env"] =
      std::map<std::string, std::string>(node.library_env().begin(), node.library_env().end());
  j["telemetry_before"] = Telemetry(node);
  j["telemetry_after"] = node_after ? Telemetry(*node_after) : nlohmann::json::array();
  j["job_wall_s"] = (job.end_time_ms() - job.start_time_ms()) / 1000.0;
  // Whether the GPUs waited for the host to enqueue each timed iteration (GPU time only).
  j["launch_gate"] = job.result().launch_gate();
  // Above 1, ranks shared GPUs: the outputs were checked, the timings mean nothing.
  j["ranks_per_gpu"] = std::max(1, job.result().ranks_per_gpu());
  return j;
}

nlohmann::json BenchJson(const v1::Job& job, const v1::GetNodeInfoResponse& node,
                         const v1::GetNodeInfoResponse* node_after,
                         const std::vector<BenchRow>& rows, const BenchOptions& o) {
  nlohmann::json j = RunHeaderJson(job, node, node_after);
  j["dtype"] = o.dtype;
  j["transport"] = o.transport;
  j["chunks"] = o.chunks;
  j["iterations"] = o.iterations;
  j["warmup"] = o.warmup;
  j["repeats"] = o.repeats;
  j["peak_tflops"] = o.peak_tflops;
  j["seed"] = o.seed;
  j["nccl_overlap_ctas"] = job.result().nccl_overlap_ctas();
  // What the GPUs did while the host enqueued each gated iteration (heat | idle).
  j["head_start"] = job.result().head_start();
  // The GEMM run before each measured phase, so that none starts rested.
  j["preheat_ms"] = job.result().preheat_ms();
  j["rows"] = nlohmann::json::array();
  for (const BenchRow& r : rows) {
    nlohmann::json candidates = nlohmann::json::array();
    for (const v1::CandidateTiming& c : r.candidates) {
      candidates.push_back(
          {{"schedule", c.schedule()}, {"best_ms", c.best_ms()}, {"runoff_ms", c.runoff_ms()}});
    }
    j["rows"].push_back({{"op", r.shape.op},
                         {"m", r.shape.m},
                         {"k", r.shape.k},
                         {"n", r.shape.n},
                         {"tp", r.tp},
                         {"auto_mode", r.mode},
                         {"step_ms", r.step_ms},
                         {"serial_ms", r.serial_ms},
                         {"gemm_alone_ms", r.gemm_ms},
                         {"comm_alone_ms", r.comm_ms},
                         {"comm_alone_nccl_ms", r.comm_nccl_ms},
                         {"comm_alone_p2p_ms", r.comm_p2p_ms},
                         {"exposed_ms", r.exposed_ms},
                         {"hidden", r.hidden},
                         {"tflops", r.tflops},
                         {"mfu", r.mfu},
                         {"busbw_gbps", r.busbw},
                         {"ideal_ms", r.ideal_ms},
                         {"gemm_slowdown", r.gemm_slowdown},
                         {"floor_ms", r.floor_ms},
                         {"host_enqueue_ms", r.host_ms},
                         {"auto_repeats_ms", r.auto_repeats},
                         {"serial_repeats_ms", r.serial_repeats},
                         {"auto_reasons", r.auto_reasons},
                         {"gemm_alone_rank_ms", r.gemm_rank_ms},
                         {"candidates", candidates},
                         {"spread_ms",
                          {{"step", r.step_spread},
                           {"serial", r.serial_spread},
                           {"gemm_alone", r.gemm_spread},
                           {"comm_alone", r.comm_spread},
                           {"comm_alone_nccl", r.comm_nccl_spread},
                           {"comm_alone_p2p", r.comm_p2p_spread}}},
                         {"max_rel_error", r.max_rel_error},
                         {"timeline", TimelineJson(r.timeline)}});
  }
  return j;
}

int SubmitAndFollow(DaemonClient& client, const std::string& spec, const std::string& source,
                    int devices, const std::string& backend, bool err_is_tty, std::ostream& err,
                    v1::Job* finished, const std::vector<std::string>& nodes) {
  absl::StatusOr<v1::Job> job = client.SubmitJob(spec, source, nodes);
  if (!job.ok()) return ReportCallError(job.status(), client.address(), err);
  err << source << ": job " << job->id() << " on ";
  if (!nodes.empty()) err << nodes.size() << " nodes x ";
  err << devices << " " << backend << " device(s)\n";
  ProgressPrinter progress(err, err_is_tty);
  job = client.WatchJob(job->id(), [&progress](const v1::Job& e) { progress.Update(e); });
  progress.Finish();
  if (!job.ok()) return ReportCallError(job.status(), client.address(), err);
  if (job->state() != v1::SUCCEEDED) {
    err << FormatJobLine(*job);
    return kExitJobFailed;
  }
  *finished = std::move(*job);
  return kExitOk;
}

int WriteJsonFile(const nlohmann::json& j, const std::string& json_file, std::ostream& err) {
  if (json_file.empty()) return kExitOk;
  return WriteTextFile(json_file, j.dump(1) + "\n", err);
}

int RunBench(DaemonClient& client, const BenchOptions& options, const std::string& json_file,
             bool json, bool err_is_tty, std::ostream& out, std::ostream& err) {
  absl::StatusOr<v1::GetNodeInfoResponse> node = client.GetNodeInfo();
  if (!node.ok()) return ReportCallError(node.status(), client.address(), err);
  BenchOptions o = options;
  if (o.peak_tflops <= 0) o.peak_tflops = DensePeakTflops(o.dtype);
  if (o.shapes.empty() && node->backend() == "host") {
    for (BenchShape shape : DefaultBenchShapes()) {
      shape.m /= kHostBenchShapeDivisor;
      shape.k /= kHostBenchShapeDivisor;
      shape.n /= kHostBenchShapeDivisor;
      o.shapes.push_back(shape);
    }
    err << "bench: host backend: the default sweep's shapes divided by " << kHostBenchShapeDivisor
        << " (GPU-sized GEMMs would take hours on CPU cores; --shapes sets them)\n";
  }
  v1::Job job;
  if (int rc = SubmitAndFollow(client, BuildBenchSpec(o), "bench", node->devices_size(),
                               node->backend(), err_is_tty, err, &job);
      rc != kExitOk) {
    return rc;
  }
  const std::vector<BenchRow> rows = FoldBench(job, o);
  // Clocks and temperature after the run (the daemon's NVML readings), beside those before.
  absl::StatusOr<v1::GetNodeInfoResponse> node_after = client.GetNodeInfo();
  const nlohmann::json j = BenchJson(job, *node, node_after.ok() ? &*node_after : nullptr, rows, o);
  if (int rc = WriteJsonFile(j, json_file, err); rc != kExitOk) return rc;
  std::string text = FormatBench(rows);
  if (!job.result().head_start().empty()) {
    absl::StrAppend(&text, "timing: ", job.result().head_start(),
                    " head start (what the GPUs did while the host enqueued each timed "
                    "iteration)");
    if (job.result().preheat_ms() > 0) {
      absl::StrAppendFormat(&text, ", %.0f ms of the GEMM before each measured phase",
                            job.result().preheat_ms());
    }
    absl::StrAppend(&text, "\n");
  }
  out << (json ? j.dump(1) + "\n" : text);
  return kExitOk;
}

// bench --nodes: the gradient all-reduces across daemons, three ways.

namespace {

// A bucket's rows, as the daemon pads them (server/runner/layer_step.cc).
constexpr int64_t kBucketRowElements = 1024;

int64_t AllReduceElementBytes(const std::string& dtype) {
  const absl::StatusOr<DType> parsed = ParseDType(dtype);
  return parsed.ok() ? static_cast<int64_t>(DTypeSize(*parsed)) : 2;
}

struct GradShape {
  std::string id;
  int64_t m = 0, n = 0;
};

std::vector<GradShape> GradShapes(const GradBenchOptions& o) {
  const int dp = static_cast<int>(o.nodes.size());
  std::vector<GradShape> shapes;
  for (size_t i = 0; i < o.grad_bytes.size(); ++i) {
    const CollectiveShape s =
        CollectiveShapeFor(o.grad_bytes[i], AllReduceElementBytes(o.dtype), dp);
    shapes.push_back({absl::StrCat("grad", i), s.m, s.n});
  }
  return shapes;
}

const GradShape* FindGrad(const std::vector<GradShape>& shapes, absl::string_view id) {
  for (const GradShape& g : shapes) {
    if (g.id == id) return &g;
  }
  return nullptr;
}

int64_t RoundUp(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

std::string MessageId(const GradMessage& m) { return absl::StrCat("msg-", m.m, "x", m.n); }

std::string GradSpecHeader(const GradBenchOptions& o, const std::string& name, int tp) {
  std::string spec = absl::StrFormat(
      "name: %s\nmesh: {tp: %d, dp: %d}\ndtype: %s\niterations: %d\nwarmup: %d\nverify: %s\n"
      "seed: %d\n",
      name, tp, o.nodes.size(), o.dtype, o.iterations, o.warmup, o.verify ? "true" : "false",
      o.seed);
  if (!o.devices.empty()) {
    absl::StrAppend(&spec, "devices: [", absl::StrJoin(o.devices, ", "), "]\n");
  }
  return spec;
}

}  // namespace

const char* GradFormName(GradForm form) {
  switch (form) {
    case GradForm::kBucketed:
      return "bucketed";
    case GradForm::kChunked:
      return "chunked";
    case GradForm::kWhole:
      break;
  }
  return "whole";
}

std::vector<int64_t> DefaultGradSizes(const std::string& backend) {
  if (backend == "host") return {int64_t{256} << 10, int64_t{1} << 20, int64_t{4} << 20};
  return {int64_t{1} << 20, int64_t{4} << 20, int64_t{16} << 20, int64_t{64} << 20};
}

BenchShape DefaultGradGemm(const std::string& backend) {
  const int64_t d = backend == "host" ? 8192 / kHostBenchShapeDivisor : 8192;
  return {"gemm", d, d, d};
}

absl::StatusOr<std::vector<int64_t>> ParseGradSizes(const std::string& text) {
  std::vector<int64_t> sizes;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    absl::StatusOr<int64_t> bytes = ParseByteSize(item);
    if (!bytes.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--grad-sizes: \"", item, "\": ", bytes.status().message()));
    }
    sizes.push_back(*bytes);
  }
  if (sizes.empty()) return absl::InvalidArgumentError("--grad-sizes: none given");
  return sizes;
}

absl::Status ValidateGradBenchOptions(const GradBenchOptions& o) {
  if (o.nodes.size() < 2) {
    return absl::InvalidArgumentError(
        "--nodes: give at least two daemons (their peer addresses, this one's among them)");
  }
  for (int64_t b : o.grad_bytes) {
    if (b <= 0) return absl::InvalidArgumentError("--grad-sizes: each must be above 0");
  }
  if (o.gemm.m != 0 && (o.gemm.m < 0 || o.gemm.k <= 0 || o.gemm.n <= 0)) {
    return absl::InvalidArgumentError("--gemm: m, k and n must be above 0");
  }
  if (o.gemms_per_grad < 1) {
    return absl::InvalidArgumentError("--gemms-per-grad: must be at least 1");
  }
  if (o.bucket_mib < 1) return absl::InvalidArgumentError("--bucket-mib: must be at least 1");
  if (o.chunk_kib < 1) return absl::InvalidArgumentError("--chunk-kib: must be at least 1");
  if (o.iterations < 1 || o.warmup < 0) {
    return absl::InvalidArgumentError("--iterations: at least 1, --warmup: at least 0");
  }
  const absl::StatusOr<DType> dtype = ParseDType(o.dtype);
  if (!dtype.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--dtype: unknown dtype \"", o.dtype, "\""));
  }
  if (*dtype == DType::kFP8) {
    return absl::InvalidArgumentError(
        "--dtype fp8: gradients are all-reduced in bf16 (an fp8 layer sums in bf16): use bf16");
  }
  return absl::OkStatus();
}

std::string BuildGradBenchSpec(const GradBenchOptions& o, GradForm form, int tp) {
  std::string spec = GradSpecHeader(o, absl::StrCat("gradbench-", GradFormName(form)), tp);
  absl::StrAppendFormat(&spec, "layer_step: true\nbucket_mib: %d\nchunk_kib: %d\nops:\n",
                        form == GradForm::kBucketed ? o.bucket_mib : 0,
                        form == GradForm::kChunked ? o.chunk_kib : 0);
  std::string last;  // the last GEMM: every op after it waits on it
  auto after = [&] { return last.empty() ? std::string() : absl::StrCat(", after: [", last, "]"); };
  auto gemms = [&](size_t block) {
    for (int j = 0; j < o.gemms_per_grad; ++j) {
      const std::string id = absl::StrCat("bwd", block, ".", j);
      absl::StrAppendFormat(&spec, "  - {id: %s, type: gemm, m: %d, k: %d, n: %d%s}\n", id,
                            o.gemm.m, o.gemm.k, o.gemm.n, after());
      last = id;
    }
  };
  const std::vector<GradShape> grads = GradShapes(o);
  for (size_t i = 0; i < grads.size(); ++i) {
    gemms(i);
    absl::StrAppendFormat(&spec,
                          "  - {id: %s, type: all_reduce, m: %d, n: %d, group: dp, mode: serial, "
                          "transport: nccl%s}\n",
                          grads[i].id, grads[i].m, grads[i].n, after());
  }
  gemms(grads.size());  // the rest of the backward, beside the last gradient
  return spec;
}

std::vector<GradMessage> GradMessages(const v1::Job& job, const GradBenchOptions& o) {
  const std::vector<GradShape> grads = GradShapes(o);
  const int64_t es = AllReduceElementBytes(o.dtype);
  const int64_t dp = static_cast<int64_t>(o.nodes.size());
  std::vector<GradMessage> out;
  for (const v1::LayerDeferral& d : job.result().layer_deferrals()) {
    GradMessage msg{d.op(), d.how(), std::max(1, d.pieces())};
    if (d.how() == "bucketed") {
      // bucket(grad0+grad1): its members' elements in rows, whole rows per rank.
      absl::string_view ids = d.op();
      absl::ConsumePrefix(&ids, "bucket(");
      absl::ConsumeSuffix(&ids, ")");
      int64_t elements = 0;
      for (absl::string_view id : absl::StrSplit(ids, '+')) {
        if (const GradShape* g = FindGrad(grads, id)) elements += g->m * g->n;
      }
      msg.n = kBucketRowElements;
      msg.m = RoundUp(
          std::max<int64_t>(1, RoundUp(elements, kBucketRowElements) / kBucketRowElements), dp);
    } else {
      const GradShape* g = FindGrad(grads, d.op());
      if (g == nullptr) continue;  // not one of ours
      msg.n = g->n;
      msg.m = g->m;
      if (d.how() == "chunked") {
        msg.m = RoundUp(std::max<int64_t>(1, d.piece_bytes() / (g->n * es)), dp);
      } else {
        msg.alone_ms = d.alone_ms();  // its own op's time alone
      }
    }
    out.push_back(msg);
  }
  return out;
}

std::string BuildGradMessagesSpec(const GradBenchOptions& o,
                                  const std::vector<GradMessage>& messages, int tp) {
  std::string ops;
  std::vector<std::string> seen;
  for (const GradMessage& m : messages) {
    if (m.how == "whole") continue;
    const std::string id = MessageId(m);
    if (std::find(seen.begin(), seen.end(), id) != seen.end()) continue;
    seen.push_back(id);
    absl::StrAppendFormat(&ops,
                          "  - {id: %s, type: all_reduce, m: %d, n: %d, group: dp, mode: serial, "
                          "transport: nccl}\n",
                          id, m.m, m.n);
  }
  if (ops.empty()) return "";
  return absl::StrCat(GradSpecHeader(o, "gradbench-sent", tp), "layer_step: false\nops:\n", ops);
}

namespace {

void AddVerification(const v1::OpResult& op, GradBenchRow* row) {
  if (!op.verified()) return;
  row->verified = true;
  row->within = row->within && op.max_rel_error() <= op.tolerance();
  row->max_rel_error = std::max(row->max_rel_error, op.max_rel_error());
}

}  // namespace

GradBenchRow FoldGradForm(GradForm form, const v1::Job& job, const v1::Job* messages_job,
                          const GradBenchOptions& o) {
  GradBenchRow row;
  row.form = form;
  row.job_id = job.id();
  const v1::JobResult& r = job.result();
  row.step_ms = r.layer_step().median_ms();
  row.without_ms = r.layer_step_without_deferred().median_ms();
  row.exposed_ms = std::max(0.0, row.step_ms - row.without_ms);
  row.hidden = r.layer_deferred_hidden_fraction();
  row.layer_note = r.layer_note();
  for (const v1::LayerDeferral& d : r.layer_deferrals()) row.whole_alone_ms += d.alone_ms();
  for (const v1::OpResult& op : r.ops()) AddVerification(op, &row);
  std::map<std::string, const v1::OpResult*> timed;
  if (messages_job != nullptr) {
    for (const v1::OpResult& op : messages_job->result().ops()) timed[op.id()] = &op;
  }
  const int64_t es = AllReduceElementBytes(o.dtype);
  bool all_timed = true;
  for (GradMessage m : GradMessages(job, o)) {
    if (m.how != "whole") {
      auto it = timed.find(MessageId(m));
      if (it != timed.end()) {
        m.alone_ms = m.pieces * it->second->step().median_ms();
        AddVerification(*it->second, &row);
      }
    }
    all_timed = all_timed && m.alone_ms > 0;
    row.sent_alone_ms += m.alone_ms;
    row.sent_bytes += static_cast<double>(m.pieces) * m.m * m.n * es;
    row.messages.push_back(m);
  }
  const double dp = static_cast<double>(o.nodes.size());
  if (all_timed && row.sent_alone_ms > 0) {
    row.algbw_gbps = row.sent_bytes / (row.sent_alone_ms * 1e6);
    row.busbw_gbps = row.algbw_gbps * 2 * (dp - 1) / dp;
  }
  return row;
}

namespace {

// "2 whole, 16 pieces of 256KiB", "1 bucket of 5.25MiB, 1 whole".
std::string SentAs(const GradBenchRow& row, int64_t es) {
  int whole = 0, buckets = 0, pieces = 0;
  int64_t bucket_bytes = 0, piece_bytes = 0;
  for (const GradMessage& m : row.messages) {
    if (m.how == "bucketed") {
      ++buckets;
      bucket_bytes = m.m * m.n * es;
    } else if (m.how == "chunked") {
      pieces += m.pieces;
      piece_bytes = m.m * m.n * es;
    } else {
      ++whole;
    }
  }
  std::vector<std::string> parts;
  if (buckets == 1) parts.push_back(absl::StrCat("1 bucket of ", FormatByteSize(bucket_bytes)));
  if (buckets > 1) parts.push_back(absl::StrCat(buckets, " buckets"));
  if (pieces > 0) {
    parts.push_back(absl::StrCat(pieces, " pieces of ", FormatByteSize(piece_bytes)));
  }
  if (whole > 0) parts.push_back(absl::StrCat(whole, " whole"));
  return parts.empty() ? "-" : absl::StrJoin(parts, ", ");
}

}  // namespace

std::string FormatGradBench(const std::vector<GradBenchRow>& rows, const v1::Job& first,
                            const GradBenchOptions& o, int tp) {
  const int dp = static_cast<int>(o.nodes.size());
  std::vector<std::string> sizes;
  int64_t total = 0;
  for (int64_t b : o.grad_bytes) {
    sizes.push_back(FormatByteSize(b));
    total += b;
  }
  std::string out = absl::StrFormat(
      "bench: gradient all-reduces across %d nodes x %d device(s) (mesh tp %d x dp %d), %s: "
      "%d gradient(s) a rank (%s: %s), each after %d GEMM(s) %d x %d x %d, as many after the "
      "last\n",
      dp, tp, tp, dp, o.dtype, o.grad_bytes.size(), absl::StrJoin(sizes, ", "),
      FormatByteSize(total), o.gemms_per_grad, o.gemm.m, o.gemm.k, o.gemm.n);
  TextTable t({{"form"},
               {"sent as"},
               {"step ms", Align::kRight},
               {"no ARs ms", Align::kRight},
               {"exposed ms", Align::kRight},
               {"ARs alone ms", Align::kRight},
               {"hidden %", Align::kRight},
               {"algbw", Align::kRight},
               {"busbw", Align::kRight},
               {"verify"}});
  const int64_t es = AllReduceElementBytes(o.dtype);
  std::vector<std::string> notes;
  for (const GradBenchRow& r : rows) {
    const bool stepped = r.step_ms > 0;
    std::string form = GradFormName(r.form);
    if (r.form == GradForm::kBucketed) absl::StrAppend(&form, " ", o.bucket_mib, "MiB");
    if (r.form == GradForm::kChunked) absl::StrAppend(&form, " ", o.chunk_kib, "KiB");
    t.AddRow({form, SentAs(r, es), stepped ? FormatMs(r.step_ms) : "-",
              stepped ? FormatMs(r.without_ms) : "-", stepped ? FormatMs(r.exposed_ms) : "-",
              r.sent_alone_ms > 0 ? FormatMs(r.sent_alone_ms) : "-",
              stepped ? FormatHidden(r.hidden) : "-",
              r.algbw_gbps > 0 ? FormatRate(r.algbw_gbps) : "-",
              r.busbw_gbps > 0 ? FormatRate(r.busbw_gbps) : "-",
              r.verified ? absl::StrFormat("%s %.1e", r.within ? "ok" : "FAIL", r.max_rel_error)
                         : "off"});
    if (!stepped && !r.layer_note.empty()) {
      notes.push_back(absl::StrCat(GradFormName(r.form), ": no layer step: ", r.layer_note));
    }
  }
  out += t.Render();
  absl::StrAppendFormat(
      &out,
      "step: the layer step (median); no ARs: it again without the all-reduces; exposed = step - "
      "no ARs; ARs alone: what the form sent (whole gradients, buckets, pieces), each timed "
      "alone; hidden %%: 1 - exposed / the gradients' whole all-reduces alone as the form's job "
      "timed them (one base for every form); busbw = algbw x 2(N-1)/N, N = %d, of what it sent "
      "alone\n",
      dp);
  for (const std::string& n : notes) absl::StrAppend(&out, n, "\n");
  out += FormatNodesLine(first.result());
  out += SharedGpuNote(first.result().ranks_per_gpu());
  out += HostFiguresNote(first.result().backend());
  return out;
}

nlohmann::json GradBenchJson(const v1::Job& first, const v1::GetNodeInfoResponse& node,
                             const v1::GetNodeInfoResponse* node_after,
                             const std::vector<GradBenchRow>& rows, const GradBenchOptions& o,
                             int tp) {
  nlohmann::json j = RunHeaderJson(first, node, node_after);
  AddNodesJson(first, node.backend(), &j);
  j["tp"] = tp;
  j["dtype"] = o.dtype;
  j["grad_bytes"] = o.grad_bytes;
  j["gemm"] = {{"m", o.gemm.m}, {"k", o.gemm.k}, {"n", o.gemm.n}};
  j["gemms_per_grad"] = o.gemms_per_grad;
  j["iterations"] = o.iterations;
  j["warmup"] = o.warmup;
  j["seed"] = o.seed;
  j["forms"] = nlohmann::json::array();
  const int64_t es = AllReduceElementBytes(o.dtype);
  for (const GradBenchRow& r : rows) {
    nlohmann::json messages = nlohmann::json::array();
    for (const GradMessage& m : r.messages) {
      messages.push_back({{"op", m.op},
                          {"how", m.how},
                          {"pieces", m.pieces},
                          {"m", m.m},
                          {"n", m.n},
                          {"bytes", m.pieces * m.m * m.n * es},
                          {"alone_ms", m.alone_ms}});
    }
    j["forms"].push_back({{"form", GradFormName(r.form)},
                          {"job_id", r.job_id},
                          {"bucket_mib", r.form == GradForm::kBucketed ? o.bucket_mib : 0},
                          {"chunk_kib", r.form == GradForm::kChunked ? o.chunk_kib : 0},
                          {"layer_step_ms", r.step_ms},
                          {"without_all_reduces_ms", r.without_ms},
                          {"exposed_ms", r.exposed_ms},
                          {"hidden", r.hidden},
                          {"whole_alone_ms", r.whole_alone_ms},
                          {"sent_alone_ms", r.sent_alone_ms},
                          {"sent_bytes", r.sent_bytes},
                          {"algbw_gbps", r.algbw_gbps},
                          {"busbw_gbps", r.busbw_gbps},
                          {"verified", r.verified},
                          {"within_tolerance", r.within},
                          {"max_rel_error", r.max_rel_error},
                          {"layer_note", r.layer_note},
                          {"messages", messages}});
  }
  return j;
}

int RunGradBench(DaemonClient& client, const GradBenchOptions& options,
                 const std::string& json_file, bool json, bool err_is_tty, std::ostream& out,
                 std::ostream& err) {
  if (absl::Status s = ValidateGradBenchOptions(options); !s.ok()) {
    err << "overlapctl: " << s.message() << "\n";
    return kExitUsage;
  }
  absl::StatusOr<v1::GetNodeInfoResponse> node = client.GetNodeInfo();
  if (!node.ok()) return ReportCallError(node.status(), client.address(), err);
  GradBenchOptions o = options;
  const bool host = node->backend() == "host";
  if (o.grad_bytes.empty()) o.grad_bytes = DefaultGradSizes(node->backend());
  if (o.gemm.m == 0) o.gemm = DefaultGradGemm(node->backend());
  if (host && (options.grad_bytes.empty() || options.gemm.m == 0)) {
    err << "bench: host backend: small gradients and GEMMs by default (--grad-sizes and --gemm "
           "set them)\n";
  }
  const int tp = o.devices.empty() ? node->devices_size() : static_cast<int>(o.devices.size());
  std::vector<v1::Job> jobs(3);
  const GradForm forms[] = {GradForm::kWhole, GradForm::kBucketed, GradForm::kChunked};
  for (GradForm form : forms) {
    if (int rc = SubmitAndFollow(client, BuildGradBenchSpec(o, form, tp),
                                 absl::StrCat("bench ", GradFormName(form)), tp, node->backend(),
                                 err_is_tty, err, &jobs[static_cast<int>(form)], o.nodes);
        rc != kExitOk) {
      return rc;
    }
  }
  // What the bucketed and chunked forms sent, timed alone.
  std::vector<GradMessage> sent = GradMessages(jobs[1], o);
  for (const GradMessage& m : GradMessages(jobs[2], o)) sent.push_back(m);
  v1::Job messages;
  const std::string messages_spec = BuildGradMessagesSpec(o, sent, tp);
  if (!messages_spec.empty()) {
    if (int rc = SubmitAndFollow(client, messages_spec, "bench sent alone", tp, node->backend(),
                                 err_is_tty, err, &messages, o.nodes);
        rc != kExitOk) {
      return rc;
    }
  }
  std::vector<GradBenchRow> rows;
  for (GradForm form : forms) {
    rows.push_back(FoldGradForm(form, jobs[static_cast<int>(form)],
                                messages_spec.empty() ? nullptr : &messages, o));
  }
  absl::StatusOr<v1::GetNodeInfoResponse> node_after = client.GetNodeInfo();
  const nlohmann::json j =
      GradBenchJson(jobs[0], *node, node_after.ok() ? &*node_after : nullptr, rows, o, tp);
  if (int rc = WriteJsonFile(j, json_file, err); rc != kExitOk) return rc;
  out << (json ? j.dump(1) + "\n" : FormatGradBench(rows, jobs[0], o, tp));
  return kExitOk;
}

}  // namespace overlap::client
