// Input nobody meant to send, through the real daemon: bytes that are not
// text, unbounded repetition that would outgrow gRPC's trailers, control
// characters bound for an operator's terminal, a second YAML document, and
// more ops than a job may have. Each gets its own code and a short message,
// and the daemon keeps answering.
#include <grpcpp/create_channel.h>
#include <sqlite3.h>

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "overlap/v1/overlap.grpc.pb.h"
#include "tests/integration/harness.h"

namespace overlap::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class UntrustedInputTest : public DaemonTest {
 protected:
  // Submits `spec` (written to a file) and expects a refusal with `code`.
  RunResult Refused(const std::string& name, const std::string& spec, const std::string& code) {
    const std::string path = dir_.File(name);
    WriteFileOrDie(path, spec);
    RunResult submit = daemon_->Ctl({"submit", path});
    EXPECT_EQ(submit.exit_code, 3) << name << ": " << Describe(submit);
    EXPECT_THAT(submit.err, HasSubstr("overlapctl: " + code + ": ")) << name;
    EXPECT_LT(submit.err.size(), 2500u) << name << ": the message is bounded";
    return submit;
  }

  void ExpectStillAnswers() {
    RunResult node = daemon_->Ctl({"node"});
    EXPECT_EQ(node.exit_code, 0) << Describe(node);
  }
};

TEST_F(UntrustedInputTest, AGraphThatIsNotUtf8IsInvalidArgumentSayingSo) {
  StartDaemon();
  std::string spec = kSmallGraph;
  spec.insert(spec.find("small-block") + 5, "\xff\xfe");
  RunResult refused = Refused("latin.yaml", spec, "INVALID_ARGUMENT");
  EXPECT_THAT(refused.err, HasSubstr("not UTF-8 text (byte 0xff at offset"));
  EXPECT_THAT(refused.err, HasSubstr("latin.yaml"));
  ExpectStillAnswers();
}

// A 10,000-op dependency cycle and a 100,000-character id: the right code
// arrives, with a message that quotes a bounded part of them.
TEST_F(UntrustedInputTest, UnboundedInputInErrorsIsCutSoTheCodeArrives) {
  StartDaemon({"--max-ops-per-job", "20000"});
  std::string cycle = "name: loop\nops:\n";
  const int ops = 10000;
  for (int i = 0; i < ops; ++i) {
    cycle += "  - {id: op" + std::to_string(i) +
             ", type: gemm, m: 64, k: 64, n: 64, after: [op" + std::to_string((i + 1) % ops) +
             "]}\n";
  }
  RunResult refused = Refused("cycle.yaml", cycle, "INVALID_ARGUMENT");
  EXPECT_THAT(refused.err, HasSubstr("ops: dependency cycle op0 -> "));
  EXPECT_THAT(refused.err, HasSubstr("(10000 ops in the cycle)"));

  const std::string long_id(100000, 'j');
  RunResult get = daemon_->Ctl({"get", long_id});
  EXPECT_EQ(get.exit_code, 3) << get.err.substr(0, 500);
  EXPECT_THAT(get.err, HasSubstr("INVALID_ARGUMENT: id: \"jjjj"));
  EXPECT_THAT(get.err, HasSubstr("is not a job id"));
  EXPECT_LT(get.err.size(), 500u);
  RunResult cancel = daemon_->Ctl({"cancel", long_id});
  EXPECT_EQ(cancel.exit_code, 3);
  EXPECT_THAT(cancel.err, HasSubstr("INVALID_ARGUMENT"));
  ExpectStillAnswers();
}

TEST_F(UntrustedInputTest, ControlCharactersAndOverlongNamesAreRefused) {
  StartDaemon();
  const std::string op = "  - {id: fc1, type: gemm, m: 64, k: 64, n: 64}\n";
  RunResult escape =
      Refused("escape.yaml", "name: \"evil\\e]0;pwned\\a\"\nops:\n" + op, "INVALID_ARGUMENT");
  EXPECT_THAT(escape.err, HasSubstr("name: must not hold control characters"));
  EXPECT_THAT(escape.err, HasSubstr("evil\\x1b]0;pwned\\x07"));
  EXPECT_THAT(escape.err, Not(HasSubstr("\x1b")));
  RunResult newline = Refused(
      "newline.yaml", "name: ok\nops:\n  - {id: \"a\\nb\", type: gemm, m: 64, k: 64, n: 64}\n",
      "INVALID_ARGUMENT");
  EXPECT_THAT(newline.err, HasSubstr("ops[0].id: must not hold control characters"));
  RunResult long_name =
      Refused("long.yaml", "name: " + std::string(5000, 'n') + "\nops:\n" + op,
              "INVALID_ARGUMENT");
  EXPECT_THAT(long_name.err, HasSubstr("name: 5000 bytes is longer than the 256 allowed"));
  ExpectStillAnswers();
}

TEST_F(UntrustedInputTest, ASecondYamlDocumentIsRefusedNotDropped) {
  StartDaemon();
  RunResult refused = Refused("two.yaml", std::string(kSmallGraph) + "---\nname: second\n",
                              "INVALID_ARGUMENT");
  EXPECT_THAT(refused.err, HasSubstr("holds more than one YAML document"));
}

// Texts that ran yaml-cpp away (`,"` kept a core at 100% and grew the daemon
// by hundreds of MB a second), anchors that multiply a tree, and nesting past
// the limit: each is INVALID_ARGUMENT within a second, and the daemon is idle
// again with its memory where it was.
TEST_F(UntrustedInputTest, TextThatRanTheParserAwayIsRefusedAtOnce) {
  StartDaemon();
  ASSERT_TRUE(BecomesIdle(daemon_->pid()));
  const int64_t rss_before = ProcessRssBytes(daemon_->pid());
  std::string laughs = "a0: &a0 [lol, lol]\n";
  for (int i = 1; i < 10; ++i) {
    laughs += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int j = 0; j < 10; ++j) laughs += (j ? ", *a" : "*a") + std::to_string(i - 1);
    laughs += "]\n";
  }
  const std::vector<std::pair<std::string, std::string>> cases = {
      {",\"", "line 1, column 1: unexpected ','"},
      {",", "unexpected ','"},
      {"[:", "malformed YAML/JSON"},
      {"{\"a\": ,\"", "malformed YAML/JSON"},
      {"name: x\n,\n", "malformed YAML/JSON"},
      {laughs, "anchors (&name) are not accepted"},
      {std::string(100000, '['), "nested more than 32 deep"},
  };
  for (const auto& [text, reason] : cases) {
    const auto start = Clock::now();
    RunResult refused = Refused("hostile.yaml", text, "INVALID_ARGUMENT");
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(3)) << text.substr(0, 20);
    EXPECT_THAT(refused.err, HasSubstr(reason)) << text.substr(0, 20);
  }
  EXPECT_TRUE(BecomesIdle(daemon_->pid())) << "a thread kept a core busy";
  EXPECT_LT(ProcessRssBytes(daemon_->pid()), rss_before + (64 << 20));
  ExpectStillAnswers();
}

TEST_F(UntrustedInputTest, MoreOpsThanAJobMayHaveAreRefused) {
  StartDaemon({"--max-ops-per-job", "3"});
  std::string spec = "name: many\nops:\n";
  for (int i = 0; i < 4; ++i) {
    spec += "  - {id: op" + std::to_string(i) + ", type: gemm, m: 64, k: 64, n: 64}\n";
  }
  RunResult refused = Refused("many.yaml", spec, "INVALID_ARGUMENT");
  EXPECT_THAT(refused.err, HasSubstr("ops: 4 ops is more than this daemon takes in one job "
                                     "(max_ops_per_job = 3)"));
}

// Names stored before the daemon refused control characters are escaped on
// the way to the terminal, in every command that prints them.
TEST_F(UntrustedInputTest, StoredControlCharactersAreEscapedOnOutput) {
  StartDaemon();
  RunResult done = daemon_->Ctl({"submit", small_graph_, "--wait", "--json"});
  ASSERT_EQ(done.exit_code, 0) << done.err;
  const std::string id = ParseJson(done.out)["id"];
  ASSERT_EQ(daemon_->Terminate(std::chrono::seconds(20)).exit_code, 0);

  // As an older daemon would have stored it: an escape sequence and a newline
  // in the name and an op id, and a name of 1 MB.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((daemon_->state_dir() + "/overlapd.db").c_str(), &db), SQLITE_OK);
  sqlite3_stmt* read = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "SELECT job FROM jobs WHERE id = ?;", -1, &read, nullptr),
            SQLITE_OK);
  sqlite3_bind_text(read, 1, id.c_str(), -1, SQLITE_TRANSIENT);
  ASSERT_EQ(sqlite3_step(read), SQLITE_ROW);
  v1::Job job;
  ASSERT_TRUE(job.ParseFromArray(sqlite3_column_blob(read, 0), sqlite3_column_bytes(read, 0)));
  sqlite3_finalize(read);
  job.set_name("\x1b]0;owned\x07\nsecond line" + std::string(1 << 20, 'n'));
  job.mutable_result()->mutable_ops(0)->set_id("fc1\x1b[2J");
  std::string blob;
  ASSERT_TRUE(job.SerializeToString(&blob));
  sqlite3_stmt* write = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "UPDATE jobs SET job = ? WHERE id = ?;", -1, &write, nullptr),
            SQLITE_OK);
  sqlite3_bind_blob(write, 1, blob.data(), static_cast<int>(blob.size()), SQLITE_TRANSIENT);
  sqlite3_bind_text(write, 2, id.c_str(), -1, SQLITE_TRANSIENT);
  ASSERT_EQ(sqlite3_step(write), SQLITE_DONE);
  sqlite3_finalize(write);
  // The list reads the summary, which a rewrite of the job brings back.
  ASSERT_EQ(sqlite3_exec(db, "DELETE FROM summaries;", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);

  StartDaemon();
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"list"}, {"get", id}, {"list", "--json"}, {"get", id, "--json"},
        {"report", id}}) {
    RunResult shown = daemon_->Ctl(args);
    EXPECT_EQ(shown.exit_code, 0) << args[0] << ": " << shown.err;
    EXPECT_THAT(shown.out, Not(HasSubstr("\x1b"))) << args[0];
    EXPECT_THAT(shown.out, Not(HasSubstr("\x07"))) << args[0];
    EXPECT_THAT(shown.out, Not(HasSubstr("\nsecond line"))) << args[0];
    EXPECT_LT(shown.out.size(), 64u << 10) << args[0] << ": a 1 MB name is cut";
  }
  RunResult list = daemon_->Ctl({"get", id});
  EXPECT_THAT(list.out, HasSubstr("\\x1b]0;owned\\x07\\nsecond line"));
}

}  // namespace
}  // namespace overlap::testing
