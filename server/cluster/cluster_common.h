// What the coordinator (coordinator.h) and the part host (part_host.h) share:
// the daemon's cluster options, how a job is named across daemons, and the
// deadlines of the calls between them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "server/cluster/cross_node_transport.h"
#include "server/flight/flight_recorder.h"
#include "server/peer/part_calls.h"

namespace overlap::cluster {

struct ClusterOptions {
  std::string node_name;                   // this daemon's peer address, as its peers list it
  std::vector<std::string> peers;          // the daemons it may run jobs with
  std::string bind_address = "127.0.0.1";  // this node's Gloo connections bind here
  absl::Duration hold_timeout = absl::Seconds(10);
  absl::Duration collective_timeout = absl::Seconds(60);
  int max_jobs = 4;  // jobs this daemon coordinates at once, queued or running
  // The highest priority a part whose owner is not an admin may have here.
  int max_user_priority = 10;
  // When this daemon started: a job or part submitted before it never runs.
  int64_t started_unix_ms = 0;
  // The daemon's flight recorder (it must outlive the cluster): each part
  // records its collectives there under the job's global id
  // (gather_flight.h). Null: nothing is recorded, no verdict is given.
  flight::FlightRecorder* flight = nullptr;

  bool IsPeer(const std::string& node) const {
    return std::find(peers.begin(), peers.end(), node) != peers.end();
  }
  // This daemon as the caller of its own calls, made without the network.
  peer::PeerCaller Self() const {
    peer::PeerCaller self;
    self.node = node_name;
    return self;
  }
};

// How long one HoldPart call may wait at the coordinator before answering
// WAIT: short enough that a part notices its own cancel soon.
inline constexpr absl::Duration kHoldPoll = absl::Seconds(1);
// Calls that do not wait for anything.
inline constexpr absl::Duration kCallDeadline = absl::Seconds(10);
// How long CancelPart waits for its part to reach a final state before it
// answers (DEADLINE_EXCEEDED, naming the part): under kCallDeadline, so that
// the coordinator hears the part's own answer rather than its call's timeout.
inline constexpr absl::Duration kPartEndWait = absl::Seconds(8);

// FAILED_PRECONDITION on a backend that can carry no cross-node transport
// (cross_node_transport.h; CUDA with ranks_per_gpu above 1).
inline absl::Status CheckBackend(const engine::Engine& engine) {
  if (TransportFor(engine) != nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("jobs spanning daemons need collectives between processes, which this daemon's ",
                   engine.Name(),
                   " backend does not have here (NCCL refuses two ranks of one communicator "
                   "on one GPU: ranks_per_gpu must be 1)"));
}

}  // namespace overlap::cluster
