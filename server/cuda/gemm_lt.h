// Row-major GEMM on cuBLASLt for one device: C = A x B + beta * C, optionally
// batched with element strides, fp32 accumulation (TF32 off for fp32 inputs).
//
// cuBLASLt is column-major, so the row-major product is computed as
// C^T = B^T A^T: m' = n, n' = m, A' = B (ld = ldb), B' = A (ld = lda), C' = C.
// fp8 (E4M3) inputs write bf16 and need A' transposed ("TN", the only fp8
// layout on Hopper): B is then stored [n, k] row-major, which column-major is
// k x n with ld = ldb, read transposed. Their per-tensor scales, when given,
// are device pointers set on the descriptor for each call (A's as cuBLASLt's
// B scale, B's as its A scale); without them cuBLASLt scales by 1.
//
// Algorithm choice: the first call for a shape key (dtype, m, n, k, lds, batch,
// strides, beta, SM target, pointer alignment, workspace, epilogue) asks the heuristic for
// up to kCandidates algorithms and, when there is more than one, quiesces the
// device through the caller's callback and times each on the calling stream.
// The heuristic's first pick (what cuBLASLt's own users, PyTorch among them,
// run) is kept unless another candidate is faster by more than the challenger
// margin: the timing is short and starts on a GPU below its power cap, where a
// lead of a percent or two is noise and can turn into a loss under sustained
// load. The winner (with its descriptors) is cached; later calls
// are pure enqueues. With beta != 0, timing writes into a scratch C so the real
// C is untouched; without scratch memory the heuristic's first choice is used.
//
// Thread safety: Run may be called concurrently; the cache has its own mutex.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <tuple>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/cuda/kernels.h"

namespace overlap::cuda {

struct GemmProblem {
  ElemType type = ElemType::kBF16;  // of A and B; C is bf16 where they are fp8
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
  int batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  float beta = 0.0f;
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;
  // fp8: one fp32 each on the device, or null for 1.
  const float* a_scale = nullptr;
  const float* b_scale = nullptr;
  bool scaled() const { return a_scale != nullptr || b_scale != nullptr; }
  // With gelu: cuBLASLt's GELU_AUX epilogue writes gelu(A x B) to `d` (ld
  // ldd, C's type) and A x B itself to `c` as its aux output (beta 0, one
  // batch, not fp8).
  bool gelu = false;
  void* d = nullptr;
  int64_t ldd = 0;
};

class GemmLt {
 public:
  static constexpr int kCandidates = 16;
  static constexpr int kTimedRuns = 3;
  static constexpr int kTimedRounds = 2;  // round-robin over the candidates, min kept
  static constexpr float kWarmupMs = 30;  // clocks ramp up before anything is timed
  // A challenger must beat the heuristic's first pick by more than this share.
  static constexpr double kChallengerMargin = 0.02;

  // challenger_margin: as kChallengerMargin; 0 keeps the fastest candidate as
  // timed, a huge value keeps the heuristic's first pick.
  static absl::StatusOr<std::unique_ptr<GemmLt>> Create(
      int device, double challenger_margin = kChallengerMargin);
  ~GemmLt();
  GemmLt(const GemmLt&) = delete;
  GemmLt& operator=(const GemmLt&) = delete;

  // Enqueues on `stream` (the current device must be this one's). `quiesce`
  // blocks until the device is idle; it is called only when a shape is tuned.
  // `sm_count_target` 0 = no target.
  absl::Status Run(const GemmProblem& problem, cudaStream_t stream, void* workspace,
                   size_t workspace_bytes, int sm_count_target,
                   const std::function<absl::Status()>& quiesce);

  size_t CachedShapes() const;

  struct Plan;  // descriptors + chosen algorithm of one shape (gemm_lt.cc)

 private:
  using Key = std::tuple<int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int64_t,
                         int64_t, int64_t, float, int, int, size_t, bool, int64_t>;

  GemmLt(int device, cublasLtHandle_t handle, double challenger_margin)
      : device_(device), handle_(handle), challenger_margin_(challenger_margin) {}
  absl::StatusOr<std::shared_ptr<const Plan>> Tune(const GemmProblem& problem, cudaStream_t stream,
                                                   void* workspace, size_t workspace_bytes,
                                                   int sm_count_target,
                                                   const std::function<absl::Status()>& quiesce);

  const int device_;
  cublasLtHandle_t handle_;
  const double challenger_margin_;
  mutable absl::Mutex mu_;
  std::map<Key, std::shared_ptr<const Plan>> plans_ ABSL_GUARDED_BY(mu_);
};

}  // namespace overlap::cuda
