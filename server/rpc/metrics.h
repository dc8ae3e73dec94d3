// Prometheus metrics of overlapd (config metrics_listen, off by default), for the
// dashboards SREs already keep next to dcgm-exporter's: health, jobs by state,
// per-GPU memory, busy time and telemetry, and per GPU the last op a job
// finished there (its step, exposed communication, hidden share and the GEMM
// alone of that GPU's rank). Each family is one definition in a table
// (metrics.cc). Built on scrape from the node's state (node/node_state.h, what
// GetNodeInfo and GetStats answer) and the job list, so the figures always
// agree with overlapctl's.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "overlap/v1/overlap.pb.h"
#include "prometheus/metric_family.h"
#include "server/jobs/job_queue.h"
#include "server/node/node_state.h"
#include "server/rpc/http_endpoint.h"
#include "server/sessions/session_lanes.h"
#include "server/sessions/session_registry.h"

namespace overlap::rpc {

// Jobs the last-op metrics look through (newest first).
inline constexpr int kMetricsRecentJobs = 16;

struct MetricsOptions {
  // How long the last_op and last_layer series stay after their job ended
  // (config metrics_last_op_ttl_s).
  double last_op_ttl_s = 900;
  // The node sampler's latest sample (RpcServer::LatestNodeSample): where
  // set, the device families are read from it, the figures `top` streams.
  // Null: the devices are read at each scrape.
  std::function<std::shared_ptr<const v1::NodeSample>()> latest_sample;
};

// Where the session families (session_metrics.h) come from; both null where
// the daemon runs no sessions (the families are then empty).
struct MetricsSessions {
  const sessions::SessionRegistry* registry = nullptr;
  const sessions::SessionLanes* lanes = nullptr;
};

// The metric families for one scrape at `now_ms` (unix). `recent` is newest
// first; for each device the newest job on it with a finished op gives that
// device's last op.
std::vector<prometheus::MetricFamily> BuildMetrics(const v1::GetNodeInfoResponse& node,
                                                   const v1::GetStatsResponse& stats,
                                                   const std::vector<v1::Job>& recent,
                                                   int64_t now_ms, const MetricsOptions& options);

class MetricsExporter {
 public:
  // Serves /metrics and /healthz on `address` (HOST:PORT; port 0 picks one).
  // The references must outlive the exporter. FAILED_PRECONDITION when it
  // cannot listen there.
  static absl::StatusOr<std::unique_ptr<MetricsExporter>> Start(const std::string& address,
                                                                const node::NodeState& node,
                                                                jobs::JobQueue& queue,
                                                                const MetricsOptions& options,
                                                                MetricsSessions sessions = {});
  ~MetricsExporter();

  int port() const;

 private:
  MetricsExporter() = default;
  class Collector;
  std::unique_ptr<Collector> collector_;
  std::unique_ptr<HttpEndpoint> endpoint_;
};

}  // namespace overlap::rpc
