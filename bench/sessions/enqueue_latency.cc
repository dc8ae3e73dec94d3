// session_enqueue_latency: the host time a session command costs, beside a
// gRPC round trip to the same daemon (issue 56's goal: the client's call to
// the daemon's enqueue of the op <= 20 us p50).
//
// One rank of a tp 1 session with one tiny op posts --commands commands one
// at a time (post, wait) and then back to back (--burst posted, then waited
// for), and reads each command's posted_ns and enqueued_ns from the ring
// (common/session_ring.h). Beside them, --commands unary calls to the
// daemon's gRPC socket (Node.GetNodeInfo and Node.GetStats) time what the
// same question costs through the API.
//
//   session_enqueue_latency --socket /tmp/x/overlapd-session.sock
//     --addr unix:/tmp/x/overlapd.sock --json out.json  (one command line)
//
// bench/sessions/enqueue_latency.sh starts a host daemon and runs it.
#include <grpcpp/create_channel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/session/overlapd_session.h"
#include "nlohmann/json.hpp"
#include "overlap/v1/overlap.grpc.pb.h"

namespace {

using overlap::session::Session;
using overlap::session::SharedBuffer;
using Clock = std::chrono::steady_clock;

// A tp 1 graph whose op costs the host backend a few microseconds.
constexpr char kGraph[] =
    "name: enqueue-latency\n"
    "dtype: fp32\n"
    "mesh: {tp: 1, dp: 1}\n"
    "ops:\n"
    "  - {id: g, type: gemm, m: 64, k: 64, n: 64}\n";

struct Figures {
  double p50 = 0, p90 = 0, p99 = 0, max = 0;
  size_t count = 0;
};

// Nearest-rank percentiles of `us`.
Figures Summarize(std::vector<double> us) {
  Figures f;
  f.count = us.size();
  if (us.empty()) return f;
  std::sort(us.begin(), us.end());
  auto at = [&](double p) {
    const size_t rank = static_cast<size_t>(std::max(1.0, std::ceil(p * us.size())));
    return us[std::min(rank, us.size()) - 1];
  };
  f.p50 = at(0.50);
  f.p90 = at(0.90);
  f.p99 = at(0.99);
  f.max = us.back();
  return f;
}

double Us(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

double EnqueueUs(const overlap::SessionCommand& c) {
  return static_cast<double>(c.enqueued_ns - c.posted_ns) / 1e3;
}

// The rank's tensors, registered; kept alive while the session runs.
absl::StatusOr<std::vector<SharedBuffer>> RegisterAll(Session& s) {
  std::vector<SharedBuffer> buffers;
  for (const overlap::session::TensorNeed& need : s.needs()) {
    absl::StatusOr<SharedBuffer> buffer = SharedBuffer::Create(static_cast<size_t>(need.bytes));
    if (!buffer.ok()) return buffer.status();
    std::fill_n(static_cast<char*>(buffer->data()), need.bytes, 0);
    if (absl::Status r =
            s.Register(need.op, need.tensor, buffer->fd(), 0, need.bytes, buffer->data());
        !r.ok()) {
      return r;
    }
    buffers.push_back(*std::move(buffer));
  }
  return buffers;
}

struct SessionSamples {
  std::vector<double> single_enqueue_us;  // post, wait: posted -> enqueued
  std::vector<double> single_round_us;    // post, wait: Post called -> Wait returned
  std::vector<double> burst_enqueue_us;   // --burst posted, then waited for
};

absl::Status Measure(Session& s, int commands, int warmup, int burst, SessionSamples& out) {
  constexpr absl::Duration kTimeout = absl::Seconds(30);
  for (int i = 0; i < warmup + commands; ++i) {
    const Clock::time_point start = Clock::now();
    absl::StatusOr<uint64_t> seq = s.Post(0);
    if (!seq.ok()) return seq.status();
    if (absl::Status w = s.Wait(*seq, kTimeout); !w.ok()) return w;
    const Clock::time_point end = Clock::now();
    if (i < warmup) continue;
    out.single_enqueue_us.push_back(EnqueueUs(s.Command(*seq)));
    out.single_round_us.push_back(Us(end - start));
  }
  for (int done = 0; done < commands;) {
    const int n = std::min(burst, commands - done);
    std::vector<uint64_t> seqs;
    for (int i = 0; i < n; ++i) {
      absl::StatusOr<uint64_t> seq = s.Post(0);
      if (!seq.ok()) return seq.status();
      seqs.push_back(*seq);
    }
    if (absl::Status w = s.Wait(seqs.back(), kTimeout); !w.ok()) return w;
    for (uint64_t seq : seqs) out.burst_enqueue_us.push_back(EnqueueUs(s.Command(seq)));
    done += n;
  }
  return absl::OkStatus();
}

// --commands unary calls of `call` (true when it succeeded): their times, in us.
template <typename Call>
std::vector<double> TimeRpc(int commands, int warmup, Call call, int* failures) {
  std::vector<double> us;
  for (int i = 0; i < warmup + commands; ++i) {
    const Clock::time_point start = Clock::now();
    const bool ok = call();
    const Clock::time_point end = Clock::now();
    if (!ok) ++*failures;
    if (i >= warmup) us.push_back(Us(end - start));
  }
  return us;
}

nlohmann::json ToJson(const Figures& f) {
  return {{"count", f.count},
          {"p50_us", f.p50},
          {"p90_us", f.p90},
          {"p99_us", f.p99},
          {"max_us", f.max}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"session_enqueue_latency: a session command's host time beside a gRPC round trip"};
  std::string socket_path, address, json_path, name = "enqueue-latency";
  int commands = 2000, warmup = 100, burst = 32;
  app.add_option("--socket", socket_path, "the daemon's session socket")->required();
  app.add_option("--addr", address, "the daemon's gRPC address (unix:PATH)")->required();
  app.add_option("--commands", commands, "commands (and RPCs) measured in each mode")
      ->check(CLI::PositiveNumber);
  app.add_option("--warmup", warmup, "commands (and RPCs) not measured first");
  app.add_option("--burst", burst, "commands posted back to back before waiting")
      ->check(CLI::Range(1, static_cast<int>(overlap::kSessionRingSlots)));
  app.add_option("--name", name, "the session's name");
  app.add_option("--json", json_path, "write the figures to this JSON file");
  CLI11_PARSE(app, argc, argv);

  absl::StatusOr<std::unique_ptr<Session>> session = Session::Open(socket_path, name, kGraph, 0);
  if (!session.ok()) {
    std::cerr << "session_enqueue_latency: open: " << session.status() << "\n";
    return 1;
  }
  absl::StatusOr<std::vector<SharedBuffer>> buffers = RegisterAll(**session);
  absl::Status started = buffers.ok() ? (*session)->Start() : buffers.status();
  SessionSamples samples;
  if (started.ok()) started = Measure(**session, commands, warmup, burst, samples);
  if (!started.ok()) {
    std::cerr << "session_enqueue_latency: " << started << "\n";
    return 1;
  }
  const std::string backend = (*session)->backend();
  (*session)->Close();

  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  auto node = overlap::v1::Node::NewStub(channel);
  int rpc_failures = 0;
  const std::vector<double> info_us = TimeRpc(
      commands, warmup,
      [&] {
        grpc::ClientContext context;
        overlap::v1::GetNodeInfoRequest request;
        overlap::v1::GetNodeInfoResponse reply;
        return node->GetNodeInfo(&context, request, &reply).ok();
      },
      &rpc_failures);
  const std::vector<double> stats_us = TimeRpc(
      commands, warmup,
      [&] {
        grpc::ClientContext context;
        overlap::v1::GetStatsRequest request;
        overlap::v1::GetStatsResponse reply;
        return node->GetStats(&context, request, &reply).ok();
      },
      &rpc_failures);

  const std::vector<std::pair<std::string, Figures>> rows = {
      {"session post->enqueued (one at a time)", Summarize(samples.single_enqueue_us)},
      {absl::StrCat("session post->enqueued (", burst, " back to back)"),
       Summarize(samples.burst_enqueue_us)},
      {"session Post+Wait round trip", Summarize(samples.single_round_us)},
      {"gRPC Node.GetNodeInfo round trip", Summarize(info_us)},
      {"gRPC Node.GetStats round trip", Summarize(stats_us)},
  };
  std::printf("# backend %s, %d commands a mode, %d warm-up\n", backend.c_str(), commands, warmup);
  std::printf("%-42s %8s %9s %9s %9s %9s\n", "what", "count", "p50_us", "p90_us", "p99_us",
              "max_us");
  for (const auto& [what, f] : rows) {
    std::printf("%-42s %8zu %9.1f %9.1f %9.1f %9.1f\n", what.c_str(), f.count, f.p50, f.p90, f.p99,
                f.max);
  }
  if (rpc_failures > 0) std::printf("# %d gRPC calls failed\n", rpc_failures);

  if (!json_path.empty()) {
    nlohmann::json out = {{"backend", backend},
                          {"commands", commands},
                          {"warmup", warmup},
                          {"burst", burst},
                          {"enqueue_single", ToJson(rows[0].second)},
                          {"enqueue_burst", ToJson(rows[1].second)},
                          {"session_round_trip", ToJson(rows[2].second)},
                          {"grpc_get_node_info", ToJson(rows[3].second)},
                          {"grpc_get_stats", ToJson(rows[4].second)},
                          {"grpc_failures", rpc_failures}};
    std::ofstream(json_path) << out.dump(2) << "\n";
  }
  return rpc_failures > 0 ? 1 : 0;
}
