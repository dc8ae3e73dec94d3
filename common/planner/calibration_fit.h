// A calibration fitted from results overlapctl already writes: `commbench
// --json` (transfer curves), `commbench --peers --json` (the link between
// nodes), `bench --json` (GEMM alone per shape, and the GEMM's slowdown beside
// the transport auto chose). `overlapctl calibrate` measures with those same
// commands and fits here; `calibrate --from FILE...` fits recorded ones.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/planner/calibration.h"
#include "nlohmann/json.hpp"

namespace overlap::planner {

struct FitOptions {
  // Figures measured elsewhere (e.g. a recorded A/B run), used where given in
  // place of what the documents hold; each is written into `sources`.
  std::map<Transport, double> gemm_slowdown;
  std::optional<double> piece_overhead_ms;
  std::vector<std::string> notes;  // where those figures came from
};

// Which kind of result a document is: "commbench", "commbench_nodes", "bench",
// or "" when it is none of them.
std::string ResultKind(const nlohmann::json& doc);

// INVALID_ARGUMENT for a document of no known kind or without the fields a
// calibration needs; FAILED_PRECONDITION when two documents come from
// different GPUs, drivers, CUDA or NCCL versions (by name).
absl::StatusOr<Calibration> FitCalibration(const std::vector<nlohmann::json>& docs,
                                           const std::vector<std::string>& names,
                                           const FitOptions& options);

}  // namespace overlap::planner
