#include "server/engine/gpu_identity.h"

#include <gtest/gtest.h>

namespace overlap::engine {
namespace {

TEST(GpuIdentityTest, FormatsTheUuidAsNvmlDoes) {
  const char bytes[16] = {'\x6f', '\x2a', '\x01', '\x00', '\x9b', '\xcd', '\x11', '\x22',
                          '\x33', '\x44', '\x55', '\x66', '\x77', '\x88', '\x99', '\xff'};
  EXPECT_EQ(FormatGpuUuid(bytes), "GPU-6f2a0100-9bcd-1122-3344-5566778899ff");
}

TEST(GpuIdentityTest, WidensThePciDomainToNvmlsEightDigits) {
  EXPECT_EQ(NvmlPciBusId("0000:19:00.0"), "00000000:19:00.0");
  EXPECT_EQ(NvmlPciBusId("0001:9a:00.0"), "00000001:9A:00.0");
  EXPECT_EQ(NvmlPciBusId("00000000:19:00.0"), "00000000:19:00.0");
  EXPECT_EQ(NvmlPciBusId("host:0"), "host:0") << "not a bus id: as given";
  EXPECT_EQ(NvmlPciBusId(""), "");
}

}  // namespace
}  // namespace overlap::engine
