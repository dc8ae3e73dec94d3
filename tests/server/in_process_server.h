// The daemon's gRPC server in-process, for the server tests that call it as a
// client does: a host engine of two 2 GiB devices and a real job store, the
// job queue with a FakeRunner (so that jobs block or finish on demand), and
// the generated client stubs over a unix socket in a temporary directory.
#pragma once

#include <grpcpp/create_channel.h>

#include <cstdint>
#include <memory>
#include <utility>

#include "gtest/gtest.h"
#include "server/engine/host/host_engine.h"
#include "server/rpc/rpc_server.h"
#include "server/runner/tuning_cache.h"
#include "tests/server/test_util.h"

namespace overlap::testing {

class InProcessServerTest : public ::testing::Test {
 protected:
  static constexpr int64_t kDeviceMemoryBytes = int64_t{2} << 30;

  // Starts the server with `options` (its listen address is set here), its
  // admission with `admission`.
  void StartServer(rpc::RpcServerOptions options, jobs::AdmissionOptions admission) {
    engine::HostEngineOptions engine_options;
    engine_options.device_count = 2;
    engine_options.device_memory_bytes = kDeviceMemoryBytes;
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
    admission_ = std::make_unique<jobs::Admission>(*engine_, std::move(admission));
    node_state_ = std::make_unique<node::NodeState>(*queue_, *engine_, dir_.path() + "/state");
    tuning_ = node::CacheTuningState(tuning_cache_.get(), *engine_);
    options.listen = "unix:" + dir_.path() + "/run/overlapd.sock";
    auto server = rpc::RpcServer::Start(
        options, rpc::RpcServerParts{*queue_, *admission_, *node_state_, *tuning_, *engine_});
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

  // In the order they are built, so that each goes before what it refers to.
  TempDir dir_;
  FakeRunner runner_;
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<jobs::JobStore> store_;
  std::unique_ptr<jobs::JobQueue> queue_;
  std::unique_ptr<runner::TuningCache> tuning_cache_;
  std::unique_ptr<jobs::Admission> admission_;
  std::unique_ptr<node::NodeState> node_state_;
  std::unique_ptr<node::TuningState> tuning_;
  std::unique_ptr<rpc::RpcServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Jobs::Stub> jobs_;
  std::unique_ptr<v1::Node::Stub> node_;
};

}  // namespace overlap::testing
