#include "server/engine_select.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "server/engine/host/host_engine.h"

#ifdef OVERLAP_ENABLE_CUDA
#include "server/cuda/cuda_engine.h"
#endif

namespace overlap {
namespace {

absl::StatusOr<std::unique_ptr<engine::Engine>> CreateHost(const DaemonConfig& config) {
  engine::HostEngineOptions options;
  options.device_count = config.host_device_count;
  options.device_memory_bytes = config.host_device_memory_bytes;
  options.hazard_checks = config.hazard_checks;
  options.launch_gate = config.launch_gate;
  options.fail_op = config.host_fail_op;
  options.fail_after = config.host_fail_after - 1;
  options.inject_sticky_error = config.host_fail_sticky;
  options.sick_device = config.host_sick_device;
  options.simulated_power_w = config.host_simulated_power_w;
  if (config.ranks_per_gpu > 1) {  // simulated devices are ranks already
    GetLogger("overlapd")
        ->warn(
            "ranks_per_gpu {} is for the cuda backend; the host backend has "
            "host_device_count devices, one rank each",
            config.ranks_per_gpu);
  }
  return engine::CreateHostEngine(options);
}

}  // namespace

absl::StatusOr<std::unique_ptr<engine::Engine>> CreateEngineForConfig(const DaemonConfig& config) {
  auto log = GetLogger("overlapd");
  if (config.backend == "host") return CreateHost(config);
  if (config.backend != "auto" && config.backend != "cuda") {
    return absl::InvalidArgumentError(
        absl::StrCat("backend: must be auto, cuda or host (got \"", config.backend, "\")"));
  }
#ifdef OVERLAP_ENABLE_CUDA
  // Forced, not defaulted: an NCCL_NVLS_ENABLE=1 inherited from a login shell
  // must not turn multicast on behind the config's back.
  if (!config.nvls_enable) ::setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/1);
  // The config's NCCL settings, where NCCL reads them (the network between
  // daemons: NCCL_SOCKET_IFNAME, NCCL_IB_HCA, ...).
  for (const std::string& entry : config.nccl_env) {
    const size_t eq = entry.find('=');
    ::setenv(entry.substr(0, eq).c_str(), entry.substr(eq + 1).c_str(), /*overwrite=*/1);
  }
  absl::StatusOr<std::unique_ptr<engine::Engine>> cuda = cuda::CreateCudaEngine(config);
  if (cuda.ok()) return cuda;
  // A config the GPUs cannot run (nccl_overlap_ctas above their SM count, ...)
  // is the operator's error to fix, not a reason to run on the host instead.
  if (cuda.status().code() == absl::StatusCode::kInvalidArgument) return cuda.status();
  if (config.backend == "cuda") {
    return absl::FailedPreconditionError(
        absl::StrCat("backend cuda: cannot start the CUDA engine: ", cuda.status().message()));
  }
  log->warn("backend auto: CUDA engine unavailable ({}); using the host backend",
            std::string(cuda.status().message()));
#else
  if (config.backend == "cuda") {
    return absl::FailedPreconditionError(
        "backend cuda: this overlapd was built without CUDA (OVERLAP_ENABLE_CUDA=OFF)");
  }
  log->info("backend auto: built without CUDA; using the host backend");
#endif
  return CreateHost(config);
}

}  // namespace overlap
