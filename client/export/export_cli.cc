// The row of `export`: the schedules auto chose as a training framework's
// configuration (export_command.h).
#include "client/export/export_cli.h"

#include "client/export/export_command.h"

namespace overlap::client {
namespace {

void AddExportOptions(CLI::App& app, ExportOptions& options) {
  app.add_option("--format", options.format, "te | megatron | torchtitan")->required();
  app.add_option("--job", options.job, "the choices auto made in this job, with their margins");
  app.add_option("--graph", options.graph,
                 "the tuning cache's choices for this graph's ops (winners only, no margins)");
  app.add_option("--tp", options.tp,
                 "--graph: the tp its ops were tuned at (default: the graph's)");
  app.add_option("--output-file", options.output, "write it to this file");
  app.add_option("--bench", options.bench,
                 "torchtitan: PyTorch's async TP as measured at these shapes (bench --torch-peers "
                 "--json-out FILE, or bench/peers/torch_tp.py --json FILE)");
}

int RunExportCommand(const ExportOptions& options, const CLI::App&, const CliContext& context) {
  return RunExport(context.client, options, context.out, context.err);
}

}  // namespace

CliCommand ExportCommand() {
  return MakeCliCommand<ExportOptions>(
      "export",
      "write the schedules auto chose as TransformerEngine, Megatron-LM or torchtitan config",
      AddExportOptions, RunExportCommand);
}

}  // namespace overlap::client
