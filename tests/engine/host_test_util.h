// Helpers shared by the host engine tests: engines, typed uploads/downloads.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "common/dtype.h"
#include "gtest/gtest.h"
#include "server/engine/engine.h"
#include "server/engine/host/host_engine.h"

namespace overlap::engine::testing {

inline std::unique_ptr<Engine> MakeHostEngine(int devices = 2, bool hazards = true,
                                              int64_t memory = 64LL << 20) {
  HostEngineOptions options;
  options.device_count = devices;
  options.hazard_checks = hazards;
  options.device_memory_bytes = memory;
  auto engine = CreateHostEngine(options);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return std::move(engine).value();
}

inline BufferRef Whole(BufferId buffer, size_t bytes) { return BufferRef{buffer, 0, bytes}; }

// Values as stored in `dtype` (rounded to nearest even).
inline std::vector<uint8_t> Encode(const std::vector<float>& values, DType dtype) {
  std::vector<uint8_t> bytes(values.size() * DTypeSize(dtype));
  for (size_t i = 0; i < values.size(); ++i) StoreFromFloat(bytes.data(), dtype, i, values[i]);
  return bytes;
}

inline std::vector<float> Decode(const std::vector<uint8_t>& bytes, DType dtype) {
  std::vector<float> values(bytes.size() / DTypeSize(dtype));
  for (size_t i = 0; i < values.size(); ++i) values[i] = LoadAsFloat(bytes.data(), dtype, i);
  return values;
}

// A new buffer on `device` holding `values` in `dtype`.
inline BufferId Upload(Engine& engine, int device, const std::vector<float>& values,
                       DType dtype = DType::kF32) {
  const std::vector<uint8_t> bytes = Encode(values, dtype);
  auto buffer = engine.Allocate(device, bytes.size());
  EXPECT_TRUE(buffer.ok()) << buffer.status();
  EXPECT_TRUE(engine.CopyFromHost(Whole(*buffer, bytes.size()), device, bytes.data()).ok());
  return *buffer;
}

inline std::vector<float> Download(Engine& engine, int device, BufferRef ref,
                                   DType dtype = DType::kF32) {
  std::vector<uint8_t> bytes(ref.bytes);
  const absl::Status status = engine.CopyToHost(bytes.data(), ref, device);
  EXPECT_TRUE(status.ok()) << status;
  return Decode(bytes, dtype);
}

}  // namespace overlap::engine::testing
