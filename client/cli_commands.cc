#include "client/cli_commands.h"

namespace overlap::client {

Commands CommandsFor(const CliContext& context) {
  return Commands(context.client, context.out, context.err, context.err_is_tty, context.json);
}

// One command a line, in --help's order (which main keeps by registering them
// in this order).
std::vector<CliCommand> AllCliCommands() {
  // clang-format off
  return {
      SubmitCommand(),
      ValidateCommand(),
      GetCommand(),
      ListCommand(),
      CancelCommand(),
      WatchCommand(),
      NodeCommand(),
      StatsCommand(),
      HealthCommand(),
      CheckCommand(),
      TopCommand(),
      ReportCommand(),
      PinCommand(),
      TimelineCommand(),
      CompareCommand(),
      TuningCommand(),
      GraphCommand(),
      BenchCommand(),
      CommBenchCommand(),
      CalibrateCommand(),
      PlanCommand(),
      ExportCommand(),
  };
  // clang-format on
}

}  // namespace overlap::client
