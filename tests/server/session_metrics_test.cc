// The sessions' Prometheus families: exact samples of open sessions, none of
// ended ones, deferred series only for deferred sessions.
#include "server/rpc/session_metrics.h"

#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/text_serializer.h"

namespace overlap::rpc {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

sessions::SessionRow Row(const std::string& id, const std::string& name, const std::string& owner,
                         const std::string& state, sessions::Priority priority) {
  sessions::SessionRow row;
  row.id = id;
  row.name = name;
  row.owner = owner;
  row.state = state;
  row.priority = priority;
  row.mapped_bytes = 4096;
  return row;
}

sessions::SessionFigures Figures(const std::string& id) {
  sessions::SessionFigures f;
  f.id = id;
  f.steps = 12;
  f.enqueue_p50_us = 150;
  f.enqueue_p99_us = 650;
  sessions::SessionOpFigures& op = f.ops.emplace_back();
  op.op = "fc1";
  op.steps = 12;
  op.median_ms = 4.25;
  op.timed_steps = 12;
  op.device_ms_total = 51.5;
  op.lane_wait_ms = 2.5;
  op.chunks = 48;
  op.chunks_forced = 3;
  op.over_bound = 2;
  return f;
}

std::string Text(const std::vector<sessions::SessionRow>& rows,
                 const std::vector<sessions::SessionFigures>& figures) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, BuildSessionMetrics(rows, figures));
  return out.str();
}

#define CRIT "session=\"sess-000001\",name=\"train\",owner=\"uid:1000\""
#define DEFR "session=\"sess-000002\",name=\"grads\",owner=\"uid:1000\""

TEST(SessionMetricsTest, OpenSessionsHaveTheirSeriesAndEndedOnesNone) {
  const std::string text =
      Text({Row("sess-000001", "train", "uid:1000", "ready", sessions::Priority::kCritical),
            Row("sess-000002", "grads", "uid:1000", "ready", sessions::Priority::kDeferred),
            Row("sess-000003", "old", "uid:1001", "closed", sessions::Priority::kCritical)},
           {Figures("sess-000001"), Figures("sess-000002"), Figures("sess-000003")});
  EXPECT_THAT(text, HasSubstr("overlapd_sessions_open{owner=\"uid:1000\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("overlapd_session_steps_total{" CRIT "} 12\n"));
  EXPECT_THAT(text, HasSubstr("overlapd_session_op_seconds{" CRIT ",op=\"fc1\",quantile=\"0.5\"} "
                              "0.00425\n"));
  EXPECT_THAT(text, HasSubstr("overlapd_session_op_seconds_sum{" CRIT ",op=\"fc1\"} 0.0515\n"));
  EXPECT_THAT(text, HasSubstr("overlapd_session_op_seconds_count{" CRIT ",op=\"fc1\"} 12\n"));
  EXPECT_THAT(text, HasSubstr("overlapd_session_lane_wait_seconds_total{" CRIT
                              ",op=\"fc1\",lane=\"critical\"} 0.0025\n"));
  EXPECT_THAT(text, HasSubstr("overlapd_session_lane_wait_seconds_total{" DEFR
                              ",op=\"fc1\",lane=\"deferred\"} 0.0025\n"));
  EXPECT_THAT(text, HasSubstr("overlapd_session_deferred_chunks_total{" DEFR
                              ",op=\"fc1\",forced=\"false\"} 45\n"));
  EXPECT_THAT(text, HasSubstr("overlapd_session_deferred_chunks_total{" DEFR
                              ",op=\"fc1\",forced=\"true\"} 3\n"));
  EXPECT_THAT(text,
              HasSubstr("overlapd_session_deferred_over_bound_total{" DEFR ",op=\"fc1\"} 2\n"));
  EXPECT_THAT(text, Not(HasSubstr("overlapd_session_deferred_over_bound_total{" CRIT)));
  EXPECT_THAT(text, HasSubstr("overlapd_session_mapped_bytes{" CRIT "} 4096\n"));
  EXPECT_THAT(text, HasSubstr("overlapd_session_enqueue_seconds{" CRIT ",quantile=\"0.99\"} "
                              "0.00065\n"));
  // Ended sessions' series are gone, their owner with them.
  EXPECT_THAT(text, Not(HasSubstr("sess-000003")));
  EXPECT_THAT(text, Not(HasSubstr("uid:1001")));
}

TEST(SessionMetricsTest, AJoiningSessionHasStepsAndBytesButNoOps) {
  const std::string text =
      Text({Row("sess-000001", "train", "uid:1000", "joining", sessions::Priority::kCritical)}, {});
  EXPECT_THAT(text, HasSubstr("overlapd_session_steps_total{" CRIT "} 0\n"));
  EXPECT_THAT(text, HasSubstr("overlapd_session_mapped_bytes{" CRIT "} 4096\n"));
  EXPECT_THAT(text, Not(HasSubstr("overlapd_session_op_seconds_count{")));
  EXPECT_THAT(text, Not(HasSubstr("overlapd_session_enqueue_seconds{")));
  // No sessions at all: every family, no samples.
  const std::string none = Text({}, {});
  EXPECT_THAT(none, HasSubstr("# TYPE overlapd_session_op_seconds summary\n"));
  EXPECT_THAT(none, Not(HasSubstr("overlapd_sessions_open{")));
}

}  // namespace
}  // namespace overlap::rpc
