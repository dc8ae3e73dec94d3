#include "server/rpc/node_rates.h"

namespace overlap::rpc {
namespace {

const v1::Device* Find(const v1::NodeSample& sample, int index) {
  for (const v1::Device& device : sample.devices()) {
    if (device.index() == index) return &device;
  }
  return nullptr;
}

}  // namespace

void AddDeviceRates(const v1::NodeSample* previous, v1::NodeSample& sample) {
  sample.clear_device_rates();
  const double seconds =
      previous == nullptr ? 0.0 : (sample.time_ms() - previous->time_ms()) / 1000.0;
  for (const v1::Device& device : sample.devices()) {
    v1::DeviceRates* rates = sample.add_device_rates();
    rates->set_device(device.index());
    if (seconds <= 0 || !device.nvlink_traffic_valid()) continue;
    const v1::Device* before = Find(*previous, device.index());
    if (before == nullptr || !before->nvlink_traffic_valid()) continue;
    // A counter that went back (a driver reload) says nothing of this interval.
    if (device.nvlink_tx_bytes() >= before->nvlink_tx_bytes()) {
      rates->set_nvlink_tx_bytes_per_s(
          static_cast<double>(device.nvlink_tx_bytes() - before->nvlink_tx_bytes()) / seconds);
    }
    if (device.nvlink_rx_bytes() >= before->nvlink_rx_bytes()) {
      rates->set_nvlink_rx_bytes_per_s(
          static_cast<double>(device.nvlink_rx_bytes() - before->nvlink_rx_bytes()) / seconds);
    }
  }
}

}  // namespace overlap::rpc
