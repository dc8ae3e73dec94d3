#include "server/rpc/node_service.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "server/rpc/status_util.h"

namespace overlap::rpc {

NodeService::NodeService(const node::NodeState& state, node::TuningState& tuning,
                         const engine::Engine& engine)
    : state_(state), tuning_(tuning), engine_(engine) {}

grpc::Status NodeService::GetNodeInfo(grpc::ServerContext* context,
                                      const v1::GetNodeInfoRequest* request,
                                      v1::GetNodeInfoResponse* response) {
  *response = state_.Info();
  return grpc::Status::OK;
}

grpc::Status NodeService::GetStats(grpc::ServerContext* context, const v1::GetStatsRequest* request,
                                   v1::GetStatsResponse* response) {
  absl::StatusOr<v1::GetStatsResponse> stats = state_.Stats();
  if (!stats.ok()) {
    GetLogger("rpc")->error("GetStats failed: {}", stats.status().ToString());
    return ToGrpcStatus(stats.status());
  }
  *response = std::move(*stats);
  return grpc::Status::OK;
}

grpc::Status NodeService::ListTunedSchedules(grpc::ServerContext* context,
                                             const v1::ListTunedSchedulesRequest* request,
                                             v1::ListTunedSchedulesResponse* response) {
  absl::StatusOr<std::vector<v1::TunedSchedule>> schedules = tuning_.List(request->filter());
  if (!schedules.ok()) return ToGrpcStatus(schedules.status());
  for (v1::TunedSchedule& s : *schedules) *response->add_schedules() = std::move(s);
  return grpc::Status::OK;
}

grpc::Status NodeService::ForgetTunedSchedules(grpc::ServerContext* context,
                                               const v1::ForgetTunedSchedulesRequest* request,
                                               v1::ForgetTunedSchedulesResponse* response) {
  const v1::TuningFilter& f = request->filter();
  const bool empty =
      f.op_type().empty() && f.m() == 0 && f.k() == 0 && f.n() == 0 && !f.stale_only();
  if (empty && !request->all()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "forget: name what to forget (op type, shape, stale) or ask for all");
  }
  absl::StatusOr<int> forgotten = tuning_.Forget(f);
  if (!forgotten.ok()) return ToGrpcStatus(forgotten.status());
  response->set_forgotten(*forgotten);
  GetLogger("rpc")->info("forgot {} tuned schedule(s)", *forgotten);
  return grpc::Status::OK;
}

grpc::Status NodeService::ForgetXids(grpc::ServerContext* context,
                                     const v1::ForgetXidsRequest* request,
                                     v1::ForgetXidsResponse* response) {
  const int device = request->device();
  if (device < 0 || device >= engine_.DeviceCount()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("forget Xids: no device ", device, " (the daemon has ",
                                     engine_.DeviceCount(), ")"));
  }
  absl::StatusOr<int64_t> forgotten = engine_.ForgetXids(device);
  if (!forgotten.ok()) return ToGrpcStatus(forgotten.status());
  response->set_forgotten(*forgotten);
  GetLogger("rpc")->info("GPU {}: forgot {} Xid(s) of this boot", device, *forgotten);
  return grpc::Status::OK;
}

}  // namespace overlap::rpc
