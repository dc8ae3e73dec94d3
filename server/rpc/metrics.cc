#include "server/rpc/metrics.h"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/graph.h"
#include "common/logging.h"
#include "prometheus/text_serializer.h"
#include "server/rpc/metric_table.h"
#include "server/rpc/session_metrics.h"
#include "server/wire/job_wire.h"

namespace overlap::rpc {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

// dcgm-exporter's labels of a GPU (gpu = NVML's index, UUID, modelName,
// Hostname, pci_bus_id), so that a query can join overlapd's series to its
// DCGM_FI_* ones, then overlapd's own index of the device (`cuda_device`: the
// `devices:` of a graph; with ranks_per_gpu k, devices d..d+k-1 share a GPU and
// so its dcgm labels). A label is left out where the backend does not know it.
MetricLabels GpuLabels(const v1::Device& d, const std::string& hostname) {
  MetricLabels labels;
  if (d.nvml_index() >= 0) labels.push_back({"gpu", absl::StrCat(d.nvml_index())});
  if (!d.uuid().empty()) labels.push_back({"UUID", d.uuid()});
  if (!d.model_name().empty()) labels.push_back({"modelName", d.model_name()});
  if (!hostname.empty()) labels.push_back({"Hostname", hostname});
  const std::string& bus = d.nvml_pci_bus_id().empty() ? d.pci_bus_id() : d.nvml_pci_bus_id();
  if (!bus.empty()) labels.push_back({"pci_bus_id", bus});
  labels.push_back({"cuda_device", absl::StrCat(d.index())});
  return labels;
}

MetricLabels With(MetricLabels labels, std::initializer_list<ClientMetric::Label> more) {
  labels.insert(labels.end(), more.begin(), more.end());
  return labels;
}

// What a scrape reads: the node (devices, health, telemetry), the stats (jobs,
// busy time, counters) and the newest jobs, newest first; each device's labels;
// the time and how long a finished op's figures stay published.
struct Sources {
  const v1::GetNodeInfoResponse& node;
  const v1::GetStatsResponse& stats;
  const std::vector<v1::Job>& recent;
  std::map<int, MetricLabels> gpu;  // by v1::Device.index
  int64_t now_ms = 0;
  double last_op_ttl_s = 0;

  MetricLabels Of(int device) const {
    auto it = gpu.find(device);
    return it != gpu.end() ? it->second : MetricLabels{{"cuda_device", absl::StrCat(device)}};
  }
};

using Definition = MetricRow<Sources>;
using Fill = Definition::Fill;

// Samples per device, each with the device's labels.
Fill EachDevice(std::function<void(const v1::Device&, const MetricLabels&, MetricFamily&)> fill) {
  return [fill](const Sources& s, MetricFamily& f) {
    for (const v1::Device& d : s.node.devices()) fill(d, s.Of(d.index()), f);
  };
}

// A live reading (NVML), absent rather than zero where the device has none.
Fill Reading(double (*value)(const v1::Device&), bool (*present)(const v1::Device&) = nullptr) {
  return EachDevice(
      [value, present](const v1::Device& d, const MetricLabels& device, MetricFamily& f) {
        if (!d.telemetry_valid() || (present != nullptr && !present(d))) return;
        AddSample(f, value(d), device);
      });
}

// A two-sample health reading (`label` = each of `kinds`), where `valid`.
Fill Pair(bool (*valid)(const v1::Device&), const char* label, const char* first_kind,
          double (*first)(const v1::Device&), const char* second_kind,
          double (*second)(const v1::Device&)) {
  return EachDevice([=](const v1::Device& d, const MetricLabels& device, MetricFamily& f) {
    if (!valid(d)) return;
    AddSample(f, first(d), With(device, {{label, first_kind}}));
    AddSample(f, second(d), With(device, {{label, second_kind}}));
  });
}

// The newest job in `recent` on `device` with a finished op: the job, its last
// op, when that op was known finished (the job's end; now, while it runs) and
// the device's rank in it; the running jobs newer than it on the way.
struct LastOp {
  const v1::Job* job = nullptr;
  const v1::OpResult* op = nullptr;
  int64_t finished_ms = 0;
  int rank = 0;
  std::vector<const v1::Job*> running;
};

int64_t FinishedMs(const v1::Job& job, int64_t now_ms) {
  return job.state() == v1::RUNNING || job.end_time_ms() <= 0 ? now_ms : job.end_time_ms();
}

LastOp LastOpOn(int device, const Sources& s) {
  LastOp last;
  for (const v1::Job& job : s.recent) {
    const auto& devices = job.devices();
    const auto rank = std::find(devices.begin(), devices.end(), device);
    if (rank == devices.end()) continue;
    if (job.state() == v1::RUNNING) last.running.push_back(&job);
    if (job.result().ops().empty()) continue;
    last.job = &job;
    last.op = &job.result().ops(job.result().ops_size() - 1);
    last.finished_ms = FinishedMs(job, s.now_ms);
    last.rank = static_cast<int>(rank - devices.begin());
    return last;
  }
  return last;
}

// Whether figures of a job that finished at `finished_ms` are still published:
// an op's figures describe the GPU for a while, then go stale (so that an alert
// on them clears once nothing runs there).
bool Fresh(int64_t finished_ms, const Sources& s) {
  return static_cast<double>(s.now_ms - finished_ms) <= s.last_op_ttl_s * 1000.0;
}

// Samples of the last op finished on each device, labelled with the device and
// the op (no job id: that would make a new series per job).
Fill OfLastOp(std::function<std::optional<double>(const LastOp&)> value) {
  return [value](const Sources& s, MetricFamily& f) {
    for (const v1::Device& d : s.node.devices()) {
      const LastOp last = LastOpOn(d.index(), s);
      if (last.op == nullptr || !Fresh(last.finished_ms, s)) continue;
      if (std::optional<double> v = value(last)) {
        AddSample(
            f, *v,
            With(s.Of(d.index()), {{"op", last.op->id()}, {"schedule", last.op->schedule()}}));
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
        if (Fresh(FinishedMs(job, s.now_ms), s)) {
          AddSample(f, value(job.result()) / 1000.0, s.Of(d.index()));
        }
        break;
      }
    }
  };
}

// The job a running part belongs to, the same on every node it spans
// ("COORDINATOR/JOB"); empty for a job on this node alone.
std::string GlobalJobId(const v1::Job& job, const std::string& node_name) {
  if (!job.coordinator().empty()) return absl::StrCat(job.coordinator(), "/", job.global_job_id());
  if (job.nodes_size() > 0) return absl::StrCat(node_name, "/", job.id());
  return "";
}

bool IsFinalState(const std::string& state) {
  return state == "SUCCEEDED" || state == "FAILED" || state == "CANCELLED" || state == "ABORTED";
}

double Seconds(double ms) { return ms / 1000.0; }

// That op's figure at this device's rank, from one of its per-rank lists of
// milliseconds, in seconds (none when the list stops short of the rank).
Fill OfLastOpRankMs(const google::protobuf::RepeatedField<double>& (v1::OpResult::*ms)() const) {
  return OfLastOp([ms](const LastOp& l) -> std::optional<double> {
    const auto& list = (l.op->*ms)();
    if (l.rank >= list.size()) return std::nullopt;
    return Seconds(list.Get(l.rank));
  });
}

// A figure of that op's energy (none without an energy counter).
Fill OfLastOpEnergy(double (v1::Energy::*figure)() const) {
  return OfLastOp([figure](const LastOp& l) -> std::optional<double> {
    if (!l.op->has_energy()) return std::nullopt;
    return (l.op->energy().*figure)();
  });
}

// A figure of the stats, unlabelled.
template <typename Value>
Fill Stat(Value (v1::GetStatsResponse::*value)() const) {
  return [value](const Sources& s, MetricFamily& f) {
    AddSample(f, static_cast<double>((s.stats.*value)()));
  };
}

// The jobs by state: those in a final state, or the others.
Fill JobsByState(bool final) {
  return [final](const Sources& s, MetricFamily& f) {
    const std::map<std::string, int64_t> by_state(s.stats.jobs_by_state().begin(),
                                                  s.stats.jobs_by_state().end());
    for (const auto& [state, count] : by_state) {
      if (IsFinalState(state) == final)
        AddSample(f, static_cast<double>(count), {{"state", state}});
    }
  };
}

const std::vector<Definition>& Definitions() {
  static const std::vector<Definition>* definitions = new std::vector<Definition>{
      {"overlapd_healthy", "1 while the daemon takes work and its devices are usable",
       MetricType::Gauge,
       [](const Sources& s, MetricFamily& f) {
         AddSample(f, s.node.healthy() ? 1 : 0, {{"backend", s.node.backend()}});
       }},
      {"overlapd_uptime_seconds", "since this process started", MetricType::Gauge,
       [](const Sources& s, MetricFamily& f) { AddSample(f, s.stats.uptime_s()); }},
      {"overlapd_flight_recorder_bytes",
       "memory the flight recorder's rings hold (cap: flight_recorder_entries a ring)",
       MetricType::Gauge,
       [](const Sources& s, MetricFamily& f) {
         AddSample(f, static_cast<double>(s.node.flight_recorder().bytes()));
       }},
      {"overlapd_build_info",
       "1, labelled with this overlapd's version and commit, its backend and the CUDA runtime, "
       "NCCL and CUDA driver API it runs with",
       MetricType::Gauge,
       [](const Sources& s, MetricFamily& f) {
         AddSample(f, 1,
             {{"version", s.node.overlapd_version()},
              {"git_commit", s.node.git_commit()},
              {"backend", s.node.backend()},
              {"cuda_runtime", s.node.cuda_runtime_version()},
              {"nccl", s.node.nccl_version()},
              {"cuda_driver", s.node.cuda_driver_version()}});
       }},
      {"overlapd_jobs_finished_total",
       "jobs that ended, by final state, since the job store was made (kept across restarts and "
       "pruning; a job spanning daemons counts once on each node)",
       MetricType::Counter,
       JobsByState(/*final=*/true)},
      {"overlapd_jobs_active", "jobs queued and running now", MetricType::Gauge,
       JobsByState(/*final=*/false)},
      {"overlapd_jobs_submitted_total", "jobs accepted since this process started",
       MetricType::Counter,
       Stat(&v1::GetStatsResponse::jobs_submitted)},
      {"overlapd_jobs_rejected_total", "submissions refused since this process started",
       MetricType::Counter,
       Stat(&v1::GetStatsResponse::jobs_rejected)},
      {"overlapd_graphs_parsed_total",
       "graph specs parsed since this process started: one per job admitted, one per job "
       "queued across a restart",
       MetricType::Counter,
       Stat(&v1::GetStatsResponse::graphs_parsed)},
      {"overlapd_requests_refused_busy_total",
       "requests refused since start because too many were in flight (max_requests_in_flight, "
       "max_requests_per_user)",
       MetricType::Counter,
       Stat(&v1::GetStatsResponse::requests_refused_busy)},
      {"overlapd_requests_abandoned_total",
       "requests whose caller was gone (cancelled or past its deadline) when they were answered",
       MetricType::Counter,
       Stat(&v1::GetStatsResponse::requests_abandoned)},
      {"overlapd_device_memory_bytes", "device memory jobs may use: the daemon's pool",
       MetricType::Gauge,
       EachDevice([](const v1::Device& d, const MetricLabels& device, MetricFamily& f) {
         AddSample(f, static_cast<double>(d.memory_bytes()), device);
       })},
      {"overlapd_device_memory_used_bytes", "of the pool, what jobs hold now", MetricType::Gauge,
       EachDevice([](const v1::Device& d, const MetricLabels& device, MetricFamily& f) {
         AddSample(f, static_cast<double>(d.memory_used_bytes()), device);
       })},
      {"overlapd_device_total_memory_bytes", "the device's whole memory, the pool part of it",
       MetricType::Gauge,
       EachDevice([](const v1::Device& d, const MetricLabels& device, MetricFamily& f) {
         if (d.total_memory_bytes() > 0) {
           AddSample(f, static_cast<double>(d.total_memory_bytes()), device);
         }
       })},
      {"overlapd_device_sm_clock_hertz", "SM clock (NVML)", MetricType::Gauge,
       Reading([](const v1::Device& d) { return d.sm_clock_mhz() * 1e6; })},
      {"overlapd_device_mem_clock_hertz", "memory clock (NVML)", MetricType::Gauge,
       Reading([](const v1::Device& d) { return d.mem_clock_mhz() * 1e6; })},
      {"overlapd_device_temperature_celsius", "GPU temperature (NVML)", MetricType::Gauge,
       Reading([](const v1::Device& d) { return static_cast<double>(d.temperature_c()); })},
      {"overlapd_device_power_watts", "power draw (NVML)", MetricType::Gauge,
       Reading([](const v1::Device& d) { return d.power_w(); })},
      {"overlapd_energy_joules_total",
       "energy the device drew since the driver loaded (NVML total energy consumption; the host "
       "backend's simulated counter)",
       MetricType::Counter,
       EachDevice([](const v1::Device& d, const MetricLabels& device, MetricFamily& f) {
         if (d.energy_valid()) AddSample(f, d.energy_j(), device);
       })},
      {"overlapd_job_energy_joules_total",
       "energy of a running job's timed steps so far, all its devices together (each finished "
       "op's and layer step's joules per step times its steps); one series per running job",
       MetricType::Counter,
       [](const Sources& s, MetricFamily& f) {
         for (const v1::Job& job : s.recent) {
           if (job.state() != v1::RUNNING) continue;
           std::optional<double> joules;
           for (const v1::OpResult& op : job.result().ops()) {
             if (op.has_energy()) {
               joules = joules.value_or(0) + op.energy().step_joules() * op.step().samples();
             }
           }
           const v1::JobResult& r = job.result();
           if (r.has_layer_energy()) {
             joules = joules.value_or(0) + r.layer_energy().step_joules() * r.layer_step().samples();
           }
           if (!joules) continue;
           MetricLabels labels = {{"job_id", job.id()}};
           const std::string global = GlobalJobId(job, s.node.node_name());
           if (!global.empty()) labels.push_back({"global_job_id", global});
           AddSample(f, *joules, std::move(labels));
         }
       }},
      {"overlapd_device_nvlink_bytes_total",
       "NVLink data bytes sent (direction=tx) and received (rx) since the driver loaded, summed "
       "over the links (NVML field values)",
       MetricType::Counter,
       Pair([](const v1::Device& d) { return d.nvlink_traffic_valid(); }, "direction", "tx",
            [](const v1::Device& d) { return static_cast<double>(d.nvlink_tx_bytes()); }, "rx",
            [](const v1::Device& d) { return static_cast<double>(d.nvlink_rx_bytes()); })},
      {"overlapd_device_utilization_ratio",
       "share of the last sample period a kernel ran, 0 to 1 (NVML)", MetricType::Gauge,
       Reading([](const v1::Device& d) { return d.utilization_pct() / 100.0; })},
      {"overlapd_device_max_sm_clock_hertz", "highest SM clock (NVML)", MetricType::Gauge,
       Reading([](const v1::Device& d) { return d.max_sm_clock_mhz() * 1e6; },
               [](const v1::Device& d) { return d.max_sm_clock_mhz() > 0; })},
      {"overlapd_device_clock_limit",
       "1 while this reason holds the clocks back (NVML clocks event reasons: power, thermal, "
       "hw-slowdown, hw-thermal, power-brake)",
       MetricType::Gauge,
       EachDevice([](const v1::Device& d, const MetricLabels& device, MetricFamily& f) {
         if (!d.telemetry_valid() || !d.clock_limits_valid()) return;
         // Each limiter that slows a GPU under load, 0 or 1, so alerts can test it.
         for (const char* reason :
              {"power", "thermal", "hw-slowdown", "hw-thermal", "power-brake"}) {
           const bool on = std::find(d.clock_limits().begin(), d.clock_limits().end(), reason) !=
                           d.clock_limits().end();
           AddSample(f, on ? 1 : 0, With(device, {{"reason", reason}}));
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
       EachDevice([](const v1::Device& d, const MetricLabels& device, MetricFamily& f) {
         if (d.pcie_valid()) AddSample(f, static_cast<double>(d.pcie_replays()), device);
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
       EachDevice([](const v1::Device& d, const MetricLabels& device, MetricFamily& f) {
         if (!d.nvlink_valid()) return;
         AddSample(f, static_cast<double>(d.nvlink_crc_errors()), With(device, {{"type", "crc"}}));
         AddSample(f, static_cast<double>(d.nvlink_replay_errors()), With(device, {{"type", "replay"}}));
         AddSample(f, static_cast<double>(d.nvlink_recovery_errors()),
             With(device, {{"type", "recovery"}}));
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
       EachDevice([](const v1::Device& d, const MetricLabels& device, MetricFamily& f) {
         if (d.xid_valid()) AddSample(f, static_cast<double>(d.last_xid()), device);
       })},
      {"overlapd_device_busy_seconds_total", "wall time the device spent inside jobs",
       MetricType::Counter,
       [](const Sources& s, MetricFamily& f) {
         for (const v1::DeviceStats& d : s.stats.devices()) {
           AddSample(f, Seconds(d.busy_ms()), s.Of(d.device()));
         }
       }},
      {"overlapd_device_running_job",
       "1 for each job running on the device; global_job_id (COORDINATOR/JOB) is the same on "
       "every node a job spans",
       MetricType::Gauge,
       [](const Sources& s, MetricFamily& f) {
         for (const v1::Device& d : s.node.devices()) {
           for (const v1::Job* job : LastOpOn(d.index(), s).running) {
             MetricLabels labels = With(s.Of(d.index()), {{"job_id", job->id()}});
             const std::string global = GlobalJobId(*job, s.node.node_name());
             if (!global.empty()) labels.push_back({"global_job_id", global});
             AddSample(f, 1, std::move(labels));
           }
         }
       }},
      {"overlapd_last_op_finished_timestamp_seconds",
       "when the last op on the device was known finished (unix seconds; its job's end, or the "
       "scrape while the job runs); the last_op series go away metrics_last_op_ttl_s after it",
       MetricType::Gauge,
       OfLastOp([](const LastOp& l) -> std::optional<double> { return l.finished_ms / 1000.0; })},
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
         // (its comm alone is 0: nothing moves); a serial schedule hides none by
         // design (what its ratio would say is noise).
         if (l.op->type() == OpTypeName(OpType::kGemm) || !(l.op->comm_alone().median_ms() > 0) ||
             absl::StartsWith(l.op->schedule(), "serial")) {
           return std::nullopt;
         }
         return l.op->hidden_fraction();
       })},
      {"overlapd_last_op_gemm_alone_seconds",
       "that op's GEMM alone on this device's rank (a slow GPU shows here)", MetricType::Gauge,
       OfLastOpRankMs(&v1::OpResult::gemm_alone_rank_ms)},
      {"overlapd_last_op_compute_wait_seconds",
       "in that op's traced iteration, how long this device's compute stream sat idle waiting "
       "(for a transfer, or a peer) before it finished",
       MetricType::Gauge,
       OfLastOpRankMs(&v1::OpResult::compute_wait_rank_ms)},
      {"overlapd_last_op_energy_joules",
       "energy of one step of the last op finished on the device, all its devices together "
       "(NVML's counter around its timed iterations)",
       MetricType::Gauge,
       OfLastOpEnergy(&v1::Energy::step_joules)},
      {"overlapd_last_op_power_watts",
       "average power of that op's timed iterations, all its devices together", MetricType::Gauge,
       OfLastOpEnergy(&v1::Energy::step_watts)},
      {"overlapd_last_layer_energy_joules",
       "energy of one layer step of the newest job on the device that measured one, all its "
       "devices together",
       MetricType::Gauge,
       [](const Sources& s, MetricFamily& f) {
         for (const v1::Device& d : s.node.devices()) {
           for (const v1::Job& job : s.recent) {
             const auto& devices = job.devices();
             if (std::find(devices.begin(), devices.end(), d.index()) == devices.end()) continue;
             if (!job.result().has_layer_step()) continue;
             if (job.result().has_layer_energy() && Fresh(FinishedMs(job, s.now_ms), s)) {
               AddSample(f, job.result().layer_energy().step_joules(), s.Of(d.index()));
             }
             break;
           }
         }
       }},
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
                                       const std::vector<v1::Job>& recent, int64_t now_ms,
                                       const MetricsOptions& options) {
  Sources sources{node, stats, recent, {}, now_ms, options.last_op_ttl_s};
  for (const v1::Device& d : node.devices()) sources.gpu[d.index()] = GpuLabels(d, node.hostname());
  return BuildFamilies(Definitions(), sources);
}

class MetricsExporter::Collector {
 public:
  Collector(const node::NodeState& node, jobs::JobQueue& queue, MetricsOptions options,
            MetricsSessions sessions)
      : node_(node), queue_(queue), options_(options), sessions_(sessions) {}

  std::vector<MetricFamily> Gather() {
    // A failed GetStats (the job store) leaves its figures out rather than
    // failing the scrape.
    const v1::GetStatsResponse stats = node_.Stats().value_or(v1::GetStatsResponse());
    std::vector<v1::Job> recent;
    if (auto jobs = queue_.List(std::nullopt, kMetricsRecentJobs); jobs.ok()) {
      for (const jobs::JobRecord& job : *jobs) recent.push_back(wire::ToProto(job));
    }
    v1::GetNodeInfoResponse node = node_.Info();
    if (options_.latest_sample) {
      if (std::shared_ptr<const v1::NodeSample> sample = options_.latest_sample()) {
        *node.mutable_devices() = sample->devices();
      }
    }
    std::vector<MetricFamily> families =
        BuildMetrics(node, stats, recent, absl::ToUnixMillis(absl::Now()), options_);
    // Each copies its state under its own lock; nothing waits on I/O there.
    std::vector<sessions::SessionRow> rows;
    std::vector<sessions::SessionFigures> figures;
    if (sessions_.registry != nullptr) rows = sessions_.registry->List("");
    if (sessions_.lanes != nullptr) figures = sessions_.lanes->Figures();
    for (MetricFamily& family : BuildSessionMetrics(rows, figures)) {
      families.push_back(std::move(family));
    }
    if (sessions_.lanes != nullptr) {
      for (MetricFamily& family : BuildDeviceLaneMetrics(sessions_.lanes->DeviceFigures())) {
        families.push_back(std::move(family));
      }
    }
    return families;
  }

  // /healthz: 200 while the daemon takes work and its devices are usable (what
  // overlapd_healthy says), 503 otherwise, for load balancers and probes.
  HttpResponse Health() const {
    HttpResponse response;
    if (node_.Info().healthy()) {
      response.body = "ok\n";
    } else {
      response.status = 503;
      response.body = "unhealthy: draining, or a device is unusable (overlapctl health)\n";
    }
    return response;
  }

 private:
  const node::NodeState& node_;
  jobs::JobQueue& queue_;
  const MetricsOptions options_;
  const MetricsSessions sessions_;
};

absl::StatusOr<std::unique_ptr<MetricsExporter>> MetricsExporter::Start(
    const std::string& address, const node::NodeState& node, jobs::JobQueue& queue,
    const MetricsOptions& options, MetricsSessions sessions) {
  std::unique_ptr<MetricsExporter> exporter(new MetricsExporter());
  exporter->collector_ = std::make_unique<Collector>(node, queue, options, sessions);
  Collector* collector = exporter->collector_.get();
  HttpEndpoint::Routes routes;
  routes["/metrics"] = [collector] {
    HttpResponse response;
    response.content_type = "text/plain; version=0.0.4; charset=utf-8";
    response.body = prometheus::TextSerializer().Serialize(collector->Gather());
    return response;
  };
  routes["/healthz"] = [collector] { return collector->Health(); };
  absl::StatusOr<std::unique_ptr<HttpEndpoint>> endpoint =
      HttpEndpoint::Start(address, std::move(routes));
  if (!endpoint.ok()) return endpoint.status();
  exporter->endpoint_ = std::move(*endpoint);
  return exporter;
}

MetricsExporter::~MetricsExporter() {
  endpoint_.reset();  // before the collector its thread calls
}

int MetricsExporter::port() const { return endpoint_->port(); }

}  // namespace overlap::rpc
