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
  error_joules += other.error_joules;
  period_s = std::max(period_s, other.period_s);
}

EnergyWindow OneStepOfEach(const std::vector<EnergyWindow>& windows) {
  EnergyWindow w;
  if (windows.empty()) return w;
  for (const EnergyWindow& each : windows) {
    if (!each.valid || each.steps == 0) return EnergyWindow{};
    w.joules += each.joules / each.steps;
    w.seconds += each.seconds / each.steps;
    w.error_joules += each.error_joules / each.steps;
    w.period_s = std::max(w.period_s, each.period_s);
  }
  w.valid = true;
  w.steps = 1;
  return w;
}

EnergyWindow BackToBack(const EnergyWindow& a, const EnergyWindow& b) {
  return OneStepOfEach({a, b});
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
  absl::Duration period = absl::ZeroDuration();
  for (int d : unique) {
    period = std::max(period, monitor->EnergyCounterPeriod(d));
    absl::StatusOr<double> j = monitor->EnergyJoules(d);
    if (!j.ok()) return std::nullopt;
    joules.push_back(*j);
  }
  return EnergyMeter(*monitor, std::move(unique), std::move(joules), period, absl::Now());
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
  w.period_s = absl::ToDoubleSeconds(period_);
  // Each read lags the true count by up to one period: their difference is off
  // by at most one period's energy, at the power the window itself read.
  if (w.seconds > 0) w.error_joules = w.period_s * std::max(total / w.seconds, 0.0);
  w.valid = true;
  return w;
}

EnergyFigures EnergyOf(const EnergyWindow& step, double step_ms, const EnergyWindow& serial,
                       double serial_ms, const std::string& beside) {
  EnergyFigures f;
  if (!step.valid || step.steps == 0) return f;
  f.valid = true;
  f.step_joules = step.JoulesPerStep();
  f.step_watts = step.Watts();
  f.window_s = step.seconds;
  f.steps = step.steps;
  f.counter_period_ms = 1e3 * std::max(step.period_s, serial.period_s);
  if (step.joules > 0) f.step_error = step.error_joules / step.joules;
  if (!serial.valid || serial.steps == 0 || serial_ms <= 0) return f;
  f.serial_valid = true;
  f.serial_joules = serial.JoulesPerStep();
  f.serial_watts = serial.Watts();
  f.serial_ms = serial_ms;
  if (serial.joules > 0) f.serial_error = serial.error_joules / serial.joules;
  // Power read within a few percent, or within the counter's bounds, is the
  // counter's noise, not the schedule's.
  constexpr double kMorePower = 1.02;
  const bool more_power = f.step_watts * (1.0 - f.step_error) >
                          kMorePower * f.serial_watts * (1.0 + f.serial_error);
  if (step_ms > 0 && step_ms < serial_ms && more_power) {
    f.note = absl::StrFormat(
        "overlap saves %.0f%% of the time but draws %.0f%% more power (%.0f W vs %.0f W "
        "%s): %.3g J per step vs %.3g J %s",
        100.0 * (1.0 - step_ms / serial_ms), 100.0 * (f.step_watts / f.serial_watts - 1.0),
        f.step_watts, f.serial_watts, beside, f.step_joules, f.serial_joules, beside);
  }
  return f;
}

double JoulesPerTflop(double joules, double flops) {
  return joules > 0 && flops > 0 ? joules / (flops / 1e12) : 0;
}

}  // namespace overlap::runner
