#include "server/runner/energy.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "server/engine/device_monitor.h"

namespace overlap::runner {

void EnergyWindow::Add(const EnergyWindow& other) {
  if (other.steps == 0 && !other.valid) return;
  if (steps == 0 && !valid) {
    *this = other;
    return;
  }
  valid = valid && other.valid;
  joules += other.joules;
  seconds += other.seconds;
  steps += other.steps;
}

EnergyWindow BackToBack(const EnergyWindow& a, const EnergyWindow& b) {
  EnergyWindow w;
  if (!a.valid || !b.valid || a.steps == 0 || b.steps == 0) return w;
  w.valid = true;
  w.steps = 1;
  w.joules = a.joules / a.steps + b.joules / b.steps;
  w.seconds = a.seconds / a.steps + b.seconds / b.steps;
  return w;
}

std::optional<EnergyMeter> EnergyMeter::Start(const engine::Engine& engine,
                                              const std::vector<int>& devices) {
  const engine::DeviceMonitor* monitor = engine.Monitor();
  if (monitor == nullptr) return std::nullopt;
  std::vector<int> unique = devices;
  std::sort(unique.begin(), unique.end());
  unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
  // A rank of another daemon is that daemon's to meter.
  unique.erase(
      std::remove_if(unique.begin(), unique.end(), [&](int d) { return !engine.IsLocalDevice(d); }),
      unique.end());
  if (unique.empty()) return std::nullopt;
  std::vector<double> joules;
  for (int d : unique) {
    absl::StatusOr<double> j = monitor->EnergyJoules(d);
    if (!j.ok()) return std::nullopt;
    joules.push_back(*j);
  }
  return EnergyMeter(*monitor, std::move(unique), std::move(joules), absl::Now());
}

EnergyWindow EnergyMeter::Finish(int steps) const {
  EnergyWindow w;
  w.steps = steps;
  double total = 0;
  for (size_t i = 0; i < devices_.size(); ++i) {
    absl::StatusOr<double> j = monitor_->EnergyJoules(devices_[i]);
    if (!j.ok() || *j < start_joules_[i]) return w;
    total += *j - start_joules_[i];
  }
  w.seconds = absl::ToDoubleSeconds(absl::Now() - start_);
  w.joules = total;
  w.valid = true;
  return w;
}

EnergyFigures EnergyOf(const EnergyWindow& step, double step_ms, const EnergyWindow& serial,
                       double serial_ms) {
  EnergyFigures f;
  if (!step.valid || step.steps == 0) return f;
  f.valid = true;
  f.step_joules = step.JoulesPerStep();
  f.step_watts = step.Watts();
  f.window_s = step.seconds;
  f.steps = step.steps;
  if (!serial.valid || serial.steps == 0 || serial_ms <= 0) return f;
  f.serial_valid = true;
  f.serial_joules = serial.JoulesPerStep();
  f.serial_watts = serial.Watts();
  f.serial_ms = serial_ms;
  // Power read within a few percent is the counter's noise, not the schedule's.
  constexpr double kMorePower = 1.02;
  if (step_ms > 0 && step_ms < serial_ms && f.step_watts > kMorePower * f.serial_watts) {
    f.note = absl::StrFormat(
        "overlap saves %.0f%% of the time but draws %.0f%% more power (%.0f W vs %.0f W "
        "serial): %.3g J per step vs %.3g J serial",
        100.0 * (1.0 - step_ms / serial_ms), 100.0 * (f.step_watts / f.serial_watts - 1.0),
        f.step_watts, f.serial_watts, f.step_joules, f.serial_joules);
  }
  return f;
}

double JoulesPerTflop(double joules, double flops) {
  return joules > 0 && flops > 0 ? joules / (flops / 1e12) : 0;
}

}  // namespace overlap::runner
