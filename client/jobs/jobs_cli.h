// The rows of overlapctl's command table (client/cli_commands.h) for what a
// user does with jobs: submit, validate, get, list, cancel, watch, report,
// pin, timeline, compare (two finished jobs), and graph (write one).
#pragma once

#include "client/core/cli_command.h"

namespace overlap::client {

CliCommand SubmitCommand();
CliCommand ValidateCommand();
CliCommand GetCommand();
CliCommand FlightCommand();
CliCommand ListCommand();
CliCommand CancelCommand();
CliCommand WatchCommand();
CliCommand ReportCommand();
CliCommand PinCommand();
CliCommand TimelineCommand();
CliCommand CompareCommand();
CliCommand GraphCommand();

}  // namespace overlap::client
