// The daemon: everything overlapd runs, started and stopped as one. Start
// brings up the engine, the job store, the scheduler, the gRPC server and,
// when configured, the metrics endpoint, and tells systemd it is ready. Wait
// returns when SIGTERM or SIGINT arrives (a second one cancels the running
// jobs) or the engine turns unhealthy. Stop drains: no new jobs start, the
// running ones get drain_timeout_s and are cancelled after that, queued ones
// stay queued for the next start.
//
// Exit codes (what Start's failure and Stop return): 0 after a drain, 1 when
// the engine became unhealthy or something that a restart may fix failed, 2
// for a configuration systemd should not retry (RestartPreventExitStatus=2).
//
// Thread safety: Start, Wait and Stop from one thread (main); signals are
// taken by a thread of the daemon's own (BlockShutdownSignals first).
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "common/config.h"
#include "server/peer/node_keys.h"

namespace overlap {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

// The gid of `group`, the value of the config key `setting` (socket_group,
// admin_group); -1 for "". INVALID_ARGUMENT naming the setting for an
// unknown group.
absl::StatusOr<int> GroupId(const std::string& setting, const std::string& group);

// Blocks SIGTERM and SIGINT in the calling thread (and so in every thread it
// starts later) and routes them to the daemon's signal thread. Call in main
// before anything starts a thread.
void BlockShutdownSignals();

class Daemon {
 public:
  // Nothing is left running when it fails: the exit code goes with the status.
  struct StartError {
    absl::Status status;
    int exit_code = kExitFailure;
  };
  static std::unique_ptr<Daemon> Start(const DaemonConfig& config, StartError* error);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Until a stop is asked for: a signal, or the engine turned unhealthy.
  void Wait();
  // Drains and shuts everything down; the exit code.
  int Stop();

 private:
  struct Parts;
  explicit Daemon(const DaemonConfig& config);
  // Each sets *exit_code to what its failure means (kExitUsage, kExitFailure).
  absl::Status StartParts(int* exit_code);
  // This node's key and the peers' (peer_listen only): node_key_, known_nodes_.
  absl::Status LoadNodeKeys();
  absl::Status StartJobs(int* exit_code);     // job store, tuning, admission, scheduler
  absl::Status StartServers(int* exit_code);  // sessions, gRPC and metrics
  // The session socket and lanes (server/sessions/), where the backend can
  // map another process's memory and session_socket is not "off".
  absl::Status StartSessions(int socket_gid, int* exit_code);
  void StartWatchers();                       // the signal and health threads

  const DaemonConfig config_;
  // The cluster key peer calls prove themselves with (peer_listen only).
  std::string cluster_key_;
  std::shared_ptr<const peer::NodeKey> node_key_;  // with peer_listen
  peer::KnownNodes known_nodes_;
  std::unique_ptr<Parts> parts_;
  std::thread signal_thread_;
  std::thread health_thread_;
};

}  // namespace overlap
