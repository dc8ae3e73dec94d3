// The row of overlapctl's command table (client/cli_commands.h) for export:
// the schedules auto chose as TransformerEngine, Megatron-LM or torchtitan
// configuration.
#pragma once

#include "client/core/cli_command.h"

namespace overlap::client {

CliCommand ExportCommand();

}  // namespace overlap::client
