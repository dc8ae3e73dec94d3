// The node as its users see it: the backend and its devices (memory, live
// telemetry, health), versions, where the daemon listens and keeps its state,
// and what it has done (jobs by state, each device's busy time, counters).
// The one source of these figures: NodeService answers GetNodeInfo and
// GetStats from it, and the Prometheus metrics are built from it, so the two
// always agree.
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "overlap/v1/overlap.pb.h"
#include "server/engine/engine.h"
#include "server/flight/flight_recorder.h"
#include "server/jobs/job_queue.h"

namespace overlap::node {

// Counters since this process started (GetStats). Thread-safe.
struct DaemonCounters {
  std::atomic<int64_t> jobs_submitted{0};
  std::atomic<int64_t> jobs_rejected{0};
  std::atomic<int64_t> requests_refused_busy{0};
  std::atomic<int64_t> requests_abandoned{0};
  absl::Time start_time = absl::Now();
};

class NodeState {
 public:
  // The references must outlive the state.
  NodeState(jobs::JobQueue& queue, const engine::Engine& engine, std::string state_dir);

  // The address as bound (a TCP port 0 is only known after the server starts).
  void set_listen_address(const std::string& address);
  // What Info says of jobs across daemons (GetNodeInfoResponse node_name ...).
  struct ClusterInfo {
    std::string node_name;
    std::vector<std::string> peers;
    std::string transport;
    std::string note;
  };
  void set_cluster(ClusterInfo cluster);
  // The daemon's flight recorder (it must outlive the state), shown by Info.
  void set_flight(const flight::FlightRecorder* flight) { flight_ = flight; }

  v1::GetNodeInfoResponse Info() const;
  // The job store's errors (it counts jobs by state).
  absl::StatusOr<v1::GetStatsResponse> Stats() const;

  DaemonCounters& counters() { return counters_; }
  const DaemonCounters& counters() const { return counters_; }

 private:
  jobs::JobQueue& queue_;
  const engine::Engine& engine_;
  const std::string state_dir_;
  DaemonCounters counters_;
  mutable absl::Mutex mu_;
  std::string listen_address_ ABSL_GUARDED_BY(mu_);
  ClusterInfo cluster_ ABSL_GUARDED_BY(mu_);
  const flight::FlightRecorder* flight_ = nullptr;  // set once, before the services start
};

}  // namespace overlap::node
