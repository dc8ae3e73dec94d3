// The rows of overlapctl's command table (client/cli_commands.h) for what a
// user measures: bench (the op sweep), commbench (the collectives alone) and
// check (a slow GPU or link).
#pragma once

#include "client/core/cli_command.h"

namespace overlap::client {

CliCommand BenchCommand();
CliCommand CommBenchCommand();
CliCommand CheckCommand();

}  // namespace overlap::client
