// CrossProcessCollectives: collectives between processes (the ranks of a job
// spanning daemons), where the backend's library makes communicators across
// them (NCCL). Engines without them answer null to Engine::CrossProcess(); the
// host backend's cross-process collectives are Gloo's, over its HostWorkQueue
// (server/cluster/cross_node_transport.h picks between them).
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/engine/engine_types.h"

namespace overlap::engine {

class CrossProcessCollectives {
 public:
  virtual ~CrossProcessCollectives() = default;

  // A communicator is named by an id from NewCommunicatorId, made in one
  // process and handed to the others (the job's store carries it).
  virtual absl::StatusOr<std::string> NewCommunicatorId() = 0;
  // Each process issues every collective on the communicator with its own
  // ranks: args.ranks[i] is rank global_ranks[i] of `nranks`. `count` as in
  // CollectiveArgs, so an all-gather receives count x nranks.
  virtual absl::Status CrossProcessCollective(CollectiveOp op, const std::string& id, int nranks,
                                              const std::vector<int>& global_ranks,
                                              const CollectiveArgs& args) = 0;
};

}  // namespace overlap::engine
