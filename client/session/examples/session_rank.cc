// overlapd-session-rank: one rank of a session, as a training process would
// run it through the C++ client library (client/session/overlapd_session.h),
// for tests and for trying a node's session socket by hand.
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/session/overlapd_session.h"
#include "common/dtype.h"
#include "common/stats.h"
#ifdef OVERLAPD_SESSION_CUDA
#include <cuda_runtime_api.h>

#include "client/session/cuda_shared_buffer.h"
#endif

namespace {

using overlap::session::SharedBuffer;
using overlap::session::Tensor;
using overlap::session::TensorName;
using overlap::session::TensorNeed;

constexpr char kDescription[] =
    "Runs one rank of a session of a layer graph against overlapd's session socket.\n"
    "It opens (or joins) the session NAME of the calling user as rank RANK, allocates every\n"
    "tensor the daemon asks for as a memfd, fills each op's X and W with the deterministic\n"
    "pattern below, registers them, starts, posts each op of the graph in order --steps\n"
    "times (waiting for each), and writes each op's Y to OUT_DIR/<op>.rank<RANK>.npy\n"
    "(float32, rows x cols, converted from the graph's dtype).\n"
    "\n"
    "The fill: element i of tensor T (X or W) of op OP on rank R is\n"
    "  SeededValue(TensorSeed(--seed, OP, T, R), i)\n"
    "(common/dtype.h, client/session/overlapd_session.h), stored in the graph's dtype.\n"
    "--json prints the host time from each call to the daemon's enqueue and, of it, to the\n"
    "daemon's lanes taking the command (p50, p99 over the steps after the first), from the\n"
    "ring's stamps. The rank closes the session when done (the daemon then ends it closed,\n"
    "not failed).\n"
    "Exit status: 0 when every step completed; 1 with the daemon's code and message on\n"
    "stderr otherwise.";

absl::Status WriteNpy(const std::string& path, const TensorNeed& need, const void* data) {
  overlap::DType dtype;
  absl::StatusOr<overlap::DType> parsed = overlap::ParseDType(need.dtype);
  if (!parsed.ok()) return parsed.status();
  dtype = *parsed;
  std::string header = absl::StrFormat(
      "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }", need.rows, need.cols);
  // Magic (6) + version (2) + length (2) + header, padded to 64 bytes with a newline.
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  out.write("\x93NUMPY\x01\x00", 8);
  const uint16_t length = static_cast<uint16_t>(header.size());
  out.put(static_cast<char>(length & 0xff));
  out.put(static_cast<char>(length >> 8));
  out << header;
  const size_t elements = static_cast<size_t>(need.rows * need.cols);
  for (size_t i = 0; i < elements; ++i) {
    const float value = overlap::LoadAsFloat(data, dtype, i);
    out.write(reinterpret_cast<const char*>(&value), sizeof(value));
  }
  if (!out) return absl::UnavailableError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

// --log-phases: when each step of a rank's setup began (seconds on
// CLOCK_MONOTONIC, the daemon's clock), on stderr, so that a slow start
// shows where it went: the fill, the copies to the device, the
// registrations, the start.
bool log_phases = false;
void Phase(const std::string& what) {
  if (!log_phases) return;
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  std::cerr << absl::StrFormat("overlapd-session-rank: %.6f %s\n",
                               static_cast<double>(now.tv_sec) + now.tv_nsec / 1e9, what);
}

int Fail(const absl::Status& status) {
  std::cerr << "overlapd-session-rank: " << absl::StatusCodeToString(status.code()) << ": "
            << status.message() << "\n";
  return 1;
}

// The rank's fill of tensor `need` (X or W): the deterministic pattern, in
// the graph's dtype, into `out` (need.bytes).
absl::Status Fill(const TensorNeed& need, uint64_t seed, int rank, void* out) {
  absl::StatusOr<overlap::DType> dtype = overlap::ParseDType(need.dtype);
  if (!dtype.ok()) return dtype.status();
  const uint64_t tensor_seed = overlap::session::TensorSeed(seed, need.op, need.tensor, rank);
  const size_t elements = static_cast<size_t>(need.rows * need.cols);
  for (size_t i = 0; i < elements; ++i) {
    overlap::StoreFromFloat(out, *dtype, i, overlap::SeededValue(tensor_seed, i));
  }
  return absl::OkStatus();
}

// The host time of each timed command (the steps after the first, whose GEMMs
// are tuned then), from the ring's stamps: the call to the daemon's enqueue
// and, of it, the call to the lanes taking the command (their wake-up).
// By op (the step's first command, its second...): a step's later commands
// are posted right after its first, so their call-to-enqueue includes the
// enqueue of the ones before them.
struct CallTimes {
  std::vector<double> enqueue_us;
  std::vector<double> take_us;  // empty from a daemon that does not stamp taken_ns
  std::map<int, std::vector<double>> enqueue_us_by_op;

  void Add(const overlap::SessionCommand& command) {
    if (command.enqueued_ns <= 0) return;
    const double us = static_cast<double>(command.enqueued_ns - command.posted_ns) / 1e3;
    enqueue_us.push_back(us);
    enqueue_us_by_op[command.op].push_back(us);
    if (command.taken_ns > 0) {
      take_us.push_back(static_cast<double>(command.taken_ns - command.posted_ns) / 1e3);
    }
  }
  std::string Json() const {
    using overlap::Percentile;
    std::vector<std::string> by_op;
    for (const auto& [op, us] : enqueue_us_by_op) {
      by_op.push_back(absl::StrFormat("\"%d\": {\"p50\": %.2f, \"p99\": %.2f}", op,
                                      Percentile(us, 50), Percentile(us, 99)));
    }
    return absl::StrFormat(
        "\"timed_commands\": %d, \"enqueue_p50_us\": %.2f, \"enqueue_p99_us\": %.2f, "
        "\"take_p50_us\": %.2f, \"take_p99_us\": %.2f, \"enqueue_us_by_op\": {%s}",
        enqueue_us.size(), Percentile(enqueue_us, 50), Percentile(enqueue_us, 99),
        Percentile(take_us, 50), Percentile(take_us, 99), absl::StrJoin(by_op, ", "));
  }
};

// --interval-ms: the rest of a training step (data, optimizer) between two
// steps, during which the rank posts nothing.
void BetweenSteps(double interval_ms) {
  if (interval_ms > 0) ::usleep(static_cast<useconds_t>(interval_ms * 1e3));
}

bool IsInput(const TensorNeed& need) {
  return need.tensor == Tensor::kX || need.tensor == Tensor::kW;
}

std::string NpyPath(const std::string& dir, const TensorNeed& need, int rank) {
  return absl::StrCat(dir, "/", need.op,
                      need.tensor == Tensor::kY ? "" : absl::StrCat(".", TensorName(need.tensor)),
                      ".rank", rank, ".npy");
}

// One rank on the host backend: tensors in memfds, each op posted and
// waited for in turn, each command's times kept for --json.
absl::Status RunOnHost(overlap::session::Session& s, uint64_t seed, int steps, double interval_ms,
                       const std::string& out_dir, bool dump_inputs,
                       std::vector<std::string>* timings, CallTimes* times) {
  std::map<std::pair<std::string, int>, SharedBuffer> buffers;
  for (const TensorNeed& need : s.needs()) {
    absl::StatusOr<SharedBuffer> buffer = SharedBuffer::Create(
        static_cast<size_t>(need.bytes), absl::StrCat(need.op, ".", TensorName(need.tensor)));
    if (!buffer.ok()) return buffer.status();
    if (IsInput(need)) {
      if (absl::Status f = Fill(need, seed, s.rank(), buffer->data()); !f.ok()) return f;
      if (dump_inputs && !out_dir.empty()) {
        if (absl::Status w = WriteNpy(NpyPath(out_dir, need, s.rank()), need, buffer->data());
            !w.ok()) {
          return w;
        }
      }
    }
    if (absl::Status r =
            s.Register(need.op, need.tensor, buffer->fd(), 0, need.bytes, buffer->data());
        !r.ok()) {
      return r;
    }
    buffers.emplace(std::make_pair(need.op, static_cast<int>(need.tensor)), *std::move(buffer));
  }
  if (absl::Status started = s.Start(); !started.ok()) return started;

  for (int step = 0; step < steps; ++step) {
    if (step > 0) BetweenSteps(interval_ms);
    for (size_t op = 0; op < s.ops().size(); ++op) {
      absl::StatusOr<uint64_t> seq = s.Post(static_cast<int>(op));
      if (!seq.ok()) return seq.status();
      if (absl::Status done = s.Wait(*seq, absl::Seconds(120)); !done.ok()) return done;
      const overlap::SessionCommand command = s.Command(*seq);
      if (step > 0) times->Add(command);
      timings->push_back(
          absl::StrFormat("{\"seq\": %d, \"op\": \"%s\", \"posted_ns\": %d, \"taken_ns\": %d, "
                          "\"enqueued_ns\": %d, \"done_ns\": %d}",
                          *seq, s.ops()[op], command.posted_ns, command.taken_ns,
                          command.enqueued_ns, command.done_ns));
    }
  }
  if (out_dir.empty()) return absl::OkStatus();
  for (const TensorNeed& need : s.needs()) {
    if (need.tensor != Tensor::kY) continue;
    const SharedBuffer& y = buffers.at({need.op, static_cast<int>(Tensor::kY)});
    if (absl::Status w = WriteNpy(NpyPath(out_dir, need, s.rank()), need, y.data()); !w.ok()) {
      return w;
    }
  }
  return absl::OkStatus();
}

#ifdef OVERLAPD_SESSION_CUDA
absl::Status Cuda(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(what, ": ", cudaGetErrorName(error)));
}

// One rank on the CUDA backend: tensors in exportable device memory, every
// step's ops posted back to back with the stream-ordered signals between
// them (the host never waits for the GPU inside the loop), the device time
// of the steps measured with events on the rank's stream.
absl::Status RunOnCuda(overlap::session::Session& s, uint64_t seed, int steps, double interval_ms,
                       const std::string& out_dir, bool dump_inputs, std::string* summary,
                       CallTimes* times) {
  using overlap::session::CudaSharedBuffer;
  absl::StatusOr<int> device = overlap::session::CudaDeviceForBusId(s.device_pci_bus_id());
  if (!device.ok()) return device.status();
  if (absl::Status c = Cuda(cudaSetDevice(*device), "cudaSetDevice"); !c.ok()) return c;
  std::map<std::pair<std::string, int>, CudaSharedBuffer> buffers;
  const CudaSharedBuffer* signals = nullptr;
  cudaStream_t stream = nullptr;
  if (absl::Status c =
          Cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
      !c.ok()) {
    return c;
  }
  // Inputs go to the device from pinned memory on the rank's own stream: one
  // DMA each. A pageable cudaMemcpy stages them in small pieces, each a turn
  // of the GPU that other processes' work (the daemon's) time-slices with.
  size_t staging_bytes = 0;
  for (const TensorNeed& need : s.needs()) {
    if (IsInput(need)) staging_bytes = std::max(staging_bytes, static_cast<size_t>(need.bytes));
  }
  void* staging = nullptr;
  if (staging_bytes > 0) {
    if (absl::Status c = Cuda(cudaMallocHost(&staging, staging_bytes), "cudaMallocHost"); !c.ok()) {
      return c;
    }
  }
  absl::Status filled = absl::OkStatus();
  for (const TensorNeed& need : s.needs()) {
    Phase(absl::StrCat("allocate ", need.op, " ", TensorName(need.tensor), " ", need.bytes));
    absl::StatusOr<CudaSharedBuffer> buffer =
        CudaSharedBuffer::Create(*device, static_cast<size_t>(need.bytes));
    if (!buffer.ok()) {
      filled = buffer.status();
      break;
    }
    const size_t bytes = static_cast<size_t>(need.bytes);
    if (IsInput(need)) {
      Phase("fill");
      if (filled = Fill(need, seed, s.rank(), staging); !filled.ok()) break;
      if (dump_inputs && !out_dir.empty()) {
        if (filled = WriteNpy(NpyPath(out_dir, need, s.rank()), need, staging); !filled.ok()) break;
      }
      Phase("copy to the device");
      filled = Cuda(cudaMemcpyAsync(buffer->data(), staging, bytes, cudaMemcpyHostToDevice, stream),
                    "cudaMemcpyAsync");
    } else {
      filled = Cuda(cudaMemsetAsync(buffer->data(), 0, bytes, stream), "cudaMemsetAsync");
    }
    // The staging memory is refilled next: the copy must be done.
    if (filled.ok()) filled = Cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    if (!filled.ok()) break;
    Phase("register");
    if (filled = s.Register(need.op, need.tensor, buffer->fd(), 0, need.bytes); !filled.ok()) break;
    auto placed =
        buffers.emplace(std::make_pair(need.op, static_cast<int>(need.tensor)), *std::move(buffer));
    if (need.tensor == Tensor::kSignals) signals = &placed.first->second;
  }
  if (staging != nullptr) cudaFreeHost(staging);
  if (!filled.ok()) return filled;
  if (signals == nullptr) return absl::FailedPreconditionError("the daemon asked for no signals");
  Phase("start");
  if (absl::Status started = s.Start(); !started.ok()) return started;
  Phase("started");

  cudaEvent_t start = nullptr, end = nullptr;
  cudaEventCreate(&start);
  cudaEventCreate(&end);
  uint64_t last = 0;
  constexpr uint64_t kInFlight = overlap::kSessionRingSlots / 2;
  // Commands after the first step, read from the ring once completed (before
  // a later command reuses their slot).
  const uint64_t first_timed = s.ops().size() + 1;
  uint64_t recorded = first_timed - 1;
  auto record_until = [&](uint64_t done) {
    for (; recorded < done; ++recorded) times->Add(s.Command(recorded + 1));
  };
  // The first step warms up (the daemon builds each op's context on its first
  // command); the rest are timed. With --interval-ms each step is waited for
  // and followed by a pause, as a training step's host work paces the posts;
  // without, the steps are posted ahead (up to kInFlight commands), so a
  // command's call-to-enqueue includes the enqueues queued before it.
  for (int step = 0; step <= steps; ++step) {
    if (step == 1) cudaEventRecord(start, stream);
    if (step > 1) BetweenSteps(interval_ms);
    for (size_t op = 0; op < s.ops().size(); ++op) {
      absl::StatusOr<uint64_t> seq = s.Post(static_cast<int>(op));
      if (!seq.ok()) return seq.status();
      if (absl::Status w = overlap::session::SignalInputsReady(stream, *signals, *seq); !w.ok()) {
        return w;
      }
      if (absl::Status w = overlap::session::WaitOutputsReady(stream, *signals, *seq); !w.ok()) {
        return w;
      }
      last = *seq;
      // The ring holds kSessionRingSlots commands: keep well under it.
      if (last > kInFlight) {
        if (absl::Status done = s.Wait(last - kInFlight, absl::Seconds(300)); !done.ok()) {
          return done;
        }
        record_until(last - kInFlight);
      }
    }
    if (step == 0 || interval_ms > 0) {
      if (absl::Status done = s.Wait(last, absl::Seconds(300)); !done.ok()) return done;
      if (step > 0) record_until(last);
    }
  }
  cudaEventRecord(end, stream);
  if (absl::Status done = s.Wait(last, absl::Seconds(300)); !done.ok()) return done;
  record_until(last);
  if (absl::Status c = Cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize"); !c.ok()) {
    return c;
  }
  float ms = 0;
  cudaEventElapsedTime(&ms, start, end);
  // With --interval-ms the steps' pauses are inside the events' span: the
  // device time is only meaningful without it.
  *summary = absl::StrFormat("\"device_ms_per_step\": %.4f",
                             steps > 0 && interval_ms <= 0 ? ms / steps : 0.0);
  if (!out_dir.empty()) {
    for (const TensorNeed& need : s.needs()) {
      if (need.tensor != Tensor::kY) continue;
      std::vector<uint8_t> host(static_cast<size_t>(need.bytes));
      const CudaSharedBuffer& y = buffers.at({need.op, static_cast<int>(Tensor::kY)});
      if (absl::Status c = Cuda(
              cudaMemcpy(host.data(), y.data(), host.size(), cudaMemcpyDeviceToHost), "cudaMemcpy");
          !c.ok()) {
        return c;
      }
      if (absl::Status w = WriteNpy(NpyPath(out_dir, need, s.rank()), need, host.data()); !w.ok()) {
        return w;
      }
    }
  }
  cudaEventDestroy(start);
  cudaEventDestroy(end);
  cudaStreamDestroy(stream);
  return absl::OkStatus();
}
#endif  // OVERLAPD_SESSION_CUDA

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{kDescription, "overlapd-session-rank"};
  std::string socket_path, name, graph_path, out_dir, priority;
  int rank = 0;
  int steps = 1;
  uint64_t seed = 1234;
  bool json = false;
  bool dump_inputs = false;
  double linger_s = 0;
  double interval_ms = 0;
  double deferred_bound_ms = 0;
  app.add_option("--socket", socket_path, "the daemon's session socket (PATH or unix:PATH)")
      ->required();
  app.add_option("--name", name, "the session's name (shared by its ranks)")->required();
  app.add_option("--graph", graph_path, "the layer graph file (YAML or JSON)")->required();
  app.add_option("--rank", rank, "this process's rank, 0 .. world-1")->required();
  app.add_option("--steps", steps, "times each op is posted")->capture_default_str();
  app.add_option("--out-dir", out_dir, "write each op's Y here (\"\" = nowhere)");
  app.add_option("--priority", priority, "critical (default) or deferred");
  app.add_option("--deferred-bound-ms", deferred_bound_ms,
                 "a deferred session's bound: each command goes within this long of heading "
                 "the session's queue (0 = the daemon's, 20 ms)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--seed", seed, "the fill's base seed")->capture_default_str();
  app.add_option("--interval-ms", interval_ms,
                 "pause this long between steps, as a training step's other work does (each "
                 "step is waited for first; on CUDA the device time is then not reported)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--linger-s", linger_s,
                 "keep the session open this long after the last step (tests: a rank to kill)");
  app.add_flag(
      "--dump-inputs", dump_inputs,
      "write each op's X and W too, as OUT_DIR/<op>.X.rank<RANK>.npy (a reference's inputs)");
  app.add_flag("--json", json, "print a JSON summary with each command's times on stdout");
  app.add_flag("--log-phases", log_phases,
               "print when each setup step began (CLOCK_MONOTONIC seconds) on stderr");
  CLI11_PARSE(app, argc, argv);

  std::ifstream file(graph_path);
  if (!file) return Fail(absl::InvalidArgumentError(absl::StrCat("cannot read ", graph_path)));
  std::stringstream text;
  text << file.rdbuf();
  overlap::session::SessionOptions options;
  options.priority = priority;
  options.deferred_bound_ms = deferred_bound_ms;
  Phase("open");
  auto session = overlap::session::Session::Open(socket_path, name, text.str(), rank, options);
  if (!session.ok()) return Fail(session.status());
  Phase("opened");
  overlap::session::Session& s = **session;

  std::vector<std::string> timings;
  std::string cuda_summary;
  CallTimes times;
  if (s.backend() == "cuda") {
#ifdef OVERLAPD_SESSION_CUDA
    if (absl::Status ran =
            RunOnCuda(s, seed, steps, interval_ms, out_dir, dump_inputs, &cuda_summary, &times);
        !ran.ok()) {
      return Fail(ran);
    }
#else
    return Fail(absl::FailedPreconditionError(
        "the daemon runs on CUDA and this overlapd-session-rank was built without it"));
#endif
  } else if (absl::Status ran =
                 RunOnHost(s, seed, steps, interval_ms, out_dir, dump_inputs, &timings, &times);
             !ran.ok()) {
    return Fail(ran);
  }
  if (json) {
    std::cout << absl::StrFormat(
                     "{\"session_id\": \"%s\", \"rank\": %d, \"device\": %d, \"world\": %d, "
                     "\"backend\": \"%s\", \"steps\": %d, \"interval_ms\": %g, %s%s%s, "
                     "\"commands\": [",
                     s.id(), rank, s.device(), s.world(), s.backend(), steps, interval_ms,
                     cuda_summary, cuda_summary.empty() ? "" : ", ", times.Json())
              << absl::StrJoin(timings, ", ") << "]}\n";
  }
  if (linger_s > 0) {
    std::cout.flush();
    ::usleep(static_cast<useconds_t>(linger_s * 1e6));
  }
  s.Close();
  return 0;
}
