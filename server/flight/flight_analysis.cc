#include "server/flight/flight_analysis.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace overlap::flight {
namespace {

using CommKey = std::pair<std::string, Lane>;

const FlightEntry* Find(const RankRing& ring, uint64_t seq) {
  for (const FlightEntry& entry : ring.entries) {
    if (entry.seq == seq) return &entry;
  }
  return nullptr;
}

bool SameCollective(const FlightEntry& a, const FlightEntry& b) {
  return a.op == b.op && a.bytes == b.bytes && a.dtype == b.dtype;
}

std::string Describe(int rank, const FlightEntry& e) {
  return absl::StrCat("rank ", rank, " ", e.op, " ", e.bytes, " B",
                      e.dtype.empty() ? "" : absl::StrCat(" ", e.dtype));
}

// The verdict at one seq of a communicator; kAllFinished when every rank
// finished it, or when no rank still holds it.
FlightVerdict AtSeq(const FlightVerdict& base, const std::vector<const RankRing*>& rings,
                    uint64_t seq, int64_t* enqueued_ns) {
  FlightVerdict at = base;
  at.seq = seq;
  const FlightEntry* first = nullptr;
  int first_rank = 0;
  for (const RankRing* ring : rings) {
    const FlightEntry* entry = Find(*ring, seq);
    if (entry == nullptr) {
      MissingRank missing{ring->rank, std::nullopt};
      if (!ring->entries.empty()) missing.last = ring->entries.back();
      at.missing.push_back(std::move(missing));
      continue;
    }
    at.reached.push_back(ring->rank);
    if (first == nullptr) {
      first = entry;
      first_rank = ring->rank;
      at.op = entry->op;
      at.job = entry->job;
      at.job_op = entry->job_op;
      *enqueued_ns = entry->enqueued_ns;
    } else if (at.desync.empty() && !SameCollective(*first, *entry)) {
      at.desync = absl::StrCat(Describe(first_rank, *first), ", ", Describe(ring->rank, *entry));
    }
    if (entry->state == FlightState::kFailed) at.failed.push_back(ring->rank);
    if (entry->state == FlightState::kEnqueued) at.unfinished.push_back(ring->rank);
  }
  if (first == nullptr) return base;
  if (!at.desync.empty()) {
    at.kind = FlightVerdict::Kind::kDesync;
  } else if (!at.missing.empty()) {
    at.kind = FlightVerdict::Kind::kNotReached;
  } else if (!at.failed.empty()) {
    at.kind = FlightVerdict::Kind::kFailed;
  } else if (!at.unfinished.empty()) {
    at.kind = FlightVerdict::Kind::kNotFinished;
  }
  return at;
}

// Whether `a` (enqueued at a_ns) is a graver verdict than `b`.
bool Graver(const FlightVerdict& a, int64_t a_ns, const FlightVerdict& b, int64_t b_ns) {
  if (a.kind != b.kind) return a.kind > b.kind;
  return a_ns < b_ns;
}

// The gravest verdict of one communicator's rings; `found_ns` is when its
// collective was enqueued, to order communicators.
FlightVerdict AnalyzeComm(const CommKey& key, const std::vector<const RankRing*>& rings,
                          int64_t* found_ns) {
  FlightVerdict best;
  best.comm = key.first;
  best.lane = key.second;
  const FlightVerdict base = best;
  // A seq below a ring's oldest entry was evicted there, not missed: only
  // seqs every ring still covers, or lies beyond, are judged.
  uint64_t low = 0, high = 0;
  for (const RankRing* ring : rings) {
    if (ring->entries.empty()) continue;
    low = std::max(low, ring->entries.front().seq);
    high = std::max(high, ring->entries.back().seq);
  }
  for (uint64_t seq = low; seq <= high && low > 0; ++seq) {
    int64_t ns = 0;
    FlightVerdict at = AtSeq(base, rings, seq, &ns);
    if (at.kind == FlightVerdict::Kind::kAllFinished) continue;
    if (best.kind == FlightVerdict::Kind::kAllFinished || Graver(at, ns, best, *found_ns)) {
      best = std::move(at);
      *found_ns = ns;
    }
  }
  return best;
}

std::string Ranks(const std::vector<int>& ranks) { return absl::StrJoin(ranks, ","); }

}  // namespace

FlightVerdict Analyze(const std::vector<RankRing>& rings) {
  std::map<CommKey, std::vector<const RankRing*>> by_comm;
  for (const RankRing& ring : rings) by_comm[{ring.comm, ring.lane}].push_back(&ring);
  FlightVerdict best;
  int64_t best_ns = 0;
  for (const auto& [key, members] : by_comm) {
    int64_t ns = 0;
    FlightVerdict verdict = AnalyzeComm(key, members, &ns);
    if (verdict.kind == FlightVerdict::Kind::kAllFinished) continue;
    if (best.kind == FlightVerdict::Kind::kAllFinished || Graver(verdict, ns, best, best_ns)) {
      best = std::move(verdict);
      best_ns = ns;
    }
  }
  return best;
}

std::string FlightVerdict::OneLine() const {
  if (kind == Kind::kAllFinished) return "flight: every recorded collective finished on every rank";
  const std::string what =
      absl::StrCat("collective #", seq, " ", op, " (", comm, ", ", LaneName(lane), " lane",
                   job.empty() ? "" : absl::StrCat(", job ", job),
                   job_op.empty() ? "" : absl::StrCat(" op ", job_op), ")");
  switch (kind) {
    case Kind::kDesync:
      return absl::StrCat("flight: desync at ", what, ": ", desync);
    case Kind::kNotReached: {
      std::vector<std::string> parts;
      for (const MissingRank& m : missing) {
        parts.push_back(m.last.has_value()
                            ? absl::StrCat(m.rank, " (last #", m.last->seq, " ", m.last->op, " ",
                                           StateName(m.last->state), ")")
                            : absl::StrCat(m.rank, " (nothing recorded)"));
      }
      return absl::StrCat("flight: ", what, " not reached by rank(s) ", absl::StrJoin(parts, ", "),
                          "; reached by ", Ranks(reached));
    }
    case Kind::kFailed:
    case Kind::kNotFinished:
    case Kind::kAllFinished:
      break;
  }
  std::string line = absl::StrCat("flight: ", what, " reached by ", Ranks(reached));
  if (!failed.empty()) absl::StrAppend(&line, ", failed on ", Ranks(failed));
  if (!unfinished.empty()) absl::StrAppend(&line, ", not finished on ", Ranks(unfinished));
  return line;
}

}  // namespace overlap::flight
