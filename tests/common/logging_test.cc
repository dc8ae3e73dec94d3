#include "common/logging.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <regex>
#include <string>

#include "gtest/gtest.h"

namespace overlap {
namespace {

TEST(LoggingTest, GetLoggerBeforeInitIsUsableAndShared) {
  auto rpc = GetLogger("rpc");
  ASSERT_NE(rpc, nullptr);
  EXPECT_EQ(rpc->name(), "rpc");
  EXPECT_EQ(GetLogger("rpc"), rpc);
  auto engine = GetLogger("engine");
  ASSERT_EQ(engine->sinks().size(), 1u);
  ASSERT_EQ(rpc->sinks().size(), 1u);
  EXPECT_EQ(engine->sinks()[0], rpc->sinks()[0]);
  rpc->info("logging before InitLogging works");
}

TEST(LoggingTest, InitSetsLevelAndEnvOverrides) {
  unsetenv("SPDLOG_LEVEL");
  auto sched = GetLogger("sched");
  InitLogging("debug");
  EXPECT_EQ(sched->level(), spdlog::level::debug);
  EXPECT_EQ(GetLogger("store")->level(), spdlog::level::debug);  // created after init

  setenv("SPDLOG_LEVEL", "error,nccl=trace", 1);
  InitLogging("info");
  EXPECT_EQ(sched->level(), spdlog::level::err);
  EXPECT_EQ(GetLogger("nccl")->level(), spdlog::level::trace);
  unsetenv("SPDLOG_LEVEL");

  InitLogging("not-a-level");
  EXPECT_EQ(sched->level(), spdlog::level::info);
}

TEST(LoggingTest, WritesTimeLevelAndNameToStderr) {
  auto logger = GetLogger("ops");
  InitLogging("info");
  char path[] = "/tmp/overlap_logging_testXXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  std::fflush(stderr);
  const int saved = dup(2);
  dup2(fd, 2);
  logger->warn("hello {}", 42);
  logger->debug("hidden at info");
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(fd);
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  unlink(path);
  const std::regex line(
      R"(^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}\] \[warning\] \[ops\] hello 42\n$)");
  EXPECT_TRUE(std::regex_search(text, line)) << text;
}

// Under systemd, stderr is journald's stream (JOURNAL_STREAM names its device
// and inode): lines then carry their syslog priority and no timestamp, so that
// `journalctl -p err` finds the errors and times are not doubled.
TEST(LoggingTest, JournaldLinesCarryTheirPriorityAndNoTimestamp) {
  char path[] = "/tmp/overlap_journal_testXXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  struct stat st {};
  ASSERT_EQ(fstat(fd, &st), 0);
  const std::string stream = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
  EXPECT_TRUE(IsJournalStream(stream.c_str(), fd));
  EXPECT_FALSE(IsJournalStream(nullptr, fd));
  EXPECT_FALSE(IsJournalStream("8:1", fd)) << "another file";
  EXPECT_FALSE(IsJournalStream("garbage", fd));
  EXPECT_FALSE(IsJournalStream((stream + ":9").c_str(), fd));
  close(fd);
  unlink(path);

  auto Format = [](bool journal, spdlog::level::level_enum level) {
    const spdlog::details::log_msg msg("sched", level, "queue full");
    spdlog::memory_buf_t out;
    MakeLogFormatter(journal)->format(msg, out);
    return std::string(out.data(), out.size());
  };
  EXPECT_EQ(Format(true, spdlog::level::err), "<3>[error] [sched] queue full\n");
  EXPECT_EQ(Format(true, spdlog::level::warn), "<4>[warning] [sched] queue full\n");
  EXPECT_EQ(Format(true, spdlog::level::info), "<6>[info] [sched] queue full\n");
  EXPECT_EQ(Format(true, spdlog::level::debug), "<7>[debug] [sched] queue full\n");
  EXPECT_EQ(Format(true, spdlog::level::critical), "<2>[critical] [sched] queue full\n");
  EXPECT_TRUE(std::regex_match(Format(false, spdlog::level::err),
                               std::regex(R"(^\[\d{4}-.*\] \[error\] \[sched\] queue full\n$)")));
}

TEST(LoggingTest, ValidLevels) {
  for (const char* level :
       {"trace", "debug", "info", "warn", "warning", "error", "critical", "off"}) {
    EXPECT_TRUE(IsValidLogLevel(level)) << level;
  }
  EXPECT_FALSE(IsValidLogLevel("verbose"));
  EXPECT_FALSE(IsValidLogLevel(""));
}

}  // namespace
}  // namespace overlap
