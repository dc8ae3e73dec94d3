#include "server/rpc/session_metrics.h"

#include <array>
#include <functional>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "server/rpc/metric_table.h"

namespace overlap::rpc {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

// An open session with its figures (null before the lanes run it).
struct Open {
  const sessions::SessionRow* row = nullptr;
  const sessions::SessionFigures* figures = nullptr;

  MetricLabels Of() const {
    return {{"session", row->id}, {"name", row->name}, {"owner", row->owner}};
  }
  MetricLabels Of(const sessions::SessionOpFigures& op) const {
    MetricLabels labels = Of();
    labels.push_back({"op", op.op});
    return labels;
  }
  std::string Lane() const {
    return row->priority == sessions::Priority::kDeferred ? "deferred" : "critical";
  }
  bool Deferred() const { return row->priority == sessions::Priority::kDeferred; }
};

bool IsOpen(const sessions::SessionRow& row) {
  return row.state == "joining" || row.state == "ready";
}

using Definition = MetricRow<std::vector<Open>>;
using Fill = Definition::Fill;

// A sample per open session.
Fill EachSession(std::function<void(const Open&, MetricFamily&)> fill) {
  return [fill](const std::vector<Open>& open, MetricFamily& f) {
    for (const Open& s : open) fill(s, f);
  };
}

// A sample per op of each open session the lanes run.
Fill EachOp(
    std::function<void(const Open&, const sessions::SessionOpFigures&, MetricFamily&)> fill) {
  return [fill](const std::vector<Open>& open, MetricFamily& f) {
    for (const Open& s : open) {
      if (s.figures == nullptr) continue;
      for (const sessions::SessionOpFigures& op : s.figures->ops) fill(s, op, f);
    }
  };
}

const std::vector<Definition>& Definitions() {
  static const std::vector<Definition>* definitions = new std::vector<Definition>{
      {"overlapd_sessions_open", "sessions open now (joining or ready), by owner",
       MetricType::Gauge,
       [](const std::vector<Open>& open, MetricFamily& f) {
         std::map<std::string, int> by_owner;
         for (const Open& s : open) ++by_owner[s.row->owner];
         for (const auto& [owner, count] : by_owner) AddSample(f, count, {{"owner", owner}});
       }},
      {"overlapd_session_steps_total", "commands the session completed on every rank",
       MetricType::Counter, EachSession([](const Open& s, MetricFamily& f) {
         AddSample(f, s.figures != nullptr ? static_cast<double>(s.figures->steps) : 0, s.Of());
       })},
      {"overlapd_session_op_seconds",
       "device time of one step of the op on rank 0 (a deferred op: its chunks' sum): the "
       "median of the recent steps, and the sum and count of every step",
       MetricType::Summary,
       EachOp([](const Open& s, const sessions::SessionOpFigures& op, MetricFamily& f) {
         ClientMetric m;
         m.label = s.Of(op);
         m.summary.sample_count = static_cast<uint64_t>(op.timed_steps);
         m.summary.sample_sum = op.device_ms_total / 1000.0;
         if (op.timed_steps > 0) m.summary.quantile.push_back({0.5, op.median_ms / 1000.0});
         f.metric.push_back(std::move(m));
       })},
      {"overlapd_session_lane_wait_seconds_total",
       "time the op's steps waited for their lane (deferred: for critical work of any session)",
       MetricType::Counter,
       EachOp([](const Open& s, const sessions::SessionOpFigures& op, MetricFamily& f) {
         MetricLabels labels = s.Of(op);
         labels.push_back({"lane", s.Lane()});
         AddSample(f, op.lane_wait_ms / 1000.0, std::move(labels));
       })},
      {"overlapd_session_deferred_chunks_total",
       "a deferred op's chunks issued: forced=\"true\" for those sent beside critical work "
       "because the bound was near",
       MetricType::Counter,
       EachOp([](const Open& s, const sessions::SessionOpFigures& op, MetricFamily& f) {
         if (!s.Deferred()) return;
         MetricLabels not_forced = s.Of(op), forced = s.Of(op);
         not_forced.push_back({"forced", "false"});
         forced.push_back({"forced", "true"});
         AddSample(f, static_cast<double>(op.chunks - op.chunks_forced), std::move(not_forced));
         AddSample(f, static_cast<double>(op.chunks_forced), std::move(forced));
       })},
      {"overlapd_session_deferred_over_bound_total",
       "a deferred op's steps completed later than the session's bound after they could run",
       MetricType::Counter,
       EachOp([](const Open& s, const sessions::SessionOpFigures& op, MetricFamily& f) {
         if (s.Deferred()) AddSample(f, static_cast<double>(op.over_bound), s.Of(op));
       })},
      {"overlapd_session_mapped_bytes", "the ranks' tensors the daemon maps for the session",
       MetricType::Gauge, EachSession([](const Open& s, MetricFamily& f) {
         AddSample(f, static_cast<double>(s.row->mapped_bytes), s.Of());
       })},
      {"overlapd_session_enqueue_seconds",
       "host time from the last rank's call to the daemon's enqueue, over the recent steps "
       "(quantile 0.5 and 0.99)",
       MetricType::Gauge, EachSession([](const Open& s, MetricFamily& f) {
         if (s.figures == nullptr || s.figures->steps == 0) return;
         for (const auto& [q, us] :
              {std::pair<const char*, double>{"0.5", s.figures->enqueue_p50_us},
               {"0.99", s.figures->enqueue_p99_us}}) {
           MetricLabels labels = s.Of();
           labels.push_back({"quantile", q});
           AddSample(f, us / 1e6, std::move(labels));
         }
       })},
  };
  return *definitions;
}

using LaneDefinition = MetricRow<std::vector<engine::DeviceLaneFigures>>;
using LaneCount = std::array<int64_t, engine::kLaneUsers> engine::DeviceLaneFigures::*;

// A sample per device and user of one of the figures' counts.
LaneDefinition::Fill EachDeviceUser(LaneCount count) {
  return [count](const std::vector<engine::DeviceLaneFigures>& devices, MetricFamily& f) {
    for (const engine::DeviceLaneFigures& d : devices) {
      for (int u = 0; u < engine::kLaneUsers; ++u) {
        AddSample(f, static_cast<double>((d.*count)[u]),
                  {{"cuda_device", absl::StrCat(d.device)},
                   {"user", engine::LaneUserName(static_cast<engine::LaneUser>(u))}});
      }
    }
  };
}

const std::vector<LaneDefinition>& LaneDefinitions() {
  static const std::vector<LaneDefinition>* definitions = new std::vector<LaneDefinition>{
      {"overlapd_lane_critical_pending", "critical collectives queued or running on the device now",
       MetricType::Gauge, EachDeviceUser(&engine::DeviceLaneFigures::critical_pending)},
      {"overlapd_lane_critical_total", "critical collectives the device's lanes counted",
       MetricType::Counter, EachDeviceUser(&engine::DeviceLaneFigures::critical_issued)},
      {"overlapd_lane_deferred_chunks_total",
       "deferred chunks the device's deferred gate let through", MetricType::Counter,
       EachDeviceUser(&engine::DeviceLaneFigures::deferred_sent)},
      {"overlapd_lane_deferred_yields_total",
       "deferred chunks that waited for critical work on the device (of any user)",
       MetricType::Counter, EachDeviceUser(&engine::DeviceLaneFigures::deferred_yielded)},
      {"overlapd_lane_deferred_yields_to_other_total",
       "of those, chunks that waited for the other user's critical work (a job's chunk for a "
       "session's, a session's for a job's)",
       MetricType::Counter, EachDeviceUser(&engine::DeviceLaneFigures::deferred_yielded_to_other)},
      {"overlapd_lane_deferred_over_bound_total",
       "deferred chunks sent beside critical work because their bound was near",
       MetricType::Counter, EachDeviceUser(&engine::DeviceLaneFigures::deferred_over_bound)},
  };
  return *definitions;
}

}  // namespace

std::vector<MetricFamily> BuildDeviceLaneMetrics(
    const std::vector<engine::DeviceLaneFigures>& devices) {
  if (devices.empty()) return {};
  return BuildFamilies(LaneDefinitions(), devices);
}

std::vector<MetricFamily> BuildSessionMetrics(
    const std::vector<sessions::SessionRow>& rows,
    const std::vector<sessions::SessionFigures>& figures) {
  std::map<std::string, const sessions::SessionFigures*> by_id;
  for (const sessions::SessionFigures& f : figures) by_id[f.id] = &f;
  std::vector<Open> open;
  for (const sessions::SessionRow& row : rows) {
    if (!IsOpen(row)) continue;
    auto it = by_id.find(row.id);
    const sessions::SessionFigures* f = it == by_id.end() ? nullptr : it->second;
    if (f != nullptr && f->failed) continue;  // leaving: the registry has yet to hear
    open.push_back({&row, f});
  }
  return BuildFamilies(Definitions(), open);
}

}  // namespace overlap::rpc
