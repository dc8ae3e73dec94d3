// What a NodeSample holds, read from the daemon's parts: the devices as
// GetNodeInfo shows them (NodeState), the running jobs with their progress and
// last finished op (its step and exposed communication), and the open
// sessions with their lane figures. The sampler (node_sampler.h) calls it once
// per base interval for every stream.
#pragma once

#include <string>

#include "overlap/v1/overlap.pb.h"
#include "server/jobs/job_queue.h"
#include "server/node/node_state.h"
#include "server/sessions/session_lanes.h"
#include "server/sessions/session_registry.h"

namespace overlap::rpc {

// The running jobs a sample carries, at most.
inline constexpr int kSampleMaxRunningJobs = 64;

struct NodeSampleParts {
  const node::NodeState& node;
  jobs::JobQueue& queue;
  const sessions::SessionRegistry* sessions = nullptr;  // null: the daemon runs none
  const sessions::SessionLanes* lanes = nullptr;
};

// Every open session is in the sample; a stream shows each caller only theirs
// (SessionVisibleTo). A job list the store cannot read leaves `running` empty.
v1::NodeSample TakeNodeSample(const NodeSampleParts& parts);

// Whether `session` (as ToSessionInfo shows its owner: "name (key)" or the
// key) belongs to the caller owning `owner_key`.
bool SessionVisibleTo(const v1::SessionInfo& session, const std::string& owner_key);

}  // namespace overlap::rpc
