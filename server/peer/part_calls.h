// The peer calls about a job's parts (peer.proto) in the job core's own
// types: what the coordinator (server/cluster/coordinator.h) and the part
// host (server/cluster/part_host.h) send through a PeerLink (peer_link.h) and
// answer as the PeerHandler below. The peer listener (peer_server.h) and
// GrpcPeerLink convert them to and from the wire (server/wire/peer_wire.h);
// nothing above peer/ sees a v1 message.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "server/flight/flight_entry.h"
#include "server/ops/decided_schedules.h"
#include "server/runner/job_report.h"

namespace overlap::peer {

// A job spanning daemons, named across them.
struct GlobalJobId {
  std::string coordinator;  // the coordinator's node name
  std::string job_id;       // the job's id there
  // "coordinator/job-000001".
  std::string Key() const { return absl::StrCat(coordinator, "/", job_id); }
};

// AdmitPart: node `node_index`'s part of a job, as its coordinator decided it.
struct PartRequest {
  GlobalJobId global_id;
  std::string spec;  // the job's spec text, as submitted
  int node_index = 0;
  std::vector<std::string> nodes;  // every node, in rank order
  std::string owner;               // the identity the coordinator authenticated
  std::string owner_name;
  bool owner_admin = false;
  int priority = 0;
  std::string name;
  bool check_only = false;  // check it could be admitted; queue nothing
  ops::DecidedSchedules schedules;
  ops::DecisionNotes notes;  // why each was decided, for the report
};

struct CancelRequest {
  GlobalJobId global_id;
  std::string reason;
};

// HoldPart: a part that holds its devices asks whether to start.
struct HoldRequest {
  GlobalJobId global_id;
  int node_index = 0;
  std::string part_id;
  absl::Duration wait = absl::ZeroDuration();  // how long the coordinator may hold the call
};

// HoldPart's answer; numbered as peer.proto's HoldPartResponse.Decision.
enum class HoldDecision {
  kWait,     // not every node holds its part yet: ask again
  kStart,    // every node holds its part: run now
  kRelease,  // the coordinator gave the reservation up: end the part
  kCancel,   // the job was cancelled or failed elsewhere
};
struct HoldAnswer {
  HoldDecision decision = HoldDecision::kWait;
  std::string reason;
};

// ReportPart: how a part ended, its ranks' report or its failure.
struct PartReport {
  GlobalJobId global_id;
  int node_index = 0;
  std::string part_id;
  absl::StatusOr<runner::JobReport> outcome = runner::JobReport{};
};

// StoreSet / StoreGet: the rendezvous store a job's groups across nodes meet in.
struct StoreCall {
  GlobalJobId global_id;
  std::string key;
  std::string value;                              // StoreSet's
  absl::Duration timeout = absl::ZeroDuration();  // StoreGet's
};

// GetPartFlight: the flight rings of a job's collectives on one node.
struct FlightRequest {
  GlobalJobId global_id;
};
// At most kMaxPartFlightEntries entries in all: past it each ring keeps its
// newest (a few MiB on the wire at most).
inline constexpr int kMaxPartFlightEntries = 32768;
struct PartFlight {
  std::vector<flight::RankRing> rings;  // this node's ranks
  bool truncated = false;
};

// Who called, as the peer listener authenticated them.
struct PeerCaller {
  std::string node;         // the caller's node name (HOST:PORT), proven
  std::string tls_subject;  // "CN=node-2,O=acme"; "" without TLS
  std::string peer_uri;     // gRPC's peer string, "ipv4:127.0.0.1:53412"
};

// The job side of the peer protocol (peer.proto says what each call means).
// A returned status goes to the caller with its code and message. Long polls
// (HoldPart's wait, StoreGet's timeout) should end by themselves: the
// listener's Shutdown waits for running handlers after its grace.
class PeerHandler {
 public:
  virtual ~PeerHandler() = default;
  // The part's id on this node.
  virtual absl::StatusOr<std::string> AdmitPart(const PeerCaller& caller,
                                                const PartRequest& request) = 0;
  virtual absl::Status CancelPart(const PeerCaller& caller, const CancelRequest& request) = 0;
  virtual absl::StatusOr<HoldAnswer> HoldPart(const PeerCaller& caller,
                                              const HoldRequest& request) = 0;
  virtual absl::Status ReportPart(const PeerCaller& caller, const PartReport& report) = 0;
  virtual absl::Status StoreSet(const PeerCaller& caller, const StoreCall& call) = 0;
  virtual absl::StatusOr<std::string> StoreGet(const PeerCaller& caller, const StoreCall& call) = 0;
  // From the job's coordinator only. UNIMPLEMENTED by default (a handler
  // without a flight recorder).
  virtual absl::StatusOr<PartFlight> GetPartFlight(const PeerCaller& caller,
                                                   const FlightRequest& request) {
    (void)caller;
    (void)request;
    return absl::UnimplementedError("this node keeps no flight rings");
  }
};

}  // namespace overlap::peer
