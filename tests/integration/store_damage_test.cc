// The job store under what disks and operators do to it, through the real
// daemon: a database it may only read, a state directory it may not write,
// a database truncated, a write-ahead log damaged after kill -9, damaged
// pages, and jobs of hundreds of ops. A damaged or unusable store stops the
// daemon with exit 2 and a reason, never starts it "healthy"; an id is never
// given out twice; and a job's writes grow with its ops, not their square.
#include <signal.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/harness.h"

namespace overlap::testing {
namespace {

using ::testing::HasSubstr;

// Bytes the process has passed to write(2) so far (/proc/PID/io), or -1.
int64_t WrittenBytes(pid_t pid) {
  std::ifstream io("/proc/" + std::to_string(pid) + "/io");
  std::string key;
  int64_t value = 0;
  while (io >> key >> value) {
    if (key == "wchar:") return value;
  }
  return -1;
}

void ChownTree(const std::string& root, int uid, int gid) {
  ::chown(root.c_str(), uid, gid);
  for (const auto& entry : std::filesystem::recursive_directory_iterator(root)) {
    ::chown(entry.path().c_str(), uid, gid);
  }
}

class StoreDamageTest : public DaemonTest {
 protected:
  // Runs jobs to their end, then stops the daemon cleanly; their ids.
  std::vector<std::string> RunJobsAndStop(int count) {
    StartDaemon();
    std::vector<std::string> ids;
    for (int i = 0; i < count; ++i) {
      RunResult done = daemon_->Ctl({"submit", small_graph_, "--wait", "--json"});
      EXPECT_EQ(done.exit_code, 0) << done.err;
      ids.push_back(ParseJson(done.out)["id"]);
    }
    EXPECT_EQ(daemon_->Terminate(std::chrono::seconds(20)).exit_code, 0) << daemon_->Log();
    return ids;
  }

  // overlapd on the same socket and state dir, to its exit.
  RunResult StartToExit(const std::vector<std::string>& launcher = {}) {
    std::vector<std::string> argv = launcher;
    argv.insert(argv.end(), {OVERLAPD_BIN, "--backend", "host", "--listen",
                             "unix:" + dir_.File("s.sock"), "--state-dir", state_dir()});
    return Child::Spawn(argv, dir_.path())->Wait(std::chrono::seconds(30));
  }

  std::string state_dir() const { return dir_.File("state"); }
  std::string db() const { return state_dir() + "/overlapd.db"; }
};

// A database overlapd may only read used to start "healthy" and then fail
// every submission with INTERNAL.
TEST_F(StoreDamageTest, ADatabaseItCanOnlyReadStopsItAtStart) {
  RunJobsAndStop(1);
  std::vector<std::string> launcher;
  if (geteuid() == 0) {  // root writes whatever the mode says: run as nobody
    const std::string cannot = CannotSwitchUsers(OVERLAPD_BIN);
    if (!cannot.empty()) GTEST_SKIP() << cannot;
    OpenToOthers(dir_.path());
    ChownTree(state_dir(), kNobody, kNobody);
    launcher = AsUser(kNobody, kNobody);
  }
  ASSERT_EQ(::chmod(db().c_str(), 0400), 0);
  RunResult run = StartToExit(launcher);
  EXPECT_EQ(run.exit_code, 2) << Describe(run);
  EXPECT_THAT(run.err, HasSubstr(db() + " can only be read"));
}

// A state directory owned by someone else exited 1, which systemd restarts in
// a loop; it is a configuration error (2).
TEST_F(StoreDamageTest, AStateDirItCannotWriteIsAConfigurationError) {
  const std::string cannot = CannotSwitchUsers(OVERLAPD_BIN);
  if (!cannot.empty()) GTEST_SKIP() << cannot;
  OpenToOthers(dir_.path());
  ASSERT_EQ(::mkdir(state_dir().c_str(), 0755), 0);  // root's
  RunResult run = StartToExit(AsUser(kNobody, kNobody));
  EXPECT_EQ(run.exit_code, 2) << Describe(run);
  EXPECT_THAT(run.err, HasSubstr("state_dir " + state_dir() + ": overlapd (uid 65534) cannot "
                                 "write it (owner uid 0"));
}

// A database symlinked to /dev/null (or a directory in its place) exited 1,
// which systemd restarts forever; it is a setting to fix (2), said so.
TEST_F(StoreDamageTest, ADatabaseThatIsNoFileIsAConfigurationError) {
  RunJobsAndStop(1);
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(db() + suffix);
  ASSERT_EQ(::symlink("/dev/null", db().c_str()), 0);
  RunResult run = StartToExit();
  EXPECT_EQ(run.exit_code, 2) << Describe(run);
  EXPECT_THAT(run.err, HasSubstr(db() + " is not a regular file (a symlink to a device)"));
  std::filesystem::remove(db());
  std::filesystem::create_directory(db());
  run = StartToExit();
  EXPECT_EQ(run.exit_code, 2) << Describe(run);
  EXPECT_THAT(run.err, HasSubstr(db() + " is not a regular file (a directory)"));
}

// Truncated to nothing, the database used to start empty and give out
// job-000001 again. Moved aside, a new one continues the ids.
TEST_F(StoreDamageTest, ATruncatedDatabaseIsRefusedAndIdsContinueAfterIt) {
  const std::vector<std::string> ids = RunJobsAndStop(2);
  ASSERT_EQ(ids.back(), "job-000002");
  std::filesystem::resize_file(db(), 0);
  RunResult run = StartToExit();
  EXPECT_EQ(run.exit_code, 2) << Describe(run);
  EXPECT_THAT(run.err, HasSubstr("holds jobs up to none, but job-000002 was given out"));
  EXPECT_THAT(run.err, HasSubstr("move " + db() + "* aside"));

  for (const char* suffix : {"", "-wal", "-shm"}) {
    std::error_code ignored;
    std::filesystem::rename(db() + suffix, db() + suffix + ".damaged", ignored);
  }
  StartDaemon();
  RunResult next = daemon_->Ctl({"submit", small_graph_});
  ASSERT_EQ(next.exit_code, 0) << next.err;
  EXPECT_EQ(Trim(next.out), "job-000003");
}

// kill -9 leaves the newest jobs in the write-ahead log; damaged there, they
// would vanish without a word.
TEST_F(StoreDamageTest, ADamagedWriteAheadLogAfterKillIsRefused) {
  StartDaemon();
  for (int i = 0; i < 3; ++i) {
    RunResult done = daemon_->Ctl({"submit", small_graph_, "--wait"});
    ASSERT_EQ(done.exit_code, 0) << done.err;
  }
  daemon_->Kill();
  const std::string wal = db() + "-wal";
  std::string bytes = ReadFileOrEmpty(wal);
  ASSERT_GT(bytes.size(), 4096u) << "the jobs should still be in the log";
  for (size_t i = 32; i < bytes.size(); i += 7) bytes[i] = static_cast<char>(bytes[i] ^ 0x5a);
  WriteFileOrDie(wal, bytes);
  std::filesystem::remove(db() + "-shm");  // as after a reboot: the log is read afresh
  RunResult run = StartToExit();
  EXPECT_EQ(run.exit_code, 2) << Describe(run);
  EXPECT_THAT(run.err, HasSubstr("job-000003 was given out"));
  EXPECT_THAT(run.err, HasSubstr("the database lost jobs"));
}

// Damaged pages used to start a healthy-looking daemon whose store answered
// DATA_LOSS; they are found at start.
TEST_F(StoreDamageTest, DamagedPagesAreFoundAtStart) {
  RunJobsAndStop(12);
  std::string bytes = ReadFileOrEmpty(db());
  ASSERT_GT(bytes.size(), 8u * 4096) << "enough pages to damage the second half";
  for (size_t i = bytes.size() / 2; i < bytes.size(); ++i) {
    bytes[i] = static_cast<char>(bytes[i] ^ 0xa5);
  }
  WriteFileOrDie(db(), bytes);
  RunResult run = StartToExit();
  EXPECT_EQ(run.exit_code, 2) << Describe(run);
  EXPECT_THAT(run.err, HasSubstr("the job database is damaged"));
  EXPECT_EQ(ReadFileOrEmpty(db()), bytes) << "left as it was";
}

// Each finished op is stored as a row of its own: a job of 300 ops writes
// megabytes, not the ~100 MB that rewriting the whole job after each op
// took. A daemon killed mid-job keeps every op that had finished.
TEST_F(StoreDamageTest, OpResultsAreStoredOneAtATimeAndSurviveAKill) {
  StartDaemon();
  const int ops = 300;
  std::string spec =
      "name: many-ops\ndevices: [0]\ndtype: fp32\niterations: 3\nwarmup: 0\nverify: false\n"
      "layer_step: false\ntimeline: false\nops:\n";
  for (int i = 0; i < ops; ++i) {
    spec += "  - {id: op" + std::to_string(i) + ", type: gemm, m: 32, k: 32, n: 32}\n";
  }
  // Then one op that takes seconds: the daemon is killed while it runs.
  spec += "  - {id: last, type: gemm, m: 2048, k: 2048, n: 2048, after: [op" +
          std::to_string(ops - 1) + "]}\n";
  const std::string path = dir_.File("many.yaml");
  WriteFileOrDie(path, spec);
  const int64_t before = WrittenBytes(daemon_->pid());
  RunResult submit = daemon_->Ctl({"submit", path});
  ASSERT_EQ(submit.exit_code, 0) << submit.err;
  const std::string id = Trim(submit.out);
  nlohmann::json job = PollJob(
      *daemon_, id, [&](const nlohmann::json& j) { return j.value("ops_finished", 0) >= ops; },
      std::chrono::seconds(120));
  ASSERT_GE(job.value("ops_finished", 0), ops);
  const int64_t after = WrittenBytes(daemon_->pid());
  if (before >= 0 && after >= 0) {
    EXPECT_LT(after - before, int64_t{24} << 20) << "bytes written while " << ops << " ops ran";
  }
  daemon_->Kill();

  StartDaemon();
  RunResult get = daemon_->Ctl({"get", id, "--json"});
  ASSERT_EQ(get.exit_code, 0) << get.err;
  const nlohmann::json failed = ParseJson(get.out);
  EXPECT_EQ(failed["state"], "FAILED");
  EXPECT_THAT(failed.value("error", ""), HasSubstr("daemon restarted"));
  ASSERT_EQ(failed["result"]["ops"].size(), static_cast<size_t>(ops));
  EXPECT_EQ(failed["result"]["ops"][0]["id"], "op0");
  EXPECT_EQ(failed["result"]["ops"][ops - 1]["id"], "op" + std::to_string(ops - 1));
  EXPECT_EQ(failed.value("ops_finished", 0), ops);
}

// A row whose stored data is damaged is listed as DAMAGED, in text and JSON
// ("damaged": true), never as an ordinary job: whether its summary is the
// damaged part, or its job blob was replaced while the summary survived (a
// list reads only the summary). The healthy job beside them is listed as it is.
TEST_F(StoreDamageTest, ADamagedRowIsListedAsDamaged) {
  const std::vector<std::string> ids = RunJobsAndStop(3);
  sqlite3* handle = nullptr;
  ASSERT_EQ(sqlite3_open(db().c_str(), &handle), SQLITE_OK);
  const std::string damage = "UPDATE jobs SET job = x'ffffffff' WHERE id = '" + ids[0] +
                             "';"
                             "UPDATE summaries SET summary = x'ffffffff' WHERE sequence = "
                             "(SELECT sequence FROM jobs WHERE id = '" +
                             ids[1] + "');";
  ASSERT_EQ(sqlite3_exec(handle, damage.c_str(), nullptr, nullptr, nullptr), SQLITE_OK)
      << sqlite3_errmsg(handle);
  sqlite3_close(handle);

  StartDaemon();
  RunResult list = daemon_->Ctl({"list", "--wide"});
  ASSERT_EQ(list.exit_code, 0) << Describe(list);
  const std::vector<std::string> lines = absl::StrSplit(list.out, '\n');
  for (const std::string& line : lines) {
    if (line.rfind(ids[0], 0) == 0 || line.rfind(ids[1], 0) == 0) {
      EXPECT_THAT(line, HasSubstr(" DAMAGED ")) << list.out;
      EXPECT_THAT(line, HasSubstr(" data-loss")) << list.out;
    } else if (line.rfind(ids[2], 0) == 0) {
      EXPECT_THAT(line, HasSubstr(" SUCCEEDED ")) << list.out;
    }
  }
  // --wide: the whole reason on a line of its own under the table.
  for (int i = 0; i < 2; ++i) {
    EXPECT_TRUE(std::regex_search(list.out, std::regex("\nreason of " + ids[i] + ": .*unreadable")))
        << list.out;
  }
  RunResult json = daemon_->Ctl({"list", "--json"});
  ASSERT_EQ(json.exit_code, 0) << Describe(json);
  int damaged = 0;
  const nlohmann::json listed = ParseJson(json.out);
  ASSERT_EQ(listed["jobs"].size(), 3u) << json.out;
  for (const nlohmann::json& job : listed["jobs"]) {
    const bool is_damaged = job.value("id", "") != ids[2];
    EXPECT_EQ(job.value("damaged", false), is_damaged) << job.dump(2);
    EXPECT_EQ(job.value("error_code", 0), is_damaged ? 15 : 0) << job.dump(2);
    damaged += job.value("damaged", false);
  }
  EXPECT_EQ(damaged, 2);
  RunResult get = daemon_->Ctl({"get", ids[0]});
  EXPECT_EQ(get.exit_code, 3) << Describe(get);
  EXPECT_THAT(get.err, HasSubstr("DATA_LOSS"));
}

}  // namespace
}  // namespace overlap::testing
