// One collective as a rank saw it, the unit of the flight recorder
// (flight_recorder.h) and of its analysis (flight_analysis.h). Plain values:
// no engine handles, so that rings from other ranks and nodes compare alike.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace overlap::flight {

// Which lane a collective ran on: the critical lane (kComm streams) or the
// deferred lane (channel engine::kDeferredLaneChannel).
enum class Lane { kCritical, kDeferred };

// How far a rank got with one collective. kEnqueued: issued to its stream;
// kFinished: its stream passed it (a later Synchronize of the rank returned
// OK); kFailed: the issuing call returned an error; kAborted: the first
// Synchronize of the rank after it returned an error, so it is not known to
// have completed (a timeout, an aborted communicator, a lost peer). A failed
// or aborted collective is never finished later: the error that a failed
// Synchronize consumed does not come back at the next one.
enum class FlightState { kEnqueued, kFinished, kFailed, kAborted };

const char* LaneName(Lane lane);  // "critical" | "deferred"
// "enqueued" | "finished" | "failed" | "aborted"
const char* StateName(FlightState state);

// An error kept in an entry is cut to this many bytes: rings stay bounded.
inline constexpr size_t kMaxFlightErrorBytes = 240;

struct FlightEntry {
  // Per communicator and lane, from 1, the same for every rank of the call.
  uint64_t seq = 0;
  std::string op;          // "all_gather", "reduce_scatter", "all_reduce", "send_recv", "barrier"
  std::vector<int> group;  // the communicator's ranks (devices) in rank order
  int64_t bytes = 0;       // this rank's send bytes
  std::string dtype;       // "bf16", ...; empty for send_recv and barrier
  Lane lane = Lane::kCritical;
  std::string job;     // the job or session it serves; empty when unknown
  std::string job_op;  // the job's op it serves; empty when unknown
  FlightState state = FlightState::kEnqueued;
  int64_t enqueued_ns = 0;  // wall clock, ns since the epoch
  int64_t finished_ns = 0;  // 0 until finished, failed or aborted
  // Failed or aborted: the error (Status::ToString, cut to
  // kMaxFlightErrorBytes); empty otherwise.
  std::string error;
};

// One rank's ring of one communicator and lane, oldest entry first.
struct RankRing {
  int rank = 0;
  std::string comm;  // "channel 0 ranks [0,1]": equal for the ranks of one communicator
  // The node it was read from, in rings gathered over the nodes of a job
  // that spans daemons (server/cluster/gather_flight.h); "" for this daemon's.
  std::string node;
  Lane lane = Lane::kCritical;
  std::vector<FlightEntry> entries;
};

}  // namespace overlap::flight
