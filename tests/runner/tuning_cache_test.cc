// The tuning cache on its own: what goes in comes back, filters pick exactly
// the entries they name, retune cut-offs, and what a restart sees.
#include "server/runner/tuning_cache.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "tests/tuning_key_util.h"

namespace overlap::runner {
namespace {

using ops::Schedule;

class TuningCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (std::filesystem::temp_directory_path() /
             ("overlap_tuning_cache_" + std::to_string(::getpid()) + ".db"))
                .string();
    std::filesystem::remove(path_);
  }
  void TearDown() override { std::filesystem::remove(path_); }

  static TuningKey Key(const std::string& op, int64_t m, const std::string& env = "env-a") {
    return MakeTuningKey(op, m, 8192, 4096, env);
  }
  static TunedChoice Choice(OverlapMode mode, int chunks, double ms) {
    return TunedChoice{Schedule{mode, chunks, Transport::kP2p}, ms};
  }
  static std::vector<std::string> Ops(const std::vector<TunedEntry>& entries) {
    std::vector<std::string> out;
    for (const TunedEntry& e : entries)
      out.push_back(e.key.op_type + "/" + std::to_string(e.key.m));
    return out;
  }

  std::string path_;
};

TEST_F(TuningCacheTest, StoresAndLooksUpByTheWholeKey) {
  auto cache = TuningCache::Open(path_);
  ASSERT_TRUE(cache.ok()) << cache.status();
  ASSERT_TRUE(
      (*cache)->Store(Key("gemm_rs", 8192), Choice(OverlapMode::kRing, 4, 0.231), 1000).ok());
  auto hit = (*cache)->Lookup(Key("gemm_rs", 8192));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->schedule.Name(), "ring/4/p2p");
  EXPECT_DOUBLE_EQ(hit->step_ms, 0.231);
  // Any part of the key differing is a miss: shape, environment, what was asked.
  EXPECT_FALSE((*cache)->Lookup(Key("gemm_rs", 4096)).has_value());
  EXPECT_FALSE((*cache)->Lookup(Key("gemm_rs", 8192, "env-b")).has_value());
  TuningKey asked = Key("gemm_rs", 8192);
  asked.requested = "ring/0/auto";
  EXPECT_FALSE((*cache)->Lookup(asked).has_value());
  // Storing again replaces.
  ASSERT_TRUE(
      (*cache)->Store(Key("gemm_rs", 8192), Choice(OverlapMode::kBulk, 1, 0.229), 2000).ok());
  EXPECT_EQ((*cache)->Lookup(Key("gemm_rs", 8192))->schedule.Name(), "bulk/p2p");
}

TEST_F(TuningCacheTest, LookupIgnoresChoicesTunedBeforeTheCutOff) {
  auto cache = TuningCache::Open(path_);
  ASSERT_TRUE(cache.ok());
  ASSERT_TRUE((*cache)->Store(Key("ag_gemm", 4096), Choice(OverlapMode::kRing, 2, 0.4), 5000).ok());
  EXPECT_TRUE((*cache)->Lookup(Key("ag_gemm", 4096), 5000).has_value());
  EXPECT_FALSE((*cache)->Lookup(Key("ag_gemm", 4096), 5001).has_value());
}

TEST_F(TuningCacheTest, ListsInOrderAndFilters) {
  auto cache = TuningCache::Open(path_);
  ASSERT_TRUE(cache.ok());
  ASSERT_TRUE((*cache)->Store(Key("gemm_rs", 8192), Choice(OverlapMode::kRing, 2, 1), 10).ok());
  ASSERT_TRUE((*cache)->Store(Key("ag_gemm", 16384), Choice(OverlapMode::kRing, 2, 1), 20).ok());
  ASSERT_TRUE((*cache)->Store(Key("ag_gemm", 4096), Choice(OverlapMode::kRing, 2, 1), 30).ok());
  ASSERT_TRUE(
      (*cache)->Store(Key("ag_gemm", 4096, "env-old"), Choice(OverlapMode::kBulk, 1, 1), 40).ok());

  auto all = (*cache)->List({});
  ASSERT_TRUE(all.ok());
  // By op type, then shape; the same op and shape newest first.
  EXPECT_EQ(Ops(*all), (std::vector<std::string>{"ag_gemm/4096", "ag_gemm/4096", "ag_gemm/16384",
                                                 "gemm_rs/8192"}));
  EXPECT_EQ((*all)[0].key.environment, "env-old");
  EXPECT_EQ((*all)[0].tuned_unix_ms, 40);

  TuningFilter by_op;
  by_op.op_type = "gemm_rs";
  EXPECT_EQ(Ops(*(*cache)->List(by_op)), (std::vector<std::string>{"gemm_rs/8192"}));
  TuningFilter by_shape;
  by_shape.m = 16384;
  by_shape.k = 8192;
  by_shape.n = 4096;
  EXPECT_EQ(Ops(*(*cache)->List(by_shape)), (std::vector<std::string>{"ag_gemm/16384"}));
  TuningFilter stale;
  stale.stale_unless_in = std::set<std::string>{"env-a"};
  auto stale_list = (*cache)->List(stale);
  ASSERT_EQ(stale_list->size(), 1u);
  EXPECT_EQ((*stale_list)[0].key.environment, "env-old");
}

TEST_F(TuningCacheTest, ForgetRemovesExactlyWhatMatches) {
  auto cache = TuningCache::Open(path_);
  ASSERT_TRUE(cache.ok());
  ASSERT_TRUE((*cache)->Store(Key("gemm_rs", 8192), Choice(OverlapMode::kRing, 2, 1), 10).ok());
  ASSERT_TRUE((*cache)->Store(Key("ag_gemm", 4096), Choice(OverlapMode::kRing, 2, 1), 20).ok());
  ASSERT_TRUE(
      (*cache)->Store(Key("ag_gemm", 4096, "env-old"), Choice(OverlapMode::kBulk, 1, 1), 30).ok());

  TuningFilter stale;
  stale.stale_unless_in = std::set<std::string>{"env-a"};
  EXPECT_EQ(*(*cache)->Forget(stale), 1);
  EXPECT_EQ(Ops(*(*cache)->List({})), (std::vector<std::string>{"ag_gemm/4096", "gemm_rs/8192"}));
  TuningFilter by_op;
  by_op.op_type = "gemm_ar";
  EXPECT_EQ(*(*cache)->Forget(by_op), 0);
  by_op.op_type = "ag_gemm";
  EXPECT_EQ(*(*cache)->Forget(by_op), 1);
  EXPECT_FALSE((*cache)->Lookup(Key("ag_gemm", 4096)).has_value());
  EXPECT_TRUE((*cache)->Lookup(Key("gemm_rs", 8192)).has_value());
  EXPECT_EQ(*(*cache)->Forget({}), 1);
  EXPECT_TRUE((*cache)->List({})->empty());
}

TEST_F(TuningCacheTest, ARestartSeesWhatWasStoredAndDropsTheOldTable) {
  {
    // A state directory from before the build was part of the key.
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(sqlite3_exec(db,
                           "CREATE TABLE tuning (key TEXT PRIMARY KEY, mode TEXT NOT NULL, "
                           "chunks INTEGER NOT NULL, transport TEXT NOT NULL, step_ms REAL NOT "
                           "NULL, updated_unix_ms INTEGER NOT NULL);"
                           "INSERT INTO tuning VALUES ('k', 'ring', 2, 'p2p', 1.0, 1)",
                           nullptr, nullptr, nullptr),
              SQLITE_OK);
    sqlite3_close(db);
  }
  {
    auto cache = TuningCache::Open(path_);
    ASSERT_TRUE(cache.ok()) << cache.status();
    ASSERT_TRUE(
        (*cache)->Store(Key("gemm_ar", 8192), Choice(OverlapMode::kChunked, 8, 2.8), 99).ok());
  }
  auto reopened = TuningCache::Open(path_);
  ASSERT_TRUE(reopened.ok());
  auto entries = (*reopened)->List({});
  ASSERT_EQ(entries->size(), 1u);
  EXPECT_EQ((*entries)[0].choice.schedule.Name(), "chunked/8/p2p");
  EXPECT_EQ((*entries)[0].key.Text(),
            "gemm_ar m=8192 k=8192 n=4096 dtype=bf16 tp=2 requested=auto/0/auto env-a");
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  EXPECT_NE(sqlite3_prepare_v2(db, "SELECT key FROM tuning", -1, &stmt, nullptr), SQLITE_OK);
  sqlite3_finalize(stmt);
  sqlite3_close(db);
}

TEST_F(TuningCacheTest, KeepsAnAllReducesAlgorithm) {
  auto cache = TuningCache::Open(path_);
  ASSERT_TRUE(cache.ok()) << cache.status();
  const Schedule tree{OverlapMode::kSerial, 1, Transport::kNccl, AllReduceAlgorithm::kTree};
  ASSERT_TRUE((*cache)->Store(Key("all_reduce", 8192), TunedChoice{tree, 0.5}, 7).ok());
  auto hit = (*cache)->Lookup(Key("all_reduce", 8192));
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->schedule.Name(), "serial/nccl/tree");
  EXPECT_TRUE(hit->schedule == tree);
}

// A table from before all_reduce algorithms gains the column; its rows keep
// the default algorithm, and new rows keep theirs.
TEST_F(TuningCacheTest, ATableWithoutTheAlgorithmColumnGainsIt) {
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path_.c_str(), &db), SQLITE_OK);
    ASSERT_EQ(
        sqlite3_exec(db,
                     "CREATE TABLE tuned_schedules (key TEXT PRIMARY KEY, op_type TEXT NOT NULL, "
                     "m INTEGER NOT NULL, k INTEGER NOT NULL, n INTEGER NOT NULL, dtype TEXT NOT "
                     "NULL, tp INTEGER NOT NULL, requested TEXT NOT NULL, environment TEXT NOT "
                     "NULL, mode TEXT NOT NULL, chunks INTEGER NOT NULL, transport TEXT NOT NULL, "
                     "step_ms REAL NOT NULL, tuned_unix_ms INTEGER NOT NULL);"
                     "INSERT INTO tuned_schedules VALUES ('old', 'gemm_rs', 8192, 8192, 4096, "
                     "'bf16', 2, 'auto/0/auto', 'env-a', 'ring', 2, 'p2p', 0.3, 5)",
                     nullptr, nullptr, nullptr),
        SQLITE_OK);
    sqlite3_close(db);
  }
  auto cache = TuningCache::Open(path_);
  ASSERT_TRUE(cache.ok()) << cache.status();
  const Schedule ps{OverlapMode::kSerial, 1, Transport::kP2p, AllReduceAlgorithm::kParameterServer};
  ASSERT_TRUE((*cache)->Store(Key("all_reduce", 64), TunedChoice{ps, 0.1}, 9).ok());
  auto entries = (*cache)->List({});
  ASSERT_TRUE(entries.ok()) << entries.status();
  std::vector<std::string> names;
  for (const TunedEntry& e : *entries) names.push_back(e.choice.schedule.Name());
  EXPECT_EQ(names, (std::vector<std::string>{"serial/p2p/ps", "ring/2/p2p"}));
}

// Opened the one way overlapd opens SQLite (common/sqlite_db.h): a file it
// cannot open is FAILED_PRECONDITION, as for the job store and the Xid log.
TEST_F(TuningCacheTest, UnopenableFileIsFailedPrecondition) {
  auto cache = TuningCache::Open("/nonexistent-dir/overlap/tuning.db");
  EXPECT_EQ(cache.status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace overlap::runner
