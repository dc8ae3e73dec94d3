// overlapctl bench without a daemon: the spec it submits, shape parsing, and how
// it folds repeats into rows.
#include "client/measure/bench.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "client/core/command_io.h"
#include "common/graph_parser.h"

namespace overlap::client {
namespace {

TEST(BenchSpecTest, InterleavesAutoAndSerialRepeatsPerShape) {
  BenchOptions o;
  o.shapes = {{"ag_gemm", 256, 128, 64}, {"gemm_ar", 128, 64, 32}};
  o.repeats = 2;
  o.devices = {1, 0};
  auto spec = ParseJobSpec(BuildBenchSpec(o));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->devices, (std::vector<int>{1, 0}));
  EXPECT_TRUE(spec->heat_head_start);
  EXPECT_EQ(spec->seed, 1234u);
  EXPECT_FALSE(spec->layer_step) << "a sweep of unrelated ops has no layer";
  EXPECT_TRUE(spec->retune) << "a sweep measures what wins now, not what won before";
  ASSERT_EQ(spec->ops.size(), 8u);
  const std::vector<std::string> ids = {
      "ag_gemm-256x128x64-auto-0", "ag_gemm-256x128x64-serial-0", "ag_gemm-256x128x64-auto-1",
      "ag_gemm-256x128x64-serial-1", "gemm_ar-128x64x32-auto-0", "gemm_ar-128x64x32-serial-0",
      "gemm_ar-128x64x32-auto-1", "gemm_ar-128x64x32-serial-1"};
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(spec->ops[i].id, ids[i]);
  EXPECT_EQ(spec->ops[0].mode, OverlapMode::kAuto);
  EXPECT_EQ(spec->ops[0].transport, Transport::kAuto);
  EXPECT_EQ(spec->ops[1].mode, OverlapMode::kSerial);
  EXPECT_EQ(spec->ops[1].transport, Transport::kNccl);
  EXPECT_EQ(spec->ops[4].type, OpType::kGemmAr);
  EXPECT_EQ(spec->ops[4].m, 128);
  EXPECT_EQ(spec->ops[4].k, 64);
  EXPECT_EQ(spec->ops[4].n, 32);
}

TEST(BenchSpecTest, TransportNarrowsAutoButNotSerial) {
  BenchOptions o;
  o.shapes = {{"gemm_rs", 256, 128, 64}};
  o.repeats = 1;
  o.transport = "p2p";
  auto spec = ParseJobSpec(BuildBenchSpec(o));
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->ops.size(), 2u);
  EXPECT_EQ(spec->ops[0].mode, OverlapMode::kAuto);
  EXPECT_EQ(spec->ops[0].transport, Transport::kP2p);
  EXPECT_EQ(spec->ops[1].transport, Transport::kNccl);
}

TEST(BenchSpecTest, UseTunedKeepsTheCachedChoices) {
  BenchOptions o;
  o.shapes = {{"gemm_rs", 384, 128, 64}};
  o.retune = false;
  auto spec = ParseJobSpec(BuildBenchSpec(o));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_FALSE(spec->retune);
}

TEST(BenchSpecTest, ChunksNarrowAutoButNotSerial) {
  BenchOptions o;
  o.shapes = {{"gemm_rs", 384, 128, 64}};
  o.repeats = 1;
  o.chunks = 3;
  auto spec = ParseJobSpec(BuildBenchSpec(o));
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->ops.size(), 2u);
  EXPECT_EQ(spec->ops[0].mode, OverlapMode::kAuto);
  EXPECT_EQ(spec->ops[0].chunks, 3);
  EXPECT_EQ(spec->ops[1].chunks, 0);
  o.chunks = 0;  // not narrowed: the field stays out of the spec
  spec = ParseJobSpec(BuildBenchSpec(o));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->ops[0].chunks, 0);
}

TEST(BenchSpecTest, DirectNarrowsTheReductionsAndLeavesAgGemmAuto) {
  BenchOptions o;
  o.shapes = {{"ag_gemm", 256, 128, 64}, {"gemm_ar", 256, 128, 64}};
  o.repeats = 1;
  o.transport = "direct";
  auto spec = ParseJobSpec(BuildBenchSpec(o));
  ASSERT_TRUE(spec.ok()) << spec.status();
  ASSERT_EQ(spec->ops.size(), 4u);
  EXPECT_EQ(spec->ops[0].transport, Transport::kAuto);
  EXPECT_EQ(spec->ops[1].transport, Transport::kNccl);
  EXPECT_EQ(spec->ops[2].transport, Transport::kDirect);
  EXPECT_EQ(spec->ops[3].transport, Transport::kNccl);
}

TEST(BenchSpecTest, DefaultSweepHasFifteenShapes) {
  EXPECT_EQ(DefaultBenchShapes().size(), 15u);
  auto spec = ParseJobSpec(BuildBenchSpec(BenchOptions{}));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->ops.size(), 15u * 3 * 2);
  EXPECT_TRUE(spec->devices.empty());
}

TEST(BenchShapesTest, ParsesAndRejects) {
  auto ok = ParseBenchShapes("ag_gemm:4096x8192x8192,gemm_rs:1x2x3");
  ASSERT_TRUE(ok.ok());
  ASSERT_EQ(ok->size(), 2u);
  EXPECT_EQ((*ok)[1].op, "gemm_rs");
  EXPECT_EQ((*ok)[1].n, 3);
  for (const char* bad : {"", "ag_gemm:1x2", "gemm_xx:1x2x3", "ag_gemm:1xax3", "ag_gemm"}) {
    EXPECT_EQ(ParseBenchShapes(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

v1::OpResult Op(const std::string& id, double step, double gemm, double comm) {
  v1::OpResult r;
  r.set_id(id);
  r.set_tp(2);
  r.set_mode("ring");
  r.set_transport("p2p");
  r.set_schedule("ring/p2p");
  r.mutable_step()->set_median_ms(step);
  r.mutable_gemm_alone()->set_median_ms(gemm);
  r.mutable_comm_alone()->set_median_ms(comm);
  r.set_max_rel_error(1e-3);
  r.set_gemm_slowdown(1.1);
  r.set_host_enqueue_ms(step / 4);
  return r;
}

TEST(BenchFoldTest, MediansOfRepeatsAndDerivedFigures) {
  BenchOptions o;
  o.shapes = {{"ag_gemm", 1000, 1000, 1000}};
  o.repeats = 3;
  v1::Job job;
  job.set_state(v1::SUCCEEDED);
  const std::string base = "ag_gemm-1000x1000x1000";
  *job.mutable_result()->add_ops() = Op(base + "-auto-0", 1.2, 1.0, 0.5);
  *job.mutable_result()->add_ops() = Op(base + "-serial-0", 1.6, 1.0, 0.5);
  *job.mutable_result()->add_ops() = Op(base + "-auto-1", 1.1, 1.0, 0.5);
  *job.mutable_result()->add_ops() = Op(base + "-serial-1", 1.5, 1.0, 0.5);
  *job.mutable_result()->add_ops() = Op(base + "-auto-2", 1.3, 1.0, 0.5);
  *job.mutable_result()->add_ops() = Op(base + "-serial-2", 1.4, 1.0, 0.5);
  job.mutable_result()->mutable_ops(0)->set_auto_reason("autotuned over 9 schedules");
  v1::CandidateTiming* ring = job.mutable_result()->mutable_ops(0)->add_candidates();
  ring->set_schedule("ring/p2p");
  ring->set_best_ms(1.15);
  ring->set_runoff_ms(1.18);
  job.add_devices(0);
  job.add_devices(1);
  // Rank 1's GEMM runs 10% slower in two of three repeats: its median says so.
  const double rank_ms[3][2] = {{1.0, 1.1}, {1.0, 1.0}, {1.0, 1.1}};
  for (int rep = 0; rep < 3; ++rep) {
    for (double ms : rank_ms[rep]) {
      job.mutable_result()->mutable_ops(2 * rep)->add_gemm_alone_rank_ms(ms);
    }
  }
  job.mutable_result()->mutable_ops(2)->set_auto_reason("tuning cache (1.150 ms when tuned)");
  // The last repeat's traced iteration is the row's.
  for (int rep : {0, 2}) {
    v1::Timeline* t = job.mutable_result()->mutable_ops(2 * rep)->mutable_timeline();
    t->set_step_ms(1.0 + rep);
    v1::TimelineSpan* gemm = t->add_spans();
    gemm->set_rank(1);
    gemm->set_lane("compute");
    gemm->set_kind("gemm");
    gemm->set_start_ms(0.25);
    gemm->set_end_ms(1.0);
  }
  std::vector<BenchRow> rows = FoldBench(job, o);
  ASSERT_EQ(rows.size(), 1u);
  const BenchRow& r = rows[0];
  EXPECT_DOUBLE_EQ(r.step_ms, 1.2);
  EXPECT_DOUBLE_EQ(r.serial_ms, 1.5);
  EXPECT_NEAR(r.step_spread, 0.2, 1e-12);
  EXPECT_NEAR(r.exposed_ms, 0.2, 1e-12);
  EXPECT_NEAR(r.hidden, 0.6, 1e-12);  // 1 - 0.2 / 0.5
  EXPECT_DOUBLE_EQ(r.ideal_ms, 1.0);
  EXPECT_NEAR(r.tflops, 2e9 / 1.2e-3 / 1e12, 1e-9);
  EXPECT_EQ(r.mode, "ring/p2p");
  EXPECT_NEAR(r.floor_ms, 1.1, 1e-12);  // max(GEMM 1.0 x slowdown 1.1, comm 0.5)
  EXPECT_NEAR(r.host_ms, 0.3, 1e-12);   // median of 0.3, 0.275, 0.325
  EXPECT_EQ(r.auto_reasons, (std::vector<std::string>{"autotuned over 9 schedules",
                                                      "tuning cache (1.150 ms when tuned)", ""}));
  EXPECT_EQ(r.gemm_rank_ms, (std::vector<double>{1.0, 1.1}));
  EXPECT_EQ(r.devices, (std::vector<int>{0, 1}));
  const nlohmann::json j = BenchJson(job, v1::GetNodeInfoResponse{}, nullptr, rows, o);
  EXPECT_EQ(j["rows"][0]["gemm_alone_rank_ms"][1], 1.1);
  EXPECT_EQ(j["rows"][0]["auto_reasons"][0], "autotuned over 9 schedules");
  ASSERT_EQ(j["rows"][0]["candidates"].size(), 1u);  // from the repeat that tuned
  EXPECT_EQ(j["rows"][0]["candidates"][0]["schedule"], "ring/p2p");
  EXPECT_DOUBLE_EQ(j["rows"][0]["candidates"][0]["runoff_ms"].get<double>(), 1.18);
  EXPECT_EQ(j["rows"][0]["auto_mode"], "ring/p2p");
  const nlohmann::json& timeline = j["rows"][0]["timeline"];
  EXPECT_DOUBLE_EQ(timeline["step_ms"].get<double>(), 3.0);
  ASSERT_EQ(timeline["spans"].size(), 1u);
  EXPECT_EQ(timeline["ranks"][0]["rank"], 1);
  EXPECT_DOUBLE_EQ(timeline["ranks"][0]["waiting_ms"].get<double>(), 0.25);
  EXPECT_EQ(j["seed"], 1234u);
  EXPECT_NEAR(j["rows"][0]["spread_ms"]["step"].get<double>(), 0.2, 1e-12);  // 1.1 .. 1.3
  EXPECT_NEAR(j["rows"][0]["spread_ms"]["serial"].get<double>(), 0.2, 1e-12);
  EXPECT_DOUBLE_EQ(j["rows"][0]["spread_ms"]["gemm_alone"].get<double>(), 0);
  const std::string table = FormatBench(rows);
  // The shape one word, as --shapes takes it, so that awk splits the row.
  EXPECT_THAT(table, ::testing::ContainsRegex("\nag_gemm +1000x1000x1000 +2 +"));
  // The last repeat's timeline: rank 1's GEMM 0.75 ms against 1.0 alone, 0.25 ms waited.
  EXPECT_THAT(table, ::testing::ContainsRegex("1\\.091 +-25\\.0 +0\\.250 "));
  EXPECT_NE(table.find("step/floor: geomean 1.091, worst 1.091"), std::string::npos) << table;
  EXPECT_NE(table.find("step/ideal: geomean 1.200, worst 1.200"), std::string::npos) << table;
  EXPECT_NE(table.find("auto within max(2%, 2x spread) of serial on 1/1"), std::string::npos);
  EXPECT_NE(table.find("hidden >= 85% where comm alone <= GEMM alone: 0/1"), std::string::npos);
  EXPECT_EQ(table.find("one GPU:"), std::string::npos) << "tp = 2";
  rows[0].tp = 1;
  EXPECT_NE(FormatBench(rows).find("one GPU: nothing to communicate"), std::string::npos);
  // One rank moves nothing: no hidden share to show or to count.
  std::vector<BenchRow> one_rank = rows;
  one_rank[0].comm_ms = 0;
  one_rank[0].hidden = 1;
  const std::string alone = FormatBench(one_rank);
  EXPECT_NE(alone.find("hidden >= 85% where comm alone <= GEMM alone: 0/0"), std::string::npos)
      << alone;
  EXPECT_THAT(alone, ::testing::ContainsRegex(" 0\\.200 +- "));
  one_rank[0].gemm_slowdown = 0;  // nothing ran beside the GEMM
  EXPECT_THAT(FormatBench(one_rank), ::testing::ContainsRegex(" 1\\.200 +- +1\\.091 "));
  // The schedule auto ran here hides; a serial one hides nothing by design: "-", as the report.
  EXPECT_TRUE(r.hides);
  EXPECT_THAT(table, ::testing::ContainsRegex(" 0\\.200 +60\\.0 "));
  std::vector<BenchRow> serial = rows;
  serial[0].hides = false;
  EXPECT_THAT(FormatBench(serial), ::testing::ContainsRegex(" 0\\.200 +- "));
  EXPECT_NE(table.find("slow GPU? ag_gemm 1000 x 1000 x 1000: rank 1 (device 1): GEMM alone "
                       "1.100 ms, 10.0% above rank 0 (device 0)'s 1.000 ms"),
            std::string::npos)
      << table;
  EXPECT_EQ(table.find("ranks share GPUs"), std::string::npos);
  EXPECT_EQ(j["ranks_per_gpu"], 1);
  rows[0].tp = 2;
  rows[0].ranks_per_gpu = 2;
  const std::string shared = FormatBench(rows);
  EXPECT_NE(shared.find("ranks share GPUs (ranks_per_gpu 2)"), std::string::npos) << shared;
  EXPECT_EQ(shared.find("slow GPU?"), std::string::npos) << shared;
  rows[0].ranks_per_gpu = 1;
  rows[0].host_backend = true;
  EXPECT_EQ(FormatBench(rows).find("slow GPU?"), std::string::npos) << "host ranks share cores";
  EXPECT_NE(FormatBench(rows).find("host backend: the timings mean nothing"), std::string::npos)
      << "the --html page carries the same line (BenchCaveats)";

  // A step above GEMM alone plus the whole collective hid none of it: the table
  // says 0.0, as the job report does; the JSON keeps the raw fraction.
  rows[0].hidden = -0.4;
  EXPECT_THAT(FormatBench(rows), ::testing::ContainsRegex(" 0\\.200 +0\\.0 "));
  EXPECT_DOUBLE_EQ(BenchJson(job, v1::GetNodeInfoResponse{}, nullptr, rows, o)["rows"][0]["hidden"]
                       .get<double>(),
                   -0.4);
}

}  // namespace
}  // namespace overlap::client

namespace overlap::client {
namespace {

TEST(BenchJsonTest, RecordsTelemetryBeforeAndAfter) {
  v1::GetNodeInfoResponse before, after;
  before.set_backend("cuda");
  v1::Device* d = before.add_devices();
  d->set_index(1);
  d->set_telemetry_valid(true);
  d->set_sm_clock_mhz(345);
  d->set_temperature_c(34);
  d->set_power_w(79.5);
  after = before;
  after.mutable_devices(0)->set_sm_clock_mhz(1980);
  after.add_devices()->set_telemetry_valid(false);  // a device NVML could not read: left out
  v1::Job job;
  job.set_id("job-000007");
  const nlohmann::json j = BenchJson(job, before, &after, {}, BenchOptions{});
  EXPECT_EQ(j["job_id"], "job-000007");
  ASSERT_EQ(j["telemetry_before"].size(), 1u);
  EXPECT_EQ(j["telemetry_before"][0]["sm_clock_mhz"], 345);
  EXPECT_EQ(j["telemetry_before"][0]["device"], 1);
  EXPECT_DOUBLE_EQ(j["telemetry_before"][0]["power_w"].get<double>(), 79.5);
  ASSERT_EQ(j["telemetry_after"].size(), 1u);
  EXPECT_EQ(j["telemetry_after"][0]["sm_clock_mhz"], 1980);
  EXPECT_TRUE(BenchJson(job, before, nullptr, {}, BenchOptions{})["telemetry_after"].empty());
}

TEST(BenchSpecTest, IdleHeadStartReachesTheSpec) {
  BenchOptions o;
  o.head_start = "idle";
  auto spec = ParseJobSpec(BuildBenchSpec(o));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_FALSE(spec->heat_head_start);
}

// `bench --graph`: the sweep of a user's own layer graph.
TEST(BenchFromGraphTest, TakesTheOverlappedOpsShapesOnceInGraphOrder) {
  const std::string path = std::string(OVERLAP_SOURCE_DIR) + "/deploy/graphs/llama70b-layer.yaml";
  auto text = ReadGraphFile(path);
  ASSERT_TRUE(text.ok()) << text.status();
  auto layer = BenchFromGraph(*text, path);
  ASSERT_TRUE(layer.ok()) << layer.status();
  ASSERT_EQ(layer->shapes.size(), 4u);
  const std::vector<std::string> want = {"ag_gemm 8192x8192x10240", "gemm_rs 8192x8192x8192",
                                         "ag_gemm 8192x8192x28672", "gemm_rs 8192x28672x8192"};
  for (size_t i = 0; i < want.size(); ++i) {
    const BenchShape& s = layer->shapes[i];
    EXPECT_EQ(absl::StrCat(s.op, " ", s.m, "x", s.k, "x", s.n), want[i]);
  }
  EXPECT_EQ(layer->dtype, "bf16");
  EXPECT_TRUE(layer->devices.empty());

  // Ops without a collective to overlap are left out, a repeated shape runs
  // once, and the graph's dtype and devices come along.
  auto mixed = BenchFromGraph(R"(name: g
devices: [1, 0]
dtype: fp16
ops:
  - {id: a, type: gemm_ar, m: 256, k: 128, n: 64}
  - {id: w, type: gemm, m: 256, k: 128, n: 64}
  - {id: g, type: all_reduce, m: 256, n: 64, after: [a]}
  - {id: b, type: gemm_ar, m: 256, k: 128, n: 64, after: [a]}
  - {id: c, type: ag_gemm, m: 256, k: 128, n: 64, after: [b]}
)",
                              "g.yaml");
  ASSERT_TRUE(mixed.ok()) << mixed.status();
  ASSERT_EQ(mixed->shapes.size(), 2u);
  EXPECT_EQ(mixed->shapes[0].op, "gemm_ar");
  EXPECT_EQ(mixed->shapes[1].op, "ag_gemm");
  EXPECT_EQ(mixed->dtype, "fp16");
  EXPECT_EQ(mixed->devices, (std::vector<int>{1, 0}));
}

TEST(BenchFromGraphTest, RefusesAGraphWithNothingToSweep) {
  auto none =
      BenchFromGraph("name: g\nops:\n  - {id: g, type: all_reduce, m: 256, n: 64}\n", "grads.yaml");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find("grads.yaml: no ag_gemm, gemm_rs or gemm_ar op"),
            std::string::npos)
      << none.status();
  auto bad = BenchFromGraph("name: g\nops: [", "bad.yaml");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadGraphFile("/nonexistent/graph.yaml").status().code(), absl::StatusCode::kNotFound);
}

TEST(BenchJsonTest, SaysWhetherTheTimingWasGated) {
  v1::GetNodeInfoResponse node;
  v1::Job job;
  EXPECT_EQ(BenchJson(job, node, nullptr, {}, BenchOptions{})["launch_gate"], false);
  job.mutable_result()->set_launch_gate(true);
  EXPECT_EQ(BenchJson(job, node, nullptr, {}, BenchOptions{})["launch_gate"], true);
  job.mutable_result()->set_head_start("heat");
  EXPECT_EQ(BenchJson(job, node, nullptr, {}, BenchOptions{})["head_start"], "heat");
  EXPECT_EQ(BenchJson(job, node, nullptr, {}, BenchOptions{})["preheat_ms"], 0);
  job.mutable_result()->set_preheat_ms(300);
  EXPECT_EQ(BenchJson(job, node, nullptr, {}, BenchOptions{})["preheat_ms"], 300);
}

}  // namespace
}  // namespace overlap::client
