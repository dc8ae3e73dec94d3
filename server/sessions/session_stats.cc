#include "server/sessions/session_stats.h"

#include <vector>

#include "common/stats.h"

namespace overlap::sessions {

double PercentileOf(const std::deque<double>& recent, double p) {
  return Percentile({recent.begin(), recent.end()}, p);
}

void AddSample(std::deque<double>& samples, double value) {
  samples.push_back(value);
  while (samples.size() > kRecentSamples) samples.pop_front();
}

void AddDeviceTime(OpCounts& op, double ms) {
  AddSample(op.device_ms, ms);
  op.device_ms_total += ms;
  ++op.timed_steps;
}

SessionFigures FiguresOf(const SessionCounts& counts) {
  SessionFigures f;
  f.id = counts.id;
  f.failed = counts.failed;
  f.error = counts.error;
  f.steps = counts.steps;
  for (const OpCounts& c : counts.ops) {
    SessionOpFigures& op = f.ops.emplace_back();
    op.op = c.op;
    op.steps = c.steps;
    op.median_ms = Summarize({c.device_ms.begin(), c.device_ms.end()}).median;
    op.lane_wait_ms = c.lane_wait_ms;
    op.chunks = c.chunks;
    op.chunks_forced = c.chunks_forced;
    op.chunks_at_bound = c.chunks_at_bound;
    op.max_delay_ms = c.max_delay_ms;
    op.last_ms = c.device_ms.empty() ? 0 : c.device_ms.back();
    op.device_ms_total = c.device_ms_total;
    op.timed_steps = c.timed_steps;
    op.over_bound = c.over_bound;
  }
  f.enqueue_p50_us = PercentileOf(counts.enqueue_us, 50);
  f.enqueue_p99_us = PercentileOf(counts.enqueue_us, 99);
  f.take_p50_us = PercentileOf(counts.take_us, 50);
  f.take_p99_us = PercentileOf(counts.take_us, 99);
  f.taken_polling = counts.taken_polling;
  f.taken_woken = counts.taken_woken;
  f.pieces_replayed = counts.pieces_replayed;
  f.pieces_direct = counts.pieces_direct;
  return f;
}

}  // namespace overlap::sessions
