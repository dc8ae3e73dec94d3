#include "client/format/flight_trace.h"

#include <algorithm>
#include <limits>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"

namespace overlap::client {
namespace {

// Above any lane index ChromeTrace gives a rank's streams.
constexpr int kFlightTrack = 1000;

}  // namespace

int64_t FlightEntryCount(const v1::GetFlightResponse& flight) {
  int64_t count = 0;
  for (const v1::FlightRing& ring : flight.rings()) count += ring.entries_size();
  return count;
}

void AppendFlightTrace(const v1::GetFlightResponse& flight, const std::string& op_id,
                       nlohmann::json& trace) {
  auto shown = [&](const v1::FlightEntry& e) { return op_id.empty() || e.job_op() == op_id; };
  int64_t origin_ns = std::numeric_limits<int64_t>::max();
  for (const v1::FlightRing& ring : flight.rings()) {
    for (const v1::FlightEntry& e : ring.entries()) {
      if (shown(e)) origin_ns = std::min(origin_ns, e.enqueued_unix_ns());
    }
  }
  nlohmann::json& events = trace["traceEvents"];
  std::set<int> ranks;
  for (const v1::FlightRing& ring : flight.rings()) {
    for (const v1::FlightEntry& e : ring.entries()) {
      if (!shown(e)) continue;
      ranks.insert(ring.rank());
      nlohmann::json event = {
          {"name", absl::StrCat("#", e.seq(), " ", e.op())},
          {"cat", "flight"},
          {"ts", static_cast<double>(e.enqueued_unix_ns() - origin_ns) / 1000.0},
          {"pid", ring.rank()},
          {"tid", kFlightTrack},
          {"args",
           {{"seq", e.seq()},
            {"collective", e.op()},
            {"op", e.job_op()},
            {"lane", ring.lane()},
            {"comm", ring.comm()},
            {"state", e.state()},
            {"bytes", e.bytes()},
            {"node", ring.node()}}}};
      if (!e.error().empty()) event["args"]["error"] = e.error();
      if (e.finished_unix_ns() > 0) {
        event["ph"] = "X";
        event["dur"] =
            static_cast<double>(std::max<int64_t>(e.finished_unix_ns() - e.enqueued_unix_ns(), 0)) /
            1000.0;
      } else {
        event["ph"] = "i";
        event["s"] = "t";
      }
      events.push_back(std::move(event));
    }
  }
  for (int rank : ranks) {
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", rank},
                      {"tid", kFlightTrack},
                      {"args", {{"name", "flight"}}}});
  }
}

}  // namespace overlap::client
