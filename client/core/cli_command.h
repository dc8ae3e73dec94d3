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
#include <vector>

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

// Declares `flag`, which the command does not take with this meaning (another
// command's flag, or a spelling it took before), hidden from --help, so that
// using it is a usage error that says `why` (the flag to use instead) rather
// than CLI11's "arguments were not expected". No alias: one meaning per flag.
inline void RefuseFlag(CLI::App& app, const std::string& flag, const std::string& why) {
  auto refuse = [flag, why](const std::vector<std::string>&) {
    throw CLI::ValidationError(flag, why);
  };
  app.add_option_function<std::vector<std::string>>(flag, refuse)
      ->expected(0, 1)
      ->allow_extra_args(false)  // a value at most: `submit --nodes A FILE` keeps its FILE
      ->group("");
}

// Peers and nodes stay apart: --peers lists the daemons' peer addresses (a job
// that spans them: submit, validate, bench, commbench), --nodes their user
// addresses (the views: node, top, check).
inline void AddPeersOnlyRefusal(CLI::App& app) {
  RefuseFlag(app, "--nodes",
             app.get_name() +
                 " takes the daemons' peer addresses as --peers (--nodes names their user "
                 "addresses, for node, top and check)");
}
inline void AddNodesOnlyRefusal(CLI::App& app) {
  RefuseFlag(app, "--peers",
             app.get_name() +
                 " takes the daemons' user addresses as --nodes (--peers names their peer "
                 "addresses, for submit, validate, bench and commbench)");
}

}  // namespace overlap::client
