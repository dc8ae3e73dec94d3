// The verdict on a hung or aborted job from the flight rings of all its ranks
// (flight_entry.h): the first collective that not every rank finished, which
// ranks reached it and which did not, what a missing rank did last, and
// whether ranks disagree on the collective at one seq (a desync).
//
// Pure functions of the rings, thread-safe. Rings from other nodes compare by
// their communicator name and seq, so the ranks must be global.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "server/flight/flight_entry.h"

namespace overlap::flight {

struct MissingRank {
  int rank = 0;
  std::optional<FlightEntry> last;  // its newest entry on that communicator, if any
};

struct FlightVerdict {
  enum class Kind {
    kAllFinished,  // every recorded collective finished on every rank
    kNotFinished,  // every rank enqueued `seq`, some have not finished it yet
    // every rank enqueued `seq`; on some, the synchronization after it failed
    // before it was known finished (FlightState::kAborted): it is where they
    // were cut off, or before
    kAborted,
    kFailed,      // every rank enqueued `seq`, its call failed on some
    kNotReached,  // some ranks never enqueued `seq`
    kDesync,      // ranks enqueued different collectives as `seq`
  };
  Kind kind = Kind::kAllFinished;
  std::string comm;
  Lane lane = Lane::kCritical;
  uint64_t seq = 0;
  std::string op;                    // the collective at `seq` (of the first rank that reached it)
  std::string job;                   // the job it served
  std::string job_op;                // and the job's op
  std::vector<int> reached;          // enqueued `seq`
  std::vector<MissingRank> missing;  // did not enqueue it (kNotReached)
  std::vector<int> failed;           // its call failed (kFailed)
  std::vector<int> aborted;          // aborted there (kAborted)
  std::vector<int> unfinished;       // enqueued, never finished (kNotFinished)
  // Ranks of its group with no ring of its communicator among those judged:
  // a node whose rings could not be read, or that recorded nothing there.
  std::vector<int> unseen;
  std::string error;   // the error of its first failed or aborted rank
  std::string desync;  // "rank 0 all_reduce 4096 B, rank 1 all_gather 4096 B"
  // The node of each rank, from rings gathered over nodes (RankRing::node):
  // ranks are then named with their node. Empty for one daemon's rings.
  std::map<int, std::string> node_of;

  // One line for `overlapctl get`, starting "flight: ".
  std::string OneLine() const;
};

// The gravest problem over all communicators, in Kind's order from the last
// (a desync) to the first (not finished: a collective not yet known to be
// done is also what every healthy rank shows between synchronizations); of
// equals, the one enqueued first, as a later hang is usually its consequence.
// Seqs are judged only where a ring holds them, so that rings read from a
// peer cost what they hold, whatever seqs they carry.
FlightVerdict Analyze(const std::vector<RankRing>& rings);

// A node of a job whose rings could not be read, and why.
struct UnreadNode {
  std::string node;
  std::string why;
};
// A job's rings gathered from its nodes (server/cluster/gather_flight.h):
// each ring names its node.
struct GatheredRings {
  std::vector<RankRing> rings;
  std::vector<UnreadNode> unread;
  bool truncated = false;  // a node cut its rings to their newest entries
};

// The one line over rings gathered from a job's nodes: the nodes that could
// not be read first ("flight: rings of node B could not be read (...); ..."),
// then Analyze's verdict on the rest.
std::string GatheredVerdictLine(const std::vector<RankRing>& rings,
                                const std::vector<UnreadNode>& unread);

}  // namespace overlap::flight
