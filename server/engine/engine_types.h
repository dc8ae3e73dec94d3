// The values the engine's calls take: handles, buffer and matrix views, the
// arguments of a GEMM, a collective and a point-to-point transfer, and what a
// device and its libraries are (server/engine/engine.h describes the calls).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/dtype.h"
#include "common/graph.h"

namespace overlap::engine {

using BufferId = int64_t;
using StreamId = int32_t;
using EventId = int64_t;
using GraphId = int64_t;
constexpr BufferId kNoBuffer = -1;
constexpr EventId kNoEvent = -1;

enum class StreamRole {
  kCompute,   // lowest priority: GEMMs, reductions
  kComm,      // highest priority: collectives, peer copies (the critical lane)
  kDeferred,  // lowest priority: deferred collectives and their copies (the deferred lane)
};

// The communicator channel of the deferred lane: its library collectives get
// their own communicator (each lane's communicator then sees one op order on
// every rank), which the backend may cap to a few CTAs so that its kernels,
// spinning while they wait for peers, leave the SMs to the GEMMs.
constexpr int kDeferredLaneChannel = 2;

// A byte range of a buffer.
struct BufferRef {
  BufferId buffer = kNoBuffer;
  size_t offset = 0;  // bytes
  size_t bytes = 0;
};

// A row-major matrix view inside a buffer. `ld` is the row stride in elements.
struct MatrixRef {
  BufferId buffer = kNoBuffer;
  size_t offset = 0;  // elements
  int64_t ld = 0;
};

// C = A x B + beta * C, row-major, `batch` times with the given element strides.
// A is [m, k], B is [k, n], C is [m, n]. Accumulation is in fp32. With fp8
// inputs C is bf16 (GemmOutputDType) and B is stored transposed, [n, k] with
// row stride ld (WeightsStoredTransposed): the only layout Hopper's fp8 tensor
// cores read, and each of A and B may carry a per-tensor scale (below).
struct GemmArgs {
  DType dtype = DType::kBF16;
  int64_t m = 0, n = 0, k = 0;
  MatrixRef a, b, c;
  float beta = 0.0f;  // 0 or 1
  int batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  // The GEMM may run while a library collective (NCCL's kernels) of the same op
  // runs beside it: stream priority does not take SMs back from a GEMM that
  // already holds them, so the backend may leave the collective's SMs free
  // (CollectiveSmBudget).
  bool beside_collective = false;
  // C may be a buffer of another device that this one reaches over peer access
  // (NVLink): the GEMM's epilogue stores (and with beta = 1 loads) it across the
  // link, so a partial lands on its owner with no copy. A and B stay local.
  bool c_on_peer = false;
  // fp8 only: the per-tensor dequantization scales of A and B, one fp32 each in
  // the GEMM device's memory at a 16-byte-aligned address (cuBLASLt refuses
  // others as NOT_SUPPORTED), read when the GEMM runs, as TransformerEngine's
  // scale_inv is, so that a scale computed on the GPU needs no host sync:
  // C = a_scale * b_scale * (A x B) + beta * C. No buffer means 1.
  BufferRef a_scale, b_scale;
  // An activation applied in the GEMM's epilogue (Engine::GemmEpilogues):
  // C still receives A x B (the scales applied), and D receives activation(C)
  // in C's dtype and shape, at `d` (its own ld): the producer's output and
  // the next GEMM's input from one kernel, with no elementwise pass reading
  // C back. gelu only (the tanh approximation, as Elementwise's), with beta
  // 0, one batch, no fp8 inputs and C on the GEMM's device. kNone: no D.
  Activation epilogue = Activation::kNone;
  MatrixRef d;
};

// What every backend checks of a GEMM's scales before resolving them:
// INVALID_ARGUMENT when one is given for a dtype other than fp8, does not span
// exactly one fp32 or is not 16-byte aligned within its buffer (buffers are).
absl::Status CheckGemmScales(const GemmArgs& args);
inline constexpr size_t kGemmScaleAlignment = 16;

// The elementwise kernel between two GEMMs of a chain (Engine::Elementwise):
// dst = activation(src) / dst_scale, cast to dst_dtype, in fp32 math. src
// holds `rows` rows of `src_cols` elements, dst `rows` rows of DstCols():
// src_cols, or half of them for swiglu (SiLU of a row's first half times its
// second half). Both on the stream's device.
struct ElementwiseArgs {
  BufferRef src;
  DType src_dtype = DType::kBF16;
  BufferRef dst;
  DType dst_dtype = DType::kBF16;
  int64_t rows = 0;
  int64_t src_cols = 0;
  Activation activation = Activation::kNone;
  float dst_scale = 1.0f;  // an fp8 dst's per-tensor scale (kChainFp8Dequant)
  int64_t DstCols() const { return activation == Activation::kSwiglu ? src_cols / 2 : src_cols; }
};
// INVALID_ARGUMENT unless src and dst span exactly rows x cols of their dtypes,
// swiglu's columns are even and the scale is finite and positive.
absl::Status CheckElementwiseArgs(const ElementwiseArgs& args);

// One rank's part of a collective.
struct RankBuffers {
  int device = 0;
  StreamId stream = 0;
  BufferRef send;
  BufferRef recv;
};

// The algorithm of a library collective: the library's own choice per size,
// or one pinned for the communicator (NCCL_ALGO). Only all-reduces pin one.
enum class LibraryAlgorithm { kLibraryChoice, kRing, kTree };

// Collectives in rank order (ranks[i] is rank i). `count` is in elements:
// AllGather: sent per rank; ReduceScatter: received per rank; AllReduce: total.
// fp8 is only gathered: sums in it are INVALID_ARGUMENT (reduce GEMM outputs,
// which are bf16), and so is Accumulate.
struct CollectiveArgs {
  DType dtype = DType::kBF16;
  size_t count = 0;
  int channel = 0;  // communicator index: two channels may run concurrently
  // Runs beside GEMMs (on a comm stream): the backend may cap the SMs its
  // kernels take (CollectiveSmBudget).
  bool beside_gemm = false;
  // Anything but kLibraryChoice needs LibraryAlgorithms(); a backend without it
  // answers UNIMPLEMENTED.
  LibraryAlgorithm algorithm = LibraryAlgorithm::kLibraryChoice;
  std::vector<RankBuffers> ranks;
};

// One transfer of a point-to-point group: src (on src_device, issued on
// src_stream) to dst (on dst_device, issued on dst_stream).
struct Transfer {
  int src_device = 0;
  StreamId src_stream = 0;
  BufferRef src;
  int dst_device = 0;
  StreamId dst_stream = 0;
  BufferRef dst;
};

struct DeviceInfo {
  int index = 0;
  std::string name;
  int64_t memory_bytes = 0;  // what jobs may allocate: the daemon's pool
  // The device's whole memory, of which the pool is a part; 0 where unknown.
  int64_t total_memory_bytes = 0;
  std::string pci_bus_id;
  // Who the GPU is to NVML and dcgm-exporter (v1::Device uuid, model_name,
  // nvml_index, nvml_pci_bus_id); empty / -1 where unknown.
  std::string uuid;
  std::string model_name;
  int nvml_index = -1;
  std::string nvml_pci_bus_id;
};

struct BackendVersions {
  std::string cuda_runtime, cuda_driver, nccl, cublas;
};

// What a collective does, for the calls that take it as a value (collectives
// across processes, cross-node transports).
enum class CollectiveOp { kAllGather, kReduceScatter, kAllReduce };

}  // namespace overlap::engine
