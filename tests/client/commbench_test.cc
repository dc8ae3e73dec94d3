// overlapctl commbench without a daemon: the spec it submits (sizes, shapes,
// ids, valid for the group), its option checks, and how results fold into rows
// and print.
#include "client/commbench.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/graph_parser.h"
#include "common/graph_validator.h"

namespace overlap::client {
namespace {

using ::testing::HasSubstr;

TEST(CommBenchSpecTest, EverySizeOnEveryTransportAsAValidJob) {
  CommBenchOptions o;  // 1 MiB .. 1 GiB, x4: 6 sizes
  o.collectives = {"all_reduce", "reduce_scatter"};
  auto spec = ParseJobSpec(BuildCommBenchSpec(o, 2));
  ASSERT_TRUE(spec.ok()) << spec.status();
  ValidationLimits limits;
  limits.device_count = 2;
  ASSERT_TRUE(ValidateJobSpec(*spec, limits).ok());
  ASSERT_EQ(spec->ops.size(), 2u * 6u * 2u);
  EXPECT_EQ(spec->ops[0].id, "ar-1048576-nccl");
  EXPECT_EQ(spec->ops[1].id, "ar-1048576-p2p");
  EXPECT_EQ(spec->ops[11].id, "ar-1073741824-p2p");
  EXPECT_EQ(spec->ops[12].id, "rs-1048576-nccl");
  for (const OpSpec& op : spec->ops) {
    EXPECT_EQ(op.mode, OverlapMode::kSerial) << op.id;
    EXPECT_EQ(op.k, 0) << op.id;
    EXPECT_EQ(op.n, 1024) << op.id;
    EXPECT_EQ(op.m % 2, 0) << op.id;
  }
  EXPECT_EQ(spec->ops[0].m * spec->ops[0].n * 2, 1 << 20) << "bf16: 2 bytes an element";
  EXPECT_EQ(spec->ops[1].transport, Transport::kP2p);
  EXPECT_EQ(spec->ops[12].type, OpType::kReduceScatter);
}

// Sizes that the group cannot split evenly round down to whole rows per rank;
// tiny ones shorten the rows instead.
// --algorithms adds all_reduce ops pinned to each layout on every transport
// that has it, beside the transports' own; the other collectives get none.
TEST(CommBenchSpecTest, AlgorithmsAddPinnedAllReduces) {
  CommBenchOptions o;
  o.collectives = {"all_reduce", "all_gather"};
  o.algorithms = {"ring", "ps"};
  o.min_bytes = o.max_bytes = 1 << 20;
  EXPECT_EQ(CommBenchVariants(o),
            (std::vector<std::string>{"nccl", "nccl/ring", "p2p", "p2p/ring", "p2p/ps"}));
  auto spec = ParseJobSpec(BuildCommBenchSpec(o, 4));
  ASSERT_TRUE(spec.ok()) << spec.status();
  ValidationLimits limits;
  limits.device_count = 4;
  ASSERT_TRUE(ValidateJobSpec(*spec, limits).ok());
  std::vector<std::string> ids;
  for (const OpSpec& op : spec->ops) ids.push_back(op.id);
  EXPECT_EQ(ids,
            (std::vector<std::string>{"ar-1048576-nccl", "ar-1048576-nccl-ring", "ar-1048576-p2p",
                                      "ar-1048576-p2p-ring", "ar-1048576-p2p-ps", "ag-1048576-nccl",
                                      "ag-1048576-p2p"}));
  EXPECT_EQ(spec->ops[1].algorithm, AllReduceAlgorithm::kRing);
  EXPECT_EQ(spec->ops[1].transport, Transport::kNccl);
  EXPECT_EQ(spec->ops[4].algorithm, AllReduceAlgorithm::kParameterServer);
  EXPECT_EQ(spec->ops[2].algorithm, AllReduceAlgorithm::kDefault);
  // Where the library cannot pin one (the host backend), only p2p gets them.
  o.library_algorithms = false;
  EXPECT_EQ(CommBenchVariants(o), (std::vector<std::string>{"nccl", "p2p", "p2p/ring", "p2p/ps"}));
}

// Bytes into the busiest GPU, in units of the buffer: ring and direct stay
// under 2 whatever the group, the server grows with it.
TEST(CommBenchSpecTest, BusiestGpuFactors) {
  EXPECT_DOUBLE_EQ(AllReduceBusiestGpuFactor("ring", 2), 1.0);
  EXPECT_DOUBLE_EQ(AllReduceBusiestGpuFactor("direct", 8), 1.75);
  EXPECT_DOUBLE_EQ(AllReduceBusiestGpuFactor("ps", 8), 7.0);
  EXPECT_DOUBLE_EQ(AllReduceBusiestGpuFactor("tree", 2), 1.0);  // root and one leaf
  EXPECT_DOUBLE_EQ(AllReduceBusiestGpuFactor("tree", 4), 2.0);  // root: two children
  EXPECT_DOUBLE_EQ(AllReduceBusiestGpuFactor("tree", 5), 3.0);  // rank 1: two children, a parent
  EXPECT_DOUBLE_EQ(AllReduceBusiestGpuFactor("ring", 1), 0.0);
}

TEST(CommBenchSpecTest, ShapesFitTheGroup) {
  CommBenchOptions o;
  o.collectives = {"all_gather"};
  o.transports = {"nccl"};
  o.min_bytes = 1024;
  o.max_bytes = 3 << 20;
  o.factor = 1024;
  o.dtype = "fp32";
  auto spec = ParseJobSpec(BuildCommBenchSpec(o, 3));
  ASSERT_TRUE(spec.ok()) << spec.status();
  ValidationLimits limits;
  limits.device_count = 3;
  ASSERT_TRUE(ValidateJobSpec(*spec, limits).ok());
  ASSERT_EQ(spec->ops.size(), 2u);  // 1 KiB, 1 MiB (the next, 1 GiB, is past 3 MiB)
  EXPECT_EQ(spec->ops[0].n, 85);    // 256 floats over 3 ranks
  EXPECT_EQ(spec->ops[0].m, 3);
  EXPECT_EQ(spec->ops[1].n, 1024);
  EXPECT_EQ(spec->ops[1].m, 255);  // 256 rows rounded down to a multiple of 3
  EXPECT_EQ(spec->ops[1].id, "ag-1044480-nccl");
}

TEST(CommBenchOptionsTest, RefusesWhatCannotRun) {
  EXPECT_TRUE(ValidateCommBenchOptions(CommBenchOptions{}).ok());
  auto refused = [](auto change, const std::string& message) {
    CommBenchOptions o;
    change(o);
    const absl::Status s = ValidateCommBenchOptions(o);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << message;
    EXPECT_THAT(std::string(s.message()), HasSubstr(message));
  };
  refused([](CommBenchOptions& o) { o.collectives = {"broadcast"}; },
          "--collectives: unknown collective \"broadcast\"");
  refused([](CommBenchOptions& o) { o.transports = {"ib"}; }, "--transports: unknown transport");
  refused([](CommBenchOptions& o) { o.transports.clear(); }, "--transports: none given");
  refused([](CommBenchOptions& o) { o.min_bytes = 2 << 20, o.max_bytes = 1 << 20; },
          "need 0 < min <= max");
  refused([](CommBenchOptions& o) { o.factor = 1; }, "--factor: must be at least 2");
  refused([](CommBenchOptions& o) { o.dtype = "fp4"; }, "--dtype: unknown dtype");
  // fp8 is only ever gathered; one dtype for every collective would mislabel sums.
  refused([](CommBenchOptions& o) { o.dtype = "fp8"; }, "--dtype fp8: ");
  refused([](CommBenchOptions& o) { o.algorithms = {"butterfly"}; },
          "--algorithms: unknown algorithm \"butterfly\" (ring, tree, ps)");
  refused(
      [](CommBenchOptions& o) {
        o.algorithms = {"ps"};
        o.transports = {"nccl"};
      },
      "ps (parameter server) runs over the copy engines: add p2p to --transports");
  refused(
      [](CommBenchOptions& o) {
        o.algorithms = {"tree"};
        o.collectives = {"all_gather"};
      },
      "--algorithms: only all_reduce has them");
}

v1::OpResult Result(const std::string& type, int64_t m, int64_t n, const std::string& transport,
                    double ms, double busbw, double error) {
  v1::OpResult op;
  op.set_type(type);
  op.set_m(m);
  op.set_n(n);
  op.set_dtype("bf16");
  op.set_transport(transport);
  op.mutable_step()->set_median_ms(ms);
  op.set_algbw_gbps(busbw);
  op.set_busbw_gbps(busbw);
  op.set_verified(true);
  op.set_max_rel_error(error);
  op.set_tolerance(1e-2);
  return op;
}

TEST(CommBenchFoldTest, RowsPerCollectiveAndSizeWithTheFasterTransport) {
  v1::Job job;
  v1::JobResult* r = job.mutable_result();
  *r->add_ops() = Result("all_reduce", 512, 1024, "nccl", 0.200, 10, 1e-3);
  *r->add_ops() = Result("all_reduce", 512, 1024, "p2p", 0.100, 20, 2e-3);
  *r->add_ops() = Result("all_gather", 512, 1024, "nccl", 0.050, 30, 0);
  *r->add_ops() = Result("all_gather", 512, 1024, "p2p", 0.075, 20, 0.5);  // wrong
  v1::OpResult gemm = Result("gemm_ar", 512, 1024, "nccl", 1, 1, 0);
  *r->add_ops() = gemm;  // not a collective alone: left out
  const std::vector<CommBenchRow> rows = FoldCommBench(job);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].collective, "all_reduce");
  EXPECT_EQ(rows[0].bytes, 1 << 20);
  EXPECT_EQ(rows[0].count, 512 * 1024);
  EXPECT_DOUBLE_EQ(rows[0].by_transport.at("p2p").ms, 0.100);
  EXPECT_EQ(rows[1].collective, "all_gather");

  const std::string text = FormatCommBench(rows, {"nccl", "p2p"}, 2, "bf16");
  EXPECT_THAT(text, HasSubstr("commbench: 2 rank(s), bf16"));
  EXPECT_THAT(text, HasSubstr("p2p 2.00x"));
  EXPECT_THAT(text, HasSubstr("nccl 1.50x"));
  EXPECT_THAT(text, HasSubstr("ok 2.0e-03"));
  EXPECT_THAT(text, HasSubstr("FAIL 5.0e-01"));
  EXPECT_THAT(text, HasSubstr("best busbw: all_reduce over p2p 20.0 GB/s (at 1MiB)"));
  EXPECT_THAT(text, HasSubstr("best busbw: all_gather over nccl 30.0 GB/s (at 1MiB)"));
  // Only the transports asked for get columns.
  EXPECT_THAT(FormatCommBench(rows, {"p2p"}, 2, "bf16"), ::testing::Not(HasSubstr("nccl ms")));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("ranks share GPUs")));
  EXPECT_THAT(FormatCommBench(rows, {"nccl", "p2p"}, 2, "bf16", /*ranks_per_gpu=*/2),
              HasSubstr("copies stand in for NCCL between them"));
}

// Algorithm columns fill from results that name their algorithm, and the
// busiest GPU's share of the bytes is printed for the copy-engine layouts.
TEST(CommBenchFoldTest, AlgorithmColumnsAndTheBusiestGpu) {
  v1::Job job;
  v1::JobResult* r = job.mutable_result();
  *r->add_ops() = Result("all_reduce", 512, 1024, "p2p", 0.100, 20, 1e-3);
  v1::OpResult tree = Result("all_reduce", 512, 1024, "p2p", 0.150, 13, 1e-3);
  tree.set_algorithm("tree");
  *r->add_ops() = tree;
  v1::OpResult ps = Result("all_reduce", 512, 1024, "p2p", 0.300, 7, 1e-3);
  ps.set_algorithm("ps");
  *r->add_ops() = ps;
  const std::vector<CommBenchRow> rows = FoldCommBench(job);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_DOUBLE_EQ(rows[0].by_transport.at("p2p/tree").ms, 0.150);
  EXPECT_DOUBLE_EQ(rows[0].by_transport.at("p2p/ps").ms, 0.300);
  const std::string text = FormatCommBench(rows, {"p2p", "p2p/tree", "p2p/ps"}, 8, "bf16");
  EXPECT_THAT(text, HasSubstr("p2p/tree ms"));
  EXPECT_THAT(text, HasSubstr("p2p 1.50x"));
  EXPECT_THAT(text, HasSubstr("all_reduce bytes into the busiest GPU, per byte of buffer, at 8 "
                              "ranks: p2p 1.75 (direct), p2p/tree 3.00, p2p/ps 7.00"));
  EXPECT_THAT(FormatCommBench(rows, {"nccl", "p2p"}, 8, "bf16"),
              ::testing::Not(HasSubstr("busiest GPU")));
}

// One rank moves nothing between GPUs: no bus bandwidth to name as best, and
// one transport measured has no "faster".
TEST(CommBenchFoldTest, OneRankSaysItMeasuredALocalCopy) {
  v1::Job job;
  v1::OpResult op = Result("all_reduce", 512, 1024, "nccl", 0.004, 0, 0);
  op.set_algbw_gbps(950);
  *job.mutable_result()->add_ops() = op;
  const std::string text = FormatCommBench(FoldCommBench(job), {"nccl", "p2p"}, 1, "bf16");
  EXPECT_THAT(text, HasSubstr("one rank: nothing crosses a link"));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("best busbw")));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("nccl  ")));
  EXPECT_THAT(text, ::testing::ContainsRegex("950\\.0 +0\\.000 +- +- +- +- +ok"));
}

}  // namespace
}  // namespace overlap::client
