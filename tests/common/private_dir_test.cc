#include "common/private_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace overlap {
namespace {

using ::testing::HasSubstr;

class PrivateDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/ovl-private-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    root_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  std::string root_;
  const unsigned me_ = static_cast<unsigned>(::getuid());
};

TEST_F(PrivateDirTest, FallbackIsPerUid) {
  EXPECT_EQ(FallbackSocketDir(1000), "/tmp/overlapd-1000");
}

TEST_F(PrivateDirTest, MadePrivateWhateverTheUmaskAndAcceptedAgain) {
  const std::string dir = root_ + "/d";
  const mode_t old = ::umask(0);
  const absl::Status made = MakePrivateDir(dir, me_, "listen");
  ::umask(old);
  ASSERT_TRUE(made.ok()) << made;
  struct stat st {};
  ASSERT_EQ(::stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  EXPECT_TRUE(MakePrivateDir(dir, me_, "listen").ok());
}

TEST_F(PrivateDirTest, OpenToOthersOtherOwnersAndSymlinksAreRefused) {
  const std::string dir = root_ + "/d";
  ASSERT_TRUE(MakePrivateDir(dir, me_, "listen").ok());
  ASSERT_EQ(::chmod(dir.c_str(), 0770), 0);
  absl::Status open = CheckPrivateDir(dir, me_, "--addr");
  EXPECT_EQ(open.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(open.message(), HasSubstr("--addr: refusing " + dir));
  EXPECT_THAT(open.message(), HasSubstr("mode 0770"));
  ASSERT_EQ(::chmod(dir.c_str(), 0700), 0);

  EXPECT_EQ(CheckPrivateDir(dir, me_ + 1, "listen").code(), absl::StatusCode::kPermissionDenied);

  const std::string link = root_ + "/link";
  ASSERT_EQ(::symlink(dir.c_str(), link.c_str()), 0);
  absl::Status linked = CheckPrivateDir(link, me_, "listen");
  EXPECT_EQ(linked.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(linked.message(), HasSubstr("(a symlink)"));

  EXPECT_EQ(CheckPrivateDir(root_ + "/missing", me_, "listen").code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace overlap
