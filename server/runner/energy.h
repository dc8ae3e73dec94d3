// Energy bookkeeping of the timed phases: the devices' energy counters
// (engine/device_monitor.h, EnergyJoules: NVML on CUDA, a simulated or test
// counter on the host backend) read before a phase's first timed iteration and
// after its last, and what the report derives from them: joules per step and
// average power, the overlapped step beside the same work run serially, and a
// note where overlap saves time but draws more power.
//
// The window between the two reads holds the timed iterations and what runs
// between them (the host's sync, a heat head start's GEMMs, launch-gate
// holds): its joules per step are what one step cost the GPUs as the runner
// ran it, not its kernels alone. NVML updates the counter every few
// milliseconds, so short phases read coarse.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "server/engine/device_monitor.h"
#include "server/engine/engine.h"

namespace overlap::runner {

// What the devices drew over one or more timed phases, summed over devices.
struct EnergyWindow {
  bool valid = false;  // every device's counter answered both reads
  double joules = 0;
  double seconds = 0;  // the window's wall time (summed over phases)
  int steps = 0;       // timed iterations in it

  double JoulesPerStep() const { return steps > 0 ? joules / steps : 0; }
  double Watts() const { return seconds > 0 ? joules / seconds : 0; }
  // Both windows' sums; valid only where both are (an empty one is neutral).
  void Add(const EnergyWindow& other);
};

// Work run back to back, one step of each: one step whose joules and seconds
// are each window's per step, summed; valid where both are.
EnergyWindow BackToBack(const EnergyWindow& a, const EnergyWindow& b);

// A first read of `devices`' energy counters (each device once); Finish reads
// them again. Empty where the engine has no monitor (a job spanning daemons)
// or a device's counter does not answer.
class EnergyMeter {
 public:
  static std::optional<EnergyMeter> Start(const engine::Engine& engine,
                                          const std::vector<int>& devices);
  // The window from Start to now over `steps` timed iterations; invalid where
  // a counter stopped answering or ran backwards (a driver reload).
  EnergyWindow Finish(int steps) const;

 private:
  EnergyMeter(const engine::DeviceMonitor& monitor, std::vector<int> devices,
              std::vector<double> start_joules, absl::Time start)
      : monitor_(&monitor),
        devices_(std::move(devices)),
        start_joules_(std::move(start_joules)),
        start_(start) {}
  const engine::DeviceMonitor* monitor_;
  std::vector<int> devices_;
  std::vector<double> start_joules_;
  absl::Time start_;
};

// An op's or a layer step's energy as its report gives it: the step as it ran
// (overlapped where its schedule overlaps), and the same work run serially
// (each op's GEMM alone and collective alone, back to back), where measured.
struct EnergyFigures {
  bool valid = false;
  double step_joules = 0;  // per step
  double step_watts = 0;
  double window_s = 0;  // the step's windows' wall time, summed: step_watts' denominator
  int steps = 0;        // the timed steps in them
  bool serial_valid = false;
  double serial_joules = 0;  // per step: GEMM alone's + collective alone's
  double serial_watts = 0;
  double serial_ms = 0;  // GEMM alone + collective alone (medians)
  std::string note;      // overlap saved time but drew more power; "" otherwise
};

// `step` over the step's median `step_ms`; `serial` (may be invalid) as the
// serial work's energy over `serial_ms`. The note is set where the step is
// faster than serial but its average power is more than 2% higher.
EnergyFigures EnergyOf(const EnergyWindow& step, double step_ms, const EnergyWindow& serial,
                       double serial_ms);

// Joules per TFLOP of work: `joules` per step over `flops` per step; 0 where
// either is unknown.
double JoulesPerTflop(double joules, double flops);

}  // namespace overlap::runner
