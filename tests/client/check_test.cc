// `overlapctl check`: its job specs, the bandwidth it derives, and which GPUs
// and links it calls slow.
#include "client/measure/check.h"

#include <string>
#include <vector>

#include "common/graph_parser.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace overlap::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(CheckSpecTest, GpuJobIsOneSquareGemmOnThatGpu) {
  CheckOptions o;
  o.gemm_size = 4096;
  o.iterations = 7;
  auto spec = ParseJobSpec(GpuCheckSpec(3, o));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->devices, (std::vector<int>{3}));
  EXPECT_EQ(spec->iterations, 7);
  EXPECT_FALSE(spec->verify);
  ASSERT_EQ(spec->ops.size(), 1u);
  EXPECT_EQ(spec->ops[0].m, 4096);
  EXPECT_EQ(spec->ops[0].k, 4096);
  EXPECT_EQ(spec->ops[0].n, 4096);
  EXPECT_EQ(spec->ops[0].mode, OverlapMode::kSerial);
}

TEST(CheckSpecTest, LinkJobGathersShardsOfTheAskedSize) {
  CheckOptions o;
  o.link_mib = 64;
  auto spec = ParseJobSpec(LinkCheckSpec(2, 5, o));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->devices, (std::vector<int>{2, 5}));
  ASSERT_EQ(spec->ops.size(), 1u);
  const OpSpec& op = spec->ops[0];
  EXPECT_EQ(op.type, OpType::kAgGemm);
  EXPECT_EQ(op.transport, Transport::kP2p);
  // Each rank's shard: m/2 rows of k bf16 values = 64 MiB.
  EXPECT_EQ(op.m / 2 * op.k * 2, int64_t{64} << 20);
  // 64 MiB in 0.2 ms is 335.5 GB/s per direction.
  EXPECT_NEAR(LinkGbps(o, 0.2), 67108864.0 / 0.2e-3 / 1e9, 1e-9);
  EXPECT_EQ(LinkGbps(o, 0), 0);
}

CheckResult Result() {
  CheckResult r;
  r.gpus = {{0, 1.00, 1100}, {1, 1.04, 1057}, {2, 1.08, 1018}, {3, 1.01, 1089}};
  r.links = {
      {0, 1, 0.20, 0.30, 335, 223}, {0, 2, 0.21, 0.30, 320, 223}, {1, 2, 0.25, 0.31, 268, 216}};
  return r;
}

TEST(CheckTest, SlowIsPastTheThresholdFromTheBest) {
  const CheckResult r = Result();
  // GPU 2 is 8% slower than GPU 0 (past 5%); GPU 1's 4% is not.
  EXPECT_EQ(SlowGpus(r), (std::vector<size_t>{2}));
  // Pair 1-2 is 20% below the best (past 10%); 0-2's 4.5% is not.
  EXPECT_EQ(SlowLinks(r), (std::vector<size_t>{2}));
  EXPECT_TRUE(SlowGpus(CheckResult{}).empty());
  EXPECT_TRUE(SlowLinks(CheckResult{}).empty());
}

TEST(CheckTest, TablesMarkAndExplainWhatIsSlow) {
  const std::string text = FormatCheck(Result(), CheckOptions{});
  EXPECT_THAT(text, HasSubstr("slow GPU: 2, its GEMM 8.0% slower than the fastest GPU's"));
  EXPECT_THAT(text, HasSubstr("slow link: 1-2, 268.0 GB/s over the copy engines"));
  EXPECT_THAT(text, Not(HasSubstr("slow GPU: 1")));
  CheckResult fine = Result();
  fine.gpus[2].gemm_ms = 1.02;
  fine.links[2].p2p_gbps = 330;
  EXPECT_THAT(FormatCheck(fine, CheckOptions{}), HasSubstr("no slow GPU or link\n"));
}

// NVML's capped times before and after the GEMM phase: each GPU's share of it
// held back by power and by heat, shown beside its GEMM and given as the
// likely cause of a slow one.
// A GPU's energy comes from its check job's op (the daemon's report) and is
// printed as joules per TFLOP beside its power; a GPU without it gets no line.
TEST(CheckTest, PrintsJoulesPerTflopWhereEnergyWasCounted) {
  v1::OpResult op;
  op.mutable_gemm_alone()->set_median_ms(2);
  op.mutable_energy()->set_joules_per_tflop(1.25);
  op.mutable_energy()->set_step_watts(640);
  CheckOptions o;
  o.gemm_size = 1000;
  const GpuCheck g = GpuCheckOf(3, op, o);
  EXPECT_EQ(g.device, 3);
  EXPECT_DOUBLE_EQ(g.tflops, 2e9 / 2e-3 / 1e12);
  ASSERT_TRUE(g.energy_valid);
  EXPECT_DOUBLE_EQ(g.joules_per_tflop, 1.25);
  EXPECT_DOUBLE_EQ(g.watts, 640);
  op.clear_energy();
  EXPECT_FALSE(GpuCheckOf(4, op, o).energy_valid);

  CheckResult r = Result();
  r.gpus[1].energy_valid = true;
  r.gpus[1].joules_per_tflop = 1.25;
  r.gpus[1].watts = 640;
  const std::string text = FormatCheck(r, CheckOptions{});
  EXPECT_THAT(text, HasSubstr("energy: GPU 1, 1.25 J/TFLOP at 640 W average\n"));
  EXPECT_THAT(text, Not(HasSubstr("energy: GPU 0")));
  const nlohmann::json j = CheckJson(r, CheckOptions{});
  EXPECT_DOUBLE_EQ(j["gpus"][1]["joules_per_tflop"].get<double>(), 1.25);
  EXPECT_FALSE(j["gpus"][0].contains("joules_per_tflop"));
  EXPECT_THAT(FormatCheck(Result(), CheckOptions{}), Not(HasSubstr("J/TFLOP")));
}

TEST(CheckTest, CappedSharesExplainASlowGpu) {
  v1::GetNodeInfoResponse before, after;
  for (int d = 0; d < 4; ++d) {
    v1::Device* b = before.add_devices();
    b->set_index(d);
    b->set_capped_time_valid(d != 3);  // GPU 3: no NVML counters
    b->set_power_capped_s(100);
    b->set_thermal_capped_s(7);
    v1::Device* a = after.add_devices();
    *a = *b;
    if (d == 2) {
      a->set_power_capped_s(100.5);
      a->set_thermal_capped_s(8.5);
    }
  }
  CheckResult r = Result();
  for (GpuCheck& g : r.gpus) SetCappedShares(before, after, 2.0, &g);
  EXPECT_TRUE(r.gpus[0].capped_valid);
  EXPECT_DOUBLE_EQ(r.gpus[0].power_capped, 0);
  EXPECT_DOUBLE_EQ(r.gpus[2].power_capped, 0.25);
  EXPECT_DOUBLE_EQ(r.gpus[2].thermal_capped, 0.75);
  EXPECT_FALSE(r.gpus[3].capped_valid);
  const std::string text = FormatCheck(r, CheckOptions{});
  EXPECT_THAT(text, HasSubstr("POWER_CAPPED_%  HEAT_CAPPED_%"));
  EXPECT_THAT(text, HasSubstr("slow GPU: 2, its GEMM 8.0% slower than the fastest GPU's (more than "
                              "5%); its clocks were held back by the power limit 25% and by heat "
                              "75% of the GEMM phase"));
  const nlohmann::json j = CheckJson(r, CheckOptions{});
  EXPECT_DOUBLE_EQ(j["gpus"][2]["thermal_capped_share"].get<double>(), 0.75);
  EXPECT_FALSE(j["gpus"][3].contains("power_capped_share"));
  // Without counters anywhere, no such columns.
  EXPECT_THAT(FormatCheck(Result(), CheckOptions{}), Not(HasSubstr("POWER_CAPPED_%")));
}

// Health at the end of the check, and NVLink errors counted during it: each
// problem a line, the GPU in the JSON's unhealthy list.
TEST(CheckTest, HealthProblemsAndNvlinkErrorsDuringTheCheckAreFindings) {
  v1::GetNodeInfoResponse start, end;
  for (int d = 0; d < 4; ++d) {
    v1::Device* s = start.add_devices();
    s->set_index(d);
    s->set_nvlink_valid(d != 3);  // GPU 3: no NVML
    s->set_nvlinks_active(18);
    s->set_nvlinks_supported(18);
    s->set_nvlink_crc_errors(40);
    *end.add_devices() = *s;
  }
  end.mutable_devices(1)->set_nvlink_crc_errors(45);
  end.mutable_devices(2)->set_nvlinks_active(17);
  CheckResult r = Result();
  for (GpuCheck& g : r.gpus) SetHealthFindings(start, end, &g);
  EXPECT_FALSE(r.gpus[0].health.is_null());
  EXPECT_TRUE(r.gpus[0].health_problems.empty());
  EXPECT_TRUE(r.gpus[3].health.is_null());
  EXPECT_EQ(UnhealthyGpus(r), (std::vector<size_t>{1, 2}));
  const std::string text = FormatCheck(r, CheckOptions{});
  EXPECT_THAT(text, HasSubstr("unhealthy GPU: 1, NVLink errors during the check: 5 CRC, 0 replay, "
                              "0 recovery\n"));
  EXPECT_THAT(text, HasSubstr("unhealthy GPU: 2, 17 NVLinks up where the node's best GPU has 18"));
  EXPECT_THAT(text, Not(HasSubstr("no health problem")));
  const nlohmann::json j = CheckJson(r, CheckOptions{});
  EXPECT_EQ(j["unhealthy_gpus"], nlohmann::json::array({1, 2}));
  EXPECT_EQ(j["gpus"][2]["health"]["nvlink"]["active"], 17);
  EXPECT_EQ(j["gpus"][1]["health_problems"].size(), 1u);
  EXPECT_FALSE(j["gpus"][3].contains("health"));

  CheckResult fine = Result();
  for (GpuCheck& g : fine.gpus) SetHealthFindings(start, start, &g);
  EXPECT_THAT(FormatCheck(fine, CheckOptions{}),
              HasSubstr("no health problem (PCIe link, NVLinks, ECC, row remaps, Xids)\n"));
  // Without NVML anywhere, nothing is said of health.
  EXPECT_THAT(FormatCheck(Result(), CheckOptions{}), Not(HasSubstr("health")));
}

TEST(CheckTest, JsonListsEverythingAndTheSlowOnes) {
  const nlohmann::json j = CheckJson(Result(), CheckOptions{});
  ASSERT_EQ(j["gpus"].size(), 4u);
  ASSERT_EQ(j["links"].size(), 3u);
  EXPECT_EQ(j["gpus"][2]["device"], 2);
  EXPECT_EQ(j["slow_gpus"], nlohmann::json::array({2}));
  EXPECT_EQ(j["slow_links"], nlohmann::json::array({nlohmann::json::array({1, 2})}));
  EXPECT_EQ(j["link_mib"], 64);
  EXPECT_EQ(j["unhealthy_gpus"], nlohmann::json::array());
}

}  // namespace
}  // namespace overlap::client
