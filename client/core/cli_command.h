// One overlapctl command as a row of the command table (client/cli_commands.h):
// a name, a help line, a function that declares the command's options on its
// CLI::App, and a function that runs it once they are parsed. Each room
// (jobs/, views/, measure/, plan/, export/) defines the rows of its commands in
// its *_cli.cc; the work they call never sees CLI11.
#pragma once

#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <utility>

#include "CLI/CLI.hpp"
#include "client/core/daemon_client.h"

namespace overlap::client {

// What every command shares: the global options and the output streams.
struct CliContext {
  // Made from --addr and --tls-*; it connects on its first call, so commands
  // that need no daemon (graph with --tp) never reach for one.
  DaemonClient& client;
  bool json;        // --json
  bool err_is_tty;  // progress: a live counter on a terminal, one line per phase otherwise
  std::ostream& out;
  std::ostream& err;
};

struct CliCommand {
  std::string name;
  std::string help;
  // Declares the command's options (and any subcommands of its own) on `app`.
  std::function<void(CLI::App& app)> add_options;
  // Runs the command once `app` parsed; returns the exit status (command_io.h).
  std::function<int(const CLI::App& app, const CliContext& context)> run;
};

// An entry whose two functions share one `Options` struct, held by both
// closures so that it stays put while CLI11 points into it: `add_options`
// binds the options to its fields, `run` reads them after parsing. `run` also
// gets the parsed App, for what the struct cannot tell (was --dtype given?),
// and makes the checks CLI11 cannot (a shape list, a byte size).
template <typename Options>
CliCommand MakeCliCommand(
    std::string name, std::string help,
    std::function<void(CLI::App& app, Options& options)> add_options,
    std::function<int(const Options& options, const CLI::App& app, const CliContext& context)>
        run) {
  auto options = std::make_shared<Options>();
  return CliCommand{std::move(name), std::move(help),
                    [options, add_options](CLI::App& app) { add_options(app, *options); },
                    [options, run](const CLI::App& app, const CliContext& context) {
                      return run(*options, app, context);
                    }};
}

}  // namespace overlap::client
