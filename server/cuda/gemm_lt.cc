#include "server/cuda/gemm_lt.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/logging.h"
#include "common/status_macros.h"
#include "server/cuda/cuda_check.h"
#include "server/cuda/cuda_resources.h"

namespace overlap::cuda {

// The descriptors of one shape and the algorithm picked for it.
struct GemmLt::Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // of A' = B, B' = A, C
  cublasLtMatmulAlgo_t algo{};
  size_t workspace_needed = 0;
  float time_ms = 0;  // per call when timed, 0 otherwise
  // Held while a scaled call sets its scale pointers on `op` and enqueues:
  // the descriptor is shared by every call of the shape.
  mutable absl::Mutex scale_mu;

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (c != nullptr) cublasLtMatrixLayoutDestroy(c);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (op != nullptr) cublasLtMatmulDescDestroy(op);
  }
};

namespace {

cudaDataType_t LtType(ElemType type) {
  switch (type) {
    case ElemType::kF32:
      return CUDA_R_32F;
    case ElemType::kF16:
      return CUDA_R_16F;
    case ElemType::kBF16:
      return CUDA_R_16BF;
    case ElemType::kFP8:
      return CUDA_R_8F_E4M3;
  }
  return CUDA_R_32F;
}

// What the GEMM writes: bf16 for fp8 inputs (GemmOutputDType).
ElemType OutputType(ElemType input) { return input == ElemType::kFP8 ? ElemType::kBF16 : input; }

size_t ElemBytes(ElemType type) {
  // By ElemType's values (kernels.h): kF32, kF16, kBF16, kFP8.
  static constexpr size_t kBytes[] = {4, 2, 2, 1};
  static_assert(static_cast<int>(ElemType::kFP8) == 3);
  return kBytes[static_cast<int>(type)];
}

int Alignment(const void* p) {
  const uintptr_t v = reinterpret_cast<uintptr_t>(p);
  int align = 1;
  while (align < 256 && (v % (2 * align)) == 0) align *= 2;
  return align;
}

absl::Status MakeLayout(cublasLtMatrixLayout_t* layout, ElemType type, int64_t rows, int64_t cols,
                        int64_t ld, int batch, int64_t stride) {
  CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(layout, LtType(type), rows, cols, ld));
  if (batch > 1) {
    const int32_t count = batch;
    CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutSetAttribute(
        *layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutSetAttribute(
        *layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
  }
  return absl::OkStatus();
}

std::string Describe(const GemmProblem& p) {
  return absl::StrCat("m=", p.m, " n=", p.n, " k=", p.k, " lda=", p.lda, " ldb=", p.ldb,
                      " ldc=", p.ldc, " batch=", p.batch, " beta=", p.beta);
}

}  // namespace

absl::StatusOr<std::unique_ptr<GemmLt>> GemmLt::Create(int device) {
  cublasLtHandle_t handle = nullptr;
  CUBLAS_RETURN_IF_ERROR(cublasLtCreate(&handle));
  return std::unique_ptr<GemmLt>(new GemmLt(device, handle));
}

GemmLt::~GemmLt() {
  {
    absl::MutexLock lock(&mu_);
    plans_.clear();
  }
  const cublasStatus_t status = cublasLtDestroy(handle_);
  if (status != CUBLAS_STATUS_SUCCESS) {
    GetLogger("cuda")->error("cublasLtDestroy on device {} failed: {}", device_,
                             cublasLtGetStatusName(status));
  }
}

size_t GemmLt::CachedShapes() const {
  absl::MutexLock lock(&mu_);
  return plans_.size();
}

namespace {

// Column-major, cuBLASLt's A is our B (gemm_lt.h), and so are their scales.
absl::Status SetScales(cublasLtMatmulDesc_t op, const GemmProblem& p) {
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                                        &p.b_scale, sizeof(p.b_scale)));
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                        &p.a_scale, sizeof(p.a_scale)));
  return absl::OkStatus();
}

absl::Status Matmul(cublasLtHandle_t handle, const GemmLt::Plan* plan, const GemmProblem& p,
                    void* c, cudaStream_t stream, void* workspace, size_t workspace_bytes) {
  const float alpha = 1.0f;
  const float beta = p.beta;
  auto matmul = [&] {
    return cublasLtMatmul(handle, plan->op, &alpha, p.b, plan->a, p.a, plan->b, &beta, c, plan->c,
                          c, plan->c, &plan->algo, workspace, workspace_bytes, stream);
  };
  if (!p.scaled()) {
    CUBLAS_RETURN_IF_ERROR(matmul());
    return absl::OkStatus();
  }
  // cuBLASLt reads the pointers from the descriptor when the call enqueues the
  // kernel, so each call sets its own.
  absl::MutexLock lock(&plan->scale_mu);
  RETURN_IF_ERROR(SetScales(plan->op, p));
  CUBLAS_RETURN_IF_ERROR(matmul());
  return absl::OkStatus();
}

}  // namespace

absl::Status GemmLt::Run(const GemmProblem& p, cudaStream_t stream, void* workspace,
                         size_t workspace_bytes, int sm_count_target,
                         const std::function<absl::Status()>& quiesce) {
  const int align_code = Alignment(p.a) | (Alignment(p.b) << 9) | (Alignment(p.c) << 18);
  const Key key{static_cast<int>(p.type),
                p.m,
                p.n,
                p.k,
                p.lda,
                p.ldb,
                p.ldc,
                p.batch,
                p.batch > 1 ? p.stride_a : 0,
                p.batch > 1 ? p.stride_b : 0,
                p.batch > 1 ? p.stride_c : 0,
                p.beta,
                sm_count_target,
                align_code,
                workspace_bytes,
                p.scaled()};
  std::shared_ptr<const Plan> plan;
  {
    absl::MutexLock lock(&mu_);
    auto it = plans_.find(key);
    if (it != plans_.end()) plan = it->second;
  }
  if (plan == nullptr) {
    ASSIGN_OR_RETURN(plan, Tune(p, stream, workspace, workspace_bytes, sm_count_target, quiesce));
    absl::MutexLock lock(&mu_);
    plans_.emplace(key, plan);
  }
  return Matmul(handle_, plan.get(), p, p.c, stream, workspace, workspace_bytes);
}

absl::StatusOr<std::shared_ptr<const GemmLt::Plan>> GemmLt::Tune(
    const GemmProblem& p, cudaStream_t stream, void* workspace, size_t workspace_bytes,
    int sm_count_target, const std::function<absl::Status()>& quiesce) {
  auto plan = std::make_shared<Plan>();
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&plan->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t no_transpose = CUBLAS_OP_N;
  const bool fp8 = p.type == ElemType::kFP8;
  const cublasOperation_t transa = fp8 ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSA,
                                                        &transa, sizeof(transa)));
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_TRANSB,
                                                        &no_transpose, sizeof(no_transpose)));
  if (sm_count_target > 0) {
    const int32_t sms = sm_count_target;
    CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        plan->op, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &sms, sizeof(sms)));
  }
  // The heuristic sees the descriptor as the calls will (Matmul sets them again).
  if (p.scaled()) RETURN_IF_ERROR(SetScales(plan->op, p));
  // A' is n x k, or stored k x n and read transposed for fp8.
  RETURN_IF_ERROR(
      MakeLayout(&plan->a, p.type, fp8 ? p.k : p.n, fp8 ? p.n : p.k, p.ldb, p.batch, p.stride_b));
  RETURN_IF_ERROR(MakeLayout(&plan->b, p.type, p.k, p.m, p.lda, p.batch, p.stride_a));
  RETURN_IF_ERROR(MakeLayout(&plan->c, OutputType(p.type), p.n, p.m, p.ldc, p.batch, p.stride_c));

  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref));
  std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>,
                  decltype(&cublasLtMatmulPreferenceDestroy)>
      pref_owner(pref, &cublasLtMatmulPreferenceDestroy);
  const uint64_t max_workspace = workspace_bytes;
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_workspace, sizeof(max_workspace)));
  const uint32_t align_a = Alignment(p.b), align_b = Alignment(p.a), align_c = Alignment(p.c);
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof(align_a)));
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof(align_b)));
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof(align_c)));
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c, sizeof(align_c)));

  cublasLtMatmulHeuristicResult_t results[kCandidates] = {};
  int found = 0;
  const cublasStatus_t heuristic = cublasLtMatmulAlgoGetHeuristic(
      handle_, plan->op, plan->a, plan->b, plan->c, plan->c, pref, kCandidates, results, &found);
  if (heuristic == CUBLAS_STATUS_NOT_SUPPORTED ||
      (heuristic == CUBLAS_STATUS_SUCCESS && found == 0)) {
    return absl::InvalidArgumentError(absl::StrCat("cuBLASLt has no algorithm for ", Describe(p),
                                                   " with ", workspace_bytes,
                                                   " bytes of workspace"));
  }
  CUBLAS_RETURN_IF_ERROR(heuristic);
  std::vector<cublasLtMatmulHeuristicResult_t> candidates;
  for (int i = 0; i < found; ++i) {
    if (results[i].state == CUBLAS_STATUS_SUCCESS) candidates.push_back(results[i]);
  }
  if (candidates.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuBLASLt has no usable algorithm for ", Describe(p)));
  }
  plan->algo = candidates[0].algo;
  plan->workspace_needed = candidates[0].workspaceSize;
  if (candidates.size() == 1) return std::shared_ptr<const Plan>(std::move(plan));

  RETURN_IF_ERROR(quiesce());
  // With beta != 0 the timed runs accumulate into C, so they write a scratch copy.
  void* c = p.c;
  DeviceMemory scratch;
  if (p.beta != 0.0f) {
    const size_t c_bytes =
        (static_cast<size_t>(p.batch - 1) * p.stride_c + (p.m - 1) * p.ldc + p.n) *
        ElemBytes(OutputType(p.type));
    // Over-allocated by 256 bytes so the scratch C keeps the alignment class of C.
    absl::StatusOr<DeviceMemory> allocated = DeviceMemory::Allocate(device_, c_bytes + 256);
    if (!allocated.ok()) {
      GetLogger("cuda")->warn("device {}: no scratch to time GEMM {} ({}): heuristic choice used",
                              device_, Describe(p), allocated.status().ToString());
      return std::shared_ptr<const Plan>(std::move(plan));
    }
    scratch = std::move(*allocated);
    c = static_cast<char*>(scratch.get()) + reinterpret_cast<uintptr_t>(p.c) % 256;
  }
  ASSIGN_OR_RETURN(CudaEvent start, CudaEvent::Create(device_, /*timing=*/true));
  ASSIGN_OR_RETURN(CudaEvent stop, CudaEvent::Create(device_, /*timing=*/true));
  // An idle GPU sits at low clocks: run the heuristic's first pick until about
  // kWarmupMs have passed, so that the first candidate timed is not penalised.
  {
    plan->algo = candidates[0].algo;
    CUDA_RETURN_IF_ERROR(cudaEventRecord(start.get(), stream));
    RETURN_IF_ERROR(Matmul(handle_, plan.get(), p, c, stream, workspace, workspace_bytes));
    CUDA_RETURN_IF_ERROR(cudaEventRecord(stop.get(), stream));
    CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop.get()));
    float once_ms = 0;
    CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&once_ms, start.get(), stop.get()));
    const int warmup_runs = std::min(200, static_cast<int>(kWarmupMs / std::max(once_ms, 0.01f)));
    for (int i = 0; i < warmup_runs; ++i) {
      RETURN_IF_ERROR(Matmul(handle_, plan.get(), p, c, stream, workspace, workspace_bytes));
    }
  }
  std::vector<float> best_per_candidate(candidates.size(), std::numeric_limits<float>::infinity());
  for (int round = 0; round < kTimedRounds; ++round) {
    for (size_t i = 0; i < candidates.size(); ++i) {
      plan->algo = candidates[i].algo;
      // One untimed run first (first-launch costs), then kTimedRuns timed ones.
      if (!Matmul(handle_, plan.get(), p, c, stream, workspace, workspace_bytes).ok()) continue;
      CUDA_RETURN_IF_ERROR(cudaEventRecord(start.get(), stream));
      bool ok = true;
      for (int run = 0; run < kTimedRuns && ok; ++run) {
        ok = Matmul(handle_, plan.get(), p, c, stream, workspace, workspace_bytes).ok();
      }
      CUDA_RETURN_IF_ERROR(cudaEventRecord(stop.get(), stream));
      CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop.get()));
      float ms = 0;
      CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start.get(), stop.get()));
      if (ok) best_per_candidate[i] = std::min(best_per_candidate[i], ms);
    }
  }
  float best_ms = std::numeric_limits<float>::infinity();
  cublasLtMatmulAlgo_t best_algo = candidates[0].algo;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (best_per_candidate[i] < best_ms) {
      best_ms = best_per_candidate[i];
      plan->workspace_needed = candidates[i].workspaceSize;
      plan->time_ms = best_ms / kTimedRuns;
      best_algo = candidates[i].algo;
    }
  }
  plan->algo = best_algo;
  GetLogger("cuda")->debug("device {}: GEMM {}: {} candidates, heuristic pick {:.3f} ms, best {:.3f} ms",
                           device_, Describe(p), candidates.size(),
                           best_per_candidate[0] / kTimedRuns, best_ms / kTimedRuns);
  if (!std::isfinite(best_ms)) {
    return absl::InvalidArgumentError(
        absl::StrCat("every cuBLASLt candidate failed for ", Describe(p)));
  }
  return std::shared_ptr<const Plan>(std::move(plan));
}

}  // namespace overlap::cuda
