// The flight rings of a job spanning daemons, across its nodes: each part
// records its collectives under the job's global id, with the job's global
// ranks and only its own node's (flight::FlightEngine's scope), so that the
// rings of every node compare by communicator and seq. On a timeout or an
// abort the coordinator reads every node's (GetPartFlight; its own from its
// recorder) and judges them together: the verdict names the rank, its node
// and the collective, or the nodes whose rings could not be read.
//
// Thread safety: every function may be called from any thread.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/cluster/cluster_common.h"
#include "server/flight/flight_analysis.h"
#include "server/flight/flight_recorder.h"
#include "server/peer/peer_link.h"

namespace overlap::cluster {

// How long one node's rings may take to come: a node that stops answering
// costs the verdict this much, once (the nodes are asked at once).
inline constexpr absl::Duration kFlightReadDeadline = absl::Seconds(5);

// The failures a flight verdict explains: an abort, a timeout, a lost node.
bool FlightExplains(absl::StatusCode code);

// This node's rings of the job `id`, at most `max_entries` entries in all
// (each ring keeps its newest past that, truncated set).
peer::PartFlight PartFlightOf(const flight::FlightRecorder& recorder, const peer::GlobalJobId& id,
                              int max_entries = peer::kMaxPartFlightEntries);

// Every node's rings of the job `id` over `nodes`, each ring with its node:
// this node's (options.node_name) from options.flight, the others' through
// `link`, all at once. A node that did not answer is in `unread`, with why.
flight::GatheredRings GatherFlight(const ClusterOptions& options, peer::PeerLink& link,
                                   const peer::GlobalJobId& id,
                                   const std::vector<std::string>& nodes);

}  // namespace overlap::cluster
