// What the coordinator of a job spanning daemons decides for each op, and
// what a part accepts of it.
#include "server/ops/decided_schedules.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/graph_parser.h"

namespace overlap::ops {
namespace {

using ::testing::HasSubstr;

constexpr char kLayer[] = R"(mesh: {tp: 2, dp: 2}
ops:
  - {id: fc1, type: ag_gemm, m: 1024, k: 64, n: 64}
  - {id: fc2, type: gemm_rs, m: 1024, k: 64, n: 64, mode: bulk, after: [fc1]}
  - {id: wgrad, type: gemm, m: 64, k: 64, n: 64}
  - {id: grads, type: all_reduce, m: 64, n: 64, group: dp}
  - {id: world, type: all_reduce, m: 64, n: 64, group: world}
)";

JobSpec Parsed(const char* text) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(text);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : JobSpec();
}

TEST(DecidedSchedulesTest, EveryOpGetsTheRuleForJobsSpanningDaemons) {
  const JobSpec spec = Parsed(kLayer);
  for (bool library : {false, true}) {
    absl::StatusOr<DecidedSchedules> decided = DecideSpanningSchedules(spec, 4, library);
    ASSERT_TRUE(decided.ok()) << decided.status();
    ASSERT_EQ(decided->size(), 5u);
    // Chunked over NCCL, the fewest pieces; bulk where asked; a GEMM moves nothing.
    EXPECT_EQ(decided->at("fc1").Name(), "chunked/2/nccl");
    EXPECT_EQ(decided->at("fc2").Name(), "bulk/nccl");
    EXPECT_EQ(decided->at("wgrad").Name(), "serial");
    EXPECT_EQ(decided->at("grads").Name(), "serial/nccl");
    // Flat, not hierarchical, unless the op names it.
    EXPECT_EQ(decided->at("world").Name(), "serial/nccl");
    EXPECT_TRUE(CheckDecidedSchedules(spec, 4, library, *decided).ok());
  }
}

// A calibration where every all-gather over NCCL costs at least 0.5 ms: its
// latency makes pieces dear, so bulk beats the rule's chunked.
planner::Calibration LatencyBound() {
  planner::Calibration c;
  c.gemms = {{1024, 32, 64, 0.1}};
  c.transfers = {{Collective::kAllGather, Transport::kNccl, 2, {{1 << 20, 0.5}}}};
  c.gemm_slowdown = {{Transport::kNccl, 1.2}};
  return c;
}

TEST(DecidedSchedulesTest, TheCoordinatorsPlannerDecidesWhereItCanSay) {
  const JobSpec spec = Parsed(kLayer);
  const planner::CostModel model(LatencyBound(), {});
  const SpanningPlanner planner{&model, 2};  // tp 2 per node, dp 2 across two nodes
  DecisionNotes notes;
  absl::StatusOr<DecidedSchedules> decided = DecideSpanningSchedules(spec, 4, true, &planner, &notes);
  ASSERT_TRUE(decided.ok()) << decided.status();
  // Serial 0.6 ms, bulk 0.5 + 0.05 = 0.55, chunked/2 two 0.5 ms gathers: bulk.
  EXPECT_EQ(decided->at("fc1").Name(), "bulk/nccl");
  EXPECT_THAT(notes.at("fc1"), HasSubstr("planner"));
  EXPECT_THAT(notes.at("fc1"), HasSubstr("predicted 0.550 ms"));
  EXPECT_THAT(notes.at("fc1"), HasSubstr("the rule would have run chunked/2/nccl"));
  // No reduce-scatter figures, and no link between nodes: the rule, and why.
  EXPECT_EQ(decided->at("fc2").Name(), "bulk/nccl");
  EXPECT_THAT(notes.at("grads"), HasSubstr("the planner could predict none"));
  EXPECT_TRUE(CheckDecidedSchedules(spec, 4, true, *decided).ok());

  // With the link measured, the dp all-reduce across the nodes is planned.
  planner::Calibration linked = LatencyBound();
  linked.inter_node = planner::InterNodeLink{25, 0.02, 2};
  linked.transfers.push_back({Collective::kAllReduce, Transport::kNccl, 2, {{1 << 20, 0.05}}});
  const planner::CostModel with_link(linked, {});
  const SpanningPlanner across{&with_link, 2};
  decided = DecideSpanningSchedules(spec, 4, true, &across, &notes);
  ASSERT_TRUE(decided.ok()) << decided.status();
  // 64 x 64 bf16 = 8 KiB, 2 x 1/2 of it over 25 GB/s after 0.02 ms.
  EXPECT_THAT(notes.at("grads"), HasSubstr("predicted 0.020 ms"));
}

TEST(DecidedSchedulesTest, AnOpWithNoScheduleOverCollectivesIsRefusedByName) {
  const JobSpec spec = Parsed(R"(ops:
  - {id: fc1, type: ag_gemm, m: 128, k: 64, n: 64, mode: ring}
)");
  absl::StatusOr<DecidedSchedules> decided = DecideSpanningSchedules(spec, 2, false);
  EXPECT_EQ(decided.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(decided.status().message(), HasSubstr("op fc1: no schedule of this op"));
}

TEST(DecidedSchedulesTest, APartRefusesDecisionsThatLeaveAnOpOutOrItWouldNotRun) {
  const JobSpec spec = Parsed(kLayer);
  absl::StatusOr<DecidedSchedules> decided = DecideSpanningSchedules(spec, 4, false);
  ASSERT_TRUE(decided.ok());
  struct Case {
    const char* what;
    std::function<void(DecidedSchedules&)> change;
    absl::StatusCode code;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"an op left out", [](DecidedSchedules& d) { d.erase("grads"); },
       absl::StatusCode::kInvalidArgument, "none was decided for op grads"},
      {"an op the graph lacks", [](DecidedSchedules& d) { d["fc9"] = Schedule(); },
       absl::StatusCode::kInvalidArgument, "the graph has no op \"fc9\""},
      {"p2p across daemons",
       [](DecidedSchedules& d) { d["fc1"] = Schedule{OverlapMode::kChunked, 2, Transport::kP2p}; },
       absl::StatusCode::kFailedPrecondition, "decided chunked/2/p2p"},
      {"a ring",
       [](DecidedSchedules& d) { d["fc1"] = Schedule{OverlapMode::kRing, 1, Transport::kNccl}; },
       absl::StatusCode::kFailedPrecondition, "decided ring/nccl"},
      {"a chunk count the op does not have",
       [](DecidedSchedules& d) { d["fc1"] = Schedule{OverlapMode::kChunked, 3, Transport::kNccl}; },
       absl::StatusCode::kFailedPrecondition, "would run serial/nccl, bulk/nccl, chunked/2/nccl"},
      {"a mode the op did not leave open",
       [](DecidedSchedules& d) { d["fc2"] = Schedule{OverlapMode::kSerial, 1, Transport::kNccl}; },
       absl::StatusCode::kFailedPrecondition, "op fc2: the coordinator decided serial/nccl"},
      {"an algorithm NCCL does not pin on this backend",
       [](DecidedSchedules& d) {
         d["grads"] =
             Schedule{OverlapMode::kSerial, 1, Transport::kNccl, AllReduceAlgorithm::kTree};
       },
       absl::StatusCode::kFailedPrecondition, "serial/nccl/tree"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    DecidedSchedules changed = *decided;
    c.change(changed);
    const absl::Status checked = CheckDecidedSchedules(spec, 4, false, changed);
    EXPECT_EQ(checked.code(), c.code);
    EXPECT_THAT(checked.message(), HasSubstr(c.message));
  }
  // Another choice among the op's candidates is the coordinator's to make.
  DecidedSchedules bulk = *decided;
  bulk["fc1"] = Schedule{OverlapMode::kBulk, 1, Transport::kNccl};
  EXPECT_TRUE(CheckDecidedSchedules(spec, 4, false, bulk).ok());
}

}  // namespace
}  // namespace overlap::ops
