// overlapctl: submit layer-graph jobs to overlapd, follow them, print reports.
// The commands are a table (cli_commands.h); main declares the global options,
// registers every command, parses, and runs the one given.
#include <grpc/support/log.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "client/cli_commands.h"
#include "client/commands.h"
#include "client/core/daemon_client.h"
#include "common/config.h"

namespace {

// gRPC core's own log lines (a failed TLS handshake, in its format) say what
// overlapctl's error message says again; GRPC_VERBOSITY brings them back.
void QuietGrpcCore() {
  if (std::getenv("GRPC_VERBOSITY") == nullptr) gpr_set_log_function([](gpr_log_func_args*) {});
}

std::string FromEnv(const char* name) {
  const char* env = std::getenv(name);
  return env != nullptr ? env : "";
}

std::string DefaultAddress() {
  const std::string env = FromEnv("OVERLAPD_ADDR");
  return !env.empty() ? env : overlap::DefaultClientAddress();
}

}  // namespace

int main(int argc, char** argv) {
  namespace client = overlap::client;
  QuietGrpcCore();
  CLI::App app{"overlapctl: submit layer-graph jobs to overlapd and read their reports"};
  app.fallthrough();  // --addr/--json may follow the command
  app.require_subcommand(1);
  std::string address = DefaultAddress();
  bool json = false;
  app.add_option("--addr", address, "overlapd address: unix:/path or host:port (env OVERLAPD_ADDR)")
      ->capture_default_str();
  app.add_flag("--json", json, "print the protobuf JSON form instead of text");
  client::ClientTls tls{FromEnv("OVERLAPD_TLS_CA"), FromEnv("OVERLAPD_TLS_CERT"),
                        FromEnv("OVERLAPD_TLS_KEY"), ""};
  app.add_option("--tls-ca", tls.ca_file,
                 "TLS: PEM CA that signed overlapd's certificate (env OVERLAPD_TLS_CA)");
  app.add_option("--tls-cert", tls.cert_file,
                 "TLS: PEM client certificate, for mutual TLS (env OVERLAPD_TLS_CERT)");
  app.add_option("--tls-key", tls.key_file,
                 "TLS: PEM private key of --tls-cert (env OVERLAPD_TLS_KEY)");
  app.add_option("--tls-server-name", tls.server_name,
                 "TLS: name to check overlapd's certificate against (default: the host)");

  const std::vector<client::CliCommand> commands = client::AllCliCommands();
  for (const client::CliCommand& command : commands) {
    command.add_options(*app.add_subcommand(command.name, command.help));
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints the help, or the error and "Run with --help"
    return rc == 0 ? client::kExitOk : client::kExitUsage;
  }

  // Made for every command, so that bad --tls-* files are a usage error even
  // where no call follows; it connects on its first call only.
  absl::StatusOr<std::unique_ptr<client::DaemonClient>> created =
      client::DaemonClient::Create(address, tls);
  if (!created.ok()) {
    std::cerr << "overlapctl: " << created.status().message() << "\n";
    return client::kExitUsage;
  }
  const client::CliContext context{**created, json, isatty(STDERR_FILENO) == 1, std::cout,
                                   std::cerr};
  int rc = client::kExitUsage;
  for (const client::CliCommand& command : commands) {
    const CLI::App& subcommand = *app.get_subcommand(command.name);
    if (subcommand.parsed()) rc = command.run(subcommand, context);
  }
  std::cout.flush();
  return rc;
}
