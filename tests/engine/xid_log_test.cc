// The Xid log: counts per GPU that survive reopening (a daemon restart), are
// dropped for another boot, and classify each Xid as common/xid.h does.
#include "server/engine/xid_log.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace overlap::engine {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

class XidLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::path(::testing::TempDir()) /
        ("xid_log_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::unique_ptr<XidLog> OpenFor(const std::string& boot) {
    absl::StatusOr<std::unique_ptr<XidLog>> log = XidLog::Open(dir_.string(), boot);
    EXPECT_TRUE(log.ok()) << log.status();
    return log.ok() ? std::move(log).value() : nullptr;
  }
  std::filesystem::path dir_;
};

TEST_F(XidLogTest, CountsSurviveReopeningWithinOneBoot) {
  {
    std::unique_ptr<XidLog> log = OpenFor("boot-a");
    ASSERT_NE(log, nullptr);
    EXPECT_THAT(*log->Counts(), IsEmpty());
    ASSERT_TRUE(log->Record("0000:18:00.0", 31, 1000).ok());  // an application's page fault
    ASSERT_TRUE(log->Record("0000:18:00.0", 79, 2000).ok());  // fallen off the bus: the GPU's
    ASSERT_TRUE(log->Record("0000:2a:00.0", 13, 1500).ok());
  }
  EXPECT_TRUE(std::filesystem::exists(dir_ / XidLog::kFileName));
  std::unique_ptr<XidLog> log = OpenFor("boot-a");
  ASSERT_NE(log, nullptr);
  absl::StatusOr<std::map<std::string, XidCounts>> counts = log->Counts();
  ASSERT_TRUE(counts.ok()) << counts.status();
  ASSERT_EQ(counts->size(), 2u);
  const XidCounts& first = counts->at("0000:18:00.0");
  EXPECT_EQ(first.all, 2);
  EXPECT_EQ(first.gpu, 1);
  EXPECT_EQ(first.last, 79u);
  EXPECT_EQ(first.last_unix_ms, 2000);
  const XidCounts& second = counts->at("0000:2a:00.0");
  EXPECT_EQ(second.all, 1);
  EXPECT_EQ(second.gpu, 0);
  EXPECT_EQ(second.last, 13u);
  // Counting goes on from what was kept.
  ASSERT_TRUE(log->Record("0000:2a:00.0", 48, 3000).ok());  // a double-bit ECC error
  EXPECT_EQ(log->Counts()->at("0000:2a:00.0").gpu, 1);
  EXPECT_EQ(log->Counts()->at("0000:2a:00.0").all, 2);
}

// After a GPU reset the operator forgets its counts: that GPU's only, for good.
TEST_F(XidLogTest, ForgetDropsOneGpusCounts) {
  std::unique_ptr<XidLog> log = OpenFor("boot-a");
  ASSERT_NE(log, nullptr);
  ASSERT_TRUE(log->Record("0000:18:00.0", 79, 1000).ok());
  ASSERT_TRUE(log->Record("0000:2a:00.0", 48, 1000).ok());
  ASSERT_TRUE(log->Forget("0000:18:00.0").ok());
  ASSERT_TRUE(log->Forget("0000:99:00.0").ok()) << "a GPU without counts: nothing to do";
  log.reset();
  log = OpenFor("boot-a");
  ASSERT_NE(log, nullptr);
  const std::map<std::string, XidCounts> counts = *log->Counts();
  EXPECT_EQ(counts.count("0000:18:00.0"), 0u);
  ASSERT_EQ(counts.count("0000:2a:00.0"), 1u);
  EXPECT_EQ(counts.at("0000:2a:00.0").gpu, 1);
  ASSERT_TRUE(log->Record("0000:18:00.0", 31, 2000).ok());
  EXPECT_EQ(log->Counts()->at("0000:18:00.0").all, 1) << "counting starts again from 0";
}

// A reboot resets the GPUs: another boot's counts are gone once the log opens.
TEST_F(XidLogTest, AnotherBootStartsFromNothing) {
  ASSERT_TRUE(OpenFor("boot-a")->Record("0000:18:00.0", 79, 1000).ok());
  std::unique_ptr<XidLog> log = OpenFor("boot-b");
  ASSERT_NE(log, nullptr);
  EXPECT_THAT(*log->Counts(), IsEmpty());
  EXPECT_THAT(*OpenFor("boot-a")->Counts(), IsEmpty()) << "dropped, not just hidden";
}

TEST_F(XidLogTest, CreatesTheStateDirectoryAndRefusesAFileThatIsNotADatabase) {
  dir_ /= "nested";
  ASSERT_NE(OpenFor("boot"), nullptr);
  std::filesystem::remove(dir_ / XidLog::kFileName);
  std::ofstream(dir_ / XidLog::kFileName) << "not a database, but long enough to have a header";
  absl::StatusOr<std::unique_ptr<XidLog>> log = XidLog::Open(dir_.string(), "boot");
  ASSERT_FALSE(log.ok());
  EXPECT_THAT(std::string(log.status().message()), HasSubstr(XidLog::kFileName));
}

TEST(CurrentBootIdTest, IsTheKernelsOrUnknown) {
  const std::string id = CurrentBootId();
  EXPECT_FALSE(id.empty());
  if (std::filesystem::exists("/proc/sys/kernel/random/boot_id")) {
    EXPECT_EQ(id.size(), 36u) << id;  // a UUID
    EXPECT_EQ(CurrentBootId(), id) << "stable within a boot";
  }
}

}  // namespace
}  // namespace overlap::engine
