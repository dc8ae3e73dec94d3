#include "server/cuda/nvml_telemetry.h"

#include <dlfcn.h>

#include "common/logging.h"

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
  // Optional: an older driver may lack them, and the rest still works.
  struct ViolationTime {
    unsigned long long reference_us;  // CPU timestamp
    unsigned long long violation_ns;  // cumulative
  };
  int (*max_clock)(void*, int, unsigned int*) = nullptr;       // 1 = SM
  int (*clock_reasons)(void*, unsigned long long*) = nullptr;  // bitmask
  int (*violation)(void*, int, ViolationTime*) = nullptr;      // 0 = power, 1 = thermal
};

namespace {

template <typename Fn>
bool Resolve(void* library, const char* name, Fn* out) {
  *out = reinterpret_cast<Fn>(dlsym(library, name));
  return *out != nullptr;
}

}  // namespace

std::unique_ptr<NvmlTelemetry> NvmlTelemetry::Open(const std::vector<std::string>& pci_bus_ids) {
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
  // Renamed in driver 535; the old name stays exported.
  if (!Resolve(library, "nvmlDeviceGetCurrentClocksEventReasons", &api->clock_reasons)) {
    Resolve(library, "nvmlDeviceGetCurrentClocksThrottleReasons", &api->clock_reasons);
  }
  Resolve(library, "nvmlDeviceGetViolationStatus", &api->violation);
  if (!ok || api->init() != 0) {
    log->info("NVML unusable ({}): device telemetry off", ok ? "nvmlInit failed" : "missing symbol");
    dlclose(library);
    return nullptr;
  }
  std::vector<void*> handles;
  for (const std::string& pci : pci_bus_ids) {
    void* handle = nullptr;
    if (api->handle_by_pci(pci.c_str(), &handle) != 0) handle = nullptr;
    handles.push_back(handle);
  }
  return std::unique_ptr<NvmlTelemetry>(
      new NvmlTelemetry(library, std::move(api), std::move(handles)));
}

NvmlTelemetry::NvmlTelemetry(void* library, std::unique_ptr<Api> api, std::vector<void*> handles)
    : library_(library), api_(std::move(api)), handles_(std::move(handles)) {}

NvmlTelemetry::~NvmlTelemetry() {
  api_->shutdown();
  dlclose(library_);
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
  return t;
}

}  // namespace overlap::cuda
