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
// ran it, not its kernels alone. NVML's counter moves only when the driver
// folds in a power sample (every 100 ms on some GPUs; the monitor measures it,
// DeviceMonitor::EnergyCounterPeriod): each read may lag by up to one period,
// so a window's joules are known within about one period's energy, and each
// figure carries that bound.
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
  // The bound on `joules` from the counter's period: one period's energy at
  // the window's own power, summed over the windows added (0: exact).
  double error_joules = 0;
  double period_s = 0;  // the counter's period (the longest of the windows')

  double JoulesPerStep() const { return steps > 0 ? joules / steps : 0; }
  double Watts() const { return seconds > 0 ? joules / seconds : 0; }
  // Both windows' sums; valid only where both are (an empty one is neutral).
  void Add(const EnergyWindow& other);
};

// Work run back to back, one step of each: one step whose joules and seconds
// are each window's per step, summed; valid where both are.
EnergyWindow BackToBack(const EnergyWindow& a, const EnergyWindow& b);

// The same over any number of windows (a layer's ops one by one: each op's
// own timed step): one step of joules sum(joules_i / steps_i) and seconds
// sum(seconds_i / steps_i), each pair from the same window, so that its
// watts are a mean of the windows' own and never above the highest of them.
// Invalid where any window is, has no steps, or there are none.
EnergyWindow OneStepOfEach(const std::vector<EnergyWindow>& windows);

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
              std::vector<double> start_joules, absl::Duration period, absl::Time start)
      : monitor_(&monitor),
        devices_(std::move(devices)),
        start_joules_(std::move(start_joules)),
        period_(period),
        start_(start) {}
  const engine::DeviceMonitor* monitor_;
  std::vector<int> devices_;
  std::vector<double> start_joules_;
  absl::Duration period_;  // the longest counter period of `devices_`
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
  // Beside it: an op's serial work (GEMM alone's + collective alone's), a
  // layer's ops op by op (each op's own step, OneStepOfEach).
  bool serial_valid = false;
  double serial_joules = 0;  // per step
  double serial_watts = 0;   // serial_joules over the same windows' seconds per step
  double serial_ms = 0;      // its medians, summed: GEMM alone + collective alone, or op by op
  std::string note;          // overlap saved time but drew more power; "" otherwise
  // Each figure's bound from the counter's period, as a fraction of it
  // (0.1 = within 10%), and that period in ms (0: the counter moves with
  // every read).
  double step_error = 0;
  double serial_error = 0;
  double counter_period_ms = 0;
};

// `step` over the step's median `step_ms`; `serial` (may be invalid) as the
// work beside it over `serial_ms`, named `beside` in the note ("serial",
// "op by op"). The note is set where the step is faster than that work but
// its average power is more than 2% higher.
EnergyFigures EnergyOf(const EnergyWindow& step, double step_ms, const EnergyWindow& serial,
                       double serial_ms, const std::string& beside = "serial");

// Joules per TFLOP of work: `joules` per step over `flops` per step; 0 where
// either is unknown.
double JoulesPerTflop(double joules, double flops);

}  // namespace overlap::runner
