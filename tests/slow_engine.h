// A decorator for tests of the run-time scheduler: one device's GEMMs, or its
// critical collectives, made slow by a host task sleeping before each on its
// stream (the engine must have HostWork: the host backend).
#pragma once

#include <vector>

#include <gtest/gtest.h>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/engine/forwarding_engine.h"

namespace overlap {

// Makes one device's GEMMs, or its critical collectives (reduce-scatters and
// all-gathers), slow: a host task sleeping before each on its stream.
class SlowEngine : public engine::ForwardingEngine {
 public:
  SlowEngine(engine::Engine& inner, int device, absl::Duration gemm, absl::Duration collective)
      : ForwardingEngine(inner), device_(device), gemm_(gemm), collective_(collective) {}

  absl::Status Gemm(engine::StreamId stream, const engine::GemmArgs& args) override {
    if (gemm_ > absl::ZeroDuration() && OnSlowDevice(stream)) Sleep(stream, gemm_);
    return ForwardingEngine::Gemm(stream, args);
  }
  absl::Status ReduceScatter(const engine::CollectiveArgs& args) override {
    SlowCollective(args);
    return ForwardingEngine::ReduceScatter(args);
  }
  absl::Status AllGather(const engine::CollectiveArgs& args) override {
    SlowCollective(args);
    return ForwardingEngine::AllGather(args);
  }

 private:
  bool OnSlowDevice(engine::StreamId stream) {
    for (int role = 0; role < 2; ++role) {
      for (int i = 0; i < StreamsPerRole(); ++i) {
        const auto r = role == 0 ? engine::StreamRole::kCompute : engine::StreamRole::kComm;
        if (GetStream(device_, r, i) == stream) return true;
      }
    }
    return false;
  }
  void SlowCollective(const engine::CollectiveArgs& args) {
    if (collective_ <= absl::ZeroDuration() || args.channel == engine::kDeferredLaneChannel) return;
    for (const engine::RankBuffers& rank : args.ranks) {
      if (rank.device == device_) Sleep(rank.stream, collective_);
    }
  }
  void Sleep(engine::StreamId stream, absl::Duration d) {
    ASSERT_TRUE(HostWork()
                    ->EnqueueHostWork(stream, {},
                                      [d](const std::vector<uint8_t*>&) {
                                        absl::SleepFor(d);
                                        return absl::OkStatus();
                                      })
                    .ok());
  }

  const int device_;
  const absl::Duration gemm_, collective_;
};

}  // namespace overlap
