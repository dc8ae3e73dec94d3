// Process-wide logging: one stderr sink (journald keeps stderr under systemd)
// shared by a root logger "overlapd" and one child logger per subsystem
// ("rpc", "sched", "engine", "cuda", "nccl", "ops", "store").
//
// Thread safety: every function here may be called from any thread. GetLogger
// is safe before InitLogging (tests): loggers start at "info" with the standard
// pattern, and InitLogging later re-levels them all.
#pragma once

#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "spdlog/spdlog.h"

namespace overlap {

// Sets every logger to `level` (trace|debug|info|warn|error|critical|off; an
// unknown name means info), then applies the SPDLOG_LEVEL environment variable
// on top ("debug" or "info,rpc=trace,nccl=debug"). Call once at start-up.
void InitLogging(const std::string& level);

// The child logger for `subsystem`, created on first use and shared afterwards.
// Never null.
std::shared_ptr<spdlog::logger> GetLogger(const std::string& subsystem);

// True when `level` names a spdlog level (what DaemonConfig::log_level accepts).
bool IsValidLogLevel(absl::string_view level);

}  // namespace overlap
