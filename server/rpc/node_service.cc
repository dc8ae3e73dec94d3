#include "server/rpc/node_service.h"

#include <unistd.h>

#include <climits>
#include <set>
#include <string>

#include "common/library_env.h"
#include "common/logging.h"
#include "overlap_git_commit.h"
#include "server/runner/job_runner.h"
#include "server/rpc/status_util.h"

namespace overlap::rpc {
namespace {

std::string Hostname() {
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "";
  return name;
}

// The environments (tuning_cache.h) a job on this daemon can tune in: one per
// GPU model it has.
std::set<std::string> CurrentEnvironments(const engine::Engine& engine) {
  std::set<std::string> out;
  for (int d = 0; d < engine.DeviceCount(); ++d) out.insert(runner::TuningEnvironment(engine, d));
  return out;
}

absl::StatusOr<runner::TuningFilter> FilterOf(const v1::TuningFilter& f,
                                           const std::set<std::string>& current) {
  if (f.m() < 0 || f.k() < 0 || f.n() < 0) {
    return absl::InvalidArgumentError("tuning filter: m, k and n must not be negative (0 = any)");
  }
  runner::TuningFilter out;
  out.op_type = f.op_type();
  if (f.m() > 0) out.m = f.m();
  if (f.k() > 0) out.k = f.k();
  if (f.n() > 0) out.n = f.n();
  if (f.stale_only()) out.stale_unless_in = current;
  return out;
}

void SetHealth(const engine::DeviceTelemetry& t, v1::Device* device) {
  device->set_pcie_valid(t.pcie_valid);
  device->set_pcie_gen(t.pcie_gen);
  device->set_pcie_max_gen(t.pcie_max_gen);
  device->set_pcie_width(t.pcie_width);
  device->set_pcie_max_width(t.pcie_max_width);
  device->set_pcie_replays(t.pcie_replays);
  device->set_nvlink_valid(t.nvlink_valid);
  device->set_nvlinks_active(t.nvlinks_active);
  device->set_nvlinks_supported(t.nvlinks_supported);
  device->set_nvlink_crc_errors(t.nvlink_crc_errors);
  device->set_nvlink_replay_errors(t.nvlink_replay_errors);
  device->set_nvlink_recovery_errors(t.nvlink_recovery_errors);
  device->set_ecc_valid(t.ecc_valid);
  device->set_ecc_corrected(t.ecc_corrected);
  device->set_ecc_uncorrected(t.ecc_uncorrected);
  device->set_row_remap_valid(t.row_remap_valid);
  device->set_row_remap_pending(t.row_remap_pending);
  device->set_row_remap_failed(t.row_remap_failed);
  device->set_xid_valid(t.xid_valid);
  device->set_xid_errors(t.xid_errors);
  device->set_gpu_xid_errors(t.gpu_xid_errors);
  device->set_last_xid(t.last_xid);
  device->set_last_xid_unix_ms(t.last_xid_unix_ms);
}

}  // namespace

NodeService::NodeService(jobs::Scheduler& scheduler, const engine::Engine& engine,
                         NodeInfoStatic info, const DaemonCounters& counters,
                         runner::TuningCache* tuning_cache)
    : scheduler_(scheduler),
      engine_(engine),
      info_(std::move(info)),
      counters_(counters),
      tuning_cache_(tuning_cache) {}

grpc::Status NodeService::GetNodeInfo(grpc::ServerContext* context,
                                      const v1::GetNodeInfoRequest* request,
                                      v1::GetNodeInfoResponse* response) {
  response->set_backend(engine_.Name());
  response->set_ranks_per_gpu(engine_.RanksPerGpu());
  for (int d = 0; d < engine_.DeviceCount(); ++d) {
    const engine::DeviceInfo info = engine_.GetDeviceInfo(d);
    v1::Device* device = response->add_devices();
    device->set_index(info.index);
    device->set_name(info.name);
    device->set_memory_bytes(info.memory_bytes);
    device->set_memory_used_bytes(engine_.MemoryInUse(d));
    device->set_total_memory_bytes(info.total_memory_bytes);
    device->set_pci_bus_id(info.pci_bus_id);
    const engine::DeviceTelemetry t = engine_.Telemetry(d);
    device->set_telemetry_valid(t.valid);
    device->set_sm_clock_mhz(t.sm_clock_mhz);
    device->set_mem_clock_mhz(t.mem_clock_mhz);
    device->set_temperature_c(t.temperature_c);
    device->set_power_w(t.power_w);
    device->set_utilization_pct(t.utilization_pct);
    device->set_max_sm_clock_mhz(t.max_sm_clock_mhz);
    device->set_clock_limits_valid(t.clock_limits_valid);
    for (const std::string& name : engine::ClockLimitNames(t.clock_limits)) {
      device->add_clock_limits(name);
    }
    device->set_capped_time_valid(t.capped_time_valid);
    device->set_power_capped_s(t.power_capped_s);
    device->set_thermal_capped_s(t.thermal_capped_s);
    SetHealth(t, device);
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

grpc::Status NodeService::ListTunedSchedules(grpc::ServerContext* context,
                                             const v1::ListTunedSchedulesRequest* request,
                                             v1::ListTunedSchedulesResponse* response) {
  if (tuning_cache_ == nullptr) return NoTuningCache();
  const std::set<std::string> current = CurrentEnvironments(engine_);
  absl::StatusOr<runner::TuningFilter> filter = FilterOf(request->filter(), current);
  if (!filter.ok()) return ToGrpcStatus(filter.status());
  absl::StatusOr<std::vector<runner::TunedEntry>> entries = tuning_cache_->List(*filter);
  if (!entries.ok()) return ToGrpcStatus(entries.status());
  for (const runner::TunedEntry& e : *entries) {
    v1::TunedSchedule* t = response->add_schedules();
    t->set_key(e.key.Text());
    t->set_op_type(e.key.op_type);
    t->set_m(e.key.m);
    t->set_k(e.key.k);
    t->set_n(e.key.n);
    t->set_dtype(e.key.dtype);
    t->set_tp(e.key.tp);
    t->set_requested(e.key.requested);
    t->set_schedule(e.choice.schedule.Name());
    t->set_step_ms(e.choice.step_ms);
    t->set_tuned_unix_ms(e.tuned_unix_ms);
    t->set_environment(e.key.environment);
    t->set_current(current.count(e.key.environment) > 0);
  }
  return grpc::Status::OK;
}

grpc::Status NodeService::ForgetTunedSchedules(grpc::ServerContext* context,
                                               const v1::ForgetTunedSchedulesRequest* request,
                                               v1::ForgetTunedSchedulesResponse* response) {
  if (tuning_cache_ == nullptr) return NoTuningCache();
  const v1::TuningFilter& f = request->filter();
  const bool empty =
      f.op_type().empty() && f.m() == 0 && f.k() == 0 && f.n() == 0 && !f.stale_only();
  if (empty && !request->all()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "forget: name what to forget (op type, shape, stale) or ask for all");
  }
  absl::StatusOr<runner::TuningFilter> filter = FilterOf(f, CurrentEnvironments(engine_));
  if (!filter.ok()) return ToGrpcStatus(filter.status());
  absl::StatusOr<int> forgotten = tuning_cache_->Forget(*filter);
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

grpc::Status NodeService::NoTuningCache() const {
  return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                      "this daemon has no tuning cache: it could not open tuning.db in its state "
                      "directory at start (see its log); autotune re-tunes every job");
}

}  // namespace overlap::rpc
