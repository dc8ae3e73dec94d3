// The planner's prediction beside what `bench` measured: for each row, the
// step of the schedule auto chose, predicted from the daemon's calibration,
// and its error. A prediction is verified only where a recorded judge (a
// replay that set the planner's predictions beside measured steps, kept under
// docs/results/) scored that GPU model, tp and transport
// (JudgedPredictionTable); elsewhere it is unverified, with the reason.
#pragma once

#include <string>
#include <vector>

#include "client/measure/bench.h"
#include "common/graph.h"
#include "common/planner/calibration.h"
#include "nlohmann/json.hpp"

namespace overlap::client {

// One GPU model, tp and transport whose predictions a recorded replay scored.
struct JudgedPredictions {
  std::string gpu;  // the model as the daemon names it, e.g. "NVIDIA H200"
  int tp = 0;
  Transport transport = Transport::kNccl;
  std::string judged_in;  // the replay's output, under docs/results/
};
const std::vector<JudgedPredictions>& JudgedPredictionTable();
// The row of the table for (gpu, tp, transport); null where none scored it.
const JudgedPredictions* FindJudge(const std::string& gpu, int tp, Transport transport);

struct BenchPrediction {
  bool predicted = false;
  double step_ms = 0;
  double error = 0;       // (predicted - measured) / measured
  bool verified = false;  // a recorded judge scored its GPU model, tp and transport
  std::string judged_in;  // verified: the judge's file
  std::string unverified_why;
  std::string cannot_say;  // why not, when not predicted
};

// One per row, the rows measured on `gpu` (the job's GPU model);
// `calibration` null: none (every row says so).
std::vector<BenchPrediction> PredictBench(const std::vector<BenchRow>& rows,
                                          const planner::Calibration* calibration,
                                          const std::string& dtype, const std::string& gpu);

// The table (measured, predicted, error, verified) and the median absolute
// error; `missing` is printed instead when there is no calibration.
std::string FormatBenchPredictions(const std::vector<BenchRow>& rows,
                                   const std::vector<BenchPrediction>& predictions);

// Adds predicted_step_ms, prediction_error and prediction_verified (or
// prediction_cannot_say) to each of `bench_json`'s rows.
void AddPredictionsJson(const std::vector<BenchPrediction>& predictions,
                        nlohmann::json& bench_json);

}  // namespace overlap::client
