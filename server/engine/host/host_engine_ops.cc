// The host engine's single-stream work: fills, GEMM, accumulate, peer copies.
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/engine/gemm_checks.h"
#include "server/engine/host/host_engine_impl.h"
#include "server/engine/host/host_kernels.h"

namespace overlap::engine::host {

absl::Status HostEngine::EnqueueFill(StreamId stream, const BufferRef& dst, DType dtype,
                                     const char* op, const char* point,
                                     std::function<void(uint8_t*, size_t)> fill) {
  ASSIGN_OR_RETURN(const Stream* s, FindStream(stream, op));
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Range range, ResolveTyped(dst, s->device, dtype, absl::StrCat(op, " dst")));
  absl::Status result;
  if (!PassFailurePoint(point, {stream}, &result)) return result;
  const Access write{dst.buffer, Region::Contiguous(dst.offset, dst.bytes), true, stream};
  RETURN_IF_ERROR(CheckHazards({stream}, {write}, point));
  const size_t count = dst.bytes / DTypeSize(dtype);
  s->worker->Enqueue([range, count, fill = std::move(fill)] { fill(range.data(), count); });
  return absl::OkStatus();
}

absl::Status HostEngine::FillRandom(StreamId stream, BufferRef dst, DType dtype, uint64_t seed,
                                    float scale) {
  return EnqueueFill(stream, dst, dtype, "FillRandom", "fill_random",
                     [dtype, seed, scale](uint8_t* data, size_t count) {
                       FillRandomKernel(data, dtype, count, seed, scale);
                     });
}

absl::Status HostEngine::FillConstant(StreamId stream, BufferRef dst, DType dtype, float value) {
  return EnqueueFill(stream, dst, dtype, "FillConstant", "fill_constant",
                     [dtype, value](uint8_t* data, size_t count) {
                       FillConstantKernel(data, dtype, count, value);
                     });
}

absl::Status HostEngine::Gemm(StreamId stream, const GemmArgs& g) {
  ASSIGN_OR_RETURN(const Stream* s, FindStream(stream, "Gemm"));
  ASSIGN_OR_RETURN(const GemmOperands operands, CheckGemmArgs(g));
  absl::MutexLock lock(&mu_);
  std::shared_ptr<Storage> storage[4];
  const GemmOperand* ops[4] = {&operands.a, &operands.b, &operands.c, &operands.d};
  for (int i = 0; i < (operands.has_d() ? 4 : 3); ++i) {
    const GemmOperand& op = *ops[i];
    auto it = buffers_.find(op.ref.buffer);
    if (it == buffers_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("Gemm ", op.name, ": unknown buffer ", op.ref.buffer));
    }
    const bool may_be_remote = i == 2 && g.c_on_peer;
    if (it->second.device != s->device && !may_be_remote) {
      return absl::InvalidArgumentError(
          absl::StrCat("Gemm ", op.name, ": buffer ", op.ref.buffer, " is on device ",
                       it->second.device, " but stream ", s->name, " is on device ", s->device));
    }
    const int64_t end = op.ref.offset + op.extent;
    const int64_t elements = static_cast<int64_t>(it->second.bytes / DTypeSize(op.dtype));
    if (end > elements) {
      return absl::InvalidArgumentError(
          absl::StrCat("Gemm ", op.name, ": the ", op.rows, "x", op.cols,
                       " matrix at element offset ", op.ref.offset, " with ld ", op.ref.ld,
                       g.batch > 1 ? absl::StrCat(", batch ", g.batch, " stride ", op.stride) : "",
                       " reaches element ", end, " but buffer ", op.ref.buffer, " holds ", elements,
                       " ", DTypeName(op.dtype), " elements"));
    }
    storage[i] = it->second.storage;
  }
  RETURN_IF_ERROR(CheckGemmOutput(g, operands));
  const auto regions_a = operands.a.Regions(g.batch);
  const auto regions_b = operands.b.Regions(g.batch);
  const auto regions_c = operands.c.Regions(g.batch);
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
  if (operands.has_d()) {
    for (const Region& r : operands.d.Regions(1)) accesses.push_back({g.d.buffer, r, true, stream});
  }
  RETURN_IF_ERROR(CheckHazards({stream}, accesses, "gemm"));
  s->worker->Enqueue([g, scales, a = storage[0], b = storage[1], c = storage[2], d = storage[3]] {
    // The scales are read when the GEMM runs, as a GPU reads them.
    float alpha = 1.0f;
    for (const Range& scale : scales) {
      float value;
      std::memcpy(&value, scale.data(), sizeof(value));
      alpha *= value;
    }
    GemmKernel(g, alpha, a->data.get(), b->data.get(), c->data.get());
    if (d != nullptr) GemmEpilogueKernel(g, c->data.get(), d->data.get());
  });
  return absl::OkStatus();
}

absl::Status HostEngine::Accumulate(StreamId stream, BufferRef dst, BufferRef src, DType dtype) {
  if (dtype == DType::kFP8) {
    return absl::InvalidArgumentError("Accumulate: fp8 is gathered, never summed");
  }
  ASSIGN_OR_RETURN(const Stream* s, FindStream(stream, "Accumulate"));
  if (dst.bytes != src.bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("Accumulate: dst has ", dst.bytes, " bytes but src has ", src.bytes));
  }
  absl::MutexLock lock(&mu_);
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

absl::Status HostEngine::Elementwise(StreamId stream, const ElementwiseArgs& args) {
  RETURN_IF_ERROR(CheckElementwiseArgs(args));
  ASSIGN_OR_RETURN(const Stream* s, FindStream(stream, "Elementwise"));
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(Range to, ResolveTyped(args.dst, s->device, args.dst_dtype, "Elementwise dst"));
  ASSIGN_OR_RETURN(Range from,
                   ResolveTyped(args.src, s->device, args.src_dtype, "Elementwise src"));
  const Region dst_region = Region::Contiguous(args.dst.offset, args.dst.bytes);
  const Region src_region = Region::Contiguous(args.src.offset, args.src.bytes);
  if (args.dst.buffer == args.src.buffer && dst_region.Overlaps(src_region)) {
    return absl::InvalidArgumentError("Elementwise: dst and src overlap");
  }
  absl::Status result;
  if (!PassFailurePoint("elementwise", {stream}, &result)) return result;
  const Access accesses[] = {{args.src.buffer, src_region, false, stream},
                             {args.dst.buffer, dst_region, true, stream}};
  RETURN_IF_ERROR(CheckHazards({stream}, accesses, "elementwise"));
  s->worker->Enqueue([to, from, args] { ElementwiseKernel(args, from.data(), to.data()); });
  return absl::OkStatus();
}

absl::Status HostEngine::PeerCopy(StreamId stream, BufferRef dst, int dst_device, BufferRef src,
                                  int src_device) {
  ASSIGN_OR_RETURN(const Stream* s, FindStream(stream, "PeerCopy"));
  RETURN_IF_ERROR(CheckDevice(dst_device, "PeerCopy dst"));
  RETURN_IF_ERROR(CheckDevice(src_device, "PeerCopy src"));
  if (s->device != dst_device && s->device != src_device) {
    return absl::InvalidArgumentError(absl::StrCat("PeerCopy: stream ", s->name,
                                                   " belongs to neither device ", src_device,
                                                   " nor device ", dst_device));
  }
  if (dst.bytes != src.bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("PeerCopy: dst has ", dst.bytes, " bytes but src has ", src.bytes));
  }
  absl::MutexLock lock(&mu_);
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

absl::Status HostEngine::EnqueueHostWork(StreamId stream,
                                         const std::vector<HostWorkBuffer>& buffers, Work work) {
  ASSIGN_OR_RETURN(const Stream* s, FindStream(stream, "EnqueueHostWork"));
  absl::MutexLock lock(&mu_);
  std::vector<Range> ranges;
  std::vector<Access> accesses;
  for (size_t i = 0; i < buffers.size(); ++i) {
    const BufferRef& ref = buffers[i].ref;
    ASSIGN_OR_RETURN(Range range,
                     Resolve(ref, s->device, absl::StrCat("EnqueueHostWork buffer ", i)));
    ranges.push_back(range);
    accesses.push_back(
        {ref.buffer, Region::Contiguous(ref.offset, ref.bytes), buffers[i].written, stream});
  }
  absl::Status result;
  if (!PassFailurePoint("host_work", {stream}, &result)) return result;
  RETURN_IF_ERROR(CheckHazards({stream}, accesses, "host_work"));
  s->worker->Enqueue(
      [this, device = s->device, ranges = std::move(ranges), work = std::move(work)] {
        std::vector<uint8_t*> data;
        for (const Range& range : ranges) data.push_back(range.data());
        const absl::Status status = work(data);
        if (!status.ok()) RecordError(device, status);
      });
  return absl::OkStatus();
}

}  // namespace overlap::engine::host
