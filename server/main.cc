// overlapd: the per-node daemon. Loads the config (defaults < YAML file <
// flags) and runs the Daemon (server/daemon.h) until SIGTERM/SIGINT, which
// drain it. It exits 0 after a drain, 1 when the engine became unhealthy or
// startup failed, 2 for a bad command line or config (systemd does not
// restart those).
#include <sys/stat.h>

#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "common/byte_size.h"
#include "common/config.h"
#include "server/peer/peer_auth.h"
#include "common/logging.h"
#include "overlap_git_commit.h"
#include "server/daemon.h"
#include "server/rpc/grpc_log.h"
#include "server/rpc/listen_address.h"
#include "server/rpc/server_tls.h"

namespace overlap {
namespace {

// Command-line values; each one given overrides the config file.
struct Flags {
  std::string config_path;
  bool print_default_config = false;
  std::string make_cluster_key;
  bool print_config = false;
  std::optional<std::string> backend, listen, socket_group, admin_group, state_dir, log_level, metrics_listen, tls_cert,
      tls_key, tls_client_ca;
  std::optional<bool> allow_insecure_tcp, hazard_checks, nvls_enable, nccl_nonblocking,
      graph_replay, programmatic_edges, launch_gate;
  std::optional<int> host_devices, max_iterations, max_queued_jobs, nccl_overlap_ctas,
      keep_finished_jobs, ranks_per_gpu, max_ops_per_job, max_watchers, max_requests_in_flight,
      max_requests_per_user, max_user_priority,
      max_queued_jobs_per_user;
  std::optional<std::string> host_device_memory, pool_bytes_per_device, gemm_workspace_bytes,
      max_spec_bytes;
  std::optional<double> preheat_ms, collective_timeout_s, drain_timeout_s, keep_finished_days;
};

absl::Status ApplyBytes(const std::optional<std::string>& text, const char* flag, int64_t* out) {
  if (!text) return absl::OkStatus();
  absl::StatusOr<int64_t> bytes = ParseByteSize(*text);
  if (!bytes.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", bytes.status().message()));
  }
  *out = *bytes;
  return absl::OkStatus();
}

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
  if (flags.backend) config.backend = *flags.backend;
  if (flags.listen) config.listen = *flags.listen;
  if (flags.socket_group) config.socket_group = *flags.socket_group;
  if (flags.admin_group) config.admin_group = *flags.admin_group;
  if (flags.state_dir) config.state_dir = *flags.state_dir;
  if (flags.log_level) config.log_level = *flags.log_level;
  if (flags.allow_insecure_tcp) config.allow_insecure_tcp = *flags.allow_insecure_tcp;
  if (flags.hazard_checks) config.hazard_checks = *flags.hazard_checks;
  if (flags.nvls_enable) config.nvls_enable = *flags.nvls_enable;
  if (flags.nccl_nonblocking) config.nccl_nonblocking = *flags.nccl_nonblocking;
  if (flags.graph_replay) config.graph_replay = *flags.graph_replay;
  if (flags.metrics_listen) config.metrics_listen = *flags.metrics_listen;
  if (flags.tls_cert) config.tls_cert = *flags.tls_cert;
  if (flags.tls_key) config.tls_key = *flags.tls_key;
  if (flags.tls_client_ca) config.tls_client_ca = *flags.tls_client_ca;
  if (flags.programmatic_edges) config.programmatic_edges = *flags.programmatic_edges;
  if (flags.launch_gate) config.launch_gate = *flags.launch_gate;
  if (flags.nccl_overlap_ctas) config.nccl_overlap_ctas = *flags.nccl_overlap_ctas;
  if (flags.ranks_per_gpu) config.ranks_per_gpu = *flags.ranks_per_gpu;
  if (flags.preheat_ms) config.preheat_ms = *flags.preheat_ms;
  if (flags.host_devices) config.host_device_count = *flags.host_devices;
  if (flags.max_iterations) config.max_iterations = *flags.max_iterations;
  if (flags.max_queued_jobs) config.max_queued_jobs = *flags.max_queued_jobs;
  if (flags.max_ops_per_job) config.max_ops_per_job = *flags.max_ops_per_job;
  if (flags.max_watchers) config.max_watchers = *flags.max_watchers;
  if (flags.max_requests_in_flight) config.max_requests_in_flight = *flags.max_requests_in_flight;
  if (flags.max_requests_per_user) config.max_requests_per_user = *flags.max_requests_per_user;
  if (flags.max_user_priority) config.max_user_priority = *flags.max_user_priority;
  if (flags.max_queued_jobs_per_user) {
    config.max_queued_jobs_per_user = *flags.max_queued_jobs_per_user;
  }
  if (flags.collective_timeout_s) config.collective_timeout_s = *flags.collective_timeout_s;
  if (flags.drain_timeout_s) config.drain_timeout_s = *flags.drain_timeout_s;
  if (flags.keep_finished_jobs) config.keep_finished_jobs = *flags.keep_finished_jobs;
  if (flags.keep_finished_days) config.keep_finished_days = *flags.keep_finished_days;
  if (absl::Status s = ApplyBytes(flags.host_device_memory, "--host-device-memory",
                                  &config.host_device_memory_bytes);
      !s.ok()) {
    return s;
  }
  if (flags.pool_bytes_per_device) {
    if (absl::Status s = ParsePoolSize(*flags.pool_bytes_per_device, &config); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--pool-bytes-per-device: ", s.message()));
    }
  }
  if (absl::Status s = ApplyBytes(flags.gemm_workspace_bytes, "--gemm-workspace-bytes",
                                  &config.gemm_workspace_bytes);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ApplyBytes(flags.max_spec_bytes, "--max-spec-bytes", &config.max_spec_bytes);
      !s.ok()) {
    return s;
  }
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

// CLI11 2.1 stores false into an optional<bool> bound to a flag that was not
// given, which would override the config file (nccl_nonblocking: true was lost
// that way); a flag function runs only when the flag (+1) or its negation (-1)
// appears.
void AddBoolFlag(CLI::App& app, const std::string& names, std::optional<bool>* target,
                 const std::string& help) {
  app.add_flag_function(
      names, [target](std::int64_t count) { *target = count > 0; }, help);
}

void AddFlags(CLI::App& app, Flags& f) {
  app.add_option("--config", f.config_path, "YAML config file (see --print-default-config)")
      ->check(CLI::ExistingFile);
  app.add_flag("--print-default-config", f.print_default_config,
               "print the default config as YAML and exit");
  app.add_option("--make-cluster-key", f.make_cluster_key,
                 "write a new cluster key (peer_key_file) to this path, mode 0600, and exit");
  app.add_flag("--print-config", f.print_config,
               "print the config in effect (file and flags merged) as YAML and exit");
  app.add_option("--backend", f.backend, "auto | cuda | host")
      ->check(CLI::IsMember({"auto", "cuda", "host"}));
  app.add_option("--listen", f.listen,
                 "unix:PATH or HOST:PORT (loopback, or any with mutual TLS or when allowed)");
  AddBoolFlag(app, "--allow-insecure-tcp,!--no-allow-insecure-tcp", &f.allow_insecure_tcp,
              "allow HOST:PORT on non-loopback addresses without mutual TLS");
  app.add_option("--tls-cert", f.tls_cert, "TLS on HOST:PORT: PEM certificate chain");
  app.add_option("--tls-key", f.tls_key, "TLS on HOST:PORT: PEM private key");
  app.add_option("--tls-client-ca", f.tls_client_ca,
                 "require client certificates signed by this PEM CA (mutual TLS)");
  app.add_option("--socket-group", f.socket_group,
                 "unix socket: mode 0660 to this group, whose members may use the daemon");
  app.add_option("--admin-group", f.admin_group,
                 "its members (and root) may cancel any job and change node-wide state");
  app.add_option("--state-dir", f.state_dir, "directory of the job database");
  app.add_option("--metrics-listen", f.metrics_listen,
                 "serve Prometheus /metrics on HOST:PORT (\"\" = off, the default)");
  app.add_option("--log-level", f.log_level, "trace|debug|info|warn|error|critical|off");
  app.add_option("--host-devices", f.host_devices, "host backend: simulated devices")
      ->check(CLI::Range(1, 1024));
  app.add_option("--host-device-memory", f.host_device_memory,
                 "host backend: memory per device (e.g. 2GiB)");
  AddBoolFlag(app, "--hazard-checks,!--no-hazard-checks", &f.hazard_checks,
              "host backend: fail a job on a missing event wait");
  app.add_option("--pool-bytes-per-device", f.pool_bytes_per_device,
                 "cuda backend: buffer pool per GPU (e.g. 16GiB, or 80% of its memory)");
  app.add_option("--gemm-workspace-bytes", f.gemm_workspace_bytes,
                 "cuda backend: cuBLASLt workspace per stream");
  AddBoolFlag(app, "--nvls-enable,!--no-nvls-enable", &f.nvls_enable,
              "cuda backend: NVLink multicast (NCCL_NVLS_ENABLE)");
  app.add_option("--ranks-per-gpu", f.ranks_per_gpu,
                 "cuda backend: ranks each GPU hosts (2 checks tp = 2 schedules on one GPU; "
                 "copies stand in for NCCL and timings mean nothing)")
      ->check(CLI::Range(1, 8));
  AddBoolFlag(app, "--nccl-nonblocking,!--no-nccl-nonblocking", &f.nccl_nonblocking,
              "cuda backend: non-blocking NCCL communicators (default; the watchdog needs them)");
  AddBoolFlag(app, "--graph-replay,!--no-graph-replay", &f.graph_replay,
              "cuda backend: replay p2p schedules' timed iterations as CUDA graphs (default)");
  AddBoolFlag(app, "--programmatic-edges,!--no-programmatic-edges", &f.programmatic_edges,
              "cuda backend: in replayed graphs, GEMM pieces start as the previous one drains "
              "(off by default: no gain measured on H200)");
  AddBoolFlag(app, "--launch-gate,!--no-launch-gate", &f.launch_gate,
              "hold each timed iteration until the host has enqueued all of it (default)");
  app.add_option("--nccl-overlap-ctas", f.nccl_overlap_ctas,
                 "cuda backend: CTAs NCCL may use beside a GEMM, whose SMs it leaves free "
                 "(0 = no budget)")
      ->check(CLI::Range(0, 64));
  app.add_option("--preheat-ms", f.preheat_ms,
                 "cuda backend: run the op's GEMM this long before each measured phase "
                 "(default 300, 0 = off)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--collective-timeout", f.collective_timeout_s,
                 "seconds before a hung collective is aborted")
      ->check(CLI::PositiveNumber);
  app.add_option("--max-iterations", f.max_iterations, "largest iterations a job may ask for")
      ->check(CLI::Range(1, 1 << 30));
  app.add_option("--max-queued-jobs", f.max_queued_jobs, "queued jobs beyond this are refused")
      ->check(CLI::Range(1, 1 << 30));
  app.add_option("--drain-timeout", f.drain_timeout_s,
                 "seconds running jobs get to finish on shutdown")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-spec-bytes", f.max_spec_bytes, "largest job spec accepted");
  app.add_option("--max-ops-per-job", f.max_ops_per_job, "ops one job may have")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--max-user-priority", f.max_user_priority,
                 "the highest priority a user who is not an admin may ask for");
  app.add_option("--max-queued-jobs-per-user", f.max_queued_jobs_per_user,
                 "queued jobs one user may have (0 = no quota)")
      ->check(CLI::Range(0, 1 << 30));
  app.add_option("--max-watchers", f.max_watchers,
                 "WatchJob streams open at once (each holds a thread)")
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("--max-requests-in-flight", f.max_requests_in_flight,
                 "job calls and peer calls worked on at once (more: RESOURCE_EXHAUSTED)")
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("--max-requests-per-user", f.max_requests_per_user,
                 "of those, from one user, certificate or peer node")
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("--keep-finished-jobs", f.keep_finished_jobs,
                 "the job database keeps this many finished jobs (0 = all)")
      ->check(CLI::Range(0, std::numeric_limits<int>::max()));
  app.add_option("--keep-finished-days", f.keep_finished_days,
                 "and deletes finished jobs older than this many days (0 = never)")
      ->check(CLI::NonNegativeNumber);
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
