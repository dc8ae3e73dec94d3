// overlapctl: submit layer-graph jobs to overlapd, follow them, print reports.
// The commands are a table (cli_commands.h), each row in its room; main declares the global
// options, registers every command, parses, and runs the one given.
#include <grpc/support/log.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/cli_commands.h"
#include "client/core/command_io.h"
#include "client/core/daemon_client.h"
#include "client/core/interrupts.h"
#include "client/format/output_format.h"
#include "client/format/table.h"
#include "client/jobs/progress_printer.h"
#include "client/views/node_commands.h"
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

// Edit distance, for "did you mean".
size_t Distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// The command word of argv (the first word that is not a global option or
// its value), or "" when there is none.
std::string CommandWord(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--addr" || arg == "--tls-ca" || arg == "--tls-cert" || arg == "--tls-key" ||
        arg == "--tls-server-name" || arg == "-o" || arg == "--output") {
      ++i;
      continue;
    }
    if (!arg.empty() && arg[0] == '-') continue;
    return arg;
  }
  return "";
}

std::string DefaultAddress() {
  const std::string env = FromEnv("OVERLAPD_ADDR");
  return !env.empty() ? env : overlap::DefaultClientAddress();
}

size_t TerminalColumns() {
  struct winsize size {};
  return ::ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 ? size.ws_col : 0;
}

// The commands whose JSON names jobs (or sessions), for -o name.
bool PrintsJobs(const std::string& command) {
  for (const char* name : {"submit", "get", "list", "cancel", "watch", "report", "sessions"}) {
    if (command == name) return true;
  }
  return false;
}

// Applies -o, --wide and --quiet: the format chosen, or INVALID_ARGUMENT for
// one that is no format or that `command` cannot print.
absl::StatusOr<overlap::client::OutputFormat> SetUpOutput(const std::string& output, bool wide,
                                                          bool quiet, const std::string& command) {
  namespace client = overlap::client;
  absl::StatusOr<client::OutputFormat> format = client::ParseOutputFormat(output);
  if (!format.ok()) return format.status();
  if (*format == client::OutputFormat::kName && !PrintsJobs(command)) {
    return absl::InvalidArgumentError("-o name: " + command +
                                      " prints no job ids (-o json or yaml print everything)");
  }
  const bool tty = isatty(STDOUT_FILENO) == 1;
  client::SetTableWidth(
      wide || *format == client::OutputFormat::kWide
          ? 0
          : client::ChooseTableWidth(tty, std::getenv("COLUMNS"), tty ? TerminalColumns() : 0));
  client::SetWideOutput(wide || *format == client::OutputFormat::kWide);
  client::SetQuietProgress(quiet);
  return format;
}

}  // namespace

int main(int argc, char** argv) {
  namespace client = overlap::client;
  client::InstallInterrupts();  // before gRPC starts any thread
  QuietGrpcCore();
  CLI::App app{"overlapctl: submit layer-graph jobs to overlapd and read their reports"};
  app.fallthrough();  // --addr/--json may follow the command
  app.require_subcommand(1);
  std::string address = DefaultAddress();
  bool json = false;
  app.add_option("--addr", address,
                 "overlapd address: unix:/path or host:port (default: $OVERLAPD_ADDR; else your "
                 "own daemon's socket, $XDG_RUNTIME_DIR/overlapd.sock or "
                 "/tmp/overlapd-UID/overlapd.sock, where it exists; else "
                 "/run/overlapd/overlapd.sock)");
  app.add_flag("--json", json, "print the protobuf JSON form instead of text (-o json)");
  std::string output;
  app.add_option("-o,--output", output,
                 "json | yaml | wide | name (job ids, one a line: submit, get, list, cancel, "
                 "watch, report; session ids: sessions); default: text and tables");
  bool wide = false;
  app.add_flag("--wide", wide,
               "tables show every column (-o wide; by default a table on a terminal fits its "
               "width, $COLUMNS or the window's, dropping detail columns; piped, it is never cut)");
  bool quiet = false;
  app.add_flag("-q,--quiet", quiet, "print no progress on standard error (errors still are)");
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
  bool version = false;
  app.add_flag("--version", version, "print overlapctl's version and the daemon's");
  // A word that is no command: say so, and the nearest, instead of CLI11's
  // "arguments were not expected".
  if (const std::string word = CommandWord(argc, argv); !word.empty()) {
    std::string nearest;
    size_t best = 4;  // suggest only within 3 edits
    bool known = false;
    for (const client::CliCommand& command : commands) {
      known = known || command.name == word;
      const size_t d = Distance(word, command.name);
      if (d < best) {
        best = d;
        nearest = command.name;
      }
    }
    if (!known) {
      std::cerr << "overlapctl: unknown command '" << word << "'"
                << (nearest.empty() ? "" : "; did you mean '" + nearest + "'?")
                << " (overlapctl --help lists them)\n";
      return client::kExitUsage;
    }
  }
  if (CommandWord(argc, argv).empty()) {
    for (int i = 1; i < argc; ++i) {
      if (std::string(argv[i]) == "--version") app.require_subcommand(0, 1);
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // prints the help, or the error and "Run with --help"
    return rc == 0 ? client::kExitOk : client::kExitUsage;
  }
  absl::StatusOr<client::OutputFormat> format =
      SetUpOutput(output, wide, quiet, CommandWord(argc, argv));
  if (!format.ok()) return client::UsageError(format.status(), std::cerr);

  // Made for every command, so that bad --tls-* files are a usage error even
  // where no call follows; it connects on its first call only.
  absl::StatusOr<std::unique_ptr<client::DaemonClient>> created =
      client::DaemonClient::Create(address, tls);
  if (!created.ok()) {
    std::cerr << "overlapctl: " << created.status().message() << "\n";
    return client::kExitUsage;
  }
  client::CommandOutput out(*format, std::cout);
  json = json || out.wants_json();
  const client::CliContext context{**created, json, isatty(STDERR_FILENO) == 1, out.stream(),
                                   std::cerr};
  int rc = client::kExitUsage;
  if (version) {
    rc = client::PrintVersions(**created, json, out.stream());
  } else {
    for (const client::CliCommand& command : commands) {
      const CLI::App& subcommand = *app.get_subcommand(command.name);
      if (subcommand.parsed()) rc = command.run(subcommand, context);
    }
  }
  out.Finish();
  return rc;
}
