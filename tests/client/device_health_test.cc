// GPU health from NVML's readings: what counts as a problem, the NVLink errors
// counted between two readings, node's table and the JSON record.
#include "client/format/device_health.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace overlap::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;

// An H200 in good health: Gen5 x16 (idling at Gen1), 18 of 18 NVLinks, ECC on.
v1::Device Healthy(int index) {
  v1::Device d;
  d.set_index(index);
  d.set_pcie_valid(true);
  d.set_pcie_gen(1);
  d.set_pcie_max_gen(5);
  d.set_pcie_width(16);
  d.set_pcie_max_width(16);
  d.set_nvlink_valid(true);
  d.set_nvlinks_active(18);
  d.set_nvlinks_supported(18);
  d.set_ecc_valid(true);
  d.set_ecc_corrected(3);  // corrected errors are the ECC doing its job
  d.set_row_remap_valid(true);
  return d;
}

TEST(DeviceHealthTest, AHealthyGpuIdlingAtALowerGenHasNoProblem) {
  EXPECT_TRUE(HasHealth(Healthy(0)));
  EXPECT_FALSE(HasHealth(v1::Device()));
  EXPECT_THAT(HealthProblems(Healthy(0), 18), IsEmpty());
  EXPECT_THAT(HealthProblems(v1::Device(), 18), IsEmpty()) << "no readings, no verdict";
}

TEST(DeviceHealthTest, EachProblemIsNamedWithWhatToDo) {
  v1::Device d = Healthy(2);
  d.set_pcie_width(8);
  d.set_nvlinks_active(17);
  d.set_ecc_uncorrected(2);
  d.set_row_remap_pending(true);
  const std::vector<std::string> p = HealthProblems(d, 18);
  ASSERT_EQ(p.size(), 4u);
  EXPECT_EQ(p[0],
            "its PCIe link runs at x8 of x16: host copies get 50% of their bandwidth; reseat the "
            "GPU or check its riser");
  EXPECT_EQ(p[1],
            "17 NVLinks up where the node's best GPU has 18: its peer copies and collectives lose "
            "bandwidth; `nvidia-smi nvlink -s -i 2` lists them");
  EXPECT_THAT(p[2], StartsWith("2 uncorrectable ECC error(s) since the driver loaded"));
  EXPECT_EQ(p[3], "a row remap waits for a GPU reset: reset it to stop using the bad row");
  // A failed remap outranks a pending one.
  d.set_row_remap_failed(true);
  EXPECT_THAT(HealthProblems(d, 18).back(), StartsWith("a row remap failed"));
}

// Xids that point at the GPU make it unhealthy; an application's do not.
TEST(DeviceHealthTest, XidsThatPointAtTheGpuAreAProblem) {
  v1::Device d = Healthy(0);
  d.set_xid_valid(true);
  d.set_xid_errors(3);
  d.set_last_xid(31);
  EXPECT_THAT(HealthProblems(d, 18), IsEmpty()) << "three application faults";
  d.set_gpu_xid_errors(1);
  d.set_xid_errors(4);
  d.set_last_xid(79);
  EXPECT_THAT(HealthProblems(d, 18),
              ElementsAre("1 Xid error(s) that point at the GPU this boot (the last "
                          "Xid seen: Xid 79 (fallen off the bus)): `dmesg | grep Xid` has each; "
                          "drain its jobs and reset the GPU, then `overlapctl health "
                          "--forget-xids 0`"));
  const nlohmann::json j = HealthJson(d);
  EXPECT_EQ(j["xid"]["errors"], 4);
  EXPECT_EQ(j["xid"]["gpu_errors"], 1);
  EXPECT_EQ(j["xid"]["last"], 79);
  v1::Device xid_only;
  xid_only.set_xid_valid(true);
  EXPECT_TRUE(HasHealth(xid_only));
  EXPECT_FALSE(HealthJson(xid_only)["xid"].contains("last")) << "none seen yet";
}

// Links are compared with the node's best GPU, not with how many the GPU
// has: a node cabled with fewer links is not broken.
TEST(DeviceHealthTest, NvlinksAreComparedWithTheNodesBestGpu) {
  v1::GetNodeInfoResponse node;
  for (int i = 0; i < 3; ++i) {
    v1::Device* d = node.add_devices();
    *d = Healthy(i);
    d->set_nvlinks_active(12);
  }
  node.mutable_devices(1)->set_nvlinks_active(11);
  node.add_devices()->set_index(3);  // no NVML
  EXPECT_EQ(MostNvlinksActive(node), 12);
  EXPECT_THAT(HealthProblems(node.devices(0), 12), IsEmpty());
  EXPECT_THAT(HealthProblems(node.devices(1), 12),
              ElementsAre(StartsWith("11 NVLinks up where the node's best GPU has 12")));
  EXPECT_EQ(MostNvlinksActive(v1::GetNodeInfoResponse()), 0);
}

TEST(DeviceHealthTest, NvlinkErrorsBetweenTwoReadings) {
  v1::Device before = Healthy(0);
  before.set_nvlink_crc_errors(100);
  before.set_nvlink_replay_errors(7);
  v1::Device after = before;
  EXPECT_EQ(NvlinkErrorsBetween(before, after, "during the check"), "");
  after.set_nvlink_replay_errors(9);
  EXPECT_EQ(NvlinkErrorsBetween(before, after, "during the check"), "") << "replays alone";
  after.set_nvlink_replay_errors(7);
  after.set_nvlink_crc_errors(112);
  after.set_nvlink_recovery_errors(1);
  EXPECT_EQ(NvlinkErrorsBetween(before, after, "during the check"),
            "NVLink errors during the check: 12 CRC, 0 replay, 1 recovery");
  // A counter that went back (the driver reloaded in between) is not an error.
  after = before;
  after.set_nvlink_crc_errors(0);
  EXPECT_EQ(NvlinkErrorsBetween(before, after, "during the check"), "");
  after.set_nvlink_valid(false);
  EXPECT_EQ(NvlinkErrorsBetween(before, after, "during the check"), "");
}

TEST(DeviceHealthTest, NodeTableShowsEveryReadingAndNamesTheProblems) {
  v1::GetNodeInfoResponse node;
  *node.add_devices() = Healthy(0);
  node.mutable_devices(0)->set_xid_valid(true);
  v1::Device* bad = node.add_devices();
  *bad = Healthy(1);
  bad->set_pcie_replays(9);
  bad->set_nvlinks_active(16);
  bad->set_nvlink_crc_errors(4);
  bad->set_nvlink_replay_errors(2);
  bad->set_row_remap_failed(true);
  bad->set_xid_valid(true);
  bad->set_xid_errors(2);
  bad->set_last_xid(13);
  node.add_devices()->set_index(2);  // no NVML
  const std::string text = FormatDeviceHealth(node);
  EXPECT_THAT(text,
              StartsWith("health (errors since the driver loaded; Xids this boot, kept across "
                         "overlapd restarts):\n"
                         "INDEX  PCIE_NOW/MAX     PCIE_REPLAYS  NVLINKS  "
                         "NVLINK_CRC/REPLAY/RECOVERY  ECC_CORR/UNCORR  ROW_REMAP  XID_GPU/ALL  "
                         "LAST_XID\n"))
      << text;
  // One word a cell, so that awk splits every row into the same fields.
  EXPECT_THAT(text, HasSubstr("    0  Gen1x16/Gen5x16             0    18/18                       "
                              "0/0/0              3/0  none               0/0         -\n"))
      << text;
  EXPECT_THAT(text, HasSubstr("    1  Gen1x16/Gen5x16             9    16/18                       "
                              "4/2/0              3/0  FAILED             0/2        13\n"))
      << text;
  EXPECT_THAT(text, HasSubstr("    2  -                           -        -                           "
                              "-                -  -                    -         -\n"))
      << text;
  EXPECT_THAT(text, HasSubstr("GPU 1: 16 NVLinks up where the node's best GPU has 18"));
  EXPECT_THAT(text, HasSubstr("GPU 1: a row remap failed"));
  EXPECT_THAT(text, Not(HasSubstr("GPU 0:")));

  v1::GetNodeInfoResponse fine;
  *fine.add_devices() = Healthy(0);
  EXPECT_THAT(FormatDeviceHealth(fine), HasSubstr("no health problems\n"));
  v1::GetNodeInfoResponse host;
  host.add_devices()->set_index(0);
  EXPECT_EQ(FormatDeviceHealth(host), "") << "a backend without NVML prints no health table";
}

TEST(DeviceHealthTest, JsonHasOnlyTheGroupsNvmlAnswered) {
  v1::Device d = Healthy(0);
  d.set_ecc_valid(false);
  const nlohmann::json j = HealthJson(d);
  EXPECT_EQ(j["pcie"]["max_gen"], 5);
  EXPECT_EQ(j["pcie"]["width"], 16);
  EXPECT_EQ(j["nvlink"]["active"], 18);
  EXPECT_EQ(j["row_remap"]["pending"], false);
  EXPECT_FALSE(j.contains("ecc"));
  EXPECT_TRUE(HealthJson(v1::Device()).is_null());
}

// `overlapctl health --json`: only the devices with readings, each with its
// problems, and the unhealthy ones listed.
TEST(DeviceHealthTest, NodeJsonListsEachDeviceWithReadingsAndTheUnhealthyOnes) {
  v1::GetNodeInfoResponse node;
  *node.add_devices() = Healthy(0);
  *node.add_devices() = Healthy(1);
  node.mutable_devices(1)->set_ecc_uncorrected(1);
  node.add_devices()->set_index(2);  // no NVML
  EXPECT_EQ(UnhealthyDevices(node), (std::vector<int>{1}));
  const nlohmann::json j = NodeHealthJson(node);
  ASSERT_EQ(j["devices"].size(), 2u);
  EXPECT_EQ(j["devices"][0]["device"], 0);
  EXPECT_EQ(j["devices"][0]["problems"], nlohmann::json::array());
  EXPECT_EQ(j["devices"][1]["health"]["ecc"]["uncorrected"], 1);
  EXPECT_EQ(j["devices"][1]["problems"].size(), 1u);
  EXPECT_EQ(j["unhealthy_gpus"], nlohmann::json::array({1}));
  EXPECT_EQ(NodeHealthJson(v1::GetNodeInfoResponse())["unhealthy_gpus"], nlohmann::json::array());
}

}  // namespace
}  // namespace overlap::client
