#include "server/rpc/jobs_service.h"

#include <algorithm>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/text.h"
#include "server/flight/flight_analysis.h"
#include "server/net/status_util.h"
#include "server/wire/flight_wire.h"
#include "server/wire/job_wire.h"

namespace overlap::rpc {
namespace {

constexpr absl::Duration kWatchPoll = absl::Milliseconds(250);

std::shared_ptr<spdlog::logger> Log() { return GetLogger("rpc"); }

// Timelines are the bulk of a finished op's result (a span per GEMM piece and
// transfer per rank). The progress events of a watch carry the job without
// them; GetJob and a watch's final event carry them whole.
void DropTimelines(v1::Job* job) {
  v1::JobResult* result = job->mutable_result();
  for (v1::OpResult& op : *result->mutable_ops()) op.clear_timeline();
  result->clear_layer_timeline();
}

// Job ids are "job-" and a sequence number, global ones a node name (a peer
// address) before it; anything much longer is not one, and is not worth
// looking up or quoting whole.
constexpr size_t kMaxJobIdBytes = 320;

// Jobs in a ListJobs page: where the request leaves it to the daemon, and at most.
constexpr int kDefaultPageSize = 500;
constexpr int kMaxPageSize = 1000;

absl::Status RequireId(const std::string& id) {
  if (id.empty()) return absl::InvalidArgumentError("id: required");
  if (id.size() > kMaxJobIdBytes || HasControlCharacters(id) || FirstInvalidUtf8(id)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "id: ", QuotedExcerpt(id, 40),
        " is not a job id (job-NNNNNN, or NODE/job-NNNNNN for a job spanning daemons)"));
  }
  return absl::OkStatus();
}

}  // namespace

JobsService::JobsService(jobs::JobQueue& queue, const jobs::Admission& admission,
                         const CallerResolver& callers, JobsServiceOptions options,
                         node::DaemonCounters& counters, net::RequestLimiter& limiter)
    : queue_(queue),
      admission_(admission),
      callers_(callers),
      options_(options),
      counters_(counters),
      limiter_(limiter),
      watch_slots_(options_.max_watchers, options_.max_watchers_per_user) {}

template <typename Serve>
grpc::Status JobsService::Limited(grpc::ServerContext* context, absl::string_view method,
                                  Serve&& serve) {
  absl::StatusOr<Caller> caller = callers_.Resolve(context);
  if (!caller.ok()) return net::ToGrpcStatus(caller.status());
  absl::StatusOr<net::RequestLimiter::Ticket> ticket = limiter_.Enter(caller->owner);
  if (!ticket.ok()) return net::ToGrpcStatus(ticket.status());
  const absl::Time started = absl::Now();
  grpc::Status status = serve(*caller);
  limiter_.NoteIfAbandoned(*context, method, caller->Describe(), started);
  return status;
}

absl::StatusOr<jobs::AdmittedJob> JobsService::Admit(const Caller& caller,
                                                     const std::string& spec_text,
                                                     const std::string& source_name,
                                                     const std::vector<std::string>& nodes) {
  if (queue_.draining()) return absl::UnavailableError("overlapd is draining");
  if (!nodes.empty() && !options_.admit_spanning) {
    return absl::FailedPreconditionError(
        "nodes: this daemon coordinates no jobs spanning daemons: give it peer_listen and "
        "peers in its config (docs/OPERATIONS.md, \"Cluster\")");
  }
  // The one parse of the graph on this daemon: what follows hands on its result.
  ASSIGN_OR_RETURN(JobSpec spec, admission_.Parse(spec_text, source_name));
  jobs::AdmittedJob admitted;
  if (options_.admit_spanning && (!nodes.empty() || !spec.nodes.empty())) {
    ASSIGN_OR_RETURN(admitted,
                     options_.admit_spanning(std::move(spec), spec_text, source_name, nodes));
  } else {
    ASSIGN_OR_RETURN(admitted, admission_.Admit(std::move(spec), spec_text, source_name));
  }
  jobs::JobRecord& job = admitted.job;
  if (!caller.admin && job.priority > options_.max_user_priority) {
    return absl::PermissionDeniedError(
        absl::StrCat("priority: ", job.priority, " is above ", options_.max_user_priority,
                     ", the highest a user who is not an admin may ask for (max_user_priority)"));
  }
  job.owner = caller.owner;
  job.owner_name = caller.name;
  job.owner_admin = caller.admin;
  return admitted;
}

absl::StatusOr<v1::Job> JobsService::Validate(const Caller& caller, const std::string& spec_text,
                                              const std::string& source_name,
                                              const std::vector<std::string>& nodes) {
  ASSIGN_OR_RETURN(jobs::AdmittedJob admitted, Admit(caller, spec_text, source_name, nodes));
  RETURN_IF_ERROR(queue_.CheckRoom(caller.owner, caller.name));
  // What would be queued: nothing is yet, so it has no state and no result.
  v1::Job job = wire::ToProto(admitted.job);
  job.clear_state();
  job.clear_result();
  return job;
}

absl::StatusOr<std::string> JobsService::LocalId(const std::string& id) const {
  RETURN_IF_ERROR(RequireId(id));
  if (id.find('/') == std::string::npos) return id;
  if (!options_.local_job_id) {
    return absl::NotFoundError(absl::StrCat("job ", QuotedExcerpt(id, 100),
                                            ": this daemon has no peers, so no job spanning "
                                            "daemons runs here"));
  }
  return options_.local_job_id(id);
}

v1::Job JobsService::Shown(const jobs::JobRecord& job) const {
  v1::Job shown = wire::ToProto(job);
  shown.set_global_id(jobs::GlobalIdOf(job, options_.node_name));
  return shown;
}

absl::StatusOr<v1::Job> JobsService::Cancel(const Caller& caller, const std::string& id) {
  ASSIGN_OR_RETURN(const jobs::JobRecord job, queue_.Get(id));
  const bool own = !job.owner.empty() && job.owner == caller.owner;
  const std::string owner_name = job.owner_name.empty() ? "nobody known" : job.owner_name;
  if (!own && !caller.admin) {
    return absl::PermissionDeniedError(
        absl::StrCat("job ", id, " belongs to ", owner_name, ", not to ", caller.Describe(),
                     ": only its owner or an admin (root, admin_group) may cancel it"));
  }
  ASSIGN_OR_RETURN(const jobs::JobRecord cancelled, queue_.Cancel(id));
  if (!own) {
    Log()->warn("job {} of {} cancelled by the admin {}", id, owner_name, caller.Describe());
  }
  return Shown(cancelled);
}

absl::StatusOr<v1::Job> JobsService::Submit(const Caller& caller, const std::string& spec_text,
                                            const std::string& source_name,
                                            const std::vector<std::string>& nodes) {
  absl::StatusOr<jobs::AdmittedJob> admitted = Admit(caller, spec_text, source_name, nodes);
  // Queue room, the owner's quota and draining are checked again by the
  // queue, atomically with storing the job.
  absl::StatusOr<jobs::JobRecord> job =
      admitted.ok() ? queue_.Submit(admitted->job, std::move(admitted->graph))
                    : absl::StatusOr<jobs::JobRecord>(admitted.status());
  if (!job.ok()) {
    counters_.jobs_rejected.fetch_add(1);
    if (job.status().code() == absl::StatusCode::kInternal ||
        job.status().code() == absl::StatusCode::kDataLoss) {
      Log()->error("SubmitJob failed: {}", job.status().ToString());
    } else {
      Log()->info("SubmitJob refused: {}", job.status().ToString());
    }
    return job.status();
  }
  counters_.jobs_submitted.fetch_add(1);
  return Shown(*job);
}

grpc::Status JobsService::SubmitJob(grpc::ServerContext* context,
                                    const v1::SubmitJobRequest* request,
                                    v1::SubmitJobResponse* response) {
  return Limited(context, "SubmitJob", [&](const Caller& caller) {
    const std::vector<std::string> nodes(request->nodes().begin(), request->nodes().end());
    absl::StatusOr<v1::Job> job =
        request->validate_only() ? Validate(caller, request->spec(), request->source_name(), nodes)
                                 : Submit(caller, request->spec(), request->source_name(), nodes);
    if (!job.ok()) return net::ToGrpcStatus(job.status());
    *response->mutable_job() = std::move(*job);
    return grpc::Status::OK;
  });
}

grpc::Status JobsService::GetJob(grpc::ServerContext* context, const v1::GetJobRequest* request,
                                 v1::GetJobResponse* response) {
  return Limited(context, "GetJob", [&](const Caller&) {
    absl::StatusOr<std::string> id = LocalId(request->id());
    if (!id.ok()) return net::ToGrpcStatus(id.status());
    absl::StatusOr<jobs::JobRecord> job = queue_.Get(*id);
    if (!job.ok()) return net::ToGrpcStatus(job.status());
    *response->mutable_job() = Shown(*job);
    return grpc::Status::OK;
  });
}

grpc::Status JobsService::GetFlight(grpc::ServerContext* context,
                                    const v1::GetFlightRequest* request,
                                    v1::GetFlightResponse* response) {
  return Limited(context, "GetFlight", [&](const Caller&) {
    absl::StatusOr<std::string> id = LocalId(request->id());
    if (!id.ok()) return net::ToGrpcStatus(id.status());
    absl::StatusOr<jobs::JobRecord> job = queue_.Get(*id);  // NOT_FOUND for an unknown job
    if (!job.ok()) return net::ToGrpcStatus(job.status());
    if (options_.flight == nullptr) return grpc::Status::OK;
    // A job spanning daemons records under its global id, on each of its nodes.
    flight::GatheredRings gathered;
    if (!job->nodes.empty() && options_.gather_flight) {
      gathered = options_.gather_flight(jobs::GlobalIdOf(*job, options_.node_name), job->nodes);
    } else {
      gathered.rings = options_.flight->Snapshot(*id);
    }
    for (const flight::RankRing& ring : gathered.rings)
      *response->add_rings() = wire::ToProto(ring);
    for (const flight::UnreadNode& node : gathered.unread) {
      response->add_unread_nodes(absl::StrCat(node.node, ": ", node.why));
    }
    response->set_truncated(gathered.truncated);
    response->set_verdict(flight::GatheredVerdictLine(gathered.rings, gathered.unread));
    response->set_recorder_bytes(options_.flight->MemoryBytes());
    response->set_entries_per_ring(options_.flight->entries_per_ring());
    return grpc::Status::OK;
  });
}

grpc::Status JobsService::ListJobs(grpc::ServerContext* context, const v1::ListJobsRequest* request,
                                   v1::ListJobsResponse* response) {
  return Limited(context, "ListJobs", [&](const Caller&) { return List(request, response); });
}

grpc::Status JobsService::List(const v1::ListJobsRequest* request, v1::ListJobsResponse* response) {
  if (request->limit() < 0) {
    return net::ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("limit: must be >= 0 (got ", request->limit(), ")")));
  }
  if (!v1::JobState_IsValid(request->state())) {
    return net::ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("state: unknown job state ", static_cast<int>(request->state()))));
  }
  // The token is the sequence the next page starts below.
  uint64_t before = 0;
  if (!request->page_token().empty() &&
      (!absl::SimpleAtoi(request->page_token(), &before) || before == 0)) {
    return net::ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("page_token: ", QuotedExcerpt(request->page_token(), 40),
                     " is not a next_page_token from a previous response")));
  }
  const int limit =
      request->limit() == 0 ? kDefaultPageSize : std::min(request->limit(), kMaxPageSize);
  absl::StatusOr<jobs::JobPage> page =
      queue_.ListSummaries(wire::StateFilter(request->state()), limit, before);
  if (!page.ok()) {
    Log()->error("ListJobs failed: {}", page.status().ToString());
    return net::ToGrpcStatus(page.status());
  }
  for (const jobs::JobRecord& job : page->jobs) *response->add_jobs() = Shown(job);
  if (page->next_before > 0) response->set_next_page_token(absl::StrCat(page->next_before));
  return grpc::Status::OK;
}

grpc::Status JobsService::CancelJob(grpc::ServerContext* context,
                                    const v1::CancelJobRequest* request,
                                    v1::CancelJobResponse* response) {
  return Limited(context, "CancelJob", [&](const Caller& caller) {
    absl::StatusOr<std::string> id = LocalId(request->id());
    if (!id.ok()) return net::ToGrpcStatus(id.status());
    absl::StatusOr<v1::Job> job = Cancel(caller, *id);
    if (!job.ok()) return net::ToGrpcStatus(job.status());
    *response->mutable_job() = std::move(*job);
    return grpc::Status::OK;
  });
}

grpc::Status JobsService::WatchJob(grpc::ServerContext* context, const v1::WatchJobRequest* request,
                                   grpc::ServerWriter<v1::JobEvent>* writer) {
  absl::StatusOr<std::string> id = LocalId(request->id());
  if (!id.ok()) return net::ToGrpcStatus(id.status());
  absl::StatusOr<Caller> caller = callers_.Resolve(context);
  if (!caller.ok()) return net::ToGrpcStatus(caller.status());
  // Each stream holds one of gRPC's server threads while it lasts: past the
  // caller's share, or the cap, a watcher is told so rather than starving
  // every other call.
  absl::StatusOr<WatchSlots::Slot> slot =
      watch_slots_.Take(caller->owner, caller->Describe(), caller->admin || caller->socket_owner);
  if (!slot.ok()) return net::ToGrpcStatus(slot.status());
  uint64_t seen = 0;
  while (true) {
    if (context->IsCancelled()) return grpc::Status::CANCELLED;
    // A short wait so that a client that went away (or a server shutdown) is
    // noticed even while the job sits unchanged in the queue.
    absl::StatusOr<jobs::JobSnapshot> snapshot = queue_.WaitForChange(*id, seen, kWatchPoll);
    if (!snapshot.ok()) return net::ToGrpcStatus(snapshot.status());
    if (snapshot->version != seen) {
      seen = snapshot->version;
      v1::JobEvent event;
      *event.mutable_job() = Shown(snapshot->job);
      const bool final_state = jobs::IsFinal(snapshot->job.state);
      if (!final_state) DropTimelines(event.mutable_job());
      if (!writer->Write(event)) return grpc::Status::CANCELLED;  // the client is gone
      if (final_state) return grpc::Status::OK;
    }
  }
}

}  // namespace overlap::rpc
