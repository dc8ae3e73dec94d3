#include "common/enum_names.h"

#include <unistd.h>

#include "common/graph.h"
#include "common/unix_accounts.h"
#include "gtest/gtest.h"

namespace overlap {
namespace {

enum class Fruit { kApple, kPear, kPlum };
constexpr EnumName<Fruit> kFruitNames[] = {
    {Fruit::kApple, "apple"}, {Fruit::kPear, "pear"}, {Fruit::kPlum, "plum"}};

TEST(EnumNamesTest, NameAndParseReadTheSameRows) {
  EXPECT_EQ(NameOf(kFruitNames, Fruit::kPear), "pear");
  EXPECT_EQ(NameOf(kFruitNames, static_cast<Fruit>(7)), "unknown");
  absl::StatusOr<Fruit> plum = ParseName(kFruitNames, "plum", "fruit");
  ASSERT_TRUE(plum.ok());
  EXPECT_EQ(*plum, Fruit::kPlum);
}

TEST(EnumNamesTest, UnknownNameListsEveryNameInTableOrder) {
  absl::StatusOr<Fruit> fig = ParseName(kFruitNames, "f\"ig", "fruit");
  EXPECT_EQ(fig.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(fig.status().message(), "unknown fruit \"f\\\"ig\" (expected apple, pear, plum)");
}

// The graph's names keep the messages they had before they became tables.
TEST(EnumNamesTest, GraphMessagesListNamesAsBefore) {
  EXPECT_EQ(ParseAllReduceAlgorithm("x").status().message(),
            "unknown algorithm \"x\" (expected default, ring, tree, ps, hierarchical, auto)");
  EXPECT_EQ(ParseOpType("x").status().message(),
            "unknown op type \"x\" (expected ag_gemm, gemm_rs, gemm_ar, all_gather, "
            "reduce_scatter, all_reduce, gemm)");
  EXPECT_EQ(SplitName(Split::kPartial), "a partial sum on every rank");
  EXPECT_EQ(*ParseTransport("p2p"), Transport::kP2p);
}

TEST(UnixAccountsTest, RootIsUserZeroAndGroupZero) {
  std::optional<UnixUser> root = LookupUser(0);
  ASSERT_TRUE(root.has_value());
  EXPECT_EQ(root->name, "root");
  EXPECT_EQ(root->gid, 0u);
  EXPECT_EQ(LookupGroupName(0), "root");
  EXPECT_FALSE(LookupUser(static_cast<uid_t>(3999999999u)).has_value());
}

}  // namespace
}  // namespace overlap
