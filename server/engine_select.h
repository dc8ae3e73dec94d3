// Backend selection for overlapd (config.backend):
//   host  the host engine;
//   cuda  the CUDA engine, or FAILED_PRECONDITION saying why there is none;
//   auto  the CUDA engine when compiled in and a GPU is usable, else (logged)
//         the host engine.
// Before the CUDA engine starts, NCCL_NVLS_ENABLE is forced to 0 unless
// config.nvls_enable: NVLink multicast reserves memory and has hung on some
// drivers, so it must be asked for.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "common/config.h"
#include "server/engine/engine.h"

namespace overlap {

absl::StatusOr<std::unique_ptr<engine::Engine>> CreateEngineForConfig(const DaemonConfig& config);

}  // namespace overlap
