#include "client/cli_commands.h"

#include "client/export/export_cli.h"
#include "client/jobs/jobs_cli.h"
#include "client/measure/measure_cli.h"
#include "client/plan/plan_cli.h"
#include "client/views/views_cli.h"

namespace overlap::client {

// One command a line, in --help's order (which main keeps by registering them
// in this order).
std::vector<CliCommand> AllCliCommands() {
  // clang-format off
  return {
      SubmitCommand(),
      ValidateCommand(),
      GetCommand(),
      FlightCommand(),
      ListCommand(),
      CancelCommand(),
      WatchCommand(),
      NodeCommand(),
      StatsCommand(),
      HealthCommand(),
      CheckCommand(),
      TopCommand(),
      SessionsCommand(),
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
