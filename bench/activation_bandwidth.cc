// activation_bandwidth: how close do LaunchElementwise's kernels (the pass
// between a layer's GEMMs, server/cuda/kernels.h) come to the GPU's memory
// bandwidth?
//
// For the llama3-8b (8192 x 28672 fc1 output, SwiGLU to 8192 x 14336) and
// llama3-70b (8192 x 57344 -> 8192 x 28672) shapes, bf16 in and out, it times
// copy, GELU and SwiGLU on the old kernel (the scalar path, one element per
// thread) and the new one (the vector path), interleaved run by run, each run
// between its own CUDA events; the median of --runs after --warmup runs is
// reported with the bytes moved (read + written) per second and their share of
// the peak bandwidth. The peak comes from NVML (maximum memory clock x bus
// width x 2 transfers per clock), else from the CUDA device attributes; the
// table says which. NVML's clocks, power and temperature are printed before and
// after the timings. --check first compares the new kernel's output with the
// old one's for every shape and op (and SwiGLU into scaled fp8), element by
// element; they must agree bit for bit, and the exit status is 1 where they do not.
// Usage: activation_bandwidth [--device N] [--runs N] [--warmup N] [--check] [--json PATH]
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "bench/probes/probe_util.h"
#include "common/dtype.h"
#include "nlohmann/json.hpp"
#include "server/cuda/kernels.h"

namespace {

using overlap::bench::Median;
using overlap::cuda::ElementwisePath;
using overlap::cuda::ElemType;

// The few NVML entry points used, loaded at run time as the daemon does
// (server/cuda/nvml_telemetry.cc): the binary must start where there is no NVML.
class Nvml {
 public:
  explicit Nvml(int cuda_device) {
    library_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (library_ == nullptr) return;
    auto init = Symbol<int (*)()>("nvmlInit_v2");
    auto by_pci = Symbol<int (*)(const char*, void**)>("nvmlDeviceGetHandleByPciBusId_v2");
    max_clock_ = Symbol<int (*)(void*, int, unsigned*)>("nvmlDeviceGetMaxClockInfo");
    clock_ = Symbol<int (*)(void*, int, unsigned*)>("nvmlDeviceGetClockInfo");
    bus_width_ = Symbol<int (*)(void*, unsigned*)>("nvmlDeviceGetMemoryBusWidth");
    power_ = Symbol<int (*)(void*, unsigned*)>("nvmlDeviceGetPowerUsage");
    temperature_ = Symbol<int (*)(void*, int, unsigned*)>("nvmlDeviceGetTemperature");
    char pci[32] = {};
    if (init == nullptr || by_pci == nullptr || init() != 0 ||
        cudaDeviceGetPCIBusId(pci, sizeof(pci), cuda_device) != cudaSuccess ||
        by_pci(pci, &device_) != 0) {
      device_ = nullptr;
    }
  }
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;
  ~Nvml() {
    if (device_ != nullptr) {
      if (auto shutdown = Symbol<int (*)()>("nvmlShutdown")) shutdown();
    }
    if (library_ != nullptr) dlclose(library_);
  }

  bool ok() const { return device_ != nullptr; }
  static constexpr int kClockSm = 1, kClockMem = 2;  // nvmlClockType_t

  // Bytes per second at the maximum memory clock; 0 where NVML cannot tell.
  double PeakBandwidth() const {
    unsigned mhz = 0, bits = 0;
    if (!ok() || max_clock_ == nullptr || bus_width_ == nullptr ||
        max_clock_(device_, kClockMem, &mhz) != 0 || bus_width_(device_, &bits) != 0) {
      return 0;
    }
    return mhz * 1e6 * 2 * bits / 8;
  }

  nlohmann::json State() const {
    nlohmann::json state = nlohmann::json::object();
    unsigned value = 0;
    if (!ok()) return state;
    if (clock_ != nullptr && clock_(device_, kClockSm, &value) == 0) state["sm_mhz"] = value;
    if (clock_ != nullptr && clock_(device_, kClockMem, &value) == 0) state["mem_mhz"] = value;
    if (power_ != nullptr && power_(device_, &value) == 0) state["power_w"] = value / 1000.0;
    if (temperature_ != nullptr && temperature_(device_, 0, &value) == 0) state["temp_c"] = value;
    return state;
  }

 private:
  template <typename Fn>
  Fn Symbol(const char* name) const {
    return reinterpret_cast<Fn>(dlsym(library_, name));
  }

  void* library_ = nullptr;
  void* device_ = nullptr;
  int (*max_clock_)(void*, int, unsigned*) = nullptr;
  int (*clock_)(void*, int, unsigned*) = nullptr;
  int (*bus_width_)(void*, unsigned*) = nullptr;
  int (*power_)(void*, unsigned*) = nullptr;
  int (*temperature_)(void*, int, unsigned*) = nullptr;
};

struct Peak {
  double bytes_per_s = 0;
  std::string source;
};

Peak PeakOf(int device, const Nvml& nvml) {
  if (const double nvml_peak = nvml.PeakBandwidth(); nvml_peak > 0) {
    return {nvml_peak, "NVML max memory clock x bus width x 2"};
  }
  int khz = 0, bits = 0;
  if (cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, device) == cudaSuccess &&
      cudaDeviceGetAttribute(&bits, cudaDevAttrGlobalMemoryBusWidth, device) == cudaSuccess &&
      khz > 0 && bits > 0) {
    return {khz * 1e3 * 2 * bits / 8, "CUDA memory clock rate x bus width x 2"};
  }
  cudaGetLastError();
  return {0, "unknown (neither NVML nor CUDA told the memory clock)"};
}

struct Shape {
  const char* model;
  size_t rows;
  size_t fc1_cols;  // the fc1 output: SwiGLU's input, copy's and GELU's too
};
constexpr Shape kShapes[] = {{"llama3-8b", 8192, 28672}, {"llama3-70b", 8192, 57344}};

struct Op {
  const char* name;
  int activation;  // LaunchElementwise's code
};
constexpr Op kOps[] = {{"copy", 0}, {"gelu", 1}, {"swiglu", 2}};

struct Kernel {
  const char* name;
  ElementwisePath path;
};
constexpr Kernel kKernels[] = {{"old", ElementwisePath::kScalar},
                               {"new", ElementwisePath::kVector}};

size_t DstCols(const Shape& s, const Op& op) {
  return op.activation == 2 ? s.fc1_cols / 2 : s.fc1_cols;
}

void Launch(const Kernel& k, const void* src, void* dst, ElemType dst_type, const Shape& s,
            const Op& op, float scale, cudaStream_t stream) {
  CHECK_CUDA(overlap::cuda::LaunchElementwiseOn(k.path, src, ElemType::kBF16, dst, dst_type, s.rows,
                                                s.fc1_cols, op.activation, scale, stream));
}

// The old and new kernels' outputs compared element by element.
nlohmann::json Compare(const void* src, void* old_dst, void* new_dst, ElemType dst_type,
                       const Shape& s, const Op& op, float scale, cudaStream_t stream) {
  const overlap::DType dtype =
      dst_type == ElemType::kFP8 ? overlap::DType::kFP8 : overlap::DType::kBF16;
  const size_t es = overlap::DTypeSize(dtype), count = s.rows * DstCols(s, op), bytes = count * es;
  CHECK_CUDA(cudaMemsetAsync(old_dst, 0xAB, bytes, stream));
  CHECK_CUDA(cudaMemsetAsync(new_dst, 0xCD, bytes, stream));
  Launch(kKernels[0], src, old_dst, dst_type, s, op, scale, stream);
  Launch(kKernels[1], src, new_dst, dst_type, s, op, scale, stream);
  std::vector<uint8_t> old_host(bytes), new_host(bytes);
  CHECK_CUDA(cudaMemcpyAsync(old_host.data(), old_dst, bytes, cudaMemcpyDeviceToHost, stream));
  CHECK_CUDA(cudaMemcpyAsync(new_host.data(), new_dst, bytes, cudaMemcpyDeviceToHost, stream));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  size_t differ = 0;
  double worst = 0;
  if (std::memcmp(old_host.data(), new_host.data(), bytes) != 0) {
    for (size_t i = 0; i < count; ++i) {
      if (std::memcmp(&old_host[i * es], &new_host[i * es], es) == 0) continue;
      ++differ;
      const double a = overlap::LoadAsFloat(old_host.data(), dtype, i);
      const double b = overlap::LoadAsFloat(new_host.data(), dtype, i);
      const double rel = std::abs(a - b) / std::max(std::abs(a), 1e-30);
      worst = std::isnan(rel) ? INFINITY : std::max(worst, rel);
    }
  }
  return {{"shape", s.model},     {"op", op.name},     {"dst", overlap::DTypeName(dtype)},
          {"scale", scale},       {"elements", count}, {"differ", differ},
          {"max_rel_diff", worst}};
}

struct Timed {
  std::vector<float> ms[2];  // per kernel, one entry per run
};

// Old and new kernels alternating run by run, so that clocks and heat drift
// alike for both.
Timed Time(const void* src, void* dst, const Shape& s, const Op& op, int warmup, int runs,
           cudaStream_t stream) {
  for (int i = 0; i < warmup; ++i) {
    for (const Kernel& k : kKernels) Launch(k, src, dst, ElemType::kBF16, s, op, 1.0f, stream);
  }
  std::vector<cudaEvent_t> events(4 * runs);
  for (cudaEvent_t& event : events) CHECK_CUDA(cudaEventCreate(&event));
  for (int r = 0; r < runs; ++r) {
    for (int k = 0; k < 2; ++k) {
      CHECK_CUDA(cudaEventRecord(events[4 * r + 2 * k], stream));
      Launch(kKernels[k], src, dst, ElemType::kBF16, s, op, 1.0f, stream);
      CHECK_CUDA(cudaEventRecord(events[4 * r + 2 * k + 1], stream));
    }
  }
  CHECK_CUDA(cudaStreamSynchronize(stream));
  Timed timed;
  for (int r = 0; r < runs; ++r) {
    for (int k = 0; k < 2; ++k) {
      float ms = 0;
      CHECK_CUDA(cudaEventElapsedTime(&ms, events[4 * r + 2 * k], events[4 * r + 2 * k + 1]));
      timed.ms[k].push_back(ms);
    }
  }
  for (cudaEvent_t& event : events) CHECK_CUDA(cudaEventDestroy(event));
  return timed;
}

void PrintState(const char* when, const nlohmann::json& state) {
  std::printf("# nvml %s:", when);
  if (state.empty()) std::printf(" not available");
  for (const auto& [key, value] : state.items())
    std::printf(" %s=%s", key.c_str(), value.dump().c_str());
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"activation_bandwidth: the elementwise pass between GEMMs against memory bandwidth"};
  int device = 0, runs = 30, warmup = 5;
  bool check = false;
  std::string json_path;
  app.add_option("--device", device, "CUDA device")->check(CLI::NonNegativeNumber);
  app.add_option("--runs", runs, "timed runs per kernel (median reported)")
      ->check(CLI::Range(20, 100000));
  app.add_option("--warmup", warmup, "untimed runs per kernel first")->check(CLI::Range(0, 1000));
  app.add_flag("--check", check, "compare the new kernel's outputs with the old one's first");
  app.add_option("--json", json_path, "also write the results to this JSON file");
  CLI11_PARSE(app, argc, argv);

  CHECK_CUDA(cudaSetDevice(device));
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, device));
  Nvml nvml(device);
  const Peak peak = PeakOf(device, nvml);
  std::printf("# device %d: %s, %d SMs\n", device, prop.name, prop.multiProcessorCount);
  std::printf("# peak memory bandwidth %.0f GB/s (%s)\n", peak.bytes_per_s / 1e9,
              peak.source.c_str());
  const nlohmann::json state_start = nvml.State();
  PrintState("at start", state_start);

  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  size_t largest = 0;
  for (const Shape& s : kShapes) largest = std::max(largest, s.rows * s.fc1_cols * 2);
  void *src = nullptr, *dst = nullptr, *other = nullptr;
  CHECK_CUDA(cudaMalloc(&src, largest));
  CHECK_CUDA(cudaMalloc(&dst, largest));
  if (check) CHECK_CUDA(cudaMalloc(&other, largest));

  nlohmann::json out = {{"device", prop.name},        {"peak_gbps", peak.bytes_per_s / 1e9},
                        {"peak_source", peak.source}, {"runs", runs},
                        {"warmup", warmup},           {"nvml_start", state_start}};
  bool all_ok = true;
  for (const Shape& s : kShapes) {
    // Uniform in [-3, 3): GELU and SiLU see both their tails and their middle.
    CHECK_CUDA(overlap::cuda::LaunchFillRandom(src, ElemType::kBF16, s.rows * s.fc1_cols, 57, 3.0f,
                                               stream));
    for (const Op& op : kOps) {
      const ElementwisePath chosen = overlap::cuda::ElementwisePathFor(
          src, ElemType::kBF16, dst, ElemType::kBF16, s.rows, s.fc1_cols, op.activation);
      if (chosen != ElementwisePath::kVector) {
        std::fprintf(stderr, "%s %s: LaunchElementwise would not take the vector path\n", s.model,
                     op.name);
        all_ok = false;
      }
      if (!check) continue;
      for (ElemType dst_type : {ElemType::kBF16, ElemType::kFP8}) {
        if (dst_type == ElemType::kFP8 && op.activation != 2) continue;  // the fp8 chain's edge
        const float scale = dst_type == ElemType::kFP8 ? 0.05f : 1.0f;
        nlohmann::json result = Compare(src, dst, other, dst_type, s, op, scale, stream);
        const bool same = result["differ"] == 0;
        all_ok = all_ok && same;
        std::printf(
            "# check %-10s %-6s bf16->%-4s: %s (%zu of %zu elements differ, max rel %.3g)\n",
            s.model, op.name, result["dst"].get<std::string>().c_str(),
            same ? "identical" : "DIFFERENT", result["differ"].get<size_t>(),
            result["elements"].get<size_t>(), result["max_rel_diff"].get<double>());
        out["check"].push_back(result);
      }
    }
  }

  std::printf("%-10s %-6s %-4s %18s %9s %9s %9s %9s %7s\n", "shape", "op", "kern",
              "rows x in -> out", "ms med", "ms min", "ms max", "GB/s", "% peak");
  for (const Shape& s : kShapes) {
    CHECK_CUDA(overlap::cuda::LaunchFillRandom(src, ElemType::kBF16, s.rows * s.fc1_cols, 57, 3.0f,
                                               stream));
    for (const Op& op : kOps) {
      const Timed timed = Time(src, dst, s, op, warmup, runs, stream);
      const double bytes = 2.0 * s.rows * (s.fc1_cols + DstCols(s, op));
      for (int k = 0; k < 2; ++k) {
        std::vector<double> ms(timed.ms[k].begin(), timed.ms[k].end());
        const double median = Median(ms);
        const double gbps = bytes / (median * 1e-3) / 1e9;
        const double pct = peak.bytes_per_s > 0 ? 100 * gbps * 1e9 / peak.bytes_per_s : 0;
        const std::string dims = std::to_string(s.rows) + "x" + std::to_string(s.fc1_cols) + "->" +
                                 std::to_string(DstCols(s, op));
        std::printf("%-10s %-6s %-4s %18s %9.3f %9.3f %9.3f %9.0f %6.1f%%\n", s.model, op.name,
                    kKernels[k].name, dims.c_str(), median, *std::min_element(ms.begin(), ms.end()),
                    *std::max_element(ms.begin(), ms.end()), gbps, pct);
        out["rows"].push_back({{"shape", s.model},
                               {"op", op.name},
                               {"kernel", kKernels[k].name},
                               {"rows", s.rows},
                               {"src_cols", s.fc1_cols},
                               {"dst_cols", DstCols(s, op)},
                               {"bytes", bytes},
                               {"ms_median", median},
                               {"ms_all", ms},
                               {"gbps", gbps},
                               {"pct_peak", pct}});
      }
    }
  }
  const nlohmann::json state_end = nvml.State();
  PrintState("at end", state_end);
  out["nvml_end"] = state_end;
  out["ok"] = all_ok;
  if (!json_path.empty()) {
    std::ofstream file(json_path);
    file << out.dump(2) << "\n";
    if (!file) {
      std::fprintf(stderr, "cannot write %s\n", json_path.c_str());
      return 2;
    }
  }
  CHECK_CUDA(cudaFree(src));
  CHECK_CUDA(cudaFree(dst));
  if (other != nullptr) CHECK_CUDA(cudaFree(other));
  CHECK_CUDA(cudaStreamDestroy(stream));
  return all_ok ? 0 : 1;
}
