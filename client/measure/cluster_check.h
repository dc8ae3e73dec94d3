// `overlapctl check --nodes`: each node's GEMM check, then a job spanning
// every pair of nodes (a verified dp all-reduce), naming a slow node or link.
#pragma once

#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "client/core/daemon_client.h"
#include "client/measure/check.h"
#include "client/views/cluster_view.h"
#include "nlohmann/json.hpp"

namespace overlap::client {

struct NodeCheck {
  std::string address;  // the user address given
  std::string peer;     // its node_name, what a job spanning daemons names it by
  std::vector<GpuCheck> gpus;
  std::vector<std::string> problems;  // the daemon's own (not healthy when the check began)
};
struct NodePairCheck {
  size_t a = 0, b = 0;      // into ClusterCheckResult::nodes; a coordinated the job
  std::string not_checked;  // why no job ran over the pair; "" when one did
  std::string failed;       // the job's line when it did not succeed
  std::string job;
  double ms = 0;  // the all-reduce's median
  double busbw_gbps = 0;
  bool verified = false;  // whether the daemon checked the all-reduce against float64
  double max_rel_error = 0, tolerance = 0;
  bool ran() const { return not_checked.empty() && failed.empty(); }
};
struct ClusterCheckResult {
  std::vector<NodeCheck> nodes;
  std::vector<NodePairCheck> pairs;
  int pair_devices = 0;        // the tp of each pair's mesh: GPUs per node in its job
  bool timings_judged = true;  // false on the host backend
};
// What the check calls slow or unhealthy; the slow lists stay empty when
// timings are not judged.
struct ClusterVerdict {
  std::vector<size_t> slow_nodes;                         // by their GPUs' median GEMM
  std::vector<std::pair<size_t, size_t>> slow_gpus;       // (node, gpu), on nodes not slow
  double link_reference_gbps = 0;                         // 0 without a pair that ran
  std::vector<size_t> slow_link_nodes;                    // every pair with it is slow
  std::vector<size_t> slow_pairs;                         // slow, with neither end such a node
  std::vector<size_t> failed_pairs;                       // whose job did not succeed
  std::vector<std::pair<size_t, size_t>> unhealthy_gpus;  // (node, gpu)
  std::vector<size_t> unhealthy_nodes;                    // the daemon's own problems
  bool Clean() const;                                     // nothing slow, failed or unhealthy
};
// A node's median GEMM time over its GPUs (0 without any).
double MedianGemmMs(const NodeCheck& node);
ClusterVerdict JudgeCluster(const ClusterCheckResult& result);

// The pair's job: `devices` on each node as a tp x dp 2 mesh, one all-reduce
// of --link-mib MiB per rank over the dp groups, verified.
std::string PairCheckSpec(const std::vector<int>& devices, const CheckOptions& o);

std::string FormatClusterCheck(const ClusterCheckResult& result, const CheckOptions& o);
nlohmann::json ClusterCheckJson(const ClusterCheckResult& result, const CheckOptions& o);

// Runs it, progress on `err`. Exit status: a node that does not answer, or a
// call refused, ends it with that call's status (naming the node); a GEMM job
// that fails ends it with kExitJobFailed; a pair whose job fails is a finding.
// kExitJobFailed when the verdict is not clean, else kExitOk.
int RunClusterCheck(std::vector<NodeClient>& nodes, const CheckOptions& options, bool json,
                    std::ostream& out, std::ostream& err);

}  // namespace overlap::client
