#include "server/node/node_state.h"

#include <unistd.h>

#include <climits>
#include <string>
#include <utility>

#include "common/graph_parser.h"
#include "common/library_env.h"
#include "overlap_git_commit.h"

namespace overlap::node {
namespace {

std::string Hostname() {
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "";
  return name;
}

void SetTelemetry(const engine::DeviceTelemetry& t, v1::Device* device) {
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
  device->set_energy_valid(t.energy_valid);
  device->set_energy_j(t.energy_j);
  device->set_nvlink_traffic_valid(t.nvlink_traffic_valid);
  device->set_nvlink_tx_bytes(t.nvlink_tx_bytes);
  device->set_nvlink_rx_bytes(t.nvlink_rx_bytes);
}

}  // namespace

NodeState::NodeState(jobs::JobQueue& queue, const engine::Engine& engine, std::string state_dir)
    : queue_(queue), engine_(engine), state_dir_(std::move(state_dir)) {}

void NodeState::set_cluster(ClusterInfo cluster) {
  absl::MutexLock lock(&mu_);
  cluster_ = std::move(cluster);
}

void NodeState::set_listen_address(const std::string& address) {
  absl::MutexLock lock(&mu_);
  listen_address_ = address;
}

v1::GetNodeInfoResponse NodeState::Info() const {
  v1::GetNodeInfoResponse response;
  response.set_backend(engine_.Name());
  response.set_ranks_per_gpu(engine_.RanksPerGpu());
  response.set_lanes(engine_.DescribeLanes());
  if (flight_ != nullptr) {
    const flight::RecorderUsage usage = flight_->Usage();
    v1::FlightRecorderUsage* out = response.mutable_flight_recorder();
    out->set_rings(usage.rings);
    out->set_entries(usage.entries);
    out->set_bytes(usage.bytes);
    out->set_entries_per_ring(usage.entries_per_ring);
    out->set_cap_bytes(usage.cap_bytes);
  }
  // An engine without a monitor reads as idle and healthy: it has nothing to watch.
  const engine::DeviceMonitor* monitor = engine_.Monitor();
  for (int d = 0; d < engine_.DeviceCount(); ++d) {
    const engine::DeviceInfo info = engine_.GetDeviceInfo(d);
    v1::Device* device = response.add_devices();
    device->set_index(info.index);
    device->set_name(info.name);
    device->set_memory_bytes(info.memory_bytes);
    device->set_memory_used_bytes(monitor != nullptr ? monitor->MemoryInUse(d) : 0);
    device->set_total_memory_bytes(info.total_memory_bytes);
    device->set_pci_bus_id(info.pci_bus_id);
    device->set_uuid(info.uuid);
    device->set_model_name(info.model_name);
    device->set_nvml_index(info.nvml_index);
    device->set_nvml_pci_bus_id(info.nvml_pci_bus_id);
    const engine::DeviceTelemetry t =
        monitor != nullptr ? monitor->Telemetry(d) : engine::DeviceTelemetry{};
    SetTelemetry(t, device);
    SetHealth(t, device);
  }
  response.set_overlapd_version(OVERLAP_VERSION);
  response.set_git_commit(OVERLAP_GIT_COMMIT);
  const engine::BackendVersions versions = engine_.Versions();
  response.set_cuda_runtime_version(versions.cuda_runtime);
  response.set_cuda_driver_version(versions.cuda_driver);
  response.set_nccl_version(versions.nccl);
  response.set_cublas_version(versions.cublas);
  response.set_hostname(Hostname());
  for (const auto& [name, value] : LibraryEnvironment()) {
    (*response.mutable_library_env())[name] = value;
  }
  response.set_state_dir(state_dir_);
  {
    absl::MutexLock lock(&mu_);
    response.set_listen_address(listen_address_);
    response.set_node_name(cluster_.node_name);
    for (const std::string& peer : cluster_.peers) response.add_peers(peer);
    response.set_cross_daemon_transport(cluster_.transport);
    response.set_cross_daemon_note(cluster_.note);
  }
  response.set_healthy((monitor == nullptr || monitor->Healthy()) && !queue_.draining());
  return response;
}

absl::StatusOr<v1::GetStatsResponse> NodeState::Stats() const {
  absl::StatusOr<jobs::JobQueueStats> stats = queue_.GetStats();
  if (!stats.ok()) return stats.status();
  v1::GetStatsResponse response;
  auto& by_state = *response.mutable_jobs_by_state();
  for (int s = v1::JobState_MIN; s <= v1::JobState_MAX; ++s) {
    if (s == v1::JOB_STATE_UNSPECIFIED || !v1::JobState_IsValid(s)) continue;
    by_state[v1::JobState_Name(static_cast<v1::JobState>(s))] = 0;
  }
  for (const auto& [state, count] : stats->jobs_by_state) {
    by_state[jobs::JobStateName(state)] = count;
  }
  // Every device of this backend, plus any that only earlier runs had.
  for (int d = 0; d < engine_.DeviceCount(); ++d) stats->devices[d];
  for (const auto& [device, row] : stats->devices) {
    v1::DeviceStats* out = response.add_devices();
    out->set_device(device);
    out->set_busy_ms(row.busy_ms);
    out->set_jobs_run(row.jobs_run);
  }
  response.set_uptime_s(absl::ToDoubleSeconds(absl::Now() - counters_.start_time));
  response.set_jobs_submitted(counters_.jobs_submitted.load());
  response.set_requests_refused_busy(counters_.requests_refused_busy.load());
  response.set_requests_abandoned(counters_.requests_abandoned.load());
  response.set_jobs_rejected(counters_.jobs_rejected.load());
  response.set_graphs_parsed(GraphsParsed());
  return response;
}

}  // namespace overlap::node
