// overlapctl commbench without a daemon: the spec it submits (sizes, shapes,
// ids, valid for the group), its option checks, and how results fold into rows
// and print.
#include "client/measure/commbench.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/graph_parser.h"
#include "common/graph_validator.h"

namespace overlap::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// The fields of the line of `text` whose first field is `first`, split as awk
// splits them: every cell of these tables is one word.
std::vector<std::string> AwkFields(const std::string& text, const std::string& first) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    std::vector<std::string> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (!fields.empty() && fields[0] == first) return fields;
  }
  return {};
}

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
  EXPECT_THAT(AwkFields(text, "COLLECTIVE"),
              ElementsAre("COLLECTIVE", "SIZE", "COUNT", "NCCL_MS", "NCCL_ALGBW_GBPS",
                          "NCCL_BUSBW_GBPS", "P2P_MS", "P2P_ALGBW_GBPS", "P2P_BUSBW_GBPS", "FASTER",
                          "SPEEDUP", "MAX_REL_ERR", "VERIFY"));
  // The faster transport and by how much, the worst error of the row's
  // transports and whether every one was within its tolerance.
  EXPECT_THAT(AwkFields(text, "all_reduce"),
              ElementsAre("all_reduce", "1MiB", "524288", "0.200", "10.0", "10.0", "0.100", "20.0",
                          "20.0", "p2p", "2.00x", "2.0e-03", "ok"));
  EXPECT_THAT(AwkFields(text, "all_gather"),
              ElementsAre("all_gather", "1MiB", "524288", "0.050", "30.0", "30.0", "0.075", "20.0",
                          "20.0", "nccl", "1.50x", "5.0e-01", "failed"));
  EXPECT_THAT(text, HasSubstr("best busbw: all_reduce over p2p 20.0 GB/s (at 1MiB)"));
  EXPECT_THAT(text, HasSubstr("best busbw: all_gather over nccl 30.0 GB/s (at 1MiB)"));
  // Only the transports asked for get columns.
  EXPECT_THAT(FormatCommBench(rows, {"p2p"}, 2, "bf16"), ::testing::Not(HasSubstr("NCCL_MS")));
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
  EXPECT_THAT(text, HasSubstr("P2P/TREE_MS"));
  EXPECT_THAT(AwkFields(text, "all_reduce"),
              ElementsAre("all_reduce", "1MiB", "524288", "0.100", "20.0", "20.0", "0.150", "13.0",
                          "13.0", "0.300", "7.000", "7.000", "p2p", "1.50x", "1.0e-03", "ok"));
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
  EXPECT_THAT(AwkFields(text, "all_reduce"),
              ElementsAre("all_reduce", "1MiB", "524288", "0.004", "950.0", "0.000", "-", "-", "-",
                          "-", "-", "0.0e+00", "ok"));
}

// Under --no-verify nothing was checked: VERIFY says off, and there is no error to show.
TEST(CommBenchFoldTest, UnverifiedRowsSayOffAndShowNoError) {
  v1::Job job;
  v1::OpResult nccl = Result("all_reduce", 512, 1024, "nccl", 0.200, 10, 0);
  nccl.set_verified(false);
  v1::OpResult p2p = Result("all_reduce", 512, 1024, "p2p", 0.100, 20, 0);
  p2p.set_verified(false);
  *job.mutable_result()->add_ops() = nccl;
  *job.mutable_result()->add_ops() = p2p;
  const std::string text = FormatCommBench(FoldCommBench(job), {"nccl", "p2p"}, 2, "bf16");
  const std::vector<std::string> row = AwkFields(text, "all_reduce");
  ASSERT_EQ(row.size(), 13u) << text;
  EXPECT_EQ(row[11], "-");
  EXPECT_EQ(row[12], "off");
  // One transport checked and within its tolerance: the row is ok with its error.
  p2p.set_verified(true);
  p2p.set_max_rel_error(4e-3);
  *job.mutable_result()->mutable_ops(1) = p2p;
  const std::vector<std::string> one =
      AwkFields(FormatCommBench(FoldCommBench(job), {"nccl", "p2p"}, 2, "bf16"), "all_reduce");
  ASSERT_EQ(one.size(), 13u);
  EXPECT_EQ(one[11], "4.0e-03");
  EXPECT_EQ(one[12], "ok");
}

// commbench --nodes: per size the dp, flat world and hierarchical world
// all-reduces, of one shape that splits over the whole world, as a valid mesh.
TEST(CommBenchNodesTest, SpecHasDpFlatAndHierarchicalPerSizeOverTheMesh) {
  CommBenchOptions o;
  o.nodes = {"127.0.0.1:7071", "127.0.0.1:7072"};
  o.min_bytes = 64 << 10;
  o.max_bytes = 256 << 10;
  o.iterations = 3;
  auto spec = ParseJobSpec(BuildNodesCommBenchSpec(o, 2));
  ASSERT_TRUE(spec.ok()) << spec.status();
  ValidationLimits limits;
  limits.device_count = 4;  // the mesh's: 2 nodes x 2 devices
  limits.library_algorithms = false;
  ASSERT_TRUE(ValidateJobSpec(*spec, limits).ok()) << ValidateJobSpec(*spec, limits).status();
  EXPECT_EQ(spec->mesh.tp, 2);
  EXPECT_EQ(spec->mesh.dp, 2);
  EXPECT_FALSE(spec->layer_step);
  EXPECT_EQ(spec->iterations, 3);
  EXPECT_TRUE(spec->nodes.empty()) << "the nodes go with the submission";
  std::vector<std::string> ids;
  for (const OpSpec& op : spec->ops) ids.push_back(op.id);
  EXPECT_EQ(ids, (std::vector<std::string>{"dp-65536", "world-65536", "hier-65536", "dp-262144",
                                           "world-262144", "hier-262144"}));
  for (const OpSpec& op : spec->ops) {
    EXPECT_EQ(op.type, OpType::kAllReduce) << op.id;
    EXPECT_EQ(op.mode, OverlapMode::kSerial) << op.id;
    EXPECT_EQ(op.transport, Transport::kNccl) << op.id;
    EXPECT_EQ(op.m % 4, 0) << op.id << ": whole rows for every rank of the world";
  }
  EXPECT_EQ(spec->ops[0].group, OpGroup::kDp);
  EXPECT_EQ(spec->ops[1].group, OpGroup::kWorld);
  EXPECT_EQ(spec->ops[1].algorithm, AllReduceAlgorithm::kDefault);
  EXPECT_EQ(spec->ops[2].group, OpGroup::kWorld);
  EXPECT_EQ(spec->ops[2].algorithm, AllReduceAlgorithm::kHierarchical);
  EXPECT_EQ(spec->ops[3].m * spec->ops[3].n * 2, 256 << 10);
  EXPECT_EQ(spec->ops[4].m, spec->ops[3].m);  // one shape for the three
  EXPECT_EQ(spec->ops[5].n, spec->ops[3].n);

  // One device per node: hierarchical is the flat one, left out.
  EXPECT_EQ(NodesCommBenchVariants(1), (std::vector<std::string>{"dp", "world"}));
  o.devices = {1};
  auto one = ParseJobSpec(BuildNodesCommBenchSpec(o, 1));
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->ops.size(), 4u);
  EXPECT_EQ(one->devices, (std::vector<int>{1}));
}

TEST(CommBenchNodesTest, RefusesOneNodeAndWhatDoesNotCrossDaemons) {
  CommBenchOptions o;
  o.nodes = {"a:1", "b:1"};
  o.collectives = {"all_reduce"};
  o.transports = {"nccl"};
  EXPECT_TRUE(ValidateCommBenchOptions(o).ok());
  CommBenchOptions one = o;
  one.nodes = {"a:1"};
  EXPECT_THAT(std::string(ValidateCommBenchOptions(one).message()),
              HasSubstr("--peers: give at least two daemons"));
  for (auto change : std::vector<std::function<void(CommBenchOptions&)>>{
           [](CommBenchOptions& c) {
             c.collectives = {"all_reduce", "all_gather"};
           },
           [](CommBenchOptions& c) { c.transports = {"p2p"}; },
           [](CommBenchOptions& c) { c.algorithms = {"ring"}; }}) {
    CommBenchOptions c = o;
    change(c);
    const absl::Status s = ValidateCommBenchOptions(c);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(s.message()), HasSubstr("--peers: across daemons"));
  }
}

v1::OpResult NodesResult(const std::string& group, const std::string& algorithm, int64_t m,
                         double ms, double algbw, double busbw, double error) {
  v1::OpResult op = Result("all_reduce", m, 1024, "nccl", ms, busbw, error);
  op.set_algbw_gbps(algbw);
  op.set_group(group);
  op.set_algorithm(algorithm);
  op.set_spans_nodes(true);
  return op;
}

v1::Job NodesJob(const std::string& backend) {
  v1::Job job;
  job.set_id("job-000004");
  job.add_nodes("127.0.0.1:7071");
  job.add_nodes("127.0.0.1:7072");
  v1::JobResult* r = job.mutable_result();
  r->set_backend(backend);
  r->set_mesh_tp(2);
  r->set_mesh_dp(2);
  r->set_inter_node_busbw_gbps(12.5);
  *r->add_ops() = NodesResult("dp", "", 32, 0.100, 0.65, 0.65, 1e-3);
  *r->add_ops() = NodesResult("world", "", 32, 0.300, 0.22, 0.33, 2e-3);
  *r->add_ops() = NodesResult("world", "hierarchical", 32, 0.150, 0.44, 0.66, 3e-3);
  *r->add_ops() = NodesResult("dp", "", 128, 0.200, 1.3, 1.3, 1e-3);
  *r->add_ops() = NodesResult("world", "", 128, 0.400, 0.65, 0.98, 0.5);  // wrong
  *r->add_ops() = NodesResult("world", "hierarchical", 128, 0.500, 0.52, 0.78, 1e-3);
  for (int n = 0; n < 2; ++n) {
    v1::NodeResult* node = r->add_node_results();
    node->set_node(job.nodes(n));
    node->set_node_index(n);
    node->set_part_id(absl::StrCat("job-00000", 7 + n));
    node->set_first_rank(2 * n);
    node->set_ranks(2);
  }
  return job;
}

TEST(CommBenchNodesTest, TableHasEachVariantFlatOverHierarchicalAndTheHostNote) {
  const v1::Job job = NodesJob("host");
  const std::vector<CommBenchRow> rows = FoldNodesCommBench(job);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].bytes, 64 << 10);
  EXPECT_EQ(rows[1].count, 128 * 1024);
  EXPECT_DOUBLE_EQ(rows[0].by_transport.at("world/hierarchical").ms, 0.150);
  EXPECT_DOUBLE_EQ(rows[1].by_transport.at("dp").busbw_gbps, 1.3);

  const std::string text = FormatNodesCommBench(rows, job, 2, "bf16");
  EXPECT_THAT(text, HasSubstr("commbench: all_reduce across 2 nodes x 2 device(s) (mesh tp 2 x "
                              "dp 2), bf16; busbw = algbw x 2(N-1)/N, N = 2 (dp) or 4 (world)"));
  EXPECT_THAT(AwkFields(text, "SIZE"),
              ElementsAre("SIZE", "COUNT", "DP_MS", "DP_ALGBW_GBPS", "DP_BUSBW_GBPS", "WORLD_MS",
                          "WORLD_ALGBW_GBPS", "WORLD_BUSBW_GBPS", "HIER_MS", "HIER_ALGBW_GBPS",
                          "HIER_BUSBW_GBPS", "FLAT/HIER", "MAX_REL_ERR", "VERIFY"));
  EXPECT_THAT(AwkFields(text, "64KiB"),
              ElementsAre("64KiB", "32768", "0.100", "0.650", "0.650", "0.300", "0.220", "0.330",
                          "0.150", "0.440", "0.660", "2.00x", "3.0e-03", "ok"));
  // The flat world all-reduce came back wrong: the row fails with its error.
  EXPECT_THAT(AwkFields(text, "256KiB"),
              ElementsAre("256KiB", "131072", "0.200", "1.300", "1.300", "0.400", "0.650", "0.980",
                          "0.500", "0.520", "0.780", "0.80x", "5.0e-01", "failed"));
  EXPECT_THAT(text, HasSubstr("best busbw: dp 1.300 GB/s (at 256KiB)"));
  EXPECT_THAT(text, HasSubstr("best busbw: world/hierarchical 0.780 GB/s (at 256KiB)"));
  EXPECT_THAT(text, HasSubstr("across nodes: bus bandwidth 12.5 GB/s"));
  EXPECT_THAT(text, HasSubstr("nodes: 0 127.0.0.1:7071 ranks 0-1 (job-000007), 1 "
                              "127.0.0.1:7072 ranks 2-3 (job-000008)"));
  EXPECT_THAT(text, HasSubstr("host backend: the figures mean nothing"));
  EXPECT_THAT(FormatNodesCommBench(rows, NodesJob("cuda"), 2, "bf16"),
              ::testing::Not(HasSubstr("figures mean nothing")));
  EXPECT_THAT(FormatNodesCommBench(rows, job, 1, "bf16"),
              HasSubstr("one device per node: the hierarchical all-reduce is the flat one"));

  v1::GetNodeInfoResponse node;
  node.set_backend("host");
  CommBenchOptions o;
  o.nodes = {job.nodes().begin(), job.nodes().end()};
  const nlohmann::json j = NodesCommBenchJson(job, node, nullptr, rows, o, 2);
  EXPECT_EQ(j["figures_meaningful"], false);
  EXPECT_THAT(j["figures_note"].get<std::string>(), HasSubstr("figures mean nothing"));
  EXPECT_EQ(j["nodes"], nlohmann::json({"127.0.0.1:7071", "127.0.0.1:7072"}));
  EXPECT_EQ(j["mesh"]["dp"], 2);
  EXPECT_EQ(j["node_results"][1]["first_rank"], 2);
  EXPECT_DOUBLE_EQ(j["rows"][0]["variants"]["world/hierarchical"]["ms"].get<double>(), 0.150);
  EXPECT_FALSE(j["rows"][0].contains("transports"));
  node.set_backend("cuda");
  EXPECT_EQ(NodesCommBenchJson(job, node, nullptr, rows, o, 2)["figures_meaningful"], true);
}

}  // namespace
}  // namespace overlap::client
