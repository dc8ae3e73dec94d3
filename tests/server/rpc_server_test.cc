// The gRPC server in-process: a real host engine and job store, the job queue
// with a fake runner (so that jobs block or finish on demand), and the generated
// client stubs over a unix socket.
#include "server/rpc/rpc_server.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>
#include <grpcpp/support/byte_buffer.h>
#include <sys/stat.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "overlap_git_commit.h"
#include "server/engine/host/host_engine.h"
#include "server/net/listen_address.h"
#include "server/rpc/jobs_service.h"
#include "tests/forwarding_engine.h"
#include "tests/server/in_process_server.h"
#include "tests/tuning_key_util.h"

namespace overlap::rpc {
namespace {

using ::overlap::testing::InProcessServerTest;
using ::overlap::testing::TempDir;

constexpr int64_t kGiB = int64_t{1} << 30;

std::string Spec(const std::string& name, const std::string& devices = "[0]") {
  return "name: \"" + name + "\"\ndevices: " + devices +
         "\niterations: 1\nwarmup: 0\nops:\n  - {id: a, type: ag_gemm, m: 64, k: 64, n: 64}\n";
}

// grpc.health.v1.Health/Check without the generated health stub: the request
// is field 1 (service, string), the response field 1 (status, enum).
int HealthStatus(grpc::Channel* channel, const std::string& service) {
  std::string request = {'\x0a', static_cast<char>(service.size())};
  request += service;
  grpc::Slice slice(request);
  grpc::ByteBuffer send(&slice, 1), receive;
  grpc::GenericStub stub(channel->shared_from_this());
  grpc::ClientContext context;
  grpc::Status status;
  bool done = false;
  std::mutex mu;
  std::condition_variable cv;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &send, &receive,
                 [&](grpc::Status s) {
                   std::lock_guard<std::mutex> lock(mu);
                   status = s;
                   done = true;
                   cv.notify_one();
                 });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  if (!status.ok()) return -static_cast<int>(status.error_code());
  std::vector<grpc::Slice> slices;
  (void)receive.Dump(&slices);
  std::string bytes;
  for (const grpc::Slice& s : slices)
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  if (bytes.empty()) return 0;  // UNKNOWN is the default value: not sent
  return bytes.size() == 2 && bytes[0] == '\x08' ? bytes[1] : -100;
}

class RpcServerTest : public InProcessServerTest {
 protected:
  void SetUp() override {
    jobs::AdmissionOptions admission;
    admission.max_spec_bytes = 4096;
    // Jobs named "huge" ask for 3 GiB per device; the devices have 2.
    admission.bytes_per_device = [](const JobSpec& spec, int tp) -> int64_t {
      return spec.name == "huge" ? 3 * kGiB : 1 << 20;
    };
    RpcServerOptions options;
    options.max_spec_bytes = 4096;
    ASSERT_NO_FATAL_FAILURE(StartServer(options, std::move(admission)));
  }

  grpc::Status Submit(const std::string& spec, v1::Job* job = nullptr) {
    grpc::ClientContext context;
    v1::SubmitJobRequest request;
    request.set_spec(spec);
    request.set_source_name("test.yaml");
    v1::SubmitJobResponse response;
    grpc::Status status = jobs_->SubmitJob(&context, request, &response);
    if (job != nullptr) *job = response.job();
    return status;
  }

  grpc::Status Get(const std::string& id, v1::Job* job) {
    grpc::ClientContext context;
    v1::GetJobRequest request;
    request.set_id(id);
    v1::GetJobResponse response;
    grpc::Status status = jobs_->GetJob(&context, request, &response);
    *job = response.job();
    return status;
  }

  grpc::Status Cancel(const std::string& id, v1::Job* job) {
    grpc::ClientContext context;
    v1::CancelJobRequest request;
    request.set_id(id);
    v1::CancelJobResponse response;
    grpc::Status status = jobs_->CancelJob(&context, request, &response);
    *job = response.job();
    return status;
  }

  std::vector<v1::Job> List(v1::JobState state, int limit = 0) {
    grpc::ClientContext context;
    v1::ListJobsRequest request;
    request.set_state(state);
    request.set_limit(limit);
    v1::ListJobsResponse response;
    grpc::Status status = jobs_->ListJobs(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return {response.jobs().begin(), response.jobs().end()};
  }

  // Every event of WatchJob, and the status it ended with.
  grpc::Status Watch(const std::string& id, std::vector<v1::Job>* events) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    v1::WatchJobRequest request;
    request.set_id(id);
    auto reader = jobs_->WatchJob(&context, request);
    v1::JobEvent event;
    while (reader->Read(&event)) events->push_back(event.job());
    return reader->Finish();
  }

  void AwaitRunning(const std::string& id) {
    for (int i = 0; i < 200; ++i) {
      v1::Job job;
      ASSERT_TRUE(Get(id, &job).ok());
      if (job.state() == v1::RUNNING) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    FAIL() << id << " never started";
  }
};

TEST_F(RpcServerTest, SocketIsGroupOnly) {
  struct stat st {};
  ASSERT_EQ(::stat((dir_.path() + "/run/overlapd.sock").c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  EXPECT_EQ(server_->listen_address(), "unix:" + dir_.path() + "/run/overlapd.sock");
}

TEST_F(RpcServerTest, SubmitGetListCancelWatchRoundTrip) {
  v1::Job submitted;
  grpc::Status status = Submit(Spec("block"), &submitted);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(submitted.id(), "job-000001");
  EXPECT_EQ(submitted.name(), "block");
  EXPECT_EQ(submitted.spec(), Spec("block"));
  ASSERT_EQ(submitted.devices_size(), 1);
  AwaitRunning(submitted.id());

  // Queued behind it on device 0, with every device resolved when none is given.
  v1::Job queued;
  ASSERT_TRUE(Submit("name: all\niterations: 1\nops:\n  - {id: a, type: gemm_ar, m: 64, k: 64, "
                     "n: 64}\n",
                     &queued)
                  .ok());
  EXPECT_EQ(queued.id(), "job-000002");
  EXPECT_EQ(queued.state(), v1::QUEUED);
  EXPECT_EQ(std::vector<int>(queued.devices().begin(), queued.devices().end()),
            (std::vector<int>{0, 1}));

  std::vector<v1::Job> running = List(v1::RUNNING);
  ASSERT_EQ(running.size(), 1u);
  EXPECT_EQ(running[0].id(), "job-000001");
  std::vector<v1::Job> newest = List(v1::JOB_STATE_UNSPECIFIED, 1);
  ASSERT_EQ(newest.size(), 1u);
  EXPECT_EQ(newest[0].id(), "job-000002");

  v1::Job job;
  status = Cancel(queued.id(), &job);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(job.state(), v1::CANCELLED);

  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    v1::Job ignored;
    EXPECT_TRUE(Cancel(submitted.id(), &ignored).ok());
  });
  std::vector<v1::Job> events;
  status = Watch(submitted.id(), &events);
  canceller.join();
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.front().state(), v1::RUNNING);
  EXPECT_TRUE(std::any_of(events.begin(), events.end(), [](const v1::Job& e) {
    return e.progress().iteration() > 0;
  })) << "no progress event";
  EXPECT_EQ(events.back().state(), v1::CANCELLED);
  EXPECT_EQ(events.back().error(), "cancelled by request");

  ASSERT_TRUE(Get(submitted.id(), &job).ok());
  EXPECT_EQ(job.state(), v1::CANCELLED);
  status = Cancel(submitted.id(), &job);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(status.error_message(), "job job-000001 already finished (CANCELLED)");

  // Watching a finished job sends it once and ends.
  events.clear();
  ASSERT_TRUE(Watch(queued.id(), &events).ok());
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].state(), v1::CANCELLED);

  EXPECT_EQ(List(v1::CANCELLED).size(), 2u);
  EXPECT_EQ(List(v1::JOB_STATE_UNSPECIFIED).size(), 2u);
}

// Timelines are the bulk of a result: lists and progress events leave them
// out, GetJob and a watch's final event carry them.
TEST_F(RpcServerTest, TimelinesComeWithGetAndTheFinalEventOnly) {
  v1::Job submitted;
  ASSERT_TRUE(Submit(Spec("ops:2:block"), &submitted).ok());
  v1::Job job;
  for (int i = 0; i < 200 && job.result().ops_size() < 2; ++i) {
    ASSERT_TRUE(Get(submitted.id(), &job).ok());
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(job.result().ops_size(), 2);
  EXPECT_TRUE(job.result().ops(1).has_timeline());
  // A list holds summaries: the op count and totals, no ops and no spec.
  std::vector<v1::Job> listed = List(v1::RUNNING);
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].ops_finished(), 2);
  EXPECT_EQ(listed[0].result().ops_size(), 0);
  EXPECT_DOUBLE_EQ(listed[0].result().total_step_ms(), 3);
  EXPECT_EQ(listed[0].spec(), "");

  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    v1::Job ignored;
    EXPECT_TRUE(Cancel(submitted.id(), &ignored).ok());
  });
  std::vector<v1::Job> events;
  grpc::Status status = Watch(submitted.id(), &events);
  canceller.join();
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_GE(events.size(), 2u);
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    for (const v1::OpResult& op : events[i].result().ops()) EXPECT_FALSE(op.has_timeline());
  }
  ASSERT_EQ(events.back().state(), v1::CANCELLED);
  ASSERT_EQ(events.back().result().ops_size(), 2);
  EXPECT_TRUE(events.back().result().ops(0).has_timeline());
}

TEST_F(RpcServerTest, UnknownIdsAreNotFound) {
  v1::Job job;
  grpc::Status status = Get("job-424242", &job);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(status.error_message(), "job job-424242 not found");
  EXPECT_EQ(Cancel("job-424242", &job).error_code(), grpc::StatusCode::NOT_FOUND);
  std::vector<v1::Job> events;
  EXPECT_EQ(Watch("job-424242", &events).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Get("", &job).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST(DoesNotFitMessageTest, SaysWhetherALargerPoolOrMoreGpusWouldFit) {
  engine::DeviceInfo gpu;
  gpu.index = 1;
  gpu.memory_bytes = 16 * kGiB;
  gpu.total_memory_bytes = 140 * kGiB;
  EXPECT_EQ(
      jobs::DoesNotFitMessage(20 * kGiB, gpu, "pool_bytes_per_device"),
      "job needs 20.00 GiB per device, device 1 has 16.00 GiB (pool_bytes_per_device) of "
      "its 140.00 GiB: a larger pool_bytes_per_device in the daemon's config fits it (a size, or "
      "a share such as 80%; at most 90% of the GPU)");
  EXPECT_EQ(jobs::DoesNotFitMessage(130 * kGiB, gpu, "pool_bytes_per_device"),
            "job needs 130.00 GiB per device, device 1 has 16.00 GiB (pool_bytes_per_device) "
            "and 140.00 GiB in all: spread the job over more GPUs (a larger tp) or make its "
            "shapes smaller");
  gpu.total_memory_bytes = 0;  // unknown: the pool is all there is to say
  EXPECT_EQ(jobs::DoesNotFitMessage(20 * kGiB, gpu, "pool_bytes_per_device"),
            "job needs 20.00 GiB per device, device 1 has 16.00 GiB (pool_bytes_per_device)");
}

TEST_F(RpcServerTest, RefusalsHaveTheRightCodeAndNameTheField) {
  grpc::Status status = Submit("name: x\nops: [ {id: a, type: ag_gemm, m: 64");  // unterminated
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("test.yaml"), std::string::npos) << status.error_message();

  status = Submit(Spec("bad-devices", "[0, 7]"));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("devices"), std::string::npos) << status.error_message();

  status = Submit(Spec("huge", "[0, 1]"));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(status.error_message(),
            "job needs 3.00 GiB per device, device 0 has 2.00 GiB (host_device_memory_bytes)");

  status = Submit(Spec("big") + "# " + std::string(5000, 'x') + "\n");
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("max_spec_bytes"), std::string::npos);

  EXPECT_TRUE(List(v1::JOB_STATE_UNSPECIFIED).empty()) << "a refused job was stored";

  grpc::ClientContext context;
  v1::GetStatsResponse stats;
  ASSERT_TRUE(node_->GetStats(&context, v1::GetStatsRequest(), &stats).ok());
  EXPECT_EQ(stats.jobs_rejected(), 4);
  EXPECT_EQ(stats.jobs_submitted(), 0);
}

TEST_F(RpcServerTest, DrainingRefusesSubmissionsAndReportsNotServing) {
  EXPECT_EQ(HealthStatus(channel_.get(), ""), 1);  // SERVING
  EXPECT_EQ(HealthStatus(channel_.get(), "overlap.v1.Jobs"), 1);
  queue_->StartDrain();
  server_->SetServing(false);
  EXPECT_EQ(HealthStatus(channel_.get(), ""), 2);  // NOT_SERVING
  EXPECT_EQ(HealthStatus(channel_.get(), "overlap.v1.Jobs"), 2);
  grpc::Status status = Submit(Spec("late"));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(status.error_message(), "overlapd is draining");

  grpc::ClientContext context;
  v1::GetNodeInfoResponse info;
  ASSERT_TRUE(node_->GetNodeInfo(&context, v1::GetNodeInfoRequest(), &info).ok());
  EXPECT_FALSE(info.healthy());
}

TEST_F(RpcServerTest, WatchEndsWhenTheDaemonStops) {
  v1::Job blocker, queued;
  ASSERT_TRUE(Submit(Spec("block"), &blocker).ok());
  ASSERT_TRUE(Submit(Spec("sleep:1"), &queued).ok());
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    queue_->StartDrain();
    queue_->CancelRunning("drain timeout");
    queue_->WaitIdle(absl::Seconds(5));
    queue_->Shutdown();
  });
  std::vector<v1::Job> events;
  const auto start = std::chrono::steady_clock::now();
  grpc::Status status = Watch(queued.id(), &events);
  stopper.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().state(), v1::QUEUED);
  EXPECT_EQ(store_->Get(queued.id())->state, jobs::JobState::kQueued);  // runs after a restart
}

TEST_F(RpcServerTest, NodeInfoAndStats) {
  grpc::ClientContext info_context;
  v1::GetNodeInfoResponse info;
  ASSERT_TRUE(node_->GetNodeInfo(&info_context, v1::GetNodeInfoRequest(), &info).ok());
  EXPECT_EQ(info.backend(), "host");
  ASSERT_EQ(info.devices_size(), 2);
  EXPECT_EQ(info.devices(1).index(), 1);
  EXPECT_EQ(info.devices(1).memory_bytes(), 2 * kGiB);
  EXPECT_EQ(info.state_dir(), dir_.path() + "/state");
  EXPECT_EQ(info.listen_address(), server_->listen_address());
  EXPECT_EQ(info.overlapd_version(), OVERLAP_VERSION);
  EXPECT_EQ(info.git_commit(), OVERLAP_GIT_COMMIT);
  EXPECT_FALSE(info.hostname().empty());
  EXPECT_TRUE(info.healthy());

  v1::Job a, b;
  ASSERT_TRUE(Submit(Spec("sleep:40", "[0, 1]"), &a).ok());
  ASSERT_TRUE(Submit(Spec("fail", "[1]"), &b).ok());
  ASSERT_TRUE(queue_->WaitIdle(absl::Seconds(10)));
  grpc::ClientContext stats_context;
  v1::GetStatsResponse stats;
  ASSERT_TRUE(node_->GetStats(&stats_context, v1::GetStatsRequest(), &stats).ok());
  EXPECT_EQ(stats.jobs_by_state().at("SUCCEEDED"), 1);
  EXPECT_EQ(stats.jobs_by_state().at("FAILED"), 1);
  EXPECT_EQ(stats.jobs_by_state().at("QUEUED"), 0);
  EXPECT_EQ(stats.jobs_submitted(), 2);
  EXPECT_EQ(stats.jobs_rejected(), 0);
  ASSERT_EQ(stats.devices_size(), 2);
  EXPECT_EQ(stats.devices(0).jobs_run(), 1);
  EXPECT_EQ(stats.devices(1).jobs_run(), 2);
  EXPECT_GE(stats.devices(0).busy_ms(), 40);
  EXPECT_GT(stats.uptime_s(), 0);
}

TEST_F(RpcServerTest, TunedSchedulesAreListedAndForgotten) {
  auto key = [](const std::string& op, const std::string& environment) {
    return MakeTuningKey(op, 8192, 4096, 4096, environment);
  };
  const runner::TunedChoice ring{ops::Schedule{OverlapMode::kRing, 2, Transport::kP2p}, 0.22};
  ASSERT_TRUE(
      tuning_cache_->Store(key("gemm_rs", runner::TuningEnvironment(*engine_, 0)), ring, 7000)
          .ok());
  ASSERT_TRUE(tuning_cache_->Store(key("ag_gemm", "backend=host overlapd=0.0.1"), ring, 8000).ok());

  auto list = [&](bool stale_only, v1::ListTunedSchedulesResponse* response) {
    grpc::ClientContext context;
    v1::ListTunedSchedulesRequest request;
    request.mutable_filter()->set_stale_only(stale_only);
    return node_->ListTunedSchedules(&context, request, response);
  };
  v1::ListTunedSchedulesResponse all;
  ASSERT_TRUE(list(false, &all).ok());
  ASSERT_EQ(all.schedules_size(), 2);
  EXPECT_EQ(all.schedules(0).op_type(), "ag_gemm");
  EXPECT_FALSE(all.schedules(0).current()) << "tuned by another build";
  EXPECT_EQ(all.schedules(1).op_type(), "gemm_rs");
  EXPECT_TRUE(all.schedules(1).current());
  EXPECT_EQ(all.schedules(1).schedule(), "ring/2/p2p");
  EXPECT_EQ(all.schedules(1).tuned_unix_ms(), 7000);
  EXPECT_EQ(all.schedules(1).requested(), "auto/0/auto");
  v1::ListTunedSchedulesResponse stale;
  ASSERT_TRUE(list(true, &stale).ok());
  ASSERT_EQ(stale.schedules_size(), 1);
  EXPECT_EQ(stale.schedules(0).op_type(), "ag_gemm");

  auto forget = [&](const v1::TuningFilter& filter, bool all_of_them, int* forgotten) {
    grpc::ClientContext context;
    v1::ForgetTunedSchedulesRequest request;
    *request.mutable_filter() = filter;
    request.set_all(all_of_them);
    v1::ForgetTunedSchedulesResponse response;
    grpc::Status status = node_->ForgetTunedSchedules(&context, request, &response);
    *forgotten = response.forgotten();
    return status;
  };
  int forgotten = -1;
  EXPECT_EQ(forget({}, false, &forgotten).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::TuningFilter negative;
  negative.set_m(-1);
  EXPECT_EQ(forget(negative, false, &forgotten).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::TuningFilter stale_filter;
  stale_filter.set_stale_only(true);
  ASSERT_TRUE(forget(stale_filter, false, &forgotten).ok());
  EXPECT_EQ(forgotten, 1);
  ASSERT_TRUE(forget({}, true, &forgotten).ok());
  EXPECT_EQ(forgotten, 1);
  v1::ListTunedSchedulesResponse none;
  ASSERT_TRUE(list(false, &none).ok());
  EXPECT_EQ(none.schedules_size(), 0);
}

// NVML's readings as the engine gives them, health included, reach GetNodeInfo.
TEST_F(RpcServerTest, NodeInfoCarriesEachDevicesTelemetryAndHealth) {
  class ReadingEngine : public ForwardingEngine, public engine::DeviceMonitor {
   public:
    using ForwardingEngine::ForwardingEngine;
    const engine::DeviceMonitor* Monitor() const override { return this; }
    int64_t MemoryInUse(int d) const override { return 0; }
    absl::StatusOr<int64_t> ForgetXids(int d) const override { return 0; }
    bool Healthy() const override { return true; }
    engine::DeviceTelemetry Telemetry(int d) const override {
      engine::DeviceTelemetry t;
      if (d != 1) return t;
      t.valid = true;
      t.sm_clock_mhz = 1980;
      t.capped_time_valid = true;
      t.power_capped_s = 7.5;
      t.pcie_valid = true;
      t.pcie_gen = 5;
      t.pcie_max_gen = 5;
      t.pcie_width = 8;
      t.pcie_max_width = 16;
      t.pcie_replays = 2;
      t.nvlink_valid = true;
      t.nvlinks_active = 17;
      t.nvlinks_supported = 18;
      t.nvlink_crc_errors = 11;
      t.nvlink_replay_errors = 12;
      t.nvlink_recovery_errors = 13;
      t.ecc_valid = true;
      t.ecc_corrected = 21;
      t.ecc_uncorrected = 22;
      t.row_remap_valid = true;
      t.row_remap_pending = true;
      t.xid_valid = true;
      t.xid_errors = 31;
      t.gpu_xid_errors = 32;
      t.last_xid = 33;
      t.last_xid_unix_ms = 34;
      return t;
    }
  };
  engine::HostEngineOptions options;
  options.device_count = 2;
  auto host = engine::CreateHostEngine(options);
  ASSERT_TRUE(host.ok()) << host.status();
  ReadingEngine engine(std::move(*host));
  node::NodeState state(*queue_, engine, "");
  std::unique_ptr<node::TuningState> no_cache = node::CacheTuningState(nullptr, engine);
  const CallerResolver in_process(nullptr, -1);
  NodeService node(state, *no_cache, engine, in_process);
  v1::GetNodeInfoResponse info;
  ASSERT_TRUE(node.GetNodeInfo(nullptr, nullptr, &info).ok());
  ASSERT_EQ(info.devices_size(), 2);
  EXPECT_FALSE(info.devices(0).telemetry_valid());
  EXPECT_FALSE(info.devices(0).pcie_valid());
  const v1::Device& d = info.devices(1);
  EXPECT_EQ(d.sm_clock_mhz(), 1980);
  EXPECT_DOUBLE_EQ(d.power_capped_s(), 7.5);
  EXPECT_TRUE(d.pcie_valid());
  EXPECT_EQ(std::vector<int64_t>({d.pcie_gen(), d.pcie_max_gen(), d.pcie_width(),
                                  d.pcie_max_width(), d.pcie_replays()}),
            std::vector<int64_t>({5, 5, 8, 16, 2}));
  EXPECT_TRUE(d.nvlink_valid());
  EXPECT_EQ(std::vector<int64_t>({d.nvlinks_active(), d.nvlinks_supported(), d.nvlink_crc_errors(),
                                  d.nvlink_replay_errors(), d.nvlink_recovery_errors()}),
            std::vector<int64_t>({17, 18, 11, 12, 13}));
  EXPECT_TRUE(d.ecc_valid());
  EXPECT_EQ(d.ecc_corrected(), 21);
  EXPECT_EQ(d.ecc_uncorrected(), 22);
  EXPECT_TRUE(d.row_remap_valid());
  EXPECT_TRUE(d.row_remap_pending());
  EXPECT_FALSE(d.row_remap_failed());
  EXPECT_TRUE(d.xid_valid());
  EXPECT_EQ(std::vector<int64_t>({d.xid_errors(), d.gpu_xid_errors(),
                                  static_cast<int64_t>(d.last_xid()), d.last_xid_unix_ms()}),
            std::vector<int64_t>({31, 32, 33, 34}));
}

TEST_F(RpcServerTest, WithoutATuningCacheTheTuningCallsFailClearly) {
  std::unique_ptr<node::TuningState> no_cache = node::CacheTuningState(nullptr, *engine_);
  const CallerResolver in_process(nullptr, -1);
  NodeService node(*node_state_, *no_cache, *engine_, in_process);
  v1::ListTunedSchedulesRequest list;
  v1::ListTunedSchedulesResponse listed;
  grpc::Status status = node.ListTunedSchedules(nullptr, &list, &listed);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(status.error_message(), ::testing::HasSubstr("no tuning cache"));
  v1::ForgetTunedSchedulesRequest request;
  request.set_all(true);
  v1::ForgetTunedSchedulesResponse forgot;
  EXPECT_EQ(node.ForgetTunedSchedules(nullptr, &request, &forgot).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
}

TEST(ListenAddressTest, LoopbackOnlyUnlessAllowed) {
  auto unix_target = net::ResolveListenAddress("unix:/run/overlapd/overlapd.sock", false);
  ASSERT_TRUE(unix_target.ok());
  EXPECT_EQ(unix_target->socket_path, "/run/overlapd/overlapd.sock");
  EXPECT_EQ(net::ResolveListenAddress("unix:///tmp/x.sock", false)->socket_path, "/tmp/x.sock");
  for (const char* ok : {"127.0.0.1:50051", "127.8.9.10:1", "localhost:0", "[::1]:50051"}) {
    auto target = net::ResolveListenAddress(ok, false);
    ASSERT_TRUE(target.ok()) << ok << ": " << target.status();
    EXPECT_FALSE(target->insecure_network);
    EXPECT_TRUE(target->socket_path.empty());
  }
  for (const char* remote : {"0.0.0.0:50051", "10.1.2.3:50051", "[::]:50051", "node7:50051"}) {
    auto refused = net::ResolveListenAddress(remote, false);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << remote;
    EXPECT_NE(refused.status().message().find("allow_insecure_tcp"), std::string::npos);
    EXPECT_NE(refused.status().message().find("tls_client_ca"), std::string::npos);
    auto allowed = net::ResolveListenAddress(remote, true);
    ASSERT_TRUE(allowed.ok()) << remote;
    EXPECT_TRUE(allowed->insecure_network);
    // Mutual TLS authenticates every client: no opt-in needed, nothing insecure.
    auto authenticated = net::ResolveListenAddress(remote, false, /*clients_authenticated=*/true);
    ASSERT_TRUE(authenticated.ok()) << remote;
    EXPECT_FALSE(authenticated->insecure_network);
  }
  for (const char* bad :
       {"unix:", "localhost", "127.0.0.1:99999", "::1:5000", ":5000", "http://localhost:80"}) {
    EXPECT_EQ(net::ResolveListenAddress(bad, true).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
}

TEST(ListenAddressTest, ALiveSocketIsNotStolen) {
  TempDir dir;
  const std::string path = dir.path() + "/sub/d.sock";
  ASSERT_TRUE(net::PrepareUnixSocketPath(path).ok());  // makes sub/
  grpc::ServerBuilder builder;
  v1::Node::Service unimplemented;
  builder.RegisterService(&unimplemented);
  int port = 0;
  builder.AddListeningPort("unix:" + path, grpc::InsecureServerCredentials(), &port);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  absl::Status status = net::PrepareUnixSocketPath(path);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(status.message().find("already listening"), std::string::npos);
  server->Shutdown();
  // What a crashed daemon leaves: a socket file nobody listens on. Removed.
  EXPECT_TRUE(net::PrepareUnixSocketPath(path).ok());
}

}  // namespace
}  // namespace overlap::rpc
