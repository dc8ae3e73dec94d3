// Xid meanings, and which ones point at the GPU rather than the application.
#include "common/xid.h"

#include "gtest/gtest.h"

namespace overlap {
namespace {

TEST(XidTest, HardwareXidsPointAtTheGpuAndApplicationFaultsDoNot) {
  for (uint64_t xid : {48, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140}) {
    EXPECT_TRUE(XidPointsAtTheGpu(xid)) << xid;
  }
  for (uint64_t xid : {13, 31, 43, 45}) EXPECT_FALSE(XidPointsAtTheGpu(xid)) << xid;
  EXPECT_FALSE(XidPointsAtTheGpu(0));
  EXPECT_FALSE(XidPointsAtTheGpu(99999)) << "an unknown Xid is not called the GPU's";
}

TEST(XidTest, DescriptionsNameTheKnownOnes) {
  EXPECT_EQ(DescribeXid(79), "Xid 79 (fallen off the bus)");
  EXPECT_EQ(DescribeXid(31),
            "Xid 31 (GPU memory page fault, usually an application's bad address)");
  EXPECT_EQ(DescribeXid(99999), "Xid 99999");
  EXPECT_EQ(XidMeaning(99999), "");
}

}  // namespace
}  // namespace overlap
