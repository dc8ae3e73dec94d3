// The coordinator of a job that spans daemons, on the daemon it was submitted
// to. Its job holds no devices; it runs (on an executor, like any job) the
// coordination, whose phases (CoordinatorPhase) move by one table
// (CoordinatorMayMove), logged at debug. Each node of the job has one slot,
// with its own phase (SlotPhase, SlotMayMove), its part's id and its report:
//
//   0. Check every node again, as at submission (CheckNodes).
//   1. Reserve the slots one at a time in the nodes' global order (by
//      address) (ReserveNext): admit a part on the node (its PartHost checks
//      and queues it like any job) and wait until the part holds its devices
//      and says so (HoldPart). Every coordinator reserves in the same order,
//      so two jobs over overlapping nodes cannot each hold a node the other
//      waits for. A part not started within cluster_hold_timeout_ms (its node
//      busy with a long job) makes the coordinator release every slot (their
//      parts end CANCELLED) and try again after a backoff: a reservation keeps
//      nodes idle that long at most. Jobs queued behind a holding part wait,
//      as behind any running job.
//   2. Once every slot is held, start the parts at once (HoldPart answers
//      START); their groups that cross nodes meet in the coordinator's store
//      (StoreSet/StoreGet).
//   3. Merge the parts' reports (ReportPart) into the job's result
//      (MergeNodeResults). A part that fails, a node that stops answering, and
//      a cancel end the job and every other part.
//
// Every `auto` is decided once, at admission, by one rule
// (ops::DecideSpanningSchedules), never by timing: nodes that timed
// differently would choose differently and hang. Each part checks and runs
// the decisions it is sent.
//
// Thread safety: every public method may be called from any thread.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "server/cluster/part_host.h"
#include "server/gloo/rendezvous_store.h"

namespace overlap::cluster {

enum class CoordinatorPhase {
  kChecking,
  kReserving,
  kReleasing,
  kHolding,
  kRunning,
  kReporting,
  kEnded
};
const char* CoordinatorPhaseName(CoordinatorPhase phase);
// The transitions a coordination may make (a failure or cancel ends it from
// any phase but the end).
bool CoordinatorMayMove(CoordinatorPhase from, CoordinatorPhase to);

// Where one node's part is: none yet; AdmitPart under way; queued there
// (its part id known); holding its devices; ended (its report kept).
enum class SlotPhase { kIdle, kAdmitting, kAdmitted, kHeld, kReported };
const char* SlotPhaseName(SlotPhase phase);
// The moves a slot may make: forward one step at a time (a part may end
// before it held), and back to idle from anywhere but idle (an admission
// that failed, or a release).
bool SlotMayMove(SlotPhase from, SlotPhase to);

class Coordinator {
 public:
  // `engine`, `admission`, `link` and `own_parts` (this node's parts, and
  // its job queue) must outlive this.
  Coordinator(const ClusterOptions& options, const engine::Engine& engine,
              const jobs::Admission& admission, peer::PeerLink& link, PartHost& own_parts);

  // The job to hand to the job queue, and its typed graph, for a graph that
  // spans daemons (its `nodes`, or `nodes` where given; `spec` is its parse
  // of `spec_text`), checked here and on every peer it can be without
  // reserving anything: this node among them, the others in peers:,
  // reachable and of this version. INVALID_ARGUMENT, PERMISSION_DENIED (a
  // node not in peers:), FAILED_PRECONDITION (a version mismatch),
  // UNAVAILABLE (a node down), RESOURCE_EXHAUSTED (cluster_max_jobs), each
  // naming the node.
  absl::StatusOr<jobs::AdmittedJob> Admit(JobSpec spec, const std::string& spec_text,
                                          const std::string& source_name,
                                          const std::vector<std::string>& nodes);
  // The coordination of `job` (steps 0 to 3), its merged result or why not.
  absl::StatusOr<runner::JobReport> Coordinate(const jobs::JobRecord& job,
                                               const jobs::GraphPtr& graph,
                                               const runner::RunHooks& hooks);

  // The peer calls a coordinator answers; each only from the node it concerns.
  absl::StatusOr<peer::HoldAnswer> HoldPart(const peer::PeerCaller& caller,
                                            const peer::HoldRequest& request);
  absl::Status ReportPart(const peer::PeerCaller& caller, const peer::PartReport& report);
  absl::Status StoreSet(const peer::PeerCaller& caller, const peer::StoreCall& call);
  absl::StatusOr<std::string> StoreGet(const peer::PeerCaller& caller, const peer::StoreCall& call);
  // The store of a job coordinated here (kept alive while held), or null.
  std::shared_ptr<gloo_group::RendezvousStore> StoreOf(const peer::GlobalJobId& id);

 private:
  struct Coordinated;  // a job this daemon coordinates

  // Every node but this one answers, runs this version and could admit its
  // part of `graph` now (a check: nothing is queued), or the first that
  // cannot, named.
  absl::Status CheckNodes(const std::string& spec_text, const jobs::AdmittedGraph& graph);
  // Steps 0 to 3 (Reserve: one ReserveNext per slot, a Release between
  // attempts), up to the reports: OK, or why the job cannot run.
  absl::Status RunSteps(const jobs::JobRecord& job, Coordinated& state,
                        const runner::RunHooks& hooks);
  // Admits the idle slot first in global order and waits for it to hold:
  // true when it holds, false when it did not within the hold timeout.
  absl::StatusOr<bool> ReserveNext(const jobs::JobRecord& job, Coordinated& state, int attempt,
                                   const runner::RunHooks& hooks);
  absl::StatusOr<bool> AwaitHold(Coordinated& state, int n, const runner::RunHooks& hooks);
  // Frees every slot (their parts end), then waits a backoff.
  absl::Status Release(Coordinated& state, int attempt, const runner::RunHooks& hooks);
  // Step 3: every node's report, or the first failure.
  absl::Status AwaitReports(Coordinated& state, const runner::RunHooks& hooks);
  // Ends every part admitted so far, with `reason`: tells every node at once,
  // then waits for each to confirm that its part reached a final state
  // there (PartHost::Cancel). OK, or which nodes did not confirm and why.
  absl::Status CancelParts(Coordinated& state, const std::string& reason);
  // Node `node_index`'s part of the job `job_id`: `spec` as submitted, with
  // the schedules decided for `graph`.
  peer::PartRequest PartRequest(const std::string& job_id, const std::string& spec,
                                const jobs::AdmittedGraph& graph, int node_index) const;
  // The job `id` names, or NOT_FOUND for one this daemon does not coordinate (now).
  absl::StatusOr<std::shared_ptr<Coordinated>> Coordinating(const peer::GlobalJobId& id);

  const ClusterOptions& options_;
  const engine::Engine& engine_;
  const jobs::Admission& admission_;
  peer::PeerLink& link_;
  PartHost& own_parts_;

  absl::Mutex mu_;
  // Jobs this daemon coordinates, by job id, while they run.
  std::map<std::string, std::shared_ptr<Coordinated>> coordinated_ ABSL_GUARDED_BY(mu_);
};

// The merged result of a job over nodes from each node's part (index = node
// index): the ops' steps max over every node, a line per node, the bus
// bandwidth across nodes, the slowest rank. `nodes` and `part_ids` are per
// node; `devices_per_node` ranks each.
runner::JobReport MergeNodeResults(const JobSpec& spec, const std::vector<std::string>& nodes,
                                   const std::vector<std::string>& part_ids,
                                   const std::vector<runner::JobReport>& parts,
                                   int devices_per_node);

}  // namespace overlap::cluster
