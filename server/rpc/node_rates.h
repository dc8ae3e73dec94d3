// The rates a node sample carries (v1::NodeSample.device_rates): NVLink
// throughput from the change of NVML's byte counters (v1::Device
// nvlink_tx_bytes / nvlink_rx_bytes) since the sample before. A pure
// function of two samples, for the sampler's thread (node_sampler.h).
#pragma once

#include "overlap/v1/overlap.pb.h"

namespace overlap::rpc {

// Sets `sample`'s device_rates, one per device: a rate where both samples
// read the device's counters, time went forward and the counters did not go
// back; unset otherwise. `previous` may be null (the first sample).
void AddDeviceRates(const v1::NodeSample* previous, v1::NodeSample& sample);

}  // namespace overlap::rpc
