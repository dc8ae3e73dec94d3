#include "server/gloo/gloo_group.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/dtype.h"
#include "common/seeded_random.h"
#include "gtest/gtest.h"
#include "server/gloo/rendezvous_store.h"

namespace overlap {
// Test names and failure messages print "bf16", not the enum's bytes.
void PrintTo(DType dtype, std::ostream* os) { *os << DTypeName(dtype); }
}  // namespace overlap

namespace overlap::gloo_group {
namespace {

using Groups = std::vector<std::unique_ptr<GlooGroup>>;
using Bytes = std::vector<uint8_t>;

// Long enough never to fire on a loaded machine; the failure tests use ~1 s.
constexpr absl::Duration kHealthyTimeout = absl::Seconds(20);
constexpr absl::Duration kShortTimeout = absl::Seconds(1);
// What a failure may take beyond its timeout (thread start, socket teardown).
constexpr absl::Duration kSlack = absl::Seconds(2);

std::string UniquePrefix() {
  static std::atomic<int> next{0};
  return absl::StrCat("job", next++, "/",
                      ::testing::UnitTest::GetInstance()->current_test_info()->name());
}

GlooGroupOptions Options(int rank, int size, const std::string& prefix, absl::Duration timeout) {
  GlooGroupOptions options;
  options.rank = rank;
  options.size = size;
  options.prefix = prefix;
  options.timeout = timeout;
  return options;
}

// Runs fn(rank) on one thread per rank, as each rank's stream thread would.
std::vector<absl::Status> OnEveryRank(int size, const std::function<absl::Status(int)>& fn) {
  std::vector<absl::Status> statuses(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) threads.emplace_back([&, r] { statuses[r] = fn(r); });
  for (auto& t : threads) t.join();
  return statuses;
}

Groups ConnectAll(RendezvousStore& store, int size, const std::string& prefix,
                  absl::Duration timeout = kHealthyTimeout) {
  Groups groups(size);
  std::vector<absl::Status> statuses = OnEveryRank(size, [&](int r) -> absl::Status {
    auto group = GlooGroup::Connect(store, Options(r, size, prefix, timeout));
    if (!group.ok()) return group.status();
    groups[r] = *std::move(group);
    return absl::OkStatus();
  });
  for (int r = 0; r < size; ++r) {
    EXPECT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
    if (groups[r]) {
      EXPECT_EQ(groups[r]->rank(), r);
      EXPECT_EQ(groups[r]->size(), size);
    }
  }
  return groups;
}

// `count` seeded values in [-1, 1) stored as `dtype`, different per rank.
Bytes RankInput(DType dtype, int rank, size_t count, uint64_t seed = 7) {
  Bytes data(count * DTypeSize(dtype));
  for (size_t i = 0; i < count; ++i) {
    StoreFromFloat(data.data(), dtype, i, SeededUniform(seed * 1000 + rank, i));
  }
  return data;
}

// max|y - ref| / max(max|ref|, 1): the floor keeps a handful of elements
// whose sums happen to be near zero from blowing up the ratio.
double RelativeError(const Bytes& y, DType dtype, const std::vector<double>& ref) {
  double max_err = 0, max_ref = 1;
  for (size_t i = 0; i < ref.size(); ++i) {
    max_err = std::max(max_err, std::fabs(LoadAsFloat(y.data(), dtype, i) - ref[i]));
    max_ref = std::max(max_ref, std::fabs(ref[i]));
  }
  return max_err / max_ref;
}

// fp32 sums get a bound a bf16 detour would break; 16-bit ones the project's.
double SumTolerance(DType dtype, int ranks) {
  return dtype == DType::kF32 ? ranks * std::ldexp(1.0, -22) : DTypeTolerance(dtype, ranks);
}

std::vector<double> ReferenceSum(const std::vector<Bytes>& inputs, DType dtype, size_t offset,
                                 size_t count) {
  std::vector<double> ref(count, 0.0);
  for (const Bytes& in : inputs) {
    for (size_t i = 0; i < count; ++i) ref[i] += LoadAsFloat(in.data(), dtype, offset + i);
  }
  return ref;
}

// How much later than its own deadline a call may return on a loaded machine
// before the test calls it a hang. The upper bounds below catch hangs only:
// whether a call failed at once or at its timeout is told by its status code
// (ABORTED against DEADLINE_EXCEEDED), never by a tight wall-clock bound,
// which a loaded 2-core CI machine breaks. Lower bounds stay exact: a timer
// never fires early.
constexpr absl::Duration kHangSlack = absl::Seconds(15);

void ExpectWithin(absl::Duration elapsed, absl::Duration low, absl::Duration high) {
  EXPECT_GE(elapsed, low);
  EXPECT_LE(elapsed, high + kHangSlack);
}

// ---------------------------------------------------------------- store

TEST(GlooGroupRendezvousStoreTest, GetWaitsForALaterSet) {
  InMemoryRendezvousStore store;
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(100));
    ASSERT_TRUE(store.Set("g/0", std::string("a\0b", 3)).ok());
  });
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> value = store.Get("g/0", absl::Seconds(10));
  const absl::Duration waited = absl::Now() - start;
  setter.join();
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, std::string("a\0b", 3));  // bytes, not text
  ExpectWithin(waited, absl::Milliseconds(90), absl::Seconds(5));
  EXPECT_EQ(store.size(), 1u);
}

TEST(GlooGroupRendezvousStoreTest, GetOfAnUnsetKeyIsDeadlineExceededNamingIt) {
  InMemoryRendezvousStore store;
  ASSERT_TRUE(store.Set("g/1", "x").ok());
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> value = store.Get("g/2", absl::Milliseconds(100));
  ExpectWithin(absl::Now() - start, absl::Milliseconds(95), absl::Seconds(2));
  EXPECT_EQ(value.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(value.status().message().find("'g/2'"), std::string::npos) << value.status();
}

TEST(GlooGroupRendezvousStoreTest, ClearDropsEveryKey) {
  InMemoryRendezvousStore store;
  ASSERT_TRUE(store.Set("a", "1").ok());
  ASSERT_TRUE(store.Set("a", "2").ok());
  ASSERT_TRUE(store.Set("b", "3").ok());
  EXPECT_EQ(store.size(), 2u);
  EXPECT_EQ(*store.Get("a", absl::ZeroDuration()), "2");
  store.Clear();
  EXPECT_EQ(store.size(), 0u);
  EXPECT_EQ(store.Get("a", absl::ZeroDuration()).status().code(),
            absl::StatusCode::kDeadlineExceeded);
}

// ---------------------------------------------------------------- collectives

using SumParam = std::tuple<int, DType, bool>;  // ranks, dtype, in place

std::string SumParamName(const ::testing::TestParamInfo<SumParam>& info) {
  return absl::StrCat(std::get<0>(info.param), "ranks_", DTypeName(std::get<1>(info.param)),
                      std::get<2>(info.param) ? "_inplace" : "_outofplace");
}

class GlooGroupAllReduceTest : public ::testing::TestWithParam<SumParam> {};

TEST_P(GlooGroupAllReduceTest, MatchesAFloat64SumAndIsIdenticalOnEveryRank) {
  const auto [size, dtype, in_place] = GetParam();
  InMemoryRendezvousStore store;
  Groups groups = ConnectAll(store, size, UniquePrefix());
  ASSERT_EQ(groups.size(), static_cast<size_t>(size));
  // Prime, so that Gloo's ring splits it unevenly between the ranks.
  constexpr size_t kCount = 1031;
  std::vector<Bytes> inputs, outputs(size);
  for (int r = 0; r < size; ++r) inputs.push_back(RankInput(dtype, r, kCount));
  std::vector<Bytes> sends = inputs;

  std::vector<absl::Status> statuses = OnEveryRank(size, [&](int r) {
    if (in_place) {
      absl::Status s = groups[r]->AllReduce(dtype, sends[r].data(), sends[r].data(), kCount);
      outputs[r] = sends[r];
      return s;
    }
    outputs[r].assign(sends[r].size(), 0xAB);
    return groups[r]->AllReduce(dtype, sends[r].data(), outputs[r].data(), kCount);
  });

  const std::vector<double> ref = ReferenceSum(inputs, dtype, 0, kCount);
  for (int r = 0; r < size; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
    EXPECT_LE(RelativeError(outputs[r], dtype, ref), SumTolerance(dtype, size)) << "rank " << r;
    EXPECT_EQ(outputs[r], outputs[0]) << "rank " << r << " differs from rank 0";
    if (!in_place) {
      EXPECT_EQ(sends[r], inputs[r]) << "rank " << r << " send was written";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(RanksDTypes, GlooGroupAllReduceTest,
                         ::testing::Combine(::testing::Values(2, 3, 4),
                                            ::testing::Values(DType::kF32, DType::kBF16,
                                                              DType::kF16),
                                            ::testing::Bool()),
                         SumParamName);

// More than Gloo's 1 MiB segment per rank, fewer elements than ranks, and a
// group of one, which still goes through Gloo.
TEST(GlooGroupAllReduceShapesTest, ManySegmentsFewElementsAndOneRank) {
  for (const auto& [size, count] :
       std::vector<std::pair<int, size_t>>{{3, 700'001}, {4, 3}, {1, 5}}) {
    SCOPED_TRACE(absl::StrCat(size, " ranks, ", count, " elements"));
    InMemoryRendezvousStore store;
    Groups groups = ConnectAll(store, size, UniquePrefix());
    ASSERT_EQ(groups.size(), static_cast<size_t>(size));
    std::vector<Bytes> inputs, outputs(size);
    for (int r = 0; r < size; ++r) inputs.push_back(RankInput(DType::kBF16, r, count, 11));
    std::vector<absl::Status> statuses = OnEveryRank(size, [&](int r) {
      outputs[r].resize(inputs[r].size());
      return groups[r]->AllReduce(DType::kBF16, inputs[r].data(), outputs[r].data(), count);
    });
    const std::vector<double> ref = ReferenceSum(inputs, DType::kBF16, 0, count);
    for (int r = 0; r < size; ++r) {
      ASSERT_TRUE(statuses[r].ok()) << statuses[r];
      EXPECT_LE(RelativeError(outputs[r], DType::kBF16, ref), SumTolerance(DType::kBF16, size));
      EXPECT_EQ(outputs[r], outputs[0]);
    }
  }
}

using GatherParam = std::tuple<int, DType, bool>;

class GlooGroupAllGatherTest : public ::testing::TestWithParam<GatherParam> {};

TEST_P(GlooGroupAllGatherTest, EveryRankGetsEveryBlockRankMajorBitForBit) {
  const auto [size, dtype, in_place] = GetParam();
  InMemoryRendezvousStore store;
  Groups groups = ConnectAll(store, size, UniquePrefix());
  ASSERT_EQ(groups.size(), static_cast<size_t>(size));
  constexpr size_t kCount = 7;  // odd bytes for fp8: Gloo halves each block
  const size_t block = kCount * DTypeSize(dtype);
  std::vector<Bytes> inputs, outputs(size);
  for (int r = 0; r < size; ++r) inputs.push_back(RankInput(dtype, r, kCount));

  std::vector<absl::Status> statuses = OnEveryRank(size, [&](int r) {
    outputs[r].assign(block * size, 0xAB);
    const void* send = inputs[r].data();
    if (in_place) {
      std::memcpy(outputs[r].data() + block * r, inputs[r].data(), block);
      send = outputs[r].data() + block * r;
    }
    return groups[r]->AllGather(dtype, send, outputs[r].data(), kCount);
  });

  for (int r = 0; r < size; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
    for (int b = 0; b < size; ++b) {
      EXPECT_EQ(Bytes(outputs[r].begin() + block * b, outputs[r].begin() + block * (b + 1)),
                inputs[b])
          << "rank " << r << " block " << b;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(RanksDTypes, GlooGroupAllGatherTest,
                         ::testing::Combine(::testing::Values(2, 3, 4),
                                            ::testing::Values(DType::kF32, DType::kBF16,
                                                              DType::kFP8),
                                            ::testing::Bool()),
                         SumParamName);

TEST(GlooGroupAllGatherShapesTest, OneByteBlocks) {
  constexpr int kSize = 3;
  InMemoryRendezvousStore store;
  Groups groups = ConnectAll(store, kSize, UniquePrefix());
  ASSERT_EQ(groups.size(), static_cast<size_t>(kSize));
  std::vector<Bytes> outputs(kSize, Bytes(kSize, 0));
  std::vector<absl::Status> statuses = OnEveryRank(kSize, [&](int r) {
    const uint8_t mine = static_cast<uint8_t>(0x10 + r);
    return groups[r]->AllGather(DType::kFP8, &mine, outputs[r].data(), 1);
  });
  for (int r = 0; r < kSize; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << statuses[r];
    EXPECT_EQ(outputs[r], (Bytes{0x10, 0x11, 0x12})) << "rank " << r;
  }
}

class GlooGroupReduceScatterTest : public ::testing::TestWithParam<SumParam> {};

TEST_P(GlooGroupReduceScatterTest, EachRankGetsTheSumOfItsBlock) {
  const auto [size, dtype, in_place] = GetParam();
  InMemoryRendezvousStore store;
  Groups groups = ConnectAll(store, size, UniquePrefix());
  ASSERT_EQ(groups.size(), static_cast<size_t>(size));
  constexpr size_t kCount = 257;
  const size_t block = kCount * DTypeSize(dtype);
  std::vector<Bytes> inputs, sends, outputs(size);
  for (int r = 0; r < size; ++r) inputs.push_back(RankInput(dtype, r, kCount * size, 3));
  sends = inputs;

  std::vector<absl::Status> statuses = OnEveryRank(size, [&](int r) {
    if (in_place) {  // recv is send's own block, as NCCL's in-place reduce-scatter
      uint8_t* own = sends[r].data() + block * r;
      absl::Status s = groups[r]->ReduceScatter(dtype, sends[r].data(), own, kCount);
      outputs[r].assign(own, own + block);
      return s;
    }
    outputs[r].assign(block, 0xAB);
    return groups[r]->ReduceScatter(dtype, sends[r].data(), outputs[r].data(), kCount);
  });

  for (int r = 0; r < size; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
    const std::vector<double> ref = ReferenceSum(inputs, dtype, kCount * r, kCount);
    EXPECT_LE(RelativeError(outputs[r], dtype, ref), SumTolerance(dtype, size)) << "rank " << r;
    // Not any other block's sum: blocks are independent seeded values.
    const std::vector<double> other =
        ReferenceSum(inputs, dtype, kCount * ((r + 1) % size), kCount);
    EXPECT_GT(RelativeError(outputs[r], dtype, other), 0.1) << "rank " << r;
    if (!in_place) {
      EXPECT_EQ(sends[r], inputs[r]) << "rank " << r << " send was written";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(RanksDTypes, GlooGroupReduceScatterTest,
                         ::testing::Combine(::testing::Values(2, 3, 4),
                                            ::testing::Values(DType::kF32, DType::kBF16),
                                            ::testing::Bool()),
                         SumParamName);

// ---------------------------------------------------------------- contract

TEST(GlooGroupTest, Fp8SumIsInvalidArgumentAndLeavesTheGroupUsable) {
  constexpr int kSize = 2;
  InMemoryRendezvousStore store;
  Groups groups = ConnectAll(store, kSize, UniquePrefix());
  ASSERT_EQ(groups.size(), static_cast<size_t>(kSize));
  std::vector<Bytes> gathered(kSize, Bytes(4 * kSize));
  std::vector<absl::Status> statuses = OnEveryRank(kSize, [&](int r) -> absl::Status {
    Bytes send(4 * kSize, static_cast<uint8_t>(r + 1)), recv(4 * kSize);
    absl::Status ar = groups[r]->AllReduce(DType::kFP8, send.data(), recv.data(), 4);
    absl::Status rs = groups[r]->ReduceScatter(DType::kFP8, send.data(), recv.data(), 4);
    EXPECT_EQ(ar.code(), absl::StatusCode::kInvalidArgument) << ar;
    EXPECT_EQ(rs.code(), absl::StatusCode::kInvalidArgument) << rs;
    EXPECT_NE(ar.message().find("fp8"), std::string::npos) << ar;
    if (absl::Status s = groups[r]->AllGather(DType::kFP8, send.data(), gathered[r].data(), 4);
        !s.ok()) {
      return s;
    }
    return groups[r]->Barrier();
  });
  for (int r = 0; r < kSize; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << statuses[r];
    EXPECT_EQ(gathered[r], (Bytes{1, 1, 1, 1, 2, 2, 2, 2}));
  }
}

TEST(GlooGroupTest, CountZeroDoesNothingAndSendsNothing) {
  constexpr int kSize = 2;
  InMemoryRendezvousStore store;
  Groups groups = ConnectAll(store, kSize, UniquePrefix());
  ASSERT_EQ(groups.size(), static_cast<size_t>(kSize));
  // Rank 0 alone: were anything sent, it would wait for rank 1 until the timeout.
  const absl::Time start = absl::Now();
  EXPECT_TRUE(groups[0]->AllReduce(DType::kBF16, nullptr, nullptr, 0).ok());
  EXPECT_TRUE(groups[0]->AllGather(DType::kF32, nullptr, nullptr, 0).ok());
  EXPECT_TRUE(groups[0]->ReduceScatter(DType::kF32, nullptr, nullptr, 0).ok());
  // Had anything been sent, rank 0 would have waited for rank 1 and failed
  // with DEADLINE_EXCEEDED after kHealthyTimeout: the OKs above say it did not.
  EXPECT_LT(absl::Now() - start, kHealthyTimeout);
  // And the ranks still agree on the sequence of collectives afterwards.
  std::vector<float> sums(kSize);
  std::vector<absl::Status> statuses = OnEveryRank(kSize, [&](int r) {
    const float mine = static_cast<float>(r + 1);
    return groups[r]->AllReduce(DType::kF32, &mine, &sums[r], 1);
  });
  for (int r = 0; r < kSize; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << statuses[r];
    EXPECT_EQ(sums[r], 3.0f);
  }
}

TEST(GlooGroupTest, BarrierWaitsForTheLastRank) {
  constexpr int kSize = 3;
  constexpr absl::Duration kLate = absl::Milliseconds(300);
  InMemoryRendezvousStore store;
  Groups groups = ConnectAll(store, kSize, UniquePrefix());
  ASSERT_EQ(groups.size(), static_cast<size_t>(kSize));
  const absl::Time start = absl::Now();
  std::vector<absl::Duration> returned(kSize);
  std::vector<absl::Status> statuses = OnEveryRank(kSize, [&](int r) {
    if (r == kSize - 1) absl::SleepFor(kLate);
    absl::Status s = groups[r]->Barrier();
    returned[r] = absl::Now() - start;
    return s;
  });
  for (int r = 0; r < kSize; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << statuses[r];
    EXPECT_GE(returned[r], kLate - absl::Milliseconds(10)) << "rank " << r;
  }
}

TEST(GlooGroupTest, GroupsUnderDifferentPrefixesShareAStore) {
  InMemoryRendezvousStore store;
  const std::string a = UniquePrefix(), b = UniquePrefix();
  Groups groups(4);
  // Ranks of both groups meet at once: the prefixes keep Gloo's keys apart.
  std::vector<absl::Status> statuses = OnEveryRank(4, [&](int i) -> absl::Status {
    auto group = GlooGroup::Connect(store, Options(i % 2, 2, i < 2 ? a : b, kHealthyTimeout));
    if (!group.ok()) return group.status();
    groups[i] = *std::move(group);
    const float mine = static_cast<float>(i < 2 ? 1 + i : 10 * i);
    float sum = 0;
    if (absl::Status s = groups[i]->AllReduce(DType::kF32, &mine, &sum, 1); !s.ok()) return s;
    const float want = i < 2 ? 3.0f : 50.0f;
    if (sum != want) return absl::InternalError(absl::StrCat("sum ", sum, " want ", want));
    return absl::OkStatus();
  });
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(statuses[i].ok()) << i << ": " << statuses[i];
}

TEST(GlooGroupTest, BadOptionsAreInvalidArgumentAndTouchNoStore) {
  InMemoryRendezvousStore store;
  for (GlooGroupOptions options :
       {Options(3, 3, "p", kShortTimeout), Options(-1, 2, "p", kShortTimeout),
        Options(0, 0, "p", kShortTimeout), Options(0, 2, "", kShortTimeout),
        Options(0, 2, "p", absl::ZeroDuration())}) {
    auto group = GlooGroup::Connect(store, options);
    EXPECT_EQ(group.status().code(), absl::StatusCode::kInvalidArgument) << group.status();
  }
  EXPECT_EQ(store.size(), 0u);
}

TEST(GlooGroupTest, AnAddressThatIsNotThisHostsIsUnavailable) {
  InMemoryRendezvousStore store;
  GlooGroupOptions options = Options(0, 2, UniquePrefix(), kShortTimeout);
  options.bind_address = "192.0.2.1";  // TEST-NET-1: never a local address
  const absl::Time start = absl::Now();
  auto group = GlooGroup::Connect(store, options);
  EXPECT_LT(absl::Now() - start, kShortTimeout + kHangSlack);
  EXPECT_EQ(group.status().code(), absl::StatusCode::kUnavailable) << group.status();
  EXPECT_NE(group.status().message().find("192.0.2.1"), std::string::npos) << group.status();
}

// ---------------------------------------------------------------- failures

TEST(GlooGroupFailureTest, ARankThatNeverJoinsIsDeadlineExceededNamingIt) {
  constexpr int kSize = 3;
  InMemoryRendezvousStore store;
  const std::string prefix = UniquePrefix();
  const absl::Time start = absl::Now();
  std::vector<absl::Duration> took(2);
  std::vector<absl::Status> statuses = OnEveryRank(2, [&](int r) {  // rank 2 never comes
    auto group = GlooGroup::Connect(store, Options(r, kSize, prefix, kShortTimeout));
    took[r] = absl::Now() - start;
    return group.status();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(statuses[r].code(), absl::StatusCode::kDeadlineExceeded) << statuses[r];
    EXPECT_NE(statuses[r].message().find(prefix), std::string::npos) << statuses[r];
    EXPECT_NE(statuses[r].message().find("rank(s) 2 did not join"), std::string::npos)
        << statuses[r];
    ExpectWithin(took[r], kShortTimeout - absl::Milliseconds(50), kShortTimeout + kSlack);
  }
}

// Ranks 0 and 2 of 4 never come: rank 1 stalls on rank 0 before it publishes
// its own addresses, rank 3 after; both name the two.
TEST(GlooGroupFailureTest, EveryMissingRankIsNamed) {
  InMemoryRendezvousStore store;
  const std::string prefix = UniquePrefix();
  std::vector<absl::Status> statuses = OnEveryRank(2, [&](int i) {
    return GlooGroup::Connect(store, Options(2 * i + 1, 4, prefix, absl::Milliseconds(300)))
        .status();
  });
  for (const absl::Status& status : statuses) {
    EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
    EXPECT_NE(status.message().find("rank(s) 0, 2 did not join"), std::string::npos) << status;
  }
}

// Every Get of a rank once it has published its socket addresses (the only
// values this large) sleeps `freeze` first: a rank that froze mid-connect.
class FreezingStore final : public RendezvousStore {
 public:
  FreezingStore(RendezvousStore& store, absl::Duration freeze) : store_(store), freeze_(freeze) {}
  absl::Status Set(const std::string& key, const std::string& value) override {
    if (value.size() >= 64) published_ = true;
    return store_.Set(key, value);
  }
  absl::StatusOr<std::string> Get(const std::string& key, absl::Duration timeout) override {
    if (published_) absl::SleepFor(freeze_);
    return store_.Get(key, timeout);
  }

 private:
  RendezvousStore& store_;
  const absl::Duration freeze_;
  bool published_ = false;
};

// A rank that published its address and then froze (a stopped process, a lost
// host) before connecting: Gloo's pair connect waits 5x the context timeout,
// which Connect shortens so that the wait stays within about `timeout`.
// Binding the frozen rank to 127.0.0.2 makes rank 0 the side that listens (the
// smaller address), which is the side that waits.
TEST(GlooGroupFailureTest, APeerThatFreezesWhileConnectingDoesNotHoldConnectPastTheTimeout) {
  constexpr absl::Duration kTimeout = absl::Milliseconds(400);
  InMemoryRendezvousStore store;
  FreezingStore freezing(store, absl::Seconds(2));
  const std::string prefix = UniquePrefix();
  absl::Duration took;
  std::vector<absl::Status> statuses = OnEveryRank(2, [&](int r) {
    GlooGroupOptions options = Options(r, 2, prefix, kTimeout);
    if (r == 0) {
      const absl::Time start = absl::Now();
      absl::Status status = GlooGroup::Connect(store, options).status();
      took = absl::Now() - start;
      return status;
    }
    options.bind_address = "127.0.0.2";
    return GlooGroup::Connect(freezing, options).status();
  });
  EXPECT_EQ(statuses[0].code(), absl::StatusCode::kDeadlineExceeded) << statuses[0];
  EXPECT_NE(statuses[0].message().find(prefix), std::string::npos) << statuses[0];
  ExpectWithin(took, kTimeout - absl::Milliseconds(50), 2 * kTimeout + absl::Milliseconds(500));
  EXPECT_FALSE(statuses[1].ok());  // rank 0 gave up and closed before it thawed
}

// A peer whose process goes away mid-job (here: destroys its group, which
// closes its sockets as an exit would). Gloo sees the closed socket at once.
TEST(GlooGroupFailureTest, APeerThatGoesAwayFailsTheOthersNextCollective) {
  constexpr int kSize = 4;
  InMemoryRendezvousStore store;
  Groups groups = ConnectAll(store, kSize, UniquePrefix(), kShortTimeout);
  ASSERT_EQ(groups.size(), static_cast<size_t>(kSize));
  std::vector<float> data(kSize * 64, 1.0f);
  std::vector<absl::Status> statuses = OnEveryRank(kSize, [&](int r) {
    return groups[r]->AllReduce(DType::kF32, &data[r * 64], &data[r * 64], 64);
  });
  for (int r = 0; r < kSize; ++r) ASSERT_TRUE(statuses[r].ok()) << statuses[r];
  EXPECT_EQ(data[0], 4.0f);

  // Writing to the closed sockets raises SIGPIPE, which would end this process.
  struct sigaction sigpipe {};
  ASSERT_EQ(sigaction(SIGPIPE, nullptr, &sigpipe), 0);
  EXPECT_EQ(sigpipe.sa_handler, SIG_IGN);

  groups[2].reset();
  const absl::Time start = absl::Now();
  std::vector<absl::Duration> took(kSize);
  statuses = OnEveryRank(kSize, [&](int r) {
    if (r == 2) return absl::OkStatus();
    absl::Status s = groups[r]->AllReduce(DType::kF32, &data[r * 64], &data[r * 64], 64);
    took[r] = absl::Now() - start;
    return s;
  });
  for (int r = 0; r < kSize; ++r) {
    if (r == 2) continue;
    // Rank 0 is no neighbour of rank 2 in Gloo's ring: it fails at once only
    // because the ranks that saw rank 2 go closed their connections too.
    EXPECT_EQ(statuses[r].code(), absl::StatusCode::kAborted) << statuses[r];
    // ABORTED, not DEADLINE_EXCEEDED: it failed on the closed connections, not
    // at its timeout. The time only catches a hang.
    EXPECT_LT(took[r], kShortTimeout + kHangSlack) << "rank " << r << ": " << statuses[r];
    // Broken for good, at once.
    const absl::Time again = absl::Now();
    absl::Status next = groups[r]->Barrier();
    EXPECT_EQ(next.code(), absl::StatusCode::kAborted) << next;
    EXPECT_NE(next.message().find("broken"), std::string::npos) << next;
    EXPECT_LT(absl::Now() - again, kShortTimeout + kHangSlack);
  }
}

TEST(GlooGroupFailureTest, APeerThatStopsTakingPartTimesOutThenItFailsToo) {
  constexpr int kSize = 2;
  InMemoryRendezvousStore store;
  Groups groups = ConnectAll(store, kSize, UniquePrefix(), kShortTimeout);
  ASSERT_EQ(groups.size(), static_cast<size_t>(kSize));
  std::vector<float> data(8, 1.0f);
  absl::Time start = absl::Now();
  absl::Status lone = groups[0]->AllReduce(DType::kF32, data.data(), data.data(), 8);
  absl::Duration took = absl::Now() - start;
  EXPECT_EQ(lone.code(), absl::StatusCode::kDeadlineExceeded) << lone;
  ExpectWithin(took, kShortTimeout - absl::Milliseconds(50), kShortTimeout + kSlack);

  // The straggler turns up late: its partner's timeout closed the connections.
  start = absl::Now();
  absl::Status late = groups[1]->AllReduce(DType::kF32, data.data(), data.data(), 8);
  took = absl::Now() - start;
  EXPECT_EQ(late.code(), absl::StatusCode::kAborted) << late;
  EXPECT_LT(took, kShortTimeout + kHangSlack) << late;
}

}  // namespace
}  // namespace overlap::gloo_group
