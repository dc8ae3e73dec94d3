#include "common/logging.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <mutex>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "spdlog/cfg/env.h"
#include "spdlog/pattern_formatter.h"
#include "spdlog/sinks/stdout_sinks.h"

namespace overlap {
namespace {

constexpr char kRootLoggerName[] = "overlapd";
constexpr char kPattern[] = "[%Y-%m-%d %H:%M:%S.%e] [%l] [%n] %v";
constexpr char kJournalPattern[] = "<%*>[%l] [%n] %v";

// %* : the syslog priority of a line's level, which journald reads from a
// "<N>" prefix (sd-daemon.h's SD_ERR and friends).
class SyslogPriority : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    // By spdlog's levels in its order: trace, debug, info, warn, err, critical, off.
    static constexpr char kPriorities[] = {'7', '7', '6', '4', '3', '2', '6'};
    static_assert(spdlog::level::trace == 0 && spdlog::level::off == 6);
    const size_t level = static_cast<size_t>(msg.level);
    dest.push_back(level < sizeof(kPriorities) ? kPriorities[level] : '6');
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<SyslogPriority>();
  }
};

// Journald's format when this process's stderr is its stream, read once.
bool StderrIsJournal() {
  static const bool journal = IsJournalStream(std::getenv("JOURNAL_STREAM"), STDERR_FILENO);
  return journal;
}

void ApplyFormat() { spdlog::set_formatter(MakeLogFormatter(StderrIsJournal())); }

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
    ApplyFormat();
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
  ApplyFormat();
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

bool IsJournalStream(const char* journal_stream, int fd) {
  if (journal_stream == nullptr) return false;
  const std::vector<std::string> parts = absl::StrSplit(journal_stream, ':');
  uint64_t device = 0, inode = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &device) ||
      !absl::SimpleAtoi(parts[1], &inode)) {
    return false;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) return false;
  return static_cast<uint64_t>(st.st_dev) == device && static_cast<uint64_t>(st.st_ino) == inode;
}

std::unique_ptr<spdlog::formatter> MakeLogFormatter(bool for_journal) {
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  if (for_journal) {
    formatter->add_flag<SyslogPriority>('*').set_pattern(kJournalPattern);
  } else {
    formatter->set_pattern(kPattern);
  }
  return formatter;
}

}  // namespace overlap
