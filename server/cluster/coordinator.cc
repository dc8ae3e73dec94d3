#include "server/cluster/coordinator.h"

#include <algorithm>
#include <initializer_list>
#include <random>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/text.h"
#include "server/cluster/gather_flight.h"

namespace overlap::cluster {
namespace {

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

// A part's outcome as the job sees it: its failure with the node named.
absl::StatusOr<runner::JobReport> OutcomeOf(const peer::PartReport& report,
                                            const std::string& node) {
  if (report.outcome.ok()) return report.outcome;
  return absl::Status(report.outcome.status().code(),
                      absl::StrCat("node ", node, ": ", report.outcome.status().message()));
}

absl::Status CancelledByRequest() { return absl::CancelledError("cancelled by request"); }
bool Cancelled(const runner::RunHooks& hooks) { return hooks.cancelled && hooks.cancelled(); }
void Progress(const runner::RunHooks& hooks, int done, int count, const std::string& node,
              const std::string& what) {
  if (hooks.on_progress) hooks.on_progress(runner::Progress{done, count, node, what, 0, 0});
}

// Whether a phase machine may move `from` -> `to`: to `reset` from any other
// phase, otherwise only along one of `moves`. Both machines below share it.
template <typename Phase>
bool MayMove(Phase from, Phase to, Phase reset,
             std::initializer_list<std::pair<Phase, Phase>> moves) {
  if (to == reset) return from != reset;
  return std::find(moves.begin(), moves.end(), std::make_pair(from, to)) != moves.end();
}

}  // namespace

const char* CoordinatorPhaseName(CoordinatorPhase phase) {
  static constexpr const char* kNames[] = {"checking", "reserving", "releasing", "holding",
                                           "running",  "reporting", "ended"};
  return kNames[static_cast<int>(phase)];
}

bool CoordinatorMayMove(CoordinatorPhase from, CoordinatorPhase to) {
  using P = CoordinatorPhase;
  // Ended: a failure or a cancel, from anywhere.
  return MayMove(from, to, P::kEnded,
                 {{P::kChecking, P::kReserving},
                  {P::kReserving, P::kHolding},
                  {P::kReserving, P::kReleasing},
                  {P::kReleasing, P::kReserving},
                  {P::kHolding, P::kRunning},
                  {P::kRunning, P::kReporting}});
}

const char* SlotPhaseName(SlotPhase phase) {
  static constexpr const char* kNames[] = {"idle", "admitting", "admitted", "held", "reported"};
  return kNames[static_cast<int>(phase)];
}

bool SlotMayMove(SlotPhase from, SlotPhase to) {
  using S = SlotPhase;
  // Idle: an admission that failed, or a release.
  return MayMove(from, to, S::kIdle,
                 {{S::kIdle, S::kAdmitting},
                  {S::kAdmitting, S::kAdmitted},
                  {S::kAdmitted, S::kHeld},
                  {S::kAdmitted, S::kReported},
                  {S::kHeld, S::kReported}});
}

// One node's part, as the coordinator knows it.
struct NodeSlot {
  SlotPhase phase = SlotPhase::kIdle;
  std::string part_id;                        // from kAdmitted on
  absl::StatusOr<runner::JobReport> outcome;  // its report, in kReported
};

// What the coordinator knows of one job while it runs. Guarded by its own
// mutex: HoldPart, ReportPart and the store are called from gRPC threads
// while the coordination waits on `changed`.
struct Coordinator::Coordinated {
  Coordinated(std::string job_id_in, jobs::GraphPtr graph_in)
      : job_id(std::move(job_id_in)),
        graph(std::move(graph_in)),
        nodes(graph->spec.nodes),
        slots(nodes.size()) {}

  const std::string job_id;
  const jobs::GraphPtr graph;  // the job's, as admitted at submission
  const std::vector<std::string>& nodes;
  gloo_group::InMemoryRendezvousStore store;

  absl::Mutex mu;
  absl::CondVar changed;
  CoordinatorPhase phase ABSL_GUARDED_BY(mu) = CoordinatorPhase::kChecking;
  std::string ending ABSL_GUARDED_BY(mu);           // why the parts end, while releasing or ended
  std::vector<NodeSlot> slots ABSL_GUARDED_BY(mu);  // one per node, by node index

  // Every transition of the job, and what it changes, in one place: a held
  // part starts once the job is running and ends once it releases or ends
  // (told `reason`); leaving a release frees every slot, so that the next
  // attempt starts clean. A move the table does not allow is a bug, refused
  // (INTERNAL) and logged.
  absl::Status MoveTo(CoordinatorPhase next, std::string reason = "") ABSL_LOCKS_EXCLUDED(mu) {
    CoordinatorPhase from;
    bool allowed;
    {
      absl::MutexLock lock(&mu);
      from = phase;
      allowed = CoordinatorMayMove(from, next);
      if (allowed) {
        if (from == CoordinatorPhase::kReleasing) {
          for (NodeSlot& slot : slots) slot = NodeSlot();
        }
        phase = next;
        ending = std::move(reason);
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
  // Every move of a slot, by its table (SlotMayMove); back to idle forgets all.
  absl::Status MoveSlotLocked(int n, SlotPhase next) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    NodeSlot& slot = slots[n];
    if (!SlotMayMove(slot.phase, next)) {
      return absl::InternalError(absl::StrCat("coordinator: node ", n, " cannot go from ",
                                              SlotPhaseName(slot.phase), " to ",
                                              SlotPhaseName(next)));
    }
    if (next == SlotPhase::kIdle) slot = NodeSlot();
    slot.phase = next;
    changed.SignalAll();
    return absl::OkStatus();
  }
  bool Started() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return phase == CoordinatorPhase::kRunning || phase == CoordinatorPhase::kReporting;
  }
  bool Ending() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return phase == CoordinatorPhase::kReleasing || phase == CoordinatorPhase::kEnded;
  }

  // OK when `caller` is node `n` of the job (PERMISSION_DENIED saying it may
  // not `what` that part).
  absl::Status CheckPartNode(const peer::PeerCaller& caller, int n, absl::string_view what) const {
    if (n < 0 || n >= static_cast<int>(nodes.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("node_index ", n, " of a job over ", nodes.size(), " nodes"));
    }
    if (caller.node != nodes[n]) {
      return absl::PermissionDeniedError(absl::StrCat("node ", caller.node, " may not ", what,
                                                      " the part of node ", n, " (", nodes[n],
                                                      ") of ", job_id, ": only that node may"));
    }
    return absl::OkStatus();
  }
  // OK when `caller` is one of the job's nodes.
  absl::Status CheckJobNode(const peer::PeerCaller& caller) const {
    if (std::find(nodes.begin(), nodes.end(), caller.node) == nodes.end()) {
      return absl::PermissionDeniedError(absl::StrCat("node ", caller.node, " is not a node of ",
                                                      job_id, ": its store is its nodes' only"));
    }
    return absl::OkStatus();
  }
};

Coordinator::Coordinator(const ClusterOptions& options, const engine::Engine& engine,
                         const jobs::Admission& admission, peer::PeerLink& link,
                         PartHost& own_parts)
    : options_(options),
      engine_(engine),
      admission_(admission),
      link_(link),
      own_parts_(own_parts) {}

peer::PartRequest Coordinator::PartRequest(const std::string& job_id, const std::string& spec,
                                           const jobs::AdmittedGraph& graph, int node_index) const {
  peer::PartRequest request;
  request.global_id = peer::GlobalJobId{options_.node_name, job_id};
  request.spec = spec;
  request.node_index = node_index;
  request.nodes = graph.spec.nodes;
  request.schedules = graph.schedules;
  request.notes = graph.schedule_notes;
  return request;
}

absl::StatusOr<std::shared_ptr<Coordinator::Coordinated>> Coordinator::Coordinating(
    const peer::GlobalJobId& id) {
  if (id.coordinator == options_.node_name) {
    absl::MutexLock lock(&mu_);
    auto it = coordinated_.find(id.job_id);
    if (it != coordinated_.end()) return it->second;
  }
  return absl::NotFoundError(absl::StrCat("no job ", QuotedExcerpt(id.job_id, 80),
                                          " is being coordinated here (it ended, or this "
                                          "daemon restarted)"));
}

// --- Admission ---------------------------------------------------------------

absl::StatusOr<jobs::AdmittedJob> Coordinator::Admit(JobSpec spec, const std::string& spec_text,
                                                     const std::string& source_name,
                                                     const std::vector<std::string>& nodes) {
  RETURN_IF_ERROR(CheckBackend(engine_));
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
    if (node != options_.node_name && !options_.IsPeer(node)) {
      return absl::PermissionDeniedError(absl::StrCat(
          "nodes: ", node, " is not in this daemon's peers: (", absl::StrJoin(options_.peers, ", "),
          "); a job reaches only the daemons listed there"));
    }
  }
  jobs::JobQueue* queue = own_parts_.Queue();
  if (queue == nullptr) return absl::UnavailableError("overlapd is starting");
  int coordinating = 0;
  for (jobs::JobState state : {jobs::JobState::kQueued, jobs::JobState::kRunning}) {
    ASSIGN_OR_RETURN(const std::vector<jobs::JobRecord> active, queue->List(state, 0));
    for (const jobs::JobRecord& job : active) {
      coordinating += !job.nodes.empty() && job.coordinator.empty();
    }
  }
  if (coordinating >= options_.max_jobs) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "this daemon already coordinates ", coordinating,
        " jobs spanning daemons, queued or running (cluster_max_jobs = ", options_.max_jobs, ")"));
  }
  // Before anything is queued.
  RETURN_IF_ERROR(CheckNodes(spec_text, *graph));
  jobs::AdmittedJob job;
  job.job.name = !admitted.name.empty() ? admitted.name : Excerpt(source_name, 120);
  job.job.priority = admitted.priority;
  job.job.spec = spec_text;
  job.job.nodes = all;
  job.graph = std::move(graph);
  return job;
}

absl::Status Coordinator::CheckNodes(const std::string& spec_text,
                                     const jobs::AdmittedGraph& graph) {
  const std::vector<std::string>& nodes = graph.spec.nodes;
  for (int n = 0; n < static_cast<int>(nodes.size()); ++n) {
    if (nodes[n] == options_.node_name) continue;
    // Their statuses name the node already.
    RETURN_IF_ERROR(link_.Hello(nodes[n], kCallDeadline));
    peer::PartRequest check = PartRequest("", spec_text, graph, n);
    check.check_only = true;
    RETURN_IF_ERROR(link_.AdmitPart(nodes[n], check, kCallDeadline).status());
  }
  return absl::OkStatus();
}

// --- The coordination ----------------------------------------------------------

absl::StatusOr<runner::JobReport> Coordinator::Coordinate(const jobs::JobRecord& job,
                                                          const jobs::GraphPtr& graph,
                                                          const runner::RunHooks& hooks) {
  if (job.submit_time_ms < options_.started_unix_ms || graph == nullptr) {
    return absl::FailedPreconditionError(
        "queued before this daemon restarted, and its parts with it: submit it again");
  }
  auto state = std::make_shared<Coordinated>(job.id, graph);
  {
    absl::MutexLock lock(&mu_);
    coordinated_[job.id] = state;
  }
  const absl::Status outcome = RunSteps(job, *state, hooks);
  std::vector<runner::JobReport> parts;
  std::vector<std::string> part_ids;
  if (outcome.ok()) {
    absl::MutexLock lock(&state->mu);
    for (const NodeSlot& slot : state->slots) {
      parts.push_back(*slot.outcome);
      part_ids.push_back(slot.part_id);
    }
  }
  const std::string reason = outcome.ok() ? ""
                             : outcome.code() == absl::StatusCode::kCancelled
                                 ? "the job was cancelled on its coordinator"
                                 : absl::StrCat("the job failed: ", outcome.message());
  (void)state->MoveTo(CoordinatorPhase::kEnded, reason);
  // The job ends after every part of it: a cancel --wait that returns finds
  // each part in a final state on its node.
  const absl::Status parts_ended = outcome.ok() ? absl::OkStatus() : CancelParts(*state, reason);
  {
    absl::MutexLock lock(&mu_);
    coordinated_.erase(job.id);
  }
  std::string verdict;  // "; flight: ..." where the rings explain the failure
  if (!outcome.ok() && FlightExplains(outcome.code()) && options_.flight != nullptr) {
    const flight::GatheredRings rings =
        GatherFlight(options_, link_, peer::GlobalJobId{options_.node_name, job.id}, state->nodes);
    if (!rings.rings.empty() || !rings.unread.empty()) {
      verdict = absl::StrCat("; ", flight::GatheredVerdictLine(rings.rings, rings.unread));
    }
  }
  if (!parts_ended.ok()) {
    return absl::Status(outcome.code(),
                        absl::StrCat(outcome.message(), "; ", parts_ended.message(), verdict));
  }
  if (!outcome.ok()) return absl::Status(outcome.code(), absl::StrCat(outcome.message(), verdict));
  return MergeNodeResults(state->graph->spec, state->nodes, part_ids, parts,
                          static_cast<int>(state->graph->devices.size()));
}

absl::Status Coordinator::RunSteps(const jobs::JobRecord& job, Coordinated& state,
                                   const runner::RunHooks& hooks) {
  Progress(hooks, 0, 0, "", "check nodes");
  RETURN_IF_ERROR(CheckNodes(job.spec, *state.graph));
  RETURN_IF_ERROR(state.MoveTo(CoordinatorPhase::kReserving));
  for (int attempt = 1;; ++attempt) {
    bool held = true;
    for (size_t i = 0; i < state.nodes.size() && held; ++i) {
      ASSIGN_OR_RETURN(held, ReserveNext(job, state, attempt, hooks));
    }
    if (held) break;
    RETURN_IF_ERROR(Release(state, attempt, hooks));
  }
  RETURN_IF_ERROR(state.MoveTo(CoordinatorPhase::kHolding));
  // Every slot is held: start the parts all at once (HoldPart answers START).
  RETURN_IF_ERROR(state.MoveTo(CoordinatorPhase::kRunning));
  RETURN_IF_ERROR(AwaitReports(state, hooks));
  return state.MoveTo(CoordinatorPhase::kReporting);
}

absl::StatusOr<bool> Coordinator::ReserveNext(const jobs::JobRecord& job, Coordinated& state,
                                              int attempt, const runner::RunHooks& hooks) {
  const int count = static_cast<int>(state.nodes.size());
  int n = -1, reserved = 0;  // the idle slot first in global order (by address)
  {
    absl::MutexLock lock(&state.mu);
    for (int m = 0; m < count; ++m) {
      if (state.slots[m].phase != SlotPhase::kIdle) {
        ++reserved;
      } else if (n < 0 || state.nodes[m] < state.nodes[n]) {
        n = m;
      }
    }
    if (n < 0) return absl::InternalError("coordinator: no slot left to reserve");
    RETURN_IF_ERROR(state.MoveSlotLocked(n, SlotPhase::kAdmitting));
  }
  const std::string& node = state.nodes[n];
  Progress(hooks, reserved, count, node, absl::StrCat("reserve (attempt ", attempt, ")"));
  peer::PartRequest request = PartRequest(job.id, job.spec, *state.graph, n);
  request.owner = job.owner;
  request.owner_name = job.owner_name;
  request.priority = job.priority;
  request.name = job.name;
  request.owner_admin = job.owner_admin;
  // This node's own part takes the job's graph as it is, without the network.
  absl::StatusOr<std::string> admitted =
      node == options_.node_name ? own_parts_.Admit(options_.Self(), request, state.graph)
                                 : link_.AdmitPart(node, request, kCallDeadline);
  {
    absl::MutexLock lock(&state.mu);
    if (admitted.ok()) state.slots[n].part_id = *admitted;
    RETURN_IF_ERROR(
        state.MoveSlotLocked(n, admitted.ok() ? SlotPhase::kAdmitted : SlotPhase::kIdle));
  }
  if (!admitted.ok()) return WithNode(node, admitted.status());
  ASSIGN_OR_RETURN(const bool held, AwaitHold(state, n, hooks));
  if (!held) {
    Log()->info(
        "job {}: {} did not start its part within {} ms; releasing the nodes held "
        "and trying again",
        job.id, node, absl::ToInt64Milliseconds(options_.hold_timeout));
  }
  return held;
}

absl::StatusOr<bool> Coordinator::AwaitHold(Coordinated& state, int n,
                                            const runner::RunHooks& hooks) {
  absl::MutexLock lock(&state.mu);
  const NodeSlot& slot = state.slots[n];
  const absl::Time deadline = absl::Now() + options_.hold_timeout;
  while (slot.phase == SlotPhase::kAdmitted) {
    if (Cancelled(hooks)) return CancelledByRequest();
    if (absl::Now() >= deadline) return false;
    state.changed.WaitWithTimeout(&state.mu, absl::Milliseconds(100));
  }
  // A part that reported before it held its node could not start there.
  if (slot.phase == SlotPhase::kReported) RETURN_IF_ERROR(slot.outcome.status());
  return true;
}

absl::Status Coordinator::Release(Coordinated& state, int attempt, const runner::RunHooks& hooks) {
  const std::string reason = "the coordinator released the reservation to try again";
  RETURN_IF_ERROR(state.MoveTo(CoordinatorPhase::kReleasing, reason));
  // Released parts end at once (HoldPart answers RELEASE); one that did not
  // confirm is no reason to give the job up: the next attempt says if its node is gone.
  if (absl::Status released = CancelParts(state, reason); !released.ok()) {
    Log()->info("job {}: {}", state.job_id, std::string(released.message()));
  }
  RETURN_IF_ERROR(state.MoveTo(CoordinatorPhase::kReserving));
  // Apart in time, so that two coordinators that collided do not collide again.
  std::mt19937 random(std::random_device{}());
  const double backoff_ms =
      std::uniform_real_distribution<double>(0.25, 1.0)(random) *
      std::min(absl::ToDoubleMilliseconds(options_.hold_timeout), 500.0 * attempt);
  const absl::Time until = absl::Now() + absl::Milliseconds(backoff_ms);
  while (absl::Now() < until) {
    if (Cancelled(hooks)) return CancelledByRequest();
    absl::SleepFor(absl::Milliseconds(50));
  }
  return absl::OkStatus();
}

absl::Status Coordinator::AwaitReports(Coordinated& state, const runner::RunHooks& hooks) {
  const int count = static_cast<int>(state.nodes.size());
  std::map<int, int> missed;
  absl::Time next_probe = absl::Now() + kProbeEvery;
  Progress(hooks, 0, count, "", "run");
  while (true) {
    absl::Status failed;
    std::vector<int> silent;  // the other nodes that have not reported
    {
      absl::MutexLock lock(&state.mu);
      state.changed.WaitWithTimeout(&state.mu, absl::Milliseconds(100));
      for (int n = 0; n < count; ++n) {
        const NodeSlot& slot = state.slots[n];
        if (slot.phase != SlotPhase::kReported) {
          if (state.nodes[n] != options_.node_name) silent.push_back(n);
        } else if (failed.ok()) {
          failed = slot.outcome.status();
        }
      }
      const bool all_in = std::all_of(state.slots.begin(), state.slots.end(), [](const auto& s) {
        return s.phase == SlotPhase::kReported;
      });
      if (failed.ok() && all_in) return absl::OkStatus();
    }
    if (failed.ok() && Cancelled(hooks)) return CancelledByRequest();
    if (failed.ok() && absl::Now() < next_probe) continue;
    next_probe = absl::Now() + kProbeEvery;
    // A part that lost a peer fails first and names itself: say which node
    // went away, where one did.
    for (int n : silent) {
      const absl::Status hello = link_.Hello(state.nodes[n], kProbeEvery);
      if (hello.ok()) {
        missed[n] = 0;
      } else if (!failed.ok() || ++missed[n] >= kMissedProbes) {
        return absl::AbortedError(absl::StrCat("node ", state.nodes[n], " stopped answering (",
                                               hello.message(), ")", failed.ok() ? "" : "; ",
                                               failed.message()));
      }
    }
    if (!failed.ok()) return failed;
  }
}

absl::Status Coordinator::CancelParts(Coordinated& state, const std::string& reason) {
  std::vector<std::pair<int, std::string>> parts;  // node index, part id
  {
    absl::MutexLock lock(&state.mu);
    for (int n = 0; n < static_cast<int>(state.slots.size()); ++n) {
      if (!state.slots[n].part_id.empty()) parts.emplace_back(n, state.slots[n].part_id);
    }
  }
  // The others before this node's own: a part that loses its peers after it
  // was told to stop ends CANCELLED, not failed. Each call waits for its
  // part's end, so they go out together, one thread each: a part told late
  // would lose the peers that stopped first and fail.
  std::stable_partition(parts.begin(), parts.end(), [&](const auto& part) {
    return state.nodes[part.first] != options_.node_name;
  });
  const peer::CancelRequest request{peer::GlobalJobId{options_.node_name, state.job_id}, reason};
  std::vector<absl::Status> answers(parts.size());
  std::vector<std::thread> calls;
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string& node = state.nodes[parts[i].first];
    if (node == options_.node_name) {
      // Told last, on this thread; its answer is the local queue's.
      answers[i] = own_parts_.Cancel(options_.Self(), request);
    } else {
      calls.emplace_back([this, &node, &request, &answer = answers[i]] {
        answer = link_.CancelPart(node, request, kPartEndWait + kCallDeadline);
      });
    }
  }
  for (std::thread& call : calls) call.join();
  std::vector<std::string> unconfirmed;
  for (size_t i = 0; i < parts.size(); ++i) {
    const absl::Status& cancelled = answers[i];
    // A part that already ended answers FAILED_PRECONDITION, or NOT_FOUND once
    // it was forgotten there: it is over.
    if (cancelled.ok() || cancelled.code() == absl::StatusCode::kFailedPrecondition ||
        cancelled.code() == absl::StatusCode::kNotFound) {
      continue;
    }
    const std::string& node = state.nodes[parts[i].first];
    Log()->warn("job {}: cancelling part {} on {}: {}", state.job_id, parts[i].second, node,
                cancelled.ToString());
    unconfirmed.push_back(
        absl::StrCat(WithNode(node, cancelled).message(), " (", parts[i].second, ")"));
  }
  if (unconfirmed.empty()) return absl::OkStatus();
  return absl::DeadlineExceededError(
      absl::StrCat("not confirmed ended: ", absl::StrJoin(unconfirmed, "; ")));
}

// --- The peer listener's calls ------------------------------------------------

absl::StatusOr<peer::HoldAnswer> Coordinator::HoldPart(const peer::PeerCaller& caller,
                                                       const peer::HoldRequest& request) {
  using peer::HoldDecision;
  ASSIGN_OR_RETURN(std::shared_ptr<Coordinated> state, Coordinating(request.global_id));
  const int n = request.node_index;
  RETURN_IF_ERROR(state->CheckPartNode(caller, n, "hold"));
  const absl::Time deadline =
      absl::Now() + std::clamp(request.wait, absl::ZeroDuration(), absl::Seconds(5));
  absl::MutexLock lock(&state->mu);
  const NodeSlot& slot = state->slots[n];
  // A part that started at once may ask before AdmitPart returned its id to
  // the coordinator: it waits for the id rather than being told to go.
  while (slot.phase == SlotPhase::kAdmitting && absl::Now() < deadline) {
    state->changed.WaitWithDeadline(&state->mu, deadline);
  }
  if (slot.phase == SlotPhase::kAdmitting) return peer::HoldAnswer{HoldDecision::kWait, ""};
  if (slot.phase == SlotPhase::kIdle || slot.part_id != request.part_id) {
    return peer::HoldAnswer{HoldDecision::kRelease,
                            "the coordinator released this reservation and tries again"};
  }
  if (slot.phase == SlotPhase::kAdmitted) {
    RETURN_IF_ERROR(state->MoveSlotLocked(n, SlotPhase::kHeld));
  }
  while (!state->Started() && !state->Ending() && absl::Now() < deadline) {
    state->changed.WaitWithDeadline(&state->mu, deadline);
  }
  if (state->Ending()) return peer::HoldAnswer{HoldDecision::kCancel, state->ending};
  return peer::HoldAnswer{state->Started() ? HoldDecision::kStart : HoldDecision::kWait, ""};
}

absl::Status Coordinator::ReportPart(const peer::PeerCaller& caller,
                                     const peer::PartReport& report) {
  ASSIGN_OR_RETURN(std::shared_ptr<Coordinated> state, Coordinating(report.global_id));
  const int n = report.node_index;
  RETURN_IF_ERROR(state->CheckPartNode(caller, n, "report"));
  absl::MutexLock lock(&state->mu);
  NodeSlot& slot = state->slots[n];
  // A part of a reservation given up (or one heard from already): nothing waits for it.
  if ((slot.phase != SlotPhase::kAdmitted && slot.phase != SlotPhase::kHeld) ||
      slot.part_id != report.part_id) {
    return absl::OkStatus();
  }
  slot.outcome = OutcomeOf(report, state->nodes[n]);
  return state->MoveSlotLocked(n, SlotPhase::kReported);
}

absl::Status Coordinator::StoreSet(const peer::PeerCaller& caller, const peer::StoreCall& call) {
  ASSIGN_OR_RETURN(std::shared_ptr<Coordinated> state, Coordinating(call.global_id));
  RETURN_IF_ERROR(state->CheckJobNode(caller));
  return state->store.Set(call.key, call.value);
}

absl::StatusOr<std::string> Coordinator::StoreGet(const peer::PeerCaller& caller,
                                                  const peer::StoreCall& call) {
  ASSIGN_OR_RETURN(std::shared_ptr<Coordinated> state, Coordinating(call.global_id));
  RETURN_IF_ERROR(state->CheckJobNode(caller));
  const absl::Duration timeout =
      std::clamp(call.timeout, absl::ZeroDuration(), options_.collective_timeout);
  return state->store.Get(call.key, timeout);
}

std::shared_ptr<gloo_group::RendezvousStore> Coordinator::StoreOf(const peer::GlobalJobId& id) {
  absl::StatusOr<std::shared_ptr<Coordinated>> state = Coordinating(id);
  if (!state.ok()) return nullptr;
  // Shares the job's ownership: the store lives while the part holds it.
  return std::shared_ptr<gloo_group::RendezvousStore>(*state, &(*state)->store);
}

}  // namespace overlap::cluster
