// `overlapctl sessions trace`: a session's lane intervals as a Chrome trace,
// in step order, one process per device and one thread per lane.
#include "client/views/session_trace.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace overlap::client {
namespace {

void AddSpan(v1::ListSessionsResponse& listed, const std::string& session, const std::string& op,
             int device, const std::string& lane, uint64_t seq, double start_ms, double end_ms,
             int chunk = 0, bool forced = false) {
  v1::LaneInterval* i = listed.add_lanes();
  i->set_session_id(session);
  i->set_op(op);
  i->set_device(device);
  i->set_lane(lane);
  i->set_seq(seq);
  i->set_start_ms(start_ms);
  i->set_end_ms(end_ms);
  i->set_chunk(chunk);
  i->set_forced(forced);
}

v1::ListSessionsResponse Listed() {
  v1::ListSessionsResponse listed;
  v1::SessionInfo* s = listed.add_sessions();
  s->set_session_id("sess-000002");
  s->set_name("grads");
  s->set_priority("deferred");
  listed.add_sessions()->set_session_id("sess-000001");
  // As the lanes publish them: by when their events were read, not by step.
  AddSpan(listed, "sess-000002", "ar", 0, "deferred", 2, 5.0, 5.5, 0);
  AddSpan(listed, "sess-000001", "fc1", 0, "critical", 7, 4.0, 4.75);
  AddSpan(listed, "sess-000002", "ar", 0, "deferred", 1, 1.0, 1.25, 0);
  AddSpan(listed, "sess-000002", "ar", 1, "deferred", 1, 1.5, 2.0, 1, true);
  AddSpan(listed, "sess-000002", "ar", 0, "deferred", 1, 1.25, 1.5, 1, true);
  return listed;
}

struct Span {
  std::string name;
  int pid;
  int tid;
  uint64_t step;
  double ts;
  double dur;
  int chunk;
  bool operator==(const Span& o) const {
    return name == o.name && pid == o.pid && tid == o.tid && step == o.step && ts == o.ts &&
           dur == o.dur && chunk == o.chunk;
  }
};

std::vector<Span> Spans(const nlohmann::json& trace) {
  std::vector<Span> out;
  for (const nlohmann::json& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    out.push_back({e["name"].get<std::string>(), e["pid"].get<int>(), e["tid"].get<int>(),
                   e["args"]["step"].get<uint64_t>(), e["ts"].get<double>(), e["dur"].get<double>(),
                   e["args"].value("chunk", -1)});
  }
  return out;
}

TEST(SessionTraceTest, OneSessionsSpansInStepOrderOnTheirLanes) {
  absl::StatusOr<nlohmann::json> trace = SessionTrace(Listed(), "sess-000002", 0);
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(Spans(*trace), (std::vector<Span>{{"ar", 0, 2, 1, 1000, 250, 0},
                                              {"ar", 0, 2, 1, 1250, 250, 1},
                                              {"ar", 1, 2, 1, 1500, 500, 1},
                                              {"ar", 0, 2, 2, 5000, 500, 0}}));
  std::vector<std::string> names;
  for (const nlohmann::json& e : (*trace)["traceEvents"]) {
    if (e["ph"] == "M")
      names.push_back(e["name"].get<std::string>() + ":" + e["args"]["name"].get<std::string>());
  }
  EXPECT_EQ(names, (std::vector<std::string>{"process_name:device 0", "thread_name:deferred",
                                             "process_name:device 1", "thread_name:deferred"}));
  EXPECT_EQ((*trace)["otherData"]["name"], "grads");
  EXPECT_EQ((*trace)["traceEvents"][2]["args"]["forced"], false);
}

TEST(SessionTraceTest, TheLastStepsOnlyAndAnUnknownSession) {
  absl::StatusOr<nlohmann::json> last = SessionTrace(Listed(), "sess-000002", 1);
  ASSERT_TRUE(last.ok()) << last.status();
  EXPECT_EQ(Spans(*last), (std::vector<Span>{{"ar", 0, 2, 2, 5000, 500, 0}}));
  absl::StatusOr<nlohmann::json> critical = SessionTrace(Listed(), "sess-000001", 0);
  ASSERT_TRUE(critical.ok());
  EXPECT_EQ(Spans(*critical), (std::vector<Span>{{"fc1", 0, 1, 7, 4000, 750, -1}}));
  EXPECT_EQ(SessionTrace(Listed(), "sess-000009", 0).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace overlap::client
