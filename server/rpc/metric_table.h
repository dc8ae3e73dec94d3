// A Prometheus exposition written as a table: one row per metric family (its
// name, help and type, and how it reads its samples from what one scrape
// gathered, `Sources`). metrics.cc keeps the node's and jobs' table,
// session_metrics.cc the sessions'; both build their families here, so that
// every family is present, perhaps without samples, whatever the sources hold.
#pragma once

#include <functional>
#include <utility>
#include <vector>

#include "prometheus/client_metric.h"
#include "prometheus/metric_family.h"
#include "prometheus/metric_type.h"

namespace overlap::rpc {

using MetricLabels = std::vector<prometheus::ClientMetric::Label>;

template <typename Sources>
struct MetricRow {
  using Fill = std::function<void(const Sources&, prometheus::MetricFamily&)>;
  const char* name;
  const char* help;
  prometheus::MetricType type;
  Fill fill;
};

// One family per row, in the table's order.
template <typename Sources>
std::vector<prometheus::MetricFamily> BuildFamilies(const std::vector<MetricRow<Sources>>& rows,
                                                    const Sources& sources) {
  std::vector<prometheus::MetricFamily> out;
  out.reserve(rows.size());
  for (const MetricRow<Sources>& row : rows) {
    prometheus::MetricFamily family;
    family.name = row.name;
    family.help = row.help;
    family.type = row.type;
    row.fill(sources, family);
    out.push_back(std::move(family));
  }
  return out;
}

// A counter's or a gauge's sample (as `f` is typed) of `value`.
inline void AddSample(prometheus::MetricFamily& f, double value, MetricLabels labels = {}) {
  prometheus::ClientMetric m;
  m.label = std::move(labels);
  if (f.type == prometheus::MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  f.metric.push_back(std::move(m));
}

}  // namespace overlap::rpc
