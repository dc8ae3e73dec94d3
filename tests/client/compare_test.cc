// overlapctl compare without a daemon: which ops pair up, B's change against
// A, the totals over shared ops only, and the differences that are called out.
#include "client/jobs/compare.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace overlap::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

v1::OpResult Op(const std::string& id, const std::string& type, const std::string& schedule,
                double step_ms, double exposed_ms) {
  v1::OpResult op;
  op.set_id(id);
  op.set_type(type);
  op.set_m(8192);
  op.set_k(type == "all_reduce" ? 0 : 8192);
  op.set_n(28672);
  op.set_dtype("bf16");
  op.set_schedule(schedule);
  op.mutable_step()->set_median_ms(step_ms);
  op.set_exposed_comm_ms(exposed_ms);
  return op;
}

v1::Job Job(const std::string& id, std::vector<v1::OpResult> ops) {
  v1::Job job;
  job.set_id(id);
  job.set_name("mlp");
  job.add_devices(0);
  job.add_devices(1);
  job.mutable_result()->set_backend("cuda");
  job.mutable_result()->set_launch_gate(true);
  job.mutable_result()->set_head_start("heat");
  for (v1::OpResult& op : ops) *job.mutable_result()->add_ops() = std::move(op);
  return job;
}

TEST(CompareTest, PairsOpsByIdAndSaysHowMuchBChanged) {
  const v1::Job a = Job("job-000001", {Op("fc1", "ag_gemm", "serial/nccl", 4.0, 0.5),
                                       Op("fc2", "gemm_rs", "serial/nccl", 2.0, 0.4),
                                       Op("old", "gemm_ar", "serial/nccl", 1.0, 0.2)});
  const v1::Job b = Job("job-000002", {Op("fc2", "gemm_rs", "ring/2/p2p", 2.5, 0.1),
                                       Op("fc1", "ag_gemm", "ring/p2p", 3.0, 0.0),
                                       Op("grads", "all_reduce", "serial/p2p", 0.3, 0.3)});
  const Comparison c = CompareJobs(a, b);
  std::vector<std::string> ids;
  for (const ComparedOp& op : c.ops) ids.push_back(op.id);
  EXPECT_THAT(ids, ElementsAre("fc1", "fc2", "old", "grads"));  // A's order, then B's own
  EXPECT_DOUBLE_EQ(c.ops[0].step_ratio, 0.75);
  EXPECT_DOUBLE_EQ(c.ops[1].step_ratio, 1.25);
  EXPECT_EQ(c.ops[2].b, nullptr);
  EXPECT_EQ(c.ops[3].a, nullptr);
  EXPECT_DOUBLE_EQ(c.total_a_ms, 6.0);  // shared ops only
  EXPECT_DOUBLE_EQ(c.total_b_ms, 5.5);
  EXPECT_TRUE(c.caveats.empty());

  const std::string text = FormatComparison(a, b, c);
  EXPECT_THAT(text, HasSubstr("A: job-000001 (mlp)  B: job-000002 (mlp)"));
  EXPECT_THAT(text, ::testing::ContainsRegex("fc1 +ag_gemm +8192x8192x28672 +serial/nccl +"
                                             "4\\.000 +ring/p2p +3\\.000 +-25\\.0%"));
  EXPECT_THAT(text, HasSubstr("+25.0%"));
  EXPECT_THAT(text, ::testing::ContainsRegex("total +6\\.000 +5\\.500 +-8\\.3%"));
  EXPECT_THAT(text, HasSubstr("not compared: old (only in A), grads (only in B)"));

  const nlohmann::json j = ComparisonJson(a, b, c);
  EXPECT_EQ(j["ops"].size(), 4u);
  EXPECT_EQ(j["ops"][0]["b"]["schedule"], "ring/p2p");
  EXPECT_TRUE(j["ops"][2]["b"].is_null());
  EXPECT_DOUBLE_EQ(j["total_b_ms"].get<double>(), 5.5);
}

// Both runs traced: where each step's time went, for the rank that set it.
TEST(CompareTest, SaysWhereEachRunsTimeWent) {
  auto traced = [](v1::OpResult op, double gemm_end, double step) {
    v1::Timeline* t = op.mutable_timeline();
    t->set_step_ms(step);
    for (int rank = 0; rank < 2; ++rank) {
      v1::TimelineSpan* g = t->add_spans();
      g->set_rank(rank);
      g->set_lane("compute");
      g->set_kind("gemm");
      g->set_end_ms(gemm_end - 0.1 * (1 - rank));  // rank 1 finishes last
      v1::TimelineSpan* c = t->add_spans();
      c->set_rank(rank);
      c->set_lane("comm");
      c->set_kind("copy");
      c->set_end_ms(0.5);
    }
    return op;
  };
  const v1::Job a = Job("a", {traced(Op("fc1", "ag_gemm", "serial/nccl", 4.0, 0.5), 3.5, 4.0),
                              Op("fc2", "gemm_rs", "serial/nccl", 2.0, 0.4)});
  const v1::Job b = Job("b", {traced(Op("fc1", "ag_gemm", "ring/p2p", 3.0, 0.0), 2.9, 3.0),
                              traced(Op("fc2", "gemm_rs", "ring/p2p", 2.0, 0.4), 1.0, 2.0)});
  const Comparison c = CompareJobs(a, b);
  const std::string text = FormatComparison(a, b, c);
  EXPECT_THAT(text, HasSubstr("fc1 timelines: GEMMs 3.500 -> 2.900 ms, transfers 0.500 -> "
                              "0.500 ms, compute stream waited 0.000 -> 0.000 ms\n"));
  EXPECT_THAT(text, Not(HasSubstr("fc2 timelines")));  // only B traced it
  const nlohmann::json j = ComparisonJson(a, b, c);
  EXPECT_EQ(j["ops"][0]["a"]["timeline_last_rank"]["rank"], 1);
  EXPECT_DOUBLE_EQ(j["ops"][0]["b"]["timeline_last_rank"]["gemm_ms"].get<double>(), 2.9);
  EXPECT_TRUE(j["ops"][1]["a"]["timeline_last_rank"].is_null());
}

TEST(CompareTest, CallsOutWhatMakesTheRunsLessComparable) {
  const v1::Job a = Job("a", {Op("fc1", "ag_gemm", "serial/nccl", 4.0, 0.5)});
  v1::Job b = Job("b", {Op("fc1", "ag_gemm", "serial/nccl", 4.0, 0.5)});
  b.mutable_result()->mutable_ops(0)->set_dtype("fp16");
  b.mutable_result()->mutable_ops(0)->set_n(7168);
  b.mutable_result()->set_head_start("idle");
  b.clear_devices();
  b.add_devices(2);
  const Comparison c = CompareJobs(a, b);
  EXPECT_THAT(c.caveats,
              ElementsAre("op fc1: ag_gemm 8192x8192x28672 -> ag_gemm 8192x8192x7168",
                          "devices: 0,1 -> 2", "dtype: bf16 -> fp16", "head start: heat -> idle"));
  EXPECT_THAT(FormatComparison(a, b, c), HasSubstr("differs: dtype: bf16 -> fp16\n"));
}

// A run from before the preheat (or with it off) against one with it.
TEST(CompareTest, NamesAChangedPreheat) {
  const v1::Job a = Job("a", {Op("fc1", "ag_gemm", "serial/nccl", 4.0, 0.5)});
  v1::Job b = a;
  EXPECT_THAT(CompareJobs(a, b).caveats, ::testing::IsEmpty());
  b.mutable_result()->set_preheat_ms(300);
  EXPECT_THAT(CompareJobs(a, b).caveats, ElementsAre("preheat: 0 ms -> 300 ms"));
}

// An upgrade between the runs is named; a result stored before versions were
// recorded says nothing about them.
TEST(CompareTest, NamesTheVersionsThatChanged) {
  v1::Job a = Job("a", {Op("fc1", "ag_gemm", "serial/nccl", 4.0, 0.5)});
  v1::Job b = a;
  for (v1::Job* job : {&a, &b}) {
    job->mutable_result()->set_gpu("NVIDIA H200");
    job->mutable_result()->set_cuda_driver("13.0");
  }
  a.mutable_result()->set_nccl("2.28.3");
  b.mutable_result()->set_nccl("2.29.1");
  b.mutable_result()->set_cuda_driver("13.1");
  b.mutable_result()->set_overlapd_version("0.1.0 (abc1234)");  // A predates the field
  EXPECT_THAT(CompareJobs(a, b).caveats,
              ElementsAre("cuda driver: 13.0 -> 13.1", "nccl: 2.28.3 -> 2.29.1"));

  // The daemon's NCCL environment: a variable set on one side only is "(unset)" on the other.
  (*a.mutable_result()->mutable_library_env())["NCCL_NVLS_ENABLE"] = "0";
  (*b.mutable_result()->mutable_library_env())["NCCL_NVLS_ENABLE"] = "0";
  (*b.mutable_result()->mutable_library_env())["NCCL_ALGO"] = "Tree";
  EXPECT_THAT(CompareJobs(a, b).caveats, ::testing::Contains("env NCCL_ALGO: (unset) -> Tree"));
  EXPECT_EQ(CompareJobs(a, b).caveats.size(), 3u);
}

}  // namespace
}  // namespace overlap::client
