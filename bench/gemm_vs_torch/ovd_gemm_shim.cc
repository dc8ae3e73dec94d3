// The C ABI of ovd_gemm.h over GemmLt, as CudaEngineImpl::Gemm drives it.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "bench/gemm_vs_torch/ovd_gemm.h"
#include "common/config.h"
#include "server/cuda/cuda_check.h"
#include "server/cuda/cuda_resources.h"
#include "server/cuda/gemm_lt.h"
#include "server/cuda/scoped_device.h"

namespace {

using overlap::cuda::DeviceMemory;
using overlap::cuda::ElemType;
using overlap::cuda::GemmLt;
using overlap::cuda::GemmProblem;
using overlap::cuda::ScopedDevice;

thread_local std::string last_error;

int Fail(const absl::Status& status) {
  last_error = status.ToString();
  return status.ok() ? 0 : static_cast<int>(status.code());
}

struct Handle {
  int device = 0;
  std::unique_ptr<GemmLt> gemm;
  DeviceMemory workspace;
};

// The daemon's workspace per stream: config gemm_workspace_bytes rounded down
// to 256 bytes (CudaEngineImpl's stream setup).
size_t DaemonWorkspaceBytes() {
  return static_cast<size_t>(overlap::DaemonConfig().gemm_workspace_bytes) / 256 * 256;
}

GemmProblem ProblemOf(int64_t m, int64_t n, int64_t k, int dtype, const void* a, const void* b,
                      void* c, const float* a_scale, const float* b_scale) {
  GemmProblem p;
  const bool fp8 = dtype == OVD_GEMM_FP8;
  p.type = fp8 ? ElemType::kFP8 : ElemType::kBF16;
  p.m = m;
  p.n = n;
  p.k = k;
  p.lda = k;
  p.ldb = fp8 ? k : n;  // fp8: B stored [n, k] (gemm_lt.h)
  p.ldc = n;
  p.a = a;
  p.b = b;
  p.c = c;
  if (fp8) {
    p.a_scale = a_scale;
    p.b_scale = b_scale;
  }
  return p;
}

}  // namespace

extern "C" {

void* ovd_gemm_create(int device, int64_t workspace_bytes) {
  return ovd_gemm_create_with_margin(device, workspace_bytes, GemmLt::kChallengerMargin);
}

void* ovd_gemm_create_with_margin(int device, int64_t workspace_bytes, double challenger_margin) {
  ScopedDevice guard(device);
  if (!guard.status().ok()) {
    Fail(guard.status());
    return nullptr;
  }
  auto handle = std::make_unique<Handle>();
  handle->device = device;
  absl::StatusOr<std::unique_ptr<GemmLt>> gemm = GemmLt::Create(device, challenger_margin);
  if (!gemm.ok()) {
    Fail(gemm.status());
    return nullptr;
  }
  handle->gemm = std::move(*gemm);
  const size_t bytes = workspace_bytes < 0 ? DaemonWorkspaceBytes()
                                           : static_cast<size_t>(workspace_bytes) / 256 * 256;
  if (bytes > 0) {
    absl::StatusOr<DeviceMemory> workspace = DeviceMemory::Allocate(device, bytes);
    if (!workspace.ok()) {
      Fail(workspace.status());
      return nullptr;
    }
    handle->workspace = std::move(*workspace);
  }
  return handle.release();
}

int ovd_gemm_run(void* handle, int64_t m, int64_t n, int64_t k, int dtype, const void* a,
                 const void* b, void* c, const float* a_scale, const float* b_scale, void* stream) {
  if (handle == nullptr) return Fail(absl::InvalidArgumentError("ovd_gemm_run: null handle"));
  if (dtype != OVD_GEMM_BF16 && dtype != OVD_GEMM_FP8) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("ovd_gemm_run: dtype ", dtype, " (0 = bf16, 1 = fp8 e4m3)")));
  }
  if (m <= 0 || n <= 0 || k <= 0) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("ovd_gemm_run: m, n and k must be > 0, got ", m, ", ", n, ", ", k)));
  }
  auto* h = static_cast<Handle*>(handle);
  ScopedDevice guard(h->device);
  if (!guard.status().ok()) return Fail(guard.status());
  const GemmProblem problem = ProblemOf(m, n, k, dtype, a, b, c, a_scale, b_scale);
  // The daemon quiesces the whole device before it tunes a shape (WaitIdle).
  auto quiesce = []() -> absl::Status {
    CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
    return absl::OkStatus();
  };
  return Fail(h->gemm->Run(problem, static_cast<cudaStream_t>(stream), h->workspace.get(),
                           h->workspace.bytes(), /*sm_count_target=*/0, quiesce));
}

void ovd_gemm_destroy(void* handle) { delete static_cast<Handle*>(handle); }

const char* ovd_gemm_last_error(void) { return last_error.c_str(); }

int64_t ovd_gemm_workspace_bytes(void* handle) {
  return handle == nullptr ? 0
                           : static_cast<int64_t>(static_cast<Handle*>(handle)->workspace.bytes());
}

int64_t ovd_gemm_cached_shapes(void* handle) {
  return handle == nullptr
             ? 0
             : static_cast<int64_t>(static_cast<Handle*>(handle)->gemm->CachedShapes());
}

int64_t ovd_gemm_cublaslt_version(void) { return static_cast<int64_t>(cublasLtGetVersion()); }

}  // extern "C"
