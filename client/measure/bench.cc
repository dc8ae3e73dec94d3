#include "client/measure/bench.h"

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
#include "client/core/command_io.h"
#include "client/format/report.h"
#include "client/format/table.h"
#include "client/format/timeline.h"
#include "client/jobs/progress_printer.h"
#include "client/measure/bench_html.h"
#include "client/measure/bench_prediction.h"
#include "client/measure/commbench.h"
#include "client/measure/torch_peers.h"
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
      {"ag_gemm", 4096, 8192, 8192},   {"ag_gemm", 8192, 8192, 28672},
      {"ag_gemm", 16384, 8192, 28672}, {"ag_gemm", 8192, 4096, 4096},
      {"ag_gemm", 16384, 8192, 7168},
  };
  const std::vector<BenchShape> rs = {
      {"gemm_rs", 4096, 8192, 8192},   {"gemm_rs", 8192, 28672, 8192},
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

std::string FormatBenchShape(const BenchShape& shape) {
  return absl::StrFormat("%dx%dx%d", shape.m, shape.k, shape.n);
}

absl::StatusOr<std::vector<BenchShape>> ParseBenchShapes(const std::string& text) {
  std::vector<BenchShape> out;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    std::vector<std::string> parts = absl::StrSplit(item, ':');
    BenchShape s;
    if (parts.size() != 2 || !ParseShapeDims(parts[1], &s.m, &s.k, &s.n) ||
        (parts[0] != "ag_gemm" && parts[0] != "gemm_rs" && parts[0] != "gemm_ar")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--shapes: bad item \"", item, "\" (expected op:MxKxN, e.g. ag_gemm:4096x8192x8192)"));
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
      row.hides = HasCommToHide(x);
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
  TextTable t(Columns(
      {Words({"OP", "SHAPE"}), Figures({"TP"}), Words({"AUTO_MODE"}),
       Figures({"STEP_MS", "HOST_MS", "SERIAL_MS", "GEMM_ALONE_MS", "COMM_ALONE_MS", "NCCL/P2P_MS",
                "EXPOSED_MS", "HIDDEN_%", "TFLOPS", "MFU_%", "BUSBW_GBPS", "STEP/IDEAL",
                "GEMM_SLOWDOWN", "STEP/FLOOR", "GEMMS_+%", "WAITED_MS", "MAX_ERR"})}));
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
    const double allowed =
        std::max(0.02 * r.serial_ms, 2 * std::max(r.step_spread, r.serial_spread));
    auto_ok += r.step_ms <= r.serial_ms + allowed;
    // From the traced iteration, for the rank that finished last: its GEMMs'
    // time over the GEMM alone (pieces, contention) and its compute stream's wait.
    std::string gemms_over = "-", waited = "-";
    if (!r.timeline.spans().empty() && r.gemm_ms > 0) {
      const RankTimeline last = LastRank(r.timeline);
      gemms_over = absl::StrFormat("%+.1f", 100 * (last.gemm_ms / r.gemm_ms - 1));
      waited = FormatMs(last.waiting_ms);
    }
    t.AddRow(
        {r.shape.op,
         FormatBenchShape(r.shape),
         absl::StrCat(r.tp),
         r.mode,
         FormatMs(r.step_ms),
         FormatMs(r.host_ms),
         FormatMs(r.serial_ms),
         FormatMs(r.gemm_ms),
         FormatMs(r.comm_ms),
         absl::StrFormat("%.3f/%.3f", r.comm_nccl_ms, r.comm_p2p_ms),
         FormatMs(r.exposed_ms),
         r.hides && r.comm_ms > 0 ? FormatHidden(r.hidden) : "-",  // "-" for serial, as the report
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
    absl::StrAppendFormat(&out,
                          "step/ideal: geomean %.3f, worst %.3f (target <= 1.05, none above 1.12)\n"
                          "auto vs serial: geomean speedup %.3fx; auto within max(2%%, 2x spread) "
                          "of serial on %d/%d\n"
                          "hidden >= 85%% where comm alone <= GEMM alone: %d/%d shapes\n",
                          GeoMean(ratios), *std::max_element(ratios.begin(), ratios.end()),
                          GeoMean(speedups), auto_ok, static_cast<int>(rows.size()), hidden_ok,
                          hidden_checked);
    if (!floor_ratios.empty()) {
      absl::StrAppendFormat(
          &out,
          "step/floor: geomean %.3f, worst %.3f (floor = max(GEMM beside the collective, comm "
          "alone): the contention no schedule removes)\n",
          GeoMean(floor_ratios), *std::max_element(floor_ratios.begin(), floor_ratios.end()));
    }
  }
  return out + BenchCaveats(rows);
}

std::string BenchCaveats(const std::vector<BenchRow>& rows) {
  if (rows.empty()) return "";
  std::string out = HostTimingsNote(rows[0].host_backend ? "host" : "");
  out += SharedGpuNote(rows[0].ranks_per_gpu);
  if (rows[0].tp == 1) {
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
  std::ostream& progress_line = ProgressStream(err);
  progress_line << source << ": job " << job->id() << " on ";
  if (!nodes.empty()) progress_line << nodes.size() << " nodes x ";
  progress_line << devices << " " << backend << " device(s)\n";
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
  nlohmann::json j = BenchJson(job, *node, node_after.ok() ? &*node_after : nullptr, rows, o);
  // The planner's prediction beside each row, where the daemon keeps a calibration.
  std::string prediction_text;
  std::vector<BenchPrediction> predictions;
  if (!rows.empty()) {
    absl::StatusOr<v1::GetCalibrationResponse> stored = client.GetCalibration(rows[0].tp);
    absl::StatusOr<planner::Calibration> calibration =
        stored.ok() ? planner::CalibrationFromJson(stored->calibration_json())
                    : absl::StatusOr<planner::Calibration>(stored.status());
    if (calibration.ok()) {
      predictions = PredictBench(rows, &*calibration, o.dtype, job.result().gpu());
      AddPredictionsJson(predictions, j);
      prediction_text = FormatBenchPredictions(rows, predictions);
      if (const std::string gap = planner::TransferGap(*calibration); !gap.empty()) {
        absl::StrAppend(&prediction_text, "tp > 1 is not predicted: the calibration has ", gap,
                        "\n");
      }
    } else {
      prediction_text = absl::StrCat("predictions: none (", calibration.status().message(), ")\n");
    }
  }
  std::string torch_text;
  if (o.torch_peers && !rows.empty()) {
    TorchPeersRun torch;
    if (node->backend() == "host" || rows[0].ranks_per_gpu > 1) {
      torch.not_measured = node->backend() == "host" ? "the host backend has no GPUs to run them on"
                                                     : "ranks share a GPU here";
    } else {
      std::vector<BenchShape> shapes;
      for (const BenchRow& r : rows) shapes.push_back(r.shape);
      torch = RunTorchPeers(shapes, rows[0].tp, o.dtype, err);
    }
    AddTorchPeersJson(torch, j);
    torch_text = FormatTorchPeers(rows, torch);
  }
  if (int rc = WriteJsonFile(j, json_file, err); rc != kExitOk) return rc;
  if (!o.html_file.empty()) {
    const std::string page = BenchHtml(
        rows, predictions,
        absl::StrCat("job ", job.id(), " on ", node->devices_size(), " ", node->backend(),
                     " device(s) (", node->devices_size() > 0 ? node->devices(0).name() : "", "), ",
                     o.dtype, ", overlapd ", node->git_commit()));
    if (int rc = WriteTextFile(o.html_file, page, err); rc != kExitOk) return rc;
  }
  std::string text = FormatBench(rows) + prediction_text + torch_text;
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

}  // namespace overlap::client
