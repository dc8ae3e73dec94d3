#include "server/rpc/metrics.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/graph.h"
#include "common/logging.h"
#include "prometheus/text_serializer.h"
#include "server/rpc/node_service.h"

namespace overlap::rpc {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;
using Labels = std::vector<ClientMetric::Label>;

MetricFamily Family(const std::string& name, const std::string& help, MetricType type) {
  MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = type;
  return f;
}

void Add(MetricFamily& f, double value, Labels labels = {}) {
  ClientMetric m;
  m.label = std::move(labels);
  if (f.type == MetricType::Counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  f.metric.push_back(std::move(m));
}

ClientMetric::Label DeviceLabel(int device) { return {"device", absl::StrCat(device)}; }

}  // namespace

std::vector<MetricFamily> BuildMetrics(const v1::GetNodeInfoResponse& node,
                                       const v1::GetStatsResponse& stats,
                                       const std::vector<v1::Job>& recent) {
  std::vector<MetricFamily> out;
  MetricFamily healthy = Family("overlapd_healthy",
                                "1 while the daemon takes work and its "
                                "devices are usable",
                                MetricType::Gauge);
  Add(healthy, node.healthy() ? 1 : 0, {{"backend", node.backend()}});
  out.push_back(std::move(healthy));
  MetricFamily uptime =
      Family("overlapd_uptime_seconds", "since this process started", MetricType::Gauge);
  Add(uptime, stats.uptime_s());
  out.push_back(std::move(uptime));

  MetricFamily jobs =
      Family("overlapd_jobs", "jobs by state, pruned ones included", MetricType::Gauge);
  const std::map<std::string, int64_t> by_state(stats.jobs_by_state().begin(),
                                                stats.jobs_by_state().end());
  for (const auto& [state, count] : by_state) {
    Add(jobs, static_cast<double>(count), {{"state", state}});
  }
  out.push_back(std::move(jobs));
  MetricFamily submitted = Family("overlapd_jobs_submitted_total",
                                  "jobs accepted since this process started", MetricType::Counter);
  Add(submitted, static_cast<double>(stats.jobs_submitted()));
  out.push_back(std::move(submitted));
  MetricFamily rejected =
      Family("overlapd_jobs_rejected_total", "submissions refused since this process started",
             MetricType::Counter);
  Add(rejected, static_cast<double>(stats.jobs_rejected()));
  out.push_back(std::move(rejected));

  MetricFamily memory = Family("overlapd_device_memory_bytes",
                               "device memory jobs may use: the daemon's pool", MetricType::Gauge);
  MetricFamily used = Family("overlapd_device_memory_used_bytes", "of the pool, what jobs hold now",
                             MetricType::Gauge);
  MetricFamily total = Family("overlapd_device_total_memory_bytes",
                              "the device's whole memory, the pool part of it", MetricType::Gauge);
  MetricFamily sm = Family("overlapd_device_sm_clock_mhz", "SM clock (NVML)", MetricType::Gauge);
  MetricFamily mem_clock =
      Family("overlapd_device_mem_clock_mhz", "memory clock (NVML)", MetricType::Gauge);
  MetricFamily temperature =
      Family("overlapd_device_temperature_celsius", "GPU temperature (NVML)", MetricType::Gauge);
  MetricFamily power =
      Family("overlapd_device_power_watts", "power draw (NVML)", MetricType::Gauge);
  MetricFamily util =
      Family("overlapd_device_utilization_percent", "GPU utilization (NVML)", MetricType::Gauge);
  MetricFamily max_sm =
      Family("overlapd_device_max_sm_clock_mhz", "highest SM clock (NVML)", MetricType::Gauge);
  MetricFamily limit = Family("overlapd_device_clock_limit",
                              "1 while this reason holds the clocks back (NVML clocks event "
                              "reasons: power, thermal, hw-slowdown, hw-thermal, power-brake)",
                              MetricType::Gauge);
  MetricFamily power_capped =
      Family("overlapd_device_power_capped_seconds_total",
             "time the clocks were held below application clocks by the power limit, since the "
             "driver loaded (NVML violation counter)",
             MetricType::Counter);
  MetricFamily thermal_capped =
      Family("overlapd_device_thermal_capped_seconds_total",
             "time the clocks were held below application clocks by heat, since the driver "
             "loaded (NVML violation counter)",
             MetricType::Counter);
  MetricFamily pcie_gen = Family("overlapd_device_pcie_link_gen",
                                 "PCIe link generation, as trained now (it drops at idle to save "
                                 "power) and at most (NVML)",
                                 MetricType::Gauge);
  MetricFamily pcie_width =
      Family("overlapd_device_pcie_link_width",
             "PCIe lanes, as trained now and at most: fewer now is a reseat or a bad riser (NVML)",
             MetricType::Gauge);
  MetricFamily pcie_replays =
      Family("overlapd_device_pcie_replays_total",
             "PCIe packets resent since the driver loaded (NVML)", MetricType::Counter);
  MetricFamily nvlinks = Family("overlapd_device_nvlinks",
                                "NVLinks up (state=\"active\") and that the GPU has "
                                "(state=\"supported\") (NVML)",
                                MetricType::Gauge);
  MetricFamily nvlink_errors =
      Family("overlapd_device_nvlink_errors_total",
             "NVLink data-link errors summed over the links since the driver loaded: crc "
             "(flit and data), replay, recovery (NVML)",
             MetricType::Counter);
  MetricFamily ecc = Family("overlapd_device_ecc_errors_total",
                            "ECC errors since the driver loaded, corrected and uncorrected (NVML)",
                            MetricType::Counter);
  MetricFamily remap =
      Family("overlapd_device_row_remap",
             "1 while a row remap waits for a GPU reset (state=\"pending\") or after one failed "
             "(state=\"failed\") (NVML)",
             MetricType::Gauge);
  MetricFamily xids = Family("overlapd_device_xid_errors_total",
                             "Xid errors (NVML events) this boot, kept across overlapd restarts: "
                             "all of them "
                             "(kind=\"all\") and those that point at the GPU (kind=\"gpu\")",
                             MetricType::Counter);
  MetricFamily last_xid = Family("overlapd_device_last_xid",
                                 "the last Xid seen this boot, 0 for none", MetricType::Gauge);
  for (const v1::Device& d : node.devices()) {
    const ClientMetric::Label device = DeviceLabel(d.index());
    Add(memory, static_cast<double>(d.memory_bytes()), {device, {"name", d.name()}});
    Add(used, static_cast<double>(d.memory_used_bytes()), {device});
    if (d.total_memory_bytes() > 0)
      Add(total, static_cast<double>(d.total_memory_bytes()), {device});
    // Each health group is published where NVML answered it, clocks or not.
    if (d.pcie_valid()) {
      Add(pcie_gen, d.pcie_gen(), {device, {"link", "current"}});
      Add(pcie_gen, d.pcie_max_gen(), {device, {"link", "max"}});
      Add(pcie_width, d.pcie_width(), {device, {"link", "current"}});
      Add(pcie_width, d.pcie_max_width(), {device, {"link", "max"}});
      Add(pcie_replays, static_cast<double>(d.pcie_replays()), {device});
    }
    if (d.nvlink_valid()) {
      Add(nvlinks, d.nvlinks_active(), {device, {"state", "active"}});
      Add(nvlinks, d.nvlinks_supported(), {device, {"state", "supported"}});
      Add(nvlink_errors, static_cast<double>(d.nvlink_crc_errors()), {device, {"type", "crc"}});
      Add(nvlink_errors, static_cast<double>(d.nvlink_replay_errors()),
          {device, {"type", "replay"}});
      Add(nvlink_errors, static_cast<double>(d.nvlink_recovery_errors()),
          {device, {"type", "recovery"}});
    }
    if (d.ecc_valid()) {
      Add(ecc, static_cast<double>(d.ecc_corrected()), {device, {"type", "corrected"}});
      Add(ecc, static_cast<double>(d.ecc_uncorrected()), {device, {"type", "uncorrected"}});
    }
    if (d.row_remap_valid()) {
      Add(remap, d.row_remap_pending() ? 1 : 0, {device, {"state", "pending"}});
      Add(remap, d.row_remap_failed() ? 1 : 0, {device, {"state", "failed"}});
    }
    if (d.xid_valid()) {
      Add(xids, static_cast<double>(d.xid_errors()), {device, {"kind", "all"}});
      Add(xids, static_cast<double>(d.gpu_xid_errors()), {device, {"kind", "gpu"}});
      Add(last_xid, static_cast<double>(d.last_xid()), {device});
    }
    if (!d.telemetry_valid()) continue;  // no clock readings: absent, not zero
    Add(sm, d.sm_clock_mhz(), {device});
    Add(mem_clock, d.mem_clock_mhz(), {device});
    Add(temperature, d.temperature_c(), {device});
    Add(power, d.power_w(), {device});
    Add(util, d.utilization_pct(), {device});
    if (d.max_sm_clock_mhz() > 0) Add(max_sm, d.max_sm_clock_mhz(), {device});
    if (d.clock_limits_valid()) {
      // Each limiter that slows a GPU under load, 0 or 1, so alerts can test it.
      for (const char* reason : {"power", "thermal", "hw-slowdown", "hw-thermal", "power-brake"}) {
        const bool on = std::find(d.clock_limits().begin(), d.clock_limits().end(), reason) !=
                        d.clock_limits().end();
        Add(limit, on ? 1 : 0, {device, {"reason", reason}});
      }
    }
    if (d.capped_time_valid()) {
      Add(power_capped, d.power_capped_s(), {device});
      Add(thermal_capped, d.thermal_capped_s(), {device});
    }
  }
  for (MetricFamily* f :
       {&memory,   &used,       &total,        &sm,      &mem_clock,     &temperature,
        &power,    &util,       &max_sm,       &limit,   &power_capped,  &thermal_capped,
        &pcie_gen, &pcie_width, &pcie_replays, &nvlinks, &nvlink_errors, &ecc,
        &remap,    &xids,       &last_xid}) {
    out.push_back(std::move(*f));
  }

  MetricFamily busy = Family("overlapd_device_busy_seconds_total",
                             "wall time the device spent inside jobs", MetricType::Counter);
  for (const v1::DeviceStats& d : stats.devices()) {
    Add(busy, d.busy_ms() / 1000.0, {DeviceLabel(d.device())});
  }
  out.push_back(std::move(busy));

  MetricFamily running = Family("overlapd_device_running_job",
                                "1 for the job running on the device", MetricType::Gauge);
  MetricFamily step =
      Family("overlapd_last_op_step_seconds",
             "step time (median) of the last op finished on the device", MetricType::Gauge);
  MetricFamily exposed = Family("overlapd_last_op_exposed_comm_seconds",
                                "its communication not hidden behind the GEMM", MetricType::Gauge);
  MetricFamily hidden = Family("overlapd_last_op_hidden_ratio",
                               "1 - exposed / communication alone, of that op", MetricType::Gauge);
  MetricFamily gemm = Family("overlapd_last_op_gemm_alone_seconds",
                             "that op's GEMM alone on this device's rank (a slow GPU shows here)",
                             MetricType::Gauge);
  MetricFamily waited =
      Family("overlapd_last_op_compute_wait_seconds",
             "in that op's traced iteration, how long this device's compute stream sat idle "
             "waiting (for a transfer, or a peer) before it finished",
             MetricType::Gauge);
  for (const v1::Device& d : node.devices()) {
    for (const v1::Job& job : recent) {
      const auto& devices = job.devices();
      const auto rank = std::find(devices.begin(), devices.end(), d.index());
      if (rank == devices.end()) continue;
      if (job.state() == v1::RUNNING)
        Add(running, 1, {DeviceLabel(d.index()), {"job_id", job.id()}});
      if (job.result().ops().empty()) continue;
      const v1::OpResult& op = job.result().ops(job.result().ops_size() - 1);
      const Labels labels = {DeviceLabel(d.index()),
                             {"job_id", job.id()},
                             {"op", op.id()},
                             {"schedule", op.schedule()}};
      Add(step, op.step().median_ms() / 1000.0, labels);
      Add(exposed, op.exposed_comm_ms() / 1000.0, labels);
      // A GEMM alone has no communication to hide, nor has an op at one rank
      // (its comm alone is 0: nothing moves).
      if (op.type() != OpTypeName(OpType::kGemm) && op.comm_alone().median_ms() > 0) {
        Add(hidden, op.hidden_fraction(), labels);
      }
      const int r = static_cast<int>(rank - devices.begin());
      if (r < op.gemm_alone_rank_ms_size()) Add(gemm, op.gemm_alone_rank_ms(r) / 1000.0, labels);
      if (r < op.compute_wait_rank_ms_size()) {
        Add(waited, op.compute_wait_rank_ms(r) / 1000.0, labels);
      }
      break;  // the newest job on this device with a finished op
    }
  }
  for (MetricFamily* f : {&running, &step, &exposed, &hidden, &gemm, &waited}) {
    out.push_back(std::move(*f));
  }

  MetricFamily layer = Family("overlapd_last_layer_step_seconds",
                              "the whole graph as one step (median), of the newest job on the "
                              "device that measured one",
                              MetricType::Gauge);
  MetricFamily layer_exposed = Family(
      "overlapd_last_layer_exposed_comm_seconds",
      "that step minus its ops' GEMMs alone: the communication it left exposed", MetricType::Gauge);
  for (const v1::Device& d : node.devices()) {
    for (const v1::Job& job : recent) {
      const auto& devices = job.devices();
      if (std::find(devices.begin(), devices.end(), d.index()) == devices.end()) continue;
      if (!job.result().has_layer_step()) continue;
      const Labels labels = {DeviceLabel(d.index()), {"job_id", job.id()}};
      Add(layer, job.result().layer_step().median_ms() / 1000.0, labels);
      Add(layer_exposed, job.result().layer_exposed_comm_ms() / 1000.0, labels);
      break;
    }
  }
  out.push_back(std::move(layer));
  out.push_back(std::move(layer_exposed));
  return out;
}

class MetricsExporter::Collector {
 public:
  Collector(jobs::Scheduler& scheduler, const engine::Engine& engine,
            const DaemonCounters& counters)
      : scheduler_(scheduler), node_(scheduler, engine, NodeInfoStatic{}, counters) {}

  std::vector<MetricFamily> Gather() {
    v1::GetNodeInfoResponse node;
    v1::GetStatsResponse stats;
    // Neither call reads its context; a failed GetStats (the job store) leaves
    // its figures out rather than failing the scrape.
    node_.GetNodeInfo(nullptr, nullptr, &node);
    node_.GetStats(nullptr, nullptr, &stats);
    std::vector<v1::Job> recent;
    if (auto jobs = scheduler_.List(v1::JOB_STATE_UNSPECIFIED, kMetricsRecentJobs); jobs.ok()) {
      recent = std::move(*jobs);
    }
    return BuildMetrics(node, stats, recent);
  }

 private:
  jobs::Scheduler& scheduler_;
  NodeService node_;
};

absl::StatusOr<std::unique_ptr<MetricsExporter>> MetricsExporter::Start(
    const std::string& address, jobs::Scheduler& scheduler, const engine::Engine& engine,
    const DaemonCounters& counters) {
  std::unique_ptr<MetricsExporter> exporter(new MetricsExporter());
  exporter->collector_ = std::make_unique<Collector>(scheduler, engine, counters);
  Collector* collector = exporter->collector_.get();
  absl::StatusOr<std::unique_ptr<HttpEndpoint>> endpoint =
      HttpEndpoint::Start(address, "/metrics", [collector] {
        HttpResponse response;
        response.content_type = "text/plain; version=0.0.4; charset=utf-8";
        response.body = prometheus::TextSerializer().Serialize(collector->Gather());
        return response;
      });
  if (!endpoint.ok()) return endpoint.status();
  exporter->endpoint_ = std::move(*endpoint);
  return exporter;
}

MetricsExporter::~MetricsExporter() {
  endpoint_.reset();  // before the collector its thread calls
}

int MetricsExporter::port() const { return endpoint_->port(); }

}  // namespace overlap::rpc
