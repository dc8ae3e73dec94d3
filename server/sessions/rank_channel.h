// A rank's channel to the daemon besides its socket: the command ring (a
// memfd the daemon maps and hands the client) and the two doorbells
// (eventfds), made when the rank joins; and the release of everything a rank
// holds (the ring's mapping, its imported buffers) when it leaves before its
// session started. Once started, the lanes own and release it.
#pragma once

#include <sys/types.h>

#include <memory>

#include "absl/status/statusor.h"
#include "server/engine/engine.h"
#include "server/sessions/session.h"

namespace overlap::sessions {

// A rank with its ring made (magic and version written, counters 0) and
// mapped, and its doorbells. RESOURCE_EXHAUSTED when the system has no fds
// or memory for them.
absl::StatusOr<std::unique_ptr<SessionRank>> MakeRankChannel(int rank, int device, pid_t pid);

// Frees `rank`'s imported buffers (engine.Free) and unmaps its ring; its fds
// close with it. Leaves it empty.
void ReleaseRank(engine::Engine& engine, SessionRank& rank);

}  // namespace overlap::sessions
