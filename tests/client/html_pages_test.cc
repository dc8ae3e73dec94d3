// The --html pages: each parses (every tag closed in order), holds a chart per
// section, escapes what it quotes, and fetches nothing.
#include <regex>
#include <string>
#include <vector>

#include "client/format/html_chart.h"
#include "client/format/timeline_html.h"
#include "client/jobs/compare.h"
#include "client/measure/bench_html.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace overlap::client {
namespace {

using ::testing::HasSubstr;

// Whether every element opened is closed in order (void and self-closed
// elements aside), text holds no raw '<', and the page is one html element.
::testing::AssertionResult WellFormed(const std::string& page) {
  std::vector<std::string> open;
  size_t i = 0;
  int roots = 0;
  while ((i = page.find('<', i)) != std::string::npos) {
    const size_t end = page.find('>', i);
    if (end == std::string::npos) return ::testing::AssertionFailure() << "unclosed tag at " << i;
    const std::string tag = page.substr(i + 1, end - i - 1);
    i = end + 1;
    if (tag.rfind("!DOCTYPE", 0) == 0) continue;
    if (tag.find('<') != std::string::npos) {
      return ::testing::AssertionFailure() << "'<' inside a tag: " << tag;
    }
    if (tag[0] == '/') {
      const std::string name = tag.substr(1);
      if (open.empty() || open.back() != name) {
        return ::testing::AssertionFailure()
               << "</" << name << "> closes " << (open.empty() ? "nothing" : open.back());
      }
      open.pop_back();
      continue;
    }
    const std::string name = tag.substr(0, tag.find_first_of(" \t\n/"));
    if (tag.back() == '/' || name == "meta") continue;
    if (open.empty()) ++roots;
    open.push_back(name);
  }
  if (!open.empty()) return ::testing::AssertionFailure() << "<" << open.back() << "> never closed";
  if (roots != 1) return ::testing::AssertionFailure() << roots << " root elements";
  return ::testing::AssertionSuccess();
}

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t i = text.find(what); i != std::string::npos; i = text.find(what, i + 1)) ++n;
  return n;
}

void ExpectSelfContained(const std::string& page) {
  for (const char* fetch : {"<script", " src=", " href=", "@import", "url("}) {
    EXPECT_EQ(page.find(fetch), std::string::npos) << fetch;
  }
  // A chart per section (or a sentence saying why there is none).
  EXPECT_EQ(Count(page, "<section>"), Count(page, "<svg ") + Count(page, "<p>No "));
}

BenchRow Row(const std::string& op, double step, double ideal, double serial, double hidden) {
  BenchRow r;
  r.shape = {op, 4096, 8192, 8192};
  r.tp = 2;
  r.step_ms = step;
  r.ideal_ms = ideal;
  r.serial_ms = serial;
  r.comm_ms = 0.1;
  r.hidden = hidden;
  r.hides = true;
  return r;
}

TEST(HtmlPagesTest, BenchHasStepHiddenAndPredictionCharts) {
  const std::vector<BenchRow> rows = {Row("ag_gemm", 0.36, 0.34, 0.50, 0.8),
                                      Row("gemm_rs<script>", 0.39, 0.35, 0.52, 0.6)};
  BenchPrediction p;
  p.predicted = true;
  p.step_ms = 0.40;
  const std::string page = BenchHtml(rows, {p, BenchPrediction()}, "job-000001 & co");
  EXPECT_TRUE(WellFormed(page));
  ExpectSelfContained(page);
  EXPECT_EQ(Count(page, "<section>"), 3);
  EXPECT_THAT(page, HasSubstr("Predicted beside measured"));
  EXPECT_THAT(page, HasSubstr("gemm_rs&lt;script&gt;"));
  EXPECT_THAT(page, HasSubstr("job-000001 &amp; co"));
  // Without predictions, no such section.
  EXPECT_EQ(Count(BenchHtml(rows, {}, ""), "<section>"), 2);
}

TEST(HtmlPagesTest, CommBenchDrawsBusbwPerCollectiveALinePerTransport) {
  std::vector<CommBenchRow> rows;
  for (const char* collective : {"all_reduce", "all_gather"}) {
    for (int64_t bytes : {1 << 20, 4 << 20, 16 << 20}) {
      CommBenchRow r;
      r.collective = collective;
      r.bytes = bytes;
      r.by_transport["nccl"].busbw_gbps = bytes / 1e5;
      r.by_transport["p2p"].busbw_gbps = bytes / 2e5;
      rows.push_back(r);
    }
  }
  const std::string page = CommBenchHtml(rows, {"nccl", "p2p"}, "two GPUs");
  EXPECT_TRUE(WellFormed(page));
  ExpectSelfContained(page);
  EXPECT_EQ(Count(page, "<section>"), 2);
  EXPECT_EQ(Count(page, "<polyline"), 4);
  EXPECT_THAT(page, HasSubstr("16 MiB"));
}

TEST(HtmlPagesTest, CompareAndTimelinePages) {
  v1::Job a, b;
  a.set_id("job-000001");
  b.set_id("job-000002");
  for (v1::Job* job : {&a, &b}) {
    v1::OpResult* op = job->mutable_result()->add_ops();
    op->set_id("fc1");
    op->set_schedule("ring/p2p");
    op->mutable_step()->set_median_ms(job == &a ? 1.0 : 0.9);
    v1::TimelineSpan* s = op->mutable_timeline()->add_spans();
    s->set_rank(0);
    s->set_lane("compute");
    s->set_kind("gemm");
    s->set_name("gemm 64x64x64");
    s->set_end_ms(0.5);
    op->mutable_timeline()->set_step_ms(0.5);
  }
  const Comparison c = CompareJobs(a, b);
  const std::string compare = CompareHtml(a, b, c);
  EXPECT_TRUE(WellFormed(compare));
  ExpectSelfContained(compare);
  EXPECT_THAT(compare, HasSubstr("ops side by side"));
  const std::string timeline = TimelineHtml(a, "");
  EXPECT_TRUE(WellFormed(timeline));
  ExpectSelfContained(timeline);
  EXPECT_THAT(timeline, HasSubstr("rank 0 compute"));
  EXPECT_EQ(TimelineHtml(a, "nope"), "");
}

}  // namespace
}  // namespace overlap::client

namespace overlap::client {
namespace {

using ::testing::Not;

TEST(HtmlPagesTest, IdealAndMeasuredAreLinesAtOneNotBars) {
  std::vector<BenchRow> rows = {Row("ag_gemm", 0.36, 0.34, 0.50, 0.8)};
  BenchPrediction p;
  p.predicted = true;
  p.step_ms = 0.40;
  const std::string page = BenchHtml(rows, {p}, "");
  EXPECT_EQ(Count(page, "class='reference'"), 2) << page;
  EXPECT_EQ(Count(page, "data-value='1' x1="), 2) << "both lines at 1";
  EXPECT_EQ(Count(page, "ag_gemm 4096x8192x8192, ideal:"), 0) << "no bar of 1.0 for ideal";
  EXPECT_EQ(Count(page, "ag_gemm 4096x8192x8192, measured:"), 0);
  EXPECT_THAT(page, HasSubstr(">ideal</text>"));
  EXPECT_EQ(Count(page, "ag_gemm 4096x8192x8192, hidden:"), 1);
  rows[0].hides = false;  // serial: "-" in the table, no bar here
  EXPECT_EQ(Count(BenchHtml(rows, {}, ""), "ag_gemm 4096x8192x8192, hidden:"), 0);
  EXPECT_EQ(Count(page, "class='caveat'"), 0) << "GPU figures need no caveat";
  rows[0].host_backend = true;
  EXPECT_THAT(BenchHtml(rows, {}, ""),
              HasSubstr("<p class='caveat'>host backend: the timings mean nothing"));
}

TEST(HtmlPagesTest, TimelineLegendIsSwatchesAndShortSpansStayVisible) {
  v1::Job job;
  job.set_id("job-000001");
  job.mutable_result()->set_backend("host");
  v1::OpResult* op = job.mutable_result()->add_ops();
  op->set_id("fc1");
  for (const char* kind : {"gemm", "copy"}) {
    v1::TimelineSpan* s = op->mutable_timeline()->add_spans();
    s->set_lane(kind == std::string("gemm") ? "compute" : "comm");
    s->set_kind(kind);
    s->set_end_ms(kind == std::string("gemm") ? 10.0 : 0.001);
  }
  const std::string page = TimelineHtml(job, "");
  EXPECT_TRUE(WellFormed(page));
  EXPECT_THAT(page, Not(HasSubstr("gemm blue")));
  EXPECT_EQ(Count(page, "class='swatch'"), 2) << "GEMM and copy, the kinds it holds";
  EXPECT_THAT(page, HasSubstr(">copy</text>"));
  EXPECT_THAT(page, HasSubstr("host backend: the timings mean nothing"));
  // The copy is 0.001 ms of a 10 ms axis: still kMinSpanPx wide.
  EXPECT_THAT(page, ::testing::ContainsRegex("class='span' x='[0-9.]+' y='[0-9.]+' width='3.00'"));
}

TEST(HtmlPagesTest, ChartsScaleWithThePage) {
  const std::string page = BenchHtml({Row("ag_gemm", 0.36, 0.34, 0.50, 0.8)}, {}, "");
  EXPECT_EQ(Count(page, "<svg "), Count(page, "width='100%' viewBox='0 0 "));
  EXPECT_THAT(page, HasSubstr("style='max-width:"));
}

}  // namespace
}  // namespace overlap::client
