#include "client/views/sessions.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/core/command_io.h"
#include "client/format/report.h"
#include "client/format/table.h"
#include "nlohmann/json.hpp"

namespace overlap::client {
namespace {

// "fc1:0.412,fc2:0.380": a figure per op, "-" for a session with no steps yet.
template <typename Cell>
std::string PerOp(const v1::SessionInfo& session, Cell cell) {
  std::vector<std::string> parts;
  for (const v1::SessionOpStats& op : session.ops()) {
    if (op.steps() > 0) parts.push_back(absl::StrCat(op.op(), ":", cell(op)));
  }
  return parts.empty() ? "-" : absl::StrJoin(parts, ",");
}

double LaneWaitMs(const v1::SessionInfo& session) {
  double total = 0;
  for (const v1::SessionOpStats& op : session.ops()) total += op.lane_wait_ms();
  return total;
}

// A deferred session's worst delay from ready to its last chunk, against its
// bound ("3.1/20"); "-" for a critical one.
std::string DelayAgainstBound(const v1::SessionInfo& session) {
  if (session.priority() != "deferred") return "-";
  double worst = 0;
  for (const v1::SessionOpStats& op : session.ops()) worst = std::max(worst, op.max_delay_ms());
  return absl::StrFormat("%.1f/%g", worst, session.deferred_bound_ms());
}

std::string Chunks(const v1::SessionInfo& session) {
  int64_t chunks = 0, forced = 0;
  for (const v1::SessionOpStats& op : session.ops()) {
    chunks += op.chunks();
    forced += op.chunks_forced();
  }
  return chunks == 0 ? "-" : absl::StrCat(chunks, "/", forced);
}

// One word, so that the table splits on spaces: "alice (uid:1000)" -> "alice".
std::string OwnerWord(const std::string& owner) {
  const size_t space = owner.find(' ');
  return space == std::string::npos ? owner : owner.substr(0, space);
}

// One word too: "mlp block 3" -> "mlp_block_3", "" -> "-".
std::string NameWord(const std::string& name) {
  const std::string word = WordCell(name);
  return word.empty() ? "-" : word;
}

std::string Micros(double us) { return us > 0 ? absl::StrFormat("%.1f", us) : "-"; }

std::string FormatLanes(const v1::ListSessionsResponse& response) {
  if (response.lanes_size() == 0) return "no lane intervals recorded\n";
  TextTable table(Columns({Words({"SESSION", "OP"}), Figures({"DEVICE"}), Words({"LANE"}),
                           Figures({"CHUNK", "START_MS", "END_MS"}), Words({"FORCED"})}));
  for (const v1::LaneInterval& lane : response.lanes()) {
    table.AddRow({lane.session_id(), lane.op(), absl::StrCat(lane.device()), lane.lane(),
                  lane.lane() == "deferred" ? absl::StrCat(lane.chunk()) : "-",
                  absl::StrFormat("%.3f", lane.start_ms()), absl::StrFormat("%.3f", lane.end_ms()),
                  lane.forced() ? "yes" : "-"});
  }
  return table.Render();
}

// The node's lanes per device and user: who has critical work pending, and
// how the deferred chunks of sessions and of jobs beside them fared.
std::string FormatDeviceLanes(const v1::ListSessionsResponse& response) {
  TextTable table(Columns({Figures({"DEVICE"}), Words({"USER"}),
                           Figures({"CRITICAL_PENDING", "CRITICAL", "DEFERRED_SENT", "YIELDED",
                                    "TO_OTHER", "OVER_BOUND"})}));
  for (const v1::DeviceLaneState& device : response.device_lanes()) {
    for (const v1::LaneUserFigures& user : device.users()) {
      table.AddRow({absl::StrCat(device.device()), user.user(),
                    absl::StrCat(user.critical_pending()), absl::StrCat(user.critical_issued()),
                    absl::StrCat(user.deferred_sent()), absl::StrCat(user.deferred_yielded()),
                    absl::StrCat(user.deferred_yielded_to_other()),
                    absl::StrCat(user.deferred_over_bound())});
    }
  }
  return table.Render();
}

}  // namespace

std::string FormatSessions(const v1::ListSessionsResponse& response) {
  std::string out;
  if (response.sessions_size() == 0) {
    out = "no sessions\n";
  } else {
    TextTable table(
        Columns({Words({"SESSION", "NAME", "OWNER", "STATE", "PRIORITY"}),
                 Figures({"RANKS", "STEPS"}), Words({"OP_MS", "HIDDEN_%"}),
                 Figures({"WAIT_MS", "DELAY/BOUND_MS", "ENQ_P50_US"}), Words({"DEVICES"}, 1),
                 Figures({"MAPPED_MIB", "ENQ_P99_US", "CHUNKS/FORCED"}, 1), Words({"OPENED"}, 2)}));
    std::vector<std::string> failures;
    for (const v1::SessionInfo& s : response.sessions()) {
      table.AddRow(
          {s.session_id(), NameWord(s.name()), OwnerWord(s.owner()), s.state(), s.priority(),
           absl::StrCat(s.ranks_joined(), "/", s.world()), absl::StrCat(s.steps()),
           PerOp(s, [](const v1::SessionOpStats& op) { return FormatMs(op.median_ms()); }),
           PerOp(s,
                 [](const v1::SessionOpStats& op) {
                   return op.hidden_share() < 0 ? std::string("-")
                                                : FormatHidden(op.hidden_share());
                 }),
           FormatMs(LaneWaitMs(s)), DelayAgainstBound(s), Micros(s.enqueue_p50_us()),
           s.devices_size() == 0 ? "-" : absl::StrJoin(s.devices(), ","),
           absl::StrFormat("%.2f", static_cast<double>(s.mapped_bytes()) / (1 << 20)),
           Micros(s.enqueue_p99_us()), Chunks(s), s.opened_at().empty() ? "-" : s.opened_at()});
      if (!s.error().empty()) failures.push_back(absl::StrCat(s.session_id(), ": ", s.error()));
    }
    out = table.Render();
    for (const std::string& failure : failures) absl::StrAppend(&out, failure, "\n");
  }
  if (response.lanes_size() > 0) absl::StrAppend(&out, "\n", FormatLanes(response));
  return out;
}

int RunSessions(DaemonClient& client, const SessionsOptions& options, bool json, std::ostream& out,
                std::ostream& err) {
  absl::StatusOr<v1::ListSessionsResponse> listed =
      client.ListSessions(options.all_users, options.lanes);
  if (!listed.ok()) return ReportCallError(listed.status(), client.address(), err);
  if (json) {
    out << ToJson(*listed);
    return kExitOk;
  }
  out << FormatSessions(*listed);
  if (options.lanes && listed->lanes_size() == 0 && listed->sessions_size() > 0) {
    out << "\n" << FormatLanes(*listed);
  }
  if (options.lanes && listed->device_lanes_size() > 0) {
    out << "\n" << FormatDeviceLanes(*listed);
  }
  return kExitOk;
}

int RunCloseSession(DaemonClient& client, const std::string& session_id, bool json,
                    std::ostream& out, std::ostream& err) {
  if (absl::Status closed = client.CloseSession(session_id); !closed.ok()) {
    return ReportCallError(closed, client.address(), err);
  }
  if (json) {
    out << nlohmann::json{{"session_id", session_id}, {"closed", true}}.dump(2) << "\n";
  } else {
    out << "closed " << session_id << ": its ranks' next commands fail CANCELLED\n";
  }
  return kExitOk;
}

}  // namespace overlap::client
