#include "client/plan/plan.h"

#include <algorithm>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/core/command_io.h"
#include "client/format/table.h"
#include "client/plan/stored_calibration.h"
#include "common/checked_size.h"
#include "common/graph_parser.h"
#include "common/graph_validator.h"
#include "common/one_rank.h"
#include "common/planner/calibration.h"
#include "common/planner/planner.h"
#include "nlohmann/json.hpp"

namespace overlap::client {

using nlohmann::json;
using planner::OpPlan;
using planner::SchedulePrediction;

// The largest shape and group a replayed bench row may hold.
constexpr int64_t kMaxReplayDim = int64_t{1} << 31;
constexpr int64_t kMaxReplayTp = 4096;

absl::StatusOr<planner::WhatIf> ParseWhatIf(const std::string& text) {
  planner::WhatIf w;
  if (text.empty()) return w;
  for (absl::string_view pair : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    std::vector<std::string> kv = absl::StrSplit(pair, absl::MaxSplits('=', 1));
    double value = 0;
    if (kv.size() != 2 || !absl::SimpleAtod(kv[1], &value) || !(value >= 1e-3 && value <= 1e6)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--what-if '", pair,
                       "': expected KEY=NUMBER from 0.001 to 1e6 (tp, nvlink-gbps, gemm-tflops, "
                       "nodes, inter-node-gbps)"));
    }
    const std::string& key = kv[0];
    auto whole = [&](std::optional<int>& field, int most) -> absl::Status {
      if (value != static_cast<int>(value) || value > most) {
        return absl::InvalidArgumentError(
            absl::StrCat("--what-if ", key, "=", kv[1], ": a whole number up to ", most));
      }
      field = static_cast<int>(value);
      return absl::OkStatus();
    };
    if (key == "tp") {
      if (absl::Status s = whole(w.tp, 1024); !s.ok()) return s;
    } else if (key == "nodes") {
      if (absl::Status s = whole(w.nodes, 100000); !s.ok()) return s;
    } else if (key == "nvlink-gbps") {
      w.link_gbps = value;
    } else if (key == "gemm-tflops") {
      w.gemm_tflops = value;
    } else if (key == "inter-node-gbps") {
      w.inter_node_gbps = value;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--what-if: unknown key '", key,
                       "' (tp, nvlink-gbps, gemm-tflops, nodes, inter-node-gbps)"));
    }
  }
  return w;
}

namespace {

std::string Ms(double ms) { return absl::StrFormat("%.3f", ms); }

json PredictionJson(const SchedulePrediction& p) {
  return {{"schedule", p.schedule.Name()},
          {"step_ms", p.step_ms},
          {"gemm_alone_ms", p.gemm_alone_ms},
          {"comm_alone_ms", p.comm_alone_ms},
          {"serial_ms", p.serial_ms},
          {"hidden", p.hidden},
          {"pieces", p.pieces},
          {"piece_gemm_ms", p.piece.gemm_ms},
          {"piece_transfer_ms", p.piece.transfer_ms},
          {"piece_covered", p.piece.covered()}};
}

json PlanJson(const OpPlan& plan, const std::string& type) {
  json j = {{"op", plan.op_id},  {"type", type},      {"m", plan.shape.m},
            {"k", plan.shape.k}, {"n", plan.shape.n}, {"tp", plan.shape.tp}};
  j["candidates"] = json::array();
  for (const SchedulePrediction& p : plan.predicted) j["candidates"].push_back(PredictionJson(p));
  j["cannot_say"] = json::array();
  for (const planner::CandidateVerdict& v : plan.unpredicted) {
    j["cannot_say"].push_back({{"schedule", v.schedule.Name()}, {"why", v.cannot_say}});
  }
  j["best"] = plan.best() ? json(plan.best()->schedule.Name()) : json(nullptr);
  return j;
}

void PrintPlan(const OpPlan& plan, const std::string& type, std::ostream& out) {
  const bool alone = IsCollectiveOnly(plan.shape.type);
  if (alone) {
    out << absl::StrFormat("%s: %s %dx%d, %d ranks", plan.op_id, type, plan.shape.m, plan.shape.n,
                           plan.shape.tp);
  } else {
    out << absl::StrFormat("%s: %s %dx%dx%d (m x k x n), tp %d", plan.op_id, type, plan.shape.m,
                           plan.shape.k, plan.shape.n, plan.shape.tp);
  }
  if (plan.shape.nodes > 1) out << absl::StrFormat(" over %d nodes", plan.shape.nodes);
  if (plan.shape.tp == 1 && !IsGemmOnly(plan.shape.type)) out << " (" << kOneRankNote << ")";
  if (const SchedulePrediction* best = plan.best(); best != nullptr && alone) {
    out << absl::StrFormat("; best %s at %s ms", best->schedule.Name(), Ms(best->step_ms));
  } else if (best != nullptr && plan.shape.tp == 1) {
    out << absl::StrFormat(", GEMM alone %s ms; best %s at %s ms", Ms(best->gemm_alone_ms),
                           best->schedule.Name(), Ms(best->step_ms));
  } else if (best != nullptr) {
    out << absl::StrFormat(", GEMM alone %s ms; best %s at %s ms (%.0f%% hidden)",
                           Ms(best->gemm_alone_ms), best->schedule.Name(), Ms(best->step_ms),
                           100 * best->hidden);
  }
  out << "\n";
  TextTable table(
      Columns({Words({"SCHEDULE"}), Figures({"PIECES", "GEMM/PIECE_MS", "TRANSFER/PIECE_MS"}),
               Words({"COVERS"}), Figures({"STEP_MS", "HIDDEN_%", "VS_SERIAL"})}));
  for (const SchedulePrediction& p : plan.predicted) {
    const bool moves = p.comm_alone_ms > 0;
    table.AddRow({p.schedule.Name(), absl::StrCat(p.pieces), Ms(p.piece.gemm_ms),
                  moves ? Ms(p.piece.transfer_ms) : "-",
                  !moves || p.schedule.mode == OverlapMode::kSerial ? "-"
                  : p.piece.covered()                               ? "yes"
                                                                    : "no",
                  Ms(p.step_ms),
                  moves && p.schedule.mode != OverlapMode::kSerial
                      ? absl::StrFormat("%.0f", 100 * p.hidden)
                      : "-",
                  absl::StrFormat("%.2fx", p.serial_ms > 0 ? p.serial_ms / p.step_ms : 1.0)});
  }
  out << table.Render();
  for (const planner::CandidateVerdict& v : plan.unpredicted) {
    out << "  " << v.schedule.Name() << ": cannot say: " << v.cannot_say << "\n";
  }
  out << "\n";
}

// An op's group size and the nodes it spans: `tp` for tensor-parallel ops
// when given, else the graph's own; with `nodes` (a what-if cluster) the
// data-parallel replicas sit one to a node.
struct Placement {
  int group = 1;
  int nodes = 1;
};
Placement PlaceOp(const JobSpec& spec, const OpSpec& op, int tp, int nodes, int daemon_devices) {
  const int devices = spec.devices.empty() ? daemon_devices : int(spec.devices.size());
  const int graph_tp = spec.mesh.declared() ? spec.mesh.tp : devices;
  const int tp_size = tp > 0 ? tp : graph_tp;
  if (nodes > 1 && op.group == OpGroup::kDp) return {nodes, nodes};
  if (nodes > 1 && op.group == OpGroup::kWorld) return {tp_size * nodes, nodes};
  if (tp > 0) return {op.group == OpGroup::kTp || !spec.mesh.declared() ? tp : spec.mesh.dp, 1};
  return {GroupSize(spec.mesh, op.group, devices), 1};
}

// OK when the graph's shapes split over the asked degrees; else the
// validator's reason, which the planner reports instead of a number.
absl::Status CheckSplits(JobSpec spec, int tp, int nodes, int daemon_devices) {
  spec.devices.clear();
  int count = tp > 0 ? tp : daemon_devices;
  if (spec.mesh.declared()) {
    if (tp > 0) spec.mesh.tp = tp;
    if (nodes > 1) spec.mesh.dp = nodes;
    absl::StatusOr<int> ranks = MeshRanks(spec.mesh.tp, spec.mesh.dp);
    if (!ranks.ok()) return ranks.status();
    count = *ranks;
  }
  if (count <= 0) return absl::OkStatus();
  ValidationLimits limits;
  limits.device_count = count;
  limits.max_ops = 1 << 20;
  return ValidateJobSpec(spec, limits).status();
}

std::string LayerLine(const planner::LayerEstimate& layer, const planner::CostModel& model) {
  std::string line = absl::StrFormat("layer step %s ms predicted: the ops one after another %s ms",
                                     Ms(layer.step_ms), Ms(layer.compute_ms));
  if (layer.deferred > 0) {
    absl::StrAppendFormat(&line,
                          "; %d gradient all-reduce(s) %s ms alone beside the ops after them, "
                          "%.0f%% of it hidden (GEMMs %.2fx slower beside NCCL)",
                          layer.deferred, Ms(layer.deferred_ms), 100 * layer.hidden,
                          model.Slowdown(Transport::kNccl));
  }
  if (!layer.unpredicted.empty()) {
    absl::StrAppend(&line,
                    "; left out, the planner cannot say: ", absl::StrJoin(layer.unpredicted, ", "));
  }
  return line + "\n";
}

int PlanGraph(DaemonClient& client, const PlanOptions& options, const planner::CostModel& model,
              bool json_out, std::ostream& out, std::ostream& err) {
  absl::StatusOr<std::string> text = ReadGraphFile(options.graph_file);
  if (!text.ok()) return UsageError(text.status(), err);
  absl::StatusOr<JobSpec> spec = ParseJobSpec(*text, options.graph_file);
  if (!spec.ok()) return UsageError(spec.status(), err);
  int tp = options.tp;
  if (model.what_if().tp) tp = *model.what_if().tp;
  const int nodes = model.what_if().nodes.value_or(1);
  int daemon_devices = 0;
  if (tp == 0 && spec->devices.empty() && !spec->mesh.declared()) {
    absl::StatusOr<v1::GetNodeInfoResponse> node = client.GetNodeInfo();
    if (!node.ok()) return ReportCallError(node.status(), client.address(), err);
    daemon_devices = node->devices_size();
  }
  if (absl::Status splits = CheckSplits(*spec, tp, nodes, daemon_devices); !splits.ok()) {
    err << "overlapctl: plan: the planner cannot say: the graph does not split that way ("
        << (tp > 0 ? absl::StrCat("tp ", tp) : "its own tp")
        << (nodes > 1 ? absl::StrCat(", ", nodes, " nodes") : "") << "): " << splits.message()
        << "\n";
    return kExitUsage;
  }
  json ops = json::array();
  std::vector<OpPlan> plans;
  double serial_total = 0, best_total = 0;
  for (const OpSpec& op : spec->ops) {
    const Placement at = PlaceOp(*spec, op, tp, nodes, daemon_devices);
    std::vector<ops::Schedule> candidates = ops::CandidateSchedules(op, at.group, true, spec->mesh);
    if (at.nodes > 1) {
      // Across nodes only collectives move data (no peer memory, no sends).
      candidates.erase(
          std::remove_if(candidates.begin(), candidates.end(),
                         [](const ops::Schedule& s) { return !ops::CollectivesOnly(s); }),
          candidates.end());
    }
    plans.push_back(planner::PlanOp(model, op, at.group, spec->dtype, candidates, at.nodes));
    const OpPlan& plan = plans.back();
    if (const SchedulePrediction* best = plan.best()) {
      best_total += best->step_ms;
      double serial = best->serial_ms;
      for (const SchedulePrediction& p : plan.predicted) {
        if (p.schedule.mode == OverlapMode::kSerial && p.schedule.transport == Transport::kNccl) {
          serial = p.step_ms;
        }
      }
      serial_total += serial;
    }
    if (json_out) {
      json j = PlanJson(plan, OpTypeName(op.type));
      j["nodes"] = at.nodes;
      ops.push_back(j);
    } else {
      PrintPlan(plan, OpTypeName(op.type), out);
    }
  }
  const planner::LayerEstimate layer =
      planner::EstimateLayer(*spec, plans, model.Slowdown(Transport::kNccl));
  const std::vector<std::string> assumptions = model.Assumptions();
  if (json_out) {
    out << json{{"graph", spec->name},
                {"ops", ops},
                {"serial_ms", serial_total},
                {"best_ms", best_total},
                {"layer",
                 {{"step_ms", layer.step_ms},
                  {"compute_ms", layer.compute_ms},
                  {"deferred_ms", layer.deferred_ms},
                  {"deferred", layer.deferred},
                  {"deferred_hidden", layer.hidden}}},
                {"nodes", nodes},
                {"assumptions", assumptions},
                {"sources", model.calibration().sources}}
               .dump(1)
        << "\n";
    return kExitOk;
  }
  out << absl::StrFormat(
      "graph %s: every op serial over NCCL %s ms, each at its best %s ms (%.2fx)\n", spec->name,
      Ms(serial_total), Ms(best_total), best_total > 0 ? serial_total / best_total : 1.0);
  out << LayerLine(layer, model);
  out << "predicted from the calibration; nothing ran. Assumptions:\n";
  for (const std::string& a : assumptions) out << "  - " << a << "\n";
  return kExitOk;
}

// The replayed rows of a bench --json document. nlohmann's exceptions for a
// field of the wrong type (a string for a number, a float for a shape).
json ReplayRows(const json& doc, const planner::CostModel& model, DType dtype) {
  json rows = json::array();
  for (const json& r : doc["rows"]) {
    auto type = ParseOpType(r.value("op", ""));
    if (!type.ok()) continue;
    OpSpec op;
    op.type = *type;
    op.m = planner::JsonInteger(r.at("m"));
    op.k = planner::JsonInteger(r.at("k"));
    op.n = planner::JsonInteger(r.at("n"));
    const int64_t tp = r.contains("tp") ? planner::JsonInteger(r["tp"]) : 1;
    // Shapes bench could have run; anything else is not from bench.
    if (std::min({op.m, op.k, op.n}) <= 0 || std::max({op.m, op.k, op.n}) > kMaxReplayDim ||
        tp < 1 || tp > kMaxReplayTp) {
      continue;
    }
    op.id = absl::StrCat(r["op"].get<std::string>(), "-", op.m, "x", op.k, "x", op.n);
    std::vector<ops::Schedule> candidates;
    std::vector<double> measured;
    for (const json& c : r.value("candidates", json::array())) {
      auto s = ops::ParseScheduleName(c.value("schedule", ""));
      if (!s.ok()) continue;
      candidates.push_back(*s);
      measured.push_back(c.value("best_ms", 0.0));
    }
    OpPlan plan = planner::PlanOp(model, op, static_cast<int>(tp), dtype, candidates);
    json row = PlanJson(plan, r["op"].get<std::string>());
    row["measured"] = json::array();
    for (size_t i = 0; i < candidates.size(); ++i) {
      row["measured"].push_back({{"schedule", candidates[i].Name()}, {"best_ms", measured[i]}});
    }
    row["to_measure"] = json::array();
    for (size_t i : planner::CandidatesToMeasure(plan, candidates)) {
      row["to_measure"].push_back(candidates[i].Name());
    }
    row["auto_mode"] = r.value("auto_mode", "");
    row["step_ms"] = r.value("step_ms", 0.0);
    if (auto chosen = ops::ParseScheduleName(r.value("auto_mode", "")); chosen.ok()) {
      absl::StatusOr<SchedulePrediction> p = planner::PredictSchedule(model, plan.shape, *chosen);
      if (p.ok()) row["predicted_auto_ms"] = p->step_ms;
    }
    rows.push_back(row);
  }
  return rows;
}

// Predicts each candidate a recorded bench row measured, beside what it measured.
int PlanReplay(const PlanOptions& options, const planner::CostModel& model, std::ostream& out,
               std::ostream& err) {
  absl::StatusOr<std::string> text = ReadBoundedFile(options.replay_file, kMaxInputFileBytes);
  if (!text.ok()) {
    err << "overlapctl: plan --replay: " << text.status().message() << "\n";
    return kExitUsage;
  }
  json doc = json::parse(*text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("rows") || !doc["rows"].is_array() ||
      (doc.contains("dtype") && !doc["dtype"].is_string())) {
    err << "overlapctl: " << options.replay_file << ": not a bench --json result\n";
    return kExitUsage;
  }
  auto dtype = ParseDType(doc.value("dtype", "bf16"));
  if (!dtype.ok()) return UsageError(dtype.status(), err);
  json rows;
  try {
    rows = ReplayRows(doc, model, *dtype);
  } catch (const json::exception& e) {
    err << "overlapctl: " << options.replay_file << ": not a bench --json result (" << e.what()
        << ")\n";
    return kExitUsage;
  }
  out << json{{"file", options.replay_file},
              {"rows", rows},
              {"assumptions", model.Assumptions()},
              {"sources", model.calibration().sources}}
             .dump(1)
      << "\n";
  return kExitOk;
}

}  // namespace

int RunPlan(DaemonClient& client, const PlanOptions& options, bool json_out, std::ostream& out,
            std::ostream& err) {
  absl::StatusOr<planner::WhatIf> what_if = ParseWhatIf(options.what_if);
  if (!what_if.ok()) return UsageError(what_if.status(), err);
  if (options.nodes < 0 || options.link_gbps < 0 || (options.link_gbps > 0 && options.nodes < 2)) {
    err << "overlapctl: plan: --link-gbps goes with --node-count N (2 or more), both positive\n";
    return kExitUsage;
  }
  if (options.nodes > 1) what_if->nodes = options.nodes;
  if (options.link_gbps > 0) what_if->inter_node_gbps = options.link_gbps;
  if (options.graph_file.empty() == options.replay_file.empty()) {
    err << "overlapctl: plan takes a graph file or --replay BENCH_JSON\n";
    return kExitUsage;
  }
  absl::StatusOr<planner::Calibration> calibration =
      LoadCalibration(client, options.calibration_file, options.tp, err);
  if (!calibration.ok()) return ExitForCalibrationError(calibration.status(), client, err);
  planner::CostModel model(*calibration, *what_if);
  if (!options.replay_file.empty()) return PlanReplay(options, model, out, err);
  return PlanGraph(client, options, model, json_out, out, err);
}

}  // namespace overlap::client
