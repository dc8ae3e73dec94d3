// Daemon configuration: built-in defaults, overridden by a YAML file, overridden
// by command-line flags (applied by overlapd's main).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace overlap {

// The most of a GPU's free memory its pools take at start, in percent: the rest
// is left to the CUDA context, cuBLASLt and NCCL.
inline constexpr int kPoolMaxPercentOfFree = 90;

struct DaemonConfig {
  std::string backend = "auto";  // auto | cuda | host
  std::string listen;            // empty = the default unix socket (see DefaultListenAddress)
  bool allow_insecure_tcp = false;  // allow host:port on non-loopback addresses
  // TLS on a HOST:PORT listen address (PEM files; "" = off). With
  // tls_client_ca, clients must present a certificate it signed (mutual TLS),
  // and the port may face the network without allow_insecure_tcp.
  std::string tls_cert;
  std::string tls_key;
  std::string tls_client_ca;
  // The unix socket's group ("" = the daemon's own): its members may connect
  // (mode 0660). The socket is made 0600 and handed to the group afterwards, so
  // it is never more open than that.
  std::string socket_group;
  // Its members (and root) are admins: they may cancel any job and change
  // node-wide state (tuning, Xid counts). "" = root only.
  std::string admin_group;
  std::string state_dir;         // empty = DefaultStateDir()
  std::string log_level = "info";

  // Host backend.
  int host_device_count = 2;
  int64_t host_device_memory_bytes = int64_t{2} << 30;
  bool hazard_checks = false;  // on in tests: a missing event wait fails the job
  // Failure injection into the host backend, for tests of the daemon's error
  // paths: call number host_fail_after (1-based) of host_fail_op fails as the
  // real library would; with host_fail_sticky the engine turns unhealthy.
  std::string host_fail_op;
  int host_fail_after = 1;
  bool host_fail_sticky = false;
  // Tests only: >= 0 gives the host backend's devices health readings, this
  // one with problems (HostEngineOptions::sick_device).
  int host_sick_device = -1;
  // Tests only: > 0 gives the host backend's devices an energy counter, each
  // drawing this many watts (HostEngineOptions::simulated_power_w).
  double host_simulated_power_w = 0;

  // CUDA backend.
  // Each rank's buffer pool, allocated at start: pool_bytes_per_device, or where
  // pool_percent_of_gpu > 0 (`pool_bytes_per_device: 80%`) that share of its
  // GPU's memory (split equally between the ranks of a GPU), so that one config
  // suits nodes of 80 GB and of 141 GB GPUs. Either way at most 90% of the
  // memory free at start (DevicePool::Create).
  int64_t pool_bytes_per_device = int64_t{16} << 30;
  double pool_percent_of_gpu = 0;
  int64_t gemm_workspace_bytes = int64_t{64} << 20;
  bool nvls_enable = false;  // NVLink multicast; off unless asked for
  // Ranks each GPU hosts: 2 makes one GPU a two-rank node, so that multi-rank
  // schedules run (and are checked against float64) on a machine with fewer
  // GPUs. NCCL allows one rank per GPU, so there the library collectives are
  // stood in for by copies and a reduction kernel. Timings of such a node say
  // nothing about a real one: its ranks share SMs, HBM and copy engines.
  int ranks_per_gpu = 1;
  // Non-blocking NCCL communicators never block the host inside NCCL, which is
  // what lets the watchdog abort a hung collective. Blocking ones launched each
  // collective ~85 us sooner on H200, but a held-back peer then kept the host
  // inside NCCL where the watchdog cannot act (both measured, docs/PERFORMANCE.md).
  // Behind launch gates that launch latency no longer shows in step times.
  bool nccl_nonblocking = true;
  double collective_timeout_s = 60;  // watchdog on a hung collective
  // SM budget where NCCL's kernels run beside a GEMM (overlapped schedules over
  // NCCL): their communicators use at most this many CTAs (ncclConfig_t.maxCTAs)
  // and the GEMMs beside them target the device's SMs minus this many
  // (cuBLASLt's SM count target). Stream priority does not take SMs back from a
  // GEMM that already holds them. 0 = no budget: NCCL's own CTA count, GEMMs
  // on every SM.
  int nccl_overlap_ctas = 0;
  // The deferred lane's communicators (a layer step's gradient all-reduces
  // under scheduler: dynamic) use at most this many CTAs (ncclConfig_t.maxCTAs):
  // their kernels spin while they wait for peers, and few CTAs leave the SMs
  // to the GEMMs beside them. 0 = NCCL's own count.
  int deferred_lane_ctas = 4;
  // Timed iterations of copy-engine schedules replay one captured CUDA graph:
  // 3-13% shorter steps on the small shapes of the sweep (docs/PERFORMANCE.md).
  bool graph_replay = true;
  // In those graphs, consecutive GEMMs on a stream that share no written bytes
  // (the pieces of a ring) are joined by programmatic edges, so the next piece
  // may fill the SMs the previous one's last wave leaves idle (gemm_chain.h).
  // Off: on H200 it took nothing off a piece boundary (a full edge there costs
  // 2-3%), and with 8 pieces it lost up to 5% (docs/PERFORMANCE.md, 2026-12-01).
  bool programmatic_edges = false;
  // Each timed iteration's streams wait at a launch gate until the host has
  // enqueued all of it, so that step times hold the GPUs' time and not the
  // host's enqueue latency (engine.h, HoldStreams).
  bool launch_gate = true;
  // Before autotune's rounds, the timed rounds and the layer step, the GPUs run
  // the op's GEMM this long (with the heat head start), so that every phase
  // starts in the power state a training loop runs in, not rested from the
  // host's setup and checks (job_runner.h, kPreheatMs). 0 = off.
  double preheat_ms = 300;

  // Prometheus metrics on HOST:PORT (GET /metrics); "" = off. Read-only, no
  // authentication: bind it where only the scraper can reach it.
  std::string metrics_listen;
  // Gloo (the host backend's transport between daemons) sends tensors as
  // plaintext TCP: off loopback it runs only where the operator states that
  // the nodes' network is private.
  bool gloo_private_network = false;
  // How long a finished op's last_op_* series stay on /metrics (seconds).
  double metrics_last_op_ttl_s = 900;

  // Jobs that span daemons, one per node (docs/CONFIGURATION.md, "Jobs across
  // nodes"). Daemons speak to each other on the peer listener (peer.proto).
  // HOST:PORT of the peer listener (port 0: any free port); "" = none, and the
  // daemon joins no cluster.
  std::string peer_listen;
  // HOST:PORT of the other daemons this one runs jobs with, as each names
  // itself (its node_name): it coordinates jobs over these nodes only, and
  // joins jobs only from a coordinator listed here.
  std::vector<std::string> peers;
  // HOST:PORT this daemon goes by among its peers, the entry the others list
  // in their peers; "" = peer_listen (its bound address when the port is 0).
  std::string node_name;
  // Mutual TLS between daemons (PEM files, all three or none): the listener
  // presents cert/key and requires a client certificate signed by peer_tls_ca;
  // calls to peers present the same cert/key and check the peer's against
  // peer_tls_ca. Required when peer_listen is not a loopback address.
  std::string peer_tls_cert;
  std::string peer_tls_key;
  std::string peer_tls_ca;
  // The cluster key (server/peer/peer_auth.h): a secret file, mode 0600, the
  // same bytes on every node of the cluster, that every peer call proves
  // itself with. "" = STATE_DIR/cluster.key, made when missing (copy it to
  // the other nodes). Required without peer TLS; with it, also checked.
  std::string peer_key_file;
  // This node's own key (server/peer/node_keys.h): an Ed25519 private key,
  // mode 0600, that signs its peer calls and answers, so that a peer can tell
  // which daemon holding the cluster key speaks. "" = STATE_DIR/node.key, made
  // when missing (its public key is logged at start).
  std::string peer_node_key_file;
  // The public keys of the nodes this daemon runs jobs with, one
  // `NODE PUBLIC_KEY` a line. Required without peer TLS when peers are listed:
  // every peer must be in it; a call or answer not signed by the listed key
  // is UNAUTHENTICATED.
  std::string peer_known_nodes_file;
  // How long a coordinator waits for every node to hold its part before it
  // releases the reservation and tries again.
  int cluster_hold_timeout_ms = 10000;
  // Gloo's timeout for connecting and for every collective across daemons.
  int cluster_collective_timeout_ms = 60000;
  // Jobs spanning daemons that this daemon coordinates at once.
  int cluster_max_jobs = 4;
  // NCCL's settings for the communicators this daemon makes, as NAME=value
  // (NCCL_SOCKET_IFNAME, NCCL_IB_HCA, ...): set in its environment before the
  // engine starts, where NCCL reads them; `overlapctl node` shows them.
  std::vector<std::string> nccl_env;

  // Limits.
  int max_iterations = 10000;
  int max_queued_jobs = 256;
  double drain_timeout_s = 30;
  // Retention of finished jobs in the job database (0 = no limit). What a pruned
  // job counted for (stats, ids) stays; queued and running jobs are never pruned.
  // A job row takes a few KiB (a bench sweep tens of KiB), so 10000 stay well under 1 GiB.
  int keep_finished_jobs = 10000;
  double keep_finished_days = 0;
  int64_t max_spec_bytes = 1 << 20;
  // Ops one job may have; more is INVALID_ARGUMENT. A 126-layer model's
  // forward and backward (`overlapctl graph --layers`) is ~2,500.
  int max_ops_per_job = 4096;
  // The flight recorder's ring per communicator, lane and rank: the last this
  // many collectives each (docs/OPERATIONS.md, "A job that hangs or aborts");
  // 0 turns it off (the daemon then wraps no flight::FlightEngine).
  int flight_recorder_entries = 2000;
  // WatchJob streams open at once (`submit --wait`, `watch`); each holds one
  // of the daemon's threads. Past this a watch is RESOURCE_EXHAUSTED.
  int max_watchers = 256;
  // Of those, one caller's share (0 = a quarter of max_watchers); admins and
  // the socket's owner have a reserve users cannot take (server/rpc/watch_slots.h).
  int max_watchers_per_user = 0;
  // Job calls (and, on the peer port, peer calls) worked on at once, in all
  // and from one caller; past either a call is RESOURCE_EXHAUSTED at once, so
  // that one user's flood cannot take every handler thread from the others.
  int max_requests_in_flight = 64;
  int max_requests_per_user = 16;
  // What a user who is not an admin may ask for: a priority up to this, and
  // this many queued jobs at once (0 = no quota beyond max_queued_jobs).
  int max_user_priority = 10;
  int max_queued_jobs_per_user = 64;

  // Sessions (server/sessions/, docs/SESSIONS.md): training processes' ranks
  // hand the daemon their own tensors. "" = overlapd-session.sock beside the
  // API socket (SessionSocketPath), "off" = no sessions.
  std::string session_socket;
  int session_max_per_owner = 8;
  int64_t session_max_mapped_bytes = int64_t{64} << 30;  // per owner, every session together
  double session_join_timeout_s = 60;
  double session_step_timeout_s = 30;
  double session_deferred_bound_ms = 20;
  // After a rank posts, the lanes' thread polls the command rings this long
  // (one core, yielding to other threads) before it sleeps in epoll again: a
  // command posted within it is taken in about a microsecond instead of after
  // a wake-up (100 us and more on an idle or virtual CPU). 0 = never poll.
  int session_poll_ms = 100;
  // A session's op is replayed as one CUDA graph per command from its second
  // command on (where graph_replay is on and the op runs on one engine device: one rank):
  // the lanes' host time per command drops to one graph launch.
  bool session_graphs = true;
};

// Defaults merged with the YAML text; unknown keys are INVALID_ARGUMENT naming the key.
absl::StatusOr<DaemonConfig> ParseDaemonConfig(absl::string_view yaml_text);
absl::StatusOr<DaemonConfig> LoadDaemonConfig(const std::string& path);
// The checks between the cluster keys that need no address parsing: peers and
// node_name need peer_listen, no peer is listed twice, and this daemon's own
// name (NodeName) is not among its peers. INVALID_ARGUMENT naming the key.
// ParseDaemonConfig runs it; the peer listener (server/peer/peer_config.h)
// runs it with the checks of the addresses and TLS files.
absl::Status ValidateClusterKeys(const DaemonConfig& config);
// INVALID_ARGUMENT naming the entry of nccl_env that is not NCCL_NAME=value,
// or sets NCCL_NVLS_ENABLE (the key nvls_enable's).
absl::Status ValidateNcclEnv(const DaemonConfig& config);
// The name this daemon goes by among its peers: node_name, else peer_listen.
std::string NodeName(const DaemonConfig& config);
// The shipped config (deploy/overlapd.yaml, `overlapd --print-default-config`): every key but
// the test-only ones, commented out at its default with its description.
std::string DefaultConfigYaml();

// The pool size as the config and --pool-bytes-per-device take it: a byte size
// (16GiB) or a share of the GPU's memory (80%, more than 0 and at most 100).
// A size sets pool_bytes_per_device and clears pool_percent_of_gpu; a share
// sets pool_percent_of_gpu, which then takes precedence.
absl::Status ParsePoolSize(absl::string_view text, DaemonConfig* config);
// The form ParsePoolSize reads back: "16GiB" or "80%".
std::string FormatPoolSize(const DaemonConfig& config);
// `config` as YAML that ParseDaemonConfig reads back to the same values (what
// `overlapd --print-config` shows: the config file and flags merged).
std::string ConfigYaml(const DaemonConfig& config);

// unix:/run/overlapd/overlapd.sock as root, else unix:$XDG_RUNTIME_DIR/overlapd.sock
// (falling back to /tmp/overlapd-$UID/overlapd.sock without XDG_RUNTIME_DIR).
std::string DefaultListenAddress();
// Where overlapctl looks without --addr: DefaultListenAddress(), except that a
// user other than root whose own socket is not there reaches the system daemon
// (unix:/run/overlapd/overlapd.sock) when that socket exists.
std::string DefaultClientAddress();
// The session socket's path: session_socket as given ("unix:" taken off), else
// beside the API socket and named after it (overlapd.sock ->
// overlapd-session.sock); "" for "off", and for a daemon listening on TCP
// without a session_socket.
std::string SessionSocketPath(const DaemonConfig& config);
// The socket the system daemon (deploy/overlapd.service) listens on.
inline constexpr char kSystemSocketPath[] = "/run/overlapd/overlapd.sock";
// /var/lib/overlapd as root, else $XDG_STATE_HOME/overlapd (~/.local/state/overlapd).
std::string DefaultStateDir();

}  // namespace overlap
