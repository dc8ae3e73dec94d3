#include "client/format/energy_report.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace overlap::client {
namespace {

// " (within 12%)" where the counter's period bounds a figure by 5% or more;
// "" where it is tighter.
std::string Bound(double error) {
  constexpr double kWorthSaying = 0.05;
  return error >= kWorthSaying ? absl::StrFormat(" (within %.0f%%)", 100 * error) : "";
}

// `beside` names the work the step is set against: an op's serial work, a
// layer's ops op by op (its serial_* figures either way).
std::string EnergyLine(const std::string& what, const v1::Energy& e, const std::string& beside) {
  std::string out = absl::StrFormat("energy %s: %.4g J per step at %.1f W%s", what,
                                    e.step_joules(), e.step_watts(), Bound(e.step_error()));
  if (e.joules_per_tflop() > 0) absl::StrAppendFormat(&out, ", %.4g J/TFLOP", e.joules_per_tflop());
  if (e.serial_valid()) {
    absl::StrAppendFormat(&out, "; %s %.4g J per step at %.1f W%s (%.3f ms)", beside,
                          e.serial_joules(), e.serial_watts(), Bound(e.serial_error()),
                          e.serial_ms());
  }
  absl::StrAppend(&out, "\n");
  if (std::max(e.step_error(), e.serial_error()) >= 0.05) {
    absl::StrAppendFormat(&out,
                          "energy %s: NVML's counter moves every %.0f ms: windows of a few "
                          "periods read coarse (more iterations narrow them)\n",
                          what, e.counter_period_ms());
  }
  if (!e.note().empty()) absl::StrAppend(&out, "energy ", what, ": ", e.note(), "\n");
  return out;
}

}  // namespace

std::string FormatEnergy(const v1::JobResult& result) {
  std::string out;
  for (const v1::OpResult& op : result.ops()) {
    if (op.has_energy()) out += EnergyLine(op.id(), op.energy(), "serial");
  }
  if (result.has_layer_energy()) out += EnergyLine("layer", result.layer_energy(), "op by op");
  return out;
}

}  // namespace overlap::client
