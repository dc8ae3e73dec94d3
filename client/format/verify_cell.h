// The VERIFY and MAX_REL_ERR cells of every table that checks results against
// the float64 reference: the job report, commbench, `bench --peers` and
// `check --nodes`. VERIFY is one word, so that awk splits the row: "ok",
// "failed" (an error above the tolerance, or NaN) or "off" (the job ran with
// verify: false); the error itself is MAX_REL_ERR's, "2.0e-03", or "-" where
// nothing was verified. A row that stands for several ops (commbench's
// transports, a gradient form's jobs) folds them into a VerifyTally first.
// Pure formatting, no I/O; thread-compatible.
#pragma once

#include <string>
#include <vector>

#include "overlap/v1/overlap.pb.h"

namespace overlap::client {

// The verification of one op or of several, folded.
struct VerifyTally {
  bool verified = false;     // at least one op checked its result
  bool within = true;        // every op that checked was within its tolerance
  double max_rel_error = 0;  // the largest over the ops that checked (NaN stays NaN)

  // An op that did not check (`verified` false) changes nothing.
  void Add(bool op_verified, double op_max_rel_error, double op_tolerance);
  void Add(const v1::OpResult& op);
};

// Whether `op` checked its result and it was not within its tolerance.
bool VerifyFailed(const v1::OpResult& op);

// "ok", "failed" or "off".
std::string FormatVerify(const VerifyTally& tally);
std::string FormatVerify(const v1::OpResult& op);
// "2.0e-03", or "-" where nothing was verified.
std::string FormatRelError(const VerifyTally& tally);
std::string FormatRelError(const v1::OpResult& op);
// `cells` with MAX_REL_ERR's and VERIFY's appended: a row whose last two
// columns are those.
std::vector<std::string> WithVerifyCells(std::vector<std::string> cells, const VerifyTally& tally);

}  // namespace overlap::client
