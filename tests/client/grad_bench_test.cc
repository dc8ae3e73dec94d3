// overlapctl bench --nodes without a daemon: the graph each form submits (its
// GEMMs, the gradients' all-reduces over dp, bucket_mib and chunk_kib), what
// each form sent read back from its layer deferrals, the job that times
// buckets and pieces alone, and the table and JSON.
#include "client/measure/grad_bench.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "client/measure/bench.h"
#include "common/graph_parser.h"
#include "common/graph_validator.h"

namespace overlap::client {
namespace {

using ::testing::HasSubstr;

GradBenchOptions Options() {
  GradBenchOptions o;
  o.nodes = {"127.0.0.1:7071", "127.0.0.1:7072"};
  o.grad_bytes = {64 << 10, 1 << 20};
  o.gemm = {"gemm", 128, 64, 256};
  o.gemms_per_grad = 2;
  o.iterations = 3;
  o.warmup = 1;
  return o;
}

JobSpec ParsedAndValid(const std::string& text, int devices) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(text);
  EXPECT_TRUE(spec.ok()) << spec.status() << "\n" << text;
  if (!spec.ok()) return {};
  ValidationLimits limits;
  limits.device_count = devices;
  limits.library_algorithms = false;
  const auto valid = ValidateJobSpec(*spec, limits);
  EXPECT_TRUE(valid.ok()) << valid.status() << "\n" << text;
  return *spec;
}

// The three forms run one graph: GEMMs, each gradient's all-reduce across the
// nodes after its GEMMs, as many GEMMs after the last; only the layer-step
// keys differ.
TEST(GradBenchSpecTest, OneLayerStepGraphPerFormDifferingInItsLayerStepKeysOnly) {
  const GradBenchOptions o = Options();
  const JobSpec whole = ParsedAndValid(BuildGradBenchSpec(o, GradForm::kWhole, 2), 4);
  EXPECT_EQ(whole.name, "gradbench-whole");
  EXPECT_EQ(whole.mesh.tp, 2);
  EXPECT_EQ(whole.mesh.dp, 2);
  EXPECT_TRUE(whole.layer_step);
  EXPECT_EQ(whole.iterations, 3);
  EXPECT_EQ(whole.bucket_mib, 0);
  EXPECT_EQ(whole.chunk_kib, 0);
  std::vector<std::string> ids;
  for (const OpSpec& op : whole.ops) ids.push_back(op.id);
  EXPECT_EQ(ids, (std::vector<std::string>{"bwd0.0", "bwd0.1", "grad0", "bwd1.0", "bwd1.1", "grad1",
                                           "bwd2.0", "bwd2.1"}));
  for (const OpSpec& op : whole.ops) {
    if (op.type == OpType::kGemm) {
      EXPECT_EQ(op.group, OpGroup::kTp) << op.id;
      EXPECT_EQ(op.m * op.k * op.n, 128 * 64 * 256) << op.id;
    } else {
      EXPECT_EQ(op.type, OpType::kAllReduce) << op.id;
      EXPECT_EQ(op.group, OpGroup::kDp) << op.id;
      EXPECT_EQ(op.transport, Transport::kNccl) << op.id;
      EXPECT_EQ(op.mode, OverlapMode::kSerial) << op.id;
      EXPECT_EQ(op.m % 2, 0) << op.id << ": whole rows on each of dp = 2 ranks";
    }
  }
  EXPECT_EQ(whole.ops[2].m * whole.ops[2].n * 2, 64 << 10) << "bf16: each rank's gradient";
  EXPECT_EQ(whole.ops[5].m * whole.ops[5].n * 2, 1 << 20);
  EXPECT_EQ(whole.ops[2].after, (std::vector<std::string>{"bwd0.1"}));
  EXPECT_EQ(whole.ops[3].after, (std::vector<std::string>{"bwd0.1"}));  // beside grad0
  EXPECT_TRUE(whole.ops[0].after.empty());

  const JobSpec bucketed = ParsedAndValid(BuildGradBenchSpec(o, GradForm::kBucketed, 2), 4);
  EXPECT_EQ(bucketed.bucket_mib, 25);
  EXPECT_EQ(bucketed.chunk_kib, 0);
  const JobSpec chunked = ParsedAndValid(BuildGradBenchSpec(o, GradForm::kChunked, 2), 4);
  EXPECT_EQ(chunked.bucket_mib, 0);
  EXPECT_EQ(chunked.chunk_kib, 256);
  ASSERT_EQ(chunked.ops.size(), whole.ops.size());
  for (size_t i = 0; i < whole.ops.size(); ++i) {
    EXPECT_EQ(chunked.ops[i].id, whole.ops[i].id);
    EXPECT_EQ(chunked.ops[i].m, whole.ops[i].m);
    EXPECT_EQ(bucketed.ops[i].n, whole.ops[i].n);
  }

  // Each node brings these devices (a one-daemon validator cannot check that mesh).
  GradBenchOptions devices = o;
  devices.devices = {2, 3};
  absl::StatusOr<JobSpec> on_devices =
      ParseJobSpec(BuildGradBenchSpec(devices, GradForm::kWhole, 2));
  ASSERT_TRUE(on_devices.ok()) << on_devices.status();
  EXPECT_EQ(on_devices->devices, (std::vector<int>{2, 3}));
}

TEST(GradBenchOptionsTest, RefusesWhatCannotRun) {
  EXPECT_TRUE(ValidateGradBenchOptions(Options()).ok());
  auto refused = [](auto change, const std::string& message) {
    GradBenchOptions o = Options();
    change(o);
    const absl::Status s = ValidateGradBenchOptions(o);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << message;
    EXPECT_THAT(std::string(s.message()), HasSubstr(message));
  };
  refused([](GradBenchOptions& o) { o.nodes.pop_back(); }, "--peers: give at least two daemons");
  refused([](GradBenchOptions& o) { o.grad_bytes = {0}; }, "--grad-sizes: each must be above 0");
  refused([](GradBenchOptions& o) { o.gemm.k = 0; }, "--gemm: m, k and n must be above 0");
  refused([](GradBenchOptions& o) { o.gemms_per_grad = 0; }, "--gemms-per-grad");
  refused([](GradBenchOptions& o) { o.chunk_kib = 0; }, "--chunk-kib");
  refused([](GradBenchOptions& o) { o.dtype = "fp8"; }, "--dtype fp8");
  EXPECT_EQ(*ParseGradSizes("64KiB,1MiB"), (std::vector<int64_t>{64 << 10, 1 << 20}));
  EXPECT_THAT(std::string(ParseGradSizes("1MiB,lots").status().message()),
              HasSubstr("--grad-sizes: \"lots\""));
  EXPECT_EQ(DefaultGradSizes("host").back(), 4 << 20);
  EXPECT_EQ(DefaultGradSizes("cuda").back(), int64_t{64} << 20);
  EXPECT_EQ(DefaultGradGemm("host").m, 256);
}

// What the bucketed and chunked forms sent, from their layer deferrals.
v1::Job FormJob(const std::string& id) {
  v1::Job job;
  job.set_id(id);
  job.add_nodes("127.0.0.1:7071");
  job.add_nodes("127.0.0.1:7072");
  v1::JobResult* r = job.mutable_result();
  r->set_backend("host");
  r->set_mesh_tp(2);
  r->set_mesh_dp(2);
  r->mutable_layer_step()->set_median_ms(10);
  r->mutable_layer_step_without_deferred()->set_median_ms(7);
  r->set_layer_deferred_hidden_fraction(0.25);
  v1::OpResult* op = r->add_ops();
  op->set_id("grad0");
  op->set_verified(true);
  op->set_max_rel_error(2e-3);
  op->set_tolerance(1e-2);
  return job;
}

v1::LayerDeferral* Deferral(v1::Job& job, const std::string& op, const std::string& how,
                            double alone_ms, int pieces = 1, int64_t piece_bytes = 0) {
  v1::LayerDeferral* d = job.mutable_result()->add_layer_deferrals();
  d->set_op(op);
  d->set_how(how);
  d->set_alone_ms(alone_ms);
  d->set_pieces(pieces);
  d->set_piece_bytes(piece_bytes);
  return d;
}

TEST(GradBenchFoldTest, WhatEachFormSentTimedAloneGivesItsBusBandwidth) {
  const GradBenchOptions o = Options();  // grad0 64 KiB = 32 x 1024, grad1 1 MiB = 512 x 1024
  v1::Job whole = FormJob("job-000001");
  Deferral(whole, "grad0", "whole", 1.0);
  Deferral(whole, "grad1", "whole", 3.0);
  v1::Job bucketed = FormJob("job-000002");
  Deferral(bucketed, "bucket(grad0+grad1)", "bucketed", 4.0);
  v1::Job chunked = FormJob("job-000003");
  Deferral(chunked, "grad0", "whole", 1.0);
  Deferral(chunked, "grad1", "chunked", 3.0, 4, 256 << 10);

  const std::vector<GradMessage> sent = GradMessages(bucketed, o);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].m, 544);  // (32 + 512) rows of 1024
  EXPECT_EQ(sent[0].n, 1024);
  const std::vector<GradMessage> pieces = GradMessages(chunked, o);
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[0].how, "whole");
  EXPECT_DOUBLE_EQ(pieces[0].alone_ms, 1.0);
  EXPECT_EQ(pieces[1].m, 128);  // 256 KiB of 1024-element bf16 rows
  EXPECT_EQ(pieces[1].pieces, 4);

  // The messages job: a bucket and a piece, each shape once; none for whole.
  std::vector<GradMessage> all = sent;
  all.insert(all.end(), pieces.begin(), pieces.end());
  all.push_back(pieces[1]);
  const JobSpec messages = ParsedAndValid(BuildGradMessagesSpec(o, all, 2), 4);
  ASSERT_EQ(messages.ops.size(), 2u);
  EXPECT_EQ(messages.ops[0].id, "msg-544x1024");
  EXPECT_EQ(messages.ops[1].id, "msg-128x1024");
  EXPECT_EQ(messages.ops[1].group, OpGroup::kDp);
  EXPECT_FALSE(messages.layer_step);
  EXPECT_EQ(BuildGradMessagesSpec(o, GradMessages(whole, o), 2), "");

  v1::Job timed;
  v1::OpResult* bucket = timed.mutable_result()->add_ops();
  bucket->set_id("msg-544x1024");
  bucket->mutable_step()->set_median_ms(2.0);
  bucket->set_verified(true);
  bucket->set_max_rel_error(3e-3);
  bucket->set_tolerance(1e-2);
  v1::OpResult* piece = timed.mutable_result()->add_ops();
  piece->set_id("msg-128x1024");
  piece->mutable_step()->set_median_ms(0.5);
  piece->set_verified(true);
  piece->set_max_rel_error(0.5);  // wrong
  piece->set_tolerance(1e-2);

  const GradBenchRow w = FoldGradForm(GradForm::kWhole, whole, &timed, o);
  EXPECT_DOUBLE_EQ(w.step_ms, 10);
  EXPECT_DOUBLE_EQ(w.exposed_ms, 3);
  EXPECT_DOUBLE_EQ(w.hidden, 0.25);
  EXPECT_DOUBLE_EQ(w.whole_alone_ms, 4.0);
  EXPECT_DOUBLE_EQ(w.sent_alone_ms, 4.0);
  EXPECT_DOUBLE_EQ(w.sent_bytes, (64 << 10) + (1 << 20));
  EXPECT_DOUBLE_EQ(w.algbw_gbps, ((64 << 10) + (1 << 20)) / 4e6);
  EXPECT_DOUBLE_EQ(w.busbw_gbps, w.algbw_gbps);  // N = 2: 2(N-1)/N = 1
  EXPECT_TRUE(w.verify.verified && w.verify.within);

  const GradBenchRow b = FoldGradForm(GradForm::kBucketed, bucketed, &timed, o);
  EXPECT_DOUBLE_EQ(b.sent_alone_ms, 2.0);
  EXPECT_DOUBLE_EQ(b.algbw_gbps, 544 * 1024 * 2 / 2e6);
  EXPECT_TRUE(b.verify.within);
  EXPECT_DOUBLE_EQ(b.verify.max_rel_error, 3e-3);

  const GradBenchRow c = FoldGradForm(GradForm::kChunked, chunked, &timed, o);
  EXPECT_DOUBLE_EQ(c.sent_alone_ms, 1.0 + 4 * 0.5);
  EXPECT_FALSE(c.verify.within) << "a piece timed alone came back wrong";
  EXPECT_DOUBLE_EQ(c.verify.max_rel_error, 0.5);
  // Without the messages job the bucket has no time: no bandwidth to claim.
  EXPECT_DOUBLE_EQ(FoldGradForm(GradForm::kBucketed, bucketed, nullptr, o).busbw_gbps, 0);

  // Four nodes: busbw = algbw x 2(N-1)/N = 1.5 algbw.
  GradBenchOptions four = o;
  four.nodes = {"a:1", "b:1", "c:1", "d:1"};
  const GradBenchRow w4 = FoldGradForm(GradForm::kWhole, whole, nullptr, four);
  EXPECT_DOUBLE_EQ(w4.busbw_gbps, 1.5 * w4.algbw_gbps);

  const std::string text = FormatGradBench({w, b, c}, whole, o, 2);
  EXPECT_THAT(text, HasSubstr("bench: gradient all-reduces across 2 nodes x 2 device(s) (mesh tp "
                              "2 x dp 2), bf16: 2 gradient(s) a rank (64KiB, 1MiB: 1088KiB), "
                              "each after 2 GEMM(s) 128 x 64 x 256"));
  EXPECT_THAT(text, HasSubstr("HIDDEN_%  ALGBW_GBPS  BUSBW_GBPS  MAX_REL_ERR  VERIFY\n"));
  // The worst error of the form's job and of what it sent timed alone, in
  // its own column; VERIFY one word.
  EXPECT_THAT(text,
              ::testing::ContainsRegex("whole +2 whole +10\\.000 +7\\.000 +3\\.000 "
                                       "+4\\.000 +25\\.0 +[0-9.]+ +[0-9.]+ +2\\.0e-03 +ok\n"));
  EXPECT_THAT(text, ::testing::ContainsRegex("bucketed 25MiB +1 bucket of 1088KiB +10\\.000 .* "
                                             "3\\.0e-03 +ok\n"));
  EXPECT_THAT(text, ::testing::ContainsRegex(
                        "chunked 256KiB +4 pieces of 256KiB, 1 whole .* 5\\.0e-01 +failed\n"));
  EXPECT_THAT(text, HasSubstr("busbw = algbw x 2(N-1)/N, N = 2"));
  EXPECT_THAT(text, HasSubstr("host backend: the figures mean nothing"));

  v1::GetNodeInfoResponse node;
  node.set_backend("host");
  const nlohmann::json j = GradBenchJson(whole, node, nullptr, {w, b, c}, o, 2);
  EXPECT_EQ(j["figures_meaningful"], false);
  EXPECT_EQ(j["nodes"].size(), 2u);
  ASSERT_EQ(j["forms"].size(), 3u);
  EXPECT_EQ(j["forms"][1]["form"], "bucketed");
  EXPECT_EQ(j["forms"][1]["bucket_mib"], 25);
  EXPECT_EQ(j["forms"][2]["chunk_kib"], 256);
  EXPECT_EQ(j["forms"][2]["messages"][1]["pieces"], 4);
  EXPECT_EQ(j["forms"][2]["messages"][1]["bytes"], 4 * (256 << 10));
  EXPECT_DOUBLE_EQ(j["forms"][0]["hidden"].get<double>(), 0.25);
  EXPECT_EQ(j["forms"][2]["within_tolerance"], false);
  EXPECT_EQ(j["forms"][2]["verified"], true);
  EXPECT_DOUBLE_EQ(j["forms"][2]["max_rel_error"].get<double>(), 0.5);
}

// A job whose buffers did not fit runs no layer step: the row says why.
TEST(GradBenchFoldTest, NoLayerStepIsSaid) {
  const GradBenchOptions o = Options();
  v1::Job job = FormJob("job-000001");
  job.mutable_result()->clear_layer_step();
  job.mutable_result()->set_layer_note("the buffers of all ops do not fit at once");
  const GradBenchRow row = FoldGradForm(GradForm::kWhole, job, nullptr, o);
  const std::string text = FormatGradBench({row}, job, o, 2);
  EXPECT_THAT(text, HasSubstr("whole: no layer step: the buffers of all ops do not fit at once"));
  EXPECT_THAT(text, ::testing::ContainsRegex("whole +- +- +- +-"));
}

// Under --no-verify no op checked its result: VERIFY says off and MAX_REL_ERR
// has nothing to show.
TEST(GradBenchFoldTest, AFormThatVerifiedNothingSaysOff) {
  const GradBenchOptions o = Options();
  v1::Job job = FormJob("job-000001");
  job.mutable_result()->mutable_ops(0)->set_verified(false);
  const GradBenchRow row = FoldGradForm(GradForm::kWhole, job, nullptr, o);
  EXPECT_FALSE(row.verify.verified);
  EXPECT_THAT(FormatGradBench({row}, job, o, 2), ::testing::ContainsRegex(" +- +off\n"));
}

}  // namespace
}  // namespace overlap::client
