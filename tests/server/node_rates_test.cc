#include "server/rpc/node_rates.h"

#include <gtest/gtest.h>

namespace overlap::rpc {
namespace {

v1::NodeSample At(int64_t time_ms, bool read, int64_t tx, int64_t rx) {
  v1::NodeSample sample;
  sample.set_time_ms(time_ms);
  v1::Device* device = sample.add_devices();
  device->set_index(0);
  device->set_nvlink_traffic_valid(read);
  device->set_nvlink_tx_bytes(tx);
  device->set_nvlink_rx_bytes(rx);
  return sample;
}

TEST(NodeRatesTest, NvlinkThroughputIsTheCountersChangeOverTheInterval) {
  const v1::NodeSample before = At(1000, true, 1'000, 5'000);
  v1::NodeSample now = At(1250, true, 1'000 + 500'000, 5'000 + 250'000);
  AddDeviceRates(&before, now);
  ASSERT_EQ(now.device_rates_size(), 1);
  ASSERT_TRUE(now.device_rates(0).has_nvlink_tx_bytes_per_s());
  EXPECT_DOUBLE_EQ(now.device_rates(0).nvlink_tx_bytes_per_s(), 2'000'000.0);
  EXPECT_DOUBLE_EQ(now.device_rates(0).nvlink_rx_bytes_per_s(), 1'000'000.0);
}

// The host backend reads no counters; the first sample has nothing before it;
// a counter that went back (a driver reload) says nothing: present, unset.
TEST(NodeRatesTest, ARateNotReadIsPresentButUnset) {
  v1::NodeSample host = At(1250, false, 0, 0);
  const v1::NodeSample host_before = At(1000, false, 0, 0);
  AddDeviceRates(&host_before, host);
  ASSERT_EQ(host.device_rates_size(), 1);
  EXPECT_EQ(host.device_rates(0).device(), 0);
  EXPECT_FALSE(host.device_rates(0).has_nvlink_tx_bytes_per_s());
  EXPECT_FALSE(host.device_rates(0).has_nvlink_rx_bytes_per_s());

  v1::NodeSample first = At(1000, true, 10, 10);
  AddDeviceRates(nullptr, first);
  EXPECT_FALSE(first.device_rates(0).has_nvlink_tx_bytes_per_s());

  const v1::NodeSample before = At(1000, true, 900, 10);
  v1::NodeSample back = At(1100, true, 100, 110);
  AddDeviceRates(&before, back);
  EXPECT_FALSE(back.device_rates(0).has_nvlink_tx_bytes_per_s());
  EXPECT_DOUBLE_EQ(back.device_rates(0).nvlink_rx_bytes_per_s(), 1000.0);
}

}  // namespace
}  // namespace overlap::rpc
