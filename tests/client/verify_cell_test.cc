// The VERIFY and MAX_REL_ERR cells every checked table prints (report,
// commbench, bench --peers, check --nodes): one word each, and a row that
// folds several ops fails when any checked op failed.
#include "client/format/verify_cell.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace overlap::client {
namespace {

v1::OpResult Checked(double error, double tolerance) {
  v1::OpResult op;
  op.set_verified(true);
  op.set_max_rel_error(error);
  op.set_tolerance(tolerance);
  return op;
}

TEST(VerifyCellTest, OneOpOkFailedOrOff) {
  EXPECT_EQ(FormatVerify(Checked(2e-3, 1e-2)), "ok");
  EXPECT_EQ(FormatRelError(Checked(2e-3, 1e-2)), "2.0e-03");
  EXPECT_FALSE(VerifyFailed(Checked(2e-3, 1e-2)));
  EXPECT_EQ(FormatVerify(Checked(0.25, 1e-2)), "failed");
  EXPECT_EQ(FormatRelError(Checked(0.25, 1e-2)), "2.5e-01");
  EXPECT_TRUE(VerifyFailed(Checked(0.25, 1e-2)));
  v1::OpResult off = Checked(0.25, 1e-2);
  off.set_verified(false);  // --no-verify: the error field means nothing
  EXPECT_EQ(FormatVerify(off), "off");
  EXPECT_EQ(FormatRelError(off), "-");
  EXPECT_FALSE(VerifyFailed(off));
}

TEST(VerifyCellTest, AFoldIsTheWorstCheckedOpAndIgnoresUncheckedOnes) {
  VerifyTally tally;
  EXPECT_EQ(FormatVerify(tally), "off");
  EXPECT_EQ(FormatRelError(tally), "-");
  tally.Add(false, 0.9, 1e-2);  // not checked: neither its error nor a failure
  EXPECT_EQ(FormatVerify(tally), "off");
  tally.Add(true, 3e-3, 1e-2);
  tally.Add(true, 1e-3, 1e-2);
  EXPECT_EQ(FormatVerify(tally), "ok");
  EXPECT_EQ(FormatRelError(tally), "3.0e-03");
  // Within its own looser tolerance, though above the others': still ok.
  tally.Add(true, 4e-2, 5e-2);
  EXPECT_EQ(FormatVerify(tally), "ok");
  EXPECT_EQ(FormatRelError(tally), "4.0e-02");
  tally.Add(true, 2e-2, 1e-2);  // failed, below the worst error so far
  EXPECT_EQ(FormatVerify(tally), "failed");
  EXPECT_EQ(FormatRelError(tally), "4.0e-02");
}

// A NaN error (a result that went NaN) fails and stays the error shown.
TEST(VerifyCellTest, NanFailsAndIsShown) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(VerifyFailed(Checked(nan, 1e-2)));
  VerifyTally tally;
  tally.Add(true, 1e-3, 1e-2);
  tally.Add(true, nan, 1e-2);
  tally.Add(true, 2e-3, 1e-2);
  EXPECT_EQ(FormatVerify(tally), "failed");
  EXPECT_TRUE(std::isnan(tally.max_rel_error));
  EXPECT_EQ(FormatRelError(tally), "nan");
}

}  // namespace
}  // namespace overlap::client
