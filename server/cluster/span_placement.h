// Where one part of a job that spans daemons keeps its ranks, and what its
// collectives across nodes need to meet: ranks node-major, global device g
// is device g % D of node g / D.
#pragma once

#include <string>
#include <vector>

#include "absl/time/time.h"

namespace overlap::cluster {

struct SpanPlacement {
  int nodes = 1;
  int node_index = 0;
  // The daemon's own devices that run this node's ranks, in rank order.
  std::vector<int> local_devices;

  int devices_per_node() const { return static_cast<int>(local_devices.size()); }
  int world_size() const { return nodes * devices_per_node(); }
  int NodeOf(int global_device) const { return global_device / devices_per_node(); }
  // The daemon's device behind global device `global_device` of this node.
  int LocalDevice(int global_device) const {
    return local_devices[global_device % devices_per_node()];
  }
};

struct SpanningOptions {
  SpanPlacement placement;
  // Prefixes every group's keys in the store: the global job id.
  std::string job_key;
  // The address this node's Gloo connections bind to (its peer address's host).
  std::string bind_address = "127.0.0.1";
  // Connecting a group, and every collective across nodes.
  absl::Duration timeout = absl::Seconds(60);
};

}  // namespace overlap::cluster
