// `overlapctl sessions`: the sessions on the daemon (docs/SESSIONS.md), the
// training processes' ranks that hand it their own tensors. One row per
// session: its owner, state, priority, ranks joined of its world, commands
// completed, each op's device time and hidden share, the time its steps
// waited for a lane, a deferred session's worst delay against its bound, and
// the host time from a client's call to the daemon's enqueue. --lanes adds
// the lanes' recent intervals; `sessions close ID` ends one; `sessions trace
// ID` prints one's recent steps as a Chrome trace (session_trace.h).
#pragma once

#include <ostream>
#include <string>

#include "client/core/daemon_client.h"
#include "overlap/v1/overlap.pb.h"

namespace overlap::client {

struct SessionsOptions {
  bool all_users = false;  // --all-users: every owner's (admins)
  bool lanes = false;      // --lanes: the recent lane intervals too
  std::string close_id;    // `sessions close ID`
  std::string trace_id;    // `sessions trace ID`
  int trace_steps = 0;     // `sessions trace --steps N`: the last N (0: every one kept)
};

// The table (and with lanes, the intervals' table); a line per failed
// session saying why under it; "no sessions" for none.
std::string FormatSessions(const v1::ListSessionsResponse& response);

int RunSessions(DaemonClient& client, const SessionsOptions& options, bool json, std::ostream& out,
                std::ostream& err);
int RunCloseSession(DaemonClient& client, const std::string& session_id, bool json,
                    std::ostream& out, std::ostream& err);

}  // namespace overlap::client
