#include "common/config.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/byte_size.h"
#include "common/config_internal.h"
#include "common/daemon_settings.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace overlap {
namespace {

using ::testing::HasSubstr;

void ExpectSameConfig(const DaemonConfig& a, const DaemonConfig& b) {
  EXPECT_EQ(a.backend, b.backend);
  EXPECT_EQ(a.listen, b.listen);
  EXPECT_EQ(a.allow_insecure_tcp, b.allow_insecure_tcp);
  EXPECT_EQ(a.tls_cert, b.tls_cert);
  EXPECT_EQ(a.tls_key, b.tls_key);
  EXPECT_EQ(a.tls_client_ca, b.tls_client_ca);
  EXPECT_EQ(a.state_dir, b.state_dir);
  EXPECT_EQ(a.log_level, b.log_level);
  EXPECT_EQ(a.host_device_count, b.host_device_count);
  EXPECT_EQ(a.host_device_memory_bytes, b.host_device_memory_bytes);
  EXPECT_EQ(a.hazard_checks, b.hazard_checks);
  EXPECT_EQ(a.pool_bytes_per_device, b.pool_bytes_per_device);
  EXPECT_EQ(a.pool_percent_of_gpu, b.pool_percent_of_gpu);
  EXPECT_EQ(a.gemm_workspace_bytes, b.gemm_workspace_bytes);
  EXPECT_EQ(a.nvls_enable, b.nvls_enable);
  EXPECT_EQ(a.ranks_per_gpu, b.ranks_per_gpu);
  EXPECT_EQ(a.nccl_nonblocking, b.nccl_nonblocking);
  EXPECT_EQ(a.graph_replay, b.graph_replay);
  EXPECT_EQ(a.programmatic_edges, b.programmatic_edges);
  EXPECT_EQ(a.launch_gate, b.launch_gate);
  EXPECT_EQ(a.preheat_ms, b.preheat_ms);
  EXPECT_EQ(a.collective_timeout_s, b.collective_timeout_s);
  EXPECT_EQ(a.metrics_listen, b.metrics_listen);
  EXPECT_EQ(a.max_iterations, b.max_iterations);
  EXPECT_EQ(a.max_queued_jobs, b.max_queued_jobs);
  EXPECT_EQ(a.drain_timeout_s, b.drain_timeout_s);
  EXPECT_EQ(a.keep_finished_jobs, b.keep_finished_jobs);
  EXPECT_EQ(a.keep_finished_days, b.keep_finished_days);
  EXPECT_EQ(a.max_spec_bytes, b.max_spec_bytes);
  EXPECT_EQ(a.peer_listen, b.peer_listen);
  EXPECT_EQ(a.peers, b.peers);
  EXPECT_EQ(a.node_name, b.node_name);
  EXPECT_EQ(a.peer_tls_cert, b.peer_tls_cert);
  EXPECT_EQ(a.peer_tls_key, b.peer_tls_key);
  EXPECT_EQ(a.peer_tls_ca, b.peer_tls_ca);
  EXPECT_EQ(a.cluster_hold_timeout_ms, b.cluster_hold_timeout_ms);
  EXPECT_EQ(a.cluster_collective_timeout_ms, b.cluster_collective_timeout_ms);
  EXPECT_EQ(a.cluster_max_jobs, b.cluster_max_jobs);
  EXPECT_EQ(a.nccl_env, b.nccl_env);
}

void ExpectInvalid(const std::string& yaml, const std::string& message) {
  auto config = ParseDaemonConfig(yaml);
  ASSERT_FALSE(config.ok()) << yaml;
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument) << yaml;
  EXPECT_THAT(std::string(config.status().message()), HasSubstr(message)) << yaml;
}

TEST(ConfigTest, EmptyTextGivesDefaults) {
  for (const char* text : {"", "\n", "# only a comment\n", "{}"}) {
    auto config = ParseDaemonConfig(text);
    ASSERT_TRUE(config.ok()) << config.status();
    ExpectSameConfig(*config, DaemonConfig{});
  }
}

// Each line "#key: value  # doc" with its first '#' removed: what an operator who uncomments
// every key of the shipped config gets.
std::string Uncommented(const std::string& yaml) {
  std::string out;
  for (absl::string_view line : absl::StrSplit(yaml, '\n')) {
    if (line.size() > 1 && line[0] == '#' && absl::ascii_islower(line[1])) line.remove_prefix(1);
    absl::StrAppend(&out, line, "\n");
  }
  return out;
}

TEST(ConfigTest, DefaultYamlIsCommentedOutAndUncommentedParsesBackToDefaults) {
  const std::string commented = DefaultConfigYaml();
  auto as_shipped = ParseDaemonConfig(commented);
  ASSERT_TRUE(as_shipped.ok()) << as_shipped.status();
  ExpectSameConfig(*as_shipped, DaemonConfig{});
  for (absl::string_view line : absl::StrSplit(commented, '\n')) {
    EXPECT_TRUE(line.empty() || line[0] == '#') << "a key is set: " << line;
  }
  const std::string yaml = Uncommented(commented);
  ASSERT_NE(yaml, commented);
  auto config = ParseDaemonConfig(yaml);
  ASSERT_TRUE(config.ok()) << config.status() << "\n" << yaml;
  ExpectSameConfig(*config, DaemonConfig{});
  // Every key but the test-only ones, each with its description.
  for (const SettingDescription& s : DescribeSettings()) {
    const std::string line = absl::StrCat("\n#", s.key, ": ", s.default_value, " ");
    if (s.test_only) {
      EXPECT_THAT(commented, ::testing::Not(HasSubstr("#" + s.key + ":"))) << s.key;
    } else {
      EXPECT_THAT(commented, HasSubstr(line)) << s.key;
      EXPECT_THAT(commented, HasSubstr("# " + s.doc + "\n")) << s.key;
    }
  }
  EXPECT_THAT(commented, ::testing::Not(HasSubstr("host_fail")));
  for (const char* key : {"backend",
                          "listen",
                          "allow_insecure_tcp",
                          "tls_cert",
                          "tls_key",
                          "tls_client_ca",
                          "state_dir",
                          "log_level",
                          "host_device_count",
                          "host_device_memory_bytes",
                          "hazard_checks",
                          "pool_bytes_per_device",
                          "gemm_workspace_bytes",
                          "nvls_enable",
                          "ranks_per_gpu",
                          "nccl_nonblocking",
                          "graph_replay",
                          "programmatic_edges",
                          "launch_gate",
                          "preheat_ms",
                          "collective_timeout_s",
                          "metrics_listen",
                          "max_iterations",
                          "max_queued_jobs",
                          "drain_timeout_s",
                          "keep_finished_jobs",
                          "keep_finished_days",
                          "max_spec_bytes",
                          "peer_listen",
                          "peers",
                          "node_name",
                          "peer_tls_cert",
                          "peer_tls_key",
                          "peer_tls_ca",
                          "cluster_hold_timeout_ms",
                          "cluster_collective_timeout_ms",
                          "cluster_max_jobs",
                          "nccl_env"}) {
    EXPECT_THAT(yaml, HasSubstr(std::string("\n") + key + ": ")) << key;
  }
  EXPECT_THAT(yaml, HasSubstr("host_device_memory_bytes: 2GiB"));
  EXPECT_THAT(yaml, HasSubstr("pool_bytes_per_device: 16GiB"));
  EXPECT_THAT(yaml, HasSubstr("max_spec_bytes: 1MiB"));
  EXPECT_THAT(yaml, HasSubstr("backend: \"auto\""));
  EXPECT_THAT(yaml, HasSubstr("\npeer_listen: \"\" "));
  EXPECT_THAT(yaml, HasSubstr("\npeers: [] "));
  EXPECT_THAT(yaml, HasSubstr("\ncluster_hold_timeout_ms: 10000 "));
  EXPECT_THAT(yaml, HasSubstr("\ncluster_collective_timeout_ms: 60000 "));
  EXPECT_THAT(yaml, HasSubstr("\ncluster_max_jobs: 4 "));
  EXPECT_THAT(yaml, HasSubstr("# auto | cuda | host"));
}

TEST(ConfigTest, ParsesEveryKey) {
  auto config = ParseDaemonConfig(R"(
backend: host
listen: "127.0.0.1:7070"
allow_insecure_tcp: true
tls_cert: /etc/overlapd/tls/server.pem
tls_key: /etc/overlapd/tls/server.key
tls_client_ca: /etc/overlapd/tls/clients-ca.pem
state_dir: /srv/overlapd
log_level: debug
host_device_count: 4
host_device_memory_bytes: 512MiB
hazard_checks: true
pool_bytes_per_device: 2GiB
gemm_workspace_bytes: 0
nvls_enable: true
ranks_per_gpu: 2
graph_replay: false
programmatic_edges: true
launch_gate: false
preheat_ms: 0
collective_timeout_s: 2.5
metrics_listen: "127.0.0.1:9464"
max_iterations: 500
max_queued_jobs: 8
drain_timeout_s: 0
keep_finished_jobs: 0
keep_finished_days: 7.5
max_spec_bytes: 65536
peer_listen: "0.0.0.0:7000"
peers: ["gpu-node-2:7000", "10.0.0.3:7000"]
node_name: "gpu-node-1:7000"
peer_tls_cert: /etc/overlapd/peer/node.pem
peer_tls_key: /etc/overlapd/peer/node.key
peer_tls_ca: /etc/overlapd/peer/ca.pem
cluster_hold_timeout_ms: 2500
cluster_collective_timeout_ms: 30000
cluster_max_jobs: 2
nccl_env: ["NCCL_SOCKET_IFNAME=eth0", "NCCL_IB_HCA=mlx5_0,mlx5_1"]
)");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->backend, "host");
  EXPECT_EQ(config->listen, "127.0.0.1:7070");
  EXPECT_TRUE(config->allow_insecure_tcp);
  EXPECT_EQ(config->tls_cert, "/etc/overlapd/tls/server.pem");
  EXPECT_EQ(config->tls_key, "/etc/overlapd/tls/server.key");
  EXPECT_EQ(config->tls_client_ca, "/etc/overlapd/tls/clients-ca.pem");
  EXPECT_EQ(config->state_dir, "/srv/overlapd");
  EXPECT_EQ(config->log_level, "debug");
  EXPECT_EQ(config->host_device_count, 4);
  EXPECT_EQ(config->host_device_memory_bytes, int64_t{512} << 20);
  EXPECT_TRUE(config->hazard_checks);
  EXPECT_EQ(config->pool_bytes_per_device, int64_t{2} << 30);
  EXPECT_EQ(config->gemm_workspace_bytes, 0);
  EXPECT_TRUE(config->nvls_enable);
  EXPECT_EQ(config->ranks_per_gpu, 2);
  EXPECT_FALSE(config->graph_replay);
  EXPECT_TRUE(config->programmatic_edges);
  EXPECT_FALSE(config->launch_gate);
  EXPECT_EQ(config->preheat_ms, 0);
  EXPECT_EQ(config->collective_timeout_s, 2.5);
  EXPECT_EQ(config->metrics_listen, "127.0.0.1:9464");
  EXPECT_EQ(config->max_iterations, 500);
  EXPECT_EQ(config->max_queued_jobs, 8);
  EXPECT_EQ(config->drain_timeout_s, 0);
  EXPECT_EQ(config->keep_finished_jobs, 0);
  EXPECT_EQ(config->keep_finished_days, 7.5);
  EXPECT_EQ(config->max_spec_bytes, 65536);
  EXPECT_EQ(config->peer_listen, "0.0.0.0:7000");
  EXPECT_EQ(config->peers, (std::vector<std::string>{"gpu-node-2:7000", "10.0.0.3:7000"}));
  EXPECT_EQ(config->node_name, "gpu-node-1:7000");
  EXPECT_EQ(config->peer_tls_cert, "/etc/overlapd/peer/node.pem");
  EXPECT_EQ(config->peer_tls_key, "/etc/overlapd/peer/node.key");
  EXPECT_EQ(config->peer_tls_ca, "/etc/overlapd/peer/ca.pem");
  EXPECT_EQ(config->cluster_hold_timeout_ms, 2500);
  EXPECT_EQ(config->cluster_collective_timeout_ms, 30000);
  EXPECT_EQ(config->cluster_max_jobs, 2);
  EXPECT_THAT(config->nccl_env, ::testing::ElementsAre("NCCL_SOCKET_IFNAME=eth0",
                                                       "NCCL_IB_HCA=mlx5_0,mlx5_1"));
  // What --print-config shows reads back to the same values.
  auto again = ParseDaemonConfig(ConfigYaml(*config));
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << ConfigYaml(*config);
  ExpectSameConfig(*config, *again);
  EXPECT_THAT(ConfigYaml(*config), HasSubstr("\npeers: [\"gpu-node-2:7000\", \"10.0.0.3:7000\"] "));

  // Keys not given keep their defaults.
  config = ParseDaemonConfig("backend: cuda\nlisten:\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->backend, "cuda");
  EXPECT_EQ(config->listen, "");
  EXPECT_EQ(config->max_queued_jobs, 256);
}

TEST(ConfigTest, ByteSizeSuffixes) {
  const std::map<std::string, int64_t> cases = {
      {"0", 0},
      {"4096", 4096},
      {"12B", 12},
      {"1KiB", 1024},
      {"512MiB", int64_t{512} << 20},
      {"2GiB", int64_t{2} << 30},
      {"2 GiB", int64_t{2} << 30},
      {"3tib", int64_t{3} << 40},
      {"1KB", 1000},
      {"5MB", 5000000},
      {"2GB", 2000000000},
      {"1TB", 1000000000000},
      {"8388607TiB", int64_t{8388607} << 40},
  };
  for (const auto& [text, bytes] : cases) {
    auto parsed = ParseByteSize(text);
    ASSERT_TRUE(parsed.ok()) << text << ": " << parsed.status();
    EXPECT_EQ(*parsed, bytes) << text;
  }
  for (const char* bad :
       {"", "GiB", "-1", "1.5GiB", "2 GiBs", "2XB", "0x10", "8388608TiB", "9223372036854775808"}) {
    auto parsed = ParseByteSize(bad);
    EXPECT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_THAT(std::string(ParseByteSize("8388608TiB").status().message()),
              HasSubstr("does not fit in 64 bits"));
  EXPECT_EQ(FormatByteSize(int64_t{2} << 30), "2GiB");
  EXPECT_EQ(FormatByteSize(int64_t{3} << 20), "3MiB");
  EXPECT_EQ(FormatByteSize(1536), "1536");
  EXPECT_EQ(FormatByteSize(int64_t{1536} << 10), "1536KiB");
  EXPECT_EQ(FormatByteSize(1000), "1000");
  EXPECT_EQ(FormatByteSize(0), "0");
  for (int64_t x : {int64_t{0}, int64_t{1}, int64_t{1} << 40, int64_t{12345} << 20,
                    int64_t{9223372036854775807}}) {
    EXPECT_EQ(*ParseByteSize(FormatByteSize(x)), x) << x;
  }

  auto config = ParseDaemonConfig("pool_bytes_per_device: \"1GiB\"\nmax_spec_bytes: 4KiB");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->pool_bytes_per_device, int64_t{1} << 30);
  EXPECT_EQ(config->max_spec_bytes, 4096);
}

// One config for nodes of different GPUs: the pool as a share of each GPU.
TEST(ConfigTest, PoolAsAShareOfTheGpu) {
  auto config = ParseDaemonConfig("pool_bytes_per_device: 80%");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->pool_percent_of_gpu, 80);
  EXPECT_EQ(FormatPoolSize(*config), "80%");
  EXPECT_THAT(ConfigYaml(*config), HasSubstr("pool_bytes_per_device: 80%"));
  auto again = ParseDaemonConfig(ConfigYaml(*config));
  ASSERT_TRUE(again.ok()) << again.status();
  ExpectSameConfig(*config, *again);

  DaemonConfig flags;
  ASSERT_TRUE(ParsePoolSize("12.5%", &flags).ok());
  EXPECT_EQ(flags.pool_percent_of_gpu, 12.5);
  ASSERT_TRUE(ParsePoolSize("4GiB", &flags).ok());  // a size after a share: the size holds
  EXPECT_EQ(flags.pool_percent_of_gpu, 0);
  EXPECT_EQ(flags.pool_bytes_per_device, int64_t{4} << 30);
  EXPECT_EQ(FormatPoolSize(flags), "4GiB");

  for (const char* bad : {"0%", "101%", "-5%", "abc%", "%"}) {
    ExpectInvalid(absl::StrCat("pool_bytes_per_device: \"", bad, "\""),
                  "pool_bytes_per_device: a share of the GPU's memory must be more than 0% and at "
                  "most 100%");
  }
}

TEST(ConfigTest, Errors) {
  ExpectInvalid("bakend: host", "unknown config key \"bakend\"");
  ExpectInvalid("backend: gpu", "backend: must be auto, cuda or host (got \"gpu\")");
  ExpectInvalid("log_level: loud", "log_level: must be trace, debug");
  ExpectInvalid("host_device_count: 0",
                "host_device_count: must be a positive integer (got \"0\")");
  ExpectInvalid("host_device_count: 1.5", "host_device_count: must be a positive integer");
  ExpectInvalid("max_queued_jobs: -4", "max_queued_jobs: must be a positive integer");
  ExpectInvalid("max_iterations: 3000000000", "max_iterations: must be at most 2147483647");
  ExpectInvalid("pool_bytes_per_device: 2QiB", "pool_bytes_per_device: must be a byte size");
  ExpectInvalid("pool_bytes_per_device: 0", "pool_bytes_per_device: must be greater than zero");
  ExpectInvalid("host_device_memory_bytes: [1]", "host_device_memory_bytes: must be a byte size");
  ExpectInvalid("collective_timeout_s: 0", "collective_timeout_s: must be a positive number");
  ExpectInvalid("collective_timeout_s: inf", "collective_timeout_s: must be a positive number");
  ExpectInvalid("drain_timeout_s: -1", "drain_timeout_s: must be a non-negative number");
  ExpectInvalid("keep_finished_jobs: -1", "keep_finished_jobs: must be");
  ExpectInvalid("keep_finished_days: -2", "keep_finished_days: must be a non-negative number");
  ExpectInvalid("ranks_per_gpu: 0", "ranks_per_gpu: must be");
  ExpectInvalid("ranks_per_gpu: 9", "ranks_per_gpu: must be at most 8");
  ExpectInvalid("nvls_enable: 1", "nvls_enable: must be true or false (got \"1\")");
  ExpectInvalid("listen: [a]", "listen: must be a string (got a list)");
  ExpectInvalid("backend: host\nbackend: cuda", "duplicate config key \"backend\"");
  ExpectInvalid("- backend", "config must be a mapping");
  ExpectInvalid("backend: [host", "malformed YAML/JSON at line ");
}

TEST(ConfigTest, ClusterKeys) {
  // The defaults: no peer listener, no cluster.
  const DaemonConfig defaults;
  EXPECT_EQ(defaults.peer_listen, "");
  EXPECT_TRUE(defaults.peers.empty());
  EXPECT_EQ(defaults.node_name, "");
  EXPECT_EQ(defaults.cluster_hold_timeout_ms, 10000);
  EXPECT_EQ(defaults.cluster_collective_timeout_ms, 60000);
  EXPECT_EQ(defaults.cluster_max_jobs, 4);

  auto config = ParseDaemonConfig("peer_listen: 127.0.0.1:7000\npeers:\n  - 127.0.0.1:7001\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->peers, std::vector<std::string>{"127.0.0.1:7001"});
  EXPECT_EQ(NodeName(*config), "127.0.0.1:7000");  // node_name defaults to peer_listen
  config = ParseDaemonConfig("peer_listen: 0.0.0.0:7000\nnode_name: gpu-node-1:7000\npeers:\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(config->peers.empty());  // `peers:` alone is the empty list
  EXPECT_EQ(NodeName(*config), "gpu-node-1:7000");

  // Entries that YAML would mangle survive the round trip through ConfigYaml.
  DaemonConfig odd;
  odd.peer_listen = "127.0.0.1:7000";
  odd.peers = {"[::1]:7001", "a \"b\":1", "#c:2"};
  auto again = ParseDaemonConfig(ConfigYaml(odd));
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << ConfigYaml(odd);
  EXPECT_EQ(again->peers, odd.peers);

  ExpectInvalid(
      "peer_listen: 127.0.0.1:7000\npeers: 127.0.0.1:7001",
      "peers: must be a list of strings, e.g. [\"10.0.0.2:7000\"] (got \"127.0.0.1:7001\")");
  ExpectInvalid("peer_listen: 127.0.0.1:7000\npeers: [127.0.0.1:7001, [a]]",
                "peers[1]: must be a string (got a list)");
  ExpectInvalid("peer_listen: 127.0.0.1:7000\npeers: [\"\"]",
                "peers[0]: empty (expected HOST:PORT)");
  ExpectInvalid("peer_listen: 127.0.0.1:7000\npeers: [a:1, b:2, a:1]",
                "peers[2]: \"a:1\" is listed twice (also peers[0])");
  ExpectInvalid("peer_listen: 127.0.0.1:7000\npeers: [a:1, 127.0.0.1:7000]",
                "peers[1]: \"127.0.0.1:7000\" is this daemon itself (its peer_listen): list only "
                "the others");
  ExpectInvalid("peer_listen: 0.0.0.0:7000\nnode_name: n1:7000\npeers: [n2:7000, n1:7000]",
                "peers[1]: \"n1:7000\" is this daemon itself (its node_name)");
  ExpectInvalid("peers: [a:1]", "peers: needs peer_listen");
  ExpectInvalid("node_name: a:1", "node_name: needs peer_listen");
  ExpectInvalid("cluster_hold_timeout_ms: 0",
                "cluster_hold_timeout_ms: must be a positive integer (got \"0\")");
  ExpectInvalid("cluster_hold_timeout_ms: -5",
                "cluster_hold_timeout_ms: must be a positive integer");
  ExpectInvalid("cluster_collective_timeout_ms: 0",
                "cluster_collective_timeout_ms: must be a positive integer");
  ExpectInvalid("cluster_collective_timeout_ms: 1.5",
                "cluster_collective_timeout_ms: must be a positive integer");
  ExpectInvalid("cluster_max_jobs: 0", "cluster_max_jobs: must be a positive integer");
  ExpectInvalid("nccl_env: [\"SOCKET_IFNAME=eth0\"]",
                "nccl_env[0]: \"SOCKET_IFNAME=eth0\" is not NCCL_NAME=value");
  ExpectInvalid("nccl_env: [\"NCCL_DEBUG\"]", "nccl_env[0]: \"NCCL_DEBUG\" is not NCCL_NAME=value");
  ExpectInvalid("nccl_env: [\"NCCL_NVLS_ENABLE=1\"]", "nvls_enable");
  ExpectInvalid("peer_listen: [a]", "peer_listen: must be a string (got a list)");

  // The cross-key checks hold for a config built in code too.
  DaemonConfig built;
  built.peer_listen = "127.0.0.1:7000";
  built.peers = {"x:1", "x:1"};
  EXPECT_EQ(ValidateClusterKeys(built).code(), absl::StatusCode::kInvalidArgument);
  built.peers = {"x:1"};
  EXPECT_TRUE(ValidateClusterKeys(built).ok());
}

TEST(ConfigTest, LoadFromFile) {
  char path[] = "/tmp/overlapd_config_testXXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  {
    std::ofstream out(path);
    out << "backend: host\nhost_device_count: 3\n";
  }
  auto config = LoadDaemonConfig(path);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->backend, "host");
  EXPECT_EQ(config->host_device_count, 3);
  {
    std::ofstream out(path);
    out << "backend: host\nbogus: 1\n";
  }
  config = LoadDaemonConfig(path);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(config.status().message()),
              HasSubstr(std::string(path) + ": unknown config key \"bogus\""));
  std::remove(path);
  config = LoadDaemonConfig(path);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(config.status().message()), HasSubstr(path));
}

TEST(ConfigTest, DefaultPaths) {
  using config_internal::UserContext;
  std::map<std::string, std::string> env;
  UserContext user;
  user.uid = 1000;
  user.home_from_passwd = "/home/pw";
  user.getenv = [&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };

  user.root = true;
  env = {{"XDG_RUNTIME_DIR", "/run/user/0"}, {"HOME", "/root"}};
  EXPECT_EQ(config_internal::DefaultListenAddressFor(user), "unix:/run/overlapd/overlapd.sock");
  EXPECT_EQ(config_internal::DefaultStateDirFor(user), "/var/lib/overlapd");

  user.root = false;
  env = {{"XDG_RUNTIME_DIR", "/run/user/1000"},
         {"XDG_STATE_HOME", "/data/state"},
         {"HOME", "/home/me"}};
  EXPECT_EQ(config_internal::DefaultListenAddressFor(user), "unix:/run/user/1000/overlapd.sock");
  EXPECT_EQ(config_internal::DefaultStateDirFor(user), "/data/state/overlapd");

  env = {{"HOME", "/home/me"}, {"XDG_STATE_HOME", "relative/ignored"}};
  EXPECT_EQ(config_internal::DefaultListenAddressFor(user),
            "unix:/tmp/overlapd-1000/overlapd.sock");
  EXPECT_EQ(config_internal::DefaultStateDirFor(user), "/home/me/.local/state/overlapd");

  env = {};
  EXPECT_EQ(config_internal::DefaultStateDirFor(user), "/home/pw/.local/state/overlapd");

  // The real process: consistent with its identity.
  if (geteuid() == 0) {
    EXPECT_EQ(DefaultListenAddress(), "unix:/run/overlapd/overlapd.sock");
    EXPECT_EQ(DefaultStateDir(), "/var/lib/overlapd");
  } else {
    EXPECT_EQ(DefaultListenAddress().rfind("unix:", 0), 0u);
    EXPECT_THAT(DefaultStateDir(), HasSubstr("overlapd"));
  }
}

// overlapctl without --addr: the user's own daemon when its socket is there,
// else the system daemon's when that is, else the user's own (to name it).
TEST(ConfigTest, ClientsFallBackToTheSystemSocket) {
  using config_internal::UserContext;
  std::set<std::string> sockets;
  UserContext user;
  user.uid = 1000;
  user.getenv = [](const char* name) -> const char* {
    return std::string(name) == "XDG_RUNTIME_DIR" ? "/run/user/1000" : nullptr;
  };
  user.socket_exists = [&sockets](const std::string& path) { return sockets.count(path) > 0; };
  EXPECT_EQ(config_internal::DefaultClientAddressFor(user), "unix:/run/user/1000/overlapd.sock");
  sockets = {"/run/overlapd/overlapd.sock"};
  EXPECT_EQ(config_internal::DefaultClientAddressFor(user), "unix:/run/overlapd/overlapd.sock");
  sockets.insert("/run/user/1000/overlapd.sock");
  EXPECT_EQ(config_internal::DefaultClientAddressFor(user), "unix:/run/user/1000/overlapd.sock");
  user.root = true;
  sockets.clear();
  EXPECT_EQ(config_internal::DefaultClientAddressFor(user), "unix:/run/overlapd/overlapd.sock");
}

TEST(ConfigTest, LimitsAndSocketGroupAreKeys) {
  auto config = ParseDaemonConfig(
      "socket_group: ml-infra\nmax_ops_per_job: 10\nmax_watchers: 3\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->socket_group, "ml-infra");
  EXPECT_EQ(config->max_ops_per_job, 10);
  EXPECT_EQ(config->max_watchers, 3);
  EXPECT_FALSE(ParseDaemonConfig("max_watchers: 0\n").ok());
}

TEST(ConfigTest, FlightRecorderEntriesZeroIsOff) {
  EXPECT_EQ(DaemonConfig().flight_recorder_entries, 2000);
  auto config = ParseDaemonConfig("flight_recorder_entries: 0\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->flight_recorder_entries, 0);
  EXPECT_EQ(ParseDaemonConfig("flight_recorder_entries: -1\n").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ConfigTest, SessionGraphsAreOnByDefaultAndCanBeTurnedOff) {
  EXPECT_TRUE(DaemonConfig().session_graphs);
  auto config = ParseDaemonConfig("session_graphs: false\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_FALSE(config->session_graphs);
  absl::StatusOr<DaemonConfig> refused = ParseDaemonConfig("session_graphs: 2\n");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.status().message(), HasSubstr("session_graphs"));
}

TEST(ConfigTest, SessionPollMsIsAWindowInRange) {
  EXPECT_EQ(DaemonConfig().session_poll_ms, 100);
  auto config = ParseDaemonConfig("session_poll_ms: 0\n");  // never poll: the doorbell only
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->session_poll_ms, 0);
  config = ParseDaemonConfig("session_poll_ms: 60000\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->session_poll_ms, 60000);
  for (const char* bad : {"session_poll_ms: -1\n", "session_poll_ms: 60001\n",
                          "session_poll_ms: 2.5\n", "session_poll_ms: \"5\"\n"}) {
    absl::StatusOr<DaemonConfig> refused = ParseDaemonConfig(bad);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(refused.status().message(), HasSubstr("session_poll_ms")) << bad;
  }
}

}  // namespace
}  // namespace overlap
