// overlapctl's timeline output: per-rank sums, the report's note, the chart
// and the Chrome trace, from hand-built timelines.
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "client/format/report.h"
#include "client/format/timeline.h"

namespace overlap::client {
namespace {

void AddSpan(v1::Timeline* t, int rank, const std::string& lane, const std::string& kind,
             const std::string& name, double start, double end) {
  v1::TimelineSpan* s = t->add_spans();
  s->set_rank(rank);
  s->set_lane(lane);
  s->set_kind(kind);
  s->set_name(name);
  s->set_start_ms(start);
  s->set_end_ms(end);
}

// A two-rank ring/2 gemm_rs: rank 1 waits 0.2 ms for its peer's second piece.
v1::OpResult RingOp() {
  v1::OpResult op;
  op.set_id("fc2");
  op.set_type("gemm_rs");
  op.set_mode("ring");
  op.set_transport("p2p");
  op.set_schedule("ring/2/p2p");
  op.set_chunks(2);
  op.set_m(8192);
  op.set_k(4096);
  op.set_n(4096);
  op.set_tp(2);
  op.mutable_step()->set_median_ms(1.9);
  op.mutable_gemm_alone()->set_median_ms(1.6);
  v1::Timeline* t = op.mutable_timeline();
  t->set_step_ms(2.0);
  for (int r = 0; r < 2; ++r) {
    const double wait = r == 1 ? 0.2 : 0.0;
    AddSpan(t, r, "compute", "gemm", "gemm 2048x2048x4096", 0.0, 0.4);
    AddSpan(t, r, "compute", "gemm", "gemm 2048x2048x4096", 0.4, 0.8);
    AddSpan(t, r, "comm", "copy", "copy 16.00 MiB", 0.4, 0.9);
    AddSpan(t, r, "comm", "copy", "copy 16.00 MiB", 0.9, 1.4);
    AddSpan(t, r, "compute", "gemm", "gemm 2048x2048x4096 +=", 0.9, 1.3);
    AddSpan(t, r, "compute", "gemm", "gemm 2048x2048x4096 +=", 1.4 + wait, 1.8 + wait);
  }
  return op;
}

TEST(TimelineFormatTest, SumsEachRanksSpansAndItsWaiting) {
  const std::vector<RankTimeline> ranks = SummarizeTimeline(RingOp().timeline());
  ASSERT_EQ(ranks.size(), 2u);
  EXPECT_EQ(ranks[1].rank, 1);
  EXPECT_DOUBLE_EQ(ranks[1].end_ms, 2.0);
  EXPECT_EQ(ranks[1].gemms, 4);
  EXPECT_NEAR(ranks[1].gemm_ms, 1.6, 1e-12);
  EXPECT_NEAR(ranks[1].compute_busy_ms, 1.6, 1e-12);
  EXPECT_NEAR(ranks[1].waiting_ms, 0.4, 1e-12);
  EXPECT_EQ(ranks[1].transfers, 2);
  EXPECT_NEAR(ranks[1].transfer_ms, 1.0, 1e-12);
  EXPECT_EQ(ranks[0].reduces, 0);
  EXPECT_NEAR(ranks[0].waiting_ms, 0.2, 1e-12);
  EXPECT_TRUE(SummarizeTimeline(v1::Timeline()).empty());
}

TEST(TimelineFormatTest, NoteNamesTheRankThatFinishedLast) {
  EXPECT_EQ(FormatTimelineNote(RingOp()),
            "fc2 timeline: rank 1 ran 4 GEMMs in 1.600 ms (GEMM alone 1.600 ms: +0.0%), 2 "
            "transfers in 1.000 ms; its compute stream waited 0.400 ms; traced step 2.000 ms\n");
  v1::OpResult slower = RingOp();
  slower.mutable_gemm_alone()->set_median_ms(1.5);
  EXPECT_NE(
      FormatTimelineNote(slower).find("(GEMM alone 1.500 ms: +6.7% for pieces and contention)"),
      std::string::npos);
  v1::OpResult none = RingOp();
  none.clear_timeline();
  EXPECT_EQ(FormatTimelineNote(none), "");
}

TEST(TimelineFormatTest, ChartsEveryLaneOverTheStep) {
  v1::Job job;
  job.set_id("job-000007");
  *job.mutable_result()->add_ops() = RingOp();
  const std::string out = FormatTimelines(job, "", 20);
  // 20 columns of 0.1 ms: GEMMs 0-0.8, idle to 0.9, GEMM to 1.3, idle, the last
  // GEMM (rank 1: 1.6-2.0).
  EXPECT_NE(out.find("  rank 0 compute |GGGGGGGG.GGGG.GGGG..|\n"), std::string::npos) << out;
  EXPECT_NE(out.find("  rank 1 compute |GGGGGGGG.GGGG...GGGG|\n"), std::string::npos) << out;
  EXPECT_NE(out.find("  rank 1 comm    |....CCCCCCCCCC......|\n"), std::string::npos) << out;
  EXPECT_NE(out.find("fc2  gemm_rs  8192x4096x4096  ring/2/p2p: traced step 2.000 ms (timed "
                     "median 1.900 ms)\n"),
            std::string::npos)
      << out;
  // Spans listed rank by rank in start order.
  // Rank 1's last GEMM started 0.3 ms after the one before it ended, at 1.3.
  EXPECT_NE(out.find("  1     compute     1.600     2.000     0.400        0.300  gemm "
                     "2048x2048x4096 +="),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("  0     comm        0.900     1.400     0.500        0.000  copy 16.00 MiB"),
            std::string::npos)
      << out;
  EXPECT_EQ(FormatTimelines(job, "fc1", 20), "");
  // Past kListedSpans, the spans are listed only when asked for.
  v1::Timeline* t = job.mutable_result()->mutable_ops(0)->mutable_timeline();
  while (t->spans_size() <= kListedSpans) *t->add_spans() = t->spans(0);
  const std::string many = FormatTimelines(job, "", 20);
  EXPECT_NE(many.find(absl::StrCat("  ", t->spans_size(), " spans: --spans lists them")),
            std::string::npos)
      << many;
  EXPECT_EQ(many.find("gemm 2048x2048x4096 +="), std::string::npos);
  EXPECT_NE(FormatTimelines(job, "", 20, /*all_spans=*/true).find("gemm 2048x2048x4096 +="),
            std::string::npos);
}

TEST(TimelineFormatTest, ChartShowsNoGapBetweenBackToBackSpansAndEveryShortOne) {
  v1::Job job;
  v1::OpResult* op = job.mutable_result()->add_ops();
  *op = RingOp();
  v1::Timeline* t = op->mutable_timeline();
  t->clear_spans();
  t->set_step_ms(1.0);
  // 2 us apart, across the boundary of columns 4 and 5.
  AddSpan(t, 0, "compute", "gemm", "a", 0.0, 0.449);
  AddSpan(t, 0, "compute", "gemm", "b", 0.451, 0.9);
  AddSpan(t, 0, "comm", "copy", "short", 0.51, 0.511);
  const std::string out = FormatTimelines(job, "", 10);
  EXPECT_NE(out.find("  rank 0 compute |GGGGGGGGG.|\n"), std::string::npos) << out;
  EXPECT_NE(out.find("  rank 0 comm    |.....C....|\n"), std::string::npos) << out;
}

TEST(TimelineFormatTest, LayerStepTimelineNamesTheOpOfEachSpan) {
  v1::Job job;
  job.set_id("job-000008");
  v1::JobResult* result = job.mutable_result();
  *result->add_ops() = RingOp();
  result->mutable_ops(0)->clear_timeline();
  result->add_layer_order("fc2");
  result->add_layer_order("grads");
  result->mutable_layer_step()->set_median_ms(2.5);
  v1::Timeline* t = result->mutable_layer_timeline();
  t->set_step_ms(2.4);
  AddSpan(t, 0, "compute", "gemm", "gemm 4096x2048x4096", 0.0, 1.8);
  t->mutable_spans(0)->set_op("fc2");
  AddSpan(t, 0, "side", "collective", "all_reduce 64.00 MiB", 1.8, 2.4);
  t->mutable_spans(1)->set_op("grads");
  const std::string out = FormatTimelines(job, "layer", 12);
  EXPECT_NE(out.find("layer  fc2, grads: traced step 2.400 ms (timed median 2.500 ms)\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("  rank 0 side    |.........NNN|\n"), std::string::npos) << out;
  EXPECT_NE(
      out.find("  0     side        1.800     2.400     0.600        1.800  grads: all_reduce "
               "64.00 MiB"),
      std::string::npos)
      << out;
  EXPECT_EQ(FormatTimelines(job, "", 12), out);  // fc2 has no timeline of its own
  EXPECT_EQ(FormatTimelineNote("layer", *t, 1.6),
            "layer timeline: rank 0 ran 1 GEMM in 1.800 ms (GEMMs alone 1.600 ms: +12.5% for "
            "pieces and contention), 1 transfer in 0.600 ms; its compute stream waited 0.600 ms; "
            "traced step 2.400 ms\n");
  const nlohmann::json trace = ChromeTrace(job, "layer");
  ASSERT_GE(trace["traceEvents"].size(), 2u);
  EXPECT_EQ(trace["traceEvents"][1]["name"], "grads: all_reduce 64.00 MiB");
  EXPECT_EQ(trace["traceEvents"][1]["args"]["timeline"], "layer");
  EXPECT_EQ(trace["traceEvents"][1]["tid"], 1);
  v1::Job with_report = job;
  with_report.set_state(v1::SUCCEEDED);
  EXPECT_NE(FormatReport(with_report)
                .find("layer timeline: rank 0 ran 1 GEMM in 1.800 ms (GEMMs "
                      "alone 1.600 ms"),
            std::string::npos)
      << FormatReport(with_report);
}

TEST(TimelineFormatTest, ChromeTracePutsOpsOneAfterAnother) {
  v1::Job job;
  job.set_id("job-000007");
  job.set_name("mlp");
  *job.mutable_result()->add_ops() = RingOp();
  v1::OpResult second = RingOp();
  second.set_id("fc3");
  *job.mutable_result()->add_ops() = second;
  const nlohmann::json trace = ChromeTrace(job, "");
  EXPECT_EQ(trace["otherData"]["job"], "job-000007");
  int spans = 0, names = 0;
  double first_fc3 = 1e9;
  for (const nlohmann::json& e : trace["traceEvents"]) {
    if (e["ph"] == "M") {
      ++names;
      continue;
    }
    ++spans;
    EXPECT_EQ(e["pid"].get<int>() >= 0 && e["pid"].get<int>() < 2, true);
    EXPECT_EQ(e["tid"], e["name"].get<std::string>().find("copy") != std::string::npos ? 1 : 0);
    if (e["args"]["op"] == "fc3") first_fc3 = std::min(first_fc3, e["ts"].get<double>());
  }
  EXPECT_EQ(spans, 24);
  EXPECT_EQ(names, 2 + 4);  // a process per rank, a thread per rank and lane
  // fc3 starts after fc2's 2 ms and the gap between ops, in microseconds.
  EXPECT_DOUBLE_EQ(first_fc3, 2050.0);
  EXPECT_EQ(ChromeTrace(job, "fc3")["traceEvents"].size(), 12u + 6u);
}

}  // namespace
}  // namespace overlap::client
