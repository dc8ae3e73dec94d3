// Node.WatchNode in-process on the host backend: samples at the interval
// asked for with the devices and the running job, the interval floor, the
// watch slots the streams share with WatchJob, and a reader that never reads
// (bounded, then dropped).
#include <grpcpp/create_channel.h>

#include <chrono>
#include <memory>
#include <thread>

#include "gtest/gtest.h"
#include "server/rpc/rpc_server.h"
#include "tests/server/in_process_server.h"

namespace overlap::rpc {
namespace {

using ::overlap::testing::InProcessServerTest;

class NodeStreamTest : public InProcessServerTest {
 protected:
  // Starts the server with `options`; each job needs 1 MiB a device.
  void Start(RpcServerOptions options) {
    jobs::AdmissionOptions admission;
    admission.bytes_per_device = [](const JobSpec&, int) -> int64_t { return 1 << 20; };
    StartServer(std::move(options), std::move(admission));
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
