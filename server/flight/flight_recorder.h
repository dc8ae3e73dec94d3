// FlightRecorder: per communicator, lane and rank, a bounded ring of the last
// collectives issued (flight_entry.h), cheap enough to stay on in production.
// When a job times out or aborts, the rings say which collective each rank
// reached last (flight_analysis.h).
//
// Bounded: each ring keeps at most `entries_per_ring` entries, dropping the
// oldest; MemoryBytes() reports what the rings hold.
// Thread safety: every method may be called from any thread. The lock is held
// for a few vector writes; nothing under it blocks or does I/O.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "server/flight/flight_entry.h"

namespace overlap::flight {

inline constexpr int kDefaultEntriesPerRing = 2000;

// What a collective call is, once for all its ranks.
struct CollectiveCall {
  std::string op;
  int channel = 0;
  std::vector<int> group;              // ranks in order
  std::vector<int64_t> bytes_by_rank;  // parallel to group
  std::string dtype;
  Lane lane = Lane::kCritical;
  std::string job;
  std::string job_op;
  // A job spanning daemons records its collectives under its own scope (its
  // global id): its communicators' names and seqs are then the same on every
  // node, whatever else ran there before. "" for the daemon's own.
  std::string scope;
  // Parallel to group: whether this daemon records that rank (a rank of
  // another node is that node's to record); empty: every rank.
  std::vector<bool> local;
};

// What the rings hold, for `overlapctl node` and the metrics.
struct RecorderUsage {
  int64_t rings = 0;
  int64_t entries = 0;
  int64_t bytes = 0;
  int entries_per_ring = 0;
  // The rings at their cap: rings x entries_per_ring at the entries' size
  // now (the number of rings grows with the communicators used).
  int64_t cap_bytes = 0;
};

class FlightRecorder {
 public:
  // entries_per_ring < 1 is taken as 1.
  explicit FlightRecorder(int entries_per_ring = kDefaultEntriesPerRing);

  // Records `call` as enqueued on every rank of its group; returns its seq,
  // the handle for Failed.
  uint64_t Enqueued(const CollectiveCall& call, int64_t now_ns);
  // The call recorded as `seq` on that communicator failed on every rank,
  // with `error`.
  void Failed(const CollectiveCall& call, uint64_t seq, int64_t now_ns, const absl::Status& error);
  // Every collective enqueued so far on these ranks, in `scope`, and not
  // settled yet has finished (their streams were synchronized without an
  // error). Failed and aborted ones stay so.
  void FinishedThrough(const std::vector<int>& ranks, int64_t now_ns,
                       const std::string& scope = "");
  // A Synchronize of these ranks, in `scope`, returned `error`: every
  // collective enqueued there and not settled yet is aborted with it, so that
  // the next clean Synchronize (the error consumed) cannot call it finished.
  // Except where `error` is the one a call issued since the last settlement
  // failed with (Failed): the engine reports the first error of a stream,
  // so the others then ran clean, and stay enqueued until the next one.
  void SyncFailed(const std::vector<int>& ranks, int64_t now_ns, const absl::Status& error,
                  const std::string& scope = "");

  // Copies of the rings, oldest entry first; with a non-empty `job`, only the
  // rings that hold an entry of that job.
  std::vector<RankRing> Snapshot(const std::string& job = "") const;
  int64_t MemoryBytes() const;
  RecorderUsage Usage() const;
  int entries_per_ring() const { return entries_per_ring_; }

  // "channel 0 ranks [0,1]": the communicator's name in rings and verdicts;
  // in a scope, "channel 0 ranks [0,1] of SCOPE".
  static std::string CommName(int channel, const std::vector<int>& group,
                              const std::string& scope = "");

 private:
  struct Ring {
    std::vector<FlightEntry> slots;  // grows to entries_per_ring_, then wraps
    size_t next = 0;                 // the slot the next entry goes to once full
    uint64_t written = 0;
    // Entries written before this one were settled by a Synchronize (finished
    // or aborted); a Synchronize visits only those written since.
    uint64_t settled = 0;
    // The error of an unsettled entry whose call failed (Failed), "" if none.
    std::string unsettled_failure;
    std::string scope;  // the CollectiveCall's
  };
  using RingKey = std::tuple<std::string, Lane, int>;  // comm, lane, rank

  void Push(Ring& ring, FlightEntry entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Calls visit(ring) for each ring of these ranks in `scope`; allocates
  // nothing, since every Synchronize comes here.
  template <typename Visit>
  void ForEachRingOf(const std::vector<int>& ranks, const std::string& scope, Visit visit)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets every unsettled enqueued entry of `ring` to `state` and settles it.
  void Settle(Ring& ring, FlightState state, int64_t now_ns, const std::string& error)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static std::vector<FlightEntry> Ordered(const Ring& ring);
  int64_t MemoryBytesLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int entries_per_ring_;
  mutable absl::Mutex mu_;
  std::map<RingKey, Ring> rings_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<std::string, Lane>, uint64_t> next_seq_ ABSL_GUARDED_BY(mu_);
};

}  // namespace overlap::flight
