// `overlapctl pin`: the job's own graph back, each op set to the schedule it ran.
#include "client/jobs/pin.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "common/graph_parser.h"
#include "common/yaml_util.h"

namespace overlap::client {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

v1::OpResult Ran(const std::string& id, const std::string& mode, int chunks,
                 const std::string& transport) {
  v1::OpResult r;
  r.set_id(id);
  r.set_mode(mode);
  r.set_chunks(chunks);
  r.set_transport(transport);
  r.set_tp(2);
  return r;
}

v1::Job Finished(const std::string& spec) {
  v1::Job job;
  job.set_id("job-000007");
  job.set_name("block");
  job.set_state(v1::SUCCEEDED);
  job.set_spec(spec);
  job.mutable_result()->set_gpu("NVIDIA H200");
  return job;
}

constexpr char kGraph[] = R"(# my layer
name: block
devices: [0, 1]
ops:
  - {id: fc1, type: ag_gemm, m: 8192, k: 8192, n: 28672, mode: auto, chunks: 4}
  - id: fc2
    type: gemm_rs
    m: 8192
    k: 28672
    n: 8192
    after: [fc1]
  - {id: wgrad, type: gemm, m: 8192, k: 8192, n: 28672}
  - {id: grads, type: all_reduce, m: 8192, n: 8192, transport: auto}
)";

TEST(PinTest, EveryOpGetsTheScheduleItRan) {
  v1::Job job = Finished(kGraph);
  *job.mutable_result()->add_ops() = Ran("fc1", "ring", 4, "p2p");
  *job.mutable_result()->add_ops() = Ran("fc2", "bulk", 1, "p2p");
  *job.mutable_result()->add_ops() = Ran("wgrad", "serial", 1, "none");
  *job.mutable_result()->add_ops() = Ran("grads", "serial", 1, "nccl");
  auto pinned = PinnedGraph(job);
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  EXPECT_THAT(*pinned, StartsWith("# pinned from job-000007 (block): every op runs the schedule "
                                  "it ran there, tp = 2, on NVIDIA H200\n"));
  auto spec = ParseJobSpec(*pinned, "pinned.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status() << "\n" << *pinned;
  EXPECT_EQ(spec->name, "block");
  EXPECT_EQ(spec->devices, (std::vector<int>{0, 1}));
  ASSERT_EQ(spec->ops.size(), 4u);
  EXPECT_EQ(spec->ops[0].mode, OverlapMode::kRing);
  EXPECT_EQ(spec->ops[0].chunks, 4);
  EXPECT_EQ(spec->ops[0].transport, Transport::kP2p);
  EXPECT_EQ(spec->ops[1].mode, OverlapMode::kBulk);
  EXPECT_EQ(spec->ops[1].chunks, 0) << "bulk takes no chunks";
  EXPECT_EQ(spec->ops[1].transport, Transport::kP2p);
  EXPECT_EQ(spec->ops[1].after, (std::vector<std::string>{"fc1"}));
  EXPECT_EQ(spec->ops[2].transport, Transport::kNone);
  EXPECT_EQ(spec->ops[3].mode, OverlapMode::kSerial);
  EXPECT_EQ(spec->ops[3].transport, Transport::kNccl);
  EXPECT_EQ(spec->ops[3].algorithm, AllReduceAlgorithm::kDefault);
}

TEST(PinTest, AnAllReducesAlgorithmIsPinned) {
  v1::Job job = Finished(kGraph);
  v1::OpResult grads = Ran("grads", "serial", 1, "p2p");
  grads.set_algorithm("ring");
  *job.mutable_result()->add_ops() = grads;
  auto pinned = PinnedGraph(job);
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  auto spec = ParseJobSpec(*pinned, "pinned.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status() << "\n" << *pinned;
  EXPECT_EQ(spec->ops[3].transport, Transport::kP2p);
  EXPECT_EQ(spec->ops[3].algorithm, AllReduceAlgorithm::kRing);

  // algorithm: auto that chose the transport's own leaves no algorithm behind.
  v1::Job chose_default =
      Finished("name: g\nops:\n  - {id: grads, type: all_reduce, m: 64, n: 8, algorithm: auto}\n");
  *chose_default.mutable_result()->add_ops() = Ran("grads", "serial", 1, "nccl");
  pinned = PinnedGraph(chose_default);
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  spec = ParseJobSpec(*pinned, "pinned.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status() << "\n" << *pinned;
  EXPECT_EQ(spec->ops[0].algorithm, AllReduceAlgorithm::kDefault);
  EXPECT_THAT(*pinned, ::testing::Not(HasSubstr("algorithm")));
}

TEST(PinTest, OpsThatNeverRanStayAsWrittenAndAreNamed) {
  v1::Job job = Finished(kGraph);
  job.set_state(v1::FAILED);
  *job.mutable_result()->add_ops() = Ran("fc1", "chunked", 2, "nccl");
  auto pinned = PinnedGraph(job);
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  EXPECT_THAT(*pinned, HasSubstr("\n# not pinned (no result: the job ended before them): fc2, "
                                 "wgrad, grads\n"));
  auto spec = ParseJobSpec(*pinned, "pinned.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->ops[0].mode, OverlapMode::kChunked);
  EXPECT_EQ(spec->ops[0].chunks, 2);
  EXPECT_EQ(spec->ops[1].mode, OverlapMode::kAuto);
  EXPECT_EQ(spec->ops[3].transport, Transport::kAuto);
}

TEST(PinTest, AJobWithoutResultsHasNothingToPin) {
  v1::Job job = Finished(kGraph);
  job.set_state(v1::QUEUED);
  auto pinned = PinnedGraph(job);
  EXPECT_EQ(pinned.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(pinned.status().message()), HasSubstr("nothing to pin (it is QUEUED)"));
}

// yaml-cpp reads a mapping as a key but cannot read back what it writes of
// one: such a graph is refused, never pinned into text that does not parse.
TEST(PinTest, AGraphWithAMappingAsAKeyIsRefused) {
  for (const char* spec : {"ops:\n- {}\n{}", "ops:\n  - {id: fc1, {a: 1}: 2}\n"}) {
    v1::Job job = Finished(spec);
    *job.mutable_result()->add_ops() = Ran("fc1", "bulk", 1, "nccl");
    EXPECT_EQ(PinnedGraph(job).status().code(), absl::StatusCode::kInvalidArgument) << spec;
  }
}

TEST(PinTest, JsonGraphsArePinnedToo) {
  v1::Job job = Finished(
      R"({"name": "j", "ops": [{"id": "a", "type": "gemm_ar", "m": 256, "k": 128, "n": 64}]})");
  *job.mutable_result()->add_ops() = Ran("a", "ring", 8, "p2p");
  auto pinned = PinnedGraph(job);
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  auto spec = ParseJobSpec(*pinned, "pinned.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status() << "\n" << *pinned;
  EXPECT_EQ(spec->ops[0].mode, OverlapMode::kRing);
  EXPECT_EQ(spec->ops[0].chunks, 8);
}

// yaml-cpp writes a carriage return in a value as the raw byte, which the
// daemon's parser refuses, and "--- x" as a top-level key plain, where it is a
// document marker (the pinned_graph fuzzer): such scalars are written quoted
// and read back as they were.
TEST(PinTest, ScalarsYamlCppWouldWriteUnreadablyAreQuoted) {
  v1::Job job = Finished(
      "name: \"a\\rb\"\n\"--- x\": 1\n\"... y\": [\"\\r\"]\n"
      "ops:\n  - {id: \"fc1\\r\", type: gemm, \"k\\r\": \"v\\r\\n\"}\n");
  *job.mutable_result()->add_ops() = Ran("fc1\r", "bulk", 1, "nccl");
  auto pinned = PinnedGraph(job);
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  auto root = yaml_util::LoadDocument(*pinned, "pinned.yaml");
  ASSERT_TRUE(root.ok()) << root.status() << "\n" << *pinned;
  EXPECT_EQ((*root)["name"].Scalar(), "a\rb");
  EXPECT_EQ((*root)["--- x"].Scalar(), "1");
  EXPECT_EQ((*root)["... y"][0].Scalar(), "\r");
  const YAML::Node op = (*root)["ops"][0];
  EXPECT_EQ(op["id"].Scalar(), "fc1\r");
  EXPECT_EQ(op["k\r"].Scalar(), "v\r\n");
  EXPECT_EQ(op["mode"].Scalar(), "bulk");
  EXPECT_EQ(op["transport"].Scalar(), "nccl");
}

// Pinning adds a mode, chunks and a transport to each op: a graph of many
// small ops within the parser's 200,000 values passes them once pinned, and
// is refused rather than pinned into text no daemon reads.
TEST(PinTest, APinPastTheParsersValueLimitIsRefused) {
  std::string spec = "ops:\n";
  for (int i = 0; i < 25000; ++i) spec += "- {id: a}\n";
  v1::Job job = Finished(spec);
  *job.mutable_result()->add_ops() = Ran("a", "chunked", 4, "p2p");
  auto pinned = PinnedGraph(job);
  EXPECT_EQ(pinned.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(pinned.status().message()),
              HasSubstr("job-000007: its pinned graph would not be read back: "));
  EXPECT_THAT(std::string(pinned.status().message()), HasSubstr("more than 200000 values"));

  // A tenth as many ops pins, and reads back.
  spec = "ops:\n";
  for (int i = 0; i < 2500; ++i) spec += "- {id: a}\n";
  job.set_spec(spec);
  pinned = PinnedGraph(job);
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  EXPECT_TRUE(yaml_util::LoadDocument(*pinned, "pinned.yaml").ok());
}

}  // namespace
}  // namespace overlap::client
