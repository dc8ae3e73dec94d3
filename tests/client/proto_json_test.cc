// --json's one form: 64-bit integers as numbers everywhere in a message (maps,
// repeated fields, nested messages), unix times also in RFC 3339.
#include "client/core/proto_json.h"

#include "gtest/gtest.h"
#include "overlap/v1/overlap.pb.h"

namespace overlap::client {
namespace {

TEST(ProtoJsonTest, WideIntegersAreNumbersAndTimesAlsoRfc3339) {
  v1::Job job;
  job.set_id("job-000042");
  job.set_sequence(18'446'744'073'709'551'615ull);  // uint64's largest: no digit lost
  job.set_submit_time_ms(1'796'544'462'123);
  job.set_error_code(3);
  v1::OpResult* op = job.mutable_result()->add_ops();
  op->set_m(4096);
  op->set_k(-1);
  const nlohmann::json j = ProtoToJson(job);
  EXPECT_EQ(j["sequence"].get<uint64_t>(), 18'446'744'073'709'551'615ull);
  EXPECT_EQ(j["submit_time_ms"], 1'796'544'462'123);
  EXPECT_EQ(j["submit_time"], "2026-12-06T08:07:42.123Z");
  EXPECT_TRUE(j["start_time"].is_null()) << "0: not started";
  EXPECT_EQ(j["start_time_ms"], 0);
  EXPECT_EQ(j["error_code"], 3);
  EXPECT_EQ(j["result"]["ops"][0]["m"], 4096);
  EXPECT_EQ(j["result"]["ops"][0]["k"], -1);
  EXPECT_EQ(j["id"], "job-000042");
  EXPECT_EQ(j["state"], "JOB_STATE_UNSPECIFIED") << "enums by name";

  v1::GetStatsResponse stats;
  (*stats.mutable_jobs_by_state())["SUCCEEDED"] = 7;
  stats.set_jobs_submitted(9);
  const nlohmann::json s = ProtoToJson(stats);
  EXPECT_EQ(s["jobs_by_state"]["SUCCEEDED"], 7) << "map values too";
  EXPECT_EQ(s["jobs_submitted"], 9);

  v1::Device device;
  device.set_last_xid_unix_ms(1'796'544'462'000);
  device.set_last_xid(79);
  const nlohmann::json d = ProtoToJson(device);
  EXPECT_EQ(d["last_xid_time"], "2026-12-06T08:07:42.000Z");
  EXPECT_EQ(d["last_xid"], 79);
}

}  // namespace
}  // namespace overlap::client
