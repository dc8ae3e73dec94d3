// The limit on requests in flight: per caller and in all, refused at once and
// counted, and every ticket gives its place back.
#include "server/net/request_limiter.h"

#include <atomic>
#include <optional>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace overlap::net {
namespace {

using ::testing::HasSubstr;

TEST(RequestLimiterTest, OneCallerIsHeldToItsShareAndTheOthersStillGetIn) {
  std::atomic<int64_t> refused{0}, abandoned{0};
  RequestLimiter limiter(RequestLimits{4, 2}, "the user port", refused, abandoned);
  std::vector<RequestLimiter::Ticket> held;
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<RequestLimiter::Ticket> ticket = limiter.Enter("uid:1000");
    ASSERT_TRUE(ticket.ok());
    held.push_back(std::move(*ticket));
  }
  absl::StatusOr<RequestLimiter::Ticket> third = limiter.Enter("uid:1000");
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(third.status().message()),
              HasSubstr("too many requests in flight on the user port (at most 4 in all and 2 "
                        "from uid:1000"));
  EXPECT_EQ(refused.load(), 1);
  // Another caller gets in beside the busy one, up to the total.
  for (const char* other : {"uid:1001", "uid:1002"}) {
    absl::StatusOr<RequestLimiter::Ticket> ticket = limiter.Enter(other);
    ASSERT_TRUE(ticket.ok()) << other;
    held.push_back(std::move(*ticket));
  }
  EXPECT_EQ(limiter.in_flight(), 4);
  EXPECT_EQ(limiter.Enter("uid:1003").status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(refused.load(), 2);
  held.clear();
  EXPECT_EQ(limiter.in_flight(), 0);
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(limiter.Enter("uid:1000").ok());  // each one released
  EXPECT_EQ(limiter.in_flight(), 0);
  EXPECT_EQ(abandoned.load(), 0);
}

TEST(RequestLimiterTest, AMovedTicketIsReleasedOnce) {
  std::atomic<int64_t> refused{0}, abandoned{0};
  RequestLimiter limiter(RequestLimits{1, 1}, "the peer port", refused, abandoned);
  {
    absl::StatusOr<RequestLimiter::Ticket> ticket = limiter.Enter("127.0.0.1:7001");
    ASSERT_TRUE(ticket.ok());
    std::optional<RequestLimiter::Ticket> moved(std::move(*ticket));
    EXPECT_EQ(limiter.in_flight(), 1);
  }
  EXPECT_EQ(limiter.in_flight(), 0);
  EXPECT_TRUE(limiter.Enter("127.0.0.1:7002").ok());
}

}  // namespace
}  // namespace overlap::net
