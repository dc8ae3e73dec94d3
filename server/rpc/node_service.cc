#include "server/rpc/node_service.h"

#include <unistd.h>

#include <climits>

#include "common/library_env.h"
#include "common/logging.h"
#include "overlap_git_commit.h"
#include "server/rpc/status_util.h"

namespace overlap::rpc {
namespace {

std::string Hostname() {
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "";
  return name;
}

}  // namespace

NodeService::NodeService(jobs::Scheduler& scheduler, const engine::Engine& engine,
                         NodeInfoStatic info, const DaemonCounters& counters)
    : scheduler_(scheduler), engine_(engine), info_(std::move(info)), counters_(counters) {}

grpc::Status NodeService::GetNodeInfo(grpc::ServerContext* context,
                                      const v1::GetNodeInfoRequest* request,
                                      v1::GetNodeInfoResponse* response) {
  response->set_backend(engine_.Name());
  for (int d = 0; d < engine_.DeviceCount(); ++d) {
    const engine::DeviceInfo info = engine_.GetDeviceInfo(d);
    v1::Device* device = response->add_devices();
    device->set_index(info.index);
    device->set_name(info.name);
    device->set_memory_bytes(info.memory_bytes);
    device->set_memory_used_bytes(engine_.MemoryInUse(d));
    device->set_pci_bus_id(info.pci_bus_id);
    const engine::DeviceTelemetry t = engine_.Telemetry(d);
    device->set_telemetry_valid(t.valid);
    device->set_sm_clock_mhz(t.sm_clock_mhz);
    device->set_mem_clock_mhz(t.mem_clock_mhz);
    device->set_temperature_c(t.temperature_c);
    device->set_power_w(t.power_w);
    device->set_utilization_pct(t.utilization_pct);
  }
  response->set_overlapd_version(OVERLAP_VERSION);
  response->set_git_commit(OVERLAP_GIT_COMMIT);
  const engine::BackendVersions versions = engine_.Versions();
  response->set_cuda_runtime_version(versions.cuda_runtime);
  response->set_cuda_driver_version(versions.cuda_driver);
  response->set_nccl_version(versions.nccl);
  response->set_cublas_version(versions.cublas);
  response->set_hostname(Hostname());
  for (const auto& [name, value] : LibraryEnvironment()) {
    (*response->mutable_library_env())[name] = value;
  }
  {
    absl::MutexLock lock(&mu_);
    response->set_state_dir(info_.state_dir);
    response->set_listen_address(info_.listen_address);
  }
  response->set_healthy(engine_.Healthy() && !scheduler_.draining());
  return grpc::Status::OK;
}

grpc::Status NodeService::GetStats(grpc::ServerContext* context, const v1::GetStatsRequest* request,
                                   v1::GetStatsResponse* response) {
  absl::StatusOr<jobs::SchedulerStats> stats = scheduler_.GetStats();
  if (!stats.ok()) {
    GetLogger("rpc")->error("GetStats failed: {}", stats.status().ToString());
    return ToGrpcStatus(stats.status());
  }
  auto& by_state = *response->mutable_jobs_by_state();
  for (int s = v1::JobState_MIN; s <= v1::JobState_MAX; ++s) {
    if (s == v1::JOB_STATE_UNSPECIFIED || !v1::JobState_IsValid(s)) continue;
    by_state[v1::JobState_Name(static_cast<v1::JobState>(s))] = 0;
  }
  for (const auto& [state, count] : stats->jobs_by_state) {
    by_state[v1::JobState_Name(state)] = count;
  }
  // Every device of this backend, plus any that only earlier runs had.
  for (int d = 0; d < engine_.DeviceCount(); ++d) stats->devices[d];
  for (const auto& [device, row] : stats->devices) {
    v1::DeviceStats* out = response->add_devices();
    out->set_device(device);
    out->set_busy_ms(row.busy_ms);
    out->set_jobs_run(row.jobs_run);
  }
  response->set_uptime_s(absl::ToDoubleSeconds(absl::Now() - counters_.start_time));
  response->set_jobs_submitted(counters_.jobs_submitted.load());
  response->set_jobs_rejected(counters_.jobs_rejected.load());
  return grpc::Status::OK;
}

}  // namespace overlap::rpc
