// The rows of overlapctl's command table (client/cli_commands.h) for what a
// user looks at: the node (node, stats, health), its GPUs live (top), the
// tuned schedules (tuning); and --nodes, which node, top and check share.
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

// --nodes of node, top and check: daemons' user addresses, as --addr takes them.
void AddNodesOption(CLI::App& app, std::vector<std::string>& nodes);

// Runs `run` over a client per --nodes address; a usage error for a repeated
// address, unusable TLS files, or an --addr that is not among the nodes. (main
// checks the --tls-* flags against --addr before any command runs, so with TLS
// --addr must name a HOST:PORT: one of the nodes is the one that makes sense.)
int WithNodes(const CLI::App& command, const std::vector<std::string>& addresses,
              const CliContext& context,
              const std::function<int(std::vector<NodeClient>& nodes)>& run);

}  // namespace overlap::client
