#include "client/format/energy_report.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace overlap::client {
namespace {

std::string EnergyLine(const std::string& what, const v1::Energy& e) {
  std::string out = absl::StrFormat("energy %s: %.4g J per step at %.1f W", what, e.step_joules(),
                                    e.step_watts());
  if (e.joules_per_tflop() > 0) absl::StrAppendFormat(&out, ", %.4g J/TFLOP", e.joules_per_tflop());
  if (e.serial_valid()) {
    absl::StrAppendFormat(&out, "; serial %.4g J per step at %.1f W (%.3f ms)", e.serial_joules(),
                          e.serial_watts(), e.serial_ms());
  }
  absl::StrAppend(&out, "\n");
  if (!e.note().empty()) absl::StrAppend(&out, "energy ", what, ": ", e.note(), "\n");
  return out;
}

}  // namespace

std::string FormatEnergy(const v1::JobResult& result) {
  std::string out;
  for (const v1::OpResult& op : result.ops()) {
    if (op.has_energy()) out += EnergyLine(op.id(), op.energy());
  }
  if (result.has_layer_energy()) out += EnergyLine("layer", result.layer_energy());
  return out;
}

}  // namespace overlap::client
