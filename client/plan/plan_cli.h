// The rows of overlapctl's command table (client/cli_commands.h) for the
// planner: calibrate (the node's figures) and plan (predictions from them).
#pragma once

#include "client/core/cli_command.h"

namespace overlap::client {

CliCommand CalibrateCommand();
CliCommand PlanCommand();

}  // namespace overlap::client
