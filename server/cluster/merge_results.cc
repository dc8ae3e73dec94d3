// The result of a job over nodes, from each node's part: every node ran the
// same ops in the same order and measured its own ranks.
#include <algorithm>

#include "server/cluster/coordinator.h"

namespace overlap::cluster {
namespace {

// The index of each node's slowest rank (the largest GEMM alone, summed over
// the ops): a slow GPU shows there first. -1 when the node timed no GEMM.
int SlowestLocalRank(const v1::JobResult& part, double* gemm_ms) {
  std::vector<double> by_rank;
  for (const v1::OpResult& op : part.ops()) {
    if (by_rank.size() < static_cast<size_t>(op.gemm_alone_rank_ms_size())) {
      by_rank.resize(op.gemm_alone_rank_ms_size(), 0.0);
    }
    for (int r = 0; r < op.gemm_alone_rank_ms_size(); ++r) by_rank[r] += op.gemm_alone_rank_ms(r);
  }
  if (by_rank.empty()) return -1;
  const auto slowest = std::max_element(by_rank.begin(), by_rank.end());
  *gemm_ms = *slowest;
  return static_cast<int>(slowest - by_rank.begin());
}

// Op `i` as the slowest node ran it, verified only where every node verified it,
// its error and each group's step the worst of any node's.
v1::OpResult MergeOp(const std::vector<v1::JobResult>& parts, int i) {
  int slowest = 0;
  for (int n = 1; n < static_cast<int>(parts.size()); ++n) {
    if (i < parts[n].ops_size() &&
        parts[n].ops(i).step().median_ms() > parts[slowest].ops(i).step().median_ms()) {
      slowest = n;
    }
  }
  v1::OpResult op = parts[slowest].ops(i);
  op.clear_gemm_alone_rank_ms();
  op.clear_group_step_ms();
  std::vector<double> group_steps;
  for (const v1::JobResult& part : parts) {
    if (i >= part.ops_size()) continue;
    const v1::OpResult& mine = part.ops(i);
    op.set_verified(op.verified() && mine.verified());
    op.set_max_rel_error(std::max(op.max_rel_error(), mine.max_rel_error()));
    for (double ms : mine.gemm_alone_rank_ms()) op.add_gemm_alone_rank_ms(ms);
    group_steps.resize(std::max<size_t>(group_steps.size(), mine.group_step_ms_size()), 0.0);
    for (int g = 0; g < mine.group_step_ms_size(); ++g) {
      group_steps[g] = std::max(group_steps[g], mine.group_step_ms(g));
    }
  }
  for (double ms : group_steps) op.add_group_step_ms(ms);
  if (!group_steps.empty()) {
    op.set_slowest_group(static_cast<int>(std::max_element(group_steps.begin(), group_steps.end()) -
                                          group_steps.begin()));
  }
  return op;
}

// Every op merged, the totals over them, and the bus bandwidth of those that cross nodes.
void MergeOps(const JobSpec& spec, const std::vector<v1::JobResult>& parts, int devices_per_node,
              v1::JobResult& merged) {
  const int world = static_cast<int>(parts.size()) * devices_per_node;
  double total_step = 0, total_exposed = 0, bus_bytes = 0, bus_ms = 0;
  for (int i = 0; i < parts[0].ops_size(); ++i) {
    v1::OpResult op = MergeOp(parts, i);
    const auto spec_op = std::find_if(spec.ops.begin(), spec.ops.end(),
                                      [&](const OpSpec& o) { return o.id == op.id(); });
    op.set_spans_nodes(spec_op != spec.ops.end() &&
                       GroupsCrossNodes(spec.mesh, spec_op->group, world, devices_per_node));
    // Between daemons the host backend's collectives run over Gloo: name what
    // moved the data, not the schedule's transport ("nccl", the collectives' kind).
    if (op.spans_nodes() && parts[0].backend() == "host" && op.transport() == "nccl") {
      op.set_transport("gloo");
    }
    if (op.spans_nodes() && op.busbw_gbps() > 0) {
      const double ms =
          op.comm_alone().median_ms() > 0 ? op.comm_alone().median_ms() : op.step().median_ms();
      bus_bytes += op.busbw_gbps() * ms;
      bus_ms += ms;
    }
    total_step += op.step().median_ms();
    total_exposed += op.exposed_comm_ms();
    *merged.add_ops() = std::move(op);
  }
  merged.set_total_step_ms(total_step);
  merged.set_total_exposed_comm_ms(total_exposed);
  merged.set_inter_node_busbw_gbps(bus_ms > 0 ? bus_bytes / bus_ms : 0);
}

// The layer step ran on every node at once: the slowest node's is the job's.
void MergeLayer(const std::vector<v1::JobResult>& parts, v1::JobResult& merged) {
  const int count = static_cast<int>(parts.size());
  const v1::JobResult& layer = *std::max_element(
      parts.begin(), parts.end(), [](const v1::JobResult& a, const v1::JobResult& b) {
        return a.layer_step().median_ms() < b.layer_step().median_ms();
      });
  *merged.mutable_layer_step() = layer.layer_step();
  merged.set_layer_exposed_comm_ms(layer.layer_exposed_comm_ms());
  merged.set_layer_activation_ms(layer.layer_activation_ms());
  *merged.mutable_layer_step_without_deferred() = layer.layer_step_without_deferred();
  merged.set_layer_deferred_hidden_fraction(layer.layer_deferred_hidden_fraction());
  *merged.mutable_layer_deferrals() = layer.layer_deferrals();
  // Each node dispatched for its own ranks: a deferral's worst delay is the
  // worst any node saw, and every node's devices have their lane figures.
  merged.clear_lane_figures();
  for (int n = 0; n < count; ++n) {
    for (int d = 0; d < merged.layer_deferrals_size() && d < parts[n].layer_deferrals_size(); ++d) {
      v1::LayerDeferral* deferral = merged.mutable_layer_deferrals(d);
      deferral->set_worst_delay_ms(
          std::max(deferral->worst_delay_ms(), parts[n].layer_deferrals(d).worst_delay_ms()));
    }
    for (const v1::LaneFigures& f : parts[n].lane_figures()) *merged.add_lane_figures() = f;
  }
  // Each node checked its own ranks of every chain: the job's error is the largest.
  for (int n = 1; n < count; ++n) {
    for (int c = 0; c < merged.layer_chains_size() && c < parts[n].layer_chains_size(); ++c) {
      v1::LayerChainCheck* check = merged.mutable_layer_chains(c);
      check->set_max_rel_error(
          std::max(check->max_rel_error(), parts[n].layer_chains(c).max_rel_error()));
    }
  }
}

// A line per node, and the job's slowest rank: the slowest of the nodes' own.
void AddNodeLines(const std::vector<std::string>& nodes, const std::vector<std::string>& part_ids,
                  const std::vector<v1::JobResult>& parts, int devices_per_node,
                  v1::JobResult& merged) {
  double worst_gemm = -1;
  for (int n = 0; n < static_cast<int>(parts.size()); ++n) {
    v1::NodeResult* line = merged.add_node_results();
    line->set_node(nodes[n]);
    line->set_node_index(n);
    line->set_part_id(part_ids[n]);
    line->set_first_rank(n * devices_per_node);
    line->set_ranks(devices_per_node);
    line->set_total_step_ms(parts[n].total_step_ms());
    line->set_layer_step_ms(parts[n].layer_step().median_ms());
    line->set_backend(parts[n].backend());
    line->set_gpu(parts[n].gpu());
    double gemm_ms = 0;
    const int local = SlowestLocalRank(parts[n], &gemm_ms);
    line->set_slowest_rank(local < 0 ? -1 : n * devices_per_node + local);
    if (local >= 0 && gemm_ms > worst_gemm) {
      worst_gemm = gemm_ms;
      merged.set_slowest_rank(line->slowest_rank());
      merged.set_slowest_node(nodes[n]);
    }
  }
}

}  // namespace

// What every node ran alike (the dispatcher's notes, the fusions, the chains
// checked) comes from node 0's part.
v1::JobResult MergeNodeResults(const JobSpec& spec, const std::vector<std::string>& nodes,
                               const std::vector<std::string>& part_ids,
                               const std::vector<v1::JobResult>& parts, int devices_per_node) {
  v1::JobResult merged = parts.at(0);
  merged.clear_ops();
  merged.clear_node_results();
  MergeOps(spec, parts, devices_per_node, merged);
  MergeLayer(parts, merged);
  AddNodeLines(nodes, part_ids, parts, devices_per_node, merged);
  return merged;
}

}  // namespace overlap::cluster
