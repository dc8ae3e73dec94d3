// Fuzz target: a calibration as the daemon takes it (PutCalibration, and
// back from tuning.db) and the planner predicts from it
// (common/planner/calibration.cc, op_model.cc, two_lanes.cc). The input is
// the calibration's JSON text.
//
// Rules: a calibration is read or refused (INVALID_ARGUMENT), never crashes or
// hangs; one that is read writes back to JSON that reads back to the same
// JSON; every schedule of a few ops is predicted (a finite, non-negative step,
// no less than the GEMM alone it contains) or refused as something the model
// cannot say.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/planner/calibration.h"
#include "common/planner/op_model.h"
#include "common/schedule.h"
#include "tests/fuzz/fuzz_check.h"

namespace overlap::fuzz {
namespace {

void PredictEverySchedule(const planner::Calibration& calibration) {
  const planner::CostModel model(calibration, {});
  for (OpType type : {OpType::kAgGemm, OpType::kGemmRs, OpType::kGemmAr, OpType::kAllReduce}) {
    OpSpec op;
    op.type = type;
    op.m = 4096;
    op.k = 1024;
    op.n = 2048;
    for (int tp : {1, 2, 8}) {
      planner::OpShape shape;
      shape.type = type;
      shape.m = op.m;
      shape.k = op.k;
      shape.n = op.n;
      shape.tp = tp;
      for (const ops::Schedule& s : ops::CandidateSchedules(op, tp)) {
        absl::StatusOr<planner::SchedulePrediction> p = planner::PredictSchedule(model, shape, s);
        if (!p.ok()) {
          FUZZ_CHECK(p.status().code() == absl::StatusCode::kUnimplemented);
          continue;
        }
        FUZZ_CHECK(std::isfinite(p->step_ms) && p->step_ms >= 0);
        FUZZ_CHECK(p->step_ms >= p->gemm_alone_ms * (1 - 1e-9));
        FUZZ_CHECK(p->hidden >= 0 && p->hidden <= 1);
      }
    }
  }
}

}  // namespace
}  // namespace overlap::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace overlap;
  absl::StatusOr<planner::Calibration> calibration =
      planner::CalibrationFromJson(fuzz::Text(data, size));
  if (!calibration.ok()) {
    FUZZ_CHECK(calibration.status().code() == absl::StatusCode::kInvalidArgument);
    return 0;
  }
  const std::string written = planner::CalibrationToJson(*calibration);
  absl::StatusOr<planner::Calibration> back = planner::CalibrationFromJson(written);
  FUZZ_CHECK(back.ok());
  FUZZ_CHECK(planner::CalibrationToJson(*back) == written);
  fuzz::PredictEverySchedule(*calibration);
  return 0;
}
