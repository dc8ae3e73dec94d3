// The runner's values as the API's messages: the one place a measured op
// becomes a v1::OpResult, a summary of timings a v1::TimingStats, and a
// Progress a v1::Progress.
#pragma once

#include "common/stats.h"
#include "overlap/v1/overlap.pb.h"
#include "server/runner/op_measurement.h"
#include "server/runner/run_hooks.h"

namespace overlap::runner {

// Everything the report shows of one op: the schedule and why, step, GEMM
// alone, comm alone (each transport's), exposed and hidden communication,
// TFLOP/s, bus bandwidth, the GEMM's slowdown beside the collective, the
// timeline and the float64 check. Figures follow the op's type: a GEMM alone
// is its own GEMM alone, a collective alone its own comm alone.
v1::OpResult OpReport(const OpMeasurement& m);

v1::TimingStats ToProto(const Summary& s);
v1::Progress ToProto(const Progress& p);

}  // namespace overlap::runner
