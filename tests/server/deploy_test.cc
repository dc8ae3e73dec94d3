// deploy/: the systemd unit verifies, install.sh stages a complete install
// without root, and the shipped config is the built-in default.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/config.h"
#include "common/graph_parser.h"
#include "common/graph_validator.h"
#include "gtest/gtest.h"
#include "tests/server/test_util.h"

namespace overlap {
namespace {

using ::overlap::testing::TempDir;

const std::string kDeploy = std::string(OVERLAP_SOURCE_DIR) + "/deploy";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Exit status of `command` run by /bin/sh (output appended to `log`).
int Shell(const std::string& command, const std::string& log) {
  const int status = std::system((command + " >>" + log + " 2>&1").c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The config without the two comment lines that depend on who runs it.
std::string WithoutMachineLines(const std::string& yaml) {
  std::string out;
  for (absl::string_view line : absl::StrSplit(yaml, '\n')) {
    if (absl::StartsWith(line, "# default ")) continue;
    out.append(line.data(), line.size());
    out += '\n';
  }
  return out;
}

// Every shipped example graph parses and validates on groups of 1, 2, 4 and 8
// GPUs (the graphs leave `devices` out: every GPU of the node).
TEST(DeployTest, ShippedGraphsAreValidOnEveryGroupSize) {
  int graphs = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kDeploy + "/graphs")) {
    const std::string path = entry.path().string();
    if (entry.path().extension() != ".yaml") continue;
    ++graphs;
    absl::StatusOr<JobSpec> spec = ParseJobSpec(ReadFile(path), path);
    ASSERT_TRUE(spec.ok()) << spec.status();
    for (int gpus : {1, 2, 4, 8}) {
      ValidationLimits limits;
      limits.device_count = gpus;
      // A mesh graph runs on its tp x dp devices, and is refused elsewhere.
      const bool fits = !spec->mesh.declared() || spec->mesh.tp * spec->mesh.dp == gpus;
      EXPECT_EQ(ValidateJobSpec(*spec, limits).ok(), fits)
          << path << " on " << gpus << " GPUs: " << ValidateJobSpec(*spec, limits).status();
    }
  }
  EXPECT_GE(graphs, 10);
}

TEST(DeployTest, ShippedConfigIsTheDefault) {
  const std::string shipped = ReadFile(kDeploy + "/overlapd.yaml");
  ASSERT_FALSE(shipped.empty());
  EXPECT_EQ(WithoutMachineLines(shipped), WithoutMachineLines(DefaultConfigYaml()));
  // As installed it runs as root: those lines name root's defaults.
  EXPECT_NE(shipped.find("unix:/run/overlapd/overlapd.sock"), std::string::npos);
  auto parsed = ParseDaemonConfig(shipped);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const DaemonConfig defaults;
  EXPECT_EQ(parsed->backend, defaults.backend);
  EXPECT_EQ(parsed->drain_timeout_s, defaults.drain_timeout_s);
  EXPECT_EQ(parsed->max_queued_jobs, defaults.max_queued_jobs);
  EXPECT_EQ(parsed->pool_bytes_per_device, defaults.pool_bytes_per_device);
  EXPECT_EQ(parsed->nvls_enable, false);
}

TEST(DeployTest, UnitKeepsGpuAccessAndOutlastsTheDrain) {
  const std::string unit = ReadFile(kDeploy + "/overlapd.service");
  std::map<std::string, std::string> settings;
  std::multimap<std::string, std::string> all;
  for (absl::string_view line : absl::StrSplit(unit, '\n')) {
    if (line.empty() || line[0] == '#' || line[0] == '[') continue;
    std::pair<std::string, std::string> kv = absl::StrSplit(line, absl::MaxSplits('=', 1));
    settings[kv.first] = kv.second;
    all.emplace(kv.first, kv.second);
  }
  auto Has = [&all](const std::string& key, const std::string& value) {
    for (auto [it, end] = all.equal_range(key); it != end; ++it) {
      if (it->second == value) return true;
    }
    return false;
  };
  EXPECT_EQ(settings["Type"], "notify");
  EXPECT_EQ(settings["ExecStart"], "/usr/local/bin/overlapd --config /etc/overlapd/overlapd.yaml");
  EXPECT_EQ(settings["RuntimeDirectory"], "overlapd");
  EXPECT_EQ(settings["RuntimeDirectoryMode"], "0755");
  EXPECT_EQ(settings["StateDirectory"], "overlapd");
  EXPECT_EQ(settings["Restart"], "on-failure");
  EXPECT_EQ(settings["LimitMEMLOCK"], "infinity");
  EXPECT_EQ(settings["ProtectSystem"], "strict");
  EXPECT_GT(std::stod(settings["TimeoutStopSec"]), DaemonConfig().drain_timeout_s);
  EXPECT_GE(std::stod(settings["WatchdogSec"]), 10) << "pinged every half period";
  // Not root: its own user, no capabilities, no new privileges; the one
  // privileged step (nvidia-modprobe making /dev/nvidia-uvm) runs before it, and
  // only NVIDIA's devices are open to it.
  EXPECT_EQ(settings["User"], "overlapd");
  EXPECT_EQ(settings["Group"], "overlapd");
  EXPECT_EQ(settings["NoNewPrivileges"], "yes");
  EXPECT_EQ(settings["CapabilityBoundingSet"], "");
  EXPECT_EQ(settings["ExecStartPre"], "-+/usr/bin/nvidia-modprobe -u -c=0");
  EXPECT_EQ(settings["DevicePolicy"], "closed");
  EXPECT_TRUE(Has("DeviceAllow", "char-nvidia-frontend rw"));
  EXPECT_TRUE(Has("DeviceAllow", "char-nvidia-uvm rw"));
  EXPECT_TRUE(Has("SystemCallFilter", "@chown")) << "the socket goes to socket_group";
  // It would hide /dev/nvidia*.
  EXPECT_EQ(settings.count("PrivateDevices"), 0u);
}

// The device nodes NCCL's network needs on a node with InfiniBand or RoCE
// NICs, each with the /proc/devices group that registers it ("" = a misc
// device, allowed by its path). From rdma-core: libibverbs opens a device's
// /dev/infiniband/uverbsN (util/open_cdev.c, falling back to
// /dev/char/MAJOR:MINOR: the same device), registered by the kernel as
// `infiniband_verbs` (drivers/infiniband/core/uverbs_main.c); librdmacm, which
// network plugins may use, opens /dev/infiniband/rdma_cm, a misc device
// (drivers/infiniband/core/ucma.c). NCCL's IB transport itself uses verbs only.
struct DeviceNode {
  const char* path;
  const char* group;
};
constexpr DeviceNode kNcclNetworkDevices[] = {
    {"/dev/infiniband/uverbs0", "infiniband_verbs"},
    {"/dev/infiniband/uverbs7", "infiniband_verbs"},
    {"/dev/infiniband/rdma_cm", ""},
};
// What no collective opens (management datagrams: subnet managers, ibstat).
constexpr DeviceNode kNotNeeded[] = {{"/dev/infiniband/umad0", "infiniband_mad"}};

// The unit's DeviceAllow= lines, as written.
std::set<std::string> UnitDeviceAllows(const std::string& unit) {
  std::set<std::string> allows;
  for (absl::string_view line : absl::StrSplit(unit, '\n')) {
    if (absl::ConsumePrefix(&line, "DeviceAllow=")) allows.insert(std::string(line));
  }
  return allows;
}

// Whether `allows` lets the service read and write `node`: its group's
// char-GROUP, or its own path.
bool AllowsReadWrite(const std::set<std::string>& allows, const DeviceNode& node) {
  const std::string by_group = absl::StrCat("char-", node.group, " rw");
  return (node.group[0] != '\0' && allows.count(by_group)) ||
         allows.count(absl::StrCat(node.path, " rw"));
}

// Under DevicePolicy=closed a job across nodes reaches its NICs: every device
// node NCCL's network opens is allowed, and nothing it does not need.
TEST(DeployTest, UnitLetsNcclReachTheNodesNics) {
  const std::set<std::string> allows = UnitDeviceAllows(ReadFile(kDeploy + "/overlapd.service"));
  for (const DeviceNode& node : kNcclNetworkDevices) {
    EXPECT_TRUE(AllowsReadWrite(allows, node)) << node.path;
  }
  for (const DeviceNode& node : kNotNeeded)
    EXPECT_FALSE(AllowsReadWrite(allows, node)) << node.path;
  // The docs name what the unit allows.
  const std::string operations = ReadFile(std::string(OVERLAP_SOURCE_DIR) + "/docs/OPERATIONS.md");
  for (const char* allowed :
       {"char-infiniband_verbs", "/dev/infiniband/rdma_cm", "nvidia-peermem"}) {
    EXPECT_NE(operations.find(allowed), std::string::npos) << allowed;
  }
}

// verify-unit.sh also holds the unit to an exposure of 3.0 or below.
TEST(DeployTest, SystemdAnalyzeVerifyAndSecurityPass) {
  if (std::system("command -v systemd-analyze >/dev/null 2>&1") != 0) {
    // CI installs it (scripts/install-deps.sh): there the check must run.
    if (std::getenv("CI") != nullptr) FAIL() << "systemd-analyze is not installed";
    GTEST_SKIP() << "systemd-analyze is not installed";
  }
  ASSERT_EQ(::access(OVERLAPD_BIN, X_OK), 0) << "build the overlapd target first";
  TempDir dir;
  const std::string log = dir.path() + "/log";
  EXPECT_EQ(Shell(kDeploy + "/verify-unit.sh " + OVERLAPD_BIN, log), 0) << ReadFile(log);
}

TEST(DeployTest, InstallStagesUnderDestdir) {
  ASSERT_EQ(::access(OVERLAPD_BIN, X_OK), 0) << "build the overlapd target first";
  const std::string build_dir =
      std::filesystem::path(OVERLAPD_BIN).parent_path().parent_path().string();
  TempDir dir;
  const std::string stage = dir.path() + "/stage";
  const std::string log = dir.path() + "/log";
  ASSERT_EQ(Shell("DESTDIR=" + stage + " " + kDeploy + "/install.sh --build-dir " + build_dir +
                      " --prefix /opt/overlap",
                  log),
            0)
      << ReadFile(log);
  EXPECT_EQ(::access((stage + "/opt/overlap/bin/overlapd").c_str(), X_OK), 0);
  EXPECT_EQ(ReadFile(stage + "/etc/overlapd/overlapd.yaml"), ReadFile(kDeploy + "/overlapd.yaml"));
  const std::string unit = ReadFile(stage + "/etc/systemd/system/overlapd.service");
  EXPECT_NE(unit.find("ExecStart=/opt/overlap/bin/overlapd --config /etc/overlapd/overlapd.yaml"),
            std::string::npos);

  // A second install keeps an edited config.
  { std::ofstream(stage + "/etc/overlapd/overlapd.yaml") << "backend: host\n"; }
  ASSERT_EQ(Shell(kDeploy + "/install.sh --build-dir " + build_dir + " --destdir " + stage, log), 0)
      << ReadFile(log);
  EXPECT_EQ(ReadFile(stage + "/etc/overlapd/overlapd.yaml"), "backend: host\n");
  EXPECT_EQ(ReadFile(stage + "/etc/overlapd/overlapd.yaml.default"),
            ReadFile(kDeploy + "/overlapd.yaml"));
  EXPECT_EQ(::access((stage + "/usr/local/bin/overlapd").c_str(), X_OK), 0);

  EXPECT_EQ(Shell(kDeploy + "/install.sh --prefix relative --destdir " + stage, log), 2);
}

}  // namespace
// The Slurm script turns the allocation's hosts into --peers (named as Slurm
// names them here; tests/deploy/sbatch_test.sh covers the other ways) and submits to
// the first node's daemon (scontrol and overlapctl stand-ins record it).
TEST(DeployTest, SlurmScriptSubmitsOverTheAllocatedNodes) {
  TempDir dir;
  const std::string bin = dir.path() + "/bin";
  std::filesystem::create_directories(bin);
  std::ofstream(bin + "/scontrol") << "#!/bin/sh\n[ \"$1 $2\" = \"show hostnames\" ] || exit 9\n"
                                   << "printf 'gpu-a\\ngpu-b\\ngpu-c\\n'\n";
  std::ofstream(bin + "/overlapctl") << "#!/bin/sh\necho \"overlapctl $*\"\n";
  ASSERT_EQ(Shell("chmod +x " + bin + "/scontrol " + bin + "/overlapctl", "/dev/null"), 0);
  const std::string log = dir.path() + "/log";
  ASSERT_EQ(Shell("PATH=" + bin +
                      ":$PATH OVERLAPD_NODE_NAMES=slurm SLURM_JOB_NODELIST='gpu-[a-c]' "
                      "PEER_PORT=7100 bash " +
                      kDeploy + "/slurm/overlap-job.sbatch layer.yaml --json",
                  log),
            0)
      << ReadFile(log);
  EXPECT_NE(ReadFile(log).find("overlapctl --addr unix:/run/overlapd/overlapd.sock submit "
                               "layer.yaml --peers gpu-a:7100,gpu-b:7100,gpu-c:7100 --wait --json"),
            std::string::npos)
      << ReadFile(log);
  EXPECT_NE(Shell("bash " + kDeploy + "/slurm/overlap-job.sbatch", log), 0);  // no graph
}

}  // namespace overlap
