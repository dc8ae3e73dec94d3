// store_load: load on the daemon's job store through its API. Submitters send
// tiny jobs as fast as the daemon takes them while getters read random jobs
// back; after the run it prints submissions per second and GetJob latency
// percentiles (a table, and JSON with --json). --fill N instead submits N jobs
// and waits until they have all ended, to grow the store before a measurement.
//
//   store_load --addr unix:/tmp/s.sock --seconds 20 --submitters 4 --getters 4
//   store_load --addr unix:/tmp/s.sock --fill 10500
//
// bench/store_load.sh runs both around a daemon: the figures of an empty
// store beside those of one that holds keep_finished_jobs (10,000) jobs.
#include <grpcpp/create_channel.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "overlap/v1/overlap.grpc.pb.h"

namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t index = std::min(values.size() - 1, static_cast<size_t>(p * values.size()));
  return values[index];
}

// A job that takes the executor a few milliseconds: the store is what is measured.
std::string TinyJob(int device) {
  return absl::StrFormat(
      "name: store-load\ndevices: [%d]\ndtype: fp32\niterations: 1\nwarmup: 0\nverify: false\n"
      "layer_step: false\ntimeline: false\n"
      "ops:\n  - {id: g, type: gemm, m: 16, k: 16, n: 16}\n",
      device);
}

struct Samples {
  std::mutex mu;
  std::vector<double> submit_ms;
  std::vector<double> get_ms;
  std::vector<std::string> ids;
  int64_t refused = 0;
  int64_t get_errors = 0;
};

int64_t StoredJobs(overlap::v1::Node::Stub& node, int64_t* unfinished) {
  grpc::ClientContext context;
  overlap::v1::GetStatsRequest request;
  overlap::v1::GetStatsResponse stats;
  if (!node.GetStats(&context, request, &stats).ok()) return -1;
  int64_t all = 0;
  *unfinished = 0;
  for (const auto& [state, count] : stats.jobs_by_state()) {
    all += count;
    if (state == "QUEUED" || state == "RUNNING") *unfinished += count;
  }
  return all;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"store_load: submit and read jobs as fast as overlapd takes them"};
  std::string address;
  double seconds = 20;
  int submitters = 4, getters = 4, devices = 4;
  int64_t fill = 0;
  std::string json_path, label = "run";
  app.add_option("--addr", address, "overlapd address")->required();
  app.add_option("--seconds", seconds, "how long to measure");
  app.add_option("--submitters", submitters, "threads submitting jobs");
  app.add_option("--getters", getters, "threads reading jobs back (GetJob)");
  app.add_option("--devices", devices, "spread the jobs over this many devices");
  app.add_option("--fill", fill, "submit this many jobs and wait for them to end, then exit");
  app.add_option("--label", label, "name of this run in the output");
  app.add_option("--json", json_path, "append the figures to this JSON-lines file");
  CLI11_PARSE(app, argc, argv);

  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  auto jobs = overlap::v1::Jobs::NewStub(channel);
  auto node = overlap::v1::Node::NewStub(channel);
  int64_t unfinished = 0;
  const int64_t stored_before = StoredJobs(*node, &unfinished);
  if (stored_before < 0) {
    std::cerr << "store_load: cannot reach overlapd at " << address << "\n";
    return 2;
  }

  Samples samples;
  std::atomic<bool> stop{false};
  std::atomic<int64_t> submitted{0};
  const int64_t target = fill > 0 ? fill : -1;
  std::vector<std::thread> threads;
  for (int t = 0; t < submitters; ++t) {
    threads.emplace_back([&, t] {
      int device = t % devices;
      while (!stop.load()) {
        if (target > 0 && submitted.fetch_add(1) >= target) break;
        overlap::v1::SubmitJobRequest request;
        request.set_spec(TinyJob(device));
        device = (device + 1) % devices;
        overlap::v1::SubmitJobResponse response;
        grpc::ClientContext context;
        const auto start = Clock::now();
        const grpc::Status status = jobs->SubmitJob(&context, request, &response);
        const double ms = Ms(Clock::now() - start);
        std::lock_guard<std::mutex> lock(samples.mu);
        if (status.ok()) {
          samples.submit_ms.push_back(ms);
          samples.ids.push_back(response.job().id());
        } else {
          ++samples.refused;
          if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
          }
        }
      }
    });
  }
  for (int t = 0; fill == 0 && t < getters; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(1234 + t);
      while (!stop.load()) {
        std::string id;
        {
          std::lock_guard<std::mutex> lock(samples.mu);
          if (!samples.ids.empty()) {
            id = samples.ids[std::uniform_int_distribution<size_t>(0, samples.ids.size() - 1)(rng)];
          }
        }
        if (id.empty()) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
          continue;
        }
        overlap::v1::GetJobRequest request;
        request.set_id(id);
        overlap::v1::GetJobResponse response;
        grpc::ClientContext context;
        const auto start = Clock::now();
        const grpc::Status status = jobs->GetJob(&context, request, &response);
        const double ms = Ms(Clock::now() - start);
        std::lock_guard<std::mutex> lock(samples.mu);
        if (status.ok()) {
          samples.get_ms.push_back(ms);
        } else {
          ++samples.get_errors;
        }
      }
    });
  }

  const auto start = Clock::now();
  if (fill > 0) {
    for (std::thread& t : threads) t.join();
    threads.clear();
    // Until every job has ended, printing progress.
    while (true) {
      const int64_t stored = StoredJobs(*node, &unfinished);
      std::cerr << "store_load: " << stored << " jobs stored, " << unfinished << " not ended\n";
      if (unfinished == 0) break;
      std::this_thread::sleep_for(std::chrono::seconds(2));
    }
  } else {
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  }
  stop.store(true);
  for (std::thread& t : threads) t.join();
  const double elapsed_s = Ms(Clock::now() - start) / 1000;
  const int64_t stored_after = StoredJobs(*node, &unfinished);

  std::lock_guard<std::mutex> lock(samples.mu);
  const double submits_per_s = samples.submit_ms.size() / elapsed_s;
  nlohmann::json row = {{"label", label},
                        {"stored_before", stored_before},
                        {"stored_after", stored_after},
                        {"unfinished_after", unfinished},
                        {"seconds", elapsed_s},
                        {"submitted", samples.submit_ms.size()},
                        {"refused", samples.refused},
                        {"submits_per_s", submits_per_s},
                        {"submit_p50_ms", Percentile(samples.submit_ms, 0.50)},
                        {"submit_p99_ms", Percentile(samples.submit_ms, 0.99)},
                        {"gets", samples.get_ms.size()},
                        {"get_errors", samples.get_errors},
                        {"get_p50_ms", Percentile(samples.get_ms, 0.50)},
                        {"get_p99_ms", Percentile(samples.get_ms, 0.99)}};
  std::printf("%-10s %13s %9s %9s %10s %10s %8s %10s %10s\n", "run", "jobs so far", "submits",
              "submit/s", "submit p50", "submit p99", "gets", "get p50", "get p99");
  std::printf("%-10s %6lld->%-6lld %9zu %9.1f %8.2fms %8.2fms %8zu %8.2fms %8.2fms\n",
              label.c_str(), static_cast<long long>(stored_before),
              static_cast<long long>(stored_after), samples.submit_ms.size(), submits_per_s,
              row["submit_p50_ms"].get<double>(), row["submit_p99_ms"].get<double>(),
              samples.get_ms.size(), row["get_p50_ms"].get<double>(),
              row["get_p99_ms"].get<double>());
  if (!json_path.empty()) std::ofstream(json_path, std::ios::app) << row.dump() << "\n";
  return 0;
}
