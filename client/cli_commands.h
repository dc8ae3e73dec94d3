// overlapctl's commands as a table: one row (core/cli_command.h) per
// command, each defined in the room of what the user does: jobs/jobs_cli.h,
// views/views_cli.h, measure/measure_cli.h, plan/plan_cli.h,
// export/export_cli.h. client/main.cc declares the global options, registers
// every row and runs the one given.
#pragma once

#include <vector>

#include "client/core/cli_command.h"

namespace overlap::client {

// Every command, in the order `overlapctl --help` lists them.
std::vector<CliCommand> AllCliCommands();

}  // namespace overlap::client
