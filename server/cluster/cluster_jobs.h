// Jobs that span daemons, as the rest of the daemon sees them: one object
// that answers the peer listener's calls and runs the job queue's jobs with
// nodes, made of two units that each daemon has:
//
//   - the coordinator (coordinator.h) of the jobs submitted here with nodes:
//     it checks the nodes, reserves a part on each in one global order, starts
//     them together and merges their reports;
//   - the part host (part_host.h) of the parts that coordinators (this one
//     included) admit here: it queues them, holds them until their
//     coordinator starts them, runs them and reports how they ended.
//
// Thread safety: every public method may be called from any thread.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "server/cluster/coordinator.h"
#include "server/cluster/gather_flight.h"
#include "server/cluster/part_host.h"
#include "server/peer/part_calls.h"

namespace overlap::cluster {

class ClusterJobs final : public peer::PeerHandler {
 public:
  // `engine`, `admission` and `link` must outlive this; so must the job queue
  // given to SetJobQueue (made after this, since its runner calls Run).
  ClusterJobs(ClusterOptions options, engine::Engine& engine, const jobs::Admission& admission,
              peer::PeerLink& link)
      : options_(std::move(options)),
        link_(link),
        parts_(options_, engine, admission, link),
        coordinator_(options_, engine, admission, link, parts_) {}
  void SetJobQueue(jobs::JobQueue* queue) { parts_.SetJobQueue(queue); }

  // Coordinator::Admit.
  absl::StatusOr<jobs::AdmittedJob> AdmitCoordinated(JobSpec spec, const std::string& spec_text,
                                                     const std::string& source_name,
                                                     const std::vector<std::string>& nodes) {
    return coordinator_.Admit(std::move(spec), spec_text, source_name, nodes);
  }

  // The job queue's runner for a job with nodes: the coordination for the
  // coordinator's job, the part's run for a part. `graph` is the job's
  // admitted graph (null only for a job queued before a restart, which
  // never runs).
  absl::StatusOr<runner::JobReport> Run(const jobs::JobRecord& job, const jobs::GraphPtr& graph,
                                        const runner::RunHooks& hooks) {
    if (!job.coordinator.empty()) return parts_.Run(job, graph, hooks, coordinator_);
    return coordinator_.Coordinate(job, graph, hooks);
  }
  static bool Handles(const jobs::JobRecord& job) { return !job.nodes.empty(); }

  // The id here of the job `global_id` (jobs::GlobalIdOf) names: PartHost::LocalJobId.
  absl::StatusOr<std::string> LocalJobId(const std::string& global_id) {
    return parts_.LocalJobId(global_id);
  }

  // peer::PeerHandler. `caller` is the node the peer listener proved the call
  // came from; each call is allowed only from the node it concerns (peer.proto),
  // else PERMISSION_DENIED. A part's calls go to the part host, a job's to
  // its coordinator.
  absl::StatusOr<std::string> AdmitPart(const peer::PeerCaller& caller,
                                        const peer::PartRequest& request) override {
    return parts_.Admit(caller, request, nullptr);
  }
  absl::Status CancelPart(const peer::PeerCaller& caller,
                          const peer::CancelRequest& request) override {
    return parts_.Cancel(caller, request);
  }
  absl::StatusOr<peer::HoldAnswer> HoldPart(const peer::PeerCaller& caller,
                                            const peer::HoldRequest& request) override {
    return coordinator_.HoldPart(caller, request);
  }
  absl::Status ReportPart(const peer::PeerCaller& caller, const peer::PartReport& report) override {
    return coordinator_.ReportPart(caller, report);
  }
  absl::Status StoreSet(const peer::PeerCaller& caller, const peer::StoreCall& call) override {
    return coordinator_.StoreSet(caller, call);
  }
  absl::StatusOr<std::string> StoreGet(const peer::PeerCaller& caller,
                                       const peer::StoreCall& call) override {
    return coordinator_.StoreGet(caller, call);
  }
  // This node's rings of the job, for its coordinator only.
  absl::StatusOr<peer::PartFlight> GetPartFlight(const peer::PeerCaller& caller,
                                                 const peer::FlightRequest& request) override {
    if (caller.node != request.global_id.coordinator) {
      return absl::PermissionDeniedError(
          absl::StrCat("node ", caller.node, " may not read the flight rings of a job ",
                       "coordinated by another node: only a job's coordinator reads them"));
    }
    if (options_.flight == nullptr) return absl::UnimplementedError("no flight recorder here");
    return PartFlightOf(*options_.flight, request.global_id);
  }

  // Every node's rings of the job `global_id` (jobs::GlobalIdOf) over
  // `nodes`; this node's alone for a part of a job coordinated elsewhere.
  flight::GatheredRings GatherFlight(const std::string& global_id,
                                     const std::vector<std::string>& nodes) {
    std::string coordinator, job_id;
    if (!jobs::SplitGlobalId(global_id, &coordinator, &job_id)) return {};
    const peer::GlobalJobId id{coordinator, job_id};
    if (coordinator == options_.node_name) return cluster::GatherFlight(options_, link_, id, nodes);
    flight::GatheredRings own;
    if (options_.flight != nullptr) own.rings = PartFlightOf(*options_.flight, id).rings;
    return own;
  }

 private:
  const ClusterOptions options_;  // the units keep references to it
  peer::PeerLink& link_;
  PartHost parts_;
  Coordinator coordinator_;  // its own node's parts are parts_
};

}  // namespace overlap::cluster
