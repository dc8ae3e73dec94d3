// The commands about the daemon and its GPUs rather than one job.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/bench/check.h"
#include "client/bench/cluster_check.h"
#include "client/cli_commands.h"
#include "client/commands.h"
#include "client/views/cluster_view.h"
#include "client/views/top.h"

namespace overlap::client {
namespace {

// stats takes no options.
struct NoOptions {};

void AddNoOptions(CLI::App&, NoOptions&) {}

// --nodes of node, top and check: daemons' user addresses, as --addr takes them.
void AddNodesOption(CLI::App& app, std::vector<std::string>& nodes) {
  app.add_option("--nodes", nodes,
                 "several daemons at once: their user addresses, as --addr takes them "
                 "(unix:PATH or HOST:PORT, comma-separated; the --tls-* flags apply to all)")
      ->delimiter(',');
}

// The global --tls-* flags as main.cc reads them (the flag, else its
// environment variable): CliContext carries the client they made, not them.
ClientTls GlobalTls(const CLI::App& command) {
  const CLI::App& top = *command.get_parent();
  auto value = [&top](const char* flag, const char* env) -> std::string {
    const CLI::Option* option = top.get_option_no_throw(flag);
    if (option != nullptr && option->count() > 0) return option->as<std::string>();
    const char* from_env = env != nullptr ? std::getenv(env) : nullptr;
    return from_env != nullptr ? from_env : "";
  };
  return ClientTls{value("--tls-ca", "OVERLAPD_TLS_CA"), value("--tls-cert", "OVERLAPD_TLS_CERT"),
                   value("--tls-key", "OVERLAPD_TLS_KEY"), value("--tls-server-name", nullptr)};
}

// Runs `run` over a client per --nodes address; a usage error for a repeated
// address, unusable TLS files, or an --addr that is not among the nodes. (main
// checks the --tls-* flags against --addr before any command runs, so with TLS
// --addr must name a HOST:PORT: one of the nodes is the one that makes sense.)
int WithNodes(const CLI::App& command, const std::vector<std::string>& addresses,
              const CliContext& context,
              const std::function<int(std::vector<NodeClient>& nodes)>& run) {
  const CLI::Option* addr = command.get_parent()->get_option_no_throw("--addr");
  if (addr != nullptr && addr->count() > 0 &&
      std::find(addresses.begin(), addresses.end(), context.client.address()) == addresses.end()) {
    context.err << "overlapctl: " << command.get_name() << ": --addr " << context.client.address()
                << " is not among --nodes, which names every daemon to ask\n";
    return kExitUsage;
  }
  absl::StatusOr<std::vector<NodeClient>> nodes = ConnectNodes(addresses, GlobalTls(command));
  if (!nodes.ok()) {
    context.err << "overlapctl: " << nodes.status().message() << "\n";
    return kExitUsage;
  }
  return run(*nodes);
}

struct NodeOptions {
  std::vector<std::string> nodes;
};

struct HealthOptions {
  int forget_xids_device = -1;  // -1: print the health instead
};

struct CheckCliOptions {
  CheckOptions check;
  bool no_links = false;
  std::vector<std::string> nodes;
};

struct TopCliOptions {
  TopOptions top;
  std::vector<std::string> nodes;
};

}  // namespace

CliCommand NodeCommand() {
  return MakeCliCommand<NodeOptions>(
      "node",
      "show the daemon's backend and devices; with --nodes, several daemons' versions and "
      "health side by side (exit 1 on a version mismatch or an unhealthy node)",
      [](CLI::App& app, NodeOptions& options) { AddNodesOption(app, options.nodes); },
      [](const NodeOptions& options, const CLI::App& app, const CliContext& context) {
        if (options.nodes.empty()) return CommandsFor(context).Node();
        return WithNodes(app, options.nodes, context, [&](std::vector<NodeClient>& nodes) {
          return RunClusterNode(nodes, context.json, context.out, context.err);
        });
      });
}

CliCommand StatsCommand() {
  return MakeCliCommand<NoOptions>(
      "stats", "show job counts and device usage", AddNoOptions,
      [](const NoOptions&, const CLI::App&, const CliContext& context) {
        return CommandsFor(context).Stats();
      });
}

CliCommand HealthCommand() {
  return MakeCliCommand<HealthOptions>(
      "health",
      "the GPUs' health now, from NVML: PCIe link, NVLinks, ECC errors, row remaps, Xids "
      "(exit 1 when a GPU has a problem; no jobs run)",
      [](CLI::App& app, HealthOptions& options) {
        app.add_option("--forget-xids", options.forget_xids_device,
                       "set this GPU's Xid counts of this boot back to 0 (after resetting it)")
            ->check(CLI::NonNegativeNumber);
      },
      [](const HealthOptions& options, const CLI::App&, const CliContext& context) {
        Commands commands = CommandsFor(context);
        return options.forget_xids_device >= 0 ? commands.ForgetXids(options.forget_xids_device)
                                               : commands.Health();
      });
}

CliCommand CheckCommand() {
  return MakeCliCommand<CheckCliOptions>(
      "check",
      "find a slow GPU or link: the same GEMM on every GPU at once, then an all-gather "
      "over every pair (exit 1 when something is slow)",
      [](CLI::App& app, CheckCliOptions& options) {
        CheckOptions& check = options.check;
        app.add_option("--devices", check.devices, "GPUs to check, e.g. 0,1,2,3 (default: all)")
            ->delimiter(',');
        app.add_option("--gemm-size", check.gemm_size,
                       absl::StrCat("m = k = n of each GPU's bf16 GEMM (default: ", check.gemm_size,
                                    "; ", kHostCheckGemmSize, " on the host backend)"))
            ->check(CLI::Range(int64_t{16}, int64_t{65536}));
        app.add_option("--link-mib", check.link_mib,
                       absl::StrCat("MiB per rank in each pair's all-gather (default: ",
                                    check.link_mib, "; ", kHostCheckLinkMib,
                                    " on the host backend)"))
            ->check(CLI::Range(int64_t{1}, int64_t{16384}));
        app.add_option("--iterations", check.iterations, "timed iterations per job")
            ->check(CLI::Range(1, 10000))
            ->capture_default_str();
        app.add_flag("--no-links", options.no_links, "check the GPUs only");
        AddNodesOption(app, options.nodes);
      },
      [](const CheckCliOptions& options, const CLI::App& app, const CliContext& context) {
        CheckOptions check = options.check;
        check.links = !options.no_links;
        // A host backend gets smaller sizes, but only those the user left alone.
        check.gemm_size_given = app.count("--gemm-size") > 0;
        check.link_mib_given = app.count("--link-mib") > 0;
        if (options.nodes.empty()) {
          return RunCheck(context.client, check, context.json, context.out, context.err);
        }
        return WithNodes(app, options.nodes, context, [&](std::vector<NodeClient>& nodes) {
          return RunClusterCheck(nodes, check, context.json, context.out, context.err);
        });
      });
}

CliCommand TopCommand() {
  return MakeCliCommand<TopCliOptions>(
      "top",
      "live view of the GPUs, one line each per sample: clocks, temperature, power, "
      "utilization, memory, and the job, op and last step there (--nodes: every node's)",
      [](CLI::App& app, TopCliOptions& options) {
        app.add_option("--interval", options.top.interval_s, "seconds between samples")
            ->check(CLI::Range(0.05, 3600.0))
            ->capture_default_str();
        app.add_option("--count", options.top.count, "samples to print (0: until interrupted)")
            ->check(CLI::NonNegativeNumber)
            ->capture_default_str();
        AddNodesOption(app, options.nodes);
      },
      [](const TopCliOptions& options, const CLI::App& app, const CliContext& context) {
        if (options.nodes.empty()) {
          return RunTop(context.client, options.top, context.json, context.out, context.err);
        }
        return WithNodes(app, options.nodes, context, [&](std::vector<NodeClient>& nodes) {
          return RunClusterTop(nodes, options.top, context.json, context.out, context.err);
        });
      });
}

}  // namespace overlap::client
