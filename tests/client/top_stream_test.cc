// `overlapctl top` against fake daemons in-process: one that streams
// (WatchNode) and one older than the stream (UNIMPLEMENTED), which top asks
// every interval instead; the JSON of a sample is the same either way.
#include <grpcpp/server_builder.h>

#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "client/views/top.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "overlap/v1/overlap.grpc.pb.h"

namespace overlap::client {
namespace {

constexpr int64_t kTimeMs = 1796000000000;

v1::Device DeviceAt(int index) {
  v1::Device d;
  d.set_index(index);
  d.set_memory_used_bytes(1024 * (index + 1));
  return d;
}

v1::Job RunningOn(int device) {
  v1::Job job;
  job.set_id("job-000007");
  job.add_devices(device);
  job.mutable_progress()->set_op_id("a");
  job.mutable_progress()->set_phase("timed");
  return job;
}

// Streams `samples` samples, or (old) answers WatchNode UNIMPLEMENTED.
class FakeNode final : public v1::Node::Service {
 public:
  explicit FakeNode(bool old) : old_(old) {}
  grpc::Status GetNodeInfo(grpc::ServerContext*, const v1::GetNodeInfoRequest*,
                           v1::GetNodeInfoResponse* response) override {
    ++polls;
    *response->add_devices() = DeviceAt(0);
    *response->add_devices() = DeviceAt(1);
    return grpc::Status::OK;
  }
  grpc::Status WatchNode(grpc::ServerContext* context, const v1::WatchNodeRequest* request,
                         grpc::ServerWriter<v1::NodeSample>* writer) override {
    if (old_) return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "");
    asked_ms = static_cast<int>(request->interval_ms());
    for (int i = 0; i < 100 && !context->IsCancelled(); ++i) {
      v1::NodeSample sample;
      sample.set_time_ms(kTimeMs + 100 * i);
      *sample.add_devices() = DeviceAt(0);
      *sample.add_devices() = DeviceAt(1);
      *sample.add_running() = RunningOn(1);
      if (!writer->Write(sample)) break;
    }
    return grpc::Status::OK;
  }
  std::atomic<int> polls{0};
  std::atomic<int> asked_ms{-1};

 private:
  const bool old_;
};

class FakeJobs final : public v1::Jobs::Service {
 public:
  grpc::Status ListJobs(grpc::ServerContext*, const v1::ListJobsRequest*,
                        v1::ListJobsResponse* response) override {
    *response->add_jobs() = RunningOn(1);
    return grpc::Status::OK;
  }
};

struct Served {
  explicit Served(bool old) : node(old) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&node);
    builder.RegisterService(&jobs);
    server = builder.BuildAndStart();
  }
  ~Served() { server->Shutdown(std::chrono::system_clock::now()); }
  FakeNode node;
  FakeJobs jobs;
  int port = 0;
  std::unique_ptr<grpc::Server> server;
};

std::vector<nlohmann::json> Top(int port, int count) {
  auto client = DaemonClient::Create("127.0.0.1:" + std::to_string(port));
  EXPECT_TRUE(client.ok()) << client.status();
  std::ostringstream out, err;
  TopOptions options;
  options.interval_s = 0.2;
  options.count = count;
  EXPECT_EQ(RunTop(**client, options, /*json=*/true, out, err), 0) << err.str();
  std::vector<nlohmann::json> samples;
  for (absl::string_view line : absl::StrSplit(out.str(), '\n', absl::SkipEmpty())) {
    samples.push_back(nlohmann::json::parse(line));
  }
  return samples;
}

TEST(TopStreamTest, StreamedSamplesAreNotPolled) {
  Served daemon(/*old=*/false);
  ASSERT_NE(daemon.server, nullptr);
  const std::vector<nlohmann::json> samples = Top(daemon.port, 3);
  ASSERT_EQ(samples.size(), 3u);
  EXPECT_EQ(daemon.node.polls.load(), 0);
  EXPECT_EQ(daemon.node.asked_ms.load(), 200);
  EXPECT_EQ(samples[0]["time_ms"], kTimeMs);
  EXPECT_EQ(samples[2]["time_ms"], kTimeMs + 200);
  ASSERT_EQ(samples[0]["devices"].size(), 2u);
  EXPECT_EQ(samples[0]["devices"][1]["job"], "job-000007");
  EXPECT_EQ(samples[0]["devices"][1]["op"], "a");
  EXPECT_EQ(samples[0]["devices"][0]["job"], nullptr);
}

TEST(TopStreamTest, OlderDaemonIsPolledWithTheSameShape) {
  Served daemon(/*old=*/true);
  ASSERT_NE(daemon.server, nullptr);
  const std::vector<nlohmann::json> samples = Top(daemon.port, 2);
  ASSERT_EQ(samples.size(), 2u);
  EXPECT_EQ(daemon.node.polls.load(), 2);
  ASSERT_EQ(samples[1]["devices"].size(), 2u);
  EXPECT_EQ(samples[1]["devices"][1]["job"], "job-000007");
  EXPECT_EQ(samples[1]["devices"][1]["memory_used_bytes"], 2048);
}

}  // namespace
}  // namespace overlap::client
