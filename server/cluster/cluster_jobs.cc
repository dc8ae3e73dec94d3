#include "server/cluster/cluster_jobs.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/graph_parser.h"
#include "common/graph_validator.h"
#include "common/text.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "server/cluster/cross_node_transport.h"
#include "server/cluster/schedule_wire.h"
#include "server/cluster/spanning_engine.h"
#include "server/gloo/rendezvous_store.h"
#include "server/peer/peer_auth.h"
#include "server/report/result_proto.h"

namespace overlap::cluster {
namespace {

// How long one HoldPart call may wait at the coordinator before answering
// WAIT: short enough that a part notices its own cancel soon.
constexpr absl::Duration kHoldPoll = absl::Seconds(1);
// Calls that do not wait for anything.
constexpr absl::Duration kCallDeadline = absl::Seconds(10);
// While the parts run, the coordinator asks every node that has not reported
// whether it is still there this often; one that misses kMissedProbes in a
// row is taken for dead.
constexpr absl::Duration kProbeEvery = absl::Seconds(1);
constexpr int kMissedProbes = 3;

std::shared_ptr<spdlog::logger> Log() { return GetLogger("cluster"); }

// The status with the node named first (calls over the network name it already).
absl::Status WithNode(const std::string& node, const absl::Status& status) {
  const std::string prefix = absl::StrCat("node ", node, ": ");
  if (absl::StartsWith(status.message(), prefix)) return status;
  return absl::Status(status.code(), absl::StrCat(prefix, status.message()));
}

absl::Status FromReport(const v1::ReportPartRequest& report, const std::string& node) {
  return absl::Status(static_cast<absl::StatusCode>(report.error_code()),
                      absl::StrCat("node ", node, ": ", report.error()));
}

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

std::string GlobalKey(const v1::GlobalJobId& id) {
  return absl::StrCat(id.coordinator(), "/", id.job_id());
}

const char* CoordinatorPhaseName(CoordinatorPhase phase) {
  switch (phase) {
    case CoordinatorPhase::kChecking: return "checking";
    case CoordinatorPhase::kReserving: return "reserving";
    case CoordinatorPhase::kReleasing: return "releasing";
    case CoordinatorPhase::kHolding: return "holding";
    case CoordinatorPhase::kRunning: return "running";
    case CoordinatorPhase::kReporting: return "reporting";
    case CoordinatorPhase::kEnded: return "ended";
  }
  return "?";
}

bool CoordinatorMayMove(CoordinatorPhase from, CoordinatorPhase to) {
  using P = CoordinatorPhase;
  if (to == P::kEnded) return from != P::kEnded;  // a failure or a cancel, from anywhere
  switch (from) {
    case P::kChecking: return to == P::kReserving;
    case P::kReserving: return to == P::kHolding || to == P::kReleasing;
    case P::kReleasing: return to == P::kReserving;
    case P::kHolding: return to == P::kRunning;
    case P::kRunning: return to == P::kReporting;
    default: return false;
  }
}

// What the coordinator knows of one job while it runs. Guarded by its own
// mutex: HoldPart, ReportPart and the store are called from gRPC threads
// while the coordination waits on `changed`.
struct ClusterJobs::Coordinated {
  Coordinated(std::string job_id_in, jobs::GraphPtr graph_in)
      : job_id(std::move(job_id_in)), graph(std::move(graph_in)), nodes(graph->spec.nodes) {}

  const std::string job_id;
  const jobs::GraphPtr graph;  // the job's, as admitted at submission
  const std::vector<std::string>& nodes;
  gloo_group::InMemoryRendezvousStore store;

  absl::Mutex mu;
  absl::CondVar changed;
  std::map<int, std::string> part_ids ABSL_GUARDED_BY(mu);  // node index -> part id
  // Nodes whose AdmitPart is under way: their part may start, and ask to
  // hold, before its id is recorded here.
  std::set<int> admitting ABSL_GUARDED_BY(mu);
  std::set<int> held ABSL_GUARDED_BY(mu);
  CoordinatorPhase phase ABSL_GUARDED_BY(mu) = CoordinatorPhase::kChecking;
  std::string cancel_reason ABSL_GUARDED_BY(mu);  // set: every part is to end
  std::map<int, v1::ReportPartRequest> reports ABSL_GUARDED_BY(mu);

  // Every transition of the job, and what it changes, in one place: a held
  // part starts once the job is running; a release forgets the attempt's
  // parts, holds and reports, so that the next attempt starts clean. A move
  // the table does not allow is a bug, refused (INTERNAL) and logged.
  absl::Status MoveTo(CoordinatorPhase next) ABSL_LOCKS_EXCLUDED(mu) {
    CoordinatorPhase from;
    bool allowed;
    {
      absl::MutexLock lock(&mu);
      from = phase;
      allowed = CoordinatorMayMove(from, next);
      if (allowed && from == CoordinatorPhase::kReleasing) {
        part_ids.clear();
        held.clear();
        reports.clear();
        cancel_reason.clear();
      }
      if (allowed) {
        phase = next;
        changed.SignalAll();
      }
    }
    // Logged outside the lock: HoldPart and ReportPart wait on it.
    if (!allowed) {
      Log()->error("job {}: the coordinator cannot go from {} to {}", job_id,
                   CoordinatorPhaseName(from), CoordinatorPhaseName(next));
      return absl::InternalError(absl::StrCat("coordinator: no move from ",
                                              CoordinatorPhaseName(from), " to ",
                                              CoordinatorPhaseName(next)));
    }
    Log()->debug("job {}: coordinator {} -> {}", job_id, CoordinatorPhaseName(from),
                 CoordinatorPhaseName(next));
    return absl::OkStatus();
  }
  bool Started() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return phase == CoordinatorPhase::kRunning || phase == CoordinatorPhase::kReporting;
  }
};

ClusterJobs::ClusterJobs(ClusterOptions options, engine::Engine& engine,
                         const jobs::Admission& admission, PeerLink& link)
    : options_(std::move(options)), engine_(engine), admission_(admission), link_(link) {}

ClusterJobs::~ClusterJobs() = default;

void ClusterJobs::SetJobQueue(jobs::JobQueue* queue) {
  absl::MutexLock lock(&mu_);
  queue_ = queue;
}

absl::Status ClusterJobs::CheckBackend() const {
  if (TransportFor(engine_) != nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "jobs spanning daemons need collectives between processes, which this daemon's ",
      engine_.Name(), " backend does not have here (NCCL refuses two ranks of one communicator "
      "on one GPU: ranks_per_gpu must be 1)"));
}

peer::PeerCaller ClusterJobs::Self() const {
  peer::PeerCaller self;
  self.node = options_.node_name;
  return self;
}

bool ClusterJobs::IsPeer(const std::string& node) const {
  return std::find(options_.peers.begin(), options_.peers.end(), node) != options_.peers.end();
}

std::shared_ptr<ClusterJobs::Coordinated> ClusterJobs::Find(const v1::GlobalJobId& id) {
  if (id.coordinator() != options_.node_name) return nullptr;
  absl::MutexLock lock(&mu_);
  auto it = coordinated_.find(id.job_id());
  return it == coordinated_.end() ? nullptr : it->second;
}

v1::AdmitPartRequest ClusterJobs::PartRequest(const std::string& job_id, const std::string& spec,
                                              const jobs::AdmittedGraph& graph,
                                              int node_index) const {
  v1::AdmitPartRequest request;
  request.mutable_global_id()->set_coordinator(options_.node_name);
  request.mutable_global_id()->set_job_id(job_id);
  request.set_spec(spec);
  request.set_node_index(node_index);
  for (const std::string& node : graph.spec.nodes) request.add_nodes(node);
  AddDecidedSchedules(graph.schedules, &graph.schedule_notes, request);
  return request;
}

absl::StatusOr<std::shared_ptr<ClusterJobs::Coordinated>> ClusterJobs::Coordinating(
    const v1::GlobalJobId& id) {
  std::shared_ptr<Coordinated> state = Find(id);
  if (state == nullptr) {
    return absl::NotFoundError(absl::StrCat("no job ", QuotedExcerpt(id.job_id(), 80),
                                            " is being coordinated here (it ended, or this "
                                            "daemon restarted)"));
  }
  return state;
}

absl::StatusOr<jobs::AdmittedJob> ClusterJobs::AdmitCoordinated(
    JobSpec spec, const std::string& spec_text, const std::string& source_name,
    const std::vector<std::string>& nodes) {
  RETURN_IF_ERROR(CheckBackend());
  ASSIGN_OR_RETURN(jobs::GraphPtr graph, admission_.AdmitSpan(std::move(spec), nodes));
  const JobSpec& admitted = graph->spec;
  const std::vector<std::string>& all = admitted.nodes;
  if (std::find(all.begin(), all.end(), options_.node_name) == all.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "nodes: this daemon (", options_.node_name,
        ") coordinates the jobs it runs a part of: list it among the nodes, or submit to one "
        "of them"));
  }
  std::set<std::string> seen;
  for (const std::string& node : all) {
    if (!seen.insert(node).second) {
      return absl::InvalidArgumentError(absl::StrCat("nodes: ", node, " is listed twice"));
    }
    if (node != options_.node_name && !IsPeer(node)) {
      return absl::PermissionDeniedError(absl::StrCat(
          "nodes: ", node, " is not in this daemon's peers: (",
          absl::StrJoin(options_.peers, ", "), "); a job reaches only the daemons listed there"));
    }
  }
  jobs::JobQueue* queue;
  {
    absl::MutexLock lock(&mu_);
    queue = queue_;
  }
  if (queue == nullptr) return absl::UnavailableError("overlapd is starting");
  int coordinating = 0;
  for (v1::JobState state : {v1::QUEUED, v1::RUNNING}) {
    ASSIGN_OR_RETURN(const std::vector<v1::Job> active, queue->List(state, 0));
    for (const v1::Job& job : active) {
      coordinating += job.nodes_size() > 0 && job.coordinator().empty();
    }
  }
  if (coordinating >= options_.max_jobs) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "this daemon already coordinates ", coordinating,
        " jobs spanning daemons, queued or running (cluster_max_jobs = ", options_.max_jobs,
        ")"));
  }
  // Before anything is queued.
  RETURN_IF_ERROR(CheckNodes(spec_text, *graph));
  jobs::AdmittedJob job;
  job.job.set_name(!admitted.name.empty() ? admitted.name : Excerpt(source_name, 120));
  job.job.set_priority(admitted.priority);
  job.job.set_spec(spec_text);
  for (const std::string& node : all) job.job.add_nodes(node);
  job.graph = std::move(graph);
  return job;
}

absl::Status ClusterJobs::CheckNodes(const std::string& spec_text,
                                     const jobs::AdmittedGraph& graph) {
  const std::vector<std::string>& nodes = graph.spec.nodes;
  for (int n = 0; n < static_cast<int>(nodes.size()); ++n) {
    if (nodes[n] == options_.node_name) continue;
    // Their statuses name the node already.
    RETURN_IF_ERROR(link_.Hello(nodes[n], kCallDeadline).status());
    v1::AdmitPartRequest check = PartRequest("", spec_text, graph, n);
    check.set_check_only(true);
    RETURN_IF_ERROR(link_.AdmitPart(nodes[n], check, kCallDeadline).status());
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::JobResult> ClusterJobs::Run(const v1::Job& job, const jobs::GraphPtr& graph,
                                               const runner::RunHooks& hooks) {
  if (!job.coordinator().empty()) return RunPart(job, graph, hooks);
  if (job.submit_time_ms() < options_.started_unix_ms || graph == nullptr) {
    return absl::FailedPreconditionError(
        "queued before this daemon restarted, and its parts with it: submit it again");
  }
  return Coordinate(job, graph, hooks);
}

// --- The coordinator ---------------------------------------------------------

absl::StatusOr<v1::JobResult> ClusterJobs::Coordinate(const v1::Job& job, jobs::GraphPtr graph,
                                                      const runner::RunHooks& hooks) {
  auto state = std::make_shared<Coordinated>(job.id(), std::move(graph));
  {
    absl::MutexLock lock(&mu_);
    coordinated_[job.id()] = state;
  }
  auto forget = [&] {
    absl::MutexLock lock(&mu_);
    coordinated_.erase(job.id());
  };
  if (hooks.on_progress) hooks.on_progress(runner::Progress{0, 0, "", "check nodes", 0, 0});
  absl::Status outcome = CheckNodes(job.spec(), *state->graph);
  if (outcome.ok()) outcome = state->MoveTo(CoordinatorPhase::kReserving);
  if (outcome.ok()) outcome = Reserve(job, *state, hooks);
  // Every node holds its part: start them all (HoldPart answers START).
  if (outcome.ok()) outcome = state->MoveTo(CoordinatorPhase::kRunning);
  if (outcome.ok()) outcome = AwaitReports(*state, hooks);
  if (outcome.ok()) outcome = state->MoveTo(CoordinatorPhase::kReporting);
  if (!outcome.ok()) {
    CancelParts(*state, outcome.code() == absl::StatusCode::kCancelled
                            ? "the job was cancelled on its coordinator"
                            : absl::StrCat("the job failed: ", outcome.message()));
    (void)state->MoveTo(CoordinatorPhase::kEnded);
    forget();
    return outcome;
  }
  std::vector<v1::JobResult> parts;
  std::vector<std::string> part_ids;
  {
    absl::MutexLock lock(&state->mu);
    for (int n = 0; n < static_cast<int>(state->nodes.size()); ++n) {
      parts.push_back(state->reports[n].result());
      part_ids.push_back(state->part_ids[n]);
    }
  }
  (void)state->MoveTo(CoordinatorPhase::kEnded);
  forget();
  return MergeNodeResults(state->graph->spec, state->nodes, part_ids, parts,
                          static_cast<int>(state->graph->devices.size()));
}

absl::Status ClusterJobs::Reserve(const v1::Job& job, Coordinated& state,
                                  const runner::RunHooks& hooks) {
  const int count = static_cast<int>(state.nodes.size());
  std::vector<int> order(count);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return state.nodes[a] < state.nodes[b]; });
  std::mt19937 random(std::random_device{}());
  for (int attempt = 1;; ++attempt) {
    bool released = false;
    for (int i = 0; i < count && !released; ++i) {
      const int n = order[i];
      if (hooks.on_progress) {
        hooks.on_progress(runner::Progress{i, count, state.nodes[n],
                                           absl::StrCat("reserve (attempt ", attempt, ")"), 0, 0});
      }
      v1::AdmitPartRequest request = PartRequest(job.id(), job.spec(), *state.graph, n);
      request.set_owner(job.owner());
      request.set_owner_name(job.owner_name());
      request.set_priority(job.priority());
      request.set_name(job.name());
      request.set_owner_admin(job.owner_admin());
      {
        absl::MutexLock lock(&state.mu);
        state.admitting.insert(n);
      }
      absl::StatusOr<v1::AdmitPartResponse> admitted =
          CallAdmit(state.nodes[n], request, state.graph);
      {
        absl::MutexLock lock(&state.mu);
        state.admitting.erase(n);
        if (admitted.ok()) state.part_ids[n] = admitted->part_id();
        state.changed.SignalAll();
      }
      if (!admitted.ok()) return WithNode(state.nodes[n], admitted.status());
      {
        absl::MutexLock lock(&state.mu);
        const absl::Time deadline = absl::Now() + options_.hold_timeout;
        while (!state.held.count(n) && !state.reports.count(n)) {
          if (hooks.cancelled && hooks.cancelled()) {
            return absl::CancelledError("cancelled by request");
          }
          if (absl::Now() >= deadline) break;
          state.changed.WaitWithTimeout(&state.mu, absl::Milliseconds(100));
        }
        if (auto report = state.reports.find(n); report != state.reports.end()) {
          // The part ended before it held its node (it could not start there).
          return FromReport(report->second, state.nodes[n]);
        }
        released = !state.held.count(n);
      }
      if (released) {
        Log()->info("job {}: {} did not start its part within {} ms; releasing the nodes held "
                    "and trying again",
                    job.id(), state.nodes[n], absl::ToInt64Milliseconds(options_.hold_timeout));
      }
    }
    if (!released) return state.MoveTo(CoordinatorPhase::kHolding);
    RETURN_IF_ERROR(state.MoveTo(CoordinatorPhase::kReleasing));
    CancelParts(state, "the coordinator released the reservation to try again");
    RETURN_IF_ERROR(state.MoveTo(CoordinatorPhase::kReserving));
    // Apart in time, so that two coordinators that collided do not collide again.
    const double backoff_ms =
        std::uniform_real_distribution<double>(0.25, 1.0)(random) *
        std::min(absl::ToDoubleMilliseconds(options_.hold_timeout), 500.0 * attempt);
    absl::Time until = absl::Now() + absl::Milliseconds(backoff_ms);
    while (absl::Now() < until) {
      if (hooks.cancelled && hooks.cancelled()) return absl::CancelledError("cancelled by request");
      absl::SleepFor(absl::Milliseconds(50));
    }
  }
}

absl::Status ClusterJobs::AwaitReports(Coordinated& state, const runner::RunHooks& hooks) {
  const int count = static_cast<int>(state.nodes.size());
  std::map<int, int> missed;
  absl::Time next_probe = absl::Now() + kProbeEvery;
  if (hooks.on_progress) hooks.on_progress(runner::Progress{0, count, "", "run", 0, 0});
  while (true) {
    std::vector<int> waiting;
    absl::Status failed;
    std::vector<int> silent;  // nodes that have not reported when one failed
    {
      absl::MutexLock lock(&state.mu);
      state.changed.WaitWithTimeout(&state.mu, absl::Milliseconds(100));
      for (const auto& [n, report] : state.reports) {
        if (report.error_code() == 0) continue;
        failed = FromReport(report, state.nodes[n]);
        for (int m = 0; m < count; ++m) {
          if (!state.reports.count(m) && state.nodes[m] != options_.node_name) {
            silent.push_back(m);
          }
        }
        break;
      }
      if (failed.ok() && static_cast<int>(state.reports.size()) == count) {
        return absl::OkStatus();
      }
      for (int n = 0; n < count; ++n) {
        if (!state.reports.count(n)) waiting.push_back(n);
      }
    }
    if (!failed.ok()) {
      // A part that lost a peer fails first and names itself: say which node
      // went away, where one did.
      for (int n : silent) {
        absl::StatusOr<v1::HelloResponse> hello = link_.Hello(state.nodes[n], kProbeEvery);
        if (!hello.ok()) {
          return absl::AbortedError(absl::StrCat("node ", state.nodes[n], " stopped answering (",
                                                 hello.status().message(), "); ",
                                                 failed.message()));
        }
      }
      return failed;
    }
    if (hooks.cancelled && hooks.cancelled()) return absl::CancelledError("cancelled by request");
    if (absl::Now() < next_probe) continue;
    next_probe = absl::Now() + kProbeEvery;
    for (int n : waiting) {
      if (state.nodes[n] == options_.node_name) continue;
      absl::StatusOr<v1::HelloResponse> hello = link_.Hello(state.nodes[n], kProbeEvery);
      if (hello.ok()) {
        missed[n] = 0;
      } else if (++missed[n] >= kMissedProbes) {
        return absl::AbortedError(absl::StrCat("node ", state.nodes[n], " stopped answering (",
                                               hello.status().message(), ")"));
      }
    }
  }
}

void ClusterJobs::CancelParts(Coordinated& state, const std::string& reason) {
  std::map<int, std::string> parts;
  {
    absl::MutexLock lock(&state.mu);
    state.cancel_reason = reason;
    state.changed.SignalAll();
    parts = state.part_ids;
  }
  // The others before this node's own: a part that loses its peers after it
  // was told to stop ends CANCELLED, not failed.
  std::vector<std::pair<int, std::string>> order(parts.begin(), parts.end());
  std::stable_partition(order.begin(), order.end(), [&](const auto& part) {
    return state.nodes[part.first] != options_.node_name;
  });
  for (const auto& [n, part_id] : order) {
    v1::CancelPartRequest request;
    request.mutable_global_id()->set_coordinator(options_.node_name);
    request.mutable_global_id()->set_job_id(state.job_id);
    request.set_reason(reason);
    // A part that already ended answers FAILED_PRECONDITION: nothing to do.
    absl::Status cancelled = CallCancel(state.nodes[n], request);
    // NOT_FOUND: the part ended and was forgotten there already.
    if (!cancelled.ok() && cancelled.code() != absl::StatusCode::kFailedPrecondition &&
        cancelled.code() != absl::StatusCode::kNotFound) {
      Log()->info("cancelling part {} on {}: {}", part_id, state.nodes[n], cancelled.ToString());
    }
  }
}

// --- Calls to nodes, this one without the network --------------------------

absl::StatusOr<v1::AdmitPartResponse> ClusterJobs::CallAdmit(const std::string& node,
                                                             const v1::AdmitPartRequest& request,
                                                             const jobs::GraphPtr& graph) {
  if (node == options_.node_name) return AdmitPartGraph(Self(), request, graph);
  return link_.AdmitPart(node, request, kCallDeadline);
}

absl::Status ClusterJobs::CallCancel(const std::string& node,
                                     const v1::CancelPartRequest& request) {
  if (node == options_.node_name) return CancelPart(Self(), request);
  return link_.CancelPart(node, request, kCallDeadline);
}

absl::StatusOr<v1::HoldPartResponse> ClusterJobs::CallHold(const std::string& node,
                                                           const v1::HoldPartRequest& request) {
  if (node == options_.node_name) return HoldPart(Self(), request);
  return link_.HoldPart(node, request, kHoldPoll + kCallDeadline);
}

absl::Status ClusterJobs::CallReport(const std::string& node,
                                     const v1::ReportPartRequest& request) {
  if (node == options_.node_name) return ReportPart(Self(), request);
  return link_.ReportPart(node, request, kCallDeadline);
}

// --- A part --------------------------------------------------------------------

absl::Status ClusterJobs::AwaitStart(const v1::Job& job, const runner::RunHooks& hooks) {
  v1::HoldPartRequest request;
  request.mutable_global_id()->set_coordinator(job.coordinator());
  request.mutable_global_id()->set_job_id(job.global_job_id());
  request.set_node_index(job.node_index());
  request.set_part_id(job.id());
  request.set_wait_ms(absl::ToInt64Milliseconds(kHoldPoll));
  while (true) {
    if (hooks.cancelled && hooks.cancelled()) return absl::CancelledError("cancelled by request");
    absl::StatusOr<v1::HoldPartResponse> answer = CallHold(job.coordinator(), request);
    if (!answer.ok()) {
      return absl::Status(answer.status().code() == absl::StatusCode::kNotFound
                              ? absl::StatusCode::kFailedPrecondition
                              : absl::StatusCode::kUnavailable,
                          absl::StrCat("coordinator ", job.coordinator(), ": ",
                                       answer.status().message()));
    }
    switch (answer->decision()) {
      case v1::HoldPartResponse::START: return absl::OkStatus();
      case v1::HoldPartResponse::RELEASE: {
        absl::MutexLock lock(&mu_);
        released_.insert(job.id());
        return absl::CancelledError(answer->reason());
      }
      case v1::HoldPartResponse::CANCEL: return absl::CancelledError(answer->reason());
      default: break;
    }
  }
}

absl::StatusOr<v1::JobResult> ClusterJobs::RunPart(const v1::Job& job, const jobs::GraphPtr& graph,
                                                   const runner::RunHooks& hooks) {
  v1::GlobalJobId id;
  id.set_coordinator(job.coordinator());
  id.set_job_id(job.global_job_id());
  absl::StatusOr<v1::JobResult> result = RunStartedPart(job, id, graph, hooks);
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
  if (!released) {
    // Whatever ended the part, the coordinator hears of it: a part that could
    // not start there would otherwise leave it waiting for a hold that never comes.
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
    if (absl::Status sent = CallReport(job.coordinator(), report); !sent.ok()) {
      Log()->warn("part {} of {}: the coordinator did not take its report: {}", job.id(),
                  GlobalKey(id), sent.ToString());
    }
  }
  return result;
}

absl::StatusOr<v1::JobResult> ClusterJobs::RunStartedPart(const v1::Job& job,
                                                          const v1::GlobalJobId& id,
                                                          jobs::GraphPtr graph,
                                                          const runner::RunHooks& hooks) {
  if (job.submit_time_ms() < options_.started_unix_ms || graph == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "queued before this daemon restarted: a part of a job spanning daemons never runs on "
        "its own after a restart; submit the job again to its coordinator (",
        job.coordinator(), ")"));
  }
  RETURN_IF_ERROR(AwaitStart(job, hooks));

  std::unique_ptr<gloo_group::RendezvousStore> remote_store;
  gloo_group::RendezvousStore* store = nullptr;
  std::shared_ptr<Coordinated> own = Find(id);
  if (own != nullptr) {
    store = &own->store;
  } else {
    remote_store = std::make_unique<CoordinatorStore>(link_, job.coordinator(), id);
    store = remote_store.get();
  }
  SpanningOptions options;
  options.placement.nodes = job.nodes_size();
  options.placement.node_index = job.node_index();
  options.placement.local_devices = graph->devices;
  options.job_key = GlobalKey(id);
  options.bind_address = options_.bind_address;
  options.timeout = options_.collective_timeout;
  absl::StatusOr<v1::JobResult> result;
  {
    SpanningEngine spanning(engine_, *store, options);
    // A traced iteration reads every rank's events; each node has only its own.
    JobSpec spec = graph->spec;
    spec.timeline = false;
    std::vector<int> devices(graph->world);
    std::iota(devices.begin(), devices.end(), 0);
    // Every op runs what the coordinator decided: no tuning, no cache.
    result = report::RunJobResult(spanning, spec, devices, hooks,
                                  runner::ScheduleSource{&graph->schedules, nullptr,
                                                         &graph->schedule_notes});
  }
  return result;
}

// --- The peer listener's calls ------------------------------------------------

absl::Status ClusterJobs::CheckPartRequest(const v1::AdmitPartRequest& request) const {
  // A check at submission comes before the coordinator knows who submits
  // (it queues nothing); the part itself carries its owner.
  if (request.check_only()) return absl::OkStatus();
  RETURN_IF_ERROR(CheckPrintable("owner", request.owner(), kMaxNameBytes));
  if (!request.owner_name().empty()) {
    RETURN_IF_ERROR(CheckPrintable("owner_name", request.owner_name(), kMaxNameBytes));
  }
  if (!request.name().empty()) RETURN_IF_ERROR(CheckPrintable("name", request.name(), kMaxNameBytes));
  if (!request.owner_admin() && request.priority() > options_.max_user_priority) {
    return absl::PermissionDeniedError(absl::StrCat(
        "priority: ", request.priority(), " is above ", options_.max_user_priority,
        ", the highest a user who is not an admin may ask for on ", options_.node_name,
        " (max_user_priority)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<jobs::GraphPtr> ClusterJobs::PartGraph(const v1::AdmitPartRequest& request,
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
  ASSIGN_OR_RETURN(jobs::GraphPtr graph,
                   admission_.AdmitSpan(std::move(spec),
                                        {request.nodes().begin(), request.nodes().end()},
                                        &decided, &notes));
  absl::MutexLock lock(&mu_);
  recent_part_graphs_.emplace_back(digest, graph);
  if (recent_part_graphs_.size() > kRecentPartGraphs) recent_part_graphs_.pop_front();
  return graph;
}

absl::StatusOr<v1::AdmitPartResponse> ClusterJobs::AdmitPart(
    const peer::PeerCaller& caller, const v1::AdmitPartRequest& request) {
  return AdmitPartGraph(caller, request, nullptr);
}

absl::StatusOr<v1::AdmitPartResponse> ClusterJobs::AdmitPartGraph(
    const peer::PeerCaller& caller, const v1::AdmitPartRequest& request, jobs::GraphPtr graph) {
  const std::string& coordinator = request.global_id().coordinator();
  if (coordinator != options_.node_name && !IsPeer(coordinator)) {
    return absl::PermissionDeniedError(
        absl::StrCat(QuotedExcerpt(coordinator, 100), " is not in the peers: of ",
                     options_.node_name, ", which joins jobs only from the coordinators listed there"));
  }
  if (caller.node != coordinator) {
    return absl::PermissionDeniedError(absl::StrCat(
        "node ", caller.node, " may not admit a part of a job coordinated by ", coordinator,
        ": only a job's coordinator admits its parts"));
  }
  if (request.node_index() < 0 || request.node_index() >= request.nodes_size() ||
      request.nodes(request.node_index()) != options_.node_name) {
    return absl::InvalidArgumentError(absl::StrCat(
        "this daemon is ", options_.node_name, ", not node ", request.node_index(), " of the job"));
  }
  RETURN_IF_ERROR(CheckBackend());
  RETURN_IF_ERROR(CheckPartRequest(request));
  const std::string key = GlobalKey(request.global_id());
  if (graph == nullptr) {
    ASSIGN_OR_RETURN(graph, PartGraph(request, key));
  }
  jobs::JobQueue* queue;
  {
    absl::MutexLock lock(&mu_);
    queue = queue_;
  }
  if (queue == nullptr) return absl::UnavailableError("overlapd is starting");
  if (queue->draining()) return absl::UnavailableError("overlapd is draining");
  if (request.check_only()) return v1::AdmitPartResponse{};
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

absl::Status ClusterJobs::CancelPart(const peer::PeerCaller& caller,
                                     const v1::CancelPartRequest& request) {
  const std::string key = GlobalKey(request.global_id());
  if (caller.node != request.global_id().coordinator()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "node ", caller.node, " may not cancel a part of a job coordinated by ",
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

void ClusterJobs::ForgetPartLocked(const std::string& key, const std::string& part_id) {
  auto it = parts_.find(key);
  // A reservation tried again may have admitted a newer part under the key.
  if (it != parts_.end() && it->second == part_id) parts_.erase(it);
}

absl::StatusOr<v1::HoldPartResponse> ClusterJobs::HoldPart(const peer::PeerCaller& caller,
                                                           const v1::HoldPartRequest& request) {
  ASSIGN_OR_RETURN(std::shared_ptr<Coordinated> state, Coordinating(request.global_id()));
  const int n = request.node_index();
  RETURN_IF_ERROR(CheckPartNode(*state, caller, n, "hold"));
  v1::HoldPartResponse response;
  const absl::Time deadline =
      absl::Now() + std::clamp(absl::Milliseconds(request.wait_ms()), absl::ZeroDuration(),
                               absl::Seconds(5));
  absl::MutexLock lock(&state->mu);
  // A part that started at once may ask before AdmitPart returned its id to
  // the coordinator: it waits for the id rather than being told to go.
  while (state->admitting.count(n) && !state->part_ids.count(n) && absl::Now() < deadline) {
    state->changed.WaitWithDeadline(&state->mu, deadline);
  }
  auto part = state->part_ids.find(n);
  if (part == state->part_ids.end() && state->admitting.count(n)) {
    response.set_decision(v1::HoldPartResponse::WAIT);
    return response;
  }
  if (part == state->part_ids.end() || part->second != request.part_id()) {
    response.set_decision(v1::HoldPartResponse::RELEASE);
    response.set_reason("the coordinator released this reservation and tries again");
    return response;
  }
  state->held.insert(n);
  state->changed.SignalAll();
  while (!state->Started() && state->cancel_reason.empty() && absl::Now() < deadline) {
    state->changed.WaitWithDeadline(&state->mu, deadline);
  }
  if (!state->cancel_reason.empty()) {
    response.set_decision(v1::HoldPartResponse::CANCEL);
    response.set_reason(state->cancel_reason);
  } else if (state->Started()) {
    response.set_decision(v1::HoldPartResponse::START);
  } else {
    response.set_decision(v1::HoldPartResponse::WAIT);
  }
  return response;
}

absl::Status ClusterJobs::CheckPartNode(const Coordinated& state, const peer::PeerCaller& caller,
                                        int node_index, absl::string_view what) const {
  if (node_index < 0 || node_index >= static_cast<int>(state.nodes.size())) {
    return absl::InvalidArgumentError(absl::StrCat("node_index ", node_index, " of a job over ",
                                                   state.nodes.size(), " nodes"));
  }
  if (caller.node != state.nodes[node_index]) {
    return absl::PermissionDeniedError(absl::StrCat(
        "node ", caller.node, " may not ", what, " the part of node ", node_index, " (",
        state.nodes[node_index], ") of ", state.job_id, ": only that node may"));
  }
  return absl::OkStatus();
}

absl::Status ClusterJobs::CheckJobNode(const Coordinated& state,
                                       const peer::PeerCaller& caller) const {
  if (std::find(state.nodes.begin(), state.nodes.end(), caller.node) == state.nodes.end()) {
    return absl::PermissionDeniedError(absl::StrCat("node ", caller.node, " is not a node of ",
                                                    state.job_id, ": its store is its nodes' only"));
  }
  return absl::OkStatus();
}

absl::Status ClusterJobs::ReportPart(const peer::PeerCaller& caller,
                                     const v1::ReportPartRequest& request) {
  ASSIGN_OR_RETURN(std::shared_ptr<Coordinated> state, Coordinating(request.global_id()));
  RETURN_IF_ERROR(CheckPartNode(*state, caller, request.node_index(), "report"));
  absl::MutexLock lock(&state->mu);
  auto part = state->part_ids.find(request.node_index());
  if (part == state->part_ids.end() || part->second != request.part_id()) {
    return absl::OkStatus();  // a part of a reservation given up: nothing waits for it
  }
  state->reports[request.node_index()] = request;
  state->changed.SignalAll();
  return absl::OkStatus();
}

absl::Status ClusterJobs::StoreSet(const peer::PeerCaller& caller,
                                   const v1::StoreSetRequest& request) {
  ASSIGN_OR_RETURN(std::shared_ptr<Coordinated> state, Coordinating(request.global_id()));
  RETURN_IF_ERROR(CheckJobNode(*state, caller));
  return state->store.Set(request.key(), request.value());
}

absl::StatusOr<std::string> ClusterJobs::StoreGet(const peer::PeerCaller& caller,
                                                  const v1::StoreGetRequest& request) {
  ASSIGN_OR_RETURN(std::shared_ptr<Coordinated> state, Coordinating(request.global_id()));
  RETURN_IF_ERROR(CheckJobNode(*state, caller));
  const absl::Duration timeout =
      std::clamp(absl::Milliseconds(request.timeout_ms()), absl::ZeroDuration(),
                 options_.collective_timeout);
  return state->store.Get(request.key(), timeout);
}

}  // namespace overlap::cluster
