// Node.WatchNode in-process on the host backend: samples at the interval
// asked for with the devices and the running job, the interval floor, the
// watch slots the streams share with WatchJob, and a reader that never reads
// (bounded, then dropped).
#include <grpcpp/create_channel.h>

#include <chrono>
#include <memory>
#include <thread>

#include "gtest/gtest.h"
#include "server/engine/host/host_engine.h"
#include "server/rpc/rpc_server.h"
#include "server/runner/tuning_cache.h"
#include "tests/server/test_util.h"

namespace overlap::rpc {
namespace {

using ::overlap::testing::FakeRunner;
using ::overlap::testing::TempDir;

constexpr int64_t kGiB = int64_t{1} << 30;

class NodeStreamTest : public ::testing::Test {
 protected:
  // Starts the server with `options` (its listen address is set here).
  void Start(RpcServerOptions options) {
    engine::HostEngineOptions engine_options;
    engine_options.device_count = 2;
    engine_options.device_memory_bytes = 2 * kGiB;
    auto engine = engine::CreateHostEngine(engine_options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = std::move(*engine);
    auto store = jobs::JobStore::Open(dir_.path() + "/state");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
    jobs::JobQueueOptions queue_options;
    queue_options.executor_threads = 2;
    auto queue = jobs::JobQueue::Create(
        store_.get(),
        [this](const jobs::JobRecord& j, const jobs::GraphPtr&, const runner::RunHooks& h) {
          return runner_.Run(j, h);
        },
        queue_options);
    ASSERT_TRUE(queue.ok()) << queue.status();
    queue_ = std::move(*queue);
    auto cache = runner::TuningCache::Open(dir_.path() + "/tuning.db");
    ASSERT_TRUE(cache.ok()) << cache.status();
    tuning_cache_ = std::move(*cache);
    jobs::AdmissionOptions admission;
    admission.bytes_per_device = [](const JobSpec&, int) -> int64_t { return 1 << 20; };
    admission_ = std::make_unique<jobs::Admission>(*engine_, admission);
    node_state_ = std::make_unique<node::NodeState>(*queue_, *engine_, dir_.path() + "/state");
    tuning_ = node::CacheTuningState(tuning_cache_.get(), *engine_);
    options.listen = "unix:" + dir_.path() + "/run/overlapd.sock";
    auto server = RpcServer::Start(
        options, RpcServerParts{*queue_, *admission_, *node_state_, *tuning_, *engine_});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    channel_ = grpc::CreateChannel(server_->listen_address(), grpc::InsecureChannelCredentials());
    jobs_ = v1::Jobs::NewStub(channel_);
    node_ = v1::Node::NewStub(channel_);
  }

  void TearDown() override {
    if (queue_ != nullptr) {
      queue_->StartDrain();
      queue_->CancelRunning("test over");
      queue_->WaitIdle(absl::Seconds(10));
      queue_->Shutdown();
    }
    if (server_ != nullptr) server_->Shutdown(absl::Seconds(1));
  }

  // An open stream; its context is cancelled when it goes.
  struct Stream {
    std::unique_ptr<grpc::ClientContext> context = std::make_unique<grpc::ClientContext>();
    std::unique_ptr<grpc::ClientReader<v1::NodeSample>> reader;
    ~Stream() {
      if (context) context->TryCancel();
      if (reader) (void)reader->Finish();
    }
  };

  std::unique_ptr<Stream> Open(uint32_t interval_ms, v1::Node::Stub* stub = nullptr) {
    auto stream = std::make_unique<Stream>();
    stream->context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(240));
    v1::WatchNodeRequest request;
    request.set_interval_ms(interval_ms);
    stream->reader = (stub ? stub : node_.get())->WatchNode(stream->context.get(), request);
    return stream;
  }

  TempDir dir_;
  FakeRunner runner_;
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<jobs::JobStore> store_;
  std::unique_ptr<jobs::JobQueue> queue_;
  std::unique_ptr<runner::TuningCache> tuning_cache_;
  std::unique_ptr<jobs::Admission> admission_;
  std::unique_ptr<node::NodeState> node_state_;
  std::unique_ptr<node::TuningState> tuning_;
  std::unique_ptr<RpcServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Jobs::Stub> jobs_;
  std::unique_ptr<v1::Node::Stub> node_;
};

TEST_F(NodeStreamTest, SamplesComeWithIncreasingTimesAndEveryDevice) {
  Start({});
  {
    grpc::ClientContext context;
    v1::SubmitJobRequest request;
    request.set_spec(
        "name: \"block\"\ndevices: [1]\niterations: 1\nwarmup: 0\nops:\n"
        "  - {id: a, type: ag_gemm, m: 64, k: 64, n: 64}\n");
    request.set_source_name("test.yaml");
    v1::SubmitJobResponse response;
    ASSERT_TRUE(jobs_->SubmitJob(&context, request, &response).ok());
  }
  auto stream = Open(100);
  v1::NodeSample sample;
  int64_t last_time = 0;
  uint64_t last_sequence = 0;
  bool saw_job = false;
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(stream->reader->Read(&sample)) << "stream ended at sample " << i;
    EXPECT_EQ(sample.interval_ms(), 100u);
    EXPECT_GT(sample.time_ms(), last_time);
    EXPECT_GT(sample.sequence(), last_sequence);
    ASSERT_EQ(sample.devices_size(), 2);
    EXPECT_EQ(sample.devices(0).index(), 0);
    EXPECT_EQ(sample.devices(1).index(), 1);
    last_time = sample.time_ms();
    last_sequence = sample.sequence();
    for (const v1::Job& job : sample.running()) {
      saw_job = saw_job || (job.devices_size() == 1 && job.devices(0) == 1);
    }
  }
  EXPECT_TRUE(saw_job) << "the running job never showed in a sample";
  EXPECT_EQ(server_->node_stream_counters().subscribers, 1);
}

TEST_F(NodeStreamTest, IntervalBelowTheFloorIsRaised) {
  Start({});
  for (uint32_t asked : {0u, 10u}) {
    auto stream = Open(asked);
    v1::NodeSample sample;
    ASSERT_TRUE(stream->reader->Read(&sample));
    EXPECT_EQ(sample.interval_ms(), 100u) << "asked " << asked;
  }
  auto slower = Open(300);
  v1::NodeSample first, second;
  ASSERT_TRUE(slower->reader->Read(&first));
  ASSERT_TRUE(slower->reader->Read(&second));
  EXPECT_EQ(second.interval_ms(), 300u);
  // The sampler takes one every 100 ms: a 300 ms stream gets every third or so.
  EXPECT_GE(second.sequence() - first.sequence(), 2u);
}

TEST_F(NodeStreamTest, StreamsTakeWatchSlots) {
  RpcServerOptions options;
  options.jobs.max_watchers = 2;
  Start(options);
  auto a = Open(100);
  auto b = Open(100);
  v1::NodeSample sample;
  ASSERT_TRUE(a->reader->Read(&sample));
  ASSERT_TRUE(b->reader->Read(&sample));
  auto c = Open(100);
  EXPECT_FALSE(c->reader->Read(&sample));
  grpc::Status refused = c->reader->Finish();
  c->reader.reset();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << refused.error_message();
  // WatchJob shares the cap.
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  v1::WatchJobRequest request;
  request.set_id("job-000001");
  auto watch = jobs_->WatchJob(&context, request);
  v1::JobEvent event;
  EXPECT_FALSE(watch->Read(&event));
  EXPECT_EQ(watch->Finish().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  // A slot given back is free again.
  a.reset();
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  bool reopened = false;
  while (!reopened && absl::Now() < deadline) {
    auto d = Open(100);
    reopened = d->reader->Read(&sample);
    if (!reopened) absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_TRUE(reopened);
}

TEST_F(NodeStreamTest, ReaderThatNeverReadsIsDroppedNotBuffered) {
  RpcServerOptions options;
  options.node_sampler.base_interval = absl::Milliseconds(2);
  options.node_sampler.drop_after_skips = 10;
  Start(options);
  // Without BDP probing the client's window stays at 64 KiB, so that it fills
  // in seconds rather than minutes.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  auto stub = v1::Node::NewStub(grpc::CreateCustomChannel(
      server_->listen_address(), grpc::InsecureChannelCredentials(), args));
  auto stream = Open(2, stub.get());
  // Never read: gRPC's window fills, the daemon's Write blocks, the stream's
  // two samples stay queued and the rest are skipped until it is dropped.
  const absl::Time deadline = absl::Now() + absl::Seconds(120);
  while (server_->node_stream_counters().dropped == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  const NodeSamplerCounters counters = server_->node_stream_counters();
  EXPECT_EQ(counters.dropped, 1);
  EXPECT_LE(counters.max_queued, NodeSampler::kQueueDepth);
  // What was in flight is read, then the stream ends: the daemon cancelled it.
  v1::NodeSample sample;
  while (stream->reader->Read(&sample)) {
  }
  const grpc::Status ended = stream->reader->Finish();
  stream->reader.reset();
  EXPECT_EQ(ended.error_code(), grpc::StatusCode::CANCELLED) << ended.error_message();
  const absl::Time gone = absl::Now() + absl::Seconds(20);
  while (server_->node_stream_counters().subscribers > 0 && absl::Now() < gone) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(server_->node_stream_counters().subscribers, 0);
}

}  // namespace
}  // namespace overlap::rpc
