#include "server/rpc/node_service.h"

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "server/net/status_util.h"
#include "server/rpc/node_sample_source.h"
#include "server/wire/session_wire.h"

namespace overlap::rpc {

namespace {

// The caller, where it is an admin; PERMISSION_DENIED naming `what` otherwise.
absl::StatusOr<Caller> Admin(const CallerResolver& callers, const grpc::ServerContext* context,
                             const char* what) {
  absl::StatusOr<Caller> caller = callers.Resolve(context);
  if (!caller.ok()) return caller.status();
  if (!caller->admin) {
    return absl::PermissionDeniedError(
        absl::StrCat(what,
                     " changes the node for everyone: only an admin (root, or a member of "
                     "admin_group) may, not ",
                     caller->Describe()));
  }
  return caller;
}

// A calibration is stored per tensor-parallel size; getting and putting one
// refuse a negative size alike.
grpc::Status CheckCalibrationTp(int64_t tp) {
  if (tp >= 0) return grpc::Status::OK;
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "calibration: tp must not be negative");
}

}  // namespace

NodeService::NodeService(const node::NodeState& state, node::TuningState& tuning,
                         const engine::Engine& engine, const CallerResolver& callers,
                         sessions::SessionRegistry* sessions, const sessions::SessionLanes* lanes,
                         NodeSampler* sampler, WatchSlots* watch_slots)
    : state_(state),
      tuning_(tuning),
      engine_(engine),
      callers_(callers),
      sessions_(sessions),
      lanes_(lanes),
      sampler_(sampler),
      watch_slots_(watch_slots) {}

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
    return net::ToGrpcStatus(stats.status());
  }
  *response = std::move(*stats);
  return grpc::Status::OK;
}

grpc::Status NodeService::ListTunedSchedules(grpc::ServerContext* context,
                                             const v1::ListTunedSchedulesRequest* request,
                                             v1::ListTunedSchedulesResponse* response) {
  absl::StatusOr<std::vector<v1::TunedSchedule>> schedules = tuning_.List(request->filter());
  if (!schedules.ok()) return net::ToGrpcStatus(schedules.status());
  for (v1::TunedSchedule& s : *schedules) *response->add_schedules() = std::move(s);
  return grpc::Status::OK;
}

grpc::Status NodeService::ForgetTunedSchedules(grpc::ServerContext* context,
                                               const v1::ForgetTunedSchedulesRequest* request,
                                               v1::ForgetTunedSchedulesResponse* response) {
  absl::StatusOr<Caller> admin = Admin(callers_, context, "forgetting tuned schedules");
  if (!admin.ok()) return net::ToGrpcStatus(admin.status());
  const v1::TuningFilter& f = request->filter();
  const bool empty =
      f.op_type().empty() && f.m() == 0 && f.k() == 0 && f.n() == 0 && !f.stale_only();
  if (empty && !request->all()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "forget: name what to forget (op type, shape, stale) or ask for all");
  }
  absl::StatusOr<int> forgotten = tuning_.Forget(f);
  if (!forgotten.ok()) return net::ToGrpcStatus(forgotten.status());
  response->set_forgotten(*forgotten);
  GetLogger("rpc")->info("forgot {} tuned schedule(s), for {}", *forgotten, admin->Describe());
  return grpc::Status::OK;
}

grpc::Status NodeService::GetCalibration(grpc::ServerContext* context,
                                         const v1::GetCalibrationRequest* request,
                                         v1::GetCalibrationResponse* response) {
  if (grpc::Status bad = CheckCalibrationTp(request->tp()); !bad.ok()) return bad;
  absl::StatusOr<v1::GetCalibrationResponse> found = tuning_.GetCalibration(request->tp());
  if (!found.ok()) return net::ToGrpcStatus(found.status());
  *response = std::move(*found);
  return grpc::Status::OK;
}

grpc::Status NodeService::PutCalibration(grpc::ServerContext* context,
                                         const v1::PutCalibrationRequest* request,
                                         v1::PutCalibrationResponse* response) {
  absl::StatusOr<Caller> admin = Admin(callers_, context, "storing a calibration");
  if (!admin.ok()) return net::ToGrpcStatus(admin.status());
  if (grpc::Status bad = CheckCalibrationTp(request->tp()); !bad.ok()) return bad;
  absl::StatusOr<std::string> environment =
      tuning_.PutCalibration(request->calibration_json(), request->tp());
  if (!environment.ok()) return net::ToGrpcStatus(environment.status());
  response->set_environment(*environment);
  GetLogger("rpc")->info("stored a calibration for {}", admin->Describe());
  return grpc::Status::OK;
}

grpc::Status NodeService::ForgetXids(grpc::ServerContext* context,
                                     const v1::ForgetXidsRequest* request,
                                     v1::ForgetXidsResponse* response) {
  absl::StatusOr<Caller> admin = Admin(callers_, context, "forgetting a GPU's Xids");
  if (!admin.ok()) return net::ToGrpcStatus(admin.status());
  const int device = request->device();
  if (device < 0 || device >= engine_.DeviceCount()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        absl::StrCat("forget Xids: no device ", device, " (the daemon has ",
                                     engine_.DeviceCount(), ")"));
  }
  const engine::DeviceMonitor* monitor = engine_.Monitor();
  if (monitor == nullptr) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        engine_.Name() + " backend watches no devices: no Xids to forget");
  }
  absl::StatusOr<int64_t> forgotten = monitor->ForgetXids(device);
  if (!forgotten.ok()) return net::ToGrpcStatus(forgotten.status());
  response->set_forgotten(*forgotten);
  GetLogger("rpc")->info("GPU {}: forgot {} Xid(s) of this boot, for {}", device, *forgotten,
                         admin->Describe());
  return grpc::Status::OK;
}

grpc::Status NodeService::ListSessions(grpc::ServerContext* context,
                                       const v1::ListSessionsRequest* request,
                                       v1::ListSessionsResponse* response) {
  absl::StatusOr<Caller> caller = callers_.Resolve(context);
  if (!caller.ok()) return net::ToGrpcStatus(caller.status());
  if (sessions_ == nullptr) return grpc::Status::OK;  // none to list
  const std::string owner = caller->admin && request->all_users() ? "" : caller->owner;
  const std::vector<sessions::SessionRow> rows = sessions_->List(owner);
  std::map<std::string, sessions::SessionFigures> figures;
  if (lanes_ != nullptr) {
    for (sessions::SessionFigures& f : lanes_->Figures()) figures[f.id] = std::move(f);
  }
  std::set<std::string> listed;
  for (const sessions::SessionRow& row : rows) {
    auto it = figures.find(row.id);
    *response->add_sessions() =
        wire::ToSessionInfo(row, it == figures.end() ? nullptr : &it->second);
    listed.insert(row.id);
  }
  if (lanes_ != nullptr) {
    for (const engine::DeviceLaneFigures& device : lanes_->DeviceFigures()) {
      *response->add_device_lanes() = wire::ToDeviceLaneState(device);
    }
  }
  if (request->lanes() && lanes_ != nullptr) {
    for (const sessions::LaneInterval& interval : lanes_->RecentIntervals()) {
      if (listed.count(interval.session_id) > 0) {
        *response->add_lanes() = wire::ToLaneInterval(interval);
      }
    }
  }
  return grpc::Status::OK;
}

grpc::Status NodeService::CloseSession(grpc::ServerContext* context,
                                       const v1::CloseSessionRequest* request,
                                       v1::CloseSessionResponse* response) {
  absl::StatusOr<Caller> caller = callers_.Resolve(context);
  if (!caller.ok()) return net::ToGrpcStatus(caller.status());
  if (sessions_ == nullptr) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "this daemon runs no sessions (session_socket is off, or its backend "
                        "cannot map another process's memory)");
  }
  absl::Status closed =
      sessions_->Close(request->session_id(), caller->owner, caller->admin, caller->Describe());
  if (!closed.ok()) return net::ToGrpcStatus(closed);
  GetLogger("rpc")->info("session {} closed by {}", request->session_id(), caller->Describe());
  return grpc::Status::OK;
}

grpc::Status NodeService::WatchNode(grpc::ServerContext* context,
                                    const v1::WatchNodeRequest* request,
                                    grpc::ServerWriter<v1::NodeSample>* writer) {
  if (sampler_ == nullptr || watch_slots_ == nullptr) {
    return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "this daemon streams no node samples");
  }
  absl::StatusOr<Caller> caller = callers_.Resolve(context);
  if (!caller.ok()) return net::ToGrpcStatus(caller.status());
  // A stream holds one of gRPC's server threads while it lasts, as WatchJob's do.
  absl::StatusOr<WatchSlots::Slot> slot =
      watch_slots_->Take(caller->owner, caller->Describe(), caller->admin || caller->socket_owner);
  if (!slot.ok()) return net::ToGrpcStatus(slot.status());
  // A reader that never reads leaves Write blocked once gRPC's window is full:
  // dropping the stream cancels the call, which ends that Write.
  std::unique_ptr<NodeSampler::Subscription> subscription = sampler_->Subscribe(
      absl::Milliseconds(request->interval_ms()), [context] { context->TryCancel(); });
  const bool all_sessions = caller->admin;
  // Short waits, so that a caller that went away (or a shutdown) is noticed
  // between samples.
  const absl::Duration wait = std::min(subscription->interval(), absl::Milliseconds(500));
  absl::Status dropped;
  while (dropped.ok()) {
    if (context->IsCancelled()) break;
    absl::StatusOr<NodeSampler::Delivered> next = subscription->Next(wait);
    if (!next.ok()) {
      dropped = next.status();
      break;
    }
    if (next->sample == nullptr) continue;
    v1::NodeSample sample = *next->sample;
    sample.set_interval_ms(
        static_cast<uint32_t>(absl::ToInt64Milliseconds(subscription->interval())));
    sample.set_skipped(next->skipped);
    if (!all_sessions) {
      auto* shown = sample.mutable_sessions();
      shown->erase(std::remove_if(shown->begin(), shown->end(),
                                  [&](const v1::SessionInfo& s) {
                                    return !SessionVisibleTo(s, caller->owner);
                                  }),
                   shown->end());
    }
    if (!writer->Write(sample)) {
      // The client is gone, or the stream was dropped while Write was blocked
      // (the call was cancelled: the client sees CANCELLED, the log says why).
      dropped = subscription->Next(absl::ZeroDuration()).status();
      break;
    }
  }
  if (!dropped.ok()) {
    GetLogger("rpc")->warn("node stream of {} dropped: {}", caller->Describe(),
                           std::string(dropped.message()));
    return net::ToGrpcStatus(dropped);
  }
  return grpc::Status::CANCELLED;
}

}  // namespace overlap::rpc
