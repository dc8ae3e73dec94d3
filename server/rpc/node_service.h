// overlap.v1.Node: what this daemon runs on and what it has done, a thin
// adapter over the node's state (server/node/): NodeState for GetNodeInfo and
// GetStats, TuningState for the tuned schedules, the engine for ForgetXids.
// What changes the node for everyone (forgetting tuned schedules or Xid
// counts) is for admins (caller.h): PERMISSION_DENIED for others.
#pragma once

#include "overlap/v1/overlap.grpc.pb.h"
#include "server/engine/engine.h"
#include "server/node/node_state.h"
#include "server/node/tuning_state.h"
#include "server/rpc/caller.h"
#include "server/rpc/node_sampler.h"
#include "server/rpc/watch_slots.h"
#include "server/sessions/session_lanes.h"
#include "server/sessions/session_registry.h"

namespace overlap::rpc {

class NodeService final : public v1::Node::Service {
 public:
  // All references must outlive the service.
  // `sessions` and `lanes` are null where the daemon runs no sessions.
  // WatchNode needs `sampler` and `watch_slots` (the slots WatchJob takes
  // too); without them it answers UNIMPLEMENTED.
  NodeService(const node::NodeState& state, node::TuningState& tuning, const engine::Engine& engine,
              const CallerResolver& callers, sessions::SessionRegistry* sessions = nullptr,
              const sessions::SessionLanes* lanes = nullptr, NodeSampler* sampler = nullptr,
              WatchSlots* watch_slots = nullptr);

  grpc::Status GetNodeInfo(grpc::ServerContext* context, const v1::GetNodeInfoRequest* request,
                           v1::GetNodeInfoResponse* response) override;
  grpc::Status GetStats(grpc::ServerContext* context, const v1::GetStatsRequest* request,
                        v1::GetStatsResponse* response) override;
  grpc::Status ListTunedSchedules(grpc::ServerContext* context,
                                  const v1::ListTunedSchedulesRequest* request,
                                  v1::ListTunedSchedulesResponse* response) override;
  grpc::Status ForgetTunedSchedules(grpc::ServerContext* context,
                                    const v1::ForgetTunedSchedulesRequest* request,
                                    v1::ForgetTunedSchedulesResponse* response) override;
  grpc::Status ForgetXids(grpc::ServerContext* context, const v1::ForgetXidsRequest* request,
                          v1::ForgetXidsResponse* response) override;
  grpc::Status GetCalibration(grpc::ServerContext* context,
                              const v1::GetCalibrationRequest* request,
                              v1::GetCalibrationResponse* response) override;
  grpc::Status PutCalibration(grpc::ServerContext* context,
                              const v1::PutCalibrationRequest* request,
                              v1::PutCalibrationResponse* response) override;
  // The caller's sessions; an admin's with all_users, everyone's.
  grpc::Status ListSessions(grpc::ServerContext* context, const v1::ListSessionsRequest* request,
                            v1::ListSessionsResponse* response) override;
  // NOT_FOUND, PERMISSION_DENIED for another owner's (admins may close any),
  // FAILED_PRECONDITION where the daemon runs no sessions.
  grpc::Status CloseSession(grpc::ServerContext* context, const v1::CloseSessionRequest* request,
                            v1::CloseSessionResponse* response) override;
  // A sample every interval (floored at the sampler's base interval) until
  // the caller ends it; RESOURCE_EXHAUSTED when no watch slot is left, or
  // when the reader fell so far behind that it was dropped.
  grpc::Status WatchNode(grpc::ServerContext* context, const v1::WatchNodeRequest* request,
                         grpc::ServerWriter<v1::NodeSample>* writer) override;

 private:
  const node::NodeState& state_;
  node::TuningState& tuning_;
  const engine::Engine& engine_;
  const CallerResolver& callers_;
  sessions::SessionRegistry* const sessions_;
  const sessions::SessionLanes* const lanes_;
  NodeSampler* const sampler_;
  WatchSlots* const watch_slots_;
};

}  // namespace overlap::rpc
