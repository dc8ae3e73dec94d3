// overlapd: the per-node daemon. Loads the config (defaults < YAML file < flags),
// picks the engine, recovers the job store, serves gRPC, and on SIGTERM/SIGINT
// drains: no new jobs, running ones finish (or are cancelled after
// drain_timeout_s), queued ones stay queued for the next start. It exits 0
// after a drain, 1 when the engine became unhealthy or startup failed, 2 for a
// bad command line or config (systemd does not restart those).
#include <grp.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <cstdio>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/byte_size.h"
#include "common/config.h"
#include "common/logging.h"
#include "overlap_git_commit.h"
#include "server/engine_select.h"
#include "server/jobs/job_execution.h"
#include "server/jobs/job_store.h"
#include "server/jobs/scheduler.h"
#include "server/runner/tuning_cache.h"
#include "server/rpc/grpc_log.h"
#include "server/rpc/metrics.h"
#include "server/rpc/rpc_server.h"
#include "server/rpc/server_tls.h"

namespace overlap {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;
constexpr absl::Duration kCancelGrace = absl::Seconds(10);
constexpr absl::Duration kRpcGrace = absl::Seconds(2);

// Command-line values; each one given overrides the config file.
struct Flags {
  std::string config_path;
  bool print_default_config = false;
  bool print_config = false;
  std::optional<std::string> backend, listen, socket_group, state_dir, log_level, metrics_listen, tls_cert,
      tls_key, tls_client_ca;
  std::optional<bool> allow_insecure_tcp, hazard_checks, nvls_enable, nccl_nonblocking,
      graph_replay, programmatic_edges, launch_gate;
  std::optional<int> host_devices, max_iterations, max_queued_jobs, nccl_overlap_ctas,
      keep_finished_jobs, ranks_per_gpu, max_ops_per_job, max_watchers;
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

// The gid of config socket_group; -1 for "" (the socket keeps the daemon's group).
absl::StatusOr<int> SocketGroupId(const std::string& group) {
  if (group.empty()) return -1;
  std::vector<char> buffer(16384);
  struct group entry {};
  struct group* found = nullptr;
  const int rc = ::getgrnam_r(group.c_str(), &entry, buffer.data(), buffer.size(), &found);
  if (rc != 0 || found == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("socket_group: no group named \"", group.substr(0, 200), "\""));
  }
  return static_cast<int>(found->gr_gid);
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
  if (auto gid = SocketGroupId(config.socket_group); !gid.ok()) return gid.status();
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
  app.add_option("--max-watchers", f.max_watchers,
                 "WatchJob streams open at once (each holds a thread)")
      ->check(CLI::Range(1, 1 << 16));
  app.add_option("--keep-finished-jobs", f.keep_finished_jobs,
                 "the job database keeps this many finished jobs (0 = all)")
      ->check(CLI::Range(0, std::numeric_limits<int>::max()));
  app.add_option("--keep-finished-days", f.keep_finished_days,
                 "and deletes finished jobs older than this many days (0 = never)")
      ->check(CLI::NonNegativeNumber);
}

volatile sig_atomic_t g_stray_signal = 0;

void RecordStraySignal(int sig) { g_stray_signal = sig; }

// SIGTERM/SIGINT are blocked in main before it makes any thread, so every thread
// of ours inherits the mask and only the signal thread's sigtimedwait takes
// them. Libraries can start threads before main (OpenBLAS's pool starts in a
// shared-library constructor) and those do not block them; a signal the kernel
// hands to one of those runs this handler instead of killing the process, and
// the signal thread picks it up from g_stray_signal.
void BlockShutdownSignals() {
  struct sigaction action {};
  action.sa_handler = RecordStraySignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

// The one reason the daemon stops (first one wins) and the exit code it implies.
class StopRequest {
 public:
  void Request(int exit_code, const std::string& why) {
    absl::MutexLock lock(&mu_);
    if (requested_) return;
    requested_ = true;
    exit_code_ = exit_code;
    why_ = why;
  }
  // True when stopped within `timeout`.
  bool Wait(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(&requested_), timeout);
  }
  bool requested() {
    absl::MutexLock lock(&mu_);
    return requested_;
  }
  int exit_code() {
    absl::MutexLock lock(&mu_);
    return exit_code_;
  }
  std::string why() {
    absl::MutexLock lock(&mu_);
    return why_;
  }

 private:
  absl::Mutex mu_;
  bool requested_ ABSL_GUARDED_BY(mu_) = false;
  int exit_code_ ABSL_GUARDED_BY(mu_) = kExitOk;
  std::string why_ ABSL_GUARDED_BY(mu_);
};

void Notify(const std::string& state) {
  // Returns 0 when not under systemd (no NOTIFY_SOCKET): nothing to do.
  if (sd_notify(0, state.c_str()) < 0) {
    GetLogger("overlapd")->warn("sd_notify({}) failed", state.substr(0, state.find('\n')));
  }
}

// The state directory exists (made private, umask 0077), is a directory, and
// this process may write it: found here, before the engine spends seconds
// starting, as a configuration error (exit 2), not a failure systemd retries.
absl::Status PrepareStateDir(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    return absl::FailedPreconditionError(
        absl::StrCat("state_dir ", dir, ": cannot create it: ", ec.message()));
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat("state_dir ", dir, " is not a directory"));
  }
  if (::access(dir.c_str(), W_OK | X_OK) != 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "state_dir %s: overlapd (uid %d) cannot write it (owner uid %d, mode %04o): chown it to "
        "the user overlapd runs as, or set another state_dir",
        dir, ::geteuid(), st.st_uid, st.st_mode & 07777));
  }
  return absl::OkStatus();
}

int Run(const DaemonConfig& config) {
  auto log = GetLogger("overlapd");
  log->info("overlapd {} ({}) starting: backend={} state_dir={}", OVERLAP_VERSION,
            OVERLAP_GIT_COMMIT, config.backend, config.state_dir);
  if (absl::Status s = PrepareStateDir(config.state_dir); !s.ok()) {
    log->error("{}", std::string(s.message()));
    return kExitUsage;
  }

  absl::StatusOr<std::unique_ptr<engine::Engine>> engine = CreateEngineForConfig(config);
  if (!engine.ok()) {
    log->error("cannot start the engine: {}", std::string(engine.status().message()));
    // A bad config is not retried by systemd (RestartPreventExitStatus=2).
    return engine.status().code() == absl::StatusCode::kInvalidArgument ? kExitUsage
                                                                        : kExitFailure;
  }
  log->info("engine {}: {} device(s)", (*engine)->Name(), (*engine)->DeviceCount());

  absl::StatusOr<std::unique_ptr<jobs::JobStore>> store = jobs::JobStore::Open(config.state_dir);
  if (!store.ok()) {
    log->error("cannot open the job store: {}", std::string(store.status().message()));
    // A state_dir it cannot use, a damaged database or one from a newer overlapd
    // stays so until someone acts: exit 2, which systemd does not restart. A
    // full disk (RESOURCE_EXHAUSTED) exits 1: space is often freed without
    // touching overlapd, and systemd's restarts then bring it back.
    const absl::StatusCode code = store.status().code();
    return code == absl::StatusCode::kInvalidArgument || code == absl::StatusCode::kDataLoss ||
                   code == absl::StatusCode::kFailedPrecondition
               ? kExitUsage
               : kExitFailure;
  }
  // Autotuning still works without the cache; it just re-tunes after a restart.
  std::unique_ptr<runner::TuningCache> tuning_cache;
  if (auto cache = runner::TuningCache::Open(config.state_dir + "/tuning.db"); cache.ok()) {
    tuning_cache = std::move(*cache);
  } else {
    log->warn("tuning cache disabled: {}", std::string(cache.status().message()));
  }

  jobs::SchedulerOptions scheduler_options;
  scheduler_options.max_queued_jobs = config.max_queued_jobs;
  scheduler_options.executor_threads = (*engine)->DeviceCount();
  scheduler_options.retention.keep_jobs = config.keep_finished_jobs;
  scheduler_options.retention.keep_ms =
      static_cast<int64_t>(std::min(config.keep_finished_days, 1e6) * 24 * 3600 * 1000);
  absl::StatusOr<std::unique_ptr<jobs::Scheduler>> scheduler = jobs::Scheduler::Create(
      store->get(), jobs::MakeEngineRunner(**engine, config.max_iterations, tuning_cache.get()),
      scheduler_options);
  if (!scheduler.ok()) {
    log->error("cannot recover jobs: {}", std::string(scheduler.status().message()));
    return kExitFailure;
  }

  rpc::RpcServerOptions rpc_options;
  rpc_options.listen = config.listen;
  rpc_options.allow_insecure_tcp = config.allow_insecure_tcp;
  rpc_options.socket_gid = *SocketGroupId(config.socket_group);  // checked by BuildConfig
  rpc_options.tls = TlsOf(config);
  rpc_options.state_dir = config.state_dir;
  rpc_options.jobs.max_iterations = config.max_iterations;
  rpc_options.jobs.max_spec_bytes = config.max_spec_bytes;
  rpc_options.jobs.max_ops_per_job = config.max_ops_per_job;
  rpc_options.jobs.max_watchers = config.max_watchers;
  rpc_options.tuning_cache = tuning_cache.get();
  absl::StatusOr<std::unique_ptr<rpc::RpcServer>> server =
      rpc::RpcServer::Start(rpc_options, **scheduler, **engine);
  if (!server.ok()) {
    log->error("cannot start the gRPC server: {}", std::string(server.status().message()));
    (*scheduler)->StartDrain();
    (*scheduler)->CancelRunning("overlapd failed to start");
    (*scheduler)->WaitIdle(kCancelGrace);
    return server.status().code() == absl::StatusCode::kInvalidArgument ? kExitUsage
                                                                         : kExitFailure;
  }
  std::unique_ptr<rpc::MetricsExporter> metrics;
  if (!config.metrics_listen.empty()) {
    absl::StatusOr<std::unique_ptr<rpc::MetricsExporter>> started = rpc::MetricsExporter::Start(
        config.metrics_listen, **scheduler, **engine, (*server)->counters());
    if (!started.ok()) {
      log->error("{}", std::string(started.status().message()));
      (*server)->Shutdown(absl::ZeroDuration());
      (*scheduler)->StartDrain();
      (*scheduler)->CancelRunning("overlapd failed to start");
      (*scheduler)->WaitIdle(kCancelGrace);
      return kExitUsage;
    }
    metrics = std::move(*started);
    log->info("metrics on http://{}:{}/metrics",
              config.metrics_listen.substr(0, config.metrics_listen.rfind(':')), metrics->port());
  }
  Notify(absl::StrCat("READY=1\nSTATUS=serving on ", (*server)->listen_address()));

  StopRequest stop;
  std::atomic<bool> threads_done{false};
  const sigset_t signals = [] {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    return set;
  }();
  jobs::Scheduler* sched = scheduler->get();
  std::thread signal_thread([&] {
    const timespec poll{0, 200 * 1000 * 1000};
    while (!threads_done.load()) {
      int sig = sigtimedwait(&signals, nullptr, &poll);
      if (sig <= 0) {
        sig = g_stray_signal;
        g_stray_signal = 0;
      }
      if (sig <= 0) continue;
      if (!stop.requested()) {
        log->info("{} received: draining", strsignal(sig));
        stop.Request(kExitOk, strsignal(sig));
      } else {
        log->warn("{} received again: cancelling running jobs now", strsignal(sig));
        sched->CancelRunning("cancelled: overlapd shutting down (second signal)");
      }
    }
  });
  engine::Engine* eng = engine->get();
  std::thread health_thread([&] {
    while (!stop.Wait(absl::Milliseconds(500))) {
      if (!eng->Healthy()) {
        log->error(
            "engine {} is unhealthy (a device hit a sticky error): draining and exiting "
            "so that the service manager restarts overlapd",
            eng->Name());
        stop.Request(kExitFailure, "engine unhealthy");
      }
    }
  });

  stop.Wait(absl::InfiniteDuration());
  Notify(absl::StrCat("STOPPING=1\nSTATUS=draining (", stop.why(), ")"));
  (*server)->SetServing(false);
  sched->StartDrain();
  bool stuck = false;
  const absl::Duration drain_timeout = absl::Seconds(config.drain_timeout_s);
  if (!sched->WaitIdle(drain_timeout)) {
    const int cancelled = sched->CancelRunning(absl::StrFormat(
        "cancelled: overlapd shut down (drain timeout %gs)", config.drain_timeout_s));
    log->warn("drain timeout ({}s): cancelled {} running job(s)", config.drain_timeout_s,
              cancelled);
    stuck = !sched->WaitIdle(kCancelGrace);
  }
  threads_done.store(true);
  signal_thread.join();
  health_thread.join();
  if (stuck) {
    // A job that ignores cancellation cannot be joined; its row stays RUNNING and
    // the next start marks it FAILED "daemon restarted".
    log->error("{} job(s) did not stop after cancel; exiting without them", sched->RunningCount());
    (*server)->Shutdown(kRpcGrace);
    spdlog::shutdown();
    std::_Exit(kExitFailure);
  }
  const int queued = sched->QueuedCount();
  metrics.reset();    // it reads the server's counters and the scheduler
  sched->Shutdown();  // ends WatchJob streams
  (*server)->Shutdown(kRpcGrace);
  server->reset();
  scheduler->reset();
  log->info("overlapd stopped ({} queued job(s) kept for the next start)", queued);
  return stop.exit_code();
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
  return overlap::Run(*config);
}
