// The planner's prediction beside what `bench` measured: for each row, the
// step of the schedule auto chose, predicted from the daemon's calibration,
// and its error. Predictions at tp 2 were judged against recorded sweeps
// (docs/PERFORMANCE.md); at other tp they are marked unverified.
#pragma once

#include <string>
#include <vector>

#include "client/bench/bench.h"
#include "common/planner/calibration.h"
#include "nlohmann/json.hpp"

namespace overlap::client {

struct BenchPrediction {
  bool predicted = false;
  double step_ms = 0;
  double error = 0;       // (predicted - measured) / measured
  bool verified = false;  // tp 2 on GPUs: judged against recorded sweeps
  std::string unverified_why;
  std::string cannot_say;  // why not, when not predicted
};

// One per row; `calibration` null: none (every row says so).
std::vector<BenchPrediction> PredictBench(const std::vector<BenchRow>& rows,
                                          const planner::Calibration* calibration,
                                          const std::string& dtype);

// The table (measured, predicted, error, verified) and the median absolute
// error; `missing` is printed instead when there is no calibration.
std::string FormatBenchPredictions(const std::vector<BenchRow>& rows,
                                   const std::vector<BenchPrediction>& predictions);

// Adds predicted_step_ms, prediction_error and prediction_verified (or
// prediction_cannot_say) to each of `bench_json`'s rows.
void AddPredictionsJson(const std::vector<BenchPrediction>& predictions, nlohmann::json& bench_json);

}  // namespace overlap::client
