// The host backend as the op tests use it: `devices` simulated devices with
// the hazard checker on, so that a schedule that forgot an event wait fails.
#pragma once

#include <memory>
#include <utility>

#include "server/engine/host/host_engine.h"

namespace overlap {

inline std::unique_ptr<engine::Engine> CheckedHostEngine(int devices = 2) {
  engine::HostEngineOptions options;
  options.device_count = devices;
  options.hazard_checks = true;
  return std::move(engine::CreateHostEngine(options)).value();
}

}  // namespace overlap
