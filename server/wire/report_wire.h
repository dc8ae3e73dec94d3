// A run's report on the wire: runner::JobReport and its parts to the API's
// messages and back, field by field. The one mapping that rpc/ (what users
// read), peer/ (parts' results between daemons) and the job store's rows use;
// nothing else in the daemon names a v1 result.
//
// Lossless both ways for what the daemon writes: FromProto(ToProto(r))
// equals r, and ToProto(FromProto(p)) equals p for every p that ToProto
// made (tests/wire/report_wire_test.cc). A message field is present exactly
// where its value is (std::optional), so that a stored or forwarded result
// prints as it did.
//
// Pure functions; thread-safe.
#pragma once

#include "common/stats.h"
#include "overlap/v1/overlap.pb.h"
#include "server/runner/job_report.h"
#include "server/runner/op_report.h"
#include "server/runner/run_hooks.h"

namespace overlap::wire {

v1::TimingStats ToProto(const Summary& s);
Summary FromProto(const v1::TimingStats& s);

v1::Progress ToProto(const runner::Progress& p);
runner::Progress FromProto(const v1::Progress& p);

v1::Timeline ToProto(const runner::Timeline& timeline);
runner::Timeline FromProto(const v1::Timeline& timeline);

v1::OpResult ToProto(const runner::OpReport& op);
runner::OpReport FromProto(const v1::OpResult& op);

v1::JobResult ToProto(const runner::JobReport& report);
runner::JobReport FromProto(const v1::JobResult& result);

}  // namespace overlap::wire
