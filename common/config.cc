#include "common/config.h"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/byte_size.h"
#include "common/config_internal.h"
#include "common/daemon_settings.h"
#include "common/private_dir.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "common/yaml_util.h"

namespace overlap {
namespace {

using yaml_util::Describe;
using yaml_util::FieldError;

// NCCL's channel limit (MAXCHANNELS); one CTA per channel.
constexpr int kMaxNcclCtas = 64;
// A poll window of a minute already keeps a core busy through any step gap.
constexpr int kMaxSessionPollMs = 60000;

// One YAML key of DaemonConfig: how to read it and how to print it.
struct Field {
  const char* name;
  const char* comment;
  std::function<absl::Status(const YAML::Node&, DaemonConfig*)> parse;
  std::function<std::string(const DaemonConfig&)> format;
  // Left out of the shipped config (--print-default-config): fault injection for tests.
  bool test_only = false;
};

Field TestOnly(Field field) {
  field.test_only = true;
  return field;
}

// A YAML double-quoted scalar.
std::string YamlQuote(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7F) {
      absl::StrAppendFormat(&out, "\\x%02x", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

// Shortest form that reads back as the same double.
std::string FormatDouble(double value) {
  for (int precision = 6; precision <= 17; ++precision) {
    std::string text = absl::StrFormat("%.*g", precision, value);
    double parsed = 0;
    if (absl::SimpleAtod(text, &parsed) && parsed == value) return text;
  }
  return absl::StrFormat("%.17g", value);
}

absl::Status ValidateBackend(const std::string& value) {
  if (value == "auto" || value == "cuda" || value == "host") return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("must be auto, cuda or host (got ", YamlQuote(value), ")"));
}

absl::Status ValidateLogLevel(const std::string& value) {
  if (IsValidLogLevel(value)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "must be trace, debug, info, warn, error, critical or off (got ", YamlQuote(value), ")"));
}

// A null value (`listen:`) means the empty string, i.e. the computed default.
Field StringField(const char* name, const char* comment, std::string DaemonConfig::*member,
                  absl::Status (*validate)(const std::string&) = nullptr) {
  return {name, comment,
          [member, validate](const YAML::Node& node, DaemonConfig* config) -> absl::Status {
            std::string value;
            if (!node.IsNull()) {
              ASSIGN_OR_RETURN(value, yaml_util::ReadString(node));
            }
            if (validate != nullptr) RETURN_IF_ERROR(validate(value));
            config->*member = std::move(value);
            return absl::OkStatus();
          },
          [member](const DaemonConfig& config) { return YamlQuote(config.*member); }};
}

// A YAML list of strings; null (`peers:`) is the empty list.
Field StringListField(const char* name, const char* comment,
                      std::vector<std::string> DaemonConfig::*member) {
  return {
      name, comment,
      [member](const YAML::Node& node, DaemonConfig* config) -> absl::Status {
        std::vector<std::string> values;
        if (!node.IsNull()) {
          if (!node.IsSequence()) {
            return absl::InvalidArgumentError(absl::StrCat(
                "must be a list of strings, e.g. [\"10.0.0.2:7000\"] (got ", Describe(node), ")"));
          }
          for (size_t i = 0; i < node.size(); ++i) {
            absl::StatusOr<std::string> value = yaml_util::ReadString(node[i]);
            if (!value.ok()) {
              return absl::InvalidArgumentError(
                  absl::StrCat("[", i, "]: ", value.status().message()));
            }
            values.push_back(*std::move(value));
          }
        }
        config->*member = std::move(values);
        return absl::OkStatus();
      },
      [member](const DaemonConfig& config) {
        std::vector<std::string> quoted;
        for (const std::string& value : config.*member) quoted.push_back(YamlQuote(value));
        return absl::StrCat("[", absl::StrJoin(quoted, ", "), "]");
      }};
}

Field BoolField(const char* name, const char* comment, bool DaemonConfig::*member) {
  return {name, comment,
          [member](const YAML::Node& node, DaemonConfig* config) -> absl::Status {
            ASSIGN_OR_RETURN(config->*member, yaml_util::ReadBool(node));
            return absl::OkStatus();
          },
          [member](const DaemonConfig& config) {
            return std::string(config.*member ? "true" : "false");
          }};
}

Field IntField(const char* name, const char* comment, int DaemonConfig::*member,
               int min_value = 1, int max_value = std::numeric_limits<int>::max()) {
  return {name, comment,
          [member, min_value, max_value](const YAML::Node& node,
                                         DaemonConfig* config) -> absl::Status {
            ASSIGN_OR_RETURN(int64_t value, yaml_util::ReadInt64(node, min_value, max_value));
            config->*member = static_cast<int>(value);
            return absl::OkStatus();
          },
          [member](const DaemonConfig& config) { return absl::StrCat(config.*member); }};
}

Field BytesField(const char* name, const char* comment, int64_t DaemonConfig::*member,
                 bool allow_zero) {
  return {name, comment,
          [member, allow_zero](const YAML::Node& node, DaemonConfig* config) -> absl::Status {
            if (!node.IsScalar()) {
              return absl::InvalidArgumentError(absl::StrCat(
                  "must be a byte size like 4096, 512MiB or 2GiB (got ", Describe(node), ")"));
            }
            ASSIGN_OR_RETURN(int64_t value, ParseByteSize(node.Scalar()));
            if (value == 0 && !allow_zero) {
              return absl::InvalidArgumentError("must be greater than zero");
            }
            config->*member = value;
            return absl::OkStatus();
          },
          [member](const DaemonConfig& config) { return FormatByteSize(config.*member); }};
}

Field NumberField(const char* name, const char* comment, double DaemonConfig::*member,
                  bool allow_zero) {
  return {name, comment,
          [member, allow_zero](const YAML::Node& node, DaemonConfig* config) -> absl::Status {
            ASSIGN_OR_RETURN(config->*member, yaml_util::ReadDouble(node, allow_zero));
            return absl::OkStatus();
          },
          [member](const DaemonConfig& config) { return FormatDouble(config.*member); }};
}

const std::vector<Field>& Fields() {
  static const std::vector<Field>* fields = new std::vector<Field>{
      StringField("backend", "auto | cuda | host (auto: cuda when a GPU is usable)",
                  &DaemonConfig::backend, ValidateBackend),
      StringField("listen", "\"\" = the default unix socket; or unix:PATH, or HOST:PORT",
                  &DaemonConfig::listen),
      BoolField("allow_insecure_tcp",
                "allow HOST:PORT on non-loopback addresses without mutual TLS",
                &DaemonConfig::allow_insecure_tcp),
      StringField("tls_cert", "TLS on HOST:PORT: PEM certificate chain file (\"\" = no TLS)",
                  &DaemonConfig::tls_cert),
      StringField("tls_key", "TLS on HOST:PORT: PEM private key file", &DaemonConfig::tls_key),
      StringField("tls_client_ca",
                  "PEM CA file; clients must present a certificate it signed (mutual TLS)",
                  &DaemonConfig::tls_client_ca),
      StringField("socket_group",
                  "unix socket: mode 0660 to this group, whose members may use the daemon "
                  "(\"\" = the daemon's own group)",
                  &DaemonConfig::socket_group),
      StringField("admin_group",
                  "its members (and root) may cancel any job and forget tuning or Xids (\"\" = "
                  "root only)",
                  &DaemonConfig::admin_group),
      StringField("state_dir", "\"\" = the default state directory (job database)",
                  &DaemonConfig::state_dir),
      StringField("log_level", "trace | debug | info | warn | error | critical | off",
                  &DaemonConfig::log_level, ValidateLogLevel),
      IntField("host_device_count", "host backend: simulated devices",
               &DaemonConfig::host_device_count),
      BytesField("host_device_memory_bytes", "host backend: memory per simulated device",
                 &DaemonConfig::host_device_memory_bytes, /*allow_zero=*/false),
      BoolField("hazard_checks", "host backend: a missing event wait fails the job",
                &DaemonConfig::hazard_checks),
      TestOnly(StringField("host_fail_op", "tests only: host backend op to fail (\"\" = none)",
                           &DaemonConfig::host_fail_op)),
      TestOnly(IntField("host_fail_after",
                        "tests only: which call of host_fail_op fails (1 = first)",
                        &DaemonConfig::host_fail_after)),
      TestOnly(BoolField("host_fail_sticky", "tests only: the injected failure loses the device",
                         &DaemonConfig::host_fail_sticky)),
      TestOnly(
          IntField("host_sick_device",
                   "tests only: >= 0 gives the host backend's devices health readings, this "
                   "one with a PCIe link at x8 and uncorrectable ECC errors (-1 = no readings)",
                   &DaemonConfig::host_sick_device, /*min_value=*/-1)),
      TestOnly(NumberField("host_simulated_power_w",
                           "tests only: > 0 gives the host backend's devices an energy counter, "
                           "each drawing this many watts (0 = none)",
                           &DaemonConfig::host_simulated_power_w, /*allow_zero=*/true)),
      Field{"pool_bytes_per_device",
            "cuda backend: buffer pool per GPU, allocated at start: a size, or a share of the "
            "GPU's memory like 80% (at most 90% of what is free: a larger size takes that)",
            [](const YAML::Node& node, DaemonConfig* config) -> absl::Status {
              if (!node.IsScalar()) {
                return absl::InvalidArgumentError(
                    absl::StrCat("must be a byte size like 16GiB or a share like 80% (got ",
                                 Describe(node), ")"));
              }
              return ParsePoolSize(node.Scalar(), config);
            },
            FormatPoolSize},
      BytesField("gemm_workspace_bytes", "cuda backend: cuBLASLt workspace per stream",
                 &DaemonConfig::gemm_workspace_bytes, /*allow_zero=*/true),
      BoolField("nvls_enable", "cuda backend: NVLink multicast (NVLS)", &DaemonConfig::nvls_enable),
      IntField("ranks_per_gpu",
               "cuda backend: ranks per GPU (> 1 checks multi-rank schedules on fewer GPUs; "
               "copies stand in for NCCL and timings mean nothing)",
               &DaemonConfig::ranks_per_gpu, 1, 8),
      BoolField("nccl_nonblocking",
                "cuda backend: false launches faster, but a hang can block inside NCCL",
                &DaemonConfig::nccl_nonblocking),
      BoolField("graph_replay", "cuda backend: replay p2p schedules' iterations as CUDA graphs",
                &DaemonConfig::graph_replay),
      BoolField("programmatic_edges",
                "cuda backend: in those graphs, GEMM pieces start as the previous one's last "
                "wave drains",
                &DaemonConfig::programmatic_edges),
      BoolField("launch_gate",
                "hold each timed iteration until the host has enqueued it (time the GPUs only)",
                &DaemonConfig::launch_gate),
      NumberField("preheat_ms",
                  "cuda backend: run the op's GEMM this long before each measured phase "
                  "(0 = off)",
                  &DaemonConfig::preheat_ms, /*allow_zero=*/true),
      IntField("nccl_overlap_ctas",
               "cuda backend: CTAs NCCL may use beside a GEMM, whose SMs it leaves free "
               "(0 = no budget)",
               &DaemonConfig::nccl_overlap_ctas, 0, kMaxNcclCtas),
      IntField("deferred_lane_ctas",
               "cuda backend: CTAs the deferred lane's NCCL communicators may use (0 = NCCL's "
               "choice)",
               &DaemonConfig::deferred_lane_ctas, 0, kMaxNcclCtas),
      NumberField("collective_timeout_s", "abort a collective hung this long (seconds)",
                  &DaemonConfig::collective_timeout_s, /*allow_zero=*/false),
      StringField("metrics_listen",
                  "Prometheus /metrics on HOST:PORT, e.g. 127.0.0.1:9464 (\"\" = off)",
                  &DaemonConfig::metrics_listen),
      NumberField("metrics_last_op_ttl_s",
                  "how long the last op's series (overlapd_last_op_*) stay after its job ended, "
                  "so that they and alerts on them go stale",
                  &DaemonConfig::metrics_last_op_ttl_s, /*allow_zero=*/false),
      StringField("peer_listen",
                  "jobs across nodes: HOST:PORT other daemons reach this one on (\"\" = "
                  "none: joins no cluster)",
                  &DaemonConfig::peer_listen),
      StringListField("peers",
                      "HOST:PORT of the other daemons this one runs jobs with (each as its "
                      "node_name)",
                      &DaemonConfig::peers),
      StringField("node_name", "HOST:PORT this daemon goes by among its peers (\"\" = peer_listen)",
                  &DaemonConfig::node_name),
      StringField("peer_tls_cert",
                  "PEM certificate chain the peer listener and calls to peers present "
                  "(required off loopback)",
                  &DaemonConfig::peer_tls_cert),
      StringField("peer_tls_key", "PEM private key of peer_tls_cert", &DaemonConfig::peer_tls_key),
      StringField("peer_tls_ca", "PEM CA that signed the peers' certificates (mutual TLS)",
                  &DaemonConfig::peer_tls_ca),
      StringField("peer_key_file",
                  "the cluster key every peer call proves itself with, the same file on every "
                  "node, mode 0600 (\"\" = STATE_DIR/cluster.key, made when missing)",
                  &DaemonConfig::peer_key_file),
      StringField("peer_node_key_file",
                  "this node's own key, signing its peer calls and answers, mode 0600 (\"\" = "
                  "STATE_DIR/node.key, made when missing)",
                  &DaemonConfig::peer_node_key_file),
      StringField("peer_known_nodes_file",
                  "the peers' public keys, one `NODE PUBLIC_KEY` a line (required with peers "
                  "and no peer TLS)",
                  &DaemonConfig::peer_known_nodes_file),
      IntField("cluster_hold_timeout_ms",
               "a coordinator waits this long for every node to hold its part, then retries",
               &DaemonConfig::cluster_hold_timeout_ms),
      BoolField("gloo_private_network",
                "the network between the nodes is private: lets jobs across daemons run over "
                "Gloo, whose data is plaintext TCP, off loopback (the host backend)",
                &DaemonConfig::gloo_private_network),
      IntField("cluster_collective_timeout_ms",
               "Gloo's timeout to connect and for each collective across daemons",
               &DaemonConfig::cluster_collective_timeout_ms),
      IntField("cluster_max_jobs", "jobs across nodes this daemon coordinates at once",
               &DaemonConfig::cluster_max_jobs),
      StringListField("nccl_env",
                      "NCCL settings for its communicators, e.g. [\"NCCL_SOCKET_IFNAME=eth0\"]",
                      &DaemonConfig::nccl_env),
      IntField("max_iterations", "largest iterations/warmup a job may ask for",
               &DaemonConfig::max_iterations),
      IntField("max_queued_jobs", "submissions beyond this are RESOURCE_EXHAUSTED",
               &DaemonConfig::max_queued_jobs),
      NumberField("drain_timeout_s", "on shutdown, wait this long for the running job",
                  &DaemonConfig::drain_timeout_s, /*allow_zero=*/true),
      IntField("keep_finished_jobs",
               "the job database keeps this many finished jobs, the last to end (0 = all)",
               &DaemonConfig::keep_finished_jobs, 0),
      NumberField("keep_finished_days",
                  "and deletes finished jobs older than this many days (0 = never)",
                  &DaemonConfig::keep_finished_days, /*allow_zero=*/true),
      BytesField("max_spec_bytes", "largest job spec accepted", &DaemonConfig::max_spec_bytes,
                 /*allow_zero=*/false),
      IntField("max_ops_per_job", "ops one job may have (more is INVALID_ARGUMENT)",
               &DaemonConfig::max_ops_per_job),
      IntField("flight_recorder_entries",
               "collectives the flight recorder keeps per communicator, lane and rank (0 = "
               "off: nothing is recorded, and a hang's verdict names no rank)",
               &DaemonConfig::flight_recorder_entries, 0),
      IntField("max_watchers",
               "WatchJob streams open at once, each holding a thread (more is "
               "RESOURCE_EXHAUSTED)",
               &DaemonConfig::max_watchers),
      IntField("max_watchers_per_user",
               "of those, one user, certificate or anonymous TCP at once (0 = a quarter of "
               "max_watchers; admins and the socket's owner share a reserve beyond the users')",
               &DaemonConfig::max_watchers_per_user, 0),
      IntField("max_requests_in_flight",
               "job calls (submit, get, list, cancel) the daemon works on at once, and peer "
               "calls (more is RESOURCE_EXHAUSTED)",
               &DaemonConfig::max_requests_in_flight),
      IntField("max_requests_per_user",
               "of those, from one user, certificate or peer node at once (more is "
               "RESOURCE_EXHAUSTED)",
               &DaemonConfig::max_requests_per_user),
      IntField("max_user_priority",
               "the highest priority a user who is not an admin may ask for (above: "
               "PERMISSION_DENIED)",
               &DaemonConfig::max_user_priority, std::numeric_limits<int>::min()),
      IntField("max_queued_jobs_per_user",
               "queued jobs one user may have (0 = no quota; above: RESOURCE_EXHAUSTED)",
               &DaemonConfig::max_queued_jobs_per_user, 0),
      StringField("session_socket",
                  "training processes' session socket (\"\" = beside the API socket, named after "
                  "it: overlapd-session.sock; none when listening on TCP; \"off\" = no sessions)",
                  &DaemonConfig::session_socket),
      IntField("session_max_per_owner",
               "sessions one user may have open at once (more is RESOURCE_EXHAUSTED)",
               &DaemonConfig::session_max_per_owner),
      BytesField("session_max_mapped_bytes",
                 "bytes of one user's tensors the daemon maps, every session together (more is "
                 "RESOURCE_EXHAUSTED)",
                 &DaemonConfig::session_max_mapped_bytes, /*allow_zero=*/false),
      NumberField("session_join_timeout_s",
                  "a session starts once every rank has; a rank waits this long for the others",
                  &DaemonConfig::session_join_timeout_s, /*allow_zero=*/false),
      NumberField("session_step_timeout_s",
                  "a session's step whose inputs are not ready this long fails "
                  "(DEADLINE_EXCEEDED)",
                  &DaemonConfig::session_step_timeout_s, /*allow_zero=*/false),
      NumberField("session_deferred_bound_ms",
                  "a deferred session's collective yields to critical work at most this long",
                  &DaemonConfig::session_deferred_bound_ms, /*allow_zero=*/false),
      IntField("session_poll_ms",
               "after a rank posts, the session lanes poll the command rings this long (a "
               "core, yielding) before sleeping until a doorbell (0 = never poll)",
               &DaemonConfig::session_poll_ms, 0, kMaxSessionPollMs),
      BoolField("session_graphs",
                "cuda backend: replay each session op as a CUDA graph from its second command "
                "(needs graph_replay; ops of one rank, e.g. tp 1)",
                &DaemonConfig::session_graphs),
  };
  return *fields;
}

const Field* FindField(absl::string_view key) {
  for (const Field& f : Fields()) {
    if (key == f.name) return &f;
  }
  return nullptr;
}

absl::StatusOr<DaemonConfig> ParseRoot(const YAML::Node& root) {
  DaemonConfig config;
  if (root.IsNull()) return config;  // an empty file: all defaults
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config must be a mapping of keys to values (got ", Describe(root), ")"));
  }
  std::set<std::string> seen;
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string key = it->first.IsScalar() ? it->first.Scalar() : "";
    const Field* field = FindField(key);
    if (field == nullptr) {
      std::vector<const char*> names;
      for (const Field& f : Fields()) names.push_back(f.name);
      return absl::InvalidArgumentError(absl::StrCat("unknown config key ", Describe(it->first),
                                                     " (known: ", absl::StrJoin(names, ", "), ")"));
    }
    if (!seen.insert(key).second) {
      return absl::InvalidArgumentError(absl::StrCat("duplicate config key ", Describe(it->first)));
    }
    absl::Status status = field->parse(it->second, &config);
    if (!status.ok()) {
      // A list's entry error starts with its index: "peers[1]: ...", not "peers: [1]: ...".
      if (absl::StartsWith(status.message(), "[")) {
        return absl::InvalidArgumentError(absl::StrCat(key, status.message()));
      }
      return FieldError(key, status.message());
    }
  }
  RETURN_IF_ERROR(ValidateAcrossKeys(config));
  return config;
}

// Lists are the one kind whose flag value is YAML text; every other value is
// the flag's text as one scalar, so that a path or address is never read as
// YAML ("[", "&", "*" and "#" mean nothing there).
bool TakesAList(absl::string_view key) { return key == "peers" || key == "nccl_env"; }

}  // namespace

std::vector<SettingDescription> DescribeSettings() {
  const DaemonConfig defaults;
  std::vector<SettingDescription> settings;
  for (const Field& f : Fields()) {
    const std::string value = f.format(defaults);
    settings.push_back(
        {f.name, f.comment, value, value == "true" || value == "false", f.test_only});
  }
  return settings;
}

std::string FlagName(absl::string_view key) {
  std::string flag = absl::StrCat("--", key);
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

absl::Status ApplySetting(absl::string_view key, absl::string_view value, DaemonConfig* config) {
  const Field* field = FindField(key);
  if (field == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("unknown config key \"", key, "\""));
  }
  absl::Status status;
  if (TakesAList(key)) {
    absl::StatusOr<YAML::Node> node = yaml_util::LoadDocument(value, "");
    status = node.ok() ? field->parse(*node, config) : node.status();
  } else {
    status = field->parse(YAML::Node(std::string(value)), config);
  }
  if (status.ok()) return status;
  return absl::InvalidArgumentError(absl::StrCat(FlagName(key), ": ", status.message()));
}

absl::Status ValidateAcrossKeys(const DaemonConfig& config) {
  RETURN_IF_ERROR(ValidateClusterKeys(config));
  return ValidateNcclEnv(config);
}

std::string NodeName(const DaemonConfig& config) {
  return config.node_name.empty() ? config.peer_listen : config.node_name;
}

absl::Status ValidateNcclEnv(const DaemonConfig& config) {
  for (size_t i = 0; i < config.nccl_env.size(); ++i) {
    const std::string& entry = config.nccl_env[i];
    const size_t eq = entry.find('=');
    const std::string name = entry.substr(0, eq);
    if (eq == std::string::npos || eq == 0 || !absl::StartsWith(name, "NCCL_")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "nccl_env[", i, "]: \"", entry, "\" is not NCCL_NAME=value (e.g. NCCL_SOCKET_IFNAME=eth0)"));
    }
    if (name == "NCCL_NVLS_ENABLE") {
      return absl::InvalidArgumentError(
          absl::StrCat("nccl_env[", i, "]: NCCL_NVLS_ENABLE is the key nvls_enable's"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateClusterKeys(const DaemonConfig& config) {
  if (config.peer_listen.empty()) {
    if (!config.peers.empty()) {
      return absl::InvalidArgumentError(
          "peers: needs peer_listen, the listener the peers reach this daemon on");
    }
    if (!config.node_name.empty()) {
      return absl::InvalidArgumentError(
          "node_name: needs peer_listen, the listener the peers reach this daemon on");
    }
    return absl::OkStatus();
  }
  const std::string self = NodeName(config);
  for (size_t i = 0; i < config.peers.size(); ++i) {
    const std::string& peer = config.peers[i];
    if (peer.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("peers[", i, "]: empty (expected HOST:PORT)"));
    }
    if (peer == self) {
      return absl::InvalidArgumentError(absl::StrCat(
          "peers[", i, "]: ", YamlQuote(peer), " is this daemon itself (its ",
          config.node_name.empty() ? "peer_listen" : "node_name", "): list only the others"));
    }
    for (size_t j = 0; j < i; ++j) {
      if (config.peers[j] == peer) {
        return absl::InvalidArgumentError(absl::StrCat("peers[", i, "]: ", YamlQuote(peer),
                                                       " is listed twice (also peers[", j, "])"));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<DaemonConfig> ParseDaemonConfig(absl::string_view yaml_text) {
  ASSIGN_OR_RETURN(YAML::Node root, yaml_util::LoadDocument(yaml_text, ""));
  try {
    return ParseRoot(root);
  } catch (const std::exception& e) {  // yaml-cpp conversion errors; not expected
    return absl::InvalidArgumentError(absl::StrCat("malformed config: ", e.what()));
  }
}

absl::StatusOr<DaemonConfig> LoadDaemonConfig(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int error = errno;
    return absl::Status(absl::ErrnoToStatusCode(error),
                        absl::StrCat("cannot read config file ", path, ": ", std::strerror(error)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot read config file ", path));
  }
  absl::StatusOr<DaemonConfig> config = ParseDaemonConfig(text.str());
  if (!config.ok()) {
    return absl::Status(config.status().code(),
                        absl::StrCat(path, ": ", config.status().message()));
  }
  return config;
}

namespace {

std::string FieldLine(const Field& f, const DaemonConfig& config, absl::string_view prefix) {
  const std::string line = absl::StrCat(prefix, f.name, ": ", f.format(config));
  return absl::StrFormat("%-40s # %s\n", line, f.comment);
}

std::string FieldLines(const DaemonConfig& config) {
  std::string out;
  for (const Field& f : Fields()) out += FieldLine(f, config, "");
  return out;
}

// The shipped file: each key commented out at its default, so a changed default reaches an
// installed node unless its operator set that key; the test-only keys are left out.
std::string CommentedDefaultLines() {
  const DaemonConfig defaults;
  std::string out;
  for (const Field& f : Fields()) {
    if (!f.test_only) out += FieldLine(f, defaults, "#");
  }
  return out;
}

}  // namespace

absl::Status ParsePoolSize(absl::string_view text, DaemonConfig* config) {
  if (absl::ConsumeSuffix(&text, "%")) {
    double percent = 0;
    if (!absl::SimpleAtod(text, &percent) || !(percent > 0 && percent <= 100)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a share of the GPU's memory must be more than 0% and at most 100% (got ", text, "%)"));
    }
    config->pool_percent_of_gpu = percent;
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(const int64_t bytes, ParseByteSize(text));
  if (bytes == 0) return absl::InvalidArgumentError("must be greater than zero");
  config->pool_bytes_per_device = bytes;
  config->pool_percent_of_gpu = 0;
  return absl::OkStatus();
}

std::string FormatPoolSize(const DaemonConfig& config) {
  if (config.pool_percent_of_gpu > 0) return FormatDouble(config.pool_percent_of_gpu) + "%";
  return FormatByteSize(config.pool_bytes_per_device);
}

std::string ConfigYaml(const DaemonConfig& config) {
  return "# overlapd configuration in effect (config file and flags merged).\n" +
         FieldLines(config);
}

std::string DefaultConfigYaml() {
  std::string out =
      "# overlapd configuration. Every key is commented out at its built-in default:\n"
      "# remove the leading '#' of a line to set it. Command-line flags override this file.\n"
      "# `overlapd --print-config` prints what a daemon would run with.\n" +
      CommentedDefaultLines();
  absl::StrAppend(&out, "# default listen address here: ", DefaultListenAddress(), "\n",
                  "# default state_dir here: ", DefaultStateDir(), "\n");
  return out;
}

namespace config_internal {

UserContext CurrentUser() {
  UserContext user;
  user.root = geteuid() == 0;
  user.uid = static_cast<unsigned>(getuid());
  user.getenv = [](const char* name) -> const char* { return std::getenv(name); };
  if (const struct passwd* pw = getpwuid(getuid()); pw != nullptr && pw->pw_dir != nullptr) {
    user.home_from_passwd = pw->pw_dir;
  }
  user.socket_exists = [](const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
  };
  return user;
}

std::string DefaultListenAddressFor(const UserContext& user) {
  if (user.root) return absl::StrCat("unix:", kSystemSocketPath);
  const char* runtime_dir = user.getenv("XDG_RUNTIME_DIR");
  if (runtime_dir != nullptr && runtime_dir[0] == '/') {
    return absl::StrCat("unix:", runtime_dir, "/overlapd.sock");
  }
  return absl::StrCat("unix:", FallbackSocketDir(user.uid), "/overlapd.sock");
}

std::string DefaultStateDirFor(const UserContext& user) {
  if (user.root) return "/var/lib/overlapd";
  // The XDG spec says relative values are invalid and must be ignored.
  const char* state_home = user.getenv("XDG_STATE_HOME");
  if (state_home != nullptr && state_home[0] == '/') return absl::StrCat(state_home, "/overlapd");
  const char* home = user.getenv("HOME");
  const std::string home_dir = home != nullptr && home[0] != '\0' ? home : user.home_from_passwd;
  return absl::StrCat(home_dir, "/.local/state/overlapd");
}

std::string DefaultClientAddressFor(const UserContext& user) {
  const std::string own = DefaultListenAddressFor(user);
  if (user.root || !user.socket_exists) return own;
  if (user.socket_exists(own.substr(std::string("unix:").size()))) return own;
  if (user.socket_exists(kSystemSocketPath)) return absl::StrCat("unix:", kSystemSocketPath);
  return own;
}

}  // namespace config_internal

std::string DefaultListenAddress() {
  return config_internal::DefaultListenAddressFor(config_internal::CurrentUser());
}

std::string SessionSocketPath(const DaemonConfig& config) {
  if (config.session_socket == "off") return "";
  absl::string_view given = config.session_socket;
  absl::ConsumePrefix(&given, "unix:");
  if (!given.empty()) return std::string(given);
  // Beside the API socket, named after it: overlapd.sock -> overlapd-session.sock.
  // A daemon on TCP has no socket to put it beside: sessions there are named.
  const std::string api = config.listen.empty() ? DefaultListenAddress() : config.listen;
  if (!absl::StartsWith(api, "unix:")) return "";
  const std::string path = api.substr(std::string("unix:").size());
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "" : path.substr(0, slash + 1);
  std::string stem = slash == std::string::npos ? path : path.substr(slash + 1);
  if (absl::EndsWith(stem, ".sock")) stem.resize(stem.size() - 5);
  return absl::StrCat(dir, stem.empty() ? "overlapd" : stem, "-session.sock");
}

std::string DefaultClientAddress() {
  return config_internal::DefaultClientAddressFor(config_internal::CurrentUser());
}

std::string DefaultStateDir() {
  return config_internal::DefaultStateDirFor(config_internal::CurrentUser());
}

}  // namespace overlap
