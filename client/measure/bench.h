// `overlapctl bench`: an op benchmark the daemon runs as an ordinary job.
//
// The client writes one layer graph with, per op type and shape, `repeats`
// interleaved pairs of ops: mode auto (autotuned on first sight, re-measured
// after) and mode serial over NCCL. The daemon measures each op (step, GEMM
// alone, comm alone on both transports, GEMM beside the collective) and
// verifies it; the client folds the repeats into one row per shape and prints
// the table users know from the literature, plus JSON that makes the run
// reproducible.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "client/core/daemon_client.h"
#include "nlohmann/json.hpp"
#include "overlap/v1/overlap.pb.h"

namespace overlap::client {

struct BenchShape {
  std::string op;  // ag_gemm | gemm_rs | gemm_ar
  int64_t m, k, n;
};

struct BenchOptions {
  std::vector<BenchShape> shapes;  // empty = DefaultBenchShapes()
  std::vector<int> devices;        // the TP group; empty = every device of the daemon
  std::string dtype = "bf16";
  // The transport auto may choose (auto | nccl | p2p | direct); serial is always
  // NCCL, and direct narrows gemm_rs and gemm_ar only.
  std::string transport = "auto";
  // Pieces for auto's chunked and ring candidates (0: auto tries its usual counts).
  int chunks = 0;
  int iterations = 20;
  int warmup = 5;
  int repeats = 3;
  bool verify = true;
  std::string head_start =
      "heat";              // heat | idle: what the GPUs do while a timed iteration is enqueued
  double peak_tflops = 0;  // per-GPU peak for MFU; 0 = DensePeakTflops(dtype)
  uint64_t seed = 1234;    // the inputs' seed (the job's `seed`)
  // Tune every shape afresh (the job's `retune`): a benchmark measures what wins
  // now. false lets schedules tuned before the sweep answer.
  bool retune = true;
  std::string html_file;  // --html: also write the charts here
  // After the sweep, PyTorch's serial and async TP at the same shapes
  // (torchrun bench/peers/torch_tp.py), beside overlapd's figures.
  bool torch_peers = false;
};

// The dense datasheet peak of an H100/H200 SXM for GEMMs of `dtype`: 989
// TFLOP/s bf16 and fp16, 1979 fp8, 67 fp32 (TF32 off: no tensor cores).
double DensePeakTflops(const std::string& dtype);

// The default sweep (global m x k x n, tp = the daemon's device count).
std::vector<BenchShape> DefaultBenchShapes();
// On the host backend the default sweep runs its shapes divided by this: at GPU
// size its GEMMs would take hours on CPU cores.
inline constexpr int64_t kHostBenchShapeDivisor = 32;
// "4096x8192x8192" (MxKxN, as --shapes takes it): one word, so that awk splits
// the tables' rows (bench, its predictions, --torch-peers).
std::string FormatBenchShape(const BenchShape& shape);
// Parses "ag_gemm:4096x8192x8192,gemm_rs:8192x28672x8192".
absl::StatusOr<std::vector<BenchShape>> ParseBenchShapes(const std::string& text);

// What a layer graph gives the sweep: its overlapped ops' shapes (ag_gemm,
// gemm_rs, gemm_ar; each shape once, in the graph's order), its dtype and its
// devices (empty: every device). INVALID_ARGUMENT when the graph does not parse
// or has no such op.
struct GraphBench {
  std::vector<BenchShape> shapes;
  std::string dtype;
  std::vector<int> devices;
};
absl::StatusOr<GraphBench> BenchFromGraph(const std::string& text, const std::string& source);

// The job spec (YAML) for the options.
std::string BuildBenchSpec(const BenchOptions& options);

// One row per op type and shape, repeats folded (medians of the per-repeat medians).
struct BenchRow {
  BenchShape shape;
  int tp = 0;
  std::string mode;  // what auto chose
  bool hides = false;  // that schedule has communication to hide (not serial, not one rank)
  double step_ms = 0, serial_ms = 0, gemm_ms = 0, comm_ms = 0, comm_nccl_ms = 0, comm_p2p_ms = 0;
  double exposed_ms = 0, hidden = 0, tflops = 0, mfu = 0, busbw = 0, ideal_ms = 0;
  double gemm_slowdown = 0;
  // What contention leaves for any schedule: max(GEMM beside the collective,
  // comm alone). Step / floor says how much of step / ideal is left to schedule.
  double floor_ms = 0;
  double host_ms = 0;  // host time to enqueue one iteration of auto's schedule
  // max - min over the repeats' medians, of each figure.
  double step_spread = 0, serial_spread = 0, gemm_spread = 0, comm_spread = 0;
  double comm_nccl_spread = 0, comm_p2p_spread = 0;
  double max_rel_error = 0;
  std::vector<double> auto_repeats, serial_repeats;
  // Why auto chose, per repeat: the first tunes (its runoff's scores), the
  // others name the tuning cache.
  std::vector<std::string> auto_reasons;
  // What autotune measured of every candidate (the repeat that tuned).
  std::vector<v1::CandidateTiming> candidates;
  // GEMM alone per rank (medians over the repeats), and the TP group's devices
  // in rank order: a slow GPU stands out here (SlowRankNote).
  std::vector<double> gemm_rank_ms;
  std::vector<int> devices;
  int ranks_per_gpu = 1;      // the daemon's config ranks_per_gpu (report.h, SharedGpuNote)
  bool host_backend = false;  // its "GPUs" are threads sharing the CPU cores
  // The last repeat's traced iteration of auto's schedule (timeline.h).
  v1::Timeline timeline;
};
std::vector<BenchRow> FoldBench(const v1::Job& job, const BenchOptions& options);

// The table and the summary against the targets.
std::string FormatBench(const std::vector<BenchRow>& rows);
// What the figures are worth, a line each, printed under the table and on the
// --html page: on the host backend they mean nothing; ranks sharing a GPU; one
// GPU, where auto and serial are the same schedule. "" when none applies.
std::string BenchCaveats(const std::vector<BenchRow>& rows);
// What makes a run reproducible, shared with commbench: job id, backend,
// commit, versions of CUDA, NCCL, cuBLAS and driver, GPUs, NCCL_*/CUDA_*
// environment, telemetry before and after, wall time, launch gate.
// `node_after` (clocks, temperature, power after the run) may be null.
nlohmann::json RunHeaderJson(const v1::Job& job, const v1::GetNodeInfoResponse& node,
                             const v1::GetNodeInfoResponse* node_after);
nlohmann::json BenchJson(const v1::Job& job, const v1::GetNodeInfoResponse& node,
                         const v1::GetNodeInfoResponse* node_after,
                         const std::vector<BenchRow>& rows, const BenchOptions& options);

// Shared with commbench: submits `spec` (named `source`) over `nodes` (none:
// this daemon alone), says so on `err` ("bench: job ID on N BACKEND
// device(s)", or "on 2 nodes x N ..."), follows the job with progress there,
// and stores it in `finished` once it SUCCEEDED (kExitOk); otherwise prints
// why and returns the exit status.
int SubmitAndFollow(DaemonClient& client, const std::string& spec, const std::string& source,
                    int devices, const std::string& backend, bool err_is_tty, std::ostream& err,
                    v1::Job* finished, const std::vector<std::string>& nodes = {});
// Writes `j` to `json_file` unless it is empty; kExitUsage, said on `err`, when it cannot.
int WriteJsonFile(const nlohmann::json& j, const std::string& json_file, std::ostream& err);

}  // namespace overlap::client
