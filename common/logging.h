// Process-wide logging: one stderr sink shared by a root logger "overlapd" and
// one child logger per subsystem ("rpc", "sched", "engine", "cuda", "nccl",
// "ops", "store"). Where stderr is journald's stream (systemd sets
// JOURNAL_STREAM), each line starts with its syslog priority ("<3>" for an
// error), which journald files it under (`journalctl -u overlapd -p err`), and
// carries no timestamp (journald adds its own).
//
// Thread safety: every function here may be called from any thread. GetLogger
// is safe before InitLogging (tests): loggers start at "info" with the standard
// pattern, and InitLogging later re-levels them all.
#pragma once

#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "spdlog/formatter.h"
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

// Whether `fd` is the stream named by `journal_stream` (JOURNAL_STREAM's
// "DEVICE:INODE"); false for null or a value that does not parse.
bool IsJournalStream(const char* journal_stream, int fd);

// How lines are written: "[time] [level] [name] text" for a terminal or file,
// "<priority>[level] [name] text" for journald.
std::unique_ptr<spdlog::formatter> MakeLogFormatter(bool for_journal);

}  // namespace overlap
