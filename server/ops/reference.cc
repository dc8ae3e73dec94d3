#include "server/ops/reference.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "common/seeded_random.h"
#include "common/status_macros.h"

namespace overlap::ops {

double RoundAsStored(DType dtype, double value) {
  uint32_t storage = 0;
  StoreFromFloat(&storage, dtype, 0, static_cast<float>(value));
  return LoadAsFloat(&storage, dtype, 0);
}

double InputValue(DType dtype, uint64_t seed, uint64_t index, float scale) {
  return RoundAsStored(dtype, SeededUniform(seed, index) * scale);
}

std::vector<int64_t> IndicesToCheck(int64_t count, bool all, int max_picked, uint64_t seed) {
  std::vector<int64_t> out;
  if (all || count <= max_picked) {
    for (int64_t i = 0; i < count; ++i) out.push_back(i);
    return out;
  }
  std::set<int64_t> picked;
  const int64_t step = std::max<int64_t>(1, count / 16);
  for (int64_t b = 0; b < count && static_cast<int>(picked.size()) < max_picked / 2; b += step) {
    picked.insert(b);
    if (b > 0) picked.insert(b - 1);
  }
  picked.insert(count - 1);
  uint64_t s = seed;
  while (static_cast<int>(picked.size()) < max_picked) {
    s = SplitMix64(s);
    picked.insert(static_cast<int64_t>(s % static_cast<uint64_t>(count)));
  }
  return {picked.begin(), picked.end()};
}

namespace {

// Adds to `acc` what a collective alone must leave in rank r's output row i:
// all_gather, row i of the gathered X (rank i / mr's row i % mr); reduce_scatter,
// the sum over ranks of row r*mr + i; all_reduce, the sum over ranks of row i.
void AddCollectiveRow(OpType type, DType dt, uint64_t job_seed, uint64_t input_key, int tp,
                      int64_t mr, int r, int64_t i, int64_t cols, std::vector<double>* acc) {
  auto add_row = [&](int rank, int64_t row) {
    const uint64_t seed = InputSeed(job_seed, input_key, 0, rank);
    for (int64_t j = 0; j < cols; ++j) (*acc)[j] += InputValue(dt, seed, row * cols + j, 1.0f);
  };
  if (type == OpType::kAllGather) {
    add_row(static_cast<int>(i / mr), i % mr);
    return;
  }
  const int64_t row = type == OpType::kReduceScatter ? r * mr + i : i;
  for (int q = 0; q < tp; ++q) add_row(q, row);
}

}  // namespace

InputScaling InputScalingFor(const OpSpec& op, DType dtype) {
  const float w = 1.0f / std::sqrt(static_cast<float>(op.k));
  if (dtype == DType::kFP8 && !IsCollectiveOnly(op.type)) {
    return {kFp8Max, kFp8Max, 1.0f / kFp8Max, w / kFp8Max};
  }
  return {1.0f, w, 1.0f, 1.0f};
}

uint64_t InputKeyOf(absl::string_view op_id) {
  // FNV-1a: the same on every daemon and every build, unlike std::hash.
  uint64_t hash = 14695981039346656037ull;
  for (const unsigned char c : op_id) hash = (hash ^ c) * 1099511628211ull;
  return hash;
}

uint64_t InputSeed(uint64_t job_seed, uint64_t input_key, int tensor, int rank) {
  return SplitMix64(job_seed * 1000003u + input_key * 4099u + static_cast<uint64_t>(tensor) * 131u +
                    static_cast<uint64_t>(rank));
}

uint64_t GroupInputKey(uint64_t input_key, int group) {
  return input_key + static_cast<uint64_t>(std::max(0, group)) * (uint64_t{1} << 22);
}

namespace {

absl::Status FillGroupInputs(OpContext& ctx, uint64_t job_seed, InputKeys keys) {
  const LocalShapes& sh = ctx.shapes();
  const InputScaling scaling = InputScalingFor(ctx.op(), ctx.dtype());
  for (int r = 0; r < ctx.tp(); ++r) {
    RankState& rs = ctx.rank(r);
    RETURN_IF_ERROR(ctx.engine().FillRandom(rs.compute, ctx.Rows(rs.a, 0, sh.a_rows, sh.a_cols),
                                            ctx.DTypeOf(rs.a), InputSeed(job_seed, keys.a, 0, r),
                                            scaling.fill_a));
    if (sh.w_rows * sh.w_cols == 0) continue;  // a collective alone has no W
    // Element i of the buffer is SeededUniform(seed, i) whichever way W is stored.
    RETURN_IF_ERROR(ctx.engine().FillRandom(rs.compute, ctx.Rows(rs.w, 0, sh.w_rows, sh.w_cols),
                                            ctx.dtype(), InputSeed(job_seed, keys.w, 1, r),
                                            scaling.fill_w));
    if (rs.scales == engine::kNoBuffer) continue;
    RETURN_IF_ERROR(
        ctx.engine().FillConstant(rs.compute, ctx.ScaleOf(r, 0), DType::kF32, scaling.dequant_a));
    RETURN_IF_ERROR(
        ctx.engine().FillConstant(rs.compute, ctx.ScaleOf(r, 1), DType::kF32, scaling.dequant_w));
  }
  return absl::OkStatus();
}

absl::Status PoisonGroupOutputs(OpContext& ctx) {
  const LocalShapes& sh = ctx.shapes();
  for (int r = 0; r < ctx.tp(); ++r) {
    // An output that is the input (one rank's collective) is never written:
    // poisoning it would poison the input.
    if (ctx.OutputAliasesInput(r)) continue;
    RankState& rs = ctx.rank(r);
    RETURN_IF_ERROR(ctx.engine().FillConstant(rs.compute, ctx.Rows(rs.y, 0, sh.y_rows, sh.y_cols),
                                              ctx.DTypeOf(rs.y), std::nanf("")));
  }
  return absl::OkStatus();
}

// Runs fn(t) for t in [0, threads) on as many threads, and joins them.
template <typename Fn>
void OnThreads(int threads, const Fn& fn) {
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) pool.emplace_back(fn, i);
  for (auto& th : pool) th.join();
}

// Each daemon of a job that spans nodes checks its own ranks.
bool IsLocal(OpContext& ctx, int r) { return ctx.engine().IsLocalDevice(ctx.rank(r).device); }

// Every element must have been written (the backend scans where Y lives).
absl::Status CheckAllWritten(OpContext& ctx) {
  const LocalShapes& sh = ctx.shapes();
  for (int r = 0; r < ctx.tp(); ++r) {
    if (!IsLocal(ctx, r)) continue;
    const RankState& rs = ctx.rank(r);
    ASSIGN_OR_RETURN(const int64_t bad,
                     ctx.engine().FirstNonFinite(ctx.Rows(rs.y, 0, sh.y_rows, sh.y_cols),
                                                 ctx.DTypeOf(rs.y), rs.device));
    if (bad >= 0) {
      return absl::FailedPreconditionError(
          absl::StrFormat("op %s: output not fully written: rank %d row %d col %d is not finite",
                          ctx.op().id, r, bad / sh.y_cols, bad % sh.y_cols));
    }
  }
  return absl::OkStatus();
}

// What one group's check reads: the op, its inputs' seeds, dtypes and scaling,
// and the rows and columns of Y it checks.
struct GroupCheck {
  const OpSpec& op;
  const LocalShapes& sh;
  int tp;
  uint64_t job_seed;
  InputKeys keys;
  // A's dtype (the graph's, or bf16 for what an fp8 graph reduces), W's, and Y's.
  DType dt = DType::kF32, w_dt = DType::kF32, y_dt = DType::kF32;
  InputScaling scaling = {};
  std::vector<int64_t> rows = {}, cols = {};
  int64_t mr() const { return op.m / tp; }
  int64_t nc() const { return static_cast<int64_t>(cols.size()); }
};

GroupCheck PlanCheck(OpContext& ctx, uint64_t job_seed, InputKeys keys, int max_rows,
                     int max_cols) {
  const OpSpec& op = ctx.op();
  const LocalShapes& sh = ctx.shapes();
  GroupCheck check{op, sh, ctx.tp(), job_seed, keys};
  check.dt = ctx.DTypeOf(ctx.rank(0).a);
  check.w_dt = ctx.dtype();
  check.y_dt = ctx.DTypeOf(ctx.rank(0).y);
  check.scaling = InputScalingFor(op, check.w_dt);
  // A collective's element costs one input element per rank, a GEMM's a k-long dot.
  const int64_t macs_per_element = IsCollectiveOnly(op.type) ? ctx.tp() : op.k;
  check.rows =
      IndicesToCheck(sh.y_rows, sh.y_rows * sh.y_cols * macs_per_element <= (int64_t{1} << 26),
                     max_rows, job_seed + keys.w);
  check.cols = IndicesToCheck(
      sh.y_cols, IsCollectiveOnly(op.type) || sh.y_cols * macs_per_element <= (int64_t{1} << 22),
      max_cols, SplitMix64(job_seed + keys.w));
  return check;
}

// The checked rows back to the host, one copy per run of consecutive rows:
// y[r] holds them in order, the checked row rows[i] at row i.
absl::StatusOr<std::vector<std::vector<uint8_t>>> CopyCheckedRows(OpContext& ctx,
                                                                  const GroupCheck& check) {
  const std::vector<int64_t>& rows = check.rows;
  const size_t row_bytes = static_cast<size_t>(check.sh.y_cols) * DTypeSize(check.y_dt);
  std::vector<std::vector<uint8_t>> y(check.tp, std::vector<uint8_t>(rows.size() * row_bytes));
  for (int r = 0; r < check.tp; ++r) {
    if (!IsLocal(ctx, r)) continue;
    for (size_t first = 0, last = 0; first < rows.size(); first = last) {
      for (last = first + 1; last < rows.size() && rows[last] == rows[last - 1] + 1;) ++last;
      RETURN_IF_ERROR(ctx.engine().CopyToHost(
          y[r].data() + first * row_bytes,
          ctx.Rows(ctx.rank(r).y, rows[first], static_cast<int64_t>(last - first), check.sh.y_cols),
          ctx.rank(r).device));
    }
  }
  return y;
}

// The checked columns of every rank's W, as the devices hold them
// (regenerated from its seed): w[q][kk * nc + c] is W_q[kk, cols[c]], which
// is element cols[c] * k + kk of the buffer where W is stored transposed.
std::vector<std::vector<float>> CheckedWeights(const GroupCheck& check, int threads) {
  const bool w_transposed = WeightsStoredTransposed(check.w_dt);
  const int64_t nc = check.nc(), w_rows = check.sh.w_rows;
  std::vector<std::vector<float>> w(check.tp);
  for (int q = 0; q < check.tp; ++q) {
    w[q].resize(static_cast<size_t>(w_rows * nc));
    const uint64_t seed = InputSeed(check.job_seed, check.keys.w, 1, q);
    OnThreads(threads, [&, q, seed](int t) {
      const int64_t block = (w_rows + threads - 1) / threads;
      for (int64_t kk = t * block; kk < std::min(w_rows, (t + 1) * block); ++kk) {
        for (int64_t c = 0; c < nc; ++c) {
          const int64_t index =
              w_transposed ? check.cols[c] * w_rows + kk : kk * check.sh.w_cols + check.cols[c];
          w[q][kk * nc + c] = static_cast<float>(
              InputValue(check.w_dt, seed, index, check.scaling.fill_w) * check.scaling.dequant_w);
        }
      }
    });
  }
  return w;
}

// Adds to `acc` the float64 reference of the checked columns of rank r's
// output row i: the sum over the ranks whose inputs contribute to it.
void AddReferenceRow(const GroupCheck& check, const std::vector<std::vector<float>>& w, int r,
                     int64_t i, std::vector<double>& a_row, std::vector<double>& acc) {
  const OpSpec& op = check.op;
  const LocalShapes& sh = check.sh;
  const int64_t mr = check.mr(), nc = check.nc();
  if (IsCollectiveOnly(op.type)) {
    AddCollectiveRow(op.type, check.dt, check.job_seed, check.keys.a, check.tp, mr, r, i, sh.a_cols,
                     &acc);
    return;
  }
  for (int q = 0; q < check.tp; ++q) {
    int64_t a_rank = q, a_row_index = 0;
    const std::vector<float>* wq = &w[q];
    if (op.type == OpType::kGemm) {
      if (q != r) continue;  // rank r's own A and W, nothing from its peers
      a_row_index = i;
    } else if (op.type == OpType::kAgGemm) {
      if (q > 0) break;  // one contribution: gathered row i from rank i / mr, times W_r
      a_rank = static_cast<int>(i / mr);
      a_row_index = i % mr;
      wq = &w[r];
    } else {
      a_row_index = op.type == OpType::kGemmRs ? r * mr + i : i;
    }
    const uint64_t seed = InputSeed(check.job_seed, check.keys.a, 0, static_cast<int>(a_rank));
    for (int64_t kk = 0; kk < sh.a_cols; ++kk) {
      a_row[kk] = InputValue(check.dt, seed, a_row_index * sh.a_cols + kk, check.scaling.fill_a) *
                  check.scaling.dequant_a;
    }
    for (int64_t kk = 0; kk < sh.w_rows; ++kk) {
      const double a = a_row[kk];
      const float* wrow = wq->data() + kk * nc;
      for (int64_t c = 0; c < nc; ++c) acc[c] += a * wrow[c];
    }
  }
}

// The largest |y - ref| and |ref| over the checked elements of the local ranks.
struct ErrorAndScale {
  double err = 0, ref = 0;
};

ErrorAndScale CompareCheckedRows(OpContext& ctx, const GroupCheck& check,
                                 const std::vector<std::vector<uint8_t>>& y,
                                 const std::vector<std::vector<float>>& w, int threads) {
  struct Task {
    int rank;
    int64_t row;   // in Y
    size_t local;  // in y[rank]
  };
  std::vector<Task> tasks;
  for (int r = 0; r < check.tp; ++r) {
    if (!IsLocal(ctx, r)) continue;
    for (size_t l = 0; l < check.rows.size(); ++l) tasks.push_back({r, check.rows[l], l});
  }
  std::vector<ErrorAndScale> found(tasks.size());
  std::atomic<size_t> next{0};
  OnThreads(threads, [&](int) {
    const int64_t nc = check.nc();
    std::vector<double> acc(nc);
    std::vector<double> a_row(check.sh.a_cols);
    for (size_t t = next++; t < tasks.size(); t = next++) {
      std::fill(acc.begin(), acc.end(), 0.0);
      AddReferenceRow(check, w, tasks[t].rank, tasks[t].row, a_row, acc);
      for (int64_t c = 0; c < nc; ++c) {
        const double got = LoadAsFloat(y[tasks[t].rank].data(), check.y_dt,
                                       tasks[t].local * check.sh.y_cols + check.cols[c]);
        found[t].err = std::max(found[t].err, std::abs(got - acc[c]));
        found[t].ref = std::max(found[t].ref, std::abs(acc[c]));
      }
    }
  });
  ErrorAndScale worst;
  for (const ErrorAndScale& f : found) {
    worst.err = std::max(worst.err, f.err);
    worst.ref = std::max(worst.ref, f.ref);
  }
  return worst;
}

absl::StatusOr<Verification> VerifyGroupOutputs(OpContext& ctx, uint64_t job_seed, InputKeys keys,
                                                int max_rows, int max_cols) {
  RETURN_IF_ERROR(CheckAllWritten(ctx));
  const GroupCheck check = PlanCheck(ctx, job_seed, keys, max_rows, max_cols);
  ASSIGN_OR_RETURN(const std::vector<std::vector<uint8_t>> y, CopyCheckedRows(ctx, check));
  const int threads = std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(), 32));
  const std::vector<std::vector<float>> w = CheckedWeights(check, threads);
  const ErrorAndScale worst = CompareCheckedRows(ctx, check, y, w, threads);
  Verification v;
  v.max_rel_error = worst.ref > 0 ? worst.err / worst.ref : worst.err;
  v.rows_checked = static_cast<int64_t>(check.rows.size());
  v.cols_checked = check.nc();
  return v;
}

}  // namespace

InputKeys InputKeysOf(const OpSpec& op) {
  return {InputKeyOf(op.a_seed_id.empty() ? op.id : op.a_seed_id),
          InputKeyOf(op.w_seed_id.empty() ? op.id : op.w_seed_id)};
}

InputKeys GroupInputKeys(InputKeys keys, int group) {
  return {GroupInputKey(keys.a, group), GroupInputKey(keys.w, group)};
}

absl::Status FillInputs(OpContext& ctx, uint64_t job_seed, InputKeys keys) {
  return ctx.ForEachGroup(
      [&] { return FillGroupInputs(ctx, job_seed, GroupInputKeys(keys, ctx.group())); });
}

absl::Status PoisonOutputs(OpContext& ctx) {
  return ctx.ForEachGroup([&] { return PoisonGroupOutputs(ctx); });
}

absl::StatusOr<Verification> VerifyOutputs(OpContext& ctx, uint64_t job_seed, InputKeys keys,
                                           int max_rows, int max_cols) {
  Verification worst;
  bool first = true;
  RETURN_IF_ERROR(ctx.ForEachGroup([&]() -> absl::Status {
    absl::StatusOr<Verification> v =
        VerifyGroupOutputs(ctx, job_seed, GroupInputKeys(keys, ctx.group()), max_rows, max_cols);
    if (!v.ok()) {
      if (ctx.groups() == 1) return v.status();
      return absl::Status(v.status().code(),
                          absl::StrCat("group ", ctx.group(), ": ", v.status().message()));
    }
    // A NaN error wins, and stays.
    if (first || (!std::isnan(worst.max_rel_error) && !(v->max_rel_error <= worst.max_rel_error))) {
      worst = *v;
    }
    first = false;
    return absl::OkStatus();
  }));
  return worst;
}

double OutputTolerance(OpType type, DType dtype, int tp) {
  const bool sums_ranks = type == OpType::kGemmRs || type == OpType::kGemmAr ||
                          type == OpType::kReduceScatter || type == OpType::kAllReduce;
  return DTypeTolerance(dtype, sums_ranks ? tp : 1);
}

}  // namespace overlap::ops
