#include "common/logging.h"

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
