#include "client/views/session_trace.h"

#include <algorithm>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/utility/utility.h"
#include "client/core/command_io.h"

namespace overlap::client {
namespace {

// Thread ids of the lanes, so that a viewer shows critical above deferred.
int LaneThread(const std::string& lane) { return lane == "deferred" ? 2 : 1; }

nlohmann::json Metadata(const char* what, int pid, int tid, const std::string& name) {
  return {{"ph", "M"}, {"name", what}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}};
}

}  // namespace

absl::StatusOr<nlohmann::json> SessionTrace(const v1::ListSessionsResponse& listed,
                                            const std::string& id, int max_steps) {
  const auto session = std::find_if(listed.sessions().begin(), listed.sessions().end(),
                                    [&](const v1::SessionInfo& s) { return s.session_id() == id; });
  if (session == listed.sessions().end()) {
    return absl::NotFoundError(
        absl::StrCat("no session ", id, " (overlapctl sessions lists them)"));
  }
  std::vector<const v1::LaneInterval*> spans;
  for (const v1::LaneInterval& lane : listed.lanes()) {
    if (lane.session_id() == id) spans.push_back(&lane);
  }
  std::stable_sort(spans.begin(), spans.end(), [](const auto* a, const auto* b) {
    return a->seq() != b->seq() ? a->seq() < b->seq() : a->start_ms() < b->start_ms();
  });
  if (max_steps > 0) {
    std::set<uint64_t> steps;
    for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
      steps.insert((*it)->seq());
      if (static_cast<int>(steps.size()) > max_steps) {
        spans.erase(spans.begin(), it.base());
        break;
      }
    }
  }
  nlohmann::json events = nlohmann::json::array();
  std::set<int> devices;
  std::set<std::pair<int, std::string>> lanes;
  for (const v1::LaneInterval* span : spans) {
    if (devices.insert(span->device()).second) {
      events.push_back(
          Metadata("process_name", span->device(), 0, absl::StrCat("device ", span->device())));
    }
    if (lanes.insert({span->device(), span->lane()}).second) {
      events.push_back(
          Metadata("thread_name", span->device(), LaneThread(span->lane()), span->lane()));
    }
    nlohmann::json args = {{"step", span->seq()}, {"session", id}};
    if (span->lane() == "deferred") {
      args["chunk"] = span->chunk();
      args["forced"] = span->forced();
    }
    events.push_back({{"ph", "X"},
                      {"name", span->op()},
                      {"cat", span->lane()},
                      {"pid", span->device()},
                      {"tid", LaneThread(span->lane())},
                      {"ts", span->start_ms() * 1000.0},
                      {"dur", std::max(0.0, span->end_ms() - span->start_ms()) * 1000.0},
                      {"args", std::move(args)}});
  }
  // In place: a json would also convert to the StatusOr's other alternatives.
  return absl::StatusOr<nlohmann::json>(
      absl::in_place,
      nlohmann::json{{"traceEvents", std::move(events)},
                     {"displayTimeUnit", "ms"},
                     {"otherData",
                      {{"session_id", id},
                       {"name", session->name()},
                       {"owner", session->owner()},
                       {"priority", session->priority()},
                       {"clock", "each device's, ms since sessions first used it"}}}});
}

int RunSessionTrace(DaemonClient& client, const std::string& id, bool all_users, int max_steps,
                    std::ostream& out, std::ostream& err) {
  absl::StatusOr<v1::ListSessionsResponse> listed = client.ListSessions(all_users, /*lanes=*/true);
  if (!listed.ok()) return ReportCallError(listed.status(), client.address(), err);
  absl::StatusOr<nlohmann::json> trace = SessionTrace(*listed, id, max_steps);
  if (!trace.ok()) return ReportCallError(trace.status(), client.address(), err);
  out << trace->dump() << "\n";
  return kExitOk;
}

}  // namespace overlap::client
