#include "client/export/framework_export.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "te_ub_cfgs_table.h"

namespace overlap::client {

namespace {

// The mapping's table (te_ub_cfgs.json, which the Python client reads too):
// each op id's TE layer and collective, and each mode's entry per collective.
// Compiled in, and parsed once; its test checks that it parses.
const nlohmann::json& TeTable() {
  static const nlohmann::json* const table =
      new nlohmann::json(nlohmann::json::parse(kTeUbCfgsJson));
  return *table;
}

// The op's row of the table's layers, or null.
const nlohmann::json* TeLayerRow(const std::string& op_id) {
  const nlohmann::json& layers = TeTable().at("layers");
  const auto row = layers.find(op_id);
  return row == layers.end() ? nullptr : &*row;
}

// The table's ub_cfgs entry for a schedule `mode` on `collective`, into `e`.
void ApplyTableMethod(const char* mode, const std::string& collective, const ops::Schedule& s,
                      TeEntry& e) {
  const nlohmann::json& entry = TeTable().at("methods").at(mode).at(collective);
  e.method = entry.at("method").get<std::string>();
  if (e.method == "pipeline") {
    const nlohmann::json& splits = entry.at("num_splits");
    e.num_splits = splits.is_string() ? s.chunks : splits.get<int>();
  }
  if (e.method == "ring_exchange") {
    e.use_ce = TransportName(s.transport) == TeTable().at("use_ce_transport").get<std::string>();
  }
}

double Gain(double from_ms, double to_ms) { return to_ms > 0 ? from_ms / to_ms - 1 : 0; }

}  // namespace

std::string FidelityName(Fidelity fidelity) {
  switch (fidelity) {
    case Fidelity::kExact: return "exact";
    case Fidelity::kApproximate: return "approximate";
    case Fidelity::kNone: return "none";
  }
  return "none";
}

std::string TeLayerName(const std::string& op_id) {
  const nlohmann::json* row = TeLayerRow(op_id);
  return row == nullptr ? "" : row->at("te").get<std::string>();
}

TeEntry MapToTe(const ExportChoice& choice) {
  TeEntry e;
  e.te_name = TeLayerName(choice.op_id);
  const ops::Schedule& s = choice.schedule;
  if (e.te_name.empty()) {
    e.note = absl::StrCat("TransformerEngine has no userbuffers layer for op '", choice.op_id,
                          "' (its layers: qkv, proj, fc1, fc2 with _fprop/_dgrad, qkv and fc1 "
                          "with _wgrad)");
    return e;
  }
  if (choice.op_type == "gemm_ar") {
    e.note = "gemm_ar (no sequence parallelism) has no counterpart: TE's userbuffers overlap "
             "needs sequence parallelism";
    return e;
  }
  if (absl::EndsWith(e.te_name, "_wgrad")) {
    e.note = "TE overlaps a weight gradient only by a bulk overlap of the dgrad's "
             "reduce-scatter; overlapd overlaps that reduce-scatter inside the dgrad op, which "
             "TE's dgrad overlap does, and then takes no _wgrad entry";
    return e;
  }
  const std::string collective = TeLayerRow(choice.op_id)->at("collective").get<std::string>();
  const bool gathers = collective == "all_gather";
  e.is_reduce_scatter = collective == "reduce_scatter";
  if (!gathers && !e.is_reduce_scatter) return e;
  switch (s.mode) {
    case OverlapMode::kSerial:
      e.fidelity = Fidelity::kExact;
      e.note = absl::StrCat("serial won: no overlap, so the layer is left out (build its module "
                            "with ",
                            gathers ? "ub_overlap_ag" : "ub_overlap_rs", "=False)");
      return e;
    case OverlapMode::kRing:
      e.overlapped = true;
      ApplyTableMethod("ring", collective, s, e);
      e.fidelity = s.transport == Transport::kP2p && s.chunks <= 1 ? Fidelity::kExact
                                                                   : Fidelity::kApproximate;
      if (s.chunks > 1) {
        e.note = absl::StrCat("overlapd cut each ring step into ", s.chunks,
                              " pieces; TE's ring moves one per step");
      } else if (s.transport != Transport::kP2p) {
        e.note = absl::StrCat("overlapd's ring ran over ", TransportName(s.transport),
                              "; TE's ring is userbuffers copies (SM-driven: use_ce false)");
      }
      return e;
    case OverlapMode::kChunked:
      e.overlapped = true;
      ApplyTableMethod("chunked", collective, s, e);
      if (e.is_reduce_scatter) {
        e.fidelity = s.transport == Transport::kNccl ? Fidelity::kExact : Fidelity::kApproximate;
        if (s.transport != Transport::kNccl) {
          e.note = "overlapd reduce-scattered each piece with copy engines; TE's pipeline uses "
                   "its userbuffers kernels";
        }
      } else {
        e.fidelity = Fidelity::kApproximate;
        e.note = absl::StrCat("chunked/", s.chunks, " gathers in pieces; TE pipelines only "
                              "reduce-scatters, so the nearest is its ring");
      }
      return e;
    case OverlapMode::kBulk:
      e.overlapped = true;
      e.fidelity = Fidelity::kApproximate;
      ApplyTableMethod("bulk", collective, s, e);
      if (e.is_reduce_scatter) {
        e.note = "bulk: one exchange beside the local block's GEMM; TE's bulk overlaps another "
                 "op's collective, so the nearest is a 2-way pipeline";
      } else {
        e.note = "bulk: one gather beside the local shard's GEMM; TE's bulk overlaps another op's "
                 "collective, so the nearest is its ring";
      }
      return e;
    case OverlapMode::kAuto: break;
  }
  return e;
}

namespace {

// Two candidates compared in one statistic of one round: the run-off's
// pooled medians where both ran in it, else their first-round bests.
struct Compared {
  double winner_ms = 0;
  double other_ms = 0;
  const char* statistic = "";
};

Compared Compare(const CandidateFigures& winner, const CandidateFigures& other) {
  if (winner.runoff_ms > 0 && other.runoff_ms > 0) {
    return {winner.runoff_ms, other.runoff_ms, kRunoffMedians};
  }
  return {winner.best_ms, other.best_ms, kFirstRoundBests};
}

double SerialGain(const ExportChoice& c) {
  return Gain(c.serial_ms, c.winner_vs_serial_ms > 0 ? c.winner_vs_serial_ms : c.step_ms);
}

double RunnerUpGain(const ExportChoice& c) {
  return Gain(c.runner_up_ms, c.winner_vs_runner_up_ms > 0 ? c.winner_vs_runner_up_ms : c.step_ms);
}

std::string InStatistic(const std::string& statistic) {
  return statistic.empty() ? "" : absl::StrCat(" (", statistic, ")");
}

}  // namespace

void SetMargins(ExportChoice& c, const std::vector<CandidateFigures>& candidates) {
  c.serial_ms = c.runner_up_ms = c.winner_vs_serial_ms = c.winner_vs_runner_up_ms = 0;
  c.runner_up.clear();
  c.serial_statistic.clear();
  c.runner_up_statistic.clear();
  const CandidateFigures* winner = nullptr;
  for (const CandidateFigures& t : candidates) {
    if (t.schedule == c.schedule) winner = &t;
  }
  if (winner == nullptr || winner->best_ms <= 0) return;
  double closest = 0;  // the runner-up's figure over the winner's
  for (const CandidateFigures& t : candidates) {
    if (&t == winner || t.best_ms <= 0) continue;
    const Compared compared = Compare(*winner, t);
    if (t.schedule.mode == OverlapMode::kSerial && t.schedule.transport == Transport::kNccl) {
      c.serial_ms = compared.other_ms;
      c.winner_vs_serial_ms = compared.winner_ms;
      c.serial_statistic = compared.statistic;
    }
    const double ratio = compared.other_ms / compared.winner_ms;
    if (c.runner_up.empty() || ratio < closest) {
      closest = ratio;
      c.runner_up = t.schedule.Name();
      c.runner_up_ms = compared.other_ms;
      c.winner_vs_runner_up_ms = compared.winner_ms;
      c.runner_up_statistic = compared.statistic;
    }
  }
}

std::string RunnerUpVerdict(double gain) {
  if (std::abs(gain) <= kNearTie) return "near-tie";
  if (gain < 0) return "the runner-up was faster: this choice was not the fastest";
  return "";
}

std::string MarginText(const ExportChoice& c) {
  std::string out;
  if (c.serial_ms > 0 && c.schedule.mode != OverlapMode::kSerial) {
    const double gain = SerialGain(c);
    absl::StrAppendFormat(&out, "margin over serial %+.1f%%%s%s", 100 * gain,
                          InStatistic(c.serial_statistic),
                          gain < -kNearTie ? ": serial was faster" : "");
  } else if (c.schedule.mode != OverlapMode::kSerial) {
    out = "margin over serial: not measured";
  }
  if (!c.runner_up.empty()) {
    const std::string verdict = RunnerUpVerdict(RunnerUpGain(c));
    absl::StrAppendFormat(&out, "%sover %s (runner-up) %+.1f%%%s%s", out.empty() ? "" : ", ",
                          c.runner_up, 100 * RunnerUpGain(c), InStatistic(c.runner_up_statistic),
                          verdict.empty() ? "" : ": " + verdict);
  } else {
    absl::StrAppend(&out, out.empty() ? "" : ", ",
                    "runner-up not measured (the choice came from the tuning cache or was asked "
                    "for: export --job of the job that tuned it gives its margins)");
  }
  return out;
}

nlohmann::json TeExport(const std::vector<ExportChoice>& choices) {
  nlohmann::json ub_cfgs = nlohmann::json::object();
  nlohmann::json notes = nlohmann::json::object();
  nlohmann::json not_exported = nlohmann::json::array();
  for (const ExportChoice& c : choices) {
    const TeEntry e = MapToTe(c);
    nlohmann::json about = {{"op", c.op_id},
                            {"schedule", c.schedule.Name()},
                            {"fidelity", FidelityName(e.fidelity)},
                            {"note", e.note},
                            {"margin", MarginText(c)},
                            {"step_ms", c.step_ms}};
    if (c.serial_ms > 0) {
      about["serial_ms"] = c.serial_ms;
      if (c.winner_vs_serial_ms > 0) about["winner_vs_serial_ms"] = c.winner_vs_serial_ms;
      if (!c.serial_statistic.empty()) about["serial_statistic"] = c.serial_statistic;
    }
    if (!c.runner_up.empty()) {
      const double gain = RunnerUpGain(c);
      about["runner_up"] = c.runner_up;
      about["runner_up_ms"] = c.runner_up_ms;
      if (c.winner_vs_runner_up_ms > 0) about["winner_vs_runner_up_ms"] = c.winner_vs_runner_up_ms;
      if (!c.runner_up_statistic.empty()) about["runner_up_statistic"] = c.runner_up_statistic;
      about["near_tie"] = std::abs(gain) <= kNearTie;
      about["runner_up_faster"] = gain < -kNearTie;
    }
    if (e.te_name.empty() || e.fidelity == Fidelity::kNone) {
      not_exported.push_back(about);
      continue;
    }
    notes[e.te_name] = about;
    if (!e.overlapped) continue;
    nlohmann::json cfg = {{"method", e.method}};
    if (e.method == "pipeline") cfg["num_splits"] = e.num_splits;
    if (e.method == "ring_exchange") cfg["use_ce"] = e.use_ce;
    ub_cfgs[e.te_name] = cfg;
  }
  return {{"ub_cfgs", ub_cfgs}, {"overlapd", notes}, {"not_exported", not_exported}};
}

std::string MegatronYaml(const std::vector<ExportChoice>& choices, const std::string& source) {
  std::string out = absl::StrCat(
      "# TransformerEngine userbuffers config for Megatron-LM --tp-comm-overlap-cfg, written by\n"
      "# overlapctl export from ", source, ". Each entry: overlapd's schedule, how faithfully\n"
      "# TE can run it (exact | approximate), and what it won by.\n");
  std::string left_out;
  for (const ExportChoice& c : choices) {
    const TeEntry e = MapToTe(c);
    const std::string why = absl::StrCat(c.op_id, ": ", c.schedule.Name(), " (",
                                         FidelityName(e.fidelity), "); ", MarginText(c),
                                         e.note.empty() ? "" : absl::StrCat("; ", e.note));
    if (!e.overlapped) {
      absl::StrAppend(&left_out, "#   ", why, "\n");
      continue;
    }
    absl::StrAppend(&out, "\n# ", why, "\n", e.te_name, ":\n  method: ", e.method, "\n");
    if (e.method == "pipeline") absl::StrAppend(&out, "  num_splits: ", e.num_splits, "\n");
    if (e.method == "ring_exchange") {
      absl::StrAppend(&out, "  use_ce: ", e.use_ce ? "true" : "false", "\n");
    }
  }
  if (!left_out.empty()) absl::StrAppend(&out, "\n# Left out:\n", left_out);
  return out;
}

absl::StatusOr<TorchMeasurement> TorchMeasurementFromJson(const nlohmann::json& doc,
                                                          const std::string& name) {
  TorchMeasurement out;
  out.source = name;
  if (!doc.is_object() || !doc.contains("rows") || !doc["rows"].is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": no rows"));
  }
  auto median = [](const nlohmann::json& phase) {
    return phase.is_object() ? phase.value("median_ms", 0.0) : 0.0;
  };
  for (const nlohmann::json& r : doc["rows"]) {
    if (!r.is_object()) continue;
    TorchShape s;
    s.op = r.value("op", "");
    s.m = r.value("m", int64_t{0});
    s.k = r.value("k", int64_t{0});
    s.n = r.value("n", int64_t{0});
    s.tp = r.value("tp", 0);
    if (r.contains("torch_async_tp_ms")) {  // bench --json with --torch-peers
      s.serial_ms = r.value("torch_serial_ms", 0.0);
      s.async_tp_ms = r.value("torch_async_tp_ms", 0.0);
      s.overlapd_ms = r.value("step_ms", 0.0);
    } else if (r.contains("serial")) {  // torch_tp.py
      s.serial_ms = median(r["serial"]);
      s.async_tp_ms = r.contains("async_tp") ? median(r["async_tp"]) : 0.0;
    } else {
      continue;
    }
    out.shapes.push_back(s);
  }
  const bool any = std::any_of(out.shapes.begin(), out.shapes.end(),
                               [](const TorchShape& s) { return s.async_tp_ms > 0; });
  if (!any) {
    return absl::InvalidArgumentError(absl::StrCat(
        name, ": no PyTorch async TP figure (bench --torch-peers --json-out, or "
              "bench/peers/torch_tp.py --json)"));
  }
  return out;
}

std::string TorchtitanToml(const std::vector<ExportChoice>& choices, const std::string& source,
                           const TorchMeasurement* measured) {
  std::string out = absl::StrCat(
      "# torchtitan: whether async tensor parallelism pays off at these shapes, written by\n"
      "# overlapctl export from ", source.empty() ? "a PyTorch measurement" : source, ".\n");
  std::string answer;
  if (measured == nullptr) {
    absl::StrAppend(&out,
                    "# Not measured: overlapd timed its own schedules, not PyTorch's async TP\n"
                    "# (torch.ops.symm_mem.fused_all_gather_matmul / fused_matmul_reduce_scatter) "
                    "at\n# these shapes, so enable_async_tensor_parallel is left unset (bench "
                    "--torch-peers\n# measures it where PyTorch is installed).\n");
  } else {
    double serial = 0, async = 0;
    absl::StrAppend(&out, "# PyTorch measured (", measured->source,
                    "), serial NCCL + cuBLAS against async TP, per shape:\n");
    for (const TorchShape& s : measured->shapes) {
      if (s.async_tp_ms <= 0) {
        absl::StrAppendFormat(&out, "#   %s %dx%dx%d: serial %.3f ms; async TP has no form for it\n",
                              s.op, s.m, s.k, s.n, s.serial_ms);
        continue;
      }
      serial += s.serial_ms;
      async += s.async_tp_ms;
      absl::StrAppendFormat(&out, "#   %s %dx%dx%d: serial %.3f ms, async TP %.3f ms (%+.1f%%)%s\n",
                            s.op, s.m, s.k, s.n, s.serial_ms, s.async_tp_ms,
                            100 * (s.serial_ms / s.async_tp_ms - 1),
                            s.overlapd_ms > 0 ? absl::StrFormat(", overlapd %.3f ms", s.overlapd_ms)
                                              : "");
    }
    const double gain = async > 0 ? serial / async - 1 : 0;
    const bool pays = gain > kNearTie;
    const bool one_gpu = std::all_of(measured->shapes.begin(), measured->shapes.end(),
                                     [](const TorchShape& s) { return s.tp == 1; });
    absl::StrAppendFormat(&out,
                          "# Over the shapes async TP has: serial %.3f ms, async TP %.3f ms "
                          "(%+.1f%%): %s\n",
                          serial, async, 100 * gain,
                          pays ? "it pays off"
                               : gain > -kNearTie ? "a near-tie, not worth it" : "it loses");
    if (one_gpu) {
      absl::StrAppend(&out, "# Measured on one GPU: nothing to communicate, so this says nothing of "
                            "tensor\n# parallelism; enable_async_tensor_parallel is left unset "
                            "(measure at the tp you train with).\n");
    } else {
      answer = absl::StrCat("enable_async_tensor_parallel = ", pays ? "true" : "false", "\n");
    }
  }
  if (!choices.empty()) absl::StrAppend(&out, "# What overlapd chose:\n");
  for (const ExportChoice& c : choices) {
    absl::StrAppend(&out, "#   ", c.op_id, ": ", c.schedule.Name(), ", ", MarginText(c), "\n");
  }
  absl::StrAppend(&out, "[parallelism]\n", answer);
  return out;
}

}  // namespace overlap::client
