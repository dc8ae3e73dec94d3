#include "client/views/tuning.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/core/command_io.h"
#include "client/format/report.h"
#include "client/format/table.h"
#include "common/graph.h"

namespace overlap::client {

absl::StatusOr<v1::TuningFilter> ParseTuningFilter(const std::string& op, const std::string& shape,
                                                   bool stale_only) {
  v1::TuningFilter filter;
  if (!op.empty()) {
    if (absl::StatusOr<OpType> type = ParseOpType(op); !type.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--op: ", type.status().message()));
    }
    filter.set_op_type(op);
  }
  if (!shape.empty()) {
    int64_t m = 0, k = 0, n = 0;
    if (!ParseShapeDims(shape, &m, &k, &n) || m <= 0 || k < 0 || n <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--shape: want MxKxN with positive sizes, e.g. 8192x8192x28672 (got \"", shape, "\")"));
    }
    filter.set_m(m);
    filter.set_k(k);
    filter.set_n(n);
  }
  filter.set_stale_only(stale_only);
  return filter;
}

std::string FormatTunedSchedules(const v1::ListTunedSchedulesResponse& response) {
  if (response.schedules_size() == 0) return "no tuned schedules\n";
  TextTable table(
      Columns({Words({"OP", "SHAPE", "DTYPE"}), Figures({"TP"}), Words({"ASKED", "CHOSEN"}),
               Figures({"STEP_MS"}), Words({"TUNED", "USABLE"})}));
  int stale = 0;
  for (const v1::TunedSchedule& t : response.schedules()) {
    if (!t.current()) ++stale;
    table.AddRow({t.op_type(), absl::StrCat(t.m(), "x", t.k(), "x", t.n()), t.dtype(),
                  absl::StrCat(t.tp()), t.requested(), t.schedule(),
                  absl::StrFormat("%.3f", t.step_ms()), FormatUtc(t.tuned_unix_ms()),
                  t.current() ? "yes" : "stale"});
  }
  std::string out = table.Render();
  if (stale > 0) {
    absl::StrAppend(&out, stale,
                    " stale: tuned under another overlapd build, GPU model, driver, library or "
                    "NCCL_*/CUDA_* setting (`--json` shows each one's environment); "
                    "`overlapctl tuning forget --stale` drops them\n");
  }
  return out;
}

int RunTuningList(DaemonClient& client, const v1::TuningFilter& filter, bool json,
                  std::ostream& out, std::ostream& err) {
  absl::StatusOr<v1::ListTunedSchedulesResponse> listed = client.ListTunedSchedules(filter);
  if (!listed.ok()) return ReportCallError(listed.status(), client.address(), err);
  out << (json ? ToJson(*listed) : FormatTunedSchedules(*listed));
  return kExitOk;
}

int RunTuningForget(DaemonClient& client, const v1::TuningFilter& filter, bool all, bool json,
                    std::ostream& out, std::ostream& err) {
  absl::StatusOr<v1::ForgetTunedSchedulesResponse> forgot =
      client.ForgetTunedSchedules(filter, all);
  if (!forgot.ok()) return ReportCallError(forgot.status(), client.address(), err);
  if (json) {
    out << ToJson(*forgot);
  } else {
    out << "forgot " << forgot->forgotten() << " tuned schedule"
        << (forgot->forgotten() == 1 ? "" : "s")
        << "; the next job with such an op tunes it again\n";
  }
  return kExitOk;
}

}  // namespace overlap::client
