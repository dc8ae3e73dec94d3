#include "server/cuda/nvml_telemetry.h"

#include <dlfcn.h>

#include <chrono>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/xid.h"

namespace overlap::cuda {

// The few NVML entry points we use, declared here from NVML's stable C ABI
// (nvml.h is not part of the toolkit on every machine): return 0 = NVML_SUCCESS.
struct NvmlTelemetry::Api {
  struct Utilization {
    unsigned int gpu;
    unsigned int memory;
  };
  int (*init)() = nullptr;
  int (*shutdown)() = nullptr;
  int (*handle_by_pci)(const char*, void**) = nullptr;
  int (*clock)(void*, int, unsigned int*) = nullptr;        // 1 = SM, 2 = memory
  int (*temperature)(void*, int, unsigned int*) = nullptr;  // 0 = GPU sensor
  int (*power)(void*, unsigned int*) = nullptr;             // milliwatts
  int (*utilization)(void*, Utilization*) = nullptr;
  int (*index)(void*, unsigned int*) = nullptr;  // optional
  // Optional: an older driver may lack them, and the rest still works.
  struct ViolationTime {
    unsigned long long reference_us;  // CPU timestamp
    unsigned long long violation_ns;  // cumulative
  };
  int (*max_clock)(void*, int, unsigned int*) = nullptr;       // 1 = SM
  int (*clock_reasons)(void*, unsigned long long*) = nullptr;  // bitmask
  int (*violation)(void*, int, ViolationTime*) = nullptr;      // 0 = power, 1 = thermal
  // Health; each optional too.
  int (*pcie_gen)(void*, unsigned int*) = nullptr;
  int (*pcie_max_gen)(void*, unsigned int*) = nullptr;
  int (*pcie_width)(void*, unsigned int*) = nullptr;
  int (*pcie_max_width)(void*, unsigned int*) = nullptr;
  int (*pcie_replays)(void*, unsigned int*) = nullptr;
  int (*nvlink_state)(void*, unsigned int, int*) = nullptr;  // link; 1 = active
  // link, counter (0 replay, 1 recovery, 2 CRC flit, 3 CRC data)
  int (*nvlink_errors)(void*, unsigned int, int, unsigned long long*) = nullptr;
  // error type (1 = uncorrected), counter type (0 = volatile)
  int (*ecc_errors)(void*, int, int, unsigned long long*) = nullptr;
  // corrected rows, uncorrected rows, pending, failure occurred
  int (*remapped_rows)(void*, unsigned int*, unsigned int*, unsigned int*, unsigned int*) = nullptr;
  // Energy and NVLink traffic; optional (energy from Volta on).
  int (*total_energy)(void*, unsigned long long*) = nullptr;  // millijoules
  struct FieldValue {                                         // nvmlFieldValue_t
    unsigned int field_id;
    unsigned int scope_id;  // the link; UINT_MAX = summed over the links
    long long timestamp_us;
    long long latency_us;
    int value_type;
    int nvml_return;
    unsigned long long value;  // nvmlValue_t, a union of 8 bytes
  };
  static constexpr unsigned int kNvLinkDataTx = 138;  // NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, KiB
  static constexpr unsigned int kNvLinkDataRx = 139;
  int (*field_values)(void*, int, FieldValue*) = nullptr;
  // Xid events.
  struct EventData {
    void* device;
    unsigned long long type;
    unsigned long long data;  // the Xid
    unsigned int gpu_instance;
    unsigned int compute_instance;
  };
  static constexpr unsigned long long kXidEvent = 0x8;  // nvmlEventTypeXidCriticalError
  static constexpr int kTimeout = 10;                   // NVML_ERROR_TIMEOUT
  int (*event_set_create)(void**) = nullptr;
  int (*event_set_free)(void*) = nullptr;
  int (*register_events)(void*, unsigned long long, void*) = nullptr;
  int (*event_wait)(void*, EventData*, unsigned int) = nullptr;  // milliseconds
  const char* (*error_string)(int) = nullptr;
};

namespace {

template <typename Fn>
bool Resolve(void* library, const char* name, Fn* out) {
  *out = reinterpret_cast<Fn>(dlsym(library, name));
  return *out != nullptr;
}

}  // namespace

std::unique_ptr<NvmlTelemetry> NvmlTelemetry::Open(const std::vector<std::string>& pci_bus_ids,
                                                   std::unique_ptr<engine::XidLog> xid_log) {
  auto log = GetLogger("cuda");
  void* library = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    log->info("no NVML ({}): device telemetry off", dlerror());
    return nullptr;
  }
  auto api = std::make_unique<Api>();
  const bool ok = Resolve(library, "nvmlInit_v2", &api->init) &&
                  Resolve(library, "nvmlShutdown", &api->shutdown) &&
                  Resolve(library, "nvmlDeviceGetHandleByPciBusId_v2", &api->handle_by_pci) &&
                  Resolve(library, "nvmlDeviceGetClockInfo", &api->clock) &&
                  Resolve(library, "nvmlDeviceGetTemperature", &api->temperature) &&
                  Resolve(library, "nvmlDeviceGetPowerUsage", &api->power) &&
                  Resolve(library, "nvmlDeviceGetUtilizationRates", &api->utilization);
  Resolve(library, "nvmlDeviceGetMaxClockInfo", &api->max_clock);
  Resolve(library, "nvmlDeviceGetIndex", &api->index);
  // Renamed in driver 535; the old name stays exported.
  if (!Resolve(library, "nvmlDeviceGetCurrentClocksEventReasons", &api->clock_reasons)) {
    Resolve(library, "nvmlDeviceGetCurrentClocksThrottleReasons", &api->clock_reasons);
  }
  Resolve(library, "nvmlDeviceGetViolationStatus", &api->violation);
  Resolve(library, "nvmlDeviceGetCurrPcieLinkGeneration", &api->pcie_gen);
  Resolve(library, "nvmlDeviceGetMaxPcieLinkGeneration", &api->pcie_max_gen);
  Resolve(library, "nvmlDeviceGetCurrPcieLinkWidth", &api->pcie_width);
  Resolve(library, "nvmlDeviceGetMaxPcieLinkWidth", &api->pcie_max_width);
  Resolve(library, "nvmlDeviceGetPcieReplayCounter", &api->pcie_replays);
  Resolve(library, "nvmlDeviceGetNvLinkState", &api->nvlink_state);
  Resolve(library, "nvmlDeviceGetNvLinkErrorCounter", &api->nvlink_errors);
  Resolve(library, "nvmlDeviceGetTotalEccErrors", &api->ecc_errors);
  Resolve(library, "nvmlDeviceGetRemappedRows", &api->remapped_rows);
  Resolve(library, "nvmlDeviceGetTotalEnergyConsumption", &api->total_energy);
  Resolve(library, "nvmlDeviceGetFieldValues", &api->field_values);
  Resolve(library, "nvmlEventSetCreate", &api->event_set_create);
  Resolve(library, "nvmlEventSetFree", &api->event_set_free);
  Resolve(library, "nvmlDeviceRegisterEvents", &api->register_events);
  Resolve(library, "nvmlEventSetWait_v2", &api->event_wait);
  Resolve(library, "nvmlErrorString", &api->error_string);
  if (!ok || api->init() != 0) {
    log->info("NVML unusable ({}): device telemetry off",
              ok ? "nvmlInit failed" : "missing symbol");
    dlclose(library);
    return nullptr;
  }
  std::vector<void*> handles;
  for (const std::string& pci : pci_bus_ids) {
    void* handle = nullptr;
    if (api->handle_by_pci(pci.c_str(), &handle) != 0) handle = nullptr;
    handles.push_back(handle);
  }
  std::unique_ptr<NvmlTelemetry> telemetry(new NvmlTelemetry(
      library, std::move(api), std::move(handles), pci_bus_ids, std::move(xid_log)));
  telemetry->StartXidWatch();
  return telemetry;
}

NvmlTelemetry::NvmlTelemetry(void* library, std::unique_ptr<Api> api, std::vector<void*> handles,
                             std::vector<std::string> pci_bus_ids,
                             std::unique_ptr<engine::XidLog> xid_log)
    : library_(library),
      api_(std::move(api)),
      handles_(std::move(handles)),
      pci_bus_ids_(std::move(pci_bus_ids)),
      xid_log_(std::move(xid_log)),
      xid_registered_(handles_.size(), false),
      xids_(handles_.size()) {
  if (xid_log_ == nullptr) return;
  absl::StatusOr<std::map<std::string, engine::XidCounts>> kept = xid_log_->Counts();
  if (!kept.ok()) {
    GetLogger("cuda")->warn("Xid counts from before this start are lost: {}",
                            kept.status().ToString());
    return;
  }
  absl::MutexLock lock(&xid_mu_);
  for (size_t d = 0; d < pci_bus_ids_.size(); ++d) {
    auto it = kept->find(pci_bus_ids_[d]);
    if (it == kept->end()) continue;
    xids_[d] = it->second;
    GetLogger("cuda")->log(
        it->second.gpu > 0 ? spdlog::level::err : spdlog::level::info,
        "GPU {}: {} Xid(s) this boot from before this start, {} pointing at the GPU (last {}); "
        "once the GPU is reset, `overlapctl health --forget-xids {}` clears them",
        d, it->second.all, it->second.gpu, DescribeXid(it->second.last), d);
  }
}

NvmlTelemetry::~NvmlTelemetry() {
  stop_ = true;
  if (xid_thread_.joinable()) xid_thread_.join();
  if (event_set_ != nullptr) api_->event_set_free(event_set_);
  api_->shutdown();
  dlclose(library_);
}

void NvmlTelemetry::StartXidWatch() {
  auto log = GetLogger("cuda");
  const Api& api = *api_;
  if (api.event_set_create == nullptr || api.event_set_free == nullptr ||
      api.register_events == nullptr || api.event_wait == nullptr) {
    log->info("NVML has no event calls: Xid errors are not counted");
    return;
  }
  if (int rc = api.event_set_create(&event_set_); rc != 0) {
    log->info("NVML event set: error {}: Xid errors are not counted", rc);
    event_set_ = nullptr;
    return;
  }
  bool any = false;
  for (size_t d = 0; d < handles_.size(); ++d) {
    if (handles_[d] == nullptr) continue;
    const int rc = api.register_events(handles_[d], Api::kXidEvent, event_set_);
    xid_registered_[d] = rc == 0;
    any = any || rc == 0;
    if (rc != 0) {
      log->info("GPU {}: NVML refused Xid events ({}): its Xid errors are not counted", d,
                api.error_string != nullptr ? api.error_string(rc) : std::to_string(rc).c_str());
    }
  }
  if (!any) {
    api.event_set_free(event_set_);
    event_set_ = nullptr;
    return;
  }
  xid_thread_ = std::thread([this] { WatchXids(); });
}

void NvmlTelemetry::WatchXids() {
  auto log = GetLogger("cuda");
  int last_error = 0;
  while (!stop_) {
    Api::EventData event{};
    // A short wait, so that the destructor's join is prompt.
    const int rc = api_->event_wait(event_set_, &event, 200);
    if (rc == Api::kTimeout) continue;
    if (rc != 0) {
      if (rc != last_error) log->warn("NVML event wait: error {}; retrying each second", rc);
      last_error = rc;
      std::this_thread::sleep_for(std::chrono::seconds(1));
      continue;
    }
    last_error = 0;
    if ((event.type & Api::kXidEvent) == 0) continue;
    int device = -1;
    for (size_t d = 0; d < handles_.size(); ++d) {
      if (handles_[d] == event.device) device = static_cast<int>(d);
    }
    if (device < 0) continue;
    const uint64_t xid = event.data;
    const bool gpu = XidPointsAtTheGpu(xid);
    // Error level where it points at the GPU: that is what an operator must act on.
    log->log(gpu ? spdlog::level::err : spdlog::level::warn, "GPU {}: {}{}", device,
             DescribeXid(xid), gpu ? ": the GPU itself; `overlapctl health` shows it" : "");
    const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
    {
      absl::MutexLock lock(&xid_mu_);
      engine::XidCounts& c = xids_[device];
      ++c.all;
      if (gpu) ++c.gpu;
      c.last = xid;
      c.last_unix_ms = now_ms;
    }
    if (xid_log_ != nullptr) {
      if (absl::Status s = xid_log_->Record(pci_bus_ids_[device], xid, now_ms); !s.ok()) {
        log->warn("GPU {}: this Xid is counted, but a restart will forget it: {}", device,
                  s.ToString());
      }
    }
  }
}

absl::StatusOr<int64_t> NvmlTelemetry::ForgetXids(int device) {
  if (device < 0 || device >= static_cast<int>(handles_.size()) || !xid_registered_[device]) {
    return absl::FailedPreconditionError(
        absl::StrCat("GPU ", device, ": NVML does not report its Xid errors"));
  }
  if (xid_log_ != nullptr) RETURN_IF_ERROR(xid_log_->Forget(pci_bus_ids_[device]));
  absl::MutexLock lock(&xid_mu_);
  const int64_t forgotten = xids_[device].all;
  xids_[device] = engine::XidCounts{};
  return forgotten;
}

int NvmlTelemetry::Index(int device) const {
  if (device < 0 || device >= static_cast<int>(handles_.size()) || handles_[device] == nullptr ||
      api_->index == nullptr) {
    return -1;
  }
  unsigned int index = 0;
  return api_->index(handles_[device], &index) == 0 ? static_cast<int>(index) : -1;
}

engine::DeviceTelemetry NvmlTelemetry::Read(int device) const {
  engine::DeviceTelemetry t;
  if (device < 0 || device >= static_cast<int>(handles_.size()) || handles_[device] == nullptr) {
    return t;
  }
  void* h = handles_[device];
  unsigned int sm = 0, mem = 0, temp = 0, milliwatts = 0;
  Api::Utilization util{};
  if (api_->clock(h, 1, &sm) != 0 || api_->clock(h, 2, &mem) != 0 ||
      api_->temperature(h, 0, &temp) != 0) {
    return t;
  }
  t.valid = true;
  t.sm_clock_mhz = static_cast<int>(sm);
  t.mem_clock_mhz = static_cast<int>(mem);
  t.temperature_c = static_cast<int>(temp);
  if (api_->power(h, &milliwatts) == 0) t.power_w = milliwatts / 1000.0;
  if (api_->utilization(h, &util) == 0) t.utilization_pct = static_cast<int>(util.gpu);
  unsigned int max_sm = 0;
  if (api_->max_clock != nullptr && api_->max_clock(h, 1, &max_sm) == 0) {
    t.max_sm_clock_mhz = static_cast<int>(max_sm);
  }
  unsigned long long reasons = 0;
  if (api_->clock_reasons != nullptr && api_->clock_reasons(h, &reasons) == 0) {
    t.clock_limits_valid = true;
    t.clock_limits = reasons;
  }
  Api::ViolationTime power{}, thermal{};
  if (api_->violation != nullptr && api_->violation(h, 0, &power) == 0 &&
      api_->violation(h, 1, &thermal) == 0) {
    t.capped_time_valid = true;
    t.power_capped_s = power.violation_ns * 1e-9;
    t.thermal_capped_s = thermal.violation_ns * 1e-9;
  }
  ReadHealth(h, &t);
  if (absl::StatusOr<double> joules = EnergyJoules(device); joules.ok()) {
    t.energy_valid = true;
    t.energy_j = *joules;
  }
  ReadNvLinkTraffic(h, &t);
  if (xid_registered_[device]) {
    absl::MutexLock lock(&xid_mu_);
    const engine::XidCounts& c = xids_[device];
    t.xid_valid = true;
    t.xid_errors = c.all;
    t.gpu_xid_errors = c.gpu;
    t.last_xid = c.last;
    t.last_xid_unix_ms = c.last_unix_ms;
  }
  return t;
}

absl::StatusOr<double> NvmlTelemetry::EnergyJoules(int device) const {
  if (device < 0 || device >= static_cast<int>(handles_.size()) || handles_[device] == nullptr) {
    return absl::UnimplementedError(absl::StrCat("GPU ", device, ": NVML does not know it"));
  }
  if (api_->total_energy == nullptr) {
    return absl::UnimplementedError("NVML has no nvmlDeviceGetTotalEnergyConsumption");
  }
  unsigned long long millijoules = 0;
  if (const int rc = api_->total_energy(handles_[device], &millijoules); rc != 0) {
    // NVML_ERROR_NOT_SUPPORTED before Volta, and on some virtual GPUs.
    return absl::UnimplementedError(absl::StrCat(
        "GPU ", device, ": NVML energy counter not supported: ",
        api_->error_string != nullptr ? api_->error_string(rc) : std::to_string(rc).c_str()));
  }
  return static_cast<double>(millijoules) / 1000.0;
}

absl::Duration NvmlTelemetry::EnergyCounterPeriod(int device) const {
  {
    absl::MutexLock lock(&period_mu_);
    if (energy_periods_.size() > static_cast<size_t>(device) && energy_periods_[device]) {
      return *energy_periods_[device];
    }
  }
  // The counter's value changes only when the driver folds in a new power
  // sample: the time between two changes is its period. Polled outside the
  // lock; two callers probing at once both store the same kind of figure.
  absl::Duration period = absl::ZeroDuration();
  absl::StatusOr<double> last = EnergyJoules(device);
  if (last.ok()) {
    std::optional<absl::Time> first_change;
    const absl::Time deadline = absl::Now() + kPeriodProbe;
    while (absl::Now() < deadline) {
      absl::SleepFor(absl::Microseconds(500));
      absl::StatusOr<double> now = EnergyJoules(device);
      if (!now.ok()) break;
      if (*now == *last) continue;
      last = now;
      if (!first_change) {
        first_change = absl::Now();
        continue;
      }
      period = absl::Now() - *first_change;
      break;
    }
  }
  GetLogger("cuda")->info("GPU {}: NVML's energy counter moves every {:.1f} ms{}", device,
                          absl::ToDoubleMilliseconds(period),
                          period == absl::ZeroDuration() ? " (it did not move twice in the probe)" : "");
  absl::MutexLock lock(&period_mu_);
  if (energy_periods_.size() <= static_cast<size_t>(device)) energy_periods_.resize(device + 1);
  energy_periods_[device] = period;
  return period;
}

void NvmlTelemetry::ReadNvLinkTraffic(void* h, engine::DeviceTelemetry* t) const {
  if (api_->field_values == nullptr) return;
  Api::FieldValue values[2] = {};
  values[0].field_id = Api::kNvLinkDataTx;
  values[1].field_id = Api::kNvLinkDataRx;
  values[0].scope_id = values[1].scope_id = 0xFFFFFFFFu;
  if (api_->field_values(h, 2, values) != 0 || values[0].nvml_return != 0 ||
      values[1].nvml_return != 0) {
    return;  // a GPU without NVLink, or a driver that does not count it
  }
  t->nvlink_traffic_valid = true;
  t->nvlink_tx_bytes = static_cast<int64_t>(values[0].value) * 1024;
  t->nvlink_rx_bytes = static_cast<int64_t>(values[1].value) * 1024;
}

void NvmlTelemetry::ReadHealth(void* h, engine::DeviceTelemetry* t) const {
  const Api& api = *api_;
  unsigned int gen = 0, max_gen = 0, width = 0, max_width = 0, replays = 0;
  if (api.pcie_gen != nullptr && api.pcie_max_gen != nullptr && api.pcie_width != nullptr &&
      api.pcie_max_width != nullptr && api.pcie_gen(h, &gen) == 0 &&
      api.pcie_max_gen(h, &max_gen) == 0 && api.pcie_width(h, &width) == 0 &&
      api.pcie_max_width(h, &max_width) == 0) {
    t->pcie_valid = true;
    t->pcie_gen = static_cast<int>(gen);
    t->pcie_max_gen = static_cast<int>(max_gen);
    t->pcie_width = static_cast<int>(width);
    t->pcie_max_width = static_cast<int>(max_width);
    if (api.pcie_replays != nullptr && api.pcie_replays(h, &replays) == 0) {
      t->pcie_replays = replays;
    }
  }
  if (api.nvlink_state != nullptr) {
    for (unsigned int link = 0; link < kMaxNvLinks; ++link) {
      int active = 0;
      // Links past the last one the GPU has answer an error; so does every
      // link of a GPU without NVLink.
      if (api.nvlink_state(h, link, &active) != 0) continue;
      t->nvlink_valid = true;
      ++t->nvlinks_supported;
      if (active != 1) continue;
      ++t->nvlinks_active;
      if (api.nvlink_errors == nullptr) continue;
      unsigned long long count[4] = {};
      for (int counter = 0; counter < 4; ++counter) {
        // A counter a GPU does not keep (CRC data on some) stays 0.
        if (api.nvlink_errors(h, link, counter, &count[counter]) != 0) count[counter] = 0;
      }
      t->nvlink_replay_errors += static_cast<int64_t>(count[0]);
      t->nvlink_recovery_errors += static_cast<int64_t>(count[1]);
      t->nvlink_crc_errors += static_cast<int64_t>(count[2] + count[3]);
    }
  }
  unsigned long long corrected = 0, uncorrected = 0;
  if (api.ecc_errors != nullptr && api.ecc_errors(h, 0, 0, &corrected) == 0 &&
      api.ecc_errors(h, 1, 0, &uncorrected) == 0) {
    t->ecc_valid = true;
    t->ecc_corrected = static_cast<int64_t>(corrected);
    t->ecc_uncorrected = static_cast<int64_t>(uncorrected);
  }
  unsigned int corrected_rows = 0, uncorrected_rows = 0, pending = 0, failed = 0;
  if (api.remapped_rows != nullptr &&
      api.remapped_rows(h, &corrected_rows, &uncorrected_rows, &pending, &failed) == 0) {
    t->row_remap_valid = true;
    t->row_remap_pending = pending != 0;
    t->row_remap_failed = failed != 0;
  }
}

}  // namespace overlap::cuda
