// The schedules `auto` chose, as the frameworks that run training read them:
// TransformerEngine's userbuffers config (the `ub_cfgs` of
// `transformer_engine.pytorch.initialize_ub`), Megatron-LM's
// `--tp-comm-overlap-cfg` YAML (the same dict) and torchtitan's
// `enable_async_tensor_parallel`. Pure mapping: no I/O.
//
// TE's layers are named qkv/proj/fc1/fc2 with _fprop/_dgrad/_wgrad; overlapd's
// layer graphs (overlapctl graph) name the forward ops qkv, proj, fc1, fc2 and
// the backward's *_dgrad / *_wgrad alike. The methods differ, so each entry
// says how faithful it is (docs/EXPORT.md has the table):
//  - exact: ring/p2p (copy engines, one piece per step) -> ring_exchange with
//    use_ce; chunked/N on a reduce-scatter -> pipeline with num_splits N;
//  - approximate: ring with pieces per step or over NCCL, chunked on an
//    all-gather (TE pipelines only reduce-scatters), bulk (TE's bulk overlaps
//    another op's collective, never the op's own);
//  - none: gemm_ar (TE's userbuffers need sequence parallelism), proj/fc2
//    wgrad (TE has no such keys), ops of other names.
// A serial choice leaves the layer out of ub_cfgs: its module runs without
// userbuffers overlap (ub_overlap_ag / ub_overlap_rs off).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/schedule.h"
#include "nlohmann/json.hpp"

namespace overlap::client {

// One op's choice and what it won by. Each margin sets two figures of one
// statistic of one round side by side: the winner's (winner_vs_*; 0 = step_ms)
// and the other's.
struct ExportChoice {
  std::string op_id;
  std::string op_type;  // ag_gemm | gemm_rs | gemm_ar | ...
  ops::Schedule schedule;
  double step_ms = 0;         // the winner's figure
  double serial_ms = 0;       // serial over NCCL's figure; 0 = not measured
  std::string runner_up;      // the closest other candidate; empty = not measured
  double runner_up_ms = 0;
  double winner_vs_serial_ms = 0;
  double winner_vs_runner_up_ms = 0;
  // What each margin compares: kRunoffMedians or kFirstRoundBests; "" = the
  // figures above as given.
  std::string serial_statistic;
  std::string runner_up_statistic;
};

inline constexpr char kRunoffMedians[] = "run-off medians";
inline constexpr char kFirstRoundBests[] = "first-round bests";

// Within this of the runner-up, either way, a choice is a near-tie
// (autotune's own margin); a runner-up faster by more means the choice was
// not the fastest in that statistic.
inline constexpr double kNearTie = 0.02;

// A candidate autotune timed: its best median over the first rounds, and its
// pooled median in the run-off (0: not in it).
struct CandidateFigures {
  ops::Schedule schedule;
  double best_ms = 0;
  double runoff_ms = 0;
};

// `winner`'s margins from the candidates autotune timed: against serial over
// NCCL and against the closest other candidate, each comparing the run-off
// medians where both ran in the run-off, else both first-round bests. A
// winner that is not among the candidates (a cached or requested choice)
// gets no margins.
void SetMargins(ExportChoice& winner, const std::vector<CandidateFigures>& candidates);

// The runner-up's margin in words: "near-tie" when within kNearTie either way,
// "the runner-up was faster: ..." below that, "" above.
std::string RunnerUpVerdict(double gain);

enum class Fidelity { kExact, kApproximate, kNone };
std::string FidelityName(Fidelity fidelity);  // "exact" | "approximate" | "none"

struct TeEntry {
  std::string te_name;  // e.g. "qkv_fprop"; empty when the op has no TE layer
  bool overlapped = false;  // false: leave the layer out (serial, or no counterpart)
  std::string method;       // ring_exchange | pipeline | bulk
  int num_splits = 0;       // pipeline only
  bool use_ce = true;       // ring_exchange only: copy engines
  bool is_reduce_scatter = false;
  Fidelity fidelity = Fidelity::kNone;
  std::string note;  // why, for the reader
};

// TE's layer for an overlapd op id, or "" (qkv -> qkv_fprop, fc1_dgrad -> fc1_dgrad).
std::string TeLayerName(const std::string& op_id);
TeEntry MapToTe(const ExportChoice& choice);

// The export as JSON: {"ub_cfgs": {...}, "overlapd": {per layer: schedule,
// fidelity, note, margins}, "not_exported": [...]} for `te`.
nlohmann::json TeExport(const std::vector<ExportChoice>& choices);
// Megatron's --tp-comm-overlap-cfg YAML: the ub_cfgs entries, each with
// comments giving overlapd's schedule, fidelity and margins.
std::string MegatronYaml(const std::vector<ExportChoice>& choices, const std::string& source);
// PyTorch measured at the same shapes on the same GPUs (bench --torch-peers,
// or bench/peers/torch_tp.py's JSON): its serial NCCL + cuBLAS step and its
// async TP step per shape (0: async TP has no form for that op).
struct TorchShape {
  std::string op;
  int64_t m = 0, k = 0, n = 0;
  int tp = 0;  // 0: the file does not say
  double serial_ms = 0, async_tp_ms = 0, overlapd_ms = 0;  // overlapd_ms: 0 = not in the file
};
struct TorchMeasurement {
  std::string source;
  std::vector<TorchShape> shapes;
};
// From a bench --json with torch_* fields, or torch_tp.py's JSON;
// INVALID_ARGUMENT when the file holds no async TP figure.
absl::StatusOr<TorchMeasurement> TorchMeasurementFromJson(const nlohmann::json& doc,
                                                          const std::string& name);

// torchtitan's [parallelism] section: whether async TP pays off. Answered
// only from `measured` (null: it says async TP was not measured and leaves
// the key unset): true where async TP's steps, summed over the shapes that
// have it, beat serial's by more than kNearTie; false where they do not;
// each shape's figures as comments.
std::string TorchtitanToml(const std::vector<ExportChoice>& choices, const std::string& source,
                           const TorchMeasurement* measured = nullptr);

// "margin over serial +12.3%, over ring/2/p2p (runner-up) +0.8%: near-tie".
std::string MarginText(const ExportChoice& choice);

}  // namespace overlap::client
