// The rows of `calibrate` (the node's figures for the planner) and `plan`
// (predictions from them, without running anything).
#include "client/plan/plan_cli.h"

#include <string>

#include "client/plan/calibrate.h"
#include "client/plan/plan.h"

namespace overlap::client {
namespace {

void AddCalibrateOptions(CLI::App& app, CalibrateOptions& options) {
  app.add_option("--from", options.from,
                 "fit recorded results instead of measuring: bench --json, commbench --json, "
                 "commbench --peers --json files");
  app.add_option("--gemm-slowdown", options.gemm_slowdown,
                 "GEMM time beside each transport over GEMM alone, measured elsewhere, e.g. "
                 "nccl=1.2,p2p=1.106 (default: from the bench results' overlapped schedules)");
  app.add_option("--piece-overhead-ms", options.piece_overhead_ms,
                 "the fixed cost of one piece of a cut schedule, measured elsewhere (default: 0)");
  app.add_option("--output-file", options.output, "write the calibration (JSON) to this file");
  app.add_option(
      "--load", options.load,
      "keep this calibration file (calibrate --json or --output-file output) on the daemon as it "
      "is; one measured on other hardware is refused");
  app.add_flag("--store", options.store,
               "with --from: keep it on the daemon too (admins; measured ones always are)");
  app.add_option("--devices", options.devices, "measure over these devices, e.g. 0,1")
      ->delimiter(',');
  app.add_option("--shapes", options.shapes,
                 "measure GEMMs at these bench shapes (default: bench's sweep), e.g. "
                 "ag_gemm:4096x8192x8192");
}

int RunCalibrateCommand(const CalibrateOptions& options, const CLI::App&,
                        const CliContext& context) {
  return RunCalibrate(context.client, options, context.json, context.err_is_tty, context.out,
                      context.err);
}

void AddPlanOptions(CLI::App& app, PlanOptions& options) {
  app.add_option("graph", options.graph_file, "a layer graph (YAML or JSON; - reads stdin)");
  app.add_option("--tp", options.tp, "plan every tp op at this degree (default: the graph's)");
  app.add_option("--calibration", options.calibration_file,
                 "a calibration file (default: the daemon's, from overlapctl calibrate)");
  app.add_option("--what-if", options.what_if,
                 "another machine: tp=N, nvlink-gbps=X (intra-node bus bandwidth), gemm-tflops=X, "
                 "nodes=N and inter-node-gbps=X, comma-separated");
  app.add_option("--node-count", options.nodes,
                 "a cluster: the graph's data-parallel replicas one to a node, over N nodes");
  RefuseFlag(app, "--nodes", "plan takes the number of nodes as --node-count N");
  app.add_option("--link-gbps", options.link_gbps,
                 "with --node-count: the link between nodes, bus bandwidth in GB/s (default: "
                 "what commbench --peers measured, kept in the calibration)");
  app.add_option("--replay", options.replay_file,
                 "instead of a graph: predict every candidate a recorded bench --json measured");
}

int RunPlanCommand(const PlanOptions& options, const CLI::App&, const CliContext& context) {
  return RunPlan(context.client, options, context.json, context.out, context.err);
}

}  // namespace

CliCommand CalibrateCommand() {
  return MakeCliCommand<CalibrateOptions>(
      "calibrate",
      "measure this node's GEMM and transfer figures for the planner (or fit recorded results)",
      AddCalibrateOptions, RunCalibrateCommand);
}

CliCommand PlanCommand() {
  return MakeCliCommand<PlanOptions>(
      "plan", "predict each op's schedules from the calibration, without running anything",
      AddPlanOptions, RunPlanCommand);
}

}  // namespace overlap::client
