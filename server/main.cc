// overlapd: the per-node daemon. Loads the config (defaults < YAML file <
// flags) and runs the Daemon (server/daemon.h) until SIGTERM/SIGINT, which
// drain it. It exits 0 after a drain, 1 when the engine became unhealthy or
// startup failed, 2 for a bad command line or config (systemd does not
// restart those).
#include <sys/stat.h>

#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "common/config.h"
#include "common/daemon_settings.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "overlap_git_commit.h"
#include "server/daemon.h"
#include "server/net/listen_address.h"
#include "server/peer/node_keys.h"
#include "server/peer/peer_auth.h"
#include "server/rpc/grpc_log.h"
#include "server/rpc/server_tls.h"

namespace overlap {
namespace {

// Flags that old scripts use, kept beside the key's own.
const std::map<std::string, std::string>& FlagAliases() {
  static const auto* aliases = new std::map<std::string, std::string>{
      {"host_device_count", "--host-devices"},
      {"host_device_memory_bytes", "--host-device-memory"},
      {"collective_timeout_s", "--collective-timeout"},
      {"drain_timeout_s", "--drain-timeout"},
  };
  return *aliases;
}

// Command-line values; each setting given overrides the config file.
struct Flags {
  std::string config_path;
  bool print_default_config = false;
  std::string make_cluster_key;
  std::string make_node_key;
  bool print_config = false;
  // One entry per config key (common/daemon_settings.h), in the table's order.
  struct Setting {
    std::string key;
    std::string value;                  // a value flag's text
    CLI::Option* option = nullptr;      // its flag, to tell whether it was given
    std::optional<bool> switched;       // a switch's, when given
  };
  std::vector<Setting> settings;
};

rpc::ServerTls TlsOf(const DaemonConfig& config) {
  return rpc::ServerTls{config.tls_cert, config.tls_key, config.tls_client_ca};
}

absl::StatusOr<DaemonConfig> BuildConfig(const Flags& flags) {
  DaemonConfig config;
  if (!flags.config_path.empty()) {
    absl::StatusOr<DaemonConfig> loaded = LoadDaemonConfig(flags.config_path);
    if (!loaded.ok()) return loaded.status();
    config = *loaded;
  }
  for (const Flags::Setting& setting : flags.settings) {
    if (setting.switched) {
      RETURN_IF_ERROR(ApplySetting(setting.key, *setting.switched ? "true" : "false", &config));
    } else if (setting.option != nullptr && setting.option->count() > 0) {
      RETURN_IF_ERROR(ApplySetting(setting.key, setting.value, &config));
    }
  }
  RETURN_IF_ERROR(ValidateAcrossKeys(config));
  if (!IsValidLogLevel(config.log_level)) {
    return absl::InvalidArgumentError(
        absl::StrCat("log_level: unknown level \"", config.log_level, "\""));
  }
  if (config.listen.empty()) config.listen = DefaultListenAddress();
  if (auto gid = GroupId("socket_group", config.socket_group); !gid.ok()) return gid.status();
  if (auto gid = GroupId("admin_group", config.admin_group); !gid.ok()) return gid.status();
  if (config.state_dir.empty()) config.state_dir = DefaultStateDir();
  // Checked here too (RpcServer checks again) so that a bad address or TLS
  // file is a config error, found before the engine spends seconds starting.
  const rpc::ServerTls tls = TlsOf(config);
  if (auto target = rpc::ResolveListenWithTls(config.listen, config.allow_insecure_tcp, tls);
      !target.ok()) {
    return target.status();
  }
  if (auto credentials = rpc::ServerCredentialsFor(tls); !credentials.ok()) {
    return credentials.status();
  }
  return config;
}

// A switch: `value` into `target` when the flag appears. (CLI11 2.1 stores
// false into an optional<bool> bound to a flag that was not given, which would
// override the config file; a flag function runs only when the flag appears.)
CLI::Option* AddBoolFlag(CLI::App& app, const std::string& names, std::optional<bool>* target,
                         bool value, const std::string& help) {
  return app.add_flag_function(
      names, [target, value](std::int64_t) { *target = value; }, help);
}

void AddFlags(CLI::App& app, Flags& f) {
  app.add_option("--config", f.config_path, "YAML config file (see --print-default-config)")
      ->check(CLI::ExistingFile);
  app.add_flag("--print-default-config", f.print_default_config,
               "print the default config as YAML and exit");
  app.add_option("--make-cluster-key", f.make_cluster_key,
                 "write a new cluster key (peer_key_file) to this path, mode 0600, and exit");
  app.add_option("--make-node-key", f.make_node_key,
                 "write a new node key (peer_node_key_file) to this path, mode 0600, print its "
                 "public key (for the other nodes' peer_known_nodes_file) and exit");
  app.add_flag("--print-config", f.print_config,
               "print the config in effect (file and flags merged) as YAML and exit");
  static constexpr char kGroup[] = "Settings (each a config key)";
  const std::vector<SettingDescription> described = DescribeSettings();
  f.settings.resize(described.size());  // never again: the options point into it
  for (size_t i = 0; i < described.size(); ++i) {
    const SettingDescription& d = described[i];
    Flags::Setting& setting = f.settings[i];
    setting.key = d.key;
    std::string names = FlagName(d.key);
    if (auto alias = FlagAliases().find(d.key); alias != FlagAliases().end()) {
      absl::StrAppend(&names, ",", alias->second);
    }
    const std::string help = absl::StrCat(d.doc, " (default: ", d.default_value, ")");
    if (d.is_bool) {
      // Two flags, not CLI11's "!--no-x" negation, whose help would show
      // "{false}" whatever the default.
      AddBoolFlag(app, names, &setting.switched, true, help)->group(kGroup);
      AddBoolFlag(app, "--no-" + FlagName(d.key).substr(2), &setting.switched, false,
                  absl::StrCat("sets ", d.key, " false"))
          ->group(kGroup);
    } else {
      setting.option = app.add_option(names, setting.value, help)->group(kGroup);
    }
  }
}

}  // namespace
}  // namespace overlap

int main(int argc, char** argv) {
  // Before any thread exists, so that every thread inherits the mask.
  overlap::BlockShutdownSignals();
  // Whatever umask overlapd was started with, what it creates (the state
  // directory, the job and tuning databases, the socket) starts private to its
  // user; the socket is then opened to its group on purpose (RpcServer), so no
  // file is ever more open than meant, not even for a moment.
  ::umask(0077);

  CLI::App app{"overlapd: runs tensor-parallel layer ops with overlapped communication"};
  // A flag given twice: the last one wins (a wrapper script can append overrides).
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  overlap::Flags flags;
  overlap::AddFlags(app, flags);
  app.set_version_flag("--version",
                       std::string("overlapd ") + OVERLAP_VERSION + " (" OVERLAP_GIT_COMMIT ")");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : overlap::kExitUsage;
  }
  if (flags.print_default_config) {
    std::cout << overlap::DefaultConfigYaml();
    return 0;
  }
  if (!flags.make_cluster_key.empty()) {
    absl::StatusOr<std::string> key = overlap::peer::CreateClusterKey(flags.make_cluster_key);
    if (!key.ok()) {
      std::cerr << "overlapd: " << key.status().message() << "\n";
      return overlap::kExitUsage;
    }
    std::cout << "wrote a new cluster key to " << flags.make_cluster_key
              << ": copy it to every node of the cluster (mode 0600) and name it in "
                 "peer_key_file\n";
    return 0;
  }
  if (!flags.make_node_key.empty()) {
    absl::StatusOr<overlap::peer::NodeKey> key = overlap::peer::CreateNodeKey(flags.make_node_key);
    if (!key.ok()) {
      std::cerr << "overlapd: " << key.status().message() << "\n";
      return overlap::kExitUsage;
    }
    // stdout holds the public key alone, for scripts; the advice goes to stderr.
    std::cout << key->public_text() << "\n";
    std::cerr << "wrote a new node key to " << flags.make_node_key
              << ": name it in this node's peer_node_key_file, and list this node in the other "
                 "nodes' peer_known_nodes_file as NODE_NAME "
              << key->public_text() << "\n";
    return 0;
  }
  absl::StatusOr<overlap::DaemonConfig> config = overlap::BuildConfig(flags);
  if (!config.ok()) {
    std::cerr << "overlapd: " << config.status().message() << "\n";
    return overlap::kExitUsage;
  }
  if (flags.print_config) {
    std::cout << overlap::ConfigYaml(*config);
    return 0;
  }
  overlap::InitLogging(config->log_level);
  overlap::rpc::RouteGrpcLogsToSpdlog();
  overlap::Daemon::StartError error;
  std::unique_ptr<overlap::Daemon> daemon = overlap::Daemon::Start(*config, &error);
  if (daemon == nullptr) return error.exit_code;
  daemon->Wait();
  return daemon->Stop();
}
