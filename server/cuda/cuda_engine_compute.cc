// Fills, GEMM and accumulate of the CUDA engine.
#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/cuda/cuda_check.h"
#include "server/cuda/cuda_engine_impl.h"
#include "server/cuda/kernels.h"
#include "server/cuda/scoped_device.h"
#include "server/engine/gemm_checks.h"

namespace overlap::cuda {
namespace {

absl::Status CheckWholeElements(const engine::BufferRef& ref, DType dtype, const char* what) {
  if (ref.bytes % DTypeSize(dtype) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", ref.bytes, " bytes is not a whole ",
                                                   "number of ", DTypeName(dtype), " elements"));
  }
  return absl::OkStatus();
}

// Elements spanned by `batch` matrices of `rows` x `cols` with row stride `ld`.
}  // namespace

absl::Status CudaEngineImpl::LaunchFill(
    engine::StreamId stream, const engine::BufferRef& dst, DType dtype, const char* what,
    const std::function<cudaError_t(char*, ElemType, size_t, cudaStream_t)>& launch) {
  ASSIGN_OR_RETURN(const StreamSlot* slot, LookupStream(stream));
  ASSIGN_OR_RETURN(char* ptr, Resolve(dst, slot->device, what));
  RETURN_IF_ERROR(CheckWholeElements(dst, dtype, what));
  ScopedDevice guard(slot->device);
  RETURN_IF_ERROR(guard.status());
  CUDA_RETURN_IF_ERROR(
      launch(ptr, ToElemType(dtype), dst.bytes / DTypeSize(dtype), slot->stream.get()));
  return absl::OkStatus();
}

absl::Status CudaEngineImpl::FillRandom(engine::StreamId stream, engine::BufferRef dst, DType dtype,
                                        uint64_t seed, float scale) {
  return LaunchFill(stream, dst, dtype, "FillRandom destination",
                    [&](char* ptr, ElemType type, size_t count, cudaStream_t on) {
                      return LaunchFillRandom(ptr, type, count, seed, scale, on);
                    });
}

absl::Status CudaEngineImpl::FillConstant(engine::StreamId stream, engine::BufferRef dst,
                                          DType dtype, float value) {
  return LaunchFill(stream, dst, dtype, "FillConstant destination",
                    [&](char* ptr, ElemType type, size_t count, cudaStream_t on) {
                      return LaunchFillConstant(ptr, type, count, value, on);
                    });
}

absl::StatusOr<int64_t> CudaEngineImpl::FirstNonFinite(engine::BufferRef src, DType dtype,
                                                       int device) {
  if (!ValidDevice(device)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown device ", device));
  }
  ASSIGN_OR_RETURN(char* ptr, Resolve(src, device, "FirstNonFinite source"));
  RETURN_IF_ERROR(CheckWholeElements(src, dtype, "FirstNonFinite source"));
  if (src.bytes == 0) return -1;
  RETURN_IF_ERROR(WaitIdle({device}));
  ScopedDevice guard(device);
  RETURN_IF_ERROR(guard.status());
  // Where CopyToHost runs, after everything before it on the device.
  cudaStream_t stream = streams_[GetStream(device, engine::StreamRole::kComm, 0)].stream.get();
  unsigned long long* first = nullptr;
  CUDA_RETURN_IF_ERROR(cudaMallocAsync(reinterpret_cast<void**>(&first), sizeof(*first), stream));
  unsigned long long found = 0;
  cudaError_t err = cudaMemsetAsync(first, 0xFF, sizeof(*first), stream);
  if (err == cudaSuccess) {
    err = LaunchFirstNonFinite(ptr, ToElemType(dtype), src.bytes / DTypeSize(dtype), first, stream);
  }
  if (err == cudaSuccess) {
    err = cudaMemcpyAsync(&found, first, sizeof(found), cudaMemcpyDeviceToHost, stream);
  }
  const cudaError_t freed = cudaFreeAsync(first, stream);
  if (err == cudaSuccess) err = freed;
  if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
  CUDA_RETURN_IF_ERROR(err);
  return found == ~0ull ? int64_t{-1} : static_cast<int64_t>(found);
}

absl::Status CudaEngineImpl::Accumulate(engine::StreamId stream, engine::BufferRef dst,
                                        engine::BufferRef src, DType dtype) {
  if (dtype == DType::kFP8) {
    return absl::InvalidArgumentError("Accumulate: fp8 is gathered, never summed");
  }
  ASSIGN_OR_RETURN(const StreamSlot* slot, LookupStream(stream));
  ASSIGN_OR_RETURN(char* dst_ptr, Resolve(dst, slot->device, "Accumulate destination"));
  ASSIGN_OR_RETURN(BufferEntry src_entry, LookupBuffer(src.buffer));
  // A source on another device is read over NVLink when peer access is on.
  if (!peer_access_[slot->device][src_entry.device]) {
    return absl::InvalidArgumentError(absl::StrCat("Accumulate source is on device ",
                                                   src_entry.device, ", which device ",
                                                   slot->device, " cannot access"));
  }
  ASSIGN_OR_RETURN(char* src_ptr, Resolve(src, src_entry.device, "Accumulate source"));
  RETURN_IF_ERROR(CheckWholeElements(dst, dtype, "Accumulate destination"));
  if (src.bytes < dst.bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("Accumulate source has ", src.bytes, " bytes, destination ", dst.bytes));
  }
  ScopedDevice guard(slot->device);
  RETURN_IF_ERROR(guard.status());
  CUDA_RETURN_IF_ERROR(LaunchAccumulate(dst_ptr, src_ptr, ToElemType(dtype),
                                        dst.bytes / DTypeSize(dtype), slot->stream.get()));
  return absl::OkStatus();
}

absl::Status CudaEngineImpl::Elementwise(engine::StreamId stream,
                                         const engine::ElementwiseArgs& args) {
  RETURN_IF_ERROR(engine::CheckElementwiseArgs(args));
  ASSIGN_OR_RETURN(const StreamSlot* slot, LookupStream(stream));
  ASSIGN_OR_RETURN(char* src_ptr, Resolve(args.src, slot->device, "Elementwise source"));
  ASSIGN_OR_RETURN(char* dst_ptr, Resolve(args.dst, slot->device, "Elementwise destination"));
  const int activation = args.activation == Activation::kGelu     ? 1
                         : args.activation == Activation::kSwiglu ? 2
                                                                  : 0;
  ScopedDevice guard(slot->device);
  RETURN_IF_ERROR(guard.status());
  CUDA_RETURN_IF_ERROR(LaunchElementwise(src_ptr, ToElemType(args.src_dtype), dst_ptr,
                                         ToElemType(args.dst_dtype), args.rows, args.src_cols,
                                         activation, args.dst_scale, slot->stream.get()));
  return absl::OkStatus();
}

// A GEMM's operands (A, B, C) resolved to device pointers, and its fp8 scales.
struct GemmPointers {
  const engine::GemmOperand* operands[4];  // A, B, C, and an epilogue's D
  char* ptrs[4] = {};
  const float* scales[2] = {};
  int count = 3;  // 4 with an epilogue's D
};

namespace {

GemmProblem ProblemOf(const engine::GemmArgs& args, const engine::GemmOperands& checked,
                      const GemmPointers& at) {
  GemmProblem problem;
  problem.type = ToElemType(args.dtype);
  problem.m = args.m;
  problem.n = args.n;
  problem.k = args.k;
  problem.lda = args.a.ld;
  problem.ldb = args.b.ld;
  problem.ldc = args.c.ld;
  problem.batch = args.batch;
  problem.stride_a = checked.a.stride;
  problem.stride_b = checked.b.stride;
  problem.stride_c = checked.c.stride;
  problem.beta = args.beta;
  problem.a = at.ptrs[0];
  problem.b = at.ptrs[1];
  problem.c = at.ptrs[2];
  problem.a_scale = at.scales[0];
  problem.b_scale = at.scales[1];
  if (checked.has_d()) {
    problem.gelu = args.epilogue == Activation::kGelu;
    problem.d = at.ptrs[3];
    problem.ldd = args.d.ld;
  }
  return problem;
}

// The bytes each operand spans, for a GEMM chain's hazard checks.
GemmFootprint FootprintOf(const GemmPointers& at) {
  GemmFootprint footprint;
  GemmFootprint::Range* ranges[4] = {&footprint.a, &footprint.b, &footprint.c, &footprint.d};
  for (int i = 0; i < at.count; ++i) {
    const char* begin = at.ptrs[i];
    *ranges[i] = {begin, begin + at.operands[i]->extent * DTypeSize(at.operands[i]->dtype)};
  }
  return footprint;
}

}  // namespace

absl::StatusOr<GemmPointers> CudaEngineImpl::ResolveGemm(const StreamSlot& slot,
                                                         const engine::GemmArgs& args,
                                                         const engine::GemmOperands& checked) {
  GemmPointers at{{&checked.a, &checked.b, &checked.c, &checked.d}};
  at.count = checked.has_d() ? 4 : 3;
  const char* what[4] = {"GEMM A", "GEMM B", "GEMM C", "GEMM D"};
  for (int i = 0; i < at.count; ++i) {
    const engine::GemmOperand& op = *at.operands[i];
    const size_t elem = DTypeSize(op.dtype);
    engine::BufferRef range{op.ref.buffer, op.ref.offset * elem,
                            static_cast<size_t>(op.extent) * elem};
    const bool may_be_remote = i == 2 && args.c_on_peer;
    ASSIGN_OR_RETURN(at.ptrs[i], Resolve(range, may_be_remote ? -1 : slot.device, what[i]));
  }
  const engine::BufferRef* scale_refs[2] = {&args.a_scale, &args.b_scale};
  for (int i = 0; i < 2; ++i) {
    if (scale_refs[i]->buffer == engine::kNoBuffer) continue;
    ASSIGN_OR_RETURN(char* scale, Resolve(*scale_refs[i], slot.device, "GEMM scale"));
    at.scales[i] = reinterpret_cast<const float*>(scale);
  }
  if (args.c_on_peer) {
    ASSIGN_OR_RETURN(BufferEntry c_entry, LookupBuffer(args.c.buffer));
    if (!peer_access_[slot.device][c_entry.device]) {
      return absl::FailedPreconditionError(
          absl::StrCat("GEMM C is on device ", c_entry.device, " but device ", slot.device,
                       " has no peer access to it: use transport nccl or p2p"));
    }
  }
  return at;
}

absl::Status CudaEngineImpl::Gemm(engine::StreamId stream, const engine::GemmArgs& args) {
  ASSIGN_OR_RETURN(const StreamSlot* slot, LookupStream(stream));
  ASSIGN_OR_RETURN(const engine::GemmOperands checked, engine::CheckGemmArgs(args));
  RETURN_IF_ERROR(engine::CheckGemmOutput(args, checked));
  ASSIGN_OR_RETURN(const GemmPointers at, ResolveGemm(*slot, args, checked));
  const GemmProblem problem = ProblemOf(args, checked, at);
  DeviceState& state = *devices_[slot->device];
  const int device = slot->device;
  ScopedDevice guard(device);
  RETURN_IF_ERROR(guard.status());
  // Beside a collective with an SM budget the GEMM leaves the collective's SMs
  // free: a GEMM that fills every SM first would hold NCCL's kernels back until
  // it ends, whatever the streams' priorities.
  const int budget = CollectiveSmBudget();
  const int sm_target =
      args.beside_collective && budget > 0 ? std::max(1, state.sm_count - budget) : 0;
  int workspace = 0;
  if (slot->chain != nullptr) {
    ASSIGN_OR_RETURN(workspace, slot->chain->Before(slot->stream.get(), FootprintOf(at)));
  }
  absl::Status status = state.gemm->Run(problem, slot->stream.get(), slot->workspace[workspace],
                                        slot->workspace_bytes, sm_target,
                                        [this, device] { return WaitIdle({device}); });
  if (status.ok() && slot->chain != nullptr) status = slot->chain->After(slot->stream.get());
  if (!status.ok()) {
    return absl::Status(
        status.code(),
        absl::StrCat("GEMM ", DTypeName(args.dtype), " m=", args.m, " n=", args.n, " k=", args.k,
                     " batch=", args.batch, " on device ", device, ": ", status.message()));
  }
  return absl::OkStatus();
}

}  // namespace overlap::cuda
