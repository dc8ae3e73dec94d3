// The commands about the daemon and its GPUs rather than one job.
#include <cstdint>

#include "client/check.h"
#include "client/cli_commands.h"
#include "client/commands.h"
#include "client/top.h"

namespace overlap::client {
namespace {

// node and stats take no options.
struct NoOptions {};

void AddNoOptions(CLI::App&, NoOptions&) {}

struct HealthOptions {
  int forget_xids_device = -1;  // -1: print the health instead
};

struct CheckCliOptions {
  CheckOptions check;
  bool no_links = false;
};

}  // namespace

CliCommand NodeCommand() {
  return MakeCliCommand<NoOptions>(
      "node", "show the daemon's backend and devices", AddNoOptions,
      [](const NoOptions&, const CLI::App&, const CliContext& context) {
        return CommandsFor(context).Node();
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
        app.add_option("--gemm-size", check.gemm_size, "m = k = n of each GPU's bf16 GEMM")
            ->check(CLI::Range(int64_t{16}, int64_t{65536}))
            ->capture_default_str();
        app.add_option("--link-mib", check.link_mib, "MiB per rank in each pair's all-gather")
            ->check(CLI::Range(int64_t{1}, int64_t{16384}))
            ->capture_default_str();
        app.add_option("--iterations", check.iterations, "timed iterations per job")
            ->check(CLI::Range(1, 10000))
            ->capture_default_str();
        app.add_flag("--no-links", options.no_links, "check the GPUs only");
      },
      [](const CheckCliOptions& options, const CLI::App& app, const CliContext& context) {
        CheckOptions check = options.check;
        check.links = !options.no_links;
        // A host backend gets smaller sizes, but only those the user left alone.
        check.gemm_size_given = app.count("--gemm-size") > 0;
        check.link_mib_given = app.count("--link-mib") > 0;
        return RunCheck(context.client, check, context.json, context.out, context.err);
      });
}

CliCommand TopCommand() {
  return MakeCliCommand<TopOptions>(
      "top",
      "live view of the GPUs, one line each per sample: clocks, temperature, power, "
      "utilization, memory, and the job, op and last step there",
      [](CLI::App& app, TopOptions& options) {
        app.add_option("--interval", options.interval_s, "seconds between samples")
            ->check(CLI::Range(0.05, 3600.0))
            ->capture_default_str();
        app.add_option("--count", options.count, "samples to print (0: until interrupted)")
            ->check(CLI::NonNegativeNumber)
            ->capture_default_str();
      },
      [](const TopOptions& options, const CLI::App&, const CliContext& context) {
        return RunTop(context.client, options, context.json, context.out, context.err);
      });
}

}  // namespace overlap::client
