// The result of a job over nodes, from each node's part: every node ran the
// same ops in the same order and measured its own ranks.
#include <algorithm>

#include "server/cluster/coordinator.h"

namespace overlap::cluster {
namespace {

using runner::JobReport;
using runner::OpReport;

// The index of each node's slowest rank (the largest GEMM alone, summed over
// the ops): a slow GPU shows there first. -1 when the node timed no GEMM.
int SlowestLocalRank(const JobReport& part, double* gemm_ms) {
  std::vector<double> by_rank;
  for (const OpReport& op : part.ops) {
    by_rank.resize(std::max(by_rank.size(), op.gemm_alone_rank_ms.size()), 0.0);
    for (size_t r = 0; r < op.gemm_alone_rank_ms.size(); ++r)
      by_rank[r] += op.gemm_alone_rank_ms[r];
  }
  if (by_rank.empty()) return -1;
  const auto slowest = std::max_element(by_rank.begin(), by_rank.end());
  *gemm_ms = *slowest;
  return static_cast<int>(slowest - by_rank.begin());
}

// Op `i` as the slowest node ran it, verified only where every node verified it,
// its error and each group's step the worst of any node's.
OpReport MergeOp(const std::vector<JobReport>& parts, size_t i) {
  size_t slowest = 0;
  for (size_t n = 1; n < parts.size(); ++n) {
    if (i < parts[n].ops.size() &&
        parts[n].ops[i].step.median > parts[slowest].ops[i].step.median) {
      slowest = n;
    }
  }
  OpReport op = parts[slowest].ops[i];
  op.gemm_alone_rank_ms.clear();
  op.group_step_ms.clear();
  for (const JobReport& part : parts) {
    if (i >= part.ops.size()) continue;
    const OpReport& mine = part.ops[i];
    op.verified = op.verified && mine.verified;
    op.max_rel_error = std::max(op.max_rel_error, mine.max_rel_error);
    op.gemm_alone_rank_ms.insert(op.gemm_alone_rank_ms.end(), mine.gemm_alone_rank_ms.begin(),
                                 mine.gemm_alone_rank_ms.end());
    op.group_step_ms.resize(std::max(op.group_step_ms.size(), mine.group_step_ms.size()), 0.0);
    for (size_t g = 0; g < mine.group_step_ms.size(); ++g) {
      op.group_step_ms[g] = std::max(op.group_step_ms[g], mine.group_step_ms[g]);
    }
  }
  if (!op.group_step_ms.empty()) {
    op.slowest_group =
        static_cast<int>(std::max_element(op.group_step_ms.begin(), op.group_step_ms.end()) -
                         op.group_step_ms.begin());
  }
  return op;
}

// Every op merged, the totals over them, and the bus bandwidth of those that cross nodes.
void MergeOps(const JobSpec& spec, const std::vector<JobReport>& parts, int devices_per_node,
              JobReport& merged) {
  const int world = static_cast<int>(parts.size()) * devices_per_node;
  double total_step = 0, total_exposed = 0, bus_bytes = 0, bus_ms = 0;
  for (size_t i = 0; i < parts[0].ops.size(); ++i) {
    OpReport op = MergeOp(parts, i);
    const auto spec_op = std::find_if(spec.ops.begin(), spec.ops.end(),
                                      [&](const OpSpec& o) { return o.id == op.id; });
    op.spans_nodes = spec_op != spec.ops.end() &&
                     GroupsCrossNodes(spec.mesh, spec_op->group, world, devices_per_node);
    // Between daemons the host backend's collectives run over Gloo: name what
    // moved the data, not the schedule's transport ("nccl", the collectives' kind).
    if (op.spans_nodes && parts[0].backend == "host" && op.transport == "nccl") {
      op.transport = "gloo";
    }
    if (op.spans_nodes && op.busbw_gbps > 0) {
      const double comm_ms = op.comm_alone ? op.comm_alone->median : 0;
      const double ms = comm_ms > 0 ? comm_ms : op.step.median;
      bus_bytes += op.busbw_gbps * ms;
      bus_ms += ms;
    }
    total_step += op.step.median;
    total_exposed += op.exposed_comm_ms;
    merged.ops.push_back(std::move(op));
  }
  merged.total_step_ms = total_step;
  merged.total_exposed_comm_ms = total_exposed;
  merged.inter_node_busbw_gbps = bus_ms > 0 ? bus_bytes / bus_ms : 0;
}

double LayerStepMs(const JobReport& part) { return part.layer ? part.layer->step.median : 0; }

// The layer step ran on every node at once: the slowest node's is the job's;
// what every node ran alike (its order, lanes, notes, chains) is node 0's.
// The merged result always has a layer step (empty where no node had one).
void MergeLayer(const std::vector<JobReport>& parts, JobReport& merged) {
  const JobReport& slowest = *std::max_element(
      parts.begin(), parts.end(),
      [](const JobReport& a, const JobReport& b) { return LayerStepMs(a) < LayerStepMs(b); });
  runner::LayerStepReport none;
  none.scheduler.clear();
  const runner::LayerStepReport& from = slowest.layer ? *slowest.layer : none;
  runner::LayerStepReport& layer = merged.layer ? *merged.layer : merged.layer.emplace(none);
  layer.step = from.step;
  layer.exposed_comm_ms = from.exposed_comm_ms;
  layer.activation_ms = from.activation_ms;
  layer.without_deferred = from.without_deferred.value_or(Summary{});
  layer.deferred_hidden_fraction = from.deferred_hidden_fraction;
  layer.deferrals = from.deferrals;
  // Each node dispatched for its own ranks: a deferral's worst delay is the
  // worst any node saw, and every node's devices have their lane figures.
  layer.lane_figures.clear();
  for (const JobReport& part : parts) {
    if (!part.layer) continue;
    for (size_t d = 0; d < layer.deferrals.size() && d < part.layer->deferrals.size(); ++d) {
      layer.deferrals[d].worst_delay_ms =
          std::max(layer.deferrals[d].worst_delay_ms, part.layer->deferrals[d].worst_delay_ms);
    }
    layer.lane_figures.insert(layer.lane_figures.end(), part.layer->lane_figures.begin(),
                              part.layer->lane_figures.end());
  }
  // Each node checked its own ranks of every chain: the job's error is the largest.
  for (size_t n = 1; n < parts.size(); ++n) {
    if (!parts[n].layer) continue;
    for (size_t c = 0; c < layer.chains.size() && c < parts[n].layer->chains.size(); ++c) {
      layer.chains[c].max_rel_error =
          std::max(layer.chains[c].max_rel_error, parts[n].layer->chains[c].max_rel_error);
    }
  }
}

// A line per node, and the job's slowest rank: the slowest of the nodes' own.
void AddNodeLines(const std::vector<std::string>& nodes, const std::vector<std::string>& part_ids,
                  const std::vector<JobReport>& parts, int devices_per_node, JobReport& merged) {
  double worst_gemm = -1;
  for (int n = 0; n < static_cast<int>(parts.size()); ++n) {
    runner::NodeReport line;
    line.node = nodes[n];
    line.node_index = n;
    line.part_id = part_ids[n];
    line.first_rank = n * devices_per_node;
    line.ranks = devices_per_node;
    line.total_step_ms = parts[n].total_step_ms;
    line.layer_step_ms = LayerStepMs(parts[n]);
    line.backend = parts[n].backend;
    line.gpu = parts[n].gpu;
    double gemm_ms = 0;
    const int local = SlowestLocalRank(parts[n], &gemm_ms);
    line.slowest_rank = local < 0 ? -1 : n * devices_per_node + local;
    if (local >= 0 && gemm_ms > worst_gemm) {
      worst_gemm = gemm_ms;
      merged.slowest_rank = line.slowest_rank;
      merged.slowest_node = nodes[n];
    }
    merged.nodes.push_back(std::move(line));
  }
}

}  // namespace

// What every node ran alike (the dispatcher's notes, the fusions, the chains
// checked) comes from node 0's part.
JobReport MergeNodeResults(const JobSpec& spec, const std::vector<std::string>& nodes,
                           const std::vector<std::string>& part_ids,
                           const std::vector<JobReport>& parts, int devices_per_node) {
  JobReport merged = parts.at(0);
  merged.ops.clear();
  merged.nodes.clear();
  MergeOps(spec, parts, devices_per_node, merged);
  MergeLayer(parts, merged);
  AddNodeLines(nodes, part_ids, parts, devices_per_node, merged);
  return merged;
}

}  // namespace overlap::cluster
