// Enqueue-time race detection for the host engine (HostEngineOptions::hazard_checks).
//
// The rule: two accesses to overlapping bytes of a buffer, at least one a
// write, must be ordered by a happens-before path that the program states
// through stream order, events, collectives or host synchronization. Whether
// the threads happened to run in that order is irrelevant, so a missing wait
// is reported every time, deterministically, before anything runs.
//
// Vector clocks: clock[s][s] counts the ops enqueued on stream s; an op with
// epoch e on stream s happened before the current op of stream t iff
// clock[t][s] >= e. RecordEvent snapshots a clock, WaitEvent merges one, a
// collective joins the clocks of its streams, and the host (one extra clock
// index) merges the streams it synchronized with; everything enqueued after a
// host call is ordered after it. Calls are assumed to come in one global order
// (the engine serializes them), so concurrent host threads share one host clock.
//
// Per buffer the tracker keeps the last writes and the reads since, as byte
// regions (a region may be strided: a column block of a row-major matrix).
// Not thread-safe: the engine calls it under its mutex.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "server/engine/region.h"

namespace overlap::engine::host {


struct Access {
  int64_t buffer = 0;
  Region region;
  bool write = false;
  int stream = 0;  // the stream (or HazardTracker::host()) that performs it
};

class HazardTracker {
 public:
  using Clock = std::vector<uint64_t>;

  // `stream_names[i]` names stream i in messages.
  explicit HazardTracker(std::vector<std::string> stream_names);

  int host() const { return host_; }

  // One op that runs on all of `streams` at once (one stream for a kernel, one
  // per rank for a collective; their clocks are joined). On a race returns
  // FAILED_PRECONDITION naming both accesses and changes nothing.
  absl::Status Op(absl::Span<const int> streams, absl::Span<const Access> accesses,
                  const char* op_name);

  Clock Snapshot(int stream) const;                 // RecordEvent
  void Merge(int stream, const Clock& snapshot);    // WaitEvent
  // The host waited for every op enqueued so far on `streams`.
  void SyncHost(absl::Span<const int> streams);
  void ForgetBuffer(int64_t buffer) { records_.erase(buffer); }
  size_t RecordCount(int64_t buffer) const;  // for tests of the list bounds

 private:
  struct Record {
    Region region;
    bool write;
    int stream;
    uint64_t epoch;
    const char* op;
  };

  bool Ordered(const Clock& clock, const Record& r) const { return clock[r.stream] >= r.epoch; }
  const std::string& StreamName(int stream) const;
  void Insert(std::vector<Record>& list, const Record& record, const Clock& clock);

  std::vector<std::string> names_;
  int host_;
  std::vector<Clock> clocks_;  // one per stream, plus the host's
  std::unordered_map<int64_t, std::vector<Record>> records_;
};

}  // namespace overlap::engine::host
