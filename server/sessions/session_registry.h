// The sessions of this daemon as the socket builds them (session_socket.h)
// and users list and close them (the Node service): keyed by (owner, name)
// while open, with the per-owner caps (sessions, mapped bytes), the devices
// each holds against the job queue, and each rank's joining, registering
// and starting. A session is joining until every rank has started; the last
// to start hands it to the lanes (SessionLanes::Add) and it is ready; it
// leaves the registry when the lanes say it ended (OnEnded), or, still
// joining, when its last rank leaves. The last few ended sessions stay
// listed.
//
// Engine calls (ImportBuffer, Free) and the lanes are never called under the
// registry's lock.
//
// Thread safety: every method from any thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/engine/engine.h"
#include "server/jobs/job_queue.h"
#include "server/sessions/session.h"
#include "server/sessions/session_lanes.h"
#include "server/sessions/session_plan.h"
#include "server/sessions/session_row.h"

namespace overlap::sessions {

struct SessionLimits {
  int max_per_owner = 8;
  int64_t max_mapped_bytes_per_owner = int64_t{64} << 30;
};

// Who a rank is: its connection's peer (SO_PEERCRED), named as jobs are.
struct RankPeer {
  std::string owner;       // "uid:1000"
  std::string owner_name;  // "alice"
  pid_t pid = 0;
};

// What a rank asks for when it opens (session.proto's OpenSessionRequest,
// its defaults filled in).
struct OpenRequest {
  std::string name;
  std::string graph_text;
  int rank = 0;
  Priority priority = Priority::kCritical;
  double deferred_bound_ms = 20;
  int64_t chunk_bytes = 256 * 1024;
  absl::Duration step_timeout = absl::Seconds(30);
};

class SessionRegistry : public std::enable_shared_from_this<SessionRegistry> {
 public:
  struct Session;
  // A rank's place in its session, held by its connection.
  struct Ticket {
    std::shared_ptr<Session> session;
    int rank = -1;
  };
  // What the opening rank is told (OpenSessionReply).
  struct Joined {
    Ticket ticket;
    std::string session_id;
    int device = 0;
    const SessionPlan* plan = nullptr;  // lives as long as the session
  };

  // `engine`, `lanes` and `queue` (may be null) must outlive the registry's
  // use; the registry registers itself with lanes.OnEnded.
  static std::shared_ptr<SessionRegistry> Create(engine::Engine& engine, SessionLanes& lanes,
                                                 jobs::JobQueue* queue, SessionLimits limits);

  // Joins `request.rank` of the caller's session `request.name`, creating it
  // from `plan` (the graph's, PlanSession) when the caller has none open.
  // FAILED_PRECONDITION for a graph other than the session's or a session
  // past joining; INVALID_ARGUMENT for a rank out of range; ALREADY_EXISTS
  // for a rank taken; RESOURCE_EXHAUSTED past max_per_owner.
  absl::StatusOr<Joined> Join(const RankPeer& peer, const OpenRequest& request, SessionPlan plan,
                              int socket);
  // Gives the joined rank its channel (rank_channel.h).
  void Attach(const Ticket& ticket, std::unique_ptr<SessionRank> channel);

  // Imports the rank's tensor (op id, "" for SIGNALS) from `fd`.
  // INVALID_ARGUMENT for an unknown op or tensor, a size below the need, or
  // an fd that is not shared memory; RESOURCE_EXHAUSTED past the owner's
  // mapped bytes; FAILED_PRECONDITION once the session started.
  absl::Status Register(const Ticket& ticket, const std::string& op, TensorKind kind, int fd,
                        int64_t offset, int64_t bytes);

  // The rank is ready: waits up to `join_timeout` for every rank to be, then
  // (the last one) for jobs running on the session's devices, and hands the
  // session to the lanes. FAILED_PRECONDITION listing what the rank has not
  // registered; DEADLINE_EXCEEDED naming the ranks that did not start;
  // UNAVAILABLE naming a job still on the devices; the session's failure.
  absl::Status Start(const Ticket& ticket, absl::Duration join_timeout);

  // The rank's connection closed (or failed). Before the session started its
  // buffers and ring are released (and the session, with its last rank);
  // after, the lanes end it: UNAVAILABLE "rank R (pid P) closed its connection",
  // or `why` when given. `closed_on_purpose` (its client sent a close
  // request): CANCELLED "rank R (pid P) closed the session" ("closed") when
  // every command posted has completed, else UNAVAILABLE naming the command.
  void Leave(const Ticket& ticket, const std::string& why = "", bool closed_on_purpose = false);

  // The session's failure (OK while it has none).
  absl::Status FailureOf(const Ticket& ticket) const;

  // Ends session `id` (CANCELLED) for `owner`: NOT_FOUND for an unknown id,
  // PERMISSION_DENIED for another owner's unless `admin`.
  absl::Status Close(const std::string& id, const std::string& owner, bool admin,
                     const std::string& who);

  // Every session open and the last ended ones, oldest first; `owner` ""= all.
  std::vector<SessionRow> List(const std::string& owner) const;
  // Bytes of tensors mapped for sessions now, every owner's.
  int64_t MappedBytes() const;
  // Ends every session still joining (their connections are shut down).
  void Shutdown();

 private:
  SessionRegistry(engine::Engine& engine, SessionLanes& lanes, jobs::JobQueue* queue,
                  SessionLimits limits)
      : engine_(engine), lanes_(lanes), queue_(queue), limits_(limits) {}
  void Ended(const std::string& id, const absl::Status& ended);
  // Marks a joining session failed and wakes its ranks.
  void FailLocked(Session& session, absl::Status why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes the session from the open ones (the name, quota and devices free).
  void RetireLocked(Session& session, const std::string& state) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  SessionRow RowLocked(const Session& session) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Hands the session to the lanes once no job runs on its devices.
  absl::Status HandOff(const std::shared_ptr<Session>& session, absl::Time deadline);

  engine::Engine& engine_;
  SessionLanes& lanes_;
  jobs::JobQueue* const queue_;
  const SessionLimits limits_;
  absl::Mutex import_mu_;  // one import or free at a time from the socket's threads

  mutable absl::Mutex mu_;
  absl::CondVar changed_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<std::string, std::shared_ptr<Session>> open_ ABSL_GUARDED_BY(mu_);  // by id
  std::map<std::string, int64_t> mapped_by_owner_ ABSL_GUARDED_BY(mu_);
  std::deque<SessionRow> ended_ ABSL_GUARDED_BY(mu_);
};

}  // namespace overlap::sessions
