// Watch slots shared out: one user's share, the users' total with a reserve
// kept for admins and the socket's owner, and the cap on them all.
#include "server/rpc/watch_slots.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace overlap::rpc {
namespace {

using ::testing::HasSubstr;

TEST(WatchSlotsTest, DefaultShareIsAQuarterAndTheReserveASixteenth) {
  WatchSlots slots(256, 0);
  EXPECT_EQ(slots.per_user(), 64);
  EXPECT_EQ(slots.reserved(), 16);
  EXPECT_EQ(WatchSlots(2, 0).per_user(), 1);
  EXPECT_EQ(WatchSlots(2, 0).reserved(), 1);
  EXPECT_EQ(WatchSlots(1, 0).reserved(), 0);
  EXPECT_EQ(WatchSlots(8, 100).per_user(), 8);  // a share is never above the cap
}

// A user at their share is refused naming it; another user, and an admin,
// still get a slot; a slot given back is the user's again.
TEST(WatchSlotsTest, AUserAtTheirShareIsRefusedAndOthersAreNot) {
  WatchSlots slots(16, 2);
  std::vector<WatchSlots::Slot> held;
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<WatchSlots::Slot> slot = slots.Take("uid:65534", "nobody (uid:65534)", false);
    ASSERT_TRUE(slot.ok()) << slot.status();
    held.push_back(std::move(*slot));
  }
  absl::StatusOr<WatchSlots::Slot> third = slots.Take("uid:65534", "nobody (uid:65534)", false);
  ASSERT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(third.status().message(),
            "the watch share of nobody (uid:65534) is full: 2 watches open "
            "(max_watchers_per_user = 2): end one, or poll with `overlapctl get`");
  EXPECT_TRUE(slots.Take("uid:1000", "alice (uid:1000)", false).ok());
  EXPECT_TRUE(slots.Take("uid:0", "root (uid:0)", true).ok());
  held.pop_back();
  EXPECT_TRUE(slots.Take("uid:65534", "nobody (uid:65534)", false).ok());
}

// Users together never take the reserve: with every user slot held, an admin
// (or the socket's owner) still watches, up to the cap on all.
TEST(WatchSlotsTest, UsersLeaveTheReserveToAdmins) {
  WatchSlots slots(32, 4);  // reserve 2: users hold at most 30
  std::vector<WatchSlots::Slot> held;
  for (int user = 0; user < 8; ++user) {
    const std::string owner = "uid:" + std::to_string(2000 + user);
    for (int i = 0; i < 4; ++i) {
      absl::StatusOr<WatchSlots::Slot> slot = slots.Take(owner, owner, false);
      if (!slot.ok()) {
        EXPECT_EQ(slot.status().code(), absl::StatusCode::kResourceExhausted);
        EXPECT_THAT(slot.status().message(), HasSubstr("users hold 30 of max_watchers = 32"));
        continue;
      }
      held.push_back(std::move(*slot));
    }
  }
  EXPECT_EQ(held.size(), 30u);
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<WatchSlots::Slot> admin = slots.Take("uid:0", "root", true);
    ASSERT_TRUE(admin.ok()) << admin.status();
    held.push_back(std::move(*admin));
  }
  absl::StatusOr<WatchSlots::Slot> past = slots.Take("uid:0", "root", true);
  ASSERT_EQ(past.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(past.status().message(), HasSubstr("max_watchers = 32"));
  held.clear();
  EXPECT_TRUE(slots.Take("uid:2000", "uid:2000", false).ok());
}

}  // namespace
}  // namespace overlap::rpc
