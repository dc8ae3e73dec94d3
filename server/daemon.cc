#include "server/daemon.h"

#include <grp.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "overlap_git_commit.h"
#include "server/cluster/cluster_jobs.h"
#include "server/cluster/cross_node_transport.h"
#include "server/engine/device_lanes.h"
#include "server/engine_select.h"
#include "server/flight/flight_engine.h"
#include "server/jobs/admission.h"
#include "server/jobs/job_execution.h"
#include "server/jobs/job_queue.h"
#include "server/jobs/job_store.h"
#include "server/node/node_state.h"
#include "server/node/tuning_state.h"
#include "server/peer/grpc_peer_link.h"
#include "server/peer/peer_client.h"
#include "server/peer/peer_config.h"
#include "server/peer/peer_server.h"
#include "server/rpc/metrics.h"
#include "server/rpc/rpc_server.h"
#include "server/rpc/server_tls.h"
#include "server/runner/tuning_cache.h"
#include "server/sessions/session_lanes.h"
#include "server/sessions/session_socket.h"

namespace overlap {
namespace {

constexpr absl::Duration kCancelGrace = absl::Seconds(10);
constexpr absl::Duration kRpcGrace = absl::Seconds(2);

volatile sig_atomic_t g_stray_signal = 0;

void RecordStraySignal(int sig) { g_stray_signal = sig; }

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

// systemd's watchdog (WatchdogSec=, WATCHDOG_USEC): how often to ping it,
// half its period; zero when it is off.
absl::Duration WatchdogPingInterval() {
  uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0) return absl::ZeroDuration();
  return absl::Microseconds(static_cast<int64_t>(usec)) / 2;
}

// Waits up to `timeout` for the running jobs to end, asking systemd every few
// seconds for more stop time (EXTEND_TIMEOUT_USEC) so that a drain_timeout_s
// longer than the unit's TimeoutStopSec is honoured, and only while the drain
// is still within its bound.
bool DrainWithinTimeout(jobs::JobQueue& queue, absl::Duration timeout) {
  constexpr absl::Duration kSlice = absl::Seconds(5);
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return queue.WaitIdle(absl::ZeroDuration());
    const absl::Duration slice = std::min(left, kSlice);
    // The slice, the cancel grace after the deadline and room to exit.
    Notify(absl::StrCat("EXTEND_TIMEOUT_USEC=",
                        absl::ToInt64Microseconds(slice + kCancelGrace + absl::Seconds(5))));
    if (queue.WaitIdle(slice)) return true;
  }
}

// Gloo has no encryption in Debian's build (no TLS transport), so the tensors
// of a job across daemons cross the network in plaintext: refused off
// loopback unless the config says the network is private.
absl::Status CheckGlooNetwork(const DaemonConfig& config, const std::string& transport) {
  if (transport != "gloo" || config.gloo_private_network) return absl::OkStatus();
  std::vector<std::string> addresses = config.peers;
  addresses.push_back(config.peer_listen);
  for (const std::string& address : addresses) {
    absl::StatusOr<peer::PeerAddress> parsed =
        peer::ParsePeerAddress("peers", address, /*allow_port_zero=*/true);
    if (!parsed.ok() || parsed->loopback) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        "gloo_private_network: jobs across daemons on the host backend run over Gloo, which "
        "sends tensors as plaintext TCP, and ",
        address,
        " is not a loopback address; set gloo_private_network: true only where the nodes' "
        "network is private (the peer port itself is authenticated either way)"));
  }
  return absl::OkStatus();
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

}  // namespace

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

absl::StatusOr<int> GroupId(const std::string& setting, const std::string& group) {
  if (group.empty()) return -1;
  std::vector<char> buffer(16384);
  struct group entry {};
  struct group* found = nullptr;
  const int rc = ::getgrnam_r(group.c_str(), &entry, buffer.data(), buffer.size(), &found);
  if (rc != 0 || found == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(setting, ": no group named \"", group.substr(0, 200), "\""));
  }
  return static_cast<int>(found->gr_gid);
}

// Declared in the order they start; destroyed the other way round, each
// before what it uses.
struct Daemon::Parts {
  // Every collective of the engine below, for the verdict on a hung job.
  std::unique_ptr<flight::FlightRecorder> flight;
  std::unique_ptr<engine::Engine> engine;  // a flight::FlightEngine around the backend
  // The devices' lanes, shared by the session lanes and the deferred-class
  // jobs beside them; null where the engine cannot run sessions.
  std::unique_ptr<engine::DeviceLanes> device_lanes;
  std::unique_ptr<jobs::JobStore> store;
  std::unique_ptr<runner::TuningCache> tuning_cache;  // may stay null
  std::unique_ptr<node::TuningState> tuning;
  std::unique_ptr<jobs::Admission> admission;
  // With peer_listen only: jobs that span daemons. The job queue's runner
  // calls it and it calls the job queue, so it outlives the job queue (which
  // has no job running by then) and gets it once made.
  std::unique_ptr<peer::PeerLink> peer_link;
  std::unique_ptr<cluster::ClusterJobs> cluster;
  std::unique_ptr<jobs::JobQueue> queue;
  std::unique_ptr<node::NodeState> node;
  // Sessions: the lanes run what the socket's ranks start. Null when off.
  std::unique_ptr<sessions::SessionLanes> session_lanes;
  std::unique_ptr<sessions::SessionSocket> session_socket;
  std::unique_ptr<peer::PeerServer> peer_server;  // with peer_listen only
  std::unique_ptr<rpc::RpcServer> server;
  std::unique_ptr<rpc::MetricsExporter> metrics;
  StopRequest stop;
  std::atomic<bool> threads_done{false};
};

Daemon::Daemon(const DaemonConfig& config) : config_(config), parts_(std::make_unique<Parts>()) {}

Daemon::~Daemon() {
  parts_->threads_done.store(true);
  parts_->stop.Request(kExitOk, "destroyed");
  if (signal_thread_.joinable()) signal_thread_.join();
  if (health_thread_.joinable()) health_thread_.join();
}

std::unique_ptr<Daemon> Daemon::Start(const DaemonConfig& config, StartError* error) {
  std::unique_ptr<Daemon> daemon(new Daemon(config));
  int exit_code = kExitFailure;
  if (absl::Status s = daemon->StartParts(&exit_code); !s.ok()) {
    GetLogger("overlapd")->error("{}", std::string(s.message()));
    Parts& p = *daemon->parts_;
    if (p.queue != nullptr) {
      if (p.peer_server != nullptr) p.peer_server->Shutdown(absl::ZeroDuration());
      if (p.server != nullptr) p.server->Shutdown(absl::ZeroDuration());
      p.queue->StartDrain();
      p.queue->CancelRunning("overlapd failed to start");
      p.queue->WaitIdle(kCancelGrace);
    }
    *error = StartError{s, exit_code};
    return nullptr;
  }
  return daemon;
}

absl::Status Daemon::LoadNodeKeys() {
  auto log = GetLogger("overlapd");
  absl::StatusOr<peer::LoadedNodeKey> node_key = peer::LoadNodeKey(config_);
  if (!node_key.ok()) return node_key.status();
  absl::StatusOr<peer::KnownNodes> known = peer::LoadKnownNodes(config_);
  if (!known.ok()) return known.status();
  node_key_ = node_key->key;
  known_nodes_ = std::move(*known);
  if (node_key->created) {
    log->warn(
        "made a new node key in {}: list this node in the other nodes' "
        "peer_known_nodes_file as: {} {}",
        node_key->path, NodeName(config_), node_key_->public_text());
  } else {
    log->info("node key {}: {} {}", node_key->path, NodeName(config_), node_key_->public_text());
  }
  return absl::OkStatus();
}

absl::Status Daemon::StartParts(int* exit_code) {
  auto log = GetLogger("overlapd");
  Parts& p = *parts_;
  const DaemonConfig& config = config_;
  log->info("overlapd {} ({}) starting: backend={} state_dir={}", OVERLAP_VERSION,
            OVERLAP_GIT_COMMIT, config.backend, config.state_dir);
  *exit_code = kExitUsage;
  if (absl::Status s = PrepareStateDir(config.state_dir); !s.ok()) return s;
  // Before the engine spends seconds starting: a bad peer address or TLS file
  // is a config error (exit 2).
  if (absl::Status s = peer::ValidatePeerConfig(config); !s.ok()) return s;
  if (!config.peer_listen.empty()) {
    absl::StatusOr<peer::ClusterKey> key = peer::LoadClusterKey(config);
    if (!key.ok()) return key.status();
    if (key->created) {
      log->warn("made a new cluster key in {}: copy it (mode 0600) to every node this daemon "
                "runs jobs with, and name it in their peer_key_file",
                key->path);
    }
    cluster_key_ = std::move(key->bytes);
    if (absl::Status s = LoadNodeKeys(); !s.ok()) return s;
  }

  absl::StatusOr<std::unique_ptr<engine::Engine>> engine = CreateEngineForConfig(config);
  if (!engine.ok()) {
    // A bad config is not retried by systemd (RestartPreventExitStatus=2).
    *exit_code = engine.status().code() == absl::StatusCode::kInvalidArgument ? kExitUsage
                                                                              : kExitFailure;
    return absl::Status(engine.status().code(),
                        absl::StrCat("cannot start the engine: ", engine.status().message()));
  }
  p.flight = std::make_unique<flight::FlightRecorder>(config.flight_recorder_entries);
  // flight_recorder_entries 0 turns the recorder off: no FlightEngine, so no collective
  // is recorded and the rings stay empty (what its cost is measured against).
  if (config.flight_recorder_entries > 0) {
    p.engine = std::make_unique<flight::FlightEngine>(std::move(*engine), *p.flight);
  } else {
    p.engine = std::move(*engine);
  }
  log->info("engine {}: {} device(s)", p.engine->Name(), p.engine->DeviceCount());
  RETURN_IF_ERROR(StartJobs(exit_code));
  RETURN_IF_ERROR(StartServers(exit_code));
  Notify(absl::StrCat("READY=1\nSTATUS=serving on ", p.server->listen_address()));
  StartWatchers();
  return absl::OkStatus();
}

absl::Status Daemon::StartJobs(int* exit_code) {
  auto log = GetLogger("overlapd");
  Parts& p = *parts_;
  const DaemonConfig& config = config_;
  absl::StatusOr<std::unique_ptr<jobs::JobStore>> store = jobs::JobStore::Open(config.state_dir);
  if (!store.ok()) {
    // A state_dir it cannot use, a damaged database or one from a newer overlapd
    // stays so until someone acts: exit 2, which systemd does not restart. A
    // full disk (RESOURCE_EXHAUSTED) exits 1: space is often freed without
    // touching overlapd, and systemd's restarts then bring it back.
    const absl::StatusCode code = store.status().code();
    *exit_code = code == absl::StatusCode::kInvalidArgument ||
                         code == absl::StatusCode::kDataLoss ||
                         code == absl::StatusCode::kFailedPrecondition
                     ? kExitUsage
                     : kExitFailure;
    return absl::Status(code, absl::StrCat("cannot open the job store: ", store.status().message()));
  }
  p.store = std::move(*store);
  // Autotuning still works without the cache; it just re-tunes after a restart.
  if (auto cache = runner::TuningCache::Open(config.state_dir + "/tuning.db"); cache.ok()) {
    p.tuning_cache = std::move(*cache);
  } else {
    log->warn("tuning cache disabled: {}", std::string(cache.status().message()));
  }
  p.tuning = node::CacheTuningState(p.tuning_cache.get(), *p.engine);

  jobs::AdmissionOptions admission;
  admission.max_iterations = config.max_iterations;
  admission.max_spec_bytes = config.max_spec_bytes;
  admission.max_ops_per_job = config.max_ops_per_job;
  if (p.tuning_cache != nullptr) {
    // A coordinator plans jobs spanning daemons with the calibration kept here
    // (every node brings the same devices).
    admission.calibration = [cache = p.tuning_cache.get(),
                             engine = p.engine.get()](int ranks) -> std::optional<planner::Calibration> {
      if (engine->DeviceCount() == 0) return std::nullopt;
      std::optional<runner::StoredCalibration> stored = cache->LookupCalibration(
          runner::CalibrationKey(runner::TuningEnvironment(*engine, 0), ranks));
      if (!stored) return std::nullopt;
      absl::StatusOr<planner::Calibration> c = planner::CalibrationFromJson(stored->json);
      if (!c.ok() ||
          !planner::CheckCalibrationMatches(*c, runner::CalibrationIdentityOf(*engine, 0)).ok()) {
        return std::nullopt;
      }
      return *c;
    };
  }
  p.admission = std::make_unique<jobs::Admission>(*p.engine, admission);

  jobs::JobQueueOptions queue_options;
  queue_options.max_queued_jobs = config.max_queued_jobs;
  queue_options.max_queued_jobs_per_owner = config.max_queued_jobs_per_user;
  queue_options.executor_threads = p.engine->DeviceCount();
  if (const engine::DeviceMonitor* monitor = p.engine->Monitor()) {
    queue_options.free_bytes = [engine = p.engine.get(), monitor](int device) {
      return engine->GetDeviceInfo(device).memory_bytes - monitor->MemoryInUse(device);
    };
  }
  if (p.engine->Shared() != nullptr) {
    p.device_lanes = std::make_unique<engine::DeviceLanes>(p.engine->DeviceCount());
    queue_options.deferred_beside_sessions = true;
  }
  jobs::JobRunner runner = jobs::MakeEngineRunner(*p.engine, *p.admission, p.tuning_cache.get(),
                                                  p.flight.get(), p.device_lanes.get());
  if (!config.peer_listen.empty()) {
    p.peer_link = std::make_unique<peer::GrpcPeerLink>(
        peer::PeerChannelOptions{peer::PeerTlsOf(config)},
        peer::PeerIdentity{NodeName(config), cluster_key_, node_key_, known_nodes_});
    cluster::ClusterOptions cluster_options;
    cluster_options.node_name = NodeName(config);
    cluster_options.peers = config.peers;
    // Gloo's connections go out from, and are met at, the address the peers
    // know this node by.
    if (absl::StatusOr<peer::PeerAddress> own =
            peer::ParsePeerAddress("node_name", NodeName(config), /*allow_port_zero=*/true);
        own.ok()) {
      cluster_options.bind_address = own->host;
    }
    cluster_options.hold_timeout = absl::Milliseconds(config.cluster_hold_timeout_ms);
    cluster_options.collective_timeout =
        absl::Milliseconds(config.cluster_collective_timeout_ms);
    cluster_options.max_jobs = config.cluster_max_jobs;
    cluster_options.max_user_priority = config.max_user_priority;
    cluster_options.started_unix_ms = absl::ToUnixMillis(absl::Now());
    cluster_options.flight = p.flight.get();
    p.cluster = std::make_unique<cluster::ClusterJobs>(cluster_options, *p.engine,
                                                       *p.admission, *p.peer_link);
    // A coordination holds no device but an executor: room for them beside
    // one job per device, so that a node's own part always finds one.
    queue_options.executor_threads += 2 * config.cluster_max_jobs;
    runner = [base = std::move(runner), cluster = p.cluster.get()](const jobs::JobRecord& job,
                                                                   const jobs::GraphPtr& graph,
                                                                   const runner::RunHooks& hooks) {
      return cluster::ClusterJobs::Handles(job) ? cluster->Run(job, graph, hooks)
                                                : base(job, graph, hooks);
    };
  }
  queue_options.retention.keep_jobs = config.keep_finished_jobs;
  queue_options.retention.keep_ms =
      static_cast<int64_t>(std::min(config.keep_finished_days, 1e6) * 24 * 3600 * 1000);
  absl::StatusOr<std::unique_ptr<jobs::JobQueue>> queue =
      jobs::JobQueue::Create(p.store.get(), std::move(runner), queue_options);
  *exit_code = kExitFailure;
  if (!queue.ok()) {
    return absl::Status(queue.status().code(),
                        absl::StrCat("cannot recover jobs: ", queue.status().message()));
  }
  p.queue = std::move(*queue);
  if (p.cluster != nullptr) p.cluster->SetJobQueue(p.queue.get());
  p.node = std::make_unique<node::NodeState>(*p.queue, *p.engine, config.state_dir);
  p.node->set_flight(p.flight.get());
  if (p.cluster != nullptr) {
    const cluster::TransportKind* transport = cluster::TransportFor(*p.engine);
    if (transport != nullptr) {
      if (absl::Status s = CheckGlooNetwork(config, transport->name); !s.ok()) {
        *exit_code = kExitUsage;
        return s;
      }
    }
    p.node->set_cluster(node::NodeState::ClusterInfo{
        NodeName(config), config.peers, transport != nullptr ? transport->name : "",
        transport != nullptr
            ? transport->note
            : "no jobs across daemons with ranks_per_gpu above 1 (NCCL refuses two ranks of "
              "one communicator on one GPU)"});
  }
  return absl::OkStatus();
}

absl::Status Daemon::StartServers(int* exit_code) {
  auto log = GetLogger("overlapd");
  Parts& p = *parts_;
  const DaemonConfig& config = config_;
  // The peer listener first: once users reach the daemon, so do its peers.
  if (!config.peer_listen.empty()) {
    peer::PeerServerOptions peer_options;
    peer_options.listen = config.peer_listen;
    peer_options.tls = peer::PeerTlsOf(config);
    peer_options.cluster_key = cluster_key_;
    peer_options.node_key = node_key_;
    peer_options.known_nodes = known_nodes_;
    peer_options.requests = {config.max_requests_in_flight, config.max_requests_per_user};
    peer_options.counters = &p.node->counters();
    absl::StatusOr<std::unique_ptr<peer::PeerServer>> peer_server = peer::PeerServer::Start(
        peer_options, p.cluster.get(),
        peer::PeerHello{p.engine->Name(), p.engine->DeviceCount(), config.node_name});
    if (!peer_server.ok()) {
      *exit_code = peer_server.status().code() == absl::StatusCode::kInvalidArgument ? kExitUsage
                                                                                     : kExitFailure;
      return absl::Status(
          peer_server.status().code(),
          absl::StrCat("cannot start the peer listener: ", peer_server.status().message()));
    }
    p.peer_server = std::move(*peer_server);
    const std::string node_keys =
        known_nodes_.empty() ? ""
                             : absl::StrCat(" and node keys (", known_nodes_.size(), " known)");
    const std::string proof =
        !p.peer_server->tls()
            ? (known_nodes_.empty() ? "the cluster key alone (any daemon holding it; no peers "
                                      "listed)"
                                    : "the cluster key" + node_keys)
        : cluster_key_.empty() ? "mutual TLS"
                               : "mutual TLS and the cluster key" + node_keys;
    log->info("peer listener on {}: node {}, peers: {}; callers proven by {}",
              p.peer_server->listen_address(), p.peer_server->node_name(),
              config.peers.empty() ? "none" : absl::StrJoin(config.peers, ", "), proof);
  }
  rpc::RpcServerOptions rpc_options;
  rpc_options.listen = config.listen;
  rpc_options.allow_insecure_tcp = config.allow_insecure_tcp;
  // Both checked with the config.
  rpc_options.socket_gid = *GroupId("socket_group", config.socket_group);
  rpc_options.admin_gid = *GroupId("admin_group", config.admin_group);
  rpc_options.jobs.max_user_priority = config.max_user_priority;
  rpc_options.tls = rpc::ServerTls{config.tls_cert, config.tls_key, config.tls_client_ca};
  rpc_options.jobs.max_watchers = config.max_watchers;
  rpc_options.jobs.max_watchers_per_user = config.max_watchers_per_user;
  rpc_options.requests = {config.max_requests_in_flight, config.max_requests_per_user};
  if (p.cluster != nullptr) {
    rpc_options.jobs.admit_spanning = [cluster = p.cluster.get()](
                                          JobSpec spec, const std::string& text,
                                          const std::string& source,
                                          const std::vector<std::string>& nodes) {
      return cluster->AdmitCoordinated(std::move(spec), text, source, nodes);
    };
    rpc_options.jobs.node_name = NodeName(config);
    rpc_options.jobs.local_job_id = [cluster = p.cluster.get()](const std::string& global_id) {
      return cluster->LocalJobId(global_id);
    };
    rpc_options.jobs.gather_flight = [cluster = p.cluster.get()](
                                         const std::string& global_id,
                                         const std::vector<std::string>& nodes) {
      return cluster->GatherFlight(global_id, nodes);
    };
  }
  rpc_options.jobs.flight = p.flight.get();
  rpc_options.max_spec_bytes = config.max_spec_bytes;
  RETURN_IF_ERROR(StartSessions(rpc_options.socket_gid, exit_code));
  rpc::RpcServerParts rpc_parts{*p.queue, *p.admission, *p.node, *p.tuning, *p.engine};
  if (p.session_socket != nullptr) {
    rpc_parts.sessions = &p.session_socket->registry();
    rpc_parts.lanes = p.session_lanes.get();
  }
  absl::StatusOr<std::unique_ptr<rpc::RpcServer>> server =
      rpc::RpcServer::Start(rpc_options, rpc_parts);
  if (!server.ok()) {
    // A setting, or a socket directory someone else owns, stays wrong until
    // someone acts: exit 2, which systemd does not restart.
    const absl::StatusCode code = server.status().code();
    *exit_code = code == absl::StatusCode::kInvalidArgument ||
                         code == absl::StatusCode::kPermissionDenied
                     ? kExitUsage
                     : kExitFailure;
    return absl::Status(server.status().code(), absl::StrCat("cannot start the gRPC server: ",
                                                             server.status().message()));
  }
  p.server = std::move(*server);
  if (!config.metrics_listen.empty()) {
    rpc::MetricsSessions sessions;
    if (p.session_socket != nullptr) {
      sessions = {&p.session_socket->registry(), p.session_lanes.get()};
    }
    rpc::MetricsOptions metrics_options;
    metrics_options.last_op_ttl_s = config.metrics_last_op_ttl_s;
    rpc::RpcServer* rpc_server = p.server.get();  // reset after the metrics
    metrics_options.latest_sample = [rpc_server] { return rpc_server->LatestNodeSample(); };
    absl::StatusOr<std::unique_ptr<rpc::MetricsExporter>> metrics = rpc::MetricsExporter::Start(
        config.metrics_listen, *p.node, *p.queue, metrics_options, sessions);
    *exit_code = kExitUsage;
    if (!metrics.ok()) return metrics.status();
    p.metrics = std::move(*metrics);
    log->info("metrics on http://{}:{}/metrics (health at /healthz)",
              config.metrics_listen.substr(0, config.metrics_listen.rfind(':')), p.metrics->port());
  }
  return absl::OkStatus();
}

absl::Status Daemon::StartSessions(int socket_gid, int* exit_code) {
  auto log = GetLogger("overlapd");
  Parts& p = *parts_;
  const DaemonConfig& config = config_;
  const std::string path = SessionSocketPath(config);
  if (path.empty()) return absl::OkStatus();
  if (p.engine->Shared() == nullptr) {
    log->info("sessions off: the {} backend cannot map another process's memory", p.engine->Name());
    return absl::OkStatus();
  }
  sessions::LanesOptions lanes_options;
  lanes_options.spin = absl::Milliseconds(config.session_poll_ms);
  lanes_options.graphs = config.session_graphs;
  absl::StatusOr<std::unique_ptr<sessions::SessionLanes>> lanes =
      sessions::SessionLanes::Start(*p.engine, lanes_options, p.device_lanes.get());
  if (!lanes.ok()) {
    *exit_code = kExitFailure;
    return absl::Status(lanes.status().code(),
                        absl::StrCat("cannot start the session lanes: ", lanes.status().message()));
  }
  p.session_lanes = std::move(*lanes);
  sessions::SessionSocketOptions options;
  options.path = path;
  options.socket_gid = socket_gid;
  options.limits.max_per_owner = config.session_max_per_owner;
  options.limits.max_mapped_bytes_per_owner = config.session_max_mapped_bytes;
  options.join_timeout = absl::Seconds(config.session_join_timeout_s);
  options.step_timeout = absl::Seconds(config.session_step_timeout_s);
  options.deferred_bound_ms = config.session_deferred_bound_ms;
  options.max_frame_bytes = config.max_spec_bytes + (64 << 10);
  absl::StatusOr<std::unique_ptr<sessions::SessionSocket>> socket = sessions::SessionSocket::Start(
      options, *p.engine, *p.admission, *p.session_lanes, p.queue.get());
  if (!socket.ok()) {
    p.session_lanes.reset();
    // A socket someone named is a setting to fix (exit 2); the default one,
    // taken by another daemon beside this one, leaves this one without sessions.
    if (config.session_socket.empty()) {
      log->warn("sessions off: {}", std::string(socket.status().message()));
      return absl::OkStatus();
    }
    *exit_code = kExitUsage;
    return absl::Status(socket.status().code(), absl::StrCat("cannot start the session socket: ",
                                                             socket.status().message()));
  }
  p.session_socket = std::move(*socket);
  log->info("sessions on unix:{} (at most {} per user, {} mapped bytes per user)", path,
            config.session_max_per_owner, config.session_max_mapped_bytes);
  return absl::OkStatus();
}

void Daemon::StartWatchers() {
  auto log = GetLogger("overlapd");
  Parts& p = *parts_;
  signal_thread_ = std::thread([&p, log] {
    const sigset_t signals = [] {
      sigset_t set;
      sigemptyset(&set);
      sigaddset(&set, SIGTERM);
      sigaddset(&set, SIGINT);
      return set;
    }();
    const timespec poll{0, 200 * 1000 * 1000};
    while (!p.threads_done.load()) {
      int sig = sigtimedwait(&signals, nullptr, &poll);
      if (sig <= 0) {
        sig = g_stray_signal;
        g_stray_signal = 0;
      }
      if (sig <= 0) continue;
      if (!p.stop.requested()) {
        log->info("{} received: draining", strsignal(sig));
        p.stop.Request(kExitOk, strsignal(sig));
      } else {
        log->warn("{} received again: cancelling running jobs now", strsignal(sig));
        p.queue->CancelRunning("cancelled: overlapd shutting down (second signal)");
      }
    }
  });
  health_thread_ = std::thread([&p, log] {
    const absl::Duration watchdog = WatchdogPingInterval();
    if (watchdog > absl::ZeroDuration()) {
      log->info("systemd watchdog on: pinging every {}", absl::FormatDuration(watchdog));
    }
    absl::Time last_ping = absl::InfinitePast();
    // Runs through the drain too (threads_done ends it), so that a long drain
    // is not taken for a hang.
    const absl::Duration period = watchdog > absl::ZeroDuration()
                                      ? std::min(absl::Milliseconds(500), watchdog)
                                      : absl::Milliseconds(500);
    while (!p.threads_done.load()) {
      // Once a stop is requested, Wait returns at once: sleep instead.
      if (p.stop.requested()) {
        absl::SleepFor(period);
      } else {
        p.stop.Wait(period);
      }
      if (watchdog > absl::ZeroDuration() && absl::Now() - last_ping >= watchdog) {
        if (p.queue->Responsive(watchdog / 2)) {
          Notify("WATCHDOG=1");
          last_ping = absl::Now();
        } else {
          log->error("the job queue did not answer within {}: withholding systemd's watchdog ping",
                     absl::FormatDuration(watchdog / 2));
        }
      }
      if (p.stop.requested()) continue;
      const engine::DeviceMonitor* monitor = p.engine->Monitor();
      if (monitor != nullptr && !monitor->Healthy()) {
        log->error(
            "engine {} is unhealthy (a device hit a sticky error): draining and exiting so that "
            "the service manager restarts overlapd",
            p.engine->Name());
        p.stop.Request(kExitFailure, "engine unhealthy");
      }
    }
  });
}

void Daemon::Wait() { parts_->stop.Wait(absl::InfiniteDuration()); }

int Daemon::Stop() {
  auto log = GetLogger("overlapd");
  Parts& p = *parts_;
  Notify(absl::StrCat("STOPPING=1\nSTATUS=draining (", p.stop.why(), ")"));
  p.server->SetServing(false);
  p.queue->StartDrain();
  bool stuck = false;
  if (!DrainWithinTimeout(*p.queue, absl::Seconds(config_.drain_timeout_s))) {
    const int cancelled = p.queue->CancelRunning(absl::StrFormat(
        "cancelled: overlapd shut down (drain timeout %gs)", config_.drain_timeout_s));
    log->warn("drain timeout ({}s): cancelled {} running job(s)", config_.drain_timeout_s,
              cancelled);
    stuck = !p.queue->WaitIdle(kCancelGrace);
  }
  p.threads_done.store(true);
  signal_thread_.join();
  health_thread_.join();
  if (stuck) {
    // A job that ignores cancellation cannot be joined; its row stays RUNNING and
    // the next start marks it FAILED "daemon restarted".
    log->error("{} job(s) did not stop after cancel; exiting without them",
               p.queue->RunningCount());
    p.server->Shutdown(kRpcGrace);
    spdlog::shutdown();
    std::_Exit(kExitFailure);
  }
  const int queued = p.queue->QueuedCount();
  // After the drain (a running job spanning daemons still talks to its peers
  // through it), before the job queue the handler uses.
  if (p.peer_server != nullptr) p.peer_server->Shutdown(kRpcGrace);
  p.peer_server.reset();
  p.metrics.reset();      // it reads the node's state and the job queue
  p.queue->Shutdown();  // ends WatchJob streams
  p.server->Shutdown(kRpcGrace);
  p.server.reset();
  // After the Node service that lists them, before the engine: running
  // sessions end CANCELLED and their buffers are unmapped.
  if (p.session_socket != nullptr) p.session_socket->Stop();
  p.session_lanes.reset();
  p.session_socket.reset();
  p.node.reset();
  p.queue.reset();
  log->info("overlapd stopped ({} queued job(s) kept for the next start)", queued);
  return p.stop.exit_code();
}

}  // namespace overlap
