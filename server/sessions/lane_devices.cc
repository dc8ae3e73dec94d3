#include "server/sessions/lane_devices.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "common/status_macros.h"

namespace overlap::sessions {
namespace {

// The quiet window after a critical span's end (LaneDevices::CriticalPending).
constexpr double kMinQuietMs = 0.2;
constexpr double kMaxQuietMs = 5;

int64_t SteadyNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace


absl::Status LaneDevices::Use(int device) {
  if (origin_.count(device) > 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(const engine::EventId origin, Take(device));
  RETURN_IF_ERROR(
      engine_.RecordEvent(origin, engine_.GetStream(device, engine::StreamRole::kCompute)));
  origin_[device] = origin;
  // The device's other streams start their sessions' work after the origin
  // too, in stream order: a host wait here (Synchronize) would wait for
  // whatever else runs on the device, and the lanes' thread with it.
  for (const engine::StreamRole role : {engine::StreamRole::kComm, engine::StreamRole::kDeferred}) {
    for (int index = 0; index < engine_.StreamsPerRole(); ++index) {
      RETURN_IF_ERROR(engine_.WaitEvent(engine_.GetStream(device, role, index), origin));
    }
  }
  return absl::OkStatus();
}

LaneDevices::~LaneDevices() {
  for (engine::EventId event : created_) engine_.DestroyEvent(event);
}

absl::StatusOr<engine::EventId> LaneDevices::Take(int device) {
  std::vector<engine::EventId>& free = free_[device];
  if (!free.empty()) {
    const engine::EventId event = free.back();
    free.pop_back();
    return event;
  }
  ASSIGN_OR_RETURN(const engine::EventId event, engine_.CreateEvent(device));
  created_.push_back(event);
  return event;
}

void LaneDevices::Give(int device, engine::EventId event) {
  if (event != engine::kNoEvent) free_[device].push_back(event);
}

void LaneDevices::Track(LaneSpan span) {
  const int device = span.interval.device;
  if (span.critical_collective) {
    ++critical_pending_[device];
    if (node_ != nullptr) node_->CriticalBegin(device, engine::LaneUser::kSession);
  }
  if (span.interval.deferred) ++deferred_in_flight_[device];
  spans_.push_back(std::move(span));
}

std::vector<LaneSpan> LaneDevices::Collect() {
  std::vector<LaneSpan> done;
  for (auto it = spans_.begin(); it != spans_.end();) {
    absl::StatusOr<bool> finished = engine_.EventDone(it->end);
    if (finished.ok() && !*finished) {
      ++it;
      continue;
    }
    LaneSpan span = std::move(*it);
    it = spans_.erase(it);
    const int device = span.interval.device;
    if (span.critical_collective) {
      --critical_pending_[device];
      if (node_ != nullptr) node_->CriticalEnd(device, engine::LaneUser::kSession);
      const double quiet_ms = std::clamp(ChunkMs(device), kMinQuietMs, kMaxQuietMs);
      critical_quiet_from_ns_[device] = SteadyNs() + static_cast<int64_t>(quiet_ms * 1e6);
    }
    if (span.interval.deferred) --deferred_in_flight_[device];
    auto origin = origin_.find(device);
    if (finished.ok() && origin != origin_.end()) {
      absl::StatusOr<double> start = engine_.ElapsedMs(origin->second, span.start);
      absl::StatusOr<double> end = engine_.ElapsedMs(origin->second, span.end);
      if (start.ok() && end.ok()) {
        span.interval.start_ms = *start;
        span.interval.end_ms = *end;
        span.read = true;
        if (span.interval.deferred) chunk_ms_[device] = *end - *start;
      }
    }
    Give(device, span.start);
    Give(device, span.end);
    done.push_back(std::move(span));
  }
  return done;
}

bool LaneDevices::CriticalPending(int device) const {
  auto it = critical_pending_.find(device);
  if (it != critical_pending_.end() && it->second > 0) return true;
  auto quiet = critical_quiet_from_ns_.find(device);
  return quiet != critical_quiet_from_ns_.end() && SteadyNs() < quiet->second;
}

int LaneDevices::DeferredInFlight(int device) const {
  auto it = deferred_in_flight_.find(device);
  return it == deferred_in_flight_.end() ? 0 : it->second;
}

double LaneDevices::ChunkMs(int device) const {
  auto it = chunk_ms_.find(device);
  return it == chunk_ms_.end() ? 0 : it->second;
}

}  // namespace overlap::sessions
