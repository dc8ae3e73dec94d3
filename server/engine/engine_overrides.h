// The engine's work calls (engine.h: streams, memory, events, fills, GEMM,
// collectives, copies, synchronize) as one list of override declarations, for
// the classes that implement every one of them: the host and CUDA backends
// and the spanning engine. A call added to Engine is added here once, and each
// of them then fails to link until it defines it, instead of three hand-kept
// lists drifting apart. Decorators that pass calls on derive from
// ForwardingEngine instead, which defines each inline.
#pragma once

#include "server/engine/engine.h"

// Inside a class deriving from overlap::engine::Engine.
#define OVERLAP_ENGINE_WORK_OVERRIDES                                                           \
  ::overlap::engine::StreamId GetStream(int device, ::overlap::engine::StreamRole role,         \
                                        int index = 0) override;                                \
  absl::StatusOr<::overlap::engine::BufferId> Allocate(int device, size_t bytes) override;      \
  void Free(::overlap::engine::BufferId buffer) override;                                       \
  absl::StatusOr<::overlap::engine::EventId> CreateEvent(int device) override;                  \
  void DestroyEvent(::overlap::engine::EventId event) override;                                 \
  absl::Status RecordEvent(::overlap::engine::EventId event, ::overlap::engine::StreamId stream) \
      override;                                                                                 \
  absl::Status WaitEvent(::overlap::engine::StreamId stream, ::overlap::engine::EventId event)   \
      override;                                                                                 \
  absl::StatusOr<double> ElapsedMs(::overlap::engine::EventId start,                            \
                                   ::overlap::engine::EventId end) override;                    \
  absl::StatusOr<bool> EventDone(::overlap::engine::EventId event) override;                    \
  absl::Status FillRandom(::overlap::engine::StreamId stream, ::overlap::engine::BufferRef dst, \
                          ::overlap::DType dtype, uint64_t seed, float scale) override;         \
  absl::Status FillConstant(::overlap::engine::StreamId stream,                                 \
                            ::overlap::engine::BufferRef dst, ::overlap::DType dtype,           \
                            float value) override;                                              \
  absl::Status Gemm(::overlap::engine::StreamId stream, const ::overlap::engine::GemmArgs& args) \
      override;                                                                                 \
  absl::Status Accumulate(::overlap::engine::StreamId stream, ::overlap::engine::BufferRef dst, \
                          ::overlap::engine::BufferRef src, ::overlap::DType dtype) override;   \
  absl::Status Elementwise(::overlap::engine::StreamId stream,                                  \
                           const ::overlap::engine::ElementwiseArgs& args) override;            \
  absl::Status AllGather(const ::overlap::engine::CollectiveArgs& args) override;               \
  absl::Status ReduceScatter(const ::overlap::engine::CollectiveArgs& args) override;           \
  absl::Status AllReduce(const ::overlap::engine::CollectiveArgs& args) override;               \
  absl::Status SendRecv(int channel, const std::vector<int>& group,                             \
                        const std::vector<::overlap::engine::Transfer>& transfers,              \
                        bool beside_gemm) override;                                             \
  absl::Status PeerCopy(::overlap::engine::StreamId stream, ::overlap::engine::BufferRef dst,   \
                        int dst_device, ::overlap::engine::BufferRef src, int src_device)       \
      override;                                                                                 \
  absl::Status Barrier(int channel, const std::vector<int>& devices,                            \
                       const std::vector<::overlap::engine::StreamId>& streams) override;       \
  absl::Status CopyToHost(void* dst, ::overlap::engine::BufferRef src, int device) override;    \
  absl::Status CopyFromHost(::overlap::engine::BufferRef dst, int device, const void* src)      \
      override;                                                                                 \
  absl::StatusOr<int64_t> FirstNonFinite(::overlap::engine::BufferRef src,                      \
                                         ::overlap::DType dtype, int device) override;          \
  absl::Status Synchronize(const std::vector<int>& devices) override
