#include "client/format/flight.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace overlap::client {

std::string FormatFlight(const v1::GetFlightResponse& flight) {
  std::string out =
      absl::StrCat(flight.verdict().empty() ? "flight: nothing recorded" : flight.verdict(), "\n");
  absl::StrAppendFormat(&out, "recorder: %d B in all rings, at most %d collectives a ring\n",
                        flight.recorder_bytes(), flight.entries_per_ring());
  for (const std::string& node : flight.unread_nodes()) {
    absl::StrAppend(&out, "rings not read from node ", node, "\n");
  }
  if (flight.truncated()) absl::StrAppend(&out, "some rings were cut to their newest entries\n");
  for (const v1::FlightRing& ring : flight.rings()) {
    absl::StrAppendFormat(&out, "\nrank %d%s, %s, %s lane\n", ring.rank(),
                          ring.node().empty() ? "" : absl::StrCat(" on node ", ring.node()),
                          ring.comm(), ring.lane());
    absl::StrAppendFormat(&out, "  %6s  %-14s %12s %-5s %-9s %s\n", "seq", "collective", "bytes",
                          "dtype", "state", "op");
    for (const v1::FlightEntry& e : ring.entries()) {
      // A failed or aborted collective's error closes its row.
      absl::StrAppendFormat(&out, "  %6d  %-14s %12d %-5s %-9s %s%s\n", e.seq(), e.op(), e.bytes(),
                            e.dtype().empty() ? "-" : e.dtype(), e.state(),
                            e.job_op().empty() ? "-" : e.job_op(),
                            e.error().empty() ? "" : absl::StrCat("  ", e.error()));
    }
  }
  return out;
}

}  // namespace overlap::client
