// The rows of overlapctl's command table (client/cli_commands.h) for what a
// user looks at: the node (node, stats, health), its GPUs live (top), the
// tuned schedules (tuning), the sessions (sessions); and --nodes and --cluster-file, which node,
// top and check share.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "client/core/cli_command.h"
#include "client/views/cluster_view.h"

namespace overlap::client {

CliCommand NodeCommand();
CliCommand StatsCommand();
CliCommand HealthCommand();
CliCommand TopCommand();
CliCommand TuningCommand();
CliCommand SessionsCommand();

// The daemons node, top and check look at together (cluster_file.h).
struct ClusterViewOptions {
  std::vector<std::string> nodes;  // --nodes: user addresses, as --addr takes them
  std::string cluster_file;        // --cluster-file: nodes with their own TLS

  bool given() const { return !nodes.empty() || !cluster_file.empty(); }
};
// --nodes and --cluster-file, and the refusal of --peers (cli_command.h).
void AddNodesOptions(CLI::App& app, ClusterViewOptions& options);

// Runs `run` over a client per node (the cluster file's, then --nodes'); a
// usage error for a bad cluster file, a repeated address, unusable TLS files,
// or an --addr that is not among the nodes. (main checks the --tls-* flags
// against --addr before any command runs, so with TLS --addr must name a
// HOST:PORT: one of the nodes is the one that makes sense.)
int WithNodes(const CLI::App& command, const ClusterViewOptions& options, const CliContext& context,
              const std::function<int(std::vector<NodeClient>& nodes)>& run);

}  // namespace overlap::client
