// `overlapctl check`: finds a slow GPU or a slow link, as ordinary jobs on the
// daemon (so it queues behind running work and never shares a GPU with it).
//
// GPUs: every GPU runs the same square bf16 GEMM alone, all at once (a GPU that
// cools or powers worse shows under load), one job per GPU; each GEMM's median
// time and TFLOP/s, and a GPU more than kSlowRankFraction (report.h) slower
// than the fastest is called slow. Links: for every pair, one after another, a two-rank
// all-gather whose shards hold --link-mib MiB each, over the copy engines (p2p)
// and NCCL, both directions at once; bandwidth per direction, and a pair whose
// p2p bandwidth is more than kSlowLinkFraction below the best pair's is called
// slow. Health: what NVML says of each GPU at the end (a PCIe link below its
// best, NVLinks down, uncorrectable ECC errors, row remaps) and the NVLink
// errors counted while the check ran. Like `dcgmi diag` and nccl-tests, with
// the daemon's timing.
//
// `check --nodes A,B,...` (daemons' user addresses): every GPU of every node
// runs the GEMM at once, then each pair of nodes, one after another, runs a
// job spanning the two (submitted to the first, over their peer addresses): a
// tp D x dp 2 mesh whose dp all-reduce pairs each GPU with its peer on the
// other node, verified against float64. A node whose GPUs' median GEMM is
// more than kSlowRankFraction above the fastest node's is slow; a pair whose
// busbw is more than kSlowNodeLinkFraction below the reference (the median
// over nodes of each node's best pair) is a slow link, and a node all of whose
// pairs are slow is named instead of its links. On the host backend nothing
// is called slow: its timings are CPU threads'.
#pragma once

#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "client/core/daemon_client.h"
#include "client/format/table.h"
#include "client/views/cluster_view.h"
#include "nlohmann/json.hpp"

namespace overlap::client {

inline constexpr double kSlowLinkFraction = 0.10;
// Between nodes: traffic crosses NICs and switches shared with other work.
inline constexpr double kSlowNodeLinkFraction = 0.20;

struct CheckOptions {
  std::vector<int> devices;  // empty = every device of the daemon
  int64_t gemm_size = 8192;  // m = k = n of each GPU's GEMM
  int64_t link_mib = 64;     // MiB in each rank's shard of a pair's all-gather
  int iterations = 10;
  bool links = true;
  // Whether the user chose the sizes; where not, a host backend gets the ones
  // below: a GPU-sized GEMM takes minutes per iteration on CPU cores.
  bool gemm_size_given = false;
  bool link_mib_given = false;
};
inline constexpr int64_t kHostCheckGemmSize = 512;
inline constexpr int64_t kHostCheckLinkMib = 1;

struct GpuCheck {
  int device = 0;
  double gemm_ms = 0;
  double tflops = 0;
  // Share of the GEMM phase its clocks were held back by the power limit and
  // by heat (NVML violation counters before and after); valid where NVML has them.
  bool capped_valid = false;
  double power_capped = 0;
  double thermal_capped = 0;
  // What NVML says is wrong with it (device_health.h), at the end of the
  // check, and NVLink errors that grew while the check ran.
  std::vector<std::string> health_problems = {};
  nlohmann::json health = nullptr;  // its readings at the end; null without any
  // Energy of its GEMM's timed iterations (the job report's energy): joules
  // per TFLOP of work and average power; valid where the backend counts energy.
  bool energy_valid = false;
  double joules_per_tflop = 0;
  double watts = 0;
};

// The health findings of `gpu->device` from readings taken at the start and end
// of the check.
void SetHealthFindings(const v1::GetNodeInfoResponse& start, const v1::GetNodeInfoResponse& end,
                       GpuCheck* gpu);

// The capped shares of `device` between two node snapshots `wall_s` apart.
void SetCappedShares(const v1::GetNodeInfoResponse& before, const v1::GetNodeInfoResponse& after,
                     double wall_s, GpuCheck* gpu);
struct LinkCheck {
  int a = 0, b = 0;
  double p2p_ms = 0, nccl_ms = 0;
  double p2p_gbps = 0, nccl_gbps = 0;  // per direction
};
struct CheckResult {
  std::vector<GpuCheck> gpus;
  std::vector<LinkCheck> links;
};

// The job specs (YAML).
std::string GpuCheckSpec(int device, const CheckOptions& options);
std::string LinkCheckSpec(int a, int b, const CheckOptions& options);
// Per-direction GB/s of a pair's all-gather that took `ms`.
double LinkGbps(const CheckOptions& options, double ms);

// Indices into result.gpus / result.links that are called slow, and into
// result.gpus of those with health problems.
std::vector<size_t> SlowGpus(const CheckResult& result);
std::vector<size_t> SlowLinks(const CheckResult& result);
std::vector<size_t> UnhealthyGpus(const CheckResult& result);

// GPU `device`'s figures from its check job's one op: its GEMM's time and
// TFLOP/s, and its energy where the daemon counted it.
GpuCheck GpuCheckOf(int device, const v1::OpResult& op, const CheckOptions& o);
// A line per GPU whose energy was counted: joules per TFLOP of its GEMM and
// its average power; "" where none was.
std::string FormatCheckEnergy(const CheckResult& r);
std::string FormatCheck(const CheckResult& result, const CheckOptions& options);
nlohmann::json CheckJson(const CheckResult& result, const CheckOptions& options);

// Runs the jobs, progress on `err`, the tables (or JSON) on `out`. Exit status:
// kExitOk when nothing is slow or unhealthy, kExitJobFailed when something is
// (or a job failed), and the usual statuses for calls that fail.
int RunCheck(DaemonClient& client, const CheckOptions& options, bool json, std::ostream& out,
             std::ostream& err);

// The GEMM phase on one daemon in two steps, so that several daemons run
// theirs at once: submit every device's job (their ids), then follow them.
// CollectGpuChecks returns kExitOk with `gpus` filled, or the exit status
// after saying why on `err` (a call that failed; a job that did not succeed:
// its line, after `where`).
absl::StatusOr<std::vector<std::string>> SubmitGpuChecks(DaemonClient& client,
                                                         const CheckOptions& o);
int CollectGpuChecks(DaemonClient& client, const CheckOptions& o,
                     const std::vector<std::string>& ids, const std::string& where,
                     std::ostream& err, std::vector<GpuCheck>* gpus);

// Shared by check and check --nodes (cluster_check.h).
inline constexpr int kCheckWarmup = 2;
std::string SignedPercent(double x);                       // "+4.2%"
std::string CappedShare(const GpuCheck& g, double share);  // "12%", "-" without readings
nlohmann::json GpuJson(const GpuCheck& g);
// The GEMM table's columns (a node column first with `with_node`).
std::vector<TextTable::Column> GemmCheckColumns(bool capped, bool with_node);
// Sizes a host backend can run, where the user left them alone (said on `err`):
// GPU-sized ones take minutes per iteration on CPU cores.
void UseHostSizes(CheckOptions* o, std::ostream& err);

}  // namespace overlap::client
