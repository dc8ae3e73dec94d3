// The engine of a part of a job spanning daemons, without daemons: one host
// engine per "node" in this process, each wrapped in a SpanningEngine, all
// meeting in one in-memory store, each running the whole job on a thread of
// its own as its daemon would. Every op is verified against float64 on every
// node's own ranks.
#include "server/cluster/spanning_engine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "common/graph_parser.h"
#include "server/gloo/rendezvous_store.h"
#include "server/jobs/admission.h"
#include "server/runner/job_runner.h"
#include "tests/host_engine_util.h"
#include "tests/job_result_util.h"
#include "tests/slow_engine.h"

namespace overlap::cluster {
namespace {

using ::testing::HasSubstr;

struct NodeRun {
  std::unique_ptr<engine::Engine> host;
  absl::StatusOr<v1::JobResult> result = absl::UnknownError("not run");
};

// What a coordinator decides for `spec` over `world` host ranks.
ops::DecidedSchedules Decide(const JobSpec& spec, int world) {
  absl::StatusOr<ops::DecidedSchedules> decided =
      ops::DecideSpanningSchedules(spec, world, /*library_algorithms=*/false);
  EXPECT_TRUE(decided.ok()) << decided.status();
  return decided.ok() ? *decided : ops::DecidedSchedules();
}

// Runs `graph` over `nodes` nodes of `devices` devices each, every op as
// `decided` (empty: as a coordinator would decide); every node's result.
// `slow_node`'s first device runs each GEMM 5 ms late (-1: none).
std::vector<NodeRun> RunOverNodes(const std::string& graph, int nodes, int devices,
                                  const std::string& job_key,
                                  absl::Duration timeout = absl::Seconds(20),
                                  ops::DecidedSchedules decided = {}, int slow_node = -1) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(graph);
  EXPECT_TRUE(spec.ok()) << spec.status();
  spec->timeline = false;
  if (decided.empty()) decided = Decide(*spec, nodes * devices);
  gloo_group::InMemoryRendezvousStore store;
  std::vector<NodeRun> runs(nodes);
  std::vector<std::thread> threads;
  for (int n = 0; n < nodes; ++n) {
    runs[n].host = CheckedHostEngine(devices);
    threads.emplace_back([&, n] {
      SpanningOptions options;
      options.placement.nodes = nodes;
      options.placement.node_index = n;
      options.placement.local_devices.resize(devices);
      std::iota(options.placement.local_devices.begin(), options.placement.local_devices.end(), 0);
      options.job_key = job_key;
      options.timeout = timeout;
      SlowEngine slow(*runs[n].host, 0, absl::Milliseconds(n == slow_node ? 5 : 0),
                      absl::ZeroDuration());
      SpanningEngine engine(slow, store, options);
      std::vector<int> global(nodes * devices);
      std::iota(global.begin(), global.end(), 0);
      runs[n].result = RunJobResult(engine, *spec, global, {}, runner::ScheduleSource{&decided});
    });
  }
  for (std::thread& t : threads) t.join();
  return runs;
}

constexpr char kMeshLayer[] = R"(mesh: {tp: 2, dp: 2}
iterations: 2
warmup: 1
ops:
  - {id: fc1, type: ag_gemm, m: 128, k: 64, n: 64}
  - {id: fc2, type: gemm_rs, m: 128, k: 64, n: 64, after: [fc1]}
  - {id: out, type: gemm_ar, m: 64, k: 64, n: 32, group: dp, after: [fc2]}
  - {id: grads, type: all_reduce, m: 64, n: 64, group: dp, after: [out]}
  - {id: world, type: all_reduce, m: 64, n: 32, group: world}
  - {id: hier, type: all_reduce, m: 64, n: 32, group: world, algorithm: hierarchical}
  - {id: gather, type: all_gather, m: 64, n: 32, group: dp}
)";

TEST(SpanningEngineTest, AMeshOverTwoNodesRunsAndEveryNodeVerifiesItsRanks) {
  std::vector<NodeRun> runs = RunOverNodes(kMeshLayer, 2, 2, "mesh");
  for (int n = 0; n < 2; ++n) {
    ASSERT_TRUE(runs[n].result.ok()) << "node " << n << ": " << runs[n].result.status();
    ASSERT_EQ(runs[n].result->ops_size(), 7);
    for (const v1::OpResult& op : runs[n].result->ops()) {
      EXPECT_TRUE(op.verified()) << op.id();
      EXPECT_LE(op.max_rel_error(), op.tolerance()) << op.id();
      // Through collectives only: the rule, never p2p.
      EXPECT_NE(op.transport(), "p2p") << op.id();
      EXPECT_NE(op.mode(), "ring") << op.id();
    }
    EXPECT_TRUE(runs[n].result->has_layer_step()) << runs[n].result->layer_note();
  }
}

TEST(SpanningEngineTest, ThreeNodesOfOneDeviceRunTheWorldAsOneGroup) {
  std::vector<NodeRun> runs = RunOverNodes(R"(iterations: 2
warmup: 1
dtype: fp32
ops:
  - {id: ar, type: all_reduce, m: 96, n: 48}
  - {id: rs, type: reduce_scatter, m: 96, n: 48}
  - {id: ag, type: ag_gemm, m: 96, k: 32, n: 48, mode: chunked}
)",
                                           3, 1, "three");
  for (int n = 0; n < 3; ++n) {
    ASSERT_TRUE(runs[n].result.ok()) << "node " << n << ": " << runs[n].result.status();
    for (const v1::OpResult& op : runs[n].result->ops()) EXPECT_TRUE(op.verified()) << op.id();
  }
}

TEST(SpanningEngineTest, ANodeThatNeverComesFailsTheOthersWithinTheTimeout) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(R"(iterations: 2
warmup: 1
ops:
  - {id: ar, type: all_reduce, m: 64, n: 64}
)");
  ASSERT_TRUE(spec.ok());
  spec->timeline = false;
  gloo_group::InMemoryRendezvousStore store;
  std::unique_ptr<engine::Engine> host = CheckedHostEngine(1);
  SpanningOptions options;
  options.placement = {2, 0, {0}};
  options.job_key = "alone";
  options.timeout = absl::Seconds(1);
  SpanningEngine engine(*host, store, options);
  const ops::DecidedSchedules decided = Decide(*spec, 2);
  const absl::Time start = absl::Now();
  absl::StatusOr<v1::JobResult> result =
      RunJobResult(engine, *spec, {0, 1}, {}, runner::ScheduleSource{&decided});
  EXPECT_FALSE(result.ok());
  EXPECT_NE(result.status().code(), absl::StatusCode::kFailedPrecondition) << result.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(15));
}

// A part runs what its coordinator decided, even where the rule would have
// chosen otherwise (chunked for both GEMM ops), and decides nothing itself.
TEST(SpanningEngineTest, EveryNodeRunsTheSchedulesItWasSentAndNoneOfItsOwn) {
  constexpr char kGraph[] = R"(iterations: 2
warmup: 1
dtype: fp32
ops:
  - {id: fc1, type: ag_gemm, m: 128, k: 32, n: 64}
  - {id: fc2, type: gemm_rs, m: 128, k: 64, n: 32, after: [fc1]}
)";
  absl::StatusOr<JobSpec> spec = ParseJobSpec(kGraph);
  ASSERT_TRUE(spec.ok());
  ops::DecidedSchedules decided = Decide(*spec, 2);
  ASSERT_EQ(decided.at("fc1").mode, OverlapMode::kChunked);
  decided["fc1"] = ops::Schedule{OverlapMode::kBulk, 1, Transport::kNccl};
  decided["fc2"] = ops::Schedule{OverlapMode::kSerial, 1, Transport::kNccl};
  std::vector<NodeRun> runs = RunOverNodes(kGraph, 2, 1, "decided", absl::Seconds(20), decided);
  for (int n = 0; n < 2; ++n) {
    ASSERT_TRUE(runs[n].result.ok()) << "node " << n << ": " << runs[n].result.status();
    ASSERT_EQ(runs[n].result->ops_size(), 2);
    EXPECT_EQ(runs[n].result->ops(0).schedule(), "bulk/nccl");
    EXPECT_EQ(runs[n].result->ops(1).schedule(), "serial/nccl");
    for (const v1::OpResult& op : runs[n].result->ops()) {
      EXPECT_TRUE(op.verified()) << op.id();
      EXPECT_THAT(op.auto_reason(), HasSubstr("decided by the coordinator")) << op.id();
      EXPECT_EQ(op.candidates_size(), 0) << op.id();
    }
  }

  // Without decisions a part refuses to choose, before anything runs.
  std::unique_ptr<engine::Engine> host = CheckedHostEngine(1);
  gloo_group::InMemoryRendezvousStore store;
  SpanningOptions options;
  options.placement = {2, 0, {0}};
  options.job_key = "undecided";
  options.timeout = absl::Seconds(1);
  SpanningEngine engine(*host, store, options);
  spec->timeline = false;
  absl::StatusOr<v1::JobResult> undecided = RunJobResult(engine, *spec, {0, 1}, {}, nullptr);
  EXPECT_EQ(undecided.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(undecided.status().message(), HasSubstr("schedules its coordinator decided"));
}

// scheduler: dynamic over two nodes, one of them slow (its first device's
// GEMMs 5 ms late): each node dispatches its own ranks' gradient chunks in the
// one order and every node verifies its ranks. The fast node's chunks wait for
// their slow peers inside the collectives (a lane runs its chunks in order, so
// a later gradient's first chunk waits behind them too): the bound may be
// missed there, and the report gives each delay, met or not.
TEST(SpanningEngineTest, GradientsDispatchedAtRunTimeWithASlowNode) {
  constexpr char kBackward[] = R"(mesh: {tp: 2, dp: 2}
iterations: 2
warmup: 1
dtype: f32
scheduler: dynamic
chunk_kib: 16
bucket_mib: 0
ops:
  - {id: dgrad, type: gemm_rs, m: 128, k: 256, n: 128}
  - {id: wgrad, type: gemm, m: 128, k: 128, n: 256, after: [dgrad]}
  - {id: grads, type: all_reduce, m: 128, n: 128, group: dp, input: wgrad}
  - {id: next_dgrad, type: ag_gemm, m: 128, k: 128, n: 256, after: [dgrad]}
  - {id: next_wgrad, type: gemm, m: 128, k: 128, n: 256, after: [next_dgrad]}
  - {id: next_grads, type: all_reduce, m: 128, n: 128, group: dp, input: next_wgrad}
)";
  std::vector<NodeRun> runs =
      RunOverNodes(kBackward, 2, 2, "dynamic-slow", absl::Seconds(20), {}, /*slow_node=*/1);
  for (int n = 0; n < 2; ++n) {
    ASSERT_TRUE(runs[n].result.ok()) << "node " << n << ": " << runs[n].result.status();
    const v1::JobResult& r = *runs[n].result;
    for (const v1::OpResult& op : r.ops()) EXPECT_TRUE(op.verified()) << op.id();
    EXPECT_EQ(r.layer_scheduler(), "dynamic");
    EXPECT_EQ(r.layer_chains_size(), 2);
    for (const v1::LayerChainCheck& c : r.layer_chains()) {
      EXPECT_LE(c.max_rel_error(), c.tolerance()) << c.chain();
    }
    int dispatched = 0;
    for (const v1::LayerDeferral& d : r.layer_deferrals()) {
      if (!d.dispatched()) continue;
      ++dispatched;
      EXPECT_EQ(d.pieces(), 4) << d.op();  // 64 KiB in 16 KiB chunks
      EXPECT_LE(d.ready_ms(), d.first_chunk_ms()) << d.op();
      EXPECT_LE(d.first_chunk_ms(), d.finished_ms()) << d.op();
      EXPECT_GT(d.worst_delay_ms(), 0) << d.op();
      EXPECT_EQ(d.bound_ms(), 50) << d.op();
    }
    EXPECT_EQ(dispatched, 2);
    EXPECT_EQ(r.lane_figures_size(), 2);  // this node's own devices
  }
}

// The deferred lane's order across nodes (server/runner/dynamic_step.h): each
// node issues its own ranks' deferred all-reduces, which pair up on the
// lane's communicator by order. In the same order on both nodes they sum
// correctly; in a wrong order (what a dispatcher deciding by local timing
// would do) they fail within the transport's timeout instead of hanging.
absl::Status DeferredAllReducesOverTwoNodes(bool same_order, std::vector<float>* sums) {
  gloo_group::InMemoryRendezvousStore store;
  std::vector<absl::Status> status(2);
  std::vector<std::unique_ptr<engine::Engine>> hosts;
  for (int n = 0; n < 2; ++n) hosts.push_back(CheckedHostEngine(1));
  std::vector<std::thread> threads;
  sums->assign(2, 0);
  for (int n = 0; n < 2; ++n) {
    threads.emplace_back([&, n] {
      SpanningOptions options;
      options.placement = {2, n, {0}};
      options.job_key = same_order ? "lane-order" : "lane-wrong-order";
      options.timeout = absl::Seconds(1);
      SpanningEngine engine(*hosts[n], store, options);
      const int mine = n;  // the global device this node holds
      std::vector<engine::CollectiveArgs> collectives(2);
      std::vector<engine::BufferId> buffers;
      for (int c = 0; c < 2; ++c) {
        const size_t count = c == 0 ? 64 : 128;  // the two gradients differ in size
        collectives[c].dtype = DType::kF32;
        collectives[c].count = count;
        collectives[c].channel = engine::kDeferredLaneChannel;
        for (int device = 0; device < 2; ++device) {
          absl::StatusOr<engine::BufferId> b = engine.Allocate(device, count * sizeof(float));
          if (!b.ok()) {
            status[n] = b.status();
            return;
          }
          buffers.push_back(*b);
          const engine::BufferRef ref{*b, 0, count * sizeof(float)};
          if (device == mine) {
            std::vector<float> ones(count, static_cast<float>(n + 1));
            status[n].Update(engine.CopyFromHost(ref, device, ones.data()));
          }
          collectives[c].ranks.push_back(engine::RankBuffers{
              device, engine.GetStream(device, engine::StreamRole::kDeferred), ref, ref});
        }
      }
      // Node 1 issues them the other way round when the order is wrong.
      const bool reversed = !same_order && n == 1;
      for (int i = 0; i < 2 && status[n].ok(); ++i) {
        status[n].Update(engine.AllReduce(collectives[reversed ? 1 - i : i]));
      }
      status[n].Update(engine.Synchronize({0, 1}));
      if (status[n].ok()) {
        std::vector<float> out(128);
        status[n].Update(engine.CopyToHost(out.data(), collectives[1].ranks[mine].recv, mine));
        (*sums)[n] = out[127];
      }
      for (engine::BufferId b : buffers) engine.Free(b);
    });
  }
  for (std::thread& t : threads) t.join();
  return status[0].ok() ? status[1] : status[0];
}

TEST(SpanningEngineTest, DeferredLaneCollectivesInOneOrderSumAndInAWrongOrderTimeOut) {
  std::vector<float> sums;
  ASSERT_TRUE(DeferredAllReducesOverTwoNodes(/*same_order=*/true, &sums).ok());
  EXPECT_EQ(sums, (std::vector<float>{3, 3}));  // 1 + 2 on both nodes

  const absl::Time start = absl::Now();
  const absl::Status wrong = DeferredAllReducesOverTwoNodes(/*same_order=*/false, &sums);
  EXPECT_FALSE(wrong.ok());
  EXPECT_LT(absl::Now() - start, absl::Seconds(30)) << "a wrong order must fail, not hang";
}

TEST(SpanningEngineTest, PeerMemoryAcrossNodesIsRefusedBeforeAnythingRuns) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(R"(mesh: {tp: 2, dp: 2}
ops:
  - {id: grads, type: all_reduce, m: 64, n: 64, group: dp, transport: p2p}
)");
  ASSERT_TRUE(spec.ok());
  absl::Status refused = jobs::CheckCrossNodeSchedules(*spec, 4, 2);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), HasSubstr("transport p2p needs the peer's memory"));
  // Within a node the same op is fine: tp 2 x dp 2 on one node of four.
  EXPECT_TRUE(jobs::CheckCrossNodeSchedules(*spec, 4, 4).ok());
  absl::StatusOr<JobSpec> ring = ParseJobSpec(R"(ops:
  - {id: fc1, type: ag_gemm, m: 128, k: 64, n: 64, mode: ring}
)");
  ASSERT_TRUE(ring.ok());
  EXPECT_THAT(jobs::CheckCrossNodeSchedules(*ring, 2, 1).message(), HasSubstr("mode ring"));
}

}  // namespace
}  // namespace overlap::cluster
