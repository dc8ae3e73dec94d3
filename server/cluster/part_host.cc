#include "server/cluster/part_host.h"

#include <memory>
#include <numeric>

#include "absl/strings/str_join.h"
#include "common/graph_validator.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/text.h"
#include "server/cluster/coordinator.h"
#include "server/cluster/schedule_wire.h"
#include "server/cluster/spanning_engine.h"
#include "server/gloo/rendezvous_store.h"
#include "server/peer/peer_auth.h"
#include "server/report/result_proto.h"

namespace overlap::cluster {
namespace {

std::shared_ptr<spdlog::logger> Log() { return GetLogger("cluster"); }

// A rendezvous store served by the coordinator, for a part on another node.
class CoordinatorStore final : public gloo_group::RendezvousStore {
 public:
  CoordinatorStore(PeerLink& link, std::string coordinator, v1::GlobalJobId id)
      : link_(link), coordinator_(std::move(coordinator)), id_(std::move(id)) {}

  absl::Status Set(const std::string& key, const std::string& value) override {
    v1::StoreSetRequest request;
    *request.mutable_global_id() = id_;
    request.set_key(key);
    request.set_value(value);
    return link_.StoreSet(coordinator_, request, kCallDeadline);
  }

  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) override {
    v1::StoreGetRequest request;
    *request.mutable_global_id() = id_;
    request.set_key(key);
    request.set_timeout_ms(absl::ToInt64Milliseconds(timeout));
    return link_.StoreGet(coordinator_, request, timeout + kCallDeadline);
  }

 private:
  PeerLink& link_;
  const std::string coordinator_;
  const v1::GlobalJobId id_;
};

}  // namespace

PartHost::PartHost(const ClusterOptions& options, engine::Engine& engine,
                   const jobs::Admission& admission, PeerLink& link)
    : options_(options), engine_(engine), admission_(admission), link_(link) {}

void PartHost::SetJobQueue(jobs::JobQueue* queue) {
  absl::MutexLock lock(&mu_);
  queue_ = queue;
}

jobs::JobQueue* PartHost::Queue() {
  absl::MutexLock lock(&mu_);
  return queue_;
}

// --- Admission and cancel ------------------------------------------------------

absl::Status PartHost::CheckPartRequest(const peer::PeerCaller& caller,
                                        const v1::AdmitPartRequest& request) const {
  const std::string& coordinator = request.global_id().coordinator();
  if (coordinator != options_.node_name && !options_.IsPeer(coordinator)) {
    return absl::PermissionDeniedError(absl::StrCat(
        QuotedExcerpt(coordinator, 100), " is not in the peers: of ", options_.node_name,
        ", which joins jobs only from the coordinators listed there"));
  }
  if (caller.node != coordinator) {
    return absl::PermissionDeniedError(
        absl::StrCat("node ", caller.node, " may not admit a part of a job coordinated by ",
                     coordinator, ": only a job's coordinator admits its parts"));
  }
  if (request.node_index() < 0 || request.node_index() >= request.nodes_size() ||
      request.nodes(request.node_index()) != options_.node_name) {
    return absl::InvalidArgumentError(absl::StrCat(
        "this daemon is ", options_.node_name, ", not node ", request.node_index(), " of the job"));
  }
  RETURN_IF_ERROR(CheckBackend(engine_));
  // A check at submission comes before the coordinator knows who submits
  // (it queues nothing); the part itself carries its owner.
  if (request.check_only()) return absl::OkStatus();
  RETURN_IF_ERROR(CheckPrintable("owner", request.owner(), kMaxNameBytes));
  if (!request.owner_name().empty()) {
    RETURN_IF_ERROR(CheckPrintable("owner_name", request.owner_name(), kMaxNameBytes));
  }
  if (!request.name().empty())
    RETURN_IF_ERROR(CheckPrintable("name", request.name(), kMaxNameBytes));
  if (!request.owner_admin() && request.priority() > options_.max_user_priority) {
    return absl::PermissionDeniedError(
        absl::StrCat("priority: ", request.priority(), " is above ", options_.max_user_priority,
                     ", the highest a user who is not an admin may ask for on ", options_.node_name,
                     " (max_user_priority)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<jobs::GraphPtr> PartHost::PartGraph(const v1::AdmitPartRequest& request,
                                                   const std::string& source_name) {
  std::string decisions;
  for (const v1::DecidedSchedule& schedule : request.schedules()) {
    const std::string bytes = schedule.SerializeAsString();
    absl::StrAppend(&decisions, bytes.size(), ":", bytes);
  }
  const std::string digest = peer::Sha256Hex(absl::StrCat(
      request.global_id().coordinator(), "\n", request.node_index(), "\n",
      absl::StrJoin(request.nodes(), "\n"), "\n\n", decisions, "\n\n", request.spec()));
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [seen, graph] : recent_part_graphs_) {
      if (seen == digest) return graph;
    }
  }
  ASSIGN_OR_RETURN(const ops::DecidedSchedules decided, DecidedSchedulesOf(request));
  const ops::DecisionNotes notes = DecisionNotesOf(request);
  ASSIGN_OR_RETURN(JobSpec spec, admission_.Parse(request.spec(), source_name));
  ASSIGN_OR_RETURN(
      jobs::GraphPtr graph,
      admission_.AdmitSpan(std::move(spec), {request.nodes().begin(), request.nodes().end()},
                           &decided, &notes));
  absl::MutexLock lock(&mu_);
  recent_part_graphs_.emplace_back(digest, graph);
  if (recent_part_graphs_.size() > kRecentPartGraphs) recent_part_graphs_.pop_front();
  return graph;
}

absl::StatusOr<v1::AdmitPartResponse> PartHost::Admit(const peer::PeerCaller& caller,
                                                      const v1::AdmitPartRequest& request,
                                                      jobs::GraphPtr graph) {
  RETURN_IF_ERROR(CheckPartRequest(caller, request));
  const std::string key = GlobalKey(request.global_id());
  if (graph == nullptr) {
    ASSIGN_OR_RETURN(graph, PartGraph(request, key));
  }
  jobs::JobQueue* queue = Queue();
  if (queue == nullptr) return absl::UnavailableError("overlapd is starting");
  if (queue->draining()) return absl::UnavailableError("overlapd is draining");
  if (request.check_only()) return v1::AdmitPartResponse{};
  const std::string& coordinator = request.global_id().coordinator();
  v1::Job part;
  part.set_name(absl::StrCat(request.name().empty() ? "job" : request.name(), " (part ",
                             request.node_index(), " of ", key, ")"));
  part.set_priority(request.priority());
  for (int device : graph->devices) part.add_devices(device);
  part.set_spec(request.spec());
  part.set_owner(request.owner());
  part.set_owner_name(request.owner_name());
  part.set_owner_admin(request.owner_admin());
  *part.mutable_nodes() = request.nodes();
  part.set_coordinator(coordinator);
  part.set_global_job_id(request.global_id().job_id());
  part.set_node_index(request.node_index());
  part.set_counted_as_coordinated(coordinator == options_.node_name);
  // The owner's quota (max_queued_jobs_per_user) is the job queue's to keep.
  ASSIGN_OR_RETURN(const v1::Job queued, queue->Submit(part, std::move(graph)));
  {
    absl::MutexLock lock(&mu_);
    parts_[key] = queued.id();
  }
  Log()->info("part {} of {} queued (owner {})", queued.id(), key, request.owner());
  v1::AdmitPartResponse response;
  response.set_part_id(queued.id());
  return response;
}

absl::Status PartHost::Cancel(const peer::PeerCaller& caller,
                              const v1::CancelPartRequest& request) {
  const std::string key = GlobalKey(request.global_id());
  if (caller.node != request.global_id().coordinator()) {
    return absl::PermissionDeniedError(
        absl::StrCat("node ", caller.node, " may not cancel a part of a job coordinated by ",
                     QuotedExcerpt(request.global_id().coordinator(), 100),
                     ": only a job's coordinator cancels its parts"));
  }
  std::string part_id;
  jobs::JobQueue* queue;
  {
    absl::MutexLock lock(&mu_);
    auto it = parts_.find(key);
    if (it == parts_.end()) {
      return absl::NotFoundError(absl::StrCat("no part of ", QuotedExcerpt(key, 100), " here"));
    }
    part_id = it->second;
    queue = queue_;
  }
  if (queue == nullptr) return absl::UnavailableError("overlapd is starting");
  const std::string reason =
      absl::StrCat("cancelled by its coordinator ", caller.node, ": ", Excerpt(request.reason()));
  Log()->info("part {} of {}: {}", part_id, key, reason);
  absl::StatusOr<v1::Job> cancelled = queue->Cancel(part_id, reason);
  if (cancelled.ok() && cancelled->state() == v1::CANCELLED) {
    // It was queued and never runs: nothing else would forget it.
    absl::MutexLock lock(&mu_);
    ForgetPartLocked(key, part_id);
  }
  return cancelled.status();
}

void PartHost::ForgetPartLocked(const std::string& key, const std::string& part_id) {
  auto it = parts_.find(key);
  // A reservation tried again may have admitted a newer part under the key.
  if (it != parts_.end() && it->second == part_id) parts_.erase(it);
}

// --- A part's run ----------------------------------------------------------------

absl::Status PartHost::AwaitStart(const v1::Job& job, const runner::RunHooks& hooks,
                                  Coordinator& local) {
  v1::HoldPartRequest request;
  request.mutable_global_id()->set_coordinator(job.coordinator());
  request.mutable_global_id()->set_job_id(job.global_job_id());
  request.set_node_index(job.node_index());
  request.set_part_id(job.id());
  request.set_wait_ms(absl::ToInt64Milliseconds(kHoldPoll));
  while (true) {
    if (hooks.cancelled && hooks.cancelled()) return absl::CancelledError("cancelled by request");
    absl::StatusOr<v1::HoldPartResponse> answer =
        job.coordinator() == options_.node_name
            ? local.HoldPart(options_.Self(), request)
            : link_.HoldPart(job.coordinator(), request, kHoldPoll + kCallDeadline);
    if (!answer.ok()) {
      return absl::Status(
          answer.status().code() == absl::StatusCode::kNotFound
              ? absl::StatusCode::kFailedPrecondition
              : absl::StatusCode::kUnavailable,
          absl::StrCat("coordinator ", job.coordinator(), ": ", answer.status().message()));
    }
    switch (answer->decision()) {
      case v1::HoldPartResponse::START:
        return absl::OkStatus();
      case v1::HoldPartResponse::RELEASE: {
        absl::MutexLock lock(&mu_);
        released_.insert(job.id());
        return absl::CancelledError(answer->reason());
      }
      case v1::HoldPartResponse::CANCEL:
        return absl::CancelledError(answer->reason());
      default:
        break;
    }
  }
}

absl::StatusOr<v1::JobResult> PartHost::Run(const v1::Job& job, const jobs::GraphPtr& graph,
                                            const runner::RunHooks& hooks, Coordinator& local) {
  v1::GlobalJobId id;
  id.set_coordinator(job.coordinator());
  id.set_job_id(job.global_job_id());
  absl::StatusOr<v1::JobResult> result = RunStartedPart(job, id, graph, hooks, local);
  if (!result.ok() && hooks.cancelled && hooks.cancelled()) {
    // Cancelled, and then a collective lost the parts cancelled before it.
    result = absl::CancelledError(absl::StrCat("cancelled (", result.status().message(), ")"));
  }
  bool released;
  {
    absl::MutexLock lock(&mu_);
    released = released_.erase(job.id()) > 0;
    ForgetPartLocked(GlobalKey(id), job.id());
  }
  // Whatever ended the part, the coordinator hears of it: a part that could
  // not start there would otherwise leave it waiting for a hold that never comes.
  if (!released) Report(job, id, result, local);
  return result;
}

void PartHost::Report(const v1::Job& job, const v1::GlobalJobId& id,
                      const absl::StatusOr<v1::JobResult>& result, Coordinator& local) {
  v1::ReportPartRequest report;
  *report.mutable_global_id() = id;
  report.set_node_index(job.node_index());
  report.set_part_id(job.id());
  if (result.ok()) {
    *report.mutable_result() = *result;
  } else {
    report.set_error_code(static_cast<int>(result.status().code()));
    report.set_error(std::string(result.status().message()));
  }
  const absl::Status sent = job.coordinator() == options_.node_name
                                ? local.ReportPart(options_.Self(), report)
                                : link_.ReportPart(job.coordinator(), report, kCallDeadline);
  if (!sent.ok()) {
    Log()->warn("part {} of {}: the coordinator did not take its report: {}", job.id(),
                GlobalKey(id), sent.ToString());
  }
}

absl::StatusOr<v1::JobResult> PartHost::RunStartedPart(const v1::Job& job,
                                                       const v1::GlobalJobId& id,
                                                       jobs::GraphPtr graph,
                                                       const runner::RunHooks& hooks,
                                                       Coordinator& local) {
  if (job.submit_time_ms() < options_.started_unix_ms || graph == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "queued before this daemon restarted: a part of a job spanning daemons never runs on "
        "its own after a restart; submit the job again to its coordinator (",
        job.coordinator(), ")"));
  }
  RETURN_IF_ERROR(AwaitStart(job, hooks, local));
  // The coordinator's own store when it is this daemon (held while the part runs).
  std::shared_ptr<gloo_group::RendezvousStore> store = local.StoreOf(id);
  if (store == nullptr) store = std::make_shared<CoordinatorStore>(link_, job.coordinator(), id);
  SpanningOptions options;
  options.placement.nodes = job.nodes_size();
  options.placement.node_index = job.node_index();
  options.placement.local_devices = graph->devices;
  options.job_key = GlobalKey(id);
  options.bind_address = options_.bind_address;
  options.timeout = options_.collective_timeout;
  SpanningEngine spanning(engine_, *store, options);
  // A traced iteration reads every rank's events; each node has only its own.
  JobSpec spec = graph->spec;
  spec.timeline = false;
  std::vector<int> devices(graph->world);
  std::iota(devices.begin(), devices.end(), 0);
  // Every op runs what the coordinator decided: no tuning, no cache.
  return report::RunJobResult(
      spanning, spec, devices, hooks,
      runner::ScheduleSource{&graph->schedules, nullptr, &graph->schedule_notes});
}

}  // namespace overlap::cluster
