#include "server/flight/flight_recorder.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/checked_size.h"

namespace overlap::flight {

const char* LaneName(Lane lane) { return lane == Lane::kDeferred ? "deferred" : "critical"; }

const char* StateName(FlightState state) {
  switch (state) {
    case FlightState::kEnqueued:
      return "enqueued";
    case FlightState::kFinished:
      return "finished";
    case FlightState::kFailed:
      return "failed";
    case FlightState::kAborted:
      return "aborted";
  }
  return "unknown";
}

FlightRecorder::FlightRecorder(int entries_per_ring)
    : entries_per_ring_(std::max(entries_per_ring, 1)) {}

std::string FlightRecorder::CommName(int channel, const std::vector<int>& group,
                                     const std::string& scope) {
  return absl::StrCat("channel ", channel, " ranks [", absl::StrJoin(group, ","), "]",
                      scope.empty() ? "" : absl::StrCat(" of ", scope));
}

void FlightRecorder::Push(Ring& ring, FlightEntry entry) {
  ++ring.written;
  if (ring.slots.size() < static_cast<size_t>(entries_per_ring_)) {
    ring.slots.push_back(std::move(entry));
    return;
  }
  ring.slots[ring.next] = std::move(entry);
  ring.next = (ring.next + 1) % ring.slots.size();
}

uint64_t FlightRecorder::Enqueued(const CollectiveCall& call, int64_t now_ns) {
  const std::string comm = CommName(call.channel, call.group, call.scope);
  absl::MutexLock lock(&mu_);
  const uint64_t seq = ++next_seq_[{comm, call.lane}];
  for (size_t i = 0; i < call.group.size(); ++i) {
    if (i < call.local.size() && !call.local[i]) continue;
    FlightEntry entry;
    entry.seq = seq;
    entry.op = call.op;
    entry.group = call.group;
    entry.bytes = i < call.bytes_by_rank.size() ? call.bytes_by_rank[i] : 0;
    entry.dtype = call.dtype;
    entry.lane = call.lane;
    entry.job = call.job;
    entry.job_op = call.job_op;
    entry.enqueued_ns = now_ns;
    Ring& ring = rings_[{comm, call.lane, call.group[i]}];
    ring.scope = call.scope;
    Push(ring, std::move(entry));
  }
  return seq;
}

namespace {

std::string ErrorText(const absl::Status& error) {
  std::string text = error.ToString();
  if (text.size() > kMaxFlightErrorBytes) text.resize(kMaxFlightErrorBytes);
  return text;
}

}  // namespace

void FlightRecorder::Failed(const CollectiveCall& call, uint64_t seq, int64_t now_ns,
                            const absl::Status& error) {
  const std::string comm = CommName(call.channel, call.group, call.scope);
  const std::string text = ErrorText(error);
  absl::MutexLock lock(&mu_);
  for (int rank : call.group) {
    auto it = rings_.find({comm, call.lane, rank});
    if (it == rings_.end()) continue;
    Ring& ring = it->second;
    for (FlightEntry& entry : ring.slots) {
      if (entry.seq != seq) continue;
      entry.state = FlightState::kFailed;
      entry.finished_ns = now_ns;
      entry.error = text;
      ring.unsettled_failure = text;
    }
  }
}

template <typename Visit>
void FlightRecorder::ForEachRingOf(const std::vector<int>& ranks, const std::string& scope,
                                   Visit visit) {
  for (auto& [key, ring] : rings_) {
    if (ring.scope != scope) continue;
    if (std::find(ranks.begin(), ranks.end(), std::get<2>(key)) == ranks.end()) continue;
    visit(ring);
  }
}

void FlightRecorder::Settle(Ring& ring, FlightState state, int64_t now_ns,
                            const std::string& error) {
  // Only the entries written since the last settlement that the ring still
  // holds: a Synchronize costs the collectives enqueued since the one before.
  // Entry w (from 0) lives in slot w % entries_per_ring_.
  const uint64_t cap = static_cast<uint64_t>(entries_per_ring_);
  const uint64_t oldest = ring.written > cap ? ring.written - cap : 0;
  for (uint64_t w = std::max(ring.settled, oldest); w < ring.written; ++w) {
    FlightEntry& entry = ring.slots[static_cast<size_t>(w % cap)];
    if (entry.state != FlightState::kEnqueued) continue;
    entry.state = state;
    entry.finished_ns = now_ns;
    entry.error = error;
  }
  ring.settled = ring.written;
  ring.unsettled_failure.clear();
}

void FlightRecorder::FinishedThrough(const std::vector<int>& ranks, int64_t now_ns,
                                     const std::string& scope) {
  absl::MutexLock lock(&mu_);
  ForEachRingOf(ranks, scope, [&](Ring& ring) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Settle(ring, FlightState::kFinished, now_ns, "");
  });
}

void FlightRecorder::SyncFailed(const std::vector<int>& ranks, int64_t now_ns,
                                const absl::Status& error, const std::string& scope) {
  const std::string text = ErrorText(error);
  absl::MutexLock lock(&mu_);
  bool repeated = false;  // the error a call failed with, reported once more
  ForEachRingOf(ranks, scope,
                [&](const Ring& ring) { repeated = repeated || ring.unsettled_failure == text; });
  if (repeated) return;
  ForEachRingOf(ranks, scope, [&](Ring& ring) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Settle(ring, FlightState::kAborted, now_ns, text);
  });
}

std::vector<FlightEntry> FlightRecorder::Ordered(const Ring& ring) {
  std::vector<FlightEntry> out;
  out.reserve(ring.slots.size());
  for (size_t k = 0; k < ring.slots.size(); ++k) {
    out.push_back(ring.slots[(ring.next + k) % ring.slots.size()]);
  }
  return out;
}

std::vector<RankRing> FlightRecorder::Snapshot(const std::string& job) const {
  std::vector<RankRing> out;
  absl::MutexLock lock(&mu_);
  for (const auto& [key, ring] : rings_) {
    if (!job.empty() && std::none_of(ring.slots.begin(), ring.slots.end(),
                                     [&](const FlightEntry& e) { return e.job == job; })) {
      continue;
    }
    RankRing copy;
    copy.comm = std::get<0>(key);
    copy.lane = std::get<1>(key);
    copy.rank = std::get<2>(key);
    copy.entries = Ordered(ring);
    out.push_back(std::move(copy));
  }
  return out;
}

int64_t FlightRecorder::MemoryBytes() const {
  absl::MutexLock lock(&mu_);
  return MemoryBytesLocked();
}

RecorderUsage FlightRecorder::Usage() const {
  RecorderUsage usage;
  usage.entries_per_ring = entries_per_ring_;
  absl::MutexLock lock(&mu_);
  usage.bytes = MemoryBytesLocked();
  usage.rings = static_cast<int64_t>(rings_.size());
  for (const auto& [key, ring] : rings_) usage.entries += static_cast<int64_t>(ring.slots.size());
  const int64_t per_entry =
      usage.entries > 0 ? usage.bytes / usage.entries : static_cast<int64_t>(sizeof(FlightEntry));
  // Saturating: a huge flight_recorder_entries must not wrap the figure.
  usage.cap_bytes = std::max(
      SaturatingMul(SaturatingMul(usage.rings, entries_per_ring_), per_entry), usage.bytes);
  return usage;
}

int64_t FlightRecorder::MemoryBytesLocked() const {
  int64_t bytes = 0;
  for (const auto& [key, ring] : rings_) {
    bytes += static_cast<int64_t>(sizeof(Ring) + std::get<0>(key).capacity() +
                                  ring.unsettled_failure.capacity() +
                                  ring.slots.capacity() * sizeof(FlightEntry));
    for (const FlightEntry& entry : ring.slots) {
      bytes += static_cast<int64_t>(entry.op.capacity() + entry.dtype.capacity() +
                                    entry.job.capacity() + entry.job_op.capacity() +
                                    entry.error.capacity() + entry.group.capacity() * sizeof(int));
    }
  }
  return bytes;
}

}  // namespace overlap::flight
