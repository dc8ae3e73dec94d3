// ForwardingEngine: a decorator base that passes every Engine call to the
// engine it wraps, so that a decorator overrides only the calls it records or
// changes (the runner's TimelineEngine, the tests' failure injectors). Every
// Engine method is pure, so a call added to Engine and missed here fails to
// compile rather than silently skipping the wrapped engine.
//
// The wrapped engine must outlive the decorator. Thread safety: the wrapped
// engine's.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "server/engine/engine.h"

namespace overlap::engine {

class ForwardingEngine : public Engine {
 public:
  explicit ForwardingEngine(Engine& inner) : inner_(inner) {}

  std::string Name() const override { return inner_.Name(); }
  int DeviceCount() const override { return inner_.DeviceCount(); }
  DeviceInfo GetDeviceInfo(int device) const override { return inner_.GetDeviceInfo(device); }
  BackendVersions Versions() const override { return inner_.Versions(); }
  int CollectiveSmBudget() const override { return inner_.CollectiveSmBudget(); }
  double PreheatMs() const override { return inner_.PreheatMs(); }
  int RanksPerGpu() const override { return inner_.RanksPerGpu(); }
  bool LibraryAlgorithms() const override { return inner_.LibraryAlgorithms(); }
  bool GemmEpilogues() const override { return inner_.GemmEpilogues(); }
  bool IsLocalDevice(int device) const override { return inner_.IsLocalDevice(device); }
  std::string DescribeLanes() const override { return inner_.DescribeLanes(); }

  const DeviceMonitor* Monitor() const override { return inner_.Monitor(); }
  GraphCapture* Graphs() const override { return inner_.Graphs(); }
  LaunchGates* Gates() const override { return inner_.Gates(); }
  HostWorkQueue* HostWork() const override { return inner_.HostWork(); }
  CrossProcessCollectives* CrossProcess() const override { return inner_.CrossProcess(); }
  SharedMemory* Shared() const override { return inner_.Shared(); }

  StreamId GetStream(int device, StreamRole role, int index = 0) override {
    return inner_.GetStream(device, role, index);
  }
  int StreamsPerRole() const override { return inner_.StreamsPerRole(); }
  absl::StatusOr<BufferId> Allocate(int device, size_t bytes) override {
    return inner_.Allocate(device, bytes);
  }
  void Free(BufferId buffer) override { inner_.Free(buffer); }
  absl::StatusOr<EventId> CreateEvent(int device) override { return inner_.CreateEvent(device); }
  void DestroyEvent(EventId event) override { inner_.DestroyEvent(event); }
  absl::Status RecordEvent(EventId event, StreamId stream) override {
    return inner_.RecordEvent(event, stream);
  }
  absl::Status WaitEvent(StreamId stream, EventId event) override {
    return inner_.WaitEvent(stream, event);
  }
  absl::StatusOr<double> ElapsedMs(EventId start, EventId end) override {
    return inner_.ElapsedMs(start, end);
  }
  absl::StatusOr<bool> EventDone(EventId event) override { return inner_.EventDone(event); }

  absl::Status FillRandom(StreamId stream, BufferRef dst, DType dtype, uint64_t seed,
                          float scale) override {
    return inner_.FillRandom(stream, dst, dtype, seed, scale);
  }
  absl::Status FillConstant(StreamId stream, BufferRef dst, DType dtype, float value) override {
    return inner_.FillConstant(stream, dst, dtype, value);
  }
  absl::Status Gemm(StreamId stream, const GemmArgs& args) override {
    return inner_.Gemm(stream, args);
  }
  absl::Status Accumulate(StreamId stream, BufferRef dst, BufferRef src, DType dtype) override {
    return inner_.Accumulate(stream, dst, src, dtype);
  }
  absl::Status Elementwise(StreamId stream, const ElementwiseArgs& args) override {
    return inner_.Elementwise(stream, args);
  }
  absl::Status AllGather(const CollectiveArgs& args) override { return inner_.AllGather(args); }
  absl::Status ReduceScatter(const CollectiveArgs& args) override {
    return inner_.ReduceScatter(args);
  }
  absl::Status AllReduce(const CollectiveArgs& args) override { return inner_.AllReduce(args); }
  absl::Status SendRecv(int channel, const std::vector<int>& group,
                        const std::vector<Transfer>& transfers, bool beside_gemm) override {
    return inner_.SendRecv(channel, group, transfers, beside_gemm);
  }
  absl::Status PeerCopy(StreamId stream, BufferRef dst, int dst_device, BufferRef src,
                        int src_device) override {
    return inner_.PeerCopy(stream, dst, dst_device, src, src_device);
  }
  absl::Status Barrier(int channel, const std::vector<int>& devices,
                       const std::vector<StreamId>& streams) override {
    return inner_.Barrier(channel, devices, streams);
  }

  absl::Status CopyToHost(void* dst, BufferRef src, int device) override {
    return inner_.CopyToHost(dst, src, device);
  }
  absl::Status CopyFromHost(BufferRef dst, int device, const void* src) override {
    return inner_.CopyFromHost(dst, device, src);
  }
  absl::StatusOr<int64_t> FirstNonFinite(BufferRef src, DType dtype, int device) override {
    return inner_.FirstNonFinite(src, dtype, device);
  }
  absl::Status Synchronize(const std::vector<int>& devices) override {
    return inner_.Synchronize(devices);
  }

 protected:
  Engine& inner() const { return inner_; }

 private:
  Engine& inner_;
};

}  // namespace overlap::engine
