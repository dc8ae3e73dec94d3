// Jobs that span daemons: the coordinator's side and each node's part.
//
// A user submits a graph with nodes to one daemon, the coordinator. Its job
// holds no devices of its own; it runs (on an executor, like any job) the
// coordination. Its states (CoordinatorPhase) are checking, reserving (releasing between
// attempts), holding, running, reporting and ended, every move in one table
// (CoordinatorMayMove) and logged at debug:
//
//   0. Check every node again, as at submission (CheckNodes).
//   1. Reserve, in the nodes' global order (sorted by address), one node at a
//      time: admit a part there (AdmitPart: that daemon checks the graph, its
//      devices, memory, queue and rights, and queues the part like any job),
//      and wait until the part has started, that is holds its devices, and
//      says so (HoldPart). Every coordinator reserves in the same order, so
//      two jobs over overlapping nodes cannot each hold a node the other
//      waits for. A node whose part has not started within
//      cluster_hold_timeout_ms (busy with a long local job) makes the
//      coordinator release every part it holds (they end CANCELLED) and try
//      again after a backoff, so that a reservation keeps the nodes idle for
//      that long at most. While a part holds its node, the jobs queued there
//      behind it wait, as behind any running job.
//   2. Once every node holds its part, start them all at once (HoldPart
//      answers START). The parts run the same schedules over the whole mesh
//      on a SpanningEngine; the groups that cross nodes meet in the
//      coordinator's store (StoreSet/StoreGet) and run over Gloo.
//   3. Collect each part's result (ReportPart), merge them into the job's
//      result: the ops' steps max over every node, a line per node, the
//      bus bandwidth across nodes, the slowest rank. A part that fails, a node
//      that stops answering, and a cancel end the job and every other part.
//
// Every `auto` is decided once, by the coordinator at admission, by one rule
// (ops::DecideSpanningSchedules), never by timing, since nodes that timed
// differently would choose differently and hang; each part checks the
// decisions it is sent and runs them. A part queued when its daemon restarted never runs
// alone: it fails when it would start.
//
// Thread safety: every public method may be called from any thread.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "overlap/v1/overlap.pb.h"
#include "overlap/v1/peer.pb.h"
#include "server/cluster/peer_link.h"
#include "server/engine/engine.h"
#include "server/jobs/admission.h"
#include "server/jobs/job_queue.h"
#include "server/peer/peer_server.h"
#include "server/runner/run_hooks.h"

namespace overlap::cluster {

struct ClusterOptions {
  std::string node_name;           // this daemon's peer address, as its peers list it
  std::vector<std::string> peers;  // the daemons it may run jobs with
  std::string bind_address = "127.0.0.1";  // this node's Gloo connections bind here
  absl::Duration hold_timeout = absl::Seconds(10);
  absl::Duration collective_timeout = absl::Seconds(60);
  int max_jobs = 4;  // jobs this daemon coordinates at once, queued or running
  // The highest priority a part whose owner is not an admin may have here.
  int max_user_priority = 10;
  // When this daemon started: a part submitted before it never runs.
  int64_t started_unix_ms = 0;
};

// Where a job this daemon coordinates is (ClusterJobs::Coordinate): it checks
// its nodes again (each answers, runs this version and could admit its part:
// the job may have waited in the queue since it was submitted); it reserves
// them one by one (each admits its part, which holds its devices and waits);
// when one does not hold in time it releases them all and reserves again;
// once every node holds, it tells the parts to start, and they run; their
// reports are merged; and it ends, whatever ended it.
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

class ClusterJobs final : public peer::PeerHandler {
 public:
  // `engine`, `admission` and `link` must outlive this; so must the job queue
  // given to SetJobQueue (made after this, since its runner calls Run).
  ClusterJobs(ClusterOptions options, engine::Engine& engine, const jobs::Admission& admission,
              PeerLink& link);
  ~ClusterJobs() override;
  void SetJobQueue(jobs::JobQueue* queue);

  // The job to hand to the job queue, and its typed graph, for a graph that
  // spans daemons (its `nodes`, or `nodes` where given; `spec` is its parse
  // of `spec_text`), checked here and on every peer it can be without
  // reserving anything: this node among them, the others in peers:,
  // reachable and of this version. INVALID_ARGUMENT, PERMISSION_DENIED (a
  // node not in peers:), FAILED_PRECONDITION (a version mismatch),
  // UNAVAILABLE (a node down), RESOURCE_EXHAUSTED (cluster_max_jobs), each
  // naming the node.
  absl::StatusOr<jobs::AdmittedJob> AdmitCoordinated(JobSpec spec, const std::string& spec_text,
                                                     const std::string& source_name,
                                                     const std::vector<std::string>& nodes);

  // The job queue's runner for a job with nodes: the coordination for the
  // coordinator's job, the part's run for a part. `graph` is the job's
  // admitted graph (null only for a job queued before a restart, which
  // never runs).
  absl::StatusOr<v1::JobResult> Run(const v1::Job& job, const jobs::GraphPtr& graph,
                                    const runner::RunHooks& hooks);
  static bool Handles(const v1::Job& job) { return job.nodes_size() > 0; }

  // peer::PeerHandler. `caller` is the node the peer listener proved the call
  // came from; each call is allowed only from the node it concerns (peer.proto),
  // else PERMISSION_DENIED.
  absl::StatusOr<v1::AdmitPartResponse> AdmitPart(const peer::PeerCaller& caller,
                                                  const v1::AdmitPartRequest& request) override;
  absl::Status CancelPart(const peer::PeerCaller& caller,
                          const v1::CancelPartRequest& request) override;
  absl::StatusOr<v1::HoldPartResponse> HoldPart(const peer::PeerCaller& caller,
                                                const v1::HoldPartRequest& request) override;
  absl::Status ReportPart(const peer::PeerCaller& caller,
                          const v1::ReportPartRequest& request) override;
  absl::Status StoreSet(const peer::PeerCaller& caller,
                        const v1::StoreSetRequest& request) override;
  absl::StatusOr<std::string> StoreGet(const peer::PeerCaller& caller,
                                       const v1::StoreGetRequest& request) override;

 private:
  struct Coordinated;  // a job this daemon coordinates

  absl::StatusOr<v1::JobResult> Coordinate(const v1::Job& job, jobs::GraphPtr graph,
                                           const runner::RunHooks& hooks);
  // A part's run, whose end (result or failure) it reports to the coordinator.
  absl::StatusOr<v1::JobResult> RunPart(const v1::Job& job, const jobs::GraphPtr& graph,
                                        const runner::RunHooks& hooks);
  absl::StatusOr<v1::JobResult> RunStartedPart(const v1::Job& job, const v1::GlobalJobId& id,
                                               jobs::GraphPtr graph,
                                               const runner::RunHooks& hooks);
  // Every node but this one answers, runs this version and could admit its
  // part of `graph` now (a check: nothing is queued), or the first that
  // cannot, named.
  absl::Status CheckNodes(const std::string& spec_text, const jobs::AdmittedGraph& graph);
  // Step 1: every node holds its part (OK), or the job cannot run.
  absl::Status Reserve(const v1::Job& job, Coordinated& state, const runner::RunHooks& hooks);
  // Step 3: every node's report, or the first failure.
  absl::Status AwaitReports(Coordinated& state, const runner::RunHooks& hooks);
  // Ends every part admitted so far (best effort), with `reason`.
  void CancelParts(Coordinated& state, const std::string& reason);
  // The part's wait for the start: OK to run, or why not.
  absl::Status AwaitStart(const v1::Job& job, const runner::RunHooks& hooks);

  // Calls to a node, this one included (without the network; its own part
  // takes the coordinator's graph, `graph`, as it is).
  absl::StatusOr<v1::AdmitPartResponse> CallAdmit(const std::string& node,
                                                  const v1::AdmitPartRequest& request,
                                                  const jobs::GraphPtr& graph);
  // AdmitPart with the part's graph already admitted here (or null: parsed
  // from the request, or taken from the check that came before it).
  absl::StatusOr<v1::AdmitPartResponse> AdmitPartGraph(const peer::PeerCaller& caller,
                                                       const v1::AdmitPartRequest& request,
                                                       jobs::GraphPtr graph);
  // The part's graph: parsed and admitted, or the one admitted for the same
  // request (coordinator, nodes, node index and spec) when it was checked at
  // submission or admitted on an earlier reservation attempt.
  absl::StatusOr<jobs::GraphPtr> PartGraph(const v1::AdmitPartRequest& request,
                                           const std::string& source_name);
  absl::Status CallCancel(const std::string& node, const v1::CancelPartRequest& request);
  absl::StatusOr<v1::HoldPartResponse> CallHold(const std::string& node,
                                                const v1::HoldPartRequest& request);
  absl::Status CallReport(const std::string& node, const v1::ReportPartRequest& request);

  // Node `node_index`'s part of the job `job_id` this daemon coordinates:
  // `spec` as submitted, with the schedules decided for `graph`.
  v1::AdmitPartRequest PartRequest(const std::string& job_id, const std::string& spec,
                                   const jobs::AdmittedGraph& graph, int node_index) const;
  std::shared_ptr<Coordinated> Find(const v1::GlobalJobId& id);
  // Find, or NOT_FOUND for a job this daemon does not coordinate (now).
  absl::StatusOr<std::shared_ptr<Coordinated>> Coordinating(const v1::GlobalJobId& id);
  bool IsPeer(const std::string& node) const;
  // This daemon as the caller of its own calls, made without the network.
  peer::PeerCaller Self() const;
  // The owner, name and priority of a part to admit, checked as the user
  // socket checks a job's (PERMISSION_DENIED / INVALID_ARGUMENT).
  absl::Status CheckPartRequest(const v1::AdmitPartRequest& request) const;
  // OK when `caller` is node `node_index` of the job (PERMISSION_DENIED
  // saying it may not `what` that part), or one of its nodes.
  absl::Status CheckPartNode(const Coordinated& state, const peer::PeerCaller& caller,
                             int node_index, absl::string_view what) const;
  absl::Status CheckJobNode(const Coordinated& state, const peer::PeerCaller& caller) const;
  // FAILED_PRECONDITION on a backend that can carry no cross-node transport
  // (cross_node_transport.h; CUDA with ranks_per_gpu above 1).
  absl::Status CheckBackend() const;

  const ClusterOptions options_;
  engine::Engine& engine_;
  const jobs::Admission& admission_;
  PeerLink& link_;

  absl::Mutex mu_;
  jobs::JobQueue* queue_ ABSL_GUARDED_BY(mu_) = nullptr;
  // Jobs this daemon coordinates, by job id, while they run.
  std::map<std::string, std::shared_ptr<Coordinated>> coordinated_ ABSL_GUARDED_BY(mu_);
  // Parts admitted here, by global id ("coordinator/job"): their local ids,
  // until the part ends (ForgetPartLocked).
  std::map<std::string, std::string> parts_ ABSL_GUARDED_BY(mu_);
  void ForgetPartLocked(const std::string& key, const std::string& part_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Parts the coordinator released (it retries with new ones): their end is
  // nobody's news.
  std::set<std::string> released_ ABSL_GUARDED_BY(mu_);
  // The last kRecentPartGraphs graphs admitted for parts, by the digest of
  // what they were admitted from (PartGraph), oldest first: a part is checked
  // at submission and admitted later, maybe more than once, from the same
  // request, and parsed once.
  static constexpr size_t kRecentPartGraphs = 32;
  std::deque<std::pair<std::string, jobs::GraphPtr>> recent_part_graphs_ ABSL_GUARDED_BY(mu_);
};

// The job's global id as one string, "coordinator/job-000001".
std::string GlobalKey(const v1::GlobalJobId& id);

// The merged result of a job over nodes from each node's part (index =
// node index): see ClusterJobs. `nodes` and `part_ids` are per node;
// `devices_per_node` ranks each.
v1::JobResult MergeNodeResults(const JobSpec& spec, const std::vector<std::string>& nodes,
                               const std::vector<std::string>& part_ids,
                               const std::vector<v1::JobResult>& parts, int devices_per_node);

}  // namespace overlap::cluster
