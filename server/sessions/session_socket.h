// The session socket: the unix socket training processes' ranks open
// sessions on (proto/overlap/v1/session.proto, docs/SESSIONS.md). One
// connection is one rank: its owner is the uid the kernel reports for it
// (SO_PEERCRED, owner "uid:N" as for jobs), its first frame opens or joins a
// session, then it registers its tensors (shared memory fds beside the
// frames), starts, and from then on the connection only says the rank is
// alive: its end ends the session (SessionRegistry::Leave).
//
// One thread accepts; each connection has a thread of its own, at most
// max_connections_per_uid per uid at once (more are closed at accept).
// The socket is made 0600 and then given mode 0660 (to socket_gid when >= 0),
// as the API socket is.
//
// Thread safety: Stop and the destructor from one thread; registry() from any.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/engine/engine.h"
#include "server/jobs/admission.h"
#include "server/jobs/job_queue.h"
#include "server/sessions/session_lanes.h"
#include "server/sessions/session_registry.h"

namespace overlap::sessions {

struct SessionSocketOptions {
  std::string path;      // the socket file (its directory is made)
  int socket_gid = -1;   // config socket_group; -1 = the daemon's own group
  SessionLimits limits;  // session_max_per_owner, session_max_mapped_bytes
  absl::Duration join_timeout = absl::Seconds(60);  // a request may ask for less
  absl::Duration step_timeout = absl::Seconds(30);
  double deferred_bound_ms = 20;
  // The largest frame: an open request carries a graph, max_spec_bytes of it.
  int64_t max_frame_bytes = (1 << 20) + (64 << 10);
  // How long a new connection has to send its first frame.
  absl::Duration open_timeout = absl::Seconds(10);
  // Connections of one uid at once; 0 = session_max_per_owner x devices + 4.
  int max_connections_per_uid = 0;
};

class SessionSocket {
 public:
  // Listening when this returns. FAILED_PRECONDITION when the socket cannot be
  // bound (another daemon listens there), INVALID_ARGUMENT for a group it
  // cannot give the socket to, FAILED_PRECONDITION for an engine without
  // shared memory. Every reference must outlive the socket; `queue` may be null.
  static absl::StatusOr<std::unique_ptr<SessionSocket>> Start(SessionSocketOptions options,
                                                              engine::Engine& engine,
                                                              const jobs::Admission& admission,
                                                              SessionLanes& lanes,
                                                              jobs::JobQueue* queue);
  ~SessionSocket();  // Stop()
  SessionSocket(const SessionSocket&) = delete;
  SessionSocket& operator=(const SessionSocket&) = delete;

  // No more connections; every connection ends (joining sessions fail
  // UNAVAILABLE; running ones end as their ranks' connections do) and the
  // socket file is removed. Idempotent.
  void Stop();

  const std::string& path() const { return options_.path; }
  SessionRegistry& registry() { return *registry_; }

 private:
  struct Connection;
  SessionSocket(SessionSocketOptions options, engine::Engine& engine,
                const jobs::Admission& admission, int listen_fd, int stop_fd);
  void Accept();
  void Serve(Connection* connection);
  // The steps of Serve. Each answers the rank itself; false or nullopt once
  // the rank was told why it cannot go on (and has left its session).
  // The open request: the rank joins its session, gets its channel and the
  // session's join timeout.
  std::optional<SessionRegistry::Ticket> Join(const Connection& connection,
                                              absl::Duration* join_timeout);
  // The rank's tensor registrations, up to its start request.
  bool RegisterUntilStarted(int socket, const SessionRegistry::Ticket& ticket,
                            absl::Duration join_timeout);
  // Reaps the threads of connections that ended.
  void ReapLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const SessionSocketOptions options_;
  engine::Engine& engine_;
  const jobs::Admission& admission_;
  std::shared_ptr<SessionRegistry> registry_;
  const int listen_fd_;
  const int stop_fd_;  // an eventfd: written once to stop everything
  std::thread accept_thread_;
  std::atomic<bool> stopping_{false};
  bool stopped_ = false;

  absl::Mutex mu_;
  std::list<std::unique_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);
  std::map<uid_t, int> per_uid_ ABSL_GUARDED_BY(mu_);
};

}  // namespace overlap::sessions
