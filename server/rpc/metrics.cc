#include "server/rpc/metrics.h"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/graph.h"
#include "common/logging.h"
#include "prometheus/text_serializer.h"

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

// What a scrape reads: the node (devices, health, telemetry), the stats (jobs,
// busy time, counters) and the newest jobs, newest first.
struct Sources {
  const v1::GetNodeInfoResponse& node;
  const v1::GetStatsResponse& stats;
  const std::vector<v1::Job>& recent;
};

using Fill = std::function<void(const Sources&, MetricFamily&)>;

// One metric family: its name, help and type, and how its samples are read.
struct Definition {
  const char* name;
  const char* help;
  MetricType type;
  Fill fill;
};

// Samples per device, each with its `device` label.
Fill EachDevice(std::function<void(const v1::Device&, const ClientMetric::Label&, MetricFamily&)>
                    fill) {
  return [fill](const Sources& s, MetricFamily& f) {
    for (const v1::Device& d : s.node.devices()) fill(d, DeviceLabel(d.index()), f);
  };
}

// A live reading (NVML), absent rather than zero where the device has none.
Fill Reading(double (*value)(const v1::Device&), bool (*present)(const v1::Device&) = nullptr) {
  return EachDevice([value, present](const v1::Device& d, const ClientMetric::Label& device,
                                     MetricFamily& f) {
    if (!d.telemetry_valid() || (present != nullptr && !present(d))) return;
    Add(f, value(d), {device});
  });
}

// A two-sample health reading (`label` = each of `kinds`), where `valid`.
Fill Pair(bool (*valid)(const v1::Device&), const char* label, const char* first_kind,
          double (*first)(const v1::Device&), const char* second_kind,
          double (*second)(const v1::Device&)) {
  return EachDevice([=](const v1::Device& d, const ClientMetric::Label& device, MetricFamily& f) {
    if (!valid(d)) return;
    Add(f, first(d), {device, {label, first_kind}});
    Add(f, second(d), {device, {label, second_kind}});
  });
}

// The newest job in `recent` on `device` with a finished op: the job, its last
// op and the device's rank in it; the running jobs newer than it on the way.
struct LastOp {
  const v1::Job* job = nullptr;
  const v1::OpResult* op = nullptr;
  int rank = 0;
  std::vector<const v1::Job*> running;
};

LastOp LastOpOn(int device, const std::vector<v1::Job>& recent) {
  LastOp last;
  for (const v1::Job& job : recent) {
    const auto& devices = job.devices();
    const auto rank = std::find(devices.begin(), devices.end(), device);
    if (rank == devices.end()) continue;
    if (job.state() == v1::RUNNING) last.running.push_back(&job);
    if (job.result().ops().empty()) continue;
    last.job = &job;
    last.op = &job.result().ops(job.result().ops_size() - 1);
    last.rank = static_cast<int>(rank - devices.begin());
    return last;
  }
  return last;
}

// Samples of the last op finished on each device, labelled with it.
Fill OfLastOp(std::function<std::optional<double>(const LastOp&)> value) {
  return [value](const Sources& s, MetricFamily& f) {
    for (const v1::Device& d : s.node.devices()) {
      const LastOp last = LastOpOn(d.index(), s.recent);
      if (last.op == nullptr) continue;
      if (std::optional<double> v = value(last)) {
        Add(f, *v,
            {DeviceLabel(d.index()),
             {"job_id", last.job->id()},
             {"op", last.op->id()},
             {"schedule", last.op->schedule()}});
      }
    }
  };
}

// Samples of the newest job on each device that measured a layer step.
Fill OfLastLayer(double (*value)(const v1::JobResult&)) {
  return [value](const Sources& s, MetricFamily& f) {
    for (const v1::Device& d : s.node.devices()) {
      for (const v1::Job& job : s.recent) {
        const auto& devices = job.devices();
        if (std::find(devices.begin(), devices.end(), d.index()) == devices.end()) continue;
        if (!job.result().has_layer_step()) continue;
        Add(f, value(job.result()) / 1000.0, {DeviceLabel(d.index()), {"job_id", job.id()}});
        break;
      }
    }
  };
}

double Seconds(double ms) { return ms / 1000.0; }

const std::vector<Definition>& Definitions() {
  static const std::vector<Definition>* definitions = new std::vector<Definition>{
      {"overlapd_healthy", "1 while the daemon takes work and its devices are usable",
       MetricType::Gauge,
       [](const Sources& s, MetricFamily& f) {
         Add(f, s.node.healthy() ? 1 : 0, {{"backend", s.node.backend()}});
       }},
      {"overlapd_uptime_seconds", "since this process started", MetricType::Gauge,
       [](const Sources& s, MetricFamily& f) { Add(f, s.stats.uptime_s()); }},
      {"overlapd_jobs", "jobs by state, pruned ones included", MetricType::Gauge,
       [](const Sources& s, MetricFamily& f) {
         const std::map<std::string, int64_t> by_state(s.stats.jobs_by_state().begin(),
                                                       s.stats.jobs_by_state().end());
         for (const auto& [state, count] : by_state) {
           Add(f, static_cast<double>(count), {{"state", state}});
         }
       }},
      {"overlapd_jobs_submitted_total", "jobs accepted since this process started",
       MetricType::Counter,
       [](const Sources& s, MetricFamily& f) {
         Add(f, static_cast<double>(s.stats.jobs_submitted()));
       }},
      {"overlapd_jobs_rejected_total", "submissions refused since this process started",
       MetricType::Counter,
       [](const Sources& s, MetricFamily& f) {
         Add(f, static_cast<double>(s.stats.jobs_rejected()));
       }},
      {"overlapd_graphs_parsed_total",
       "graph specs parsed since this process started: one per job admitted, one per job "
       "queued across a restart",
       MetricType::Counter,
       [](const Sources& s, MetricFamily& f) {
         Add(f, static_cast<double>(s.stats.graphs_parsed()));
       }},
      {"overlapd_requests_refused_busy_total",
       "requests refused since start because too many were in flight (max_requests_in_flight, "
       "max_requests_per_user)",
       MetricType::Counter,
       [](const Sources& s, MetricFamily& f) {
         Add(f, static_cast<double>(s.stats.requests_refused_busy()));
       }},
      {"overlapd_requests_abandoned_total",
       "requests whose caller was gone (cancelled or past its deadline) when they were answered",
       MetricType::Counter,
       [](const Sources& s, MetricFamily& f) {
         Add(f, static_cast<double>(s.stats.requests_abandoned()));
       }},
      {"overlapd_device_memory_bytes", "device memory jobs may use: the daemon's pool",
       MetricType::Gauge,
       EachDevice([](const v1::Device& d, const ClientMetric::Label& device, MetricFamily& f) {
         Add(f, static_cast<double>(d.memory_bytes()), {device, {"name", d.name()}});
       })},
      {"overlapd_device_memory_used_bytes", "of the pool, what jobs hold now", MetricType::Gauge,
       EachDevice([](const v1::Device& d, const ClientMetric::Label& device, MetricFamily& f) {
         Add(f, static_cast<double>(d.memory_used_bytes()), {device});
       })},
      {"overlapd_device_total_memory_bytes", "the device's whole memory, the pool part of it",
       MetricType::Gauge,
       EachDevice([](const v1::Device& d, const ClientMetric::Label& device, MetricFamily& f) {
         if (d.total_memory_bytes() > 0) {
           Add(f, static_cast<double>(d.total_memory_bytes()), {device});
         }
       })},
      {"overlapd_device_sm_clock_mhz", "SM clock (NVML)", MetricType::Gauge,
       Reading([](const v1::Device& d) { return static_cast<double>(d.sm_clock_mhz()); })},
      {"overlapd_device_mem_clock_mhz", "memory clock (NVML)", MetricType::Gauge,
       Reading([](const v1::Device& d) { return static_cast<double>(d.mem_clock_mhz()); })},
      {"overlapd_device_temperature_celsius", "GPU temperature (NVML)", MetricType::Gauge,
       Reading([](const v1::Device& d) { return static_cast<double>(d.temperature_c()); })},
      {"overlapd_device_power_watts", "power draw (NVML)", MetricType::Gauge,
       Reading([](const v1::Device& d) { return d.power_w(); })},
      {"overlapd_device_utilization_percent", "GPU utilization (NVML)", MetricType::Gauge,
       Reading([](const v1::Device& d) { return static_cast<double>(d.utilization_pct()); })},
      {"overlapd_device_max_sm_clock_mhz", "highest SM clock (NVML)", MetricType::Gauge,
       Reading([](const v1::Device& d) { return static_cast<double>(d.max_sm_clock_mhz()); },
               [](const v1::Device& d) { return d.max_sm_clock_mhz() > 0; })},
      {"overlapd_device_clock_limit",
       "1 while this reason holds the clocks back (NVML clocks event reasons: power, thermal, "
       "hw-slowdown, hw-thermal, power-brake)",
       MetricType::Gauge,
       EachDevice([](const v1::Device& d, const ClientMetric::Label& device, MetricFamily& f) {
         if (!d.telemetry_valid() || !d.clock_limits_valid()) return;
         // Each limiter that slows a GPU under load, 0 or 1, so alerts can test it.
         for (const char* reason :
              {"power", "thermal", "hw-slowdown", "hw-thermal", "power-brake"}) {
           const bool on = std::find(d.clock_limits().begin(), d.clock_limits().end(), reason) !=
                           d.clock_limits().end();
           Add(f, on ? 1 : 0, {device, {"reason", reason}});
         }
       })},
      {"overlapd_device_power_capped_seconds_total",
       "time the clocks were held below application clocks by the power limit, since the driver "
       "loaded (NVML violation counter)",
       MetricType::Counter,
       Reading([](const v1::Device& d) { return d.power_capped_s(); },
               [](const v1::Device& d) { return d.capped_time_valid(); })},
      {"overlapd_device_thermal_capped_seconds_total",
       "time the clocks were held below application clocks by heat, since the driver loaded "
       "(NVML violation counter)",
       MetricType::Counter,
       Reading([](const v1::Device& d) { return d.thermal_capped_s(); },
               [](const v1::Device& d) { return d.capped_time_valid(); })},
      // Each health group is published where NVML answered it, clocks or not.
      {"overlapd_device_pcie_link_gen",
       "PCIe link generation, as trained now (it drops at idle to save power) and at most (NVML)",
       MetricType::Gauge,
       Pair([](const v1::Device& d) { return d.pcie_valid(); }, "link", "current",
            [](const v1::Device& d) { return static_cast<double>(d.pcie_gen()); }, "max",
            [](const v1::Device& d) { return static_cast<double>(d.pcie_max_gen()); })},
      {"overlapd_device_pcie_link_width",
       "PCIe lanes, as trained now and at most: fewer now is a reseat or a bad riser (NVML)",
       MetricType::Gauge,
       Pair([](const v1::Device& d) { return d.pcie_valid(); }, "link", "current",
            [](const v1::Device& d) { return static_cast<double>(d.pcie_width()); }, "max",
            [](const v1::Device& d) { return static_cast<double>(d.pcie_max_width()); })},
      {"overlapd_device_pcie_replays_total", "PCIe packets resent since the driver loaded (NVML)",
       MetricType::Counter,
       EachDevice([](const v1::Device& d, const ClientMetric::Label& device, MetricFamily& f) {
         if (d.pcie_valid()) Add(f, static_cast<double>(d.pcie_replays()), {device});
       })},
      {"overlapd_device_nvlinks",
       "NVLinks up (state=\"active\") and that the GPU has (state=\"supported\") (NVML)",
       MetricType::Gauge,
       Pair([](const v1::Device& d) { return d.nvlink_valid(); }, "state", "active",
            [](const v1::Device& d) { return static_cast<double>(d.nvlinks_active()); },
            "supported",
            [](const v1::Device& d) { return static_cast<double>(d.nvlinks_supported()); })},
      {"overlapd_device_nvlink_errors_total",
       "NVLink data-link errors summed over the links since the driver loaded: crc (flit and "
       "data), replay, recovery (NVML)",
       MetricType::Counter,
       EachDevice([](const v1::Device& d, const ClientMetric::Label& device, MetricFamily& f) {
         if (!d.nvlink_valid()) return;
         Add(f, static_cast<double>(d.nvlink_crc_errors()), {device, {"type", "crc"}});
         Add(f, static_cast<double>(d.nvlink_replay_errors()), {device, {"type", "replay"}});
         Add(f, static_cast<double>(d.nvlink_recovery_errors()), {device, {"type", "recovery"}});
       })},
      {"overlapd_device_ecc_errors_total",
       "ECC errors since the driver loaded, corrected and uncorrected (NVML)", MetricType::Counter,
       Pair([](const v1::Device& d) { return d.ecc_valid(); }, "type", "corrected",
            [](const v1::Device& d) { return static_cast<double>(d.ecc_corrected()); },
            "uncorrected",
            [](const v1::Device& d) { return static_cast<double>(d.ecc_uncorrected()); })},
      {"overlapd_device_row_remap",
       "1 while a row remap waits for a GPU reset (state=\"pending\") or after one failed "
       "(state=\"failed\") (NVML)",
       MetricType::Gauge,
       Pair([](const v1::Device& d) { return d.row_remap_valid(); }, "state", "pending",
            [](const v1::Device& d) { return d.row_remap_pending() ? 1.0 : 0.0; }, "failed",
            [](const v1::Device& d) { return d.row_remap_failed() ? 1.0 : 0.0; })},
      {"overlapd_device_xid_errors_total",
       "Xid errors (NVML events) this boot, kept across overlapd restarts: all of them "
       "(kind=\"all\") and those that point at the GPU (kind=\"gpu\")",
       MetricType::Counter,
       Pair([](const v1::Device& d) { return d.xid_valid(); }, "kind", "all",
            [](const v1::Device& d) { return static_cast<double>(d.xid_errors()); }, "gpu",
            [](const v1::Device& d) { return static_cast<double>(d.gpu_xid_errors()); })},
      {"overlapd_device_last_xid", "the last Xid seen this boot, 0 for none", MetricType::Gauge,
       EachDevice([](const v1::Device& d, const ClientMetric::Label& device, MetricFamily& f) {
         if (d.xid_valid()) Add(f, static_cast<double>(d.last_xid()), {device});
       })},
      {"overlapd_device_busy_seconds_total", "wall time the device spent inside jobs",
       MetricType::Counter,
       [](const Sources& s, MetricFamily& f) {
         for (const v1::DeviceStats& d : s.stats.devices()) {
           Add(f, Seconds(d.busy_ms()), {DeviceLabel(d.device())});
         }
       }},
      {"overlapd_device_running_job", "1 for the job running on the device", MetricType::Gauge,
       [](const Sources& s, MetricFamily& f) {
         for (const v1::Device& d : s.node.devices()) {
           for (const v1::Job* job : LastOpOn(d.index(), s.recent).running) {
             Add(f, 1, {DeviceLabel(d.index()), {"job_id", job->id()}});
           }
         }
       }},
      {"overlapd_last_op_step_seconds", "step time (median) of the last op finished on the device",
       MetricType::Gauge,
       OfLastOp([](const LastOp& l) -> std::optional<double> {
         return Seconds(l.op->step().median_ms());
       })},
      {"overlapd_last_op_exposed_comm_seconds", "its communication not hidden behind the GEMM",
       MetricType::Gauge,
       OfLastOp([](const LastOp& l) -> std::optional<double> {
         return Seconds(l.op->exposed_comm_ms());
       })},
      {"overlapd_last_op_hidden_ratio", "1 - exposed / communication alone, of that op",
       MetricType::Gauge,
       OfLastOp([](const LastOp& l) -> std::optional<double> {
         // A GEMM alone has no communication to hide, nor has an op at one rank
         // (its comm alone is 0: nothing moves).
         if (l.op->type() == OpTypeName(OpType::kGemm) || !(l.op->comm_alone().median_ms() > 0)) {
           return std::nullopt;
         }
         return l.op->hidden_fraction();
       })},
      {"overlapd_last_op_gemm_alone_seconds",
       "that op's GEMM alone on this device's rank (a slow GPU shows here)", MetricType::Gauge,
       OfLastOp([](const LastOp& l) -> std::optional<double> {
         if (l.rank >= l.op->gemm_alone_rank_ms_size()) return std::nullopt;
         return Seconds(l.op->gemm_alone_rank_ms(l.rank));
       })},
      {"overlapd_last_op_compute_wait_seconds",
       "in that op's traced iteration, how long this device's compute stream sat idle waiting "
       "(for a transfer, or a peer) before it finished",
       MetricType::Gauge,
       OfLastOp([](const LastOp& l) -> std::optional<double> {
         if (l.rank >= l.op->compute_wait_rank_ms_size()) return std::nullopt;
         return Seconds(l.op->compute_wait_rank_ms(l.rank));
       })},
      {"overlapd_last_layer_step_seconds",
       "the whole graph as one step (median), of the newest job on the device that measured one",
       MetricType::Gauge,
       OfLastLayer([](const v1::JobResult& r) { return r.layer_step().median_ms(); })},
      {"overlapd_last_layer_exposed_comm_seconds",
       "that step minus its ops' GEMMs alone: the communication it left exposed",
       MetricType::Gauge,
       OfLastLayer([](const v1::JobResult& r) { return r.layer_exposed_comm_ms(); })},
  };
  return *definitions;
}

}  // namespace

std::vector<MetricFamily> BuildMetrics(const v1::GetNodeInfoResponse& node,
                                       const v1::GetStatsResponse& stats,
                                       const std::vector<v1::Job>& recent) {
  const Sources sources{node, stats, recent};
  std::vector<MetricFamily> out;
  for (const Definition& d : Definitions()) {
    MetricFamily family = Family(d.name, d.help, d.type);
    d.fill(sources, family);
    out.push_back(std::move(family));
  }
  return out;
}

class MetricsExporter::Collector {
 public:
  Collector(const node::NodeState& node, jobs::Scheduler& scheduler)
      : node_(node), scheduler_(scheduler) {}

  std::vector<MetricFamily> Gather() {
    // A failed GetStats (the job store) leaves its figures out rather than
    // failing the scrape.
    const v1::GetStatsResponse stats = node_.Stats().value_or(v1::GetStatsResponse());
    std::vector<v1::Job> recent;
    if (auto jobs = scheduler_.List(v1::JOB_STATE_UNSPECIFIED, kMetricsRecentJobs); jobs.ok()) {
      recent = std::move(*jobs);
    }
    return BuildMetrics(node_.Info(), stats, recent);
  }

 private:
  const node::NodeState& node_;
  jobs::Scheduler& scheduler_;
};

absl::StatusOr<std::unique_ptr<MetricsExporter>> MetricsExporter::Start(
    const std::string& address, const node::NodeState& node, jobs::Scheduler& scheduler) {
  std::unique_ptr<MetricsExporter> exporter(new MetricsExporter());
  exporter->collector_ = std::make_unique<Collector>(node, scheduler);
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
