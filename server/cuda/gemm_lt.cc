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
#include "server/cuda/gemm_pick.h"

namespace overlap::cuda {

// The descriptors of one shape and the algorithm picked for it.
struct GemmLt::Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // of A' = B, B' = A, C
  cublasLtMatrixLayout_t d = nullptr;  // the epilogue's output; null: D is C
  cublasLtMatmulAlgo_t algo{};
  size_t workspace_needed = 0;
  float time_ms = 0;  // per call when timed, 0 otherwise
  // Held while a scaled call sets its scale pointers (or an epilogue's call
  // its aux pointer) on `op` and enqueues: the descriptor is shared by every
  // call of the shape.
  mutable absl::Mutex scale_mu;

  Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;
  ~Plan() {
    if (d != nullptr) cublasLtMatrixLayoutDestroy(d);
    if (c != nullptr) cublasLtMatrixLayoutDestroy(c);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (op != nullptr) cublasLtMatmulDescDestroy(op);
  }
};

namespace {

// cuBLASLt's type and the size of an element, by ElemType's values (kernels.h):
// kF32, kF16, kBF16, kFP8 (E4M3).
struct LtElem {
  cudaDataType_t type;
  size_t bytes;
};
constexpr LtElem kLtElems[] = {
    {CUDA_R_32F, 4}, {CUDA_R_16F, 2}, {CUDA_R_16BF, 2}, {CUDA_R_8F_E4M3, 1}};
static_assert(static_cast<int>(ElemType::kFP8) == 3);

cudaDataType_t LtType(ElemType type) { return kLtElems[static_cast<int>(type)].type; }
size_t ElemBytes(ElemType type) { return kLtElems[static_cast<int>(type)].bytes; }

// What the GEMM writes: bf16 for fp8 inputs (GemmOutputDType).
ElemType OutputType(ElemType input) { return input == ElemType::kFP8 ? ElemType::kBF16 : input; }

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
                      " ldc=", p.ldc, " batch=", p.batch, " beta=", p.beta,
                      p.gelu ? absl::StrCat(" epilogue gelu ldd=", p.ldd) : "");
}

}  // namespace

absl::StatusOr<std::unique_ptr<GemmLt>> GemmLt::Create(int device, double challenger_margin) {
  if (!(challenger_margin >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("GEMM challenger margin must be >= 0, got ", challenger_margin));
  }
  cublasLtHandle_t handle = nullptr;
  CUBLAS_RETURN_IF_ERROR(cublasLtCreate(&handle));
  return std::unique_ptr<GemmLt>(new GemmLt(device, handle, challenger_margin));
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

// The epilogue's aux output, A x B before gelu: C, or a timing run's output.
absl::Status SetAux(cublasLtMatmulDesc_t op, void* aux) {
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
  return absl::OkStatus();
}

// Enqueues the GEMM writing `c` (C, or with an epilogue its aux output).
absl::Status Matmul(cublasLtHandle_t handle, const GemmLt::Plan* plan, const GemmProblem& p,
                    void* c, cudaStream_t stream, void* workspace, size_t workspace_bytes) {
  const float alpha = 1.0f;
  const float beta = p.beta;
  // With an epilogue cuBLASLt's D (and its unread C, beta 0) is our D.
  void* out = p.gelu ? p.d : c;
  const cublasLtMatrixLayout_t out_layout = p.gelu ? plan->d : plan->c;
  auto matmul = [&] {
    return cublasLtMatmul(handle, plan->op, &alpha, p.b, plan->a, p.a, plan->b, &beta, out,
                          out_layout, out, out_layout, &plan->algo, workspace, workspace_bytes,
                          stream);
  };
  if (!p.scaled() && !p.gelu) {
    CUBLAS_RETURN_IF_ERROR(matmul());
    return absl::OkStatus();
  }
  // cuBLASLt reads the pointers from the descriptor when the call enqueues the
  // kernel, so each call sets its own.
  absl::MutexLock lock(&plan->scale_mu);
  if (p.scaled()) RETURN_IF_ERROR(SetScales(plan->op, p));
  if (p.gelu) RETURN_IF_ERROR(SetAux(plan->op, c));
  CUBLAS_RETURN_IF_ERROR(matmul());
  return absl::OkStatus();
}

}  // namespace

absl::Status GemmLt::Run(const GemmProblem& p, cudaStream_t stream, void* workspace,
                         size_t workspace_bytes, int sm_count_target,
                         const std::function<absl::Status()>& quiesce) {
  // Each pointer's alignment (a power of two up to 256) as its log2, 4 bits.
  const auto log2 = [](const void* ptr) { return __builtin_ctz(Alignment(ptr)); };
  const int align_code =
      log2(p.a) | (log2(p.b) << 4) | (log2(p.c) << 8) | (p.gelu ? (1 + log2(p.d)) << 12 : 0);
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
                p.scaled(),
                p.gelu ? p.ldd : -1};
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

namespace {

using Candidates = std::vector<cublasLtMatmulHeuristicResult_t>;

// The shape's descriptors: the matmul (transposes, SM target, scales) and
// the three layouts, column-major (gemm_lt.h).
absl::Status DescribeShape(GemmLt::Plan* plan, const GemmProblem& p, int sm_count_target) {
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
  if (p.gelu) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_GELU_AUX;
    CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                          &epilogue, sizeof(epilogue)));
    const int64_t aux_ld = p.ldc;
    CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        plan->op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)));
    RETURN_IF_ERROR(SetAux(plan->op, p.c));
    RETURN_IF_ERROR(MakeLayout(&plan->d, OutputType(p.type), p.n, p.m, p.ldd, 1, 0));
  }
  // A' is n x k, or stored k x n and read transposed for fp8.
  RETURN_IF_ERROR(
      MakeLayout(&plan->a, p.type, fp8 ? p.k : p.n, fp8 ? p.n : p.k, p.ldb, p.batch, p.stride_b));
  RETURN_IF_ERROR(MakeLayout(&plan->b, p.type, p.k, p.m, p.lda, p.batch, p.stride_a));
  return MakeLayout(&plan->c, OutputType(p.type), p.n, p.m, p.ldc, p.batch, p.stride_c);
}

// The heuristic's usable algorithms for the shape, best guess first;
// INVALID_ARGUMENT when it has none.
absl::StatusOr<Candidates> AskHeuristic(cublasLtHandle_t handle, const GemmLt::Plan& plan,
                                        const GemmProblem& p, size_t workspace_bytes) {
  cublasLtMatmulPreference_t pref = nullptr;
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref));
  std::unique_ptr<std::remove_pointer_t<cublasLtMatmulPreference_t>,
                  decltype(&cublasLtMatmulPreferenceDestroy)>
      pref_owner(pref, &cublasLtMatmulPreferenceDestroy);
  const uint64_t max_workspace = workspace_bytes;
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_workspace, sizeof(max_workspace)));
  // With an epilogue cuBLASLt's C and D are our D (Matmul).
  const uint32_t align_a = Alignment(p.b), align_b = Alignment(p.a),
                 align_c = Alignment(p.gelu ? p.d : p.c);
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof(align_a)));
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof(align_b)));
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof(align_c)));
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c, sizeof(align_c)));

  cublasLtMatmulHeuristicResult_t results[GemmLt::kCandidates] = {};
  int found = 0;
  const cublasLtMatrixLayout_t out = p.gelu ? plan.d : plan.c;
  const cublasStatus_t heuristic = cublasLtMatmulAlgoGetHeuristic(
      handle, plan.op, plan.a, plan.b, out, out, pref, GemmLt::kCandidates, results, &found);
  if (heuristic == CUBLAS_STATUS_NOT_SUPPORTED ||
      (heuristic == CUBLAS_STATUS_SUCCESS && found == 0)) {
    return absl::InvalidArgumentError(absl::StrCat("cuBLASLt has no algorithm for ", Describe(p),
                                                   " with ", workspace_bytes,
                                                   " bytes of workspace"));
  }
  CUBLAS_RETURN_IF_ERROR(heuristic);
  Candidates candidates;
  for (int i = 0; i < found; ++i) {
    if (results[i].state == CUBLAS_STATUS_SUCCESS) candidates.push_back(results[i]);
  }
  if (candidates.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuBLASLt has no usable algorithm for ", Describe(p)));
  }
  return candidates;
}

// Where the timed runs write: C itself with beta == 0; with beta != 0 they
// would accumulate into C, so a scratch copy of C's alignment class, kept in
// `scratch`. Null when there is no memory for one (logged).
void* TimingOutput(int device, const GemmProblem& p, DeviceMemory* scratch) {
  if (p.beta == 0.0f) return p.c;
  const size_t c_bytes = (static_cast<size_t>(p.batch - 1) * p.stride_c + (p.m - 1) * p.ldc + p.n) *
                         ElemBytes(OutputType(p.type));
  // Over-allocated by 256 bytes so the scratch C keeps the alignment class of C.
  absl::StatusOr<DeviceMemory> allocated = DeviceMemory::Allocate(device, c_bytes + 256);
  if (!allocated.ok()) {
    GetLogger("cuda")->warn("device {}: no scratch to time GEMM {} ({}): heuristic choice used",
                            device, Describe(p), allocated.status().ToString());
    return nullptr;
  }
  *scratch = std::move(*allocated);
  return static_cast<char*>(scratch->get()) + reinterpret_cast<uintptr_t>(p.c) % 256;
}

// Times the candidates of one shape on a stream, with the plan's algorithm
// set to each in turn.
struct CandidateTimer {
  cublasLtHandle_t handle;
  GemmLt::Plan* plan;
  const GemmProblem& p;
  void* c;  // TimingOutput
  cudaStream_t stream;
  void* workspace;
  size_t workspace_bytes;
  CudaEvent start, stop;

  absl::Status Call() const {
    return Matmul(handle, plan, p, c, stream, workspace, workspace_bytes);
  }

  // Milliseconds from `start` (recorded by the caller) to now on the stream.
  absl::StatusOr<float> ElapsedMs() const {
    CUDA_RETURN_IF_ERROR(cudaEventRecord(stop.get(), stream));
    CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop.get()));
    float ms = 0;
    CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start.get(), stop.get()));
    return ms;
  }

  // An idle GPU sits at low clocks: runs `algo` until about kWarmupMs have
  // passed, so that the first candidate timed is not penalised.
  absl::Status WarmUp(const cublasLtMatmulAlgo_t& algo) {
    plan->algo = algo;
    CUDA_RETURN_IF_ERROR(cudaEventRecord(start.get(), stream));
    RETURN_IF_ERROR(Call());
    ASSIGN_OR_RETURN(const float once_ms, ElapsedMs());
    const int warmup_runs =
        std::min(200, static_cast<int>(GemmLt::kWarmupMs / std::max(once_ms, 0.01f)));
    for (int i = 0; i < warmup_runs; ++i) RETURN_IF_ERROR(Call());
    return absl::OkStatus();
  }

  // The least time of kTimedRuns calls over kTimedRounds rounds, round-robin,
  // per candidate; infinity for one whose calls fail.
  absl::StatusOr<std::vector<float>> TimeEach(const Candidates& candidates) {
    std::vector<float> best(candidates.size(), std::numeric_limits<float>::infinity());
    for (int round = 0; round < GemmLt::kTimedRounds; ++round) {
      for (size_t i = 0; i < candidates.size(); ++i) {
        plan->algo = candidates[i].algo;
        // One untimed run first (first-launch costs), then kTimedRuns timed ones.
        if (!Call().ok()) continue;
        CUDA_RETURN_IF_ERROR(cudaEventRecord(start.get(), stream));
        bool ok = true;
        for (int run = 0; run < GemmLt::kTimedRuns && ok; ++run) ok = Call().ok();
        ASSIGN_OR_RETURN(const float ms, ElapsedMs());
        if (ok) best[i] = std::min(best[i], ms);
      }
    }
    return best;
  }
};

// Sets the plan to the kept candidate; INVALID_ARGUMENT when all failed.
absl::Status KeepPick(GemmLt::Plan* plan, const Candidates& candidates,
                      const std::vector<float>& best_ms, double margin, int device,
                      const GemmProblem& p) {
  const int pick = PickCandidate(best_ms, margin);
  if (pick < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("every cuBLASLt candidate failed for ", Describe(p)));
  }
  plan->algo = candidates[pick].algo;
  plan->workspace_needed = candidates[pick].workspaceSize;
  plan->time_ms = best_ms[pick] / GemmLt::kTimedRuns;
  GetLogger("cuda")->debug(
      "device {}: GEMM {}: {} candidates, heuristic pick {:.3f} ms, kept #{} at {:.3f} ms", device,
      Describe(p), candidates.size(), best_ms[0] / GemmLt::kTimedRuns, pick, plan->time_ms);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::shared_ptr<const GemmLt::Plan>> GemmLt::Tune(
    const GemmProblem& p, cudaStream_t stream, void* workspace, size_t workspace_bytes,
    int sm_count_target, const std::function<absl::Status()>& quiesce) {
  auto plan = std::make_shared<Plan>();
  RETURN_IF_ERROR(DescribeShape(plan.get(), p, sm_count_target));
  ASSIGN_OR_RETURN(const Candidates candidates, AskHeuristic(handle_, *plan, p, workspace_bytes));
  plan->algo = candidates[0].algo;
  plan->workspace_needed = candidates[0].workspaceSize;
  if (candidates.size() == 1) return std::shared_ptr<const Plan>(std::move(plan));

  RETURN_IF_ERROR(quiesce());
  DeviceMemory scratch;
  void* c = TimingOutput(device_, p, &scratch);
  if (c == nullptr) return std::shared_ptr<const Plan>(std::move(plan));
  ASSIGN_OR_RETURN(CudaEvent start, CudaEvent::Create(device_, /*timing=*/true));
  ASSIGN_OR_RETURN(CudaEvent stop, CudaEvent::Create(device_, /*timing=*/true));
  CandidateTimer timer{handle_,          plan.get(),     p, c, stream, workspace, workspace_bytes,
                       std::move(start), std::move(stop)};
  RETURN_IF_ERROR(timer.WarmUp(candidates[0].algo));
  ASSIGN_OR_RETURN(const std::vector<float> best_ms, timer.TimeEach(candidates));
  RETURN_IF_ERROR(KeepPick(plan.get(), candidates, best_ms, challenger_margin_, device_, p));
  return std::shared_ptr<const Plan>(std::move(plan));
}

}  // namespace overlap::cuda
