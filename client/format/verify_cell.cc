#include "client/format/verify_cell.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_format.h"

namespace overlap::client {

void VerifyTally::Add(bool op_verified, double op_max_rel_error, double op_tolerance) {
  if (!op_verified) return;
  verified = true;
  // Written so that a NaN error fails the check and is the one shown.
  within = within && op_max_rel_error <= op_tolerance;
  if (!std::isnan(max_rel_error) && !(op_max_rel_error <= max_rel_error)) {
    max_rel_error = op_max_rel_error;
  }
}

void VerifyTally::Add(const v1::OpResult& op) {
  Add(op.verified(), op.max_rel_error(), op.tolerance());
}

bool VerifyFailed(const v1::OpResult& op) {
  VerifyTally tally;
  tally.Add(op);
  return !tally.within;
}

std::string FormatVerify(const VerifyTally& tally) {
  if (!tally.verified) return "off";
  return tally.within ? "ok" : "failed";
}

std::string FormatVerify(const v1::OpResult& op) {
  VerifyTally tally;
  tally.Add(op);
  return FormatVerify(tally);
}

std::string FormatRelError(const VerifyTally& tally) {
  return tally.verified ? absl::StrFormat("%.1e", tally.max_rel_error) : "-";
}

std::string FormatRelError(const v1::OpResult& op) {
  VerifyTally tally;
  tally.Add(op);
  return FormatRelError(tally);
}

std::vector<std::string> WithVerifyCells(std::vector<std::string> cells, const VerifyTally& tally) {
  cells.push_back(FormatRelError(tally));
  cells.push_back(FormatVerify(tally));
  return cells;
}

}  // namespace overlap::client
