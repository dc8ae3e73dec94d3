#include "client/measure/bench_prediction.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/format/table.h"
#include "common/planner/op_model.h"
#include "common/schedule.h"

namespace overlap::client {

const std::vector<JudgedPredictions>& JudgedPredictionTable() {
  // The H200 replay: 45 shapes at tp 2, one rank per GPU, auto's choices over
  // copy engines (p2p) and NCCL both predicted and measured.
  static const std::vector<JudgedPredictions> kJudged = {
      {"NVIDIA H200", 2, Transport::kP2p, "docs/results/planner-replay-h200x2-2026-12-06.txt"},
      {"NVIDIA H200", 2, Transport::kNccl, "docs/results/planner-replay-h200x2-2026-12-06.txt"},
  };
  return kJudged;
}

const JudgedPredictions* FindJudge(const std::string& gpu, int tp, Transport transport) {
  for (const JudgedPredictions& judged : JudgedPredictionTable()) {
    if (judged.gpu == gpu && judged.tp == tp && judged.transport == transport) return &judged;
  }
  return nullptr;
}

namespace {

// Whether a recorded judge scored a prediction like `p`'s, and why not.
void Judge(const BenchRow& r, Transport transport, const planner::Calibration& calibration,
           const std::string& gpu, BenchPrediction& p) {
  if (r.host_backend) {
    p.unverified_why = "host backend";
  } else if (r.ranks_per_gpu > 1) {
    p.unverified_why = "ranks share a GPU";
  } else if (const std::string& calibrated = calibration.identity.device;
             !calibrated.empty() && calibrated != gpu) {
    p.unverified_why = absl::StrCat("calibrated on ", calibrated, ", measured on ", gpu);
  } else if (const JudgedPredictions* judge = FindJudge(gpu, r.tp, transport)) {
    p.verified = true;
    p.judged_in = judge->judged_in;
  } else {
    p.unverified_why = absl::StrCat("no recorded judge for ", gpu.empty() ? "this GPU" : gpu,
                                    " at tp ", r.tp, " over ", TransportName(transport));
  }
}

}  // namespace

std::vector<BenchPrediction> PredictBench(const std::vector<BenchRow>& rows,
                                          const planner::Calibration* calibration,
                                          const std::string& dtype, const std::string& gpu) {
  std::vector<BenchPrediction> out(rows.size());
  if (calibration == nullptr) return out;
  const planner::CostModel model(*calibration, {});
  const absl::StatusOr<DType> type = ParseDType(dtype);
  for (size_t i = 0; i < rows.size(); ++i) {
    const BenchRow& r = rows[i];
    BenchPrediction& p = out[i];
    absl::StatusOr<OpType> op = ParseOpType(r.shape.op);
    absl::StatusOr<ops::Schedule> schedule = ops::ParseScheduleName(r.mode);
    if (!op.ok() || !schedule.ok() || !type.ok()) {
      p.cannot_say = "not a schedule the planner knows";
      continue;
    }
    planner::OpShape shape;
    shape.type = *op;
    shape.m = r.shape.m;
    shape.k = r.shape.k;
    shape.n = r.shape.n;
    shape.tp = r.tp;
    shape.dtype = *type;
    absl::StatusOr<planner::SchedulePrediction> predicted =
        planner::PredictSchedule(model, shape, *schedule);
    if (!predicted.ok()) {
      p.cannot_say = std::string(predicted.status().message());
      continue;
    }
    p.predicted = true;
    p.step_ms = predicted->step_ms;
    p.error = r.step_ms > 0 ? (p.step_ms - r.step_ms) / r.step_ms : 0;
    Judge(r, schedule->transport, *calibration, gpu, p);
  }
  return out;
}

std::string FormatBenchPredictions(const std::vector<BenchRow>& rows,
                                   const std::vector<BenchPrediction>& predictions) {
  TextTable t(Columns({Words({"OP", "SHAPE"}), Figures({"TP"}), Words({"AUTO_MODE"}),
                       Figures({"STEP_MS", "PREDICTED_MS", "ERROR"}), Words({"VERIFIED"})}));
  std::vector<double> errors;
  bool any_unverified = false;
  for (size_t i = 0; i < rows.size() && i < predictions.size(); ++i) {
    const BenchRow& r = rows[i];
    const BenchPrediction& p = predictions[i];
    if (p.predicted) errors.push_back(std::fabs(p.error));
    any_unverified = any_unverified || (p.predicted && !p.verified);
    t.AddRow({r.shape.op, FormatBenchShape(r.shape), absl::StrCat(r.tp), r.mode,
              absl::StrFormat("%.3f", r.step_ms),
              p.predicted ? absl::StrFormat("%.3f", p.step_ms) : "-",
              p.predicted ? absl::StrFormat("%+.1f%%", 100 * p.error) : "-",
              !p.predicted ? "cannot say"
              : p.verified ? "yes"
                           : absl::StrCat("no (", p.unverified_why, ")")});
  }
  std::string out = "predicted (the planner, from the daemon's calibration) beside measured:\n";
  out += t.Render();
  if (!errors.empty()) {
    std::sort(errors.begin(), errors.end());
    const size_t n = errors.size();
    const double median = n % 2 ? errors[n / 2] : (errors[n / 2 - 1] + errors[n / 2]) / 2;
    absl::StrAppendFormat(&out, "prediction: median absolute error %.1f%% over %d shape(s)%s\n",
                          100 * median, static_cast<int>(n),
                          any_unverified ? "; a prediction is verified only where a recorded "
                                           "replay scored its GPU model, tp and transport: the "
                                           "others are unverified"
                                         : "");
  }
  return out;
}

void AddPredictionsJson(const std::vector<BenchPrediction>& predictions, nlohmann::json& j) {
  if (!j.contains("rows")) return;
  for (size_t i = 0; i < predictions.size() && i < j["rows"].size(); ++i) {
    nlohmann::json& row = j["rows"][i];
    const BenchPrediction& p = predictions[i];
    if (p.predicted) {
      row["predicted_step_ms"] = p.step_ms;
      row["prediction_error"] = p.error;
      row["prediction_verified"] = p.verified;
      if (p.verified) row["prediction_judged_in"] = p.judged_in;
      if (!p.verified) row["prediction_unverified_why"] = p.unverified_why;
    } else if (!p.cannot_say.empty()) {
      row["prediction_cannot_say"] = p.cannot_say;
    }
  }
}

}  // namespace overlap::client
