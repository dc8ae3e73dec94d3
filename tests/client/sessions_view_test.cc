// `overlapctl sessions`: the table's rows exactly, a failed session's reason,
// names as one word, the lanes' table, and -o name's session ids.
#include <gtest/gtest.h>

#include <string>

#include "client/format/output_format.h"
#include "client/format/table.h"
#include "client/views/sessions.h"
#include "nlohmann/json.hpp"

namespace overlap::client {
namespace {

v1::SessionInfo Session(const std::string& id, const std::string& priority) {
  v1::SessionInfo s;
  s.set_session_id(id);
  s.set_name("mlp");
  s.set_owner("alice (uid:1000)");
  s.set_state("ready");
  s.set_priority(priority);
  s.set_world(2);
  s.set_ranks_joined(2);
  s.add_devices(0);
  s.add_devices(1);
  s.set_steps(40);
  s.set_mapped_bytes(3 << 20);
  s.set_deferred_bound_ms(20);
  s.set_enqueue_p50_us(12.25);
  s.set_enqueue_p99_us(40);
  s.set_opened_at("2026-12-07T02:00:00Z");
  return s;
}

v1::SessionOpStats Op(const std::string& name, double ms, double hidden, double wait_ms) {
  v1::SessionOpStats op;
  op.set_op(name);
  op.set_steps(20);
  op.set_median_ms(ms);
  op.set_hidden_share(hidden);
  op.set_lane_wait_ms(wait_ms);
  return op;
}

class SessionsViewTest : public ::testing::Test {
 protected:
  void SetUp() override { SetTableWidth(0); }
};

TEST_F(SessionsViewTest, OneRowPerSessionWithEachOpsFigures) {
  v1::ListSessionsResponse response;
  v1::SessionInfo critical = Session("sess-000001", "critical");
  *critical.add_ops() = Op("fc1", 0.412, 0.9, 0.5);
  *critical.add_ops() = Op("fc2", 0.38, -1, 0.25);
  *response.add_sessions() = critical;
  v1::SessionInfo deferred = Session("sess-000002", "deferred");
  v1::SessionOpStats grads = Op("grads", 2.5, -1, 1);
  grads.set_chunks(8);
  grads.set_chunks_forced(1);
  grads.set_max_delay_ms(3.14);
  *deferred.add_ops() = grads;
  deferred.set_state("failed");
  deferred.set_error("UNAVAILABLE: rank 1 (pid 42) closed its connection");
  *response.add_sessions() = deferred;
  const std::string text = FormatSessions(response);
  EXPECT_EQ(text,
            "SESSION      NAME  OWNER  STATE   PRIORITY  RANKS  STEPS  OP_MS                "
            "HIDDEN_%        WAIT_MS  DELAY/BOUND_MS  ENQ_P50_US  DEVICES  MAPPED_MIB  "
            "ENQ_P99_US  CHUNKS/FORCED  OPENED\n" +
                std::string(200, '-') +
                "\n"
                "sess-000001  mlp   alice  ready   critical    2/2     40  fc1:0.412,fc2:0.380  "
                "fc1:90.0,fc2:-    0.750               -        12.2  0,1            3.00        "
                "40.0              -  2026-12-07T02:00:00Z\n"
                "sess-000002  mlp   alice  failed  deferred    2/2     40  grads:2.500          "
                "grads:-           1.000          3.1/20        12.2  0,1            3.00        "
                "40.0            8/1  2026-12-07T02:00:00Z\n"
                "sess-000002: UNAVAILABLE: rank 1 (pid 42) closed its connection\n")
      << text;
}

TEST_F(SessionsViewTest, ANameOfSeveralWordsIsOneCell) {
  v1::ListSessionsResponse response;
  v1::SessionInfo spaced = Session("sess-000003", "critical");
  spaced.set_name("mlp  block\t3");
  *response.add_sessions() = spaced;
  v1::SessionInfo unnamed = Session("sess-000004", "critical");
  unnamed.set_name("");
  *response.add_sessions() = unnamed;
  const std::string text = FormatSessions(response);
  EXPECT_NE(text.find("sess-000003  mlp_block_3  alice  ready  critical"), std::string::npos)
      << text;
  EXPECT_NE(text.find("sess-000004  -            alice  ready  critical"), std::string::npos)
      << text;
}

TEST_F(SessionsViewTest, NoSessionsAndTheLanes) {
  v1::ListSessionsResponse response;
  EXPECT_EQ(FormatSessions(response), "no sessions\n");
  v1::LaneInterval* lane = response.add_lanes();
  lane->set_session_id("sess-000002");
  lane->set_op("grads");
  lane->set_device(1);
  lane->set_lane("deferred");
  lane->set_chunk(3);
  lane->set_start_ms(1.5);
  lane->set_end_ms(2.25);
  lane->set_forced(true);
  const std::string text = FormatSessions(response);
  EXPECT_NE(text.find("SESSION      OP     DEVICE  LANE      CHUNK  START_MS  END_MS  FORCED\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("sess-000002  grads       1  deferred      3     1.500   2.250  yes\n"),
            std::string::npos)
      << text;
}

TEST(SessionNamesTest, DashONameListsTheSessionIds) {
  EXPECT_EQ(JobNames(nlohmann::json::parse(
                R"({"sessions": [{"session_id": "sess-000001"}, {"session_id": "sess-000002"}]})")),
            (std::vector<std::string>{"sess-000001", "sess-000002"}));
}

}  // namespace
}  // namespace overlap::client
