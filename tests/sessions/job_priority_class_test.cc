// A job's priority class (graph key priority_class) through the real overlapd
// binary: parsed at the door, shown by `get` and `list`, kept after the run;
// and a deferred one on a session's devices runs beside it.
#include <string>

#include "absl/strings/str_cat.h"
#include "client/session/overlapd_session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/harness.h"

namespace overlap {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// Two ranks on devices 0 and 1: one rank open holds both against the queue.
constexpr char kSessionGraph[] =
    "name: two\ndtype: fp32\ndevices: [0, 1]\nops:\n  - {id: fc1, type: ag_gemm, m: 8, k: 4, n: "
    "6}\n";

class JobPriorityClassTest : public testing::DaemonTest {
 protected:
  std::string WriteGraph(const std::string& name, const std::string& top) {
    const std::string path = dir_.File(name);
    testing::WriteFileOrDie(path, absl::StrCat(top, testing::kSmallGraph));
    return path;
  }
};

TEST_F(JobPriorityClassTest, ADeferredJobShowsItsClassAndRunsBesideASession) {
  StartDaemon();
  auto held = session::Session::Open(dir_.File("s-session.sock"), "hold", kSessionGraph, 0);
  ASSERT_TRUE(held.ok()) << held.status();
  const std::string job = Submit(WriteGraph("deferred.yaml", "priority_class: deferred\n"));
  // Its buffers fit device 0's free pool (the host's 2 GiB) beside the
  // session: it shares the session's lanes instead of waiting for it
  // (tests/sessions/lanes_jobs_test.cc: a critical job still waits).
  const nlohmann::json done =
      testing::PollJob(*daemon_, job, testing::StateIs("SUCCEEDED"), std::chrono::seconds(120));
  EXPECT_EQ(done.value("priority_class", ""), "DEFERRED");
  EXPECT_EQ(done.value("waiting", ""), "");

  testing::RunResult get = daemon_->Ctl({"get", job});
  ASSERT_EQ(get.exit_code, 0) << testing::Describe(get);
  EXPECT_THAT(get.out, HasSubstr("class:     deferred\n"));
  testing::RunResult list = daemon_->Ctl({"list", "--json"});
  ASSERT_EQ(list.exit_code, 0) << testing::Describe(list);
  ASSERT_EQ(testing::ParseJson(list.out)["jobs"].size(), 1u) << list.out;
  EXPECT_EQ(testing::ParseJson(list.out)["jobs"][0].value("priority_class", ""), "DEFERRED");
  (*held)->Close();
}

TEST_F(JobPriorityClassTest, AJobWithoutTheKeyIsCritical) {
  StartDaemon();
  const std::string job = Submit(small_graph_);
  const nlohmann::json done =
      testing::PollJob(*daemon_, job, testing::StateIs("SUCCEEDED"), std::chrono::seconds(120));
  EXPECT_EQ(done.value("priority_class", ""), "CRITICAL");
}

TEST_F(JobPriorityClassTest, AnUnknownClassIsInvalidArgumentNamingTheField) {
  StartDaemon();
  testing::RunResult submit =
      daemon_->Ctl({"submit", WriteGraph("urgent.yaml", "priority_class: urgent\n")});
  EXPECT_EQ(submit.exit_code, 3) << testing::Describe(submit);
  EXPECT_THAT(submit.err, StartsWith("overlapctl: INVALID_ARGUMENT: "));
  EXPECT_THAT(submit.err, HasSubstr("priority_class: unknown priority_class \"urgent\" "
                                    "(expected critical, deferred)"));
}

}  // namespace
}  // namespace overlap
