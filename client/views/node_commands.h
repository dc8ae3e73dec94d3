// The overlapctl commands on the node (node, health, stats, and --version),
// apart from argument parsing (views/views_cli.cc) so that they only see a
// DaemonClient and a stream. Each returns an exit status (core/command_io.h).
#pragma once

#include <ostream>

#include "absl/status/status.h"
#include "client/core/command_io.h"
#include "client/core/daemon_client.h"

namespace overlap::client {

class NodeCommands {
 public:
  NodeCommands(DaemonClient& client, std::ostream& out, std::ostream& err, bool json)
      : client_(client), out_(out), err_(err), json_(json) {}

  int Node();
  // The GPUs' health from NVML now (device_health.h): the table and each
  // problem; exit kExitJobFailed when a GPU has one, kExitRefused when the
  // daemon has no readings to judge by.
  int Health();
  // Sets GPU `device`'s Xid counts of this boot back to 0 (after a GPU reset).
  int ForgetXids(int device);
  int Stats();

 private:
  int Fail(const absl::Status& status);

  DaemonClient& client_;
  std::ostream& out_;
  std::ostream& err_;
  bool json_;
};

// `overlapctl --version`: this build's version and commit, then the daemon's
// (or why it could not be asked); kExitOk either way.
int PrintVersions(DaemonClient& client, bool json, std::ostream& out);

}  // namespace overlap::client
