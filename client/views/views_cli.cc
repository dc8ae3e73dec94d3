// The rows of the commands that show the node and its GPUs (node, stats,
// health, top; with --nodes several daemons), the tuned schedules (tuning
// list|forget) and the sessions (sessions [close ID]).
#include "client/views/views_cli.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "client/core/command_io.h"
#include "client/views/node_commands.h"
#include "client/views/session_trace.h"
#include "client/views/sessions.h"
#include "client/views/top.h"
#include "client/views/tuning.h"

namespace overlap::client {
namespace {

NodeCommands NodeCommandsFor(const CliContext& context) {
  return NodeCommands(context.client, context.out, context.err, context.json);
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

// list and forget share the filter flags; --all is forget's alone.
struct TuningOptions {
  std::string op;
  std::string shape;
  bool stale = false;
  bool all = false;
};

// stats takes no options.
struct NoOptions {};

void AddNoOptions(CLI::App&, NoOptions&) {}

struct NodeOptions {
  ClusterViewOptions nodes;
};

struct HealthOptions {
  int forget_xids_device = -1;  // -1: print the health instead
};

struct TopCliOptions {
  TopOptions top;
  ClusterViewOptions nodes;
};

void AddSessionsOptions(CLI::App& app, SessionsOptions& options) {
  app.require_subcommand(0, 1);
  app.add_flag("--all-users", options.all_users, "every owner's sessions (admins)");
  app.add_flag("--lanes", options.lanes,
               "also the lanes' recent intervals: each critical op and deferred chunk, per "
               "device, on the device's clock");
  CLI::App* close = app.add_subcommand(
      "close", "end a session: its ranks' next commands fail CANCELLED, its buffers are unmapped");
  close->add_option("ID", options.close_id, "session id, e.g. sess-000003")->required();
  CLI::App* trace = app.add_subcommand(
      "trace",
      "a session's recent steps as a Chrome trace (chrome://tracing, Perfetto): each op and "
      "deferred chunk on its device's lane, in step order");
  trace->add_option("ID", options.trace_id, "session id, e.g. sess-000003")->required();
  trace->add_option("--steps", options.trace_steps, "only the last N steps (0: every one kept)")
      ->check(CLI::NonNegativeNumber);
}

int RunSessionsCli(const SessionsOptions& options, const CLI::App& app, const CliContext& context) {
  if (app.got_subcommand("close")) {
    return RunCloseSession(context.client, options.close_id, context.json, context.out,
                           context.err);
  }
  if (app.got_subcommand("trace")) {
    return RunSessionTrace(context.client, options.trace_id, options.all_users, options.trace_steps,
                           context.out, context.err);
  }
  return RunSessions(context.client, options, context.json, context.out, context.err);
}

void AddTuningOptions(CLI::App& app, TuningOptions& options) {
  app.require_subcommand(1);
  CLI::App* list = app.add_subcommand("list", "list the tuned schedules");
  CLI::App* forget = app.add_subcommand(
      "forget", "forget tuned schedules: the next job with such an op tunes it again");
  for (CLI::App* sub : {list, forget}) {
    sub->add_option("--op", options.op, "only this op type, e.g. gemm_rs");
    sub->add_option("--shape", options.shape, "only this global shape, MxKxN");
    sub->add_flag("--stale", options.stale,
                  "only those no job here can use (another build, GPU, driver, library)");
  }
  forget->add_flag("--all", options.all, "every one (needed when nothing else is named)");
}

int RunTuning(const TuningOptions& options, const CLI::App& app, const CliContext& context) {
  absl::StatusOr<v1::TuningFilter> filter =
      ParseTuningFilter(options.op, options.shape, options.stale);
  if (!filter.ok()) return UsageError(filter.status(), context.err);
  if (app.got_subcommand("list")) {
    return RunTuningList(context.client, *filter, context.json, context.out, context.err);
  }
  return RunTuningForget(context.client, *filter, options.all, context.json, context.out,
                         context.err);
}

}  // namespace

void AddNodesOptions(CLI::App& app, ClusterViewOptions& options) {
  app.add_option("--nodes", options.nodes,
                 "several daemons at once: their user addresses, as --addr takes them "
                 "(unix:PATH or HOST:PORT, comma-separated; the --tls-* flags apply to each "
                 "HOST:PORT)")
      ->delimiter(',');
  app.add_option("--cluster-file", options.cluster_file,
                 "the daemons from a YAML or JSON file: a list of nodes, each an address and "
                 "its own tls_ca, tls_cert, tls_key, server_name (docs/CLI.md); with --nodes, "
                 "both");
  AddNodesOnlyRefusal(app);
}

// The file's nodes, then --nodes', each with its TLS.
absl::StatusOr<std::vector<ClusterNode>> ViewNodes(const ClusterViewOptions& options,
                                                   const ClientTls& default_tls) {
  std::vector<ClusterNode> from_file;
  if (!options.cluster_file.empty()) {
    absl::StatusOr<std::string> text = ReadBoundedFile(options.cluster_file, kMaxInputFileBytes);
    if (!text.ok()) return text.status();
    absl::StatusOr<std::vector<ClusterNode>> parsed = ParseClusterFile(*text, options.cluster_file);
    if (!parsed.ok()) return parsed.status();
    from_file = std::move(*parsed);
  }
  return ClusterViewNodes(std::move(from_file), options.nodes, default_tls);
}

int WithNodes(const CLI::App& command, const ClusterViewOptions& options, const CliContext& context,
              const std::function<int(std::vector<NodeClient>& nodes)>& run) {
  absl::StatusOr<std::vector<ClusterNode>> view = ViewNodes(options, GlobalTls(command));
  if (!view.ok()) return UsageError(view.status(), context.err);
  const CLI::Option* addr = command.get_parent()->get_option_no_throw("--addr");
  if (addr != nullptr && addr->count() > 0 &&
      std::none_of(view->begin(), view->end(), [&](const ClusterNode& node) {
        return node.address == context.client.address();
      })) {
    context.err << "overlapctl: " << command.get_name() << ": --addr " << context.client.address()
                << " is not among the nodes (--nodes, --cluster-file), which name every daemon "
                   "to ask\n";
    return kExitUsage;
  }
  absl::StatusOr<std::vector<NodeClient>> nodes = ConnectNodes(*view);
  if (!nodes.ok()) return UsageError(nodes.status(), context.err);
  return run(*nodes);
}

CliCommand NodeCommand() {
  return MakeCliCommand<NodeOptions>(
      "node",
      "show the daemon's backend and devices; with --nodes, several daemons' versions and "
      "health side by side (exit 1 on a version mismatch or an unhealthy node)",
      [](CLI::App& app, NodeOptions& options) { AddNodesOptions(app, options.nodes); },
      [](const NodeOptions& options, const CLI::App& app, const CliContext& context) {
        if (!options.nodes.given()) return NodeCommandsFor(context).Node();
        return WithNodes(app, options.nodes, context, [&](std::vector<NodeClient>& nodes) {
          return RunClusterNode(nodes, context.json, context.out, context.err);
        });
      });
}

CliCommand StatsCommand() {
  return MakeCliCommand<NoOptions>(
      "stats", "show job counts and device usage", AddNoOptions,
      [](const NoOptions&, const CLI::App&, const CliContext& context) {
        return NodeCommandsFor(context).Stats();
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
        NodeCommands commands = NodeCommandsFor(context);
        return options.forget_xids_device >= 0 ? commands.ForgetXids(options.forget_xids_device)
                                               : commands.Health();
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
        AddNodesOptions(app, options.nodes);
      },
      [](const TopCliOptions& options, const CLI::App& app, const CliContext& context) {
        if (!options.nodes.given()) {
          return RunTop(context.client, options.top, context.json, context.out, context.err);
        }
        return WithNodes(app, options.nodes, context, [&](std::vector<NodeClient>& nodes) {
          return RunClusterTop(nodes, options.top, context.json, context.out, context.err);
        });
      });
}

CliCommand SessionsCommand() {
  return MakeCliCommand<SessionsOptions>(
      "sessions",
      "the sessions of training processes' ranks: owner, ranks, steps, per-op time, hidden "
      "share, lane waits, deferred delays against bounds, enqueue latency; `close ID` ends one; "
      "`trace ID` prints one's recent steps as a Chrome trace",
      AddSessionsOptions, RunSessionsCli);
}

CliCommand TuningCommand() {
  return MakeCliCommand<TuningOptions>(
      "tuning", "the schedules autotune chose and kept: list them, or forget them to re-tune",
      AddTuningOptions, RunTuning);
}

}  // namespace overlap::client
