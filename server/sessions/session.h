// A session: the ranks of one training job on this node that hand the daemon
// their own tensors and ask for the graph's ops on their streams
// (docs/SESSIONS.md). The session socket (session_socket.h) builds one from
// the ranks' handshakes; once every rank is ready it hands it to the lanes
// (session_lanes.h), which run its commands until it ends. Plain values and
// handles only: no wire types, no sockets.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/graph.h"
#include "common/schedule.h"
#include "common/session_ring.h"
#include "common/unix_frames.h"
#include "server/engine/engine_types.h"

namespace overlap::sessions {

enum class Priority { kCritical, kDeferred };

// One op's tensors on one rank: buffers imported from the client's shared
// memory (engine::SharedMemory::ImportBuffer). kNoBuffer where the op has no
// such tensor (a collective alone has no W).
struct RankTensors {
  engine::BufferId x = engine::kNoBuffer;
  engine::BufferId w = engine::kNoBuffer;
  engine::BufferId y = engine::kNoBuffer;
};

// One rank: its device, the ring it posts commands on, its doorbells and
// what it registered. The ring memory is the daemon's own mapping of the
// memfd it created (the client maps the same pages).
struct SessionRank {
  int rank = 0;
  int device = 0;
  pid_t pid = 0;                                 // the client process (SO_PEERCRED), for messages
  SessionRing* ring = nullptr;                   // mapped, kSessionRingBytes
  OwnedFd ring_fd;                               // the memfd behind `ring`
  OwnedFd posted_doorbell;                       // eventfd: the client writes it after posting
  OwnedFd completed_doorbell;                    // eventfd: the daemon writes it after completing
  std::vector<RankTensors> tensors;              // by op index
  engine::BufferId signals = engine::kNoBuffer;  // kSignalBytes (session_ring.h)
  int64_t mapped_bytes = 0;
};

// Everything the lanes need to run a session; the socket fills it and the
// lanes own it from SessionLanes::Add on.
struct SessionSetup {
  std::string id;     // "sess-000003"
  std::string name;   // the client's name for it, unique per owner while open
  std::string owner;  // "uid:1000", as jobs are owned
  std::string owner_name;
  JobSpec graph;                         // parsed and validated: ops, dtype, mesh
  std::vector<ops::Schedule> schedules;  // by op index: what each op runs
  Priority priority = Priority::kCritical;
  double deferred_bound_ms = 0;
  int64_t chunk_bytes = 256 * 1024;  // a deferred all_reduce's chunk
  absl::Duration step_timeout;       // an "inputs ready" never recorded fails the step after this
  std::vector<SessionRank> ranks;    // by rank
  absl::Time opened_at;
};

}  // namespace overlap::sessions
