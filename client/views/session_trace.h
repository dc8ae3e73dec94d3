// `overlapctl sessions trace ID`: a session's recent steps as a Chrome trace
// (the Trace Event Format that chrome://tracing and Perfetto open), from the
// lanes' intervals ListSessions returns with `lanes`: one process per device,
// one thread per lane ("critical", "deferred"), every op (a deferred op: each
// chunk) an "X" event named by its op, on the device's clock, with its step
// (the command's sequence number), chunk and whether it was forced. The
// daemon keeps the last 4096 intervals of every session together; a busy
// node's trace holds fewer of one session's steps. Pure functions; thread-safe.
#pragma once

#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "client/core/daemon_client.h"
#include "nlohmann/json.hpp"
#include "overlap/v1/overlap.pb.h"

namespace overlap::client {

// The trace of session `id` in `listed`, its events in step order (then by
// start), at most the last `max_steps` steps (0: every one listed).
// NOT_FOUND when `listed` has no such session.
absl::StatusOr<nlohmann::json> SessionTrace(const v1::ListSessionsResponse& listed,
                                            const std::string& id, int max_steps);

// Asks for the caller's sessions (`all_users`: every owner's, for admins) with
// their lanes and prints the trace of `id`.
int RunSessionTrace(DaemonClient& client, const std::string& id, bool all_users, int max_steps,
                    std::ostream& out, std::ostream& err);

}  // namespace overlap::client
