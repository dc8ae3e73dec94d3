// The host of parts: this daemon's side of the jobs that coordinators
// (coordinator.h; this daemon's own among them) run over several daemons. A
// part is admitted (checked and queued like any job); when it starts it holds
// its devices and asks its coordinator (HoldPart) until it is told to start,
// to let go (a released reservation: it ends CANCELLED and reports nothing)
// or to end; it runs the decided schedules on a SpanningEngine whose groups
// across nodes meet in the coordinator's store, and reports how it ended.
// A part queued before its daemon restarted never runs alone.
//
// Thread safety: every public method may be called from any thread.
#pragma once

#include <deque>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/cluster/cluster_common.h"
#include "server/jobs/admission.h"
#include "server/jobs/job_queue.h"
#include "server/peer/peer_link.h"
#include "server/runner/run_hooks.h"

namespace overlap::cluster {

class Coordinator;

class PartHost {
 public:
  // `engine`, `admission` and `link` must outlive this, and so must the queue.
  PartHost(const ClusterOptions& options, engine::Engine& engine, const jobs::Admission& admission,
           peer::PeerLink& link);
  void SetJobQueue(jobs::JobQueue* queue);
  jobs::JobQueue* Queue() ABSL_LOCKS_EXCLUDED(mu_);  // null until set

  // AdmitPart from `caller`, which must be the job's coordinator
  // (PERMISSION_DENIED), for this node (INVALID_ARGUMENT). `graph` is the
  // part's graph when the coordinator is this daemon (null: parsed from the
  // request, or taken from the check that came before it).
  // The part's id here.
  absl::StatusOr<std::string> Admit(const peer::PeerCaller& caller,
                                    const peer::PartRequest& request, jobs::GraphPtr graph);
  // CancelPart, from the job's coordinator only; NOT_FOUND for no such part,
  // FAILED_PRECONDITION for one that had ended. Answers once the part has
  // reached a final state here, so that the coordinator's job ends after
  // every part of it; DEADLINE_EXCEEDED, naming the part, when it has not
  // within kPartEndWait.
  absl::Status Cancel(const peer::PeerCaller& caller, const peer::CancelRequest& request);

  // The job a global id (jobs::GlobalIdOf) names on this node: the
  // coordinator's job where this node coordinates it, else this node's part
  // of it (found among the parts admitted since start, then in the store, so
  // that it holds across a restart). NOT_FOUND naming the id otherwise.
  absl::StatusOr<std::string> LocalJobId(const std::string& global_id) ABSL_LOCKS_EXCLUDED(mu_);

  // The part's run, whose end (result or failure) it reports to the
  // coordinator; `local` is this daemon's, reached without the network.
  absl::StatusOr<runner::JobReport> Run(const jobs::JobRecord& job, const jobs::GraphPtr& graph,
                                        const runner::RunHooks& hooks, Coordinator& local);

 private:
  absl::StatusOr<runner::JobReport> RunStartedPart(const jobs::JobRecord& job,
                                                   const peer::GlobalJobId& id,
                                                   jobs::GraphPtr graph,
                                                   const runner::RunHooks& hooks,
                                                   Coordinator& local);
  // The part's wait for the start: OK to run, or why not.
  absl::Status AwaitStart(const jobs::JobRecord& job, const runner::RunHooks& hooks,
                          Coordinator& local);
  void Report(const jobs::JobRecord& job, const peer::GlobalJobId& id,
              const absl::StatusOr<runner::JobReport>& result, Coordinator& local);
  // The part's graph: parsed and admitted, or the one admitted for the same
  // request (coordinator, nodes, node index and spec) when it was checked at
  // submission or admitted on an earlier reservation attempt.
  absl::StatusOr<jobs::GraphPtr> PartGraph(const peer::PartRequest& request,
                                           const std::string& source_name);
  // Who may admit the part, and its owner, name and priority, checked as the
  // user socket checks a job's (PERMISSION_DENIED / INVALID_ARGUMENT).
  absl::Status CheckPartRequest(const peer::PeerCaller& caller,
                                const peer::PartRequest& request) const;

  const ClusterOptions& options_;
  engine::Engine& engine_;
  const jobs::Admission& admission_;
  peer::PeerLink& link_;

  absl::Mutex mu_;
  jobs::JobQueue* queue_ ABSL_GUARDED_BY(mu_) = nullptr;
  // Parts admitted here, by global id ("coordinator/job"): their local ids,
  // until the part ends (ForgetPartLocked).
  std::map<std::string, std::string> parts_ ABSL_GUARDED_BY(mu_);
  void ForgetPartLocked(const std::string& key, const std::string& part_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Parts the coordinator released (it retries with new ones): their end is
  // nobody's news.
  std::set<std::string> released_ ABSL_GUARDED_BY(mu_);
  // The last kRecentParts parts admitted here, by global id: their local
  // ids, kept after they end (parts_ forgets them) for LocalJobId and for a
  // cancel that comes as the part ends. Oldest first.
  static constexpr size_t kRecentParts = 1024;
  std::deque<std::pair<std::string, std::string>> recent_parts_ ABSL_GUARDED_BY(mu_);
  // The local id of the part admitted last under `key`, or "".
  std::string RecentPartLocked(const std::string& key) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The last kRecentPartGraphs graphs admitted for parts, by the digest of
  // what they were admitted from (PartGraph), oldest first: a part is checked
  // at submission and admitted later, maybe more than once, from the same
  // request, and parsed once.
  static constexpr size_t kRecentPartGraphs = 32;
  std::deque<std::pair<std::string, jobs::GraphPtr>> recent_part_graphs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace overlap::cluster
