// Fuzz target: the tuning cache as it reads its rows back from disk
// (tuning.db; server/runner/tuning_cache.cc) and the node's tuning state over
// it (server/node/tuning_state.cc, what `overlapctl tuning` lists). The input
// is one row of tuned_schedules, a column a line in the table's order (key
// first: it is the key's text, as Store writes it, when the line is empty);
// each goes in as text and SQLite converts it as the column's type says, as
// a hand edit or damage could leave it.
//
// Rules: reading never fails on a row's contents; a choice handed back (List,
// Lookup) is one the runner can run for its op: a mode and a transport that
// are not auto, and, for the modes that cut rows, at least one piece and no
// more pieces than m / tp rows (graph_validator's rule for an explicit
// `chunks`); Lookup hands back what List lists.
#include <sqlite3.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "server/engine/host/host_engine.h"
#include "server/node/tuning_state.h"
#include "server/runner/tuning_cache.h"
#include "tests/fuzz/fuzz_check.h"

namespace overlap::fuzz {
namespace {

constexpr int kColumnCount = 15;
constexpr char kInsert[] =
    "INSERT INTO tuned_schedules (key, op_type, m, k, n, dtype, tp, requested, environment, mode, "
    "chunks, transport, step_ms, tuned_unix_ms, algorithm) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";

// One cache for the whole run, on tmpfs where there is one: a fuzz run writes
// a row per input, and tuning.db is synchronous=FULL.
struct Cache {
  Cache() {
    std::string dir = std::string(access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp") +
                      "/overlap-tuning-fuzz-XXXXXX";
    FUZZ_CHECK(mkdtemp(dir.data()) != nullptr);
    path = dir + "/tuning.db";
    absl::StatusOr<std::unique_ptr<runner::TuningCache>> opened = runner::TuningCache::Open(path);
    FUZZ_CHECK(opened.ok());
    cache = std::move(*opened);
    FUZZ_CHECK(sqlite3_open(path.c_str(), &writer) == SQLITE_OK);
    FUZZ_CHECK(sqlite3_exec(writer, "PRAGMA synchronous=OFF", nullptr, nullptr, nullptr) ==
               SQLITE_OK);
    engine::HostEngineOptions options;
    options.device_count = 2;
    host = std::move(engine::CreateHostEngine(options)).value();
    state = node::CacheTuningState(cache.get(), *host);
  }
  std::string path;
  std::unique_ptr<runner::TuningCache> cache;
  sqlite3* writer = nullptr;
  std::unique_ptr<engine::Engine> host;
  std::unique_ptr<node::TuningState> state;
};

int64_t Int(const std::string& text) {
  int64_t value = 0;
  return absl::SimpleAtoi(text, &value) ? value : 0;
}

bool Runnable(const ops::Schedule& s, int64_t m, int64_t tp) {
  if (s.mode == OverlapMode::kAuto || s.transport == Transport::kAuto) return false;
  if (s.mode != OverlapMode::kChunked && s.mode != OverlapMode::kRing) return true;
  return s.chunks >= 1 && (s.chunks == 1 || (tp >= 1 && s.chunks <= m / tp));
}

}  // namespace
}  // namespace overlap::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace overlap;
  static fuzz::Cache* const c = new fuzz::Cache();
  std::vector<std::string> columns = absl::StrSplit(fuzz::Text(data, size), '\n');
  columns.resize(fuzz::kColumnCount);
  runner::TuningKey key;
  key.op_type = columns[1];
  key.m = fuzz::Int(columns[2]);
  key.k = fuzz::Int(columns[3]);
  key.n = fuzz::Int(columns[4]);
  key.dtype = columns[5];
  key.tp = static_cast<int>(fuzz::Int(columns[6]));
  key.requested = columns[7];
  key.environment = columns[8];
  if (columns[0].empty()) columns[0] = key.Text();

  FUZZ_CHECK(sqlite3_exec(c->writer, "DELETE FROM tuned_schedules", nullptr, nullptr, nullptr) ==
             SQLITE_OK);
  sqlite3_stmt* insert = nullptr;
  FUZZ_CHECK(sqlite3_prepare_v2(c->writer, fuzz::kInsert, -1, &insert, nullptr) == SQLITE_OK);
  for (int i = 0; i < fuzz::kColumnCount; ++i) {
    sqlite3_bind_text(insert, i + 1, columns[i].data(), static_cast<int>(columns[i].size()),
                      SQLITE_TRANSIENT);
  }
  const bool stored = sqlite3_step(insert) == SQLITE_DONE;
  sqlite3_finalize(insert);
  if (!stored) return 0;  // a row SQLite itself refuses (a NOT NULL column left NULL)

  const absl::StatusOr<std::vector<runner::TunedEntry>> listed = c->cache->List({});
  FUZZ_CHECK(listed.ok());
  FUZZ_CHECK(listed->size() <= 1);
  for (const runner::TunedEntry& e : *listed) {
    FUZZ_CHECK(fuzz::Runnable(e.choice.schedule, e.key.m, e.key.tp));
  }
  const std::optional<runner::TunedChoice> hit = c->cache->Lookup(key);
  if (hit.has_value()) {
    FUZZ_CHECK(fuzz::Runnable(hit->schedule, key.m, key.tp));
    FUZZ_CHECK(listed->size() == 1 && (*listed)[0].choice.schedule == hit->schedule);
  }
  v1::TuningFilter filter;
  const absl::StatusOr<std::vector<v1::TunedSchedule>> shown = c->state->List(filter);
  FUZZ_CHECK(shown.ok() && shown->size() == listed->size());
  filter.set_stale_only(true);
  filter.set_m(key.m < 0 ? 1 : key.m);
  FUZZ_CHECK(c->state->List(filter).ok());
  return 0;
}
