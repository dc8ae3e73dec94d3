#include "server/cluster/part_host.h"

#include <memory>
#include <numeric>
#include <optional>

#include "absl/strings/str_join.h"
#include "common/graph_validator.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/text.h"
#include "server/cluster/coordinator.h"
#include "server/cluster/spanning_engine.h"
#include "server/flight/flight_engine.h"
#include "server/gloo/rendezvous_store.h"
#include "server/peer/peer_auth.h"
#include "server/runner/job_runner.h"

namespace overlap::cluster {
namespace {

std::shared_ptr<spdlog::logger> Log() { return GetLogger("cluster"); }

// A rendezvous store served by the coordinator, for a part on another node.
class CoordinatorStore final : public gloo_group::RendezvousStore {
 public:
  CoordinatorStore(peer::PeerLink& link, peer::GlobalJobId id) : link_(link), id_(std::move(id)) {}

  absl::Status Set(const std::string& key, const std::string& value) override {
    return link_.StoreSet(id_.coordinator, peer::StoreCall{id_, key, value, absl::ZeroDuration()},
                          kCallDeadline);
  }

  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) override {
    return link_.StoreGet(id_.coordinator, peer::StoreCall{id_, key, "", timeout},
                          timeout + kCallDeadline);
  }

 private:
  peer::PeerLink& link_;
  const peer::GlobalJobId id_;
};

}  // namespace

PartHost::PartHost(const ClusterOptions& options, engine::Engine& engine,
                   const jobs::Admission& admission, peer::PeerLink& link)
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
                                        const peer::PartRequest& request) const {
  const std::string& coordinator = request.global_id.coordinator;
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
  if (request.node_index < 0 || request.node_index >= static_cast<int>(request.nodes.size()) ||
      request.nodes[request.node_index] != options_.node_name) {
    return absl::InvalidArgumentError(absl::StrCat(
        "this daemon is ", options_.node_name, ", not node ", request.node_index, " of the job"));
  }
  RETURN_IF_ERROR(CheckBackend(engine_));
  // A check at submission comes before the coordinator knows who submits
  // (it queues nothing); the part itself carries its owner.
  if (request.check_only) return absl::OkStatus();
  RETURN_IF_ERROR(CheckPrintable("owner", request.owner, kMaxNameBytes));
  if (!request.owner_name.empty()) {
    RETURN_IF_ERROR(CheckPrintable("owner_name", request.owner_name, kMaxNameBytes));
  }
  if (!request.name.empty()) RETURN_IF_ERROR(CheckPrintable("name", request.name, kMaxNameBytes));
  if (!request.owner_admin && request.priority > options_.max_user_priority) {
    return absl::PermissionDeniedError(
        absl::StrCat("priority: ", request.priority, " is above ", options_.max_user_priority,
                     ", the highest a user who is not an admin may ask for on ", options_.node_name,
                     " (max_user_priority)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<jobs::GraphPtr> PartHost::PartGraph(const peer::PartRequest& request,
                                                   const std::string& source_name) {
  // Each decision and its note, length-prefixed: no two requests write the same.
  std::string decisions;
  for (const auto& [op_id, schedule] : request.schedules) {
    auto note = request.notes.find(op_id);
    const std::string line = absl::StrCat(op_id, "=", schedule.Name(), " ",
                                          note == request.notes.end() ? "" : note->second);
    absl::StrAppend(&decisions, line.size(), ":", line);
  }
  const std::string digest = peer::Sha256Hex(
      absl::StrCat(request.global_id.coordinator, "\n", request.node_index, "\n",
                   absl::StrJoin(request.nodes, "\n"), "\n\n", decisions, "\n\n", request.spec));
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [seen, graph] : recent_part_graphs_) {
      if (seen == digest) return graph;
    }
  }
  ASSIGN_OR_RETURN(JobSpec spec, admission_.Parse(request.spec, source_name));
  ASSIGN_OR_RETURN(jobs::GraphPtr graph, admission_.AdmitSpan(std::move(spec), request.nodes,
                                                              &request.schedules, &request.notes));
  absl::MutexLock lock(&mu_);
  recent_part_graphs_.emplace_back(digest, graph);
  if (recent_part_graphs_.size() > kRecentPartGraphs) recent_part_graphs_.pop_front();
  return graph;
}

absl::StatusOr<std::string> PartHost::Admit(const peer::PeerCaller& caller,
                                            const peer::PartRequest& request,
                                            jobs::GraphPtr graph) {
  RETURN_IF_ERROR(CheckPartRequest(caller, request));
  const std::string key = request.global_id.Key();
  if (graph == nullptr) {
    ASSIGN_OR_RETURN(graph, PartGraph(request, key));
  }
  jobs::JobQueue* queue = Queue();
  if (queue == nullptr) return absl::UnavailableError("overlapd is starting");
  if (queue->draining()) return absl::UnavailableError("overlapd is draining");
  if (request.check_only) return std::string();
  const std::string& coordinator = request.global_id.coordinator;
  jobs::JobRecord part;
  part.name = absl::StrCat(request.name.empty() ? "job" : request.name, " (part ",
                           request.node_index, " of ", key, ")");
  part.priority = request.priority;
  part.devices = graph->devices;
  part.spec = request.spec;
  part.owner = request.owner;
  part.owner_name = request.owner_name;
  part.owner_admin = request.owner_admin;
  part.nodes = request.nodes;
  part.coordinator = coordinator;
  part.global_job_id = request.global_id.job_id;
  part.global_id = key;
  part.node_index = request.node_index;
  part.counted_as_coordinated = coordinator == options_.node_name;
  // The owner's quota (max_queued_jobs_per_user) is the job queue's to keep.
  ASSIGN_OR_RETURN(const jobs::JobRecord queued, queue->Submit(part, std::move(graph)));
  {
    absl::MutexLock lock(&mu_);
    parts_[key] = queued.id;
    recent_parts_.emplace_back(key, queued.id);
    if (recent_parts_.size() > kRecentParts) recent_parts_.pop_front();
  }
  Log()->info("part {} of {} queued (owner {})", queued.id, key, request.owner);
  return queued.id;
}

absl::Status PartHost::Cancel(const peer::PeerCaller& caller, const peer::CancelRequest& request) {
  const std::string key = request.global_id.Key();
  if (caller.node != request.global_id.coordinator) {
    return absl::PermissionDeniedError(
        absl::StrCat("node ", caller.node, " may not cancel a part of a job coordinated by ",
                     QuotedExcerpt(request.global_id.coordinator, 100),
                     ": only a job's coordinator cancels its parts"));
  }
  std::string part_id;
  jobs::JobQueue* queue;
  {
    absl::MutexLock lock(&mu_);
    auto it = parts_.find(key);
    // A part that is ending is forgotten here before its state is final:
    // the recent ones still name it, so that the cancel waits for that end.
    part_id = it != parts_.end() ? it->second : RecentPartLocked(key);
    queue = queue_;
  }
  if (part_id.empty()) {
    return absl::NotFoundError(absl::StrCat("no part of ", QuotedExcerpt(key, 100), " here"));
  }
  if (queue == nullptr) return absl::UnavailableError("overlapd is starting");
  const std::string reason =
      absl::StrCat("cancelled by its coordinator ", caller.node, ": ", Excerpt(request.reason));
  Log()->info("part {} of {}: {}", part_id, key, reason);
  absl::StatusOr<jobs::JobRecord> cancelled = queue->Cancel(part_id, reason);
  if (cancelled.ok() && cancelled->state == jobs::JobState::kCancelled) {
    // It was queued and never runs: nothing else would forget it.
    absl::MutexLock lock(&mu_);
    ForgetPartLocked(key, part_id);
  }
  if (!cancelled.ok() || jobs::IsFinal(cancelled->state)) return cancelled.status();
  // Running: it stops between iterations. The answer waits for its end.
  const absl::Time deadline = absl::Now() + kPartEndWait;
  uint64_t seen = 0;
  while (absl::Now() < deadline) {
    absl::StatusOr<jobs::JobSnapshot> now =
        queue->WaitForChange(part_id, seen, deadline - absl::Now());
    if (!now.ok()) return now.status();
    if (jobs::IsFinal(now->job.state)) return absl::OkStatus();
    seen = now->version;
  }
  return absl::DeadlineExceededError(
      absl::StrCat("part ", part_id, " of ", key, " on ", options_.node_name, " was still running ",
                   absl::ToInt64Seconds(kPartEndWait), " s after it was told to stop"));
}

std::string PartHost::RecentPartLocked(const std::string& key) const {
  for (auto it = recent_parts_.rbegin(); it != recent_parts_.rend(); ++it) {
    if (it->first == key) return it->second;
  }
  return "";
}

absl::StatusOr<std::string> PartHost::LocalJobId(const std::string& global_id) {
  std::string node, job_id;
  if (!jobs::SplitGlobalId(global_id, &node, &job_id)) {
    return absl::InvalidArgumentError(absl::StrCat("id: ", QuotedExcerpt(global_id, 100),
                                                   " is not a global job id (NODE/job-NNNNNN)"));
  }
  // The coordinator's own job: its global id is its id here, with this node's name.
  if (node == options_.node_name) return job_id;
  jobs::JobQueue* queue;
  {
    absl::MutexLock lock(&mu_);
    const std::string recent = RecentPartLocked(global_id);
    if (!recent.empty()) return recent;
    queue = queue_;
  }
  if (queue == nullptr) return absl::UnavailableError("overlapd is starting");
  // Admitted before this daemon started, or long ago: the store has it.
  uint64_t before = 0;
  do {
    ASSIGN_OR_RETURN(const jobs::JobPage page, queue->ListSummaries(std::nullopt, 1000, before));
    for (const jobs::JobRecord& job : page.jobs) {
      if (!job.coordinator.empty() && jobs::GlobalIdOf(job, options_.node_name) == global_id) {
        return job.id;
      }
    }
    before = page.next_before;
  } while (before > 0);
  return absl::NotFoundError(
      absl::StrCat("job ", QuotedExcerpt(global_id, 100), " has no part on ", options_.node_name,
                   " (its nodes are listed on its coordinator, ", QuotedExcerpt(node, 100), ")"));
}

void PartHost::ForgetPartLocked(const std::string& key, const std::string& part_id) {
  auto it = parts_.find(key);
  // A reservation tried again may have admitted a newer part under the key.
  if (it != parts_.end() && it->second == part_id) parts_.erase(it);
}

// --- A part's run ----------------------------------------------------------------

absl::Status PartHost::AwaitStart(const jobs::JobRecord& job, const runner::RunHooks& hooks,
                                  Coordinator& local) {
  const peer::HoldRequest request{peer::GlobalJobId{job.coordinator, job.global_job_id},
                                  job.node_index, job.id, kHoldPoll};
  while (true) {
    if (hooks.cancelled && hooks.cancelled()) return absl::CancelledError("cancelled by request");
    absl::StatusOr<peer::HoldAnswer> answer =
        job.coordinator == options_.node_name
            ? local.HoldPart(options_.Self(), request)
            : link_.HoldPart(job.coordinator, request, kHoldPoll + kCallDeadline);
    if (!answer.ok()) {
      return absl::Status(
          answer.status().code() == absl::StatusCode::kNotFound
              ? absl::StatusCode::kFailedPrecondition
              : absl::StatusCode::kUnavailable,
          absl::StrCat("coordinator ", job.coordinator, ": ", answer.status().message()));
    }
    switch (answer->decision) {
      case peer::HoldDecision::kStart:
        return absl::OkStatus();
      case peer::HoldDecision::kRelease: {
        absl::MutexLock lock(&mu_);
        released_.insert(job.id);
        return absl::CancelledError(answer->reason);
      }
      case peer::HoldDecision::kCancel:
        return absl::CancelledError(answer->reason);
      case peer::HoldDecision::kWait:
        break;
    }
  }
}

absl::StatusOr<runner::JobReport> PartHost::Run(const jobs::JobRecord& job,
                                                const jobs::GraphPtr& graph,
                                                const runner::RunHooks& hooks, Coordinator& local) {
  const peer::GlobalJobId id{job.coordinator, job.global_job_id};
  absl::StatusOr<runner::JobReport> result = RunStartedPart(job, id, graph, hooks, local);
  if (!result.ok() && hooks.cancelled && hooks.cancelled()) {
    // Cancelled, and then a collective lost the parts cancelled before it.
    result = absl::CancelledError(absl::StrCat("cancelled (", result.status().message(), ")"));
  }
  bool released;
  {
    absl::MutexLock lock(&mu_);
    released = released_.erase(job.id) > 0;
    ForgetPartLocked(id.Key(), job.id);
  }
  // Whatever ended the part, the coordinator hears of it: a part that could
  // not start there would otherwise leave it waiting for a hold that never comes.
  if (!released) Report(job, id, result, local);
  return result;
}

void PartHost::Report(const jobs::JobRecord& job, const peer::GlobalJobId& id,
                      const absl::StatusOr<runner::JobReport>& result, Coordinator& local) {
  const peer::PartReport report{id, job.node_index, job.id, result};
  const absl::Status sent = job.coordinator == options_.node_name
                                ? local.ReportPart(options_.Self(), report)
                                : link_.ReportPart(job.coordinator, report, kCallDeadline);
  if (!sent.ok()) {
    Log()->warn("part {} of {}: the coordinator did not take its report: {}", job.id, id.Key(),
                sent.ToString());
  }
}

absl::StatusOr<runner::JobReport> PartHost::RunStartedPart(const jobs::JobRecord& job,
                                                           const peer::GlobalJobId& id,
                                                           jobs::GraphPtr graph,
                                                           const runner::RunHooks& hooks,
                                                           Coordinator& local) {
  if (job.submit_time_ms < options_.started_unix_ms || graph == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "queued before this daemon restarted: a part of a job spanning daemons never runs on "
        "its own after a restart; submit the job again to its coordinator (",
        job.coordinator, ")"));
  }
  RETURN_IF_ERROR(AwaitStart(job, hooks, local));
  // The coordinator's own store when it is this daemon (held while the part runs).
  std::shared_ptr<gloo_group::RendezvousStore> store = local.StoreOf(id);
  if (store == nullptr) store = std::make_shared<CoordinatorStore>(link_, id);
  SpanningOptions options;
  options.placement.nodes = static_cast<int>(job.nodes.size());
  options.placement.node_index = job.node_index;
  options.placement.local_devices = graph->devices;
  options.job_key = id.Key();
  options.bind_address = options_.bind_address;
  options.timeout = options_.collective_timeout;
  SpanningEngine spanning(engine_, *store, options);
  // Its collectives are recorded under the job's global id, with the job's
  // global ranks, this node's only (gather_flight.h); the daemon's own
  // recorder, below the spanning engine, then records none of them.
  std::optional<flight::FlightEngine> recorded;
  if (options_.flight != nullptr) recorded.emplace(spanning, *options_.flight, id.Key());
  engine::Engine& engine = recorded.has_value() ? static_cast<engine::Engine&>(*recorded)
                                                : static_cast<engine::Engine&>(spanning);
  const flight::ScopedFlightLabel flight_label(id.Key(), "");
  // A traced iteration reads every rank's events; each node has only its own.
  JobSpec spec = graph->spec;
  spec.timeline = false;
  std::vector<int> devices(graph->world);
  std::iota(devices.begin(), devices.end(), 0);
  // Every op runs what the coordinator decided: no tuning, no cache.
  return runner::RunJob(engine, spec, devices, hooks,
                        runner::ScheduleSource{&graph->schedules, nullptr, &graph->schedule_notes});
}

}  // namespace overlap::cluster
