#include "server/ops/chain_reference.h"

#include <algorithm>
#include <cmath>
#include <thread>

#include "absl/strings/str_format.h"
#include "common/activation.h"
#include "common/graph_validator.h"
#include "common/status_macros.h"

namespace overlap::ops {
namespace {

// How much of the error an op's input carries reaches its output, relative to
// each one's largest value: a GEMM of the graphs' weights (uniform, scaled by
// 1/sqrt(k)) keeps it; GELU's slope is at most 1.13; SwiGLU multiplies two
// values that each carry it, through SiLU (slope at most 1.1).
double Gain(Activation activation) {
  switch (activation) {
    case Activation::kNone:
      return 1.0;
    case Activation::kGelu:
      return 1.2;
    case Activation::kSwiglu:
      return 2.2;
  }
  return 1.0;
}

constexpr int64_t kColumnBlock = 64;

}  // namespace

ChainReference::ChainReference(const JobSpec& spec, int device_count)
    : spec_(spec), device_count_(device_count) {
  for (size_t i = 0; i < spec.ops.size(); ++i) index_of_[spec.ops[i].id] = static_cast<int>(i);
  absl::StatusOr<std::vector<int>> order = TopologicalOrder(spec);
  if (order.ok()) order_ = *std::move(order);  // a job runs only validated graphs
}

int ChainReference::SizeOf(int op) const {
  return GroupSize(spec_.mesh, spec_.ops[op].group, device_count_);
}

ChainReference::Place ChainReference::PlaceOf(int op, int position) const {
  const std::vector<std::vector<int>> groups =
      GroupsOf(spec_.mesh, spec_.ops[op].group, device_count_);
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t r = 0; r < groups[g].size(); ++r) {
      if (groups[g][r] == position) return {static_cast<int>(g), static_cast<int>(r)};
    }
  }
  return {};
}

int ChainReference::PositionOf(int op, int group, int rank) const {
  return GroupsOf(spec_.mesh, spec_.ops[op].group, device_count_)[group][rank];
}

std::vector<ChainReference::Term> ChainReference::TermsOf(int op, const Place& place,
                                                          int64_t row) const {
  const OpSpec& spec = spec_.ops[op];
  const int size = SizeOf(op);
  const LocalShapes sh = LocalShapesFor(spec, size);
  std::vector<Term> terms;
  switch (spec.type) {
    case OpType::kAgGemm:
    case OpType::kAllGather:  // row i of the gathered input, from the rank that holds it
      terms.push_back({static_cast<int>(row / sh.a_rows), row % sh.a_rows});
      break;
    case OpType::kGemm:
      terms.push_back({place.rank, row});
      break;
    case OpType::kGemmRs:
    case OpType::kReduceScatter:  // the rank's block of every rank's partial
      for (int q = 0; q < size; ++q) terms.push_back({q, place.rank * sh.y_rows + row});
      break;
    case OpType::kGemmAr:
    case OpType::kAllReduce:
      for (int q = 0; q < size; ++q) terms.push_back({q, row});
      break;
  }
  return terms;
}

void ChainReference::Request(int op, int position, const std::vector<int64_t>& rows) {
  std::set<int64_t>& requested = requested_[{op, position}];
  const OpSpec& spec = spec_.ops[op];
  const Place place = PlaceOf(op, position);
  for (const int64_t row : rows) {
    if (!requested.insert(row).second || spec.input.empty()) continue;
    const int from = index_of_.at(spec.input);
    for (const Term& term : TermsOf(op, place, row)) {
      // A rank's input is the output of the producer's rank on its device.
      Request(from, PositionOf(op, place.group, term.rank), {term.row});
    }
  }
}

std::vector<double> ChainReference::InputRow(int op, int group, int rank, int64_t row) const {
  const OpSpec& spec = spec_.ops[op];
  const LocalShapes sh = LocalShapesFor(spec, SizeOf(op));
  const DType a_dtype = BufferDTypesFor(spec.type, spec_.dtype).a;
  std::vector<double> values(static_cast<size_t>(sh.a_cols));
  if (spec.input.empty()) {
    const InputScaling scaling = InputScalingFor(spec, spec_.dtype);
    const uint64_t seed =
        InputSeed(spec_.seed, GroupInputKeys(InputKeysOf(spec), group).a, 0, rank);
    for (int64_t kk = 0; kk < sh.a_cols; ++kk) {
      values[kk] = InputValue(a_dtype, seed, row * sh.a_cols + kk, scaling.fill_a) *
                   scaling.dequant_a;
    }
    return values;
  }
  const int from = index_of_.at(spec.input);
  const DType out_dtype = BufferDTypesFor(spec_.ops[from].type, spec_.dtype).y;
  const std::vector<double>& out = rows_.at({from, PositionOf(op, group, rank), row});
  const double scale = a_dtype == DType::kFP8 ? kChainFp8Dequant : 1.0;
  const int64_t half = static_cast<int64_t>(out.size()) / 2;
  for (int64_t j = 0; j < sh.a_cols; ++j) {
    double x = RoundAsStored(out_dtype, out[j]);
    if (spec.activation == Activation::kGelu) x = RoundAsStored(DType::kF32, Gelu(x));
    if (spec.activation == Activation::kSwiglu) {
      x = RoundAsStored(DType::kF32, Silu(x) * RoundAsStored(out_dtype, out[j + half]));
    }
    values[j] = RoundAsStored(a_dtype, x / scale) * scale;
  }
  return values;
}

void ChainReference::ComputeRows(int op, int position, const std::set<int64_t>& rows) {
  const OpSpec& spec = spec_.ops[op];
  const LocalShapes sh = LocalShapesFor(spec, SizeOf(op));
  const Place place = PlaceOf(op, position);
  // Each output row, and what each W rank multiplies into it.
  struct Product {
    std::vector<double>* out;
    std::vector<double> a;
  };
  std::map<int, std::vector<Product>> by_w_rank;
  for (const int64_t row : rows) {
    std::vector<double>& out = rows_[{op, position, row}];
    out.assign(static_cast<size_t>(sh.y_cols), 0.0);
    for (const Term& term : TermsOf(op, place, row)) {
      std::vector<double> a = InputRow(op, place.group, term.rank, term.row);
      if (IsCollectiveOnly(spec.type)) {
        for (int64_t j = 0; j < sh.y_cols; ++j) out[j] += a[j];
        continue;
      }
      // ag_gemm multiplies the gathered row by the rank's own W.
      const int w_rank = spec.type == OpType::kAgGemm ? place.rank : term.rank;
      by_w_rank[w_rank].push_back({&out, std::move(a)});
    }
  }
  if (by_w_rank.empty()) return;
  const InputScaling scaling = InputScalingFor(spec, spec_.dtype);
  const bool transposed = WeightsStoredTransposed(spec_.dtype);
  const int threads = static_cast<int>(
      std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(), 32)));
  const int64_t blocks = (sh.w_cols + kColumnBlock - 1) / kColumnBlock;
  for (const auto& entry : by_w_rank) {
    // Named, not bound: lambdas below capture them (clang 14 cannot capture bindings).
    const int w_rank = entry.first;
    const std::vector<Product>& products = entry.second;
    const uint64_t seed =
        InputSeed(spec_.seed, GroupInputKeys(InputKeysOf(spec), place.group).w, 1, w_rank);
    auto work = [&, seed](int t) {
      std::vector<float> w(static_cast<size_t>(sh.w_rows * kColumnBlock));
      for (int64_t b = t; b < blocks; b += threads) {
        const int64_t c0 = b * kColumnBlock;
        const int64_t width = std::min(kColumnBlock, sh.w_cols - c0);
        for (int64_t kk = 0; kk < sh.w_rows; ++kk) {
          for (int64_t c = 0; c < width; ++c) {
            const int64_t col = c0 + c;
            const int64_t index = transposed ? col * sh.w_rows + kk : kk * sh.w_cols + col;
            w[kk * kColumnBlock + c] = static_cast<float>(
                InputValue(spec_.dtype, seed, index, scaling.fill_w) * scaling.dequant_w);
          }
        }
        for (const Product& p : products) {
          double* out = p.out->data() + c0;
          for (int64_t kk = 0; kk < sh.w_rows; ++kk) {
            const double a = p.a[kk];
            const float* wrow = w.data() + kk * kColumnBlock;
            for (int64_t c = 0; c < width; ++c) out[c] += a * wrow[c];
          }
        }
      }
    };
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) pool.emplace_back(work, t);
    for (std::thread& th : pool) th.join();
  }
}

absl::Status ChainReference::ComputeRequested() {
  for (const int op : order_) {
    for (const auto& [key, rows] : requested_) {
      if (key.first != op) continue;
      std::set<int64_t> missing;
      for (const int64_t row : rows) {
        if (rows_.count({op, key.second, row}) == 0) missing.insert(row);
      }
      if (!missing.empty()) ComputeRows(op, key.second, missing);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Verification> ChainReference::Verify(int index, OpContext& ctx, int max_rows) {
  const OpSpec& op = spec_.ops[index];
  const int size = SizeOf(index);
  const LocalShapes sh = LocalShapesFor(op, size);
  const DType y_dtype = ctx.DTypeOf(ctx.rank(0).y);
  const std::vector<int64_t> rows =
      IndicesToCheck(sh.y_rows, false, max_rows, spec_.seed + InputKeysOf(op).w);
  std::vector<int> local;  // ctx ranks on this daemon
  for (int r = 0; r < ctx.tp(); ++r) {
    if (!ctx.engine().IsLocalDevice(ctx.rank(r).device)) continue;
    local.push_back(r);
    ASSIGN_OR_RETURN(const int64_t bad, ctx.engine().FirstNonFinite(
                                            ctx.Rows(ctx.rank(r).y, 0, sh.y_rows, sh.y_cols),
                                            y_dtype, ctx.rank(r).device));
    if (bad >= 0) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "op %s: output not fully written: rank %d row %d col %d is not finite", op.id, r,
          bad / sh.y_cols, bad % sh.y_cols));
    }
    Request(index, PositionOf(index, r / size, r % size), rows);
  }
  RETURN_IF_ERROR(ComputeRequested());
  double err = 0, ref = 0;
  std::vector<uint8_t> y(static_cast<size_t>(sh.y_cols) * DTypeSize(y_dtype));
  for (const int r : local) {
    const int position = PositionOf(index, r / size, r % size);
    for (const int64_t row : rows) {
      RETURN_IF_ERROR(ctx.engine().CopyToHost(
          y.data(), ctx.Rows(ctx.rank(r).y, row, 1, sh.y_cols), ctx.rank(r).device));
      const std::vector<double>& want = rows_.at({index, position, row});
      for (int64_t j = 0; j < sh.y_cols; ++j) {
        const double got = LoadAsFloat(y.data(), y_dtype, static_cast<size_t>(j));
        err = std::max(err, std::abs(got - want[j]));
        if (std::isnan(got)) err = got;
        ref = std::max(ref, std::abs(want[j]));
      }
    }
  }
  Verification v;
  v.max_rel_error = ref > 0 ? err / ref : err;
  v.rows_checked = static_cast<int64_t>(rows.size());
  v.cols_checked = sh.y_cols;
  return v;
}

double ChainReference::Tolerance(int index) const {
  const OpSpec& op = spec_.ops[index];
  double tolerance = OutputTolerance(op.type, spec_.dtype, SizeOf(index));
  if (!op.input.empty()) {
    tolerance += Gain(op.activation) * Tolerance(index_of_.at(op.input));
  }
  return tolerance;
}

}  // namespace overlap::ops
