// Prometheus metrics: the families built from node, stats and jobs (exact text),
// and the exporter serving them over HTTP from a live queue.
#include "server/rpc/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/text_serializer.h"
#include "server/engine/host/host_engine.h"
#include "tests/http_get.h"
#include "tests/server/test_util.h"

namespace overlap::rpc {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string Text(const std::vector<prometheus::MetricFamily>& families) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  return out.str();
}

v1::Job JobOn(const std::string& id, std::vector<int> devices, v1::JobState state,
              const std::string& last_op) {
  v1::Job job;
  job.set_id(id);
  job.set_state(state);
  for (int d : devices) job.add_devices(d);
  if (!last_op.empty()) {
    v1::OpResult* op = job.mutable_result()->add_ops();
    op->set_id(last_op);
    op->set_schedule("ring/2/p2p");
    op->mutable_step()->set_median_ms(2.5);
    op->mutable_comm_alone()->set_median_ms(1.0);
    op->set_exposed_comm_ms(0.25);
    op->set_hidden_fraction(0.75);
    for (int i = 0; i < static_cast<int>(devices.size()); ++i) {
      op->add_gemm_alone_rank_ms(2.0 + i);
      op->add_compute_wait_rank_ms(1.0 + i);
    }
  }
  return job;
}

// The labels of the two devices below: dcgm-exporter's (device 0 has NVML; its
// NVML index differs from overlapd's), then overlapd's own index.
#define G0                                                                                 \
  "gpu=\"3\",UUID=\"GPU-6f2a0100-9bcd-1122-3344-5566778899ff\",modelName=\"NVIDIA H200\"," \
  "Hostname=\"node7\",pci_bus_id=\"00000000:19:00.0\",cuda_device=\"0\""
#define G1 "modelName=\"NVIDIA H200\",Hostname=\"node7\",cuda_device=\"1\""

constexpr int64_t kNowMs = 1'800'000'000'000;
const MetricsOptions kOptions{900};

std::string Scrape(const v1::GetNodeInfoResponse& node, const v1::GetStatsResponse& stats,
                   const std::vector<v1::Job>& recent, int64_t now_ms = kNowMs) {
  return Text(BuildMetrics(node, stats, recent, now_ms, kOptions));
}

v1::GetNodeInfoResponse TwoDevices() {
  v1::GetNodeInfoResponse node;
  node.set_backend("cuda");
  node.set_healthy(true);
  node.set_hostname("node7");
  node.set_overlapd_version("1.2.3");
  node.set_git_commit("abc1234");
  node.set_cuda_runtime_version("13.0");
  node.set_nccl_version("2.27.7");
  node.set_cuda_driver_version("13.0");
  v1::Device* d0 = node.add_devices();
  d0->set_index(0);
  d0->set_name("NVIDIA H200");
  d0->set_model_name("NVIDIA H200");
  d0->set_uuid("GPU-6f2a0100-9bcd-1122-3344-5566778899ff");
  d0->set_nvml_index(3);
  d0->set_pci_bus_id("0000:19:00.0");
  d0->set_nvml_pci_bus_id("00000000:19:00.0");
  d0->set_memory_bytes(1000);
  d0->set_memory_used_bytes(250);
  d0->set_total_memory_bytes(4000);
  d0->set_telemetry_valid(true);
  d0->set_sm_clock_mhz(1980);
  d0->set_utilization_pct(87);
  d0->set_power_w(306.5);
  d0->set_max_sm_clock_mhz(1980);
  d0->set_clock_limits_valid(true);
  d0->add_clock_limits("thermal");
  d0->set_capped_time_valid(true);
  d0->set_power_capped_s(41.5);
  d0->set_thermal_capped_s(2.25);
  d0->set_pcie_valid(true);
  d0->set_pcie_gen(1);
  d0->set_pcie_max_gen(5);
  d0->set_pcie_width(8);
  d0->set_pcie_max_width(16);
  d0->set_pcie_replays(3);
  d0->set_nvlink_valid(true);
  d0->set_nvlinks_active(17);
  d0->set_nvlinks_supported(18);
  d0->set_nvlink_crc_errors(12);
  d0->set_nvlink_replay_errors(4);
  d0->set_nvlink_recovery_errors(1);
  d0->set_ecc_valid(true);
  d0->set_ecc_corrected(5);
  d0->set_row_remap_valid(true);
  d0->set_row_remap_pending(true);
  d0->set_xid_valid(true);
  d0->set_xid_errors(3);
  d0->set_gpu_xid_errors(1);
  d0->set_last_xid(74);
  v1::Device* d1 = node.add_devices();
  d1->set_index(1);
  d1->set_name("NVIDIA H200");
  d1->set_model_name("NVIDIA H200");
  d1->set_nvml_index(-1);  // no NVML: no gpu label
  return node;
}

TEST(MetricsTest, FamiliesFollowNodeStatsAndTheNewestJobPerDevice) {
  const v1::GetNodeInfoResponse node = TwoDevices();
  v1::GetStatsResponse stats;
  (*stats.mutable_jobs_by_state())["QUEUED"] = 0;
  (*stats.mutable_jobs_by_state())["RUNNING"] = 1;
  (*stats.mutable_jobs_by_state())["SUCCEEDED"] = 7;
  (*stats.mutable_jobs_by_state())["FAILED"] = 2;
  stats.set_jobs_submitted(9);
  stats.set_graphs_parsed(11);
  v1::DeviceStats* busy = stats.add_devices();
  busy->set_device(1);
  busy->set_busy_ms(1500);
  // Newest first: job 3 runs on device 1 and has finished nothing yet, so
  // device 1's last op comes from job 2 (rank 1 there); device 0's from job 2.
  std::vector<v1::Job> recent = {
      JobOn("job-3", {1}, v1::RUNNING, ""),
      JobOn("job-2", {0, 1}, v1::SUCCEEDED, "fc2"),
      JobOn("job-1", {0}, v1::SUCCEEDED, "old"),
  };
  recent[1].set_end_time_ms(kNowMs - 60'000);
  recent[2].set_end_time_ms(kNowMs - 120'000);
  std::vector<v1::Job> with_layer = recent;
  with_layer[2].mutable_result()->mutable_layer_step()->set_median_ms(11.25);
  with_layer[2].mutable_result()->set_layer_exposed_comm_ms(0.5);
  const std::string text = Scrape(node, stats, with_layer);
  for (const char* line : {
           "overlapd_build_info{version=\"1.2.3\",git_commit=\"abc1234\",backend=\"cuda\","
           "cuda_runtime=\"13.0\",nccl=\"2.27.7\",cuda_driver=\"13.0\"} 1\n",
           "overlapd_last_layer_step_seconds{" G0 "} 0.01125\n",
           "overlapd_last_layer_exposed_comm_seconds{" G0 "} 0.0005\n",
           "overlapd_healthy{backend=\"cuda\"} 1\n",
           "# TYPE overlapd_jobs_finished_total counter\n",
           "overlapd_jobs_finished_total{state=\"SUCCEEDED\"} 7\n",
           "overlapd_jobs_finished_total{state=\"FAILED\"} 2\n",
           "# TYPE overlapd_jobs_active gauge\n",
           "overlapd_jobs_active{state=\"RUNNING\"} 1\n",
           "overlapd_jobs_active{state=\"QUEUED\"} 0\n",
           "overlapd_jobs_submitted_total 9\n",
           "overlapd_graphs_parsed_total 11\n",
           "overlapd_device_memory_used_bytes{" G0 "} 250\n",
           "overlapd_device_memory_used_bytes{" G1 "} 0\n",
           "overlapd_device_memory_bytes{" G0 "} 1000\n",
           "overlapd_device_total_memory_bytes{" G0 "} 4000\n",
           "overlapd_device_sm_clock_hertz{" G0 "} 1980000000\n",
           "overlapd_device_utilization_ratio{" G0 "} 0.87\n",
           "overlapd_device_power_watts{" G0 "} 306.5\n",
           "overlapd_device_max_sm_clock_hertz{" G0 "} 1980000000\n",
           "overlapd_device_clock_limit{" G0 ",reason=\"thermal\"} 1\n",
           "overlapd_device_clock_limit{" G0 ",reason=\"power\"} 0\n",
           "overlapd_device_power_capped_seconds_total{" G0 "} 41.5\n",
           "overlapd_device_thermal_capped_seconds_total{" G0 "} 2.25\n",
           "overlapd_device_pcie_link_gen{" G0 ",link=\"current\"} 1\n",
           "overlapd_device_pcie_link_gen{" G0 ",link=\"max\"} 5\n",
           "overlapd_device_pcie_link_width{" G0 ",link=\"current\"} 8\n",
           "overlapd_device_pcie_link_width{" G0 ",link=\"max\"} 16\n",
           "overlapd_device_pcie_replays_total{" G0 "} 3\n",
           "overlapd_device_nvlinks{" G0 ",state=\"active\"} 17\n",
           "overlapd_device_nvlinks{" G0 ",state=\"supported\"} 18\n",
           "overlapd_device_nvlink_errors_total{" G0 ",type=\"crc\"} 12\n",
           "overlapd_device_nvlink_errors_total{" G0 ",type=\"replay\"} 4\n",
           "overlapd_device_nvlink_errors_total{" G0 ",type=\"recovery\"} 1\n",
           "overlapd_device_ecc_errors_total{" G0 ",type=\"corrected\"} 5\n",
           "overlapd_device_ecc_errors_total{" G0 ",type=\"uncorrected\"} 0\n",
           "overlapd_device_row_remap{" G0 ",state=\"pending\"} 1\n",
           "overlapd_device_row_remap{" G0 ",state=\"failed\"} 0\n",
           "overlapd_device_xid_errors_total{" G0 ",kind=\"all\"} 3\n",
           "overlapd_device_xid_errors_total{" G0 ",kind=\"gpu\"} 1\n",
           "overlapd_device_last_xid{" G0 "} 74\n",
           "overlapd_device_busy_seconds_total{" G1 "} 1.5\n",
           "overlapd_device_running_job{" G1 ",job_id=\"job-3\"} 1\n",
           "overlapd_last_op_step_seconds{" G0 ",op=\"fc2\",schedule=\"ring/2/p2p\"} 0.0025\n",
           "overlapd_last_op_finished_timestamp_seconds{" G0
           ",op=\"fc2\",schedule=\"ring/2/p2p\"} 1799999940\n",
           "overlapd_last_op_hidden_ratio{" G1 ",op=\"fc2\",schedule=\"ring/2/p2p\"} 0.75\n",
           "overlapd_last_op_gemm_alone_seconds{" G1 ",op=\"fc2\",schedule=\"ring/2/p2p\"} 0.003\n",
           "overlapd_last_op_compute_wait_seconds{" G1
           ",op=\"fc2\",schedule=\"ring/2/p2p\"} 0.002\n",
           "overlapd_last_op_compute_wait_seconds{" G0
           ",op=\"fc2\",schedule=\"ring/2/p2p\"} 0.001\n",
       }) {
    EXPECT_THAT(text, HasSubstr(line)) << line;
  }
  // Finished states only in the counter, live ones only in the gauge; no job id
  // outside the running job's series.
  EXPECT_THAT(text, Not(HasSubstr("overlapd_jobs_finished_total{state=\"RUNNING\"}")));
  EXPECT_THAT(text, Not(HasSubstr("overlapd_jobs_active{state=\"SUCCEEDED\"}")));
  EXPECT_THAT(text, Not(HasSubstr("job_id=\"job-2\"")));
  EXPECT_THAT(text, Not(HasSubstr("{device=\"")));
  EXPECT_THAT(text, Not(HasSubstr(",device=\"")));
  // No NVML on device 1: its telemetry is absent, not zero; job 1 is shadowed.
  EXPECT_THAT(text, Not(HasSubstr("overlapd_device_sm_clock_hertz{" G1 "}")));
  EXPECT_THAT(text, Not(HasSubstr("overlapd_device_nvlinks{" G1)));
  // Device 1's whole memory is unknown: absent, not zero.
  EXPECT_THAT(text, Not(HasSubstr("overlapd_device_total_memory_bytes{" G1 "}")));
  // Health readings without clock readings are published all the same.
  v1::GetNodeInfoResponse health_only = node;
  health_only.mutable_devices(0)->set_telemetry_valid(false);
  const std::string health_text = Scrape(health_only, stats, recent);
  EXPECT_THAT(health_text, HasSubstr("overlapd_device_nvlinks{" G0 ",state=\"active\"} 17\n"));
  EXPECT_THAT(health_text, Not(HasSubstr("overlapd_device_sm_clock_hertz{" G0 "}")));
  EXPECT_THAT(text, Not(HasSubstr("op=\"old\"")));
  // Device 1 never ran a job with a layer step.
  EXPECT_THAT(text, Not(HasSubstr("overlapd_last_layer_step_seconds{" G1)));
  EXPECT_THAT(text, HasSubstr("# TYPE overlapd_jobs_submitted_total counter\n"));

  // A GEMM alone as the last op: its step, but no hidden ratio.
  std::vector<v1::Job> gemm_last = recent;
  gemm_last[1].mutable_result()->mutable_ops(0)->set_type("gemm");
  const std::string gemm_text = Scrape(node, stats, gemm_last);
  EXPECT_THAT(gemm_text, HasSubstr("overlapd_last_op_step_seconds{" G0 ",op=\"fc2\""));
  EXPECT_THAT(gemm_text, Not(HasSubstr("overlapd_last_op_hidden_ratio{")));

  // Nor at one rank, where nothing moved (comm alone 0).
  std::vector<v1::Job> one_rank = recent;
  one_rank[1].mutable_result()->mutable_ops(0)->mutable_comm_alone()->set_median_ms(0);
  const std::string one_text = Scrape(node, stats, one_rank);
  EXPECT_THAT(one_text, HasSubstr("overlapd_last_op_step_seconds{" G0 ",op=\"fc2\""));
  EXPECT_THAT(one_text, Not(HasSubstr("overlapd_last_op_hidden_ratio{")));

  // Nor for a serial schedule, which hides nothing by design (a ratio there is
  // noise, and once fired an alert on every serial baseline).
  std::vector<v1::Job> serial = recent;
  serial[1].mutable_result()->mutable_ops(0)->set_schedule("serial/nccl");
  serial[1].mutable_result()->mutable_ops(0)->set_hidden_fraction(-1.38);
  const std::string serial_text = Scrape(node, stats, serial);
  EXPECT_THAT(serial_text, HasSubstr("overlapd_last_op_step_seconds{" G0 ",op=\"fc2\""));
  EXPECT_THAT(serial_text, Not(HasSubstr("overlapd_last_op_hidden_ratio{")));
}

// The last op's series go away metrics_last_op_ttl_s after its job ended, so
// that an alert on them clears; a running job's stay.
TEST(MetricsTest, LastOpSeriesGoStale) {
  const v1::GetNodeInfoResponse node = TwoDevices();
  std::vector<v1::Job> recent = {JobOn("job-2", {0}, v1::SUCCEEDED, "fc2")};
  recent[0].set_end_time_ms(kNowMs - 899'000);
  recent[0].mutable_result()->mutable_layer_step()->set_median_ms(3);
  EXPECT_THAT(Scrape(node, {}, recent), HasSubstr("overlapd_last_op_hidden_ratio{" G0));
  EXPECT_THAT(Scrape(node, {}, recent), HasSubstr("overlapd_last_layer_step_seconds{" G0));
  const std::string stale = Scrape(node, {}, recent, kNowMs + 2'000);
  EXPECT_THAT(stale, Not(::testing::ContainsRegex("\noverlapd_last_op_[a-z_]+\\{")));
  EXPECT_THAT(stale, HasSubstr("# TYPE overlapd_last_op_step_seconds gauge"));
  EXPECT_THAT(stale, Not(HasSubstr("overlapd_last_layer_step_seconds{")));
  recent[0].set_state(v1::RUNNING);
  EXPECT_THAT(Scrape(node, {}, recent, kNowMs + 2'000),
              HasSubstr("overlapd_last_op_step_seconds{" G0));
}

// The parts of a job spanning daemons carry its global id, the same on every
// node: the coordinator's own job and a part it runs, and a peer's part.
TEST(MetricsTest, RunningPartsCarryTheGlobalJobId) {
  v1::GetNodeInfoResponse node = TwoDevices();
  node.set_node_name("n1:7000");
  v1::Job coordinated = JobOn("job-5", {0}, v1::RUNNING, "");
  coordinated.add_nodes("n1:7000");
  coordinated.add_nodes("n2:7000");
  v1::Job part = JobOn("job-6", {0}, v1::RUNNING, "");
  part.set_coordinator("n1:7000");
  part.set_global_job_id("job-5");
  v1::Job peers = JobOn("job-9", {1}, v1::RUNNING, "");
  peers.set_coordinator("n2:7000");
  peers.set_global_job_id("job-40");
  const std::string text = Scrape(node, {}, {part, coordinated, peers});
  EXPECT_THAT(text, HasSubstr("overlapd_device_running_job{" G0
                              ",job_id=\"job-6\",global_job_id=\"n1:7000/job-5\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("overlapd_device_running_job{" G0
                              ",job_id=\"job-5\",global_job_id=\"n1:7000/job-5\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("overlapd_device_running_job{" G1
                              ",job_id=\"job-9\",global_job_id=\"n2:7000/job-40\"} 1\n"));
}

// Energy: each device's counter and NVLink bytes where read (absent, not zero,
// elsewhere), the last op's and layer's joules per step and power, and each
// running job's joules so far (one series per running job).
TEST(MetricsTest, EnergyPerDeviceAndPerJob) {
  v1::GetNodeInfoResponse node = TwoDevices();
  node.mutable_devices(0)->set_energy_valid(true);
  node.mutable_devices(0)->set_energy_j(123456.5);
  node.mutable_devices(0)->set_nvlink_traffic_valid(true);
  node.mutable_devices(0)->set_nvlink_tx_bytes(4096);
  node.mutable_devices(0)->set_nvlink_rx_bytes(2048);
  v1::Job running = JobOn("job-7", {0, 1}, v1::RUNNING, "fc1");
  v1::OpResult* op = running.mutable_result()->mutable_ops(0);
  op->mutable_step()->set_samples(20);
  op->mutable_energy()->set_step_joules(1.5);
  op->mutable_energy()->set_step_watts(600);
  v1::JobResult* result = running.mutable_result();
  result->mutable_layer_step()->set_median_ms(4);
  result->mutable_layer_step()->set_samples(10);
  result->mutable_layer_energy()->set_step_joules(2.25);
  const std::string text = Scrape(node, {}, {running});
  for (const char* line : {
           "# TYPE overlapd_energy_joules_total counter\n",
           "overlapd_energy_joules_total{" G0 "} 123456.5\n",
           "overlapd_device_nvlink_bytes_total{" G0 ",direction=\"tx\"} 4096\n",
           "overlapd_device_nvlink_bytes_total{" G0 ",direction=\"rx\"} 2048\n",
           "overlapd_last_op_energy_joules{" G1 ",op=\"fc1\",schedule=\"ring/2/p2p\"} 1.5\n",
           "overlapd_last_op_power_watts{" G0 ",op=\"fc1\",schedule=\"ring/2/p2p\"} 600\n",
           "overlapd_last_layer_energy_joules{" G1 "} 2.25\n",
           // 20 steps of 1.5 J and 10 layer steps of 2.25 J.
           "overlapd_job_energy_joules_total{job_id=\"job-7\"} 52.5\n",
       }) {
    EXPECT_THAT(text, HasSubstr(line)) << line;
  }
  EXPECT_THAT(text, Not(HasSubstr("overlapd_energy_joules_total{" G1)));
  EXPECT_THAT(text, Not(HasSubstr("overlapd_device_nvlink_bytes_total{" G1)));
  // A finished job leaves the per-job family; a job without energy never enters it.
  running.set_state(v1::SUCCEEDED);
  EXPECT_THAT(Scrape(node, {}, {running}), Not(HasSubstr("overlapd_job_energy_joules_total{")));
  EXPECT_THAT(Scrape(node, {}, {JobOn("job-8", {0}, v1::RUNNING, "fc1")}),
              Not(HasSubstr("overlapd_job_energy_joules_total{")));
}

TEST(MetricsTest, AlertRulesNameOnlyMetricsWeExport) {
  std::ifstream in(std::string(OVERLAP_SOURCE_DIR) + "/deploy/prometheus/overlapd-alerts.yml");
  std::stringstream rules;
  rules << in.rdbuf();
  ASSERT_FALSE(rules.str().empty());
  // Every family, populated (telemetry valid, a job with a finished op).
  v1::GetNodeInfoResponse node;
  v1::Device* d = node.add_devices();
  d->set_telemetry_valid(true);
  std::set<std::string> exported;
  for (const prometheus::MetricFamily& f : BuildMetrics(
           node, v1::GetStatsResponse{}, {JobOn("j", {0}, v1::RUNNING, "op")}, kNowMs, kOptions)) {
    exported.insert(f.name);
  }
  const std::regex metric("overlapd_[a-z_]+");
  const std::string text = rules.str();
  int named = 0;
  for (std::sregex_iterator it(text.begin(), text.end(), metric), end; it != end; ++it) {
    EXPECT_TRUE(exported.count(it->str())) << it->str() << " is not exported";
    ++named;
  }
  EXPECT_GE(named, 5);
}

TEST(MetricsExporterTest, ServesTheDaemonsFiguresAndRefusesATakenPort) {
  testing::TempDir dir;
  engine::HostEngineOptions engine_options;
  engine_options.device_count = 2;
  auto engine = engine::CreateHostEngine(engine_options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto store = jobs::JobStore::Open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status();
  testing::FakeRunner runner;
  auto queue = jobs::JobQueue::Create(
      store->get(),
      [&](const jobs::JobRecord& j, const jobs::GraphPtr&, const runner::RunHooks& h) {
        return runner.Run(j, h);
      },
      jobs::JobQueueOptions{});
  ASSERT_TRUE(queue.ok()) << queue.status();
  node::NodeState node(**queue, **engine, dir.path());
  node.counters().jobs_submitted = 3;

  auto exporter = MetricsExporter::Start("127.0.0.1:0", node, **queue, kOptions);
  ASSERT_TRUE(exporter.ok()) << exporter.status();
  const int port = (*exporter)->port();
  ASSERT_GT(port, 0);
  const std::string response = testing::HttpGet(port, "/metrics");
  EXPECT_THAT(response, HasSubstr("200 OK"));
  EXPECT_THAT(response, HasSubstr("overlapd_healthy{backend=\"host\"} 1\n"));
  EXPECT_THAT(response, HasSubstr("overlapd_jobs_submitted_total 3\n"));
  EXPECT_THAT(response, HasSubstr("overlapd_device_memory_used_bytes{modelName=\"host-rank-1\","));
  EXPECT_THAT(response, HasSubstr(",cuda_device=\"1\"} 0\n"));
  const std::string health = testing::HttpGet(port, "/healthz");
  EXPECT_THAT(health, ::testing::StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(health, ::testing::EndsWith("\r\n\r\nok\n"));
  (*queue)->StartDrain();
  EXPECT_THAT(testing::HttpGet(port, "/healthz"), ::testing::StartsWith("HTTP/1.1 503"));

  auto second = MetricsExporter::Start(absl::StrCat("127.0.0.1:", port), node, **queue, kOptions);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("metrics_listen"));
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("Address already in use"));
  exporter->reset();
  (*queue)->Shutdown();
}

}  // namespace
}  // namespace overlap::rpc

namespace overlap::rpc {
namespace {

// The endpoint answers only GET (and HEAD) of its path, and says why otherwise.
TEST(HttpEndpointTest, AnswersItsPathAndRefusesTheRest) {
  int calls = 0;
  auto endpoint = HttpEndpoint::Start("127.0.0.1:0", {{"/metrics", [&calls] {
                                                         ++calls;
                                                         HttpResponse response;
                                                         response.body = "up 1\n";
                                                         return response;
                                                       }}});
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  const int port = (*endpoint)->port();
  const std::string ok = testing::HttpGet(port, "/metrics?x=1");
  EXPECT_THAT(ok, ::testing::StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(ok, HasSubstr("Content-Length: 5\r\n"));
  EXPECT_THAT(ok, ::testing::EndsWith("\r\n\r\nup 1\n"));
  EXPECT_THAT(testing::HttpGet(port, "/"), ::testing::StartsWith("HTTP/1.1 404 Not Found"));
  EXPECT_EQ(calls, 1);

  EXPECT_EQ(HttpEndpoint::Start("127.0.0.1:x", {{"/metrics", nullptr}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HttpEndpoint::Start(absl::StrCat("127.0.0.1:", port), {{"/metrics", nullptr}})
                .status()
                .code(),
            absl::StatusCode::kFailedPrecondition);
}

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

HttpEndpoint::Routes TextRoutes() {
  HttpEndpoint::Routes routes;
  for (const char* path : {"/healthz", "/metrics"}) {
    routes[path] = [path] {
      HttpResponse response;
      response.body = absl::StrCat(path, " ok\n");
      return response;
    };
  }
  return routes;
}

// Connections that send nothing, or half a request, hold only their own
// socket: scrapes beside them are answered at once (one connection at a time,
// 32 idle ones held /healthz for 50 s), and each idle one is closed after the
// idle timeout.
TEST(HttpEndpointTest, IdleAndHalfSentConnectionsDoNotHoldUpScrapes) {
  HttpEndpointOptions options;
  options.idle_timeout = milliseconds(1000);
  options.request_timeout = milliseconds(3000);
  auto endpoint = HttpEndpoint::Start("127.0.0.1:0", TextRoutes(), options);
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  const int port = (*endpoint)->port();
  std::vector<int> idle;
  const auto opened = Clock::now();
  for (int i = 0; i < 32; ++i) idle.push_back(testing::OpenIdleConnection(port));
  for (int i = 0; i < 8; ++i) {
    idle.push_back(testing::OpenIdleConnection(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n"));
  }
  for (int fd : idle) ASSERT_GE(fd, 0);

  const auto asked = Clock::now();
  EXPECT_THAT(testing::HttpGet(port, "/healthz", 20), ::testing::StartsWith("HTTP/1.1 200 OK"));
  EXPECT_THAT(testing::HttpGet(port, "/metrics", 20), ::testing::EndsWith("/metrics ok\n"));
  EXPECT_LT(Clock::now() - asked, seconds(5)) << "answered behind the idle connections";

  // Closed by the idle timeout (1 s), with a wide margin for a loaded machine.
  for (int fd : idle) {
    EXPECT_TRUE(testing::ClosedBy(fd, opened + options.idle_timeout + seconds(10)));
    ::close(fd);
  }
}

// Past max_connections the oldest connection still waiting for its request
// makes room; a request that grows past max_request_bytes is answered 431.
TEST(HttpEndpointTest, PastTheCapTheOldestWaitingConnectionMakesRoom) {
  HttpEndpointOptions options;
  options.idle_timeout = seconds(60);
  options.request_timeout = seconds(60);
  options.max_connections = 4;
  options.max_request_bytes = 1024;
  auto endpoint = HttpEndpoint::Start("127.0.0.1:0", TextRoutes(), options);
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  const int port = (*endpoint)->port();
  std::vector<int> idle;
  for (int i = 0; i < 4; ++i) {
    idle.push_back(testing::OpenIdleConnection(port));
    ASSERT_GE(idle.back(), 0);
  }
  EXPECT_THAT(testing::HttpGet(port, "/healthz", 20), ::testing::StartsWith("HTTP/1.1 200"));
  EXPECT_TRUE(testing::ClosedBy(idle[0], Clock::now() + seconds(10)));

  const std::string big = "GET /metrics HTTP/1.1\r\nX-Filler: " + std::string(4096, 'a');
  const int fd = testing::OpenIdleConnection(port, big);
  ASSERT_GE(fd, 0);
  std::string response(64, '\0');
  const ssize_t n = ::read(fd, response.data(), response.size());
  ASSERT_GT(n, 0);
  response.resize(static_cast<size_t>(n));
  EXPECT_THAT(response, ::testing::StartsWith("HTTP/1.1 431 Request Header Fields Too Large"));
  ::close(fd);
  for (int idle_fd : idle) ::close(idle_fd);
}

// Handlers run on a pool: a scrape whose handler is slow, and a client that
// never reads its 16 MiB answer, leave /healthz answered.
TEST(HttpEndpointTest, ASlowHandlerOrAClientThatDoesNotReadHoldsOnlyItself) {
  absl::Notification release;
  HttpEndpoint::Routes routes = TextRoutes();
  routes["/slow"] = [&release] {
    release.WaitForNotificationWithTimeout(absl::Seconds(60));
    return HttpResponse{};
  };
  routes["/big"] = [] {
    HttpResponse response;
    response.body = std::string(16 << 20, 'x');
    return response;
  };
  HttpEndpointOptions options;
  options.write_timeout = milliseconds(1000);
  auto endpoint = HttpEndpoint::Start("127.0.0.1:0", routes, options);
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  const int port = (*endpoint)->port();
  const int slow = testing::OpenIdleConnection(port, "GET /slow HTTP/1.0\r\n\r\n");
  // A small receive window, so that the answer cannot all sit in buffers.
  const int unread = ::socket(AF_INET, SOCK_STREAM, 0);
  const int window = 4096;
  ::setsockopt(unread, SOL_SOCKET, SO_RCVBUF, &window, sizeof(window));
  const timeval limit{20, 0};  // a server that never drops it fails, not hangs, the test
  ::setsockopt(unread, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(unread, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  const std::string big = "GET /big HTTP/1.0\r\n\r\n";
  ASSERT_EQ(::write(unread, big.data(), big.size()), static_cast<ssize_t>(big.size()));
  ASSERT_GE(slow, 0);
  const auto asked = Clock::now();
  EXPECT_THAT(testing::HttpGet(port, "/healthz", 20), ::testing::EndsWith("/healthz ok\n"));
  EXPECT_LT(Clock::now() - asked, seconds(5));
  // The answer not taken within write_timeout (1 s) is dropped with its
  // connection: read afterwards, it ends short of its 16 MiB.
  std::this_thread::sleep_for(seconds(6));
  size_t received = 0;
  char buffer[65536];
  for (ssize_t n; (n = ::recv(unread, buffer, sizeof(buffer), 0)) > 0;) received += n;
  EXPECT_LT(received, size_t{16} << 20);
  release.Notify();
  EXPECT_TRUE(testing::ClosedBy(slow, Clock::now() + seconds(15)));
  ::close(slow);
  ::close(unread);
}

// Stopping the endpoint does not wait for idle clients: their connections are
// closed at once (each would otherwise hold it up to the 60 s idle timeout).
TEST(HttpEndpointTest, StopsPromptlyWithIdleConnectionsOpen) {
  HttpEndpointOptions options;
  options.idle_timeout = seconds(60);
  options.request_timeout = seconds(60);
  auto endpoint = HttpEndpoint::Start("127.0.0.1:0", TextRoutes(), options);
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  const int port = (*endpoint)->port();
  std::vector<int> idle;
  for (int i = 0; i < 16; ++i) idle.push_back(testing::OpenIdleConnection(port));
  idle.push_back(testing::OpenIdleConnection(port, "GET /metr"));
  ASSERT_THAT(testing::HttpGet(port, "/healthz", 20), ::testing::StartsWith("HTTP/1.1 200"));
  const auto stopping = Clock::now();
  endpoint->reset();
  EXPECT_LT(Clock::now() - stopping, seconds(10));
  for (int fd : idle) {
    ASSERT_GE(fd, 0);
    EXPECT_TRUE(testing::ClosedBy(fd, Clock::now() + seconds(5)));
    ::close(fd);
  }
}

}  // namespace
}  // namespace overlap::rpc
