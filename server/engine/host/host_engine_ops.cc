// The host engine's single-stream work: fills, GEMM, accumulate, peer copies.
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/engine/host/host_engine_impl.h"
#include "server/engine/host/host_kernels.h"

namespace overlap::engine::host {
namespace {

// The bytes a (batched) row-major matrix view touches.
std::vector<Region> MatrixRegions(const MatrixRef& ref, int64_t rows, int64_t cols, int batch,
                                  int64_t stride, size_t es) {
  const uint64_t ld_bytes = ref.ld * es;
  const uint64_t row_bytes = cols * es;
  if (batch == 1 || stride == 0) {
    return {Region::Strided(ref.offset * es, row_bytes, ld_bytes, rows)};
  }
  if (stride == rows * ref.ld) {  // the batches continue the same row pattern
    return {Region::Strided(ref.offset * es, row_bytes, ld_bytes, rows * batch)};
  }
  std::vector<Region> regions;
  for (int i = 0; i < batch; ++i) {
    regions.push_back(Region::Strided((ref.offset + i * stride) * es, row_bytes, ld_bytes, rows));
  }
  return regions;
}

bool AnyOverlap(const std::vector<Region>& x, const std::vector<Region>& y) {
  for (const Region& a : x) {
    for (const Region& b : y) {
      if (a.Overlaps(b)) return true;
    }
  }
  return false;
}

}  // namespace

absl::Status HostEngine::FillRandom(StreamId stream, BufferRef dst, DType dtype, uint64_t seed,
                                    float scale) {
  ASSIGN_OR_RETURN(const Stream* s, FindStream(stream, "FillRandom"));
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(Range range, ResolveTyped(dst, s->device, dtype, "FillRandom dst"));
  absl::Status result;
  if (!PassFailurePoint("fill_random", {stream}, &result)) return result;
  const Access write{dst.buffer, Region::Contiguous(dst.offset, dst.bytes), true, stream};
  RETURN_IF_ERROR(CheckHazards({stream}, {write}, "fill_random"));
  const size_t count = dst.bytes / DTypeSize(dtype);
  s->worker->Enqueue([range, dtype, count, seed, scale] {
    FillRandomKernel(range.data(), dtype, count, seed, scale);
  });
  return absl::OkStatus();
}

absl::Status HostEngine::FillConstant(StreamId stream, BufferRef dst, DType dtype, float value) {
  ASSIGN_OR_RETURN(const Stream* s, FindStream(stream, "FillConstant"));
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(Range range, ResolveTyped(dst, s->device, dtype, "FillConstant dst"));
  absl::Status result;
  if (!PassFailurePoint("fill_constant", {stream}, &result)) return result;
  const Access write{dst.buffer, Region::Contiguous(dst.offset, dst.bytes), true, stream};
  RETURN_IF_ERROR(CheckHazards({stream}, {write}, "fill_constant"));
  const size_t count = dst.bytes / DTypeSize(dtype);
  s->worker->Enqueue(
      [range, dtype, count, value] { FillConstantKernel(range.data(), dtype, count, value); });
  return absl::OkStatus();
}

absl::Status HostEngine::Gemm(StreamId stream, const GemmArgs& g) {
  ASSIGN_OR_RETURN(const Stream* s, FindStream(stream, "Gemm"));
  if (g.m <= 0 || g.n <= 0 || g.k <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Gemm: m, n, k must be positive, got ", g.m, ", ", g.n, ", ", g.k));
  }
  if (g.batch < 1) {
    return absl::InvalidArgumentError(absl::StrCat("Gemm: batch must be >= 1, got ", g.batch));
  }
  RETURN_IF_ERROR(CheckGemmScales(g));
  // fp8 reads B stored [n, k] and writes bf16 (common/dtype.h).
  const DType c_dtype = GemmOutputDType(g.dtype);
  const bool b_transposed = WeightsStoredTransposed(g.dtype);
  struct Operand {
    const char* name;
    const MatrixRef& ref;
    int64_t rows, cols, stride;
    DType dtype;
  };
  const Operand operands[3] = {
      {"a", g.a, g.m, g.k, g.stride_a, g.dtype},
      {"b", g.b, b_transposed ? g.n : g.k, b_transposed ? g.k : g.n, g.stride_b, g.dtype},
      {"c", g.c, g.m, g.n, g.stride_c, c_dtype}};
  std::lock_guard<std::mutex> lock(mu_);
  std::shared_ptr<Storage> storage[3];
  for (int i = 0; i < 3; ++i) {
    const Operand& op = operands[i];
    if (op.ref.ld < op.cols) {
      return absl::InvalidArgumentError(absl::StrCat("Gemm ", op.name, ": ld ", op.ref.ld,
                                                     " is less than its ", op.cols, " columns"));
    }
    if (g.batch > 1 && op.stride < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("Gemm ", op.name, ": negative batch stride ", op.stride));
    }
    auto it = buffers_.find(op.ref.buffer);
    if (it == buffers_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("Gemm ", op.name, ": unknown buffer ", op.ref.buffer));
    }
    const bool may_be_remote = i == 2 && g.c_on_peer;
    if (it->second.device != s->device && !may_be_remote) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Gemm ", op.name, ": buffer ", op.ref.buffer, " is on device ", it->second.device,
          " but stream ", s->name, " is on device ", s->device));
    }
    // One past the last element touched, in 128 bits so that no ld overflows.
    const __int128 end = static_cast<__int128>(op.ref.offset) +
                         static_cast<__int128>(g.batch - 1) * op.stride +
                         static_cast<__int128>(op.rows - 1) * op.ref.ld + op.cols;
    const size_t elements = it->second.bytes / DTypeSize(op.dtype);
    if (end > static_cast<__int128>(elements)) {
      return absl::InvalidArgumentError(
          absl::StrCat("Gemm ", op.name, ": the ", op.rows, "x", op.cols,
                       " matrix at element offset ", op.ref.offset, " with ld ", op.ref.ld,
                       g.batch > 1 ? absl::StrCat(", batch ", g.batch, " stride ", op.stride) : "",
                       " reaches element ", static_cast<int64_t>(end), " but buffer ",
                       op.ref.buffer, " holds ", elements, " ", DTypeName(op.dtype), " elements"));
    }
    storage[i] = it->second.storage;
  }
  auto regions = [&](const Operand& op) {
    return MatrixRegions(op.ref, op.rows, op.cols, g.batch, op.stride, DTypeSize(op.dtype));
  };
  const auto regions_a = regions(operands[0]);
  const auto regions_b = regions(operands[1]);
  const auto regions_c = regions(operands[2]);
  if (g.batch > 1 && g.stride_c < (g.m - 1) * g.c.ld + g.n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Gemm c: batch stride ", g.stride_c, " makes the batches of c overlap"));
  }
  if ((g.c.buffer == g.a.buffer && AnyOverlap(regions_c, regions_a)) ||
      (g.c.buffer == g.b.buffer && AnyOverlap(regions_c, regions_b))) {
    return absl::InvalidArgumentError("Gemm c: output overlaps an input");
  }
  std::vector<Range> scales;
  for (const BufferRef* scale : {&g.a_scale, &g.b_scale}) {
    if (scale->buffer == kNoBuffer) continue;
    ASSIGN_OR_RETURN(scales.emplace_back(), Resolve(*scale, s->device, "Gemm scale"));
  }
  absl::Status result;
  if (!PassFailurePoint("gemm", {stream}, &result)) return result;
  std::vector<Access> accesses;
  for (const Region& r : regions_a) accesses.push_back({g.a.buffer, r, false, stream});
  for (const Region& r : regions_b) accesses.push_back({g.b.buffer, r, false, stream});
  for (const Range& scale : scales) {
    accesses.push_back(
        {scale.buffer, Region::Contiguous(scale.offset, scale.bytes), false, stream});
  }
  for (const Region& r : regions_c) {
    if (g.beta != 0.0f) accesses.push_back({g.c.buffer, r, false, stream});
    accesses.push_back({g.c.buffer, r, true, stream});
  }
  RETURN_IF_ERROR(CheckHazards({stream}, accesses, "gemm"));
  s->worker->Enqueue([g, scales, a = storage[0], b = storage[1], c = storage[2]] {
    // The scales are read when the GEMM runs, as a GPU reads them.
    float alpha = 1.0f;
    for (const Range& scale : scales) {
      float value;
      std::memcpy(&value, scale.data(), sizeof(value));
      alpha *= value;
    }
    GemmKernel(g, alpha, a->data.get(), b->data.get(), c->data.get());
  });
  return absl::OkStatus();
}

absl::Status HostEngine::Accumulate(StreamId stream, BufferRef dst, BufferRef src, DType dtype) {
  if (dtype == DType::kFP8) {
    return absl::InvalidArgumentError("Accumulate: fp8 is gathered, never summed");
  }
  ASSIGN_OR_RETURN(const Stream* s, FindStream(stream, "Accumulate"));
  if (dst.bytes != src.bytes) {
    return absl::InvalidArgumentError(absl::StrCat("Accumulate: dst has ", dst.bytes,
                                                   " bytes but src has ", src.bytes));
  }
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(Range to, ResolveTyped(dst, s->device, dtype, "Accumulate dst"));
  ASSIGN_OR_RETURN(Range from, ResolveTyped(src, s->device, dtype, "Accumulate src"));
  const Region dst_region = Region::Contiguous(dst.offset, dst.bytes);
  const Region src_region = Region::Contiguous(src.offset, src.bytes);
  if (dst.buffer == src.buffer && dst.offset != src.offset && dst_region.Overlaps(src_region)) {
    return absl::InvalidArgumentError("Accumulate: dst and src partially overlap");
  }
  absl::Status result;
  if (!PassFailurePoint("accumulate", {stream}, &result)) return result;
  const Access accesses[] = {{src.buffer, src_region, false, stream},
                             {dst.buffer, dst_region, false, stream},
                             {dst.buffer, dst_region, true, stream}};
  RETURN_IF_ERROR(CheckHazards({stream}, accesses, "accumulate"));
  const size_t count = dst.bytes / DTypeSize(dtype);
  s->worker->Enqueue(
      [to, from, dtype, count] { AccumulateKernel(to.data(), from.data(), dtype, count); });
  return absl::OkStatus();
}

absl::Status HostEngine::PeerCopy(StreamId stream, BufferRef dst, int dst_device, BufferRef src,
                                  int src_device) {
  ASSIGN_OR_RETURN(const Stream* s, FindStream(stream, "PeerCopy"));
  RETURN_IF_ERROR(CheckDevice(dst_device, "PeerCopy dst"));
  RETURN_IF_ERROR(CheckDevice(src_device, "PeerCopy src"));
  if (s->device != dst_device && s->device != src_device) {
    return absl::InvalidArgumentError(
        absl::StrCat("PeerCopy: stream ", s->name, " belongs to neither device ", src_device,
                     " nor device ", dst_device));
  }
  if (dst.bytes != src.bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("PeerCopy: dst has ", dst.bytes, " bytes but src has ", src.bytes));
  }
  std::lock_guard<std::mutex> lock(mu_);
  ASSIGN_OR_RETURN(Range to, Resolve(dst, dst_device, "PeerCopy dst"));
  ASSIGN_OR_RETURN(Range from, Resolve(src, src_device, "PeerCopy src"));
  const Region dst_region = Region::Contiguous(dst.offset, dst.bytes);
  const Region src_region = Region::Contiguous(src.offset, src.bytes);
  if (dst.buffer == src.buffer && dst_region.Overlaps(src_region)) {
    return absl::InvalidArgumentError("PeerCopy: dst and src overlap");
  }
  absl::Status result;
  if (!PassFailurePoint("peer_copy", {stream}, &result)) return result;
  const Access accesses[] = {{src.buffer, src_region, false, stream},
                             {dst.buffer, dst_region, true, stream}};
  RETURN_IF_ERROR(CheckHazards({stream}, accesses, "peer_copy"));
  s->worker->Enqueue([to, from] { std::memcpy(to.data(), from.data(), to.bytes); });
  return absl::OkStatus();
}

}  // namespace overlap::engine::host
