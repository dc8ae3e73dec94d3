// The report's energy lines (client/format/energy_report.h) and node info's
// energy and NVLink columns: exact text from set values; nothing where the
// daemon counted no energy.
#include "client/format/energy_report.h"

#include <string>

#include "client/format/report.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace overlap::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

v1::Energy Energy(double joules, double watts) {
  v1::Energy e;
  e.set_step_joules(joules);
  e.set_step_watts(watts);
  e.set_joules_per_tflop(0.5);
  e.set_window_s(0.25);
  e.set_steps(10);
  return e;
}

TEST(EnergyReportTest, LinesPerOpAndLayerWithSerialAndTheNote) {
  v1::JobResult result;
  v1::OpResult* fc1 = result.add_ops();
  fc1->set_id("fc1");
  *fc1->mutable_energy() = Energy(0.375, 1342.5);
  fc1->mutable_energy()->set_serial_valid(true);
  fc1->mutable_energy()->set_serial_joules(0.4375);
  fc1->mutable_energy()->set_serial_watts(1101.25);
  fc1->mutable_energy()->set_serial_ms(0.4);
  fc1->mutable_energy()->set_note("overlap saves 31% of the time but draws 22% more power");
  result.add_ops()->set_id("fc2");  // not metered: no line
  *result.mutable_layer_energy() = Energy(1.25, 1298);
  EXPECT_EQ(FormatEnergy(result),
            "energy fc1: 0.375 J per step at 1342.5 W, 0.5 J/TFLOP; serial 0.4375 J per step at "
            "1101.2 W (0.400 ms)\n"
            "energy fc1: overlap saves 31% of the time but draws 22% more power\n"
            "energy layer: 1.25 J per step at 1298.0 W, 0.5 J/TFLOP\n");
  // Beside the layer: its ops op by op.
  result.mutable_layer_energy()->set_serial_valid(true);
  result.mutable_layer_energy()->set_serial_joules(1.5);
  result.mutable_layer_energy()->set_serial_watts(1000);
  result.mutable_layer_energy()->set_serial_ms(1.5);
  EXPECT_THAT(FormatEnergy(result),
              HasSubstr("energy layer: 1.25 J per step at 1298.0 W, 0.5 J/TFLOP; op by op 1.5 J "
                        "per step at 1000.0 W (1.500 ms)\n"));
  EXPECT_EQ(FormatEnergy(v1::JobResult()), "");
}

// Figures the counter's period bounds by 5% or more say so, and one line says why.
TEST(EnergyReportTest, CoarseFiguresCarryTheirBound) {
  v1::JobResult result;
  *result.mutable_layer_energy() = Energy(11, 702);
  v1::Energy& e = *result.mutable_layer_energy();
  e.set_step_error(0.03);
  e.set_serial_valid(true);
  e.set_serial_joules(20.2);
  e.set_serial_watts(927);
  e.set_serial_ms(13.767);
  e.set_serial_error(0.85);
  e.set_counter_period_ms(100);
  EXPECT_EQ(FormatEnergy(result),
            "energy layer: 11 J per step at 702.0 W, 0.5 J/TFLOP; op by op 20.2 J per step at "
            "927.0 W (within 85%) (13.767 ms)\n"
            "energy layer: NVML's counter moves every 100 ms: windows of a few periods read "
            "coarse (more iterations narrow them)\n");
  e.set_serial_error(0.01);
  EXPECT_THAT(FormatEnergy(result), Not(HasSubstr("coarse")));
}

TEST(EnergyReportTest, TheReportCarriesThem) {
  v1::Job job;
  job.set_id("job-000001");
  job.set_state(v1::SUCCEEDED);
  v1::OpResult* op = job.mutable_result()->add_ops();
  op->set_id("fc1");
  op->set_type("ag_gemm");
  *op->mutable_energy() = Energy(2, 400);
  EXPECT_THAT(FormatReport(job), HasSubstr("energy fc1: 2 J per step at 400.0 W, 0.5 J/TFLOP\n"));
  op->clear_energy();
  EXPECT_THAT(FormatReport(job), Not(HasSubstr("energy")));
}

TEST(EnergyReportTest, NodeInfoShowsEnergyAndNvlinkBytesWhereRead) {
  v1::GetNodeInfoResponse node;
  node.set_backend("cuda");
  v1::Device* d0 = node.add_devices();
  d0->set_index(0);
  d0->set_pci_bus_id("0000:00:06.0");
  d0->set_energy_valid(true);
  d0->set_energy_j(123456);
  d0->set_nvlink_traffic_valid(true);
  d0->set_nvlink_tx_bytes(int64_t{5} << 30);
  d0->set_nvlink_rx_bytes(int64_t{3} << 30);
  v1::Device* d1 = node.add_devices();
  d1->set_index(1);
  d1->set_pci_bus_id("0000:00:07.0");
  d1->set_energy_valid(true);
  d1->set_energy_j(1000);
  const std::string text = FormatNodeInfo(node);
  EXPECT_THAT(text, HasSubstr("ENERGY_KJ  NVLINK_TX_GB  NVLINK_RX_GB\n")) << text;
  EXPECT_THAT(text, HasSubstr("0000:00:06.0      123.5           5.4           3.2\n")) << text;
  EXPECT_THAT(text, HasSubstr("0000:00:07.0        1.0             -             -\n")) << text;
  node.mutable_devices(0)->set_energy_valid(false);
  node.mutable_devices(0)->set_nvlink_traffic_valid(false);
  node.mutable_devices(1)->set_energy_valid(false);
  EXPECT_THAT(FormatNodeInfo(node), Not(HasSubstr("ENERGY_KJ")));
}

}  // namespace
}  // namespace overlap::client
