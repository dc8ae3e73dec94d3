// `overlapctl commbench`: the collectives alone over a range of message sizes,
// on each transport, as one daemon job: what nccl-tests reports (time, algbw,
// busbw), for NCCL and for the copy engines side by side, each result checked
// against a float64 reference.
//
// Sizes follow nccl-tests: the all-reduce's buffer, the all-gather's gathered
// output, the reduce-scatter's input, in bytes over all ranks of the group. Bus
// bandwidth is algbw x 2(N-1)/N for all-reduce and x (N-1)/N for the other two.
//
// With `nodes` (commbench --peers) the job spans those daemons, each bringing
// the same devices, as a mesh tp = devices per node x dp = nodes, and times
// the all-reduce three ways per size: each tp rank's data-parallel group
// across the nodes (dp: a gradient all-reduce), every rank flat (world), and
// every rank hierarchically (reduce-scatter in tp, all-reduce in dp,
// all-gather in tp; only where tp > 1). Across daemons collectives run over
// NCCL (Gloo on the host backend), serial.
#pragma once

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/core/daemon_client.h"
#include "nlohmann/json.hpp"
#include "overlap/v1/overlap.pb.h"

namespace overlap::client {

struct CommBenchOptions {
  std::vector<std::string> collectives = {"all_reduce", "all_gather", "reduce_scatter"};
  std::vector<std::string> transports = {"nccl", "p2p"};
  // all_reduce also runs each of these on every transport that has it (ring
  // and tree: both; ps: p2p), each a column "transport/algorithm".
  std::vector<std::string> algorithms;
  // Whether the daemon's library collectives take ring and tree (the cuda
  // backend's NCCL); where not, only p2p gets the algorithm columns.
  bool library_algorithms = true;
  int64_t min_bytes = int64_t{1} << 20;
  int64_t max_bytes = int64_t{1} << 30;
  int factor = 4;            // each size is this many times the last
  std::vector<int> devices;  // the group; empty = every device of the daemon
  std::string dtype = "bf16";
  int iterations = 20;
  int warmup = 5;
  bool verify = true;
  // Whether the user chose max_bytes; where not, a host backend gets
  // kHostCommBenchMaxBytes (1 GiB buffers do not fit its simulated devices).
  bool max_bytes_given = false;
  // Across daemons (peer addresses, this daemon's among them): the all-reduce
  // only, over the columns of NodesCommBenchVariants. On the host backend the
  // sizes not chosen default to kHostNodesCommBench{Min,Max}Bytes.
  std::vector<std::string> nodes;
  bool min_bytes_given = false;
  std::string html_file;  // --html: also write the charts here
};
inline constexpr int64_t kHostCommBenchMaxBytes = int64_t{64} << 20;
inline constexpr int64_t kHostNodesCommBenchMinBytes = int64_t{64} << 10;
inline constexpr int64_t kHostNodesCommBenchMaxBytes = int64_t{4} << 20;

// INVALID_ARGUMENT naming the flag for a collective, transport or algorithm it
// does not know, an algorithm no transport given has, sizes out of order, a
// factor below 2, or --peers with fewer than two nodes or with a collective
// other than all_reduce, a transport other than nccl, or --algorithms.
absl::Status ValidateCommBenchOptions(const CommBenchOptions& options);

// The columns: each transport, then each algorithm it has ("nccl", "nccl/ring",
// ..., "p2p/ps"). Only all_reduce rows fill the algorithm columns.
std::vector<std::string> CommBenchVariants(const CommBenchOptions& options);

// Bytes an all-reduce of S bytes brings into the busiest of n GPUs, in units of
// S, by copy-engine layout ("direct" for p2p's own): what separates them as n
// grows (ring and direct 2(n-1)/n, tree up to 3, ps n-1).
double AllReduceBusiestGpuFactor(const std::string& algorithm, int n);

// The m x n of a collective of about `bytes` over a group of `group` ranks:
// rows of 1024 elements where the size allows, m a multiple of the group,
// rounded down to what such a shape holds (bench --peers shapes its gradients so).
struct CollectiveShape {
  int64_t m = 0, n = 0;
};
CollectiveShape CollectiveShapeFor(int64_t bytes, int64_t element_bytes, int group);

// One op per collective, size and transport, as rows m x columns n with m a
// multiple of `tp` (n = 1024 elements where the size allows): the sizes are
// min_bytes, min_bytes * factor, ... up to max_bytes, each rounded down to what
// such a shape holds.
std::string BuildCommBenchSpec(const CommBenchOptions& options, int tp);

struct CommBenchResult {
  double ms = 0, min_ms = 0, max_ms = 0;  // median and spread of the timed iterations
  double algbw_gbps = 0, busbw_gbps = 0;
  double max_rel_error = 0, tolerance = 0;
  bool verified = false;
};
// One row per collective and size, in the order the job ran them.
struct CommBenchRow {
  std::string collective;
  int64_t bytes = 0;                                    // as nccl-tests counts them
  int64_t count = 0;                                    // elements in that buffer
  std::map<std::string, CommBenchResult> by_transport;  // by CommBenchVariants' names
};
std::vector<CommBenchRow> FoldCommBench(const v1::Job& job);

// The table (one column group per variant; per row the fastest variant,
// FASTER, and the next one's time over its, SPEEDUP; the worst error,
// MAX_REL_ERR, and VERIFY: verify_cell.h) and, per collective and variant,
// the best bus bandwidth seen.
std::string FormatCommBench(const std::vector<CommBenchRow>& rows,
                            const std::vector<std::string>& variants, int tp,
                            const std::string& dtype, int ranks_per_gpu = 1);
nlohmann::json CommBenchJson(const v1::Job& job, const v1::GetNodeInfoResponse& node,
                             const v1::GetNodeInfoResponse* node_after,
                             const std::vector<CommBenchRow>& rows, const CommBenchOptions& options,
                             int tp);

// commbench --peers. The columns: "dp", "world" and, where tp (devices per
// node) > 1, "world/hierarchical".
std::vector<std::string> NodesCommBenchVariants(int tp);
// The job (its nodes go with the submission): per size, an all_reduce per
// variant, ids dp-BYTES, world-BYTES, hier-BYTES, each of the same m x n with
// m a multiple of the world (tp x nodes).
std::string BuildNodesCommBenchSpec(const CommBenchOptions& options, int tp);
// One row per size, keyed by those variants (from each op's group and algorithm).
std::vector<CommBenchRow> FoldNodesCommBench(const v1::Job& job);
// The table (time, algbw, busbw per variant; the flat world all-reduce's time
// over the hierarchical one's; MAX_REL_ERR and VERIFY), the best busbw per variant, the bus
// bandwidth across nodes, a line per node and, on the host backend, that the
// figures mean nothing (HostFiguresNote).
std::string FormatNodesCommBench(const std::vector<CommBenchRow>& rows, const v1::Job& job, int tp,
                                 const std::string& dtype);
nlohmann::json NodesCommBenchJson(const v1::Job& job, const v1::GetNodeInfoResponse& node,
                                  const v1::GetNodeInfoResponse* node_after,
                                  const std::vector<CommBenchRow>& rows,
                                  const CommBenchOptions& options, int tp);

// Shared with bench --peers. On the host backend, a line saying that the
// figures mean nothing (threads on CPU cores, Gloo over loopback TCP) and only
// the checks count; "" on any other backend. AddNodesJson adds the same to a
// JSON record: "figures_meaningful" (false on the host backend) and
// "figures_note" (the line), plus the job's nodes and the per-node lines.
std::string HostFiguresNote(const std::string& backend);
// What a commbench page's figures are worth (its caveats, CaveatLines): on the
// host backend they mean nothing (HostFiguresNote across nodes, else
// HostTimingsNote), and ranks sharing a GPU (SharedGpuNote).
std::vector<std::string> CommBenchCaveats(const std::string& backend, int ranks_per_gpu,
                                          bool across_nodes);
// "nodes: 0 127.0.0.1:7071 ranks 0-1 (job-000002), 1 ..."; "" for a job on one daemon.
std::string FormatNodesLine(const v1::JobResult& result);
void AddNodesJson(const v1::Job& job, const std::string& backend, nlohmann::json* j);

// Submits, follows with progress on `err`, prints the table (or JSON), writes
// `json_file` when given. Exit status as the other commands.
int RunCommBench(DaemonClient& client, const CommBenchOptions& options,
                 const std::string& json_file, bool json, bool err_is_tty, std::ostream& out,
                 std::ostream& err);

}  // namespace overlap::client
