#include "server/flight/flight_analysis.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/match.h"
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

std::string Describe(const RankRing& ring, const FlightEntry& e) {
  return absl::StrCat("rank ", ring.rank,
                      ring.node.empty() ? "" : absl::StrCat(" on node ", ring.node), " ", e.op, " ",
                      e.bytes, " B", e.dtype.empty() ? "" : absl::StrCat(" ", e.dtype));
}

// The verdict at one seq of a communicator; kAllFinished when every rank
// finished it, or when no rank still holds it.
FlightVerdict AtSeq(const FlightVerdict& base, const std::vector<const RankRing*>& rings,
                    uint64_t seq, int64_t* enqueued_ns) {
  FlightVerdict at = base;
  at.seq = seq;
  const FlightEntry* first = nullptr;
  const RankRing* first_ring = nullptr;
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
      first_ring = ring;
      at.op = entry->op;
      at.job = entry->job;
      at.job_op = entry->job_op;
      *enqueued_ns = entry->enqueued_ns;
    } else if (at.desync.empty() && !SameCollective(*first, *entry)) {
      at.desync = absl::StrCat(Describe(*first_ring, *first), ", ", Describe(*ring, *entry));
    }
    if (entry->state == FlightState::kFailed) at.failed.push_back(ring->rank);
    if (entry->state == FlightState::kAborted) at.aborted.push_back(ring->rank);
    if (entry->state == FlightState::kEnqueued) at.unfinished.push_back(ring->rank);
    if (at.error.empty()) at.error = entry->error;
  }
  if (first == nullptr) return base;
  for (int rank : first->group) {
    if (std::none_of(rings.begin(), rings.end(),
                     [rank](const RankRing* ring) { return ring->rank == rank; })) {
      at.unseen.push_back(rank);
    }
  }
  if (!at.desync.empty()) {
    at.kind = FlightVerdict::Kind::kDesync;
  } else if (!at.missing.empty()) {
    at.kind = FlightVerdict::Kind::kNotReached;
  } else if (!at.failed.empty()) {
    at.kind = FlightVerdict::Kind::kFailed;
  } else if (!at.aborted.empty()) {
    at.kind = FlightVerdict::Kind::kAborted;
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
  std::set<uint64_t> seqs;
  for (const RankRing* ring : rings) {
    for (const FlightEntry& entry : ring->entries) {
      if (entry.seq >= low && entry.seq <= high) seqs.insert(entry.seq);
    }
  }
  for (uint64_t seq : seqs) {
    if (low == 0) break;
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

std::string NodeOf(const std::map<int, std::string>& node_of, int rank) {
  auto it = node_of.find(rank);
  return it == node_of.end() ? "" : it->second;
}

// "0,1": one daemon's ranks; "0,1 on node A, 2,3 on node B" once they have nodes.
std::string Ranks(const std::vector<int>& ranks, const std::map<int, std::string>& node_of) {
  std::vector<std::string> groups;
  std::vector<int> run;
  std::string run_node;
  auto flush = [&] {
    if (run.empty()) return;
    groups.push_back(absl::StrCat(absl::StrJoin(run, ","),
                                  run_node.empty() ? "" : absl::StrCat(" on node ", run_node)));
    run.clear();
  };
  for (int rank : ranks) {
    const std::string node = NodeOf(node_of, rank);
    if (node != run_node) flush();
    run_node = node;
    run.push_back(rank);
  }
  flush();
  return absl::StrJoin(groups, ", ");
}

// "; nothing read from rank(s) 2,3": ranks of the collective's group whose
// rings were not among those judged.
std::string Unseen(const std::vector<int>& unseen) {
  if (unseen.empty()) return "";
  return absl::StrCat("; nothing read from rank(s) ", absl::StrJoin(unseen, ","));
}

}  // namespace

FlightVerdict Analyze(const std::vector<RankRing>& rings) {
  std::map<CommKey, std::vector<const RankRing*>> by_comm;
  std::map<int, std::string> node_of;
  for (const RankRing& ring : rings) {
    by_comm[{ring.comm, ring.lane}].push_back(&ring);
    if (!ring.node.empty()) node_of[ring.rank] = ring.node;
  }
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
  best.node_of = std::move(node_of);
  return best;
}

std::string GatheredVerdictLine(const std::vector<RankRing>& rings,
                                const std::vector<UnreadNode>& unread) {
  const std::string verdict = Analyze(rings).OneLine();
  if (unread.empty()) return verdict;
  std::vector<std::string> nodes;
  for (const UnreadNode& node : unread) {
    nodes.push_back(absl::StrCat(node.node, " (", node.why, ")"));
  }
  constexpr absl::string_view kPrefix = "flight: ";
  return absl::StrCat(kPrefix, "rings of node ", absl::StrJoin(nodes, ", node "),
                      " could not be read; ", absl::string_view(verdict).substr(kPrefix.size()));
}

std::string FlightVerdict::OneLine() const {
  if (kind == Kind::kAllFinished) return "flight: every recorded collective finished on every rank";
  // A job spanning daemons names its communicators after itself already.
  const bool job_in_comm = !job.empty() && absl::EndsWith(comm, absl::StrCat(" of ", job));
  const std::string serves =
      absl::StrCat(job.empty() || job_in_comm ? "" : absl::StrCat(", job ", job),
                   job_op.empty() ? "" : absl::StrCat(job_in_comm ? ", op " : " op ", job_op));
  const std::string what = absl::StrCat("collective #", seq, " ", op, " (", comm, ", ",
                                        LaneName(lane), " lane", serves, ")");
  switch (kind) {
    case Kind::kDesync:
      return absl::StrCat("flight: desync at ", what, ": ", desync);
    case Kind::kNotReached: {
      std::vector<std::string> parts;
      for (const MissingRank& m : missing) {
        const std::string node = NodeOf(node_of, m.rank);
        const std::string rank =
            node.empty() ? absl::StrCat(m.rank) : absl::StrCat(m.rank, " on node ", node);
        parts.push_back(m.last.has_value()
                            ? absl::StrCat(rank, " (last #", m.last->seq, " ", m.last->op, " ",
                                           StateName(m.last->state), ")")
                            : absl::StrCat(rank, " (nothing recorded)"));
      }
      return absl::StrCat("flight: ", what, " not reached by rank(s) ", absl::StrJoin(parts, ", "),
                          "; reached by ", Ranks(reached, node_of), Unseen(unseen));
    }
    case Kind::kFailed:
    case Kind::kAborted:
    case Kind::kNotFinished:
    case Kind::kAllFinished:
      break;
  }
  std::string line = absl::StrCat("flight: ", what, " reached by ", Ranks(reached, node_of));
  if (!failed.empty()) absl::StrAppend(&line, ", failed on ", Ranks(failed, node_of));
  if (!aborted.empty()) absl::StrAppend(&line, ", aborted on ", Ranks(aborted, node_of));
  if (!unfinished.empty()) {
    absl::StrAppend(&line, ", not finished on ", Ranks(unfinished, node_of));
  }
  return absl::StrCat(line, Unseen(unseen));
}

}  // namespace overlap::flight
