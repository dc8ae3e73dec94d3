// `overlapctl calibrate`: the node's calibration for the planner. Without
// --from it measures (a commbench and a one-repeat bench sweep on the daemon,
// as those commands run them) and fits; with --from it fits recorded
// `bench --json` / `commbench --json` / `commbench --peers --json` results.
// The result is printed (--json: the calibration itself), written with -o,
// and kept by the daemon (measured: always; --from: with --store), where
// `plan` and `auto` find it.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "client/core/daemon_client.h"
#include "client/measure/bench.h"

namespace overlap::client {

struct CalibrateOptions {
  std::vector<std::string> from;  // recorded results; empty = measure
  std::string gemm_slowdown;      // "nccl=1.2,p2p=1.1": figures measured elsewhere
  double piece_overhead_ms = -1;  // < 0: not given
  std::string output;             // -o: write the calibration here
  bool store = false;             // --from: keep it on the daemon too
  std::string load;               // keep this calibration file on the daemon as it is
  std::vector<int> devices;       // measure: the group (empty = every device)
  std::string shapes;             // measure: bench shapes (empty = the default sweep)
};

int RunCalibrate(DaemonClient& client, const CalibrateOptions& options, bool json, bool err_is_tty,
                 std::ostream& out, std::ostream& err);

}  // namespace overlap::client
