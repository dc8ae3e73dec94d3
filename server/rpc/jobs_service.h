// overlap.v1.Jobs: a thin adapter over admission and the job queue. SubmitJob
// has a spec admitted (jobs/admission.h: size, text, syntax, graph, device
// memory) and hands it to the job queue (queue room, draining), which stores
// it before the call returns; no job work runs on the gRPC threads. Every
// refusal is one line naming the field, with the code that fits
// (INVALID_ARGUMENT, RESOURCE_EXHAUSTED, UNAVAILABLE, NOT_FOUND, ...).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "overlap/v1/overlap.grpc.pb.h"
#include "server/flight/flight_analysis.h"
#include "server/flight/flight_recorder.h"
#include "server/jobs/admission.h"
#include "server/jobs/job_queue.h"
#include "server/net/request_limiter.h"
#include "server/node/node_state.h"
#include "server/rpc/caller.h"
#include "server/rpc/watch_slots.h"

namespace overlap::rpc {

struct JobsServiceOptions {
  // WatchJob streams open at once; each holds a server thread. Shared out as
  // watch_slots.h says (0 per user: a quarter of max_watchers).
  int max_watchers = 256;
  int max_watchers_per_user = 0;
  // The highest priority a caller who is not an admin may ask for.
  int max_user_priority = 10;
  // Admits a graph that spans daemons (server/cluster/cluster_jobs.h) from its
  // parse: the job to queue and its graph. Called for a graph with nodes, or
  // a submission naming them. Null on a daemon without peers: such a
  // submission is then FAILED_PRECONDITION.
  std::function<absl::StatusOr<jobs::AdmittedJob>(JobSpec spec, const std::string& spec_text,
                                                  const std::string& source_name,
                                                  const std::vector<std::string>& nodes)>
      admit_spanning;
  // This daemon's node name (its peer address) where it has peers: a job
  // spanning daemons is shown with its global id (jobs::GlobalIdOf).
  std::string node_name;
  // The id on this daemon of the job a global id ("NODE/job-NNNNNN") names
  // (cluster::ClusterJobs::LocalJobId), for GetJob, CancelJob and WatchJob.
  // Null on a daemon without peers: such an id is then NOT_FOUND.
  std::function<absl::StatusOr<std::string>(const std::string& global_id)> local_job_id;
  // The daemon's flight recorder, for GetFlight; null: GetFlight answers with
  // no rings.
  const flight::FlightRecorder* flight = nullptr;
  // The rings of a job spanning daemons, by its global id, over its nodes
  // (cluster::ClusterJobs::GatherFlight): every node's on its coordinator,
  // this node's on a part's node. Null on a daemon without peers.
  std::function<flight::GatheredRings(const std::string& global_id,
                                      const std::vector<std::string>& nodes)>
      gather_flight;
};

class JobsService final : public v1::Jobs::Service {
 public:
  // All references must outlive the service.
  JobsService(jobs::JobQueue& queue, const jobs::Admission& admission,
              const CallerResolver& callers, JobsServiceOptions options,
              node::DaemonCounters& counters, net::RequestLimiter& limiter);

  grpc::Status SubmitJob(grpc::ServerContext* context, const v1::SubmitJobRequest* request,
                         v1::SubmitJobResponse* response) override;
  grpc::Status GetJob(grpc::ServerContext* context, const v1::GetJobRequest* request,
                      v1::GetJobResponse* response) override;
  grpc::Status ListJobs(grpc::ServerContext* context, const v1::ListJobsRequest* request,
                        v1::ListJobsResponse* response) override;
  grpc::Status CancelJob(grpc::ServerContext* context, const v1::CancelJobRequest* request,
                         v1::CancelJobResponse* response) override;
  grpc::Status WatchJob(grpc::ServerContext* context, const v1::WatchJobRequest* request,
                        grpc::ServerWriter<v1::JobEvent>* writer) override;
  grpc::Status GetFlight(grpc::ServerContext* context, const v1::GetFlightRequest* request,
                         v1::GetFlightResponse* response) override;

  // The checks and the hand-over of SubmitJob for `caller`, without gRPC.
  absl::StatusOr<v1::Job> Submit(const Caller& caller, const std::string& spec_text,
                                 const std::string& source_name,
                                 const std::vector<std::string>& nodes = {});
  // The same checks, nothing queued (SubmitJobRequest.validate_only).
  absl::StatusOr<v1::Job> Validate(const Caller& caller, const std::string& spec_text,
                                   const std::string& source_name,
                                   const std::vector<std::string>& nodes = {});

  // The stream slots, shared with Node.WatchNode: every stream counts against one cap.
  WatchSlots& watch_slots() { return watch_slots_; }

 private:
  // Everything Submit checks; the admitted job and its graph, not yet queued.
  absl::StatusOr<jobs::AdmittedJob> Admit(const Caller& caller, const std::string& spec_text,
                                          const std::string& source_name,
                                          const std::vector<std::string>& nodes);
  // Runs `serve` for the call's caller while the limiter lets it (the caller's
  // requests in flight), noting it when its caller gave up before the answer.
  template <typename Serve>
  grpc::Status Limited(grpc::ServerContext* context, absl::string_view method, Serve&& serve);
  grpc::Status List(const v1::ListJobsRequest* request, v1::ListJobsResponse* response);
  // Only the job's owner, or an admin, may cancel it (PERMISSION_DENIED).
  // `id` is a local one (LocalId).
  absl::StatusOr<v1::Job> Cancel(const Caller& caller, const std::string& id);
  // The job id a request names, checked: a short id as it is, a global one
  // resolved to this daemon's job (options_.local_job_id).
  absl::StatusOr<std::string> LocalId(const std::string& id) const;
  // A job as the API shows it: with its global id where it spans daemons.
  v1::Job Shown(const jobs::JobRecord& job) const;

  jobs::JobQueue& queue_;
  const jobs::Admission& admission_;
  const CallerResolver& callers_;
  const JobsServiceOptions options_;
  node::DaemonCounters& counters_;
  net::RequestLimiter& limiter_;
  WatchSlots watch_slots_;
};

}  // namespace overlap::rpc
