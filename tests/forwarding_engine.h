// A test decorator base: forwards every engine call to the engine it owns, so
// that a test engine overrides only the calls it records or changes.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "server/engine/engine.h"

namespace overlap {

class ForwardingEngine : public engine::Engine {
 public:
  explicit ForwardingEngine(std::unique_ptr<engine::Engine> inner) : inner_(std::move(inner)) {}

  std::string Name() const override { return inner_->Name(); }
  int DeviceCount() const override { return inner_->DeviceCount(); }
  engine::DeviceInfo GetDeviceInfo(int d) const override { return inner_->GetDeviceInfo(d); }
  engine::BackendVersions Versions() const override { return inner_->Versions(); }
  int64_t MemoryInUse(int d) const override { return inner_->MemoryInUse(d); }
  int CollectiveSmBudget() const override { return inner_->CollectiveSmBudget(); }
  bool LibraryAlgorithms() const override { return inner_->LibraryAlgorithms(); }
  engine::DeviceTelemetry Telemetry(int d) const override { return inner_->Telemetry(d); }
  engine::StreamId GetStream(int d, engine::StreamRole role, int index) override {
    return inner_->GetStream(d, role, index);
  }
  int StreamsPerRole() const override { return inner_->StreamsPerRole(); }
  absl::StatusOr<engine::BufferId> Allocate(int d, size_t bytes) override {
    return inner_->Allocate(d, bytes);
  }
  void Free(engine::BufferId b) override { inner_->Free(b); }
  absl::StatusOr<engine::EventId> CreateEvent(int d) override { return inner_->CreateEvent(d); }
  void DestroyEvent(engine::EventId e) override { inner_->DestroyEvent(e); }
  absl::Status RecordEvent(engine::EventId e, engine::StreamId s) override {
    return inner_->RecordEvent(e, s);
  }
  absl::Status WaitEvent(engine::StreamId s, engine::EventId e) override {
    return inner_->WaitEvent(s, e);
  }
  absl::StatusOr<double> ElapsedMs(engine::EventId a, engine::EventId b) override {
    return inner_->ElapsedMs(a, b);
  }
  absl::Status FillRandom(engine::StreamId s, engine::BufferRef dst, DType t, uint64_t seed,
                          float scale) override {
    return inner_->FillRandom(s, dst, t, seed, scale);
  }
  absl::Status FillConstant(engine::StreamId s, engine::BufferRef dst, DType t,
                            float value) override {
    return inner_->FillConstant(s, dst, t, value);
  }
  absl::Status Gemm(engine::StreamId s, const engine::GemmArgs& args) override {
    return inner_->Gemm(s, args);
  }
  absl::Status Accumulate(engine::StreamId s, engine::BufferRef dst, engine::BufferRef src,
                          DType t) override {
    return inner_->Accumulate(s, dst, src, t);
  }
  absl::Status AllGather(const engine::CollectiveArgs& args) override {
    return inner_->AllGather(args);
  }
  absl::Status ReduceScatter(const engine::CollectiveArgs& args) override {
    return inner_->ReduceScatter(args);
  }
  absl::Status AllReduce(const engine::CollectiveArgs& args) override {
    return inner_->AllReduce(args);
  }
  absl::Status SendRecv(int channel, const std::vector<int>& group,
                        const std::vector<engine::Transfer>& transfers, bool beside_gemm) override {
    return inner_->SendRecv(channel, group, transfers, beside_gemm);
  }
  absl::Status PeerCopy(engine::StreamId s, engine::BufferRef dst, int dst_device,
                        engine::BufferRef src, int src_device) override {
    return inner_->PeerCopy(s, dst, dst_device, src, src_device);
  }
  absl::Status Barrier(int channel, const std::vector<int>& devices,
                       const std::vector<engine::StreamId>& streams) override {
    return inner_->Barrier(channel, devices, streams);
  }
  absl::Status CopyToHost(void* dst, engine::BufferRef src, int d) override {
    return inner_->CopyToHost(dst, src, d);
  }
  absl::Status CopyFromHost(engine::BufferRef dst, int d, const void* src) override {
    return inner_->CopyFromHost(dst, d, src);
  }
  absl::Status Synchronize(const std::vector<int>& devices) override {
    return inner_->Synchronize(devices);
  }
  bool Healthy() const override { return inner_->Healthy(); }

 protected:
  engine::Engine& inner() { return *inner_; }

 private:
  std::unique_ptr<engine::Engine> inner_;
};

}  // namespace overlap
