#include "common/logging.h"

#include <mutex>

#include "spdlog/cfg/env.h"
#include "spdlog/sinks/stdout_sinks.h"

namespace overlap {
namespace {

constexpr char kRootLoggerName[] = "overlapd";
constexpr char kPattern[] = "[%Y-%m-%d %H:%M:%S.%e] [%l] [%n] %v";

std::mutex& LoggingMutex() {
  static std::mutex* mu = new std::mutex;
  return *mu;
}

// Plain (uncoloured) stderr: journald and log files get no escape codes.
spdlog::sink_ptr SharedSink() {
  static spdlog::sink_ptr* sink =
      new spdlog::sink_ptr(std::make_shared<spdlog::sinks::stderr_sink_mt>());
  return *sink;
}

// Caller holds LoggingMutex(). Creating through our mutex avoids the
// get-then-register race that makes spdlog throw on duplicate names.
std::shared_ptr<spdlog::logger> GetOrCreateLocked(const std::string& name) {
  static bool initialized = false;
  if (!initialized) {
    initialized = true;
    spdlog::set_pattern(kPattern);
    auto root = std::make_shared<spdlog::logger>(kRootLoggerName, SharedSink());
    spdlog::initialize_logger(root);
    spdlog::set_default_logger(root);
  }
  if (auto existing = spdlog::get(name)) return existing;
  auto logger = std::make_shared<spdlog::logger>(name, SharedSink());
  spdlog::initialize_logger(logger);  // registers it with the current pattern and levels
  return logger;
}

spdlog::level::level_enum ParseLevel(absl::string_view level, bool* ok) {
  const std::string name(level);
  const spdlog::level::level_enum parsed = spdlog::level::from_str(name);
  *ok = parsed != spdlog::level::off || name == "off";
  return *ok ? parsed : spdlog::level::info;
}

}  // namespace

void InitLogging(const std::string& level) {
  std::lock_guard<std::mutex> lock(LoggingMutex());
  GetOrCreateLocked(kRootLoggerName);
  bool ok = false;
  const spdlog::level::level_enum parsed = ParseLevel(level, &ok);
  spdlog::set_pattern(kPattern);
  spdlog::set_level(parsed);
  spdlog::flush_on(spdlog::level::warn);
  spdlog::cfg::load_env_levels();
  if (!ok) {
    spdlog::get(kRootLoggerName)->warn("unknown log level \"{}\", using info", level);
  }
}

std::shared_ptr<spdlog::logger> GetLogger(const std::string& subsystem) {
  std::lock_guard<std::mutex> lock(LoggingMutex());
  return GetOrCreateLocked(subsystem);
}

bool IsValidLogLevel(absl::string_view level) {
  bool ok = false;
  ParseLevel(level, &ok);
  return ok;
}

}  // namespace overlap
