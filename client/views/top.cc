#include "client/views/top.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/core/command_io.h"
#include "client/core/proto_json.h"
#include "client/format/device_health.h"
#include "client/format/report.h"
#include "client/format/table.h"

namespace overlap::client {
namespace {

constexpr int kHeaderEvery = 20;
// After the time (and, for `top --nodes`, the node): the GPU's columns.
constexpr char kLineFormat[] =
    "%4s %6s %7s %6s %7s %6s %-12s %-12s %10s  %-11s %-12s %-36s %-12s %8s %8s %7s\n";
constexpr size_t kMaxNodeWidth = 40;
// After the time: a session's columns, one line per device it holds.
constexpr char kSessionFormat[] = "%4s %-12s %-16s %-12s %-9s %8s %8s %8s\n";

// The running job that holds `device`, or null.
const v1::Job* JobOn(const std::vector<v1::Job>& running, int device) {
  for (const v1::Job& job : running) {
    if (std::find(job.devices().begin(), job.devices().end(), device) != job.devices().end()) {
      return &job;
    }
  }
  return nullptr;
}

std::string Phase(const v1::Progress& p) {
  if (p.phase().empty()) return "-";
  if (p.iterations() <= 0) return p.phase();
  return absl::StrCat(p.phase(), " ", p.iteration(), "/", p.iterations());
}

const v1::OpResult* LastOp(const v1::Job& job) {
  const auto& ops = job.result().ops();
  return ops.empty() ? nullptr : &ops[ops.size() - 1];
}

// How long `device`'s compute stream waited in the op's traced iteration; < 0
// where the op was not traced.
double ComputeWaitMs(const v1::Job& job, const v1::OpResult& op, int device) {
  const auto& devices = job.devices();
  const int rank =
      static_cast<int>(std::find(devices.begin(), devices.end(), device) - devices.begin());
  return rank < op.compute_wait_rank_ms_size() ? op.compute_wait_rank_ms(rank) : -1;
}

std::string Or(bool valid, const std::string& value) { return valid ? value : "-"; }

std::string Truncate(const std::string& s, size_t width) {
  return s.size() <= width ? s : s.substr(0, width - 1) + "~";
}

// An address keeps its end, where the nodes differ.
std::string TruncateFront(const std::string& s, size_t width) {
  return s.size() <= width ? s : "~" + s.substr(s.size() - width + 1);
}

std::string ColumnsHeader() {
  return absl::StrFormat(kLineFormat, "GPU", "SM_MHZ", "MEM_MHZ", "TEMP_C", "POWER_W", "UTIL_%",
                         "LIMITS", "HEALTH", "MEM_USED", "JOB", "OP", "PHASE", "LAST_OP", "STEP_MS",
                         "HIDDEN_%", "WAIT_MS");
}

std::string SessionColumnsHeader() {
  return absl::StrFormat(kSessionFormat, "GPU", "SESSION", "NAME", "OWNER", "LANE", "STEPS",
                         "STEPS/S", "STEP_MS");
}

// One word: "alice (uid:1000)" -> "alice".
std::string OwnerWord(const std::string& owner) { return owner.substr(0, owner.find(' ')); }

// The session's last step: its ops' last device times, summed; < 0 before any.
double LastStepMs(const v1::SessionInfo& session) {
  double total = 0;
  bool any = false;
  for (const v1::SessionOpStats& op : session.ops()) {
    total += op.last_ms();
    any = any || op.last_ms() > 0;
  }
  return any ? total : -1;
}

std::string TimeOf(int64_t now_ms) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixMillis(now_ms), absl::UTCTimeZone());
}

// One line per device, each after `prefix` (the time, and the node).
std::string DeviceLines(const std::string& prefix, const v1::GetNodeInfoResponse& node,
                        const std::vector<v1::Job>& running) {
  std::string out;
  const int most_nvlinks = MostNvlinksActive(node);
  for (const v1::Device& d : node.devices()) {
    const bool t = d.telemetry_valid();
    const v1::Job* job = JobOn(running, d.index());
    const v1::OpResult* last = job ? LastOp(*job) : nullptr;
    const double wait = last ? ComputeWaitMs(*job, *last, d.index()) : -1;
    absl::StrAppend(&out, prefix);
    absl::StrAppendFormat(
        &out, kLineFormat, absl::StrCat(d.index()), Or(t, absl::StrCat(d.sm_clock_mhz())),
        Or(t, absl::StrCat(d.mem_clock_mhz())), Or(t, absl::StrCat(d.temperature_c())),
        Or(t, absl::StrFormat("%.1f", d.power_w())), Or(t, absl::StrCat(d.utilization_pct())),
        Truncate(FormatClockLimits(d), 12), Truncate(HealthTags(d, most_nvlinks), 12),
        BytesCell(d.memory_used_bytes()), job ? Truncate(job->id(), 11) : "-",
        job && !job->progress().op_id().empty() ? Truncate(job->progress().op_id(), 12) : "-",
        job ? Truncate(WordCell(Phase(job->progress())), 36) : "-",
        last ? Truncate(last->id(), 12) : "-",
        last ? absl::StrFormat("%.3f", last->step().median_ms()) : "-",
        last && HasCommToHide(*last)
            ? absl::StrFormat("%.1f", 100 * std::clamp(last->hidden_fraction(), 0.0, 1.0))
            : "-",
        wait >= 0 ? absl::StrFormat("%.3f", wait) : "-");
  }
  return out;
}

// A header, then a line per session and device it holds, each after `prefix`.
std::string SessionLines(const std::string& prefix, const std::string& header_prefix,
                         const std::vector<TopSession>& sessions) {
  if (sessions.empty()) return "";
  std::string out = header_prefix + SessionColumnsHeader();
  for (const TopSession& s : sessions) {
    const v1::SessionInfo& info = s.info;
    const double step_ms = LastStepMs(info);
    for (int device : info.devices()) {
      absl::StrAppend(&out, prefix);
      absl::StrAppendFormat(
          &out, kSessionFormat, absl::StrCat(device), Truncate(info.session_id(), 12),
          Truncate(absl::StrReplaceAll(info.name(), {{" ", "_"}}), 16),
          Truncate(OwnerWord(info.owner()), 12), info.priority(), absl::StrCat(info.steps()),
          s.steps_per_s >= 0 ? absl::StrFormat("%.1f", s.steps_per_s) : "-",
          step_ms >= 0 ? absl::StrFormat("%.3f", step_ms) : "-");
    }
  }
  return out;
}

std::string NodePrefix(int64_t now_ms, const std::string& address, size_t width) {
  return absl::StrFormat("%-20s %-*s ", TimeOf(now_ms), static_cast<int>(width),
                         TruncateFront(address, width));
}

}  // namespace

std::string TopHeader() { return absl::StrFormat("%-20s ", "TIME") + ColumnsHeader(); }

std::string FormatTopSample(const v1::GetNodeInfoResponse& node,
                            const std::vector<v1::Job>& running, int64_t now_ms,
                            const std::vector<TopSession>& sessions) {
  const std::string prefix = absl::StrFormat("%-20s ", TimeOf(now_ms));
  return DeviceLines(prefix, node, running) +
         SessionLines(prefix, absl::StrFormat("%-20s ", "TIME"), sessions);
}

std::vector<TopSession> OpenTopSessions(const v1::ListSessionsResponse& listed,
                                        const std::vector<TopSession>& previous, double elapsed_s) {
  std::vector<TopSession> open;
  for (const v1::SessionInfo& info : listed.sessions()) {
    if (info.state() != "joining" && info.state() != "ready") continue;
    TopSession& s = open.emplace_back();
    s.info = info;
    for (const TopSession& before : previous) {
      if (before.info.session_id() == info.session_id() && elapsed_s > 0) {
        s.steps_per_s = static_cast<double>(info.steps() - before.info.steps()) / elapsed_s;
      }
    }
  }
  return open;
}

namespace {

// The sessions holding `device`, for its JSON.
nlohmann::json SessionsJson(const std::vector<TopSession>& sessions, int device) {
  nlohmann::json out = nlohmann::json::array();
  for (const TopSession& s : sessions) {
    const auto& devices = s.info.devices();
    const auto rank = std::find(devices.begin(), devices.end(), device);
    if (rank == devices.end()) continue;
    const double step_ms = LastStepMs(s.info);
    out.push_back({{"id", s.info.session_id()},
                   {"name", s.info.name()},
                   {"owner", s.info.owner()},
                   {"lane", s.info.priority()},
                   {"rank", rank - devices.begin()},
                   {"steps", s.info.steps()},
                   {"steps_per_s", s.steps_per_s >= 0 ? nlohmann::json(s.steps_per_s) : nullptr},
                   {"step_ms", step_ms >= 0 ? nlohmann::json(step_ms) : nullptr}});
  }
  return out;
}

}  // namespace

nlohmann::json TopSampleJson(const v1::GetNodeInfoResponse& node,
                             const std::vector<v1::Job>& running, int64_t now_ms,
                             const std::vector<TopSession>& sessions) {
  nlohmann::json devices = nlohmann::json::array();
  const int most_nvlinks = MostNvlinksActive(node);
  for (const v1::Device& d : node.devices()) {
    nlohmann::json j = {{"device", d.index()},
                        {"telemetry_valid", d.telemetry_valid()},
                        {"memory_used_bytes", d.memory_used_bytes()},
                        {"job", nullptr},
                        {"last_op", nullptr},
                        {"sessions", SessionsJson(sessions, d.index())}};
    AddTelemetryJson(d, &j);
    if (HasHealth(d)) j["health_problems"] = HealthProblems(d, most_nvlinks);
    if (const v1::Job* job = JobOn(running, d.index())) {
      j["job"] = job->id();
      j["op"] = job->progress().op_id();
      j["phase"] = job->progress().phase();
      j["iteration"] = job->progress().iteration();
      j["iterations"] = job->progress().iterations();
      if (const v1::OpResult* last = LastOp(*job)) {
        j["last_op"] = {{"id", last->id()},
                        {"schedule", last->schedule()},
                        {"step_ms", last->step().median_ms()},
                        {"exposed_comm_ms", last->exposed_comm_ms()},
                        {"hidden", last->hidden_fraction()}};
        if (const double wait = ComputeWaitMs(*job, *last, d.index()); wait >= 0) {
          j["last_op"]["compute_wait_ms"] = wait;
        }
      }
    }
    devices.push_back(std::move(j));
  }
  return {{"time_ms", now_ms}, {"time", Rfc3339(now_ms)}, {"devices", std::move(devices)}};
}

namespace {

// Prints one sample and counts it; false once `count` samples are out.
class TopPrinter {
 public:
  TopPrinter(const TopOptions& options, bool json, std::ostream& out)
      : options_(options), json_(json), out_(out) {}

  bool Print(const v1::GetNodeInfoResponse& node, const std::vector<v1::Job>& running,
             const v1::ListSessionsResponse& listed, int64_t now_ms) {
    sessions_ = OpenTopSessions(
        listed, sessions_, printed_ > 0 ? static_cast<double>(now_ms - previous_ms_) / 1000.0 : 0);
    previous_ms_ = now_ms;
    if (json_) {
      out_ << TopSampleJson(node, running, now_ms, sessions_).dump() << "\n";
    } else {
      if (printed_ % kHeaderEvery == 0) out_ << TopHeader();
      out_ << FormatTopSample(node, running, now_ms, sessions_);
    }
    out_.flush();
    ++printed_;
    return options_.count <= 0 || printed_ < options_.count;
  }
  int printed() const { return printed_; }

 private:
  const TopOptions& options_;
  const bool json_;
  std::ostream& out_;
  std::vector<TopSession> sessions_;
  int64_t previous_ms_ = 0;
  int printed_ = 0;
};

// Samples by asking every interval (a daemon without WatchNode).
int PollTop(DaemonClient& client, const TopOptions& options, TopPrinter& printer,
            std::ostream& err) {
  for (int sample = 0; options.count <= 0 || sample < options.count; ++sample) {
    if (sample > 0) absl::SleepFor(absl::Seconds(options.interval_s));
    absl::StatusOr<v1::GetNodeInfoResponse> node = client.GetNodeInfo();
    if (!node.ok()) return ReportCallError(node.status(), client.address(), err);
    absl::StatusOr<v1::ListJobsResponse> jobs = client.ListJobs(v1::RUNNING, 0);
    if (!jobs.ok()) return ReportCallError(jobs.status(), client.address(), err);
    // The daemon answers an admin's all_users with every owner's sessions and
    // anyone else's with their own; one older than sessions has none.
    absl::StatusOr<v1::ListSessionsResponse> listed =
        client.ListSessions(/*all_users=*/true, /*lanes=*/false);
    if (!listed.ok() && listed.status().code() != absl::StatusCode::kUnimplemented) {
      return ReportCallError(listed.status(), client.address(), err);
    }
    const std::vector<v1::Job> running(jobs->jobs().begin(), jobs->jobs().end());
    printer.Print(*node, running, listed.ok() ? *listed : v1::ListSessionsResponse(),
                  absl::ToUnixMillis(absl::Now()));
  }
  return kExitOk;
}

}  // namespace

int RunTop(DaemonClient& client, const TopOptions& options, bool json, std::ostream& out,
           std::ostream& err) {
  TopPrinter printer(options, json, out);
  // One stream, the daemon's samples as they are taken; a daemon older than
  // WatchNode is asked every interval instead.
  const absl::Status streamed =
      client.WatchNode(absl::Seconds(options.interval_s), [&printer](const v1::NodeSample& sample) {
        v1::GetNodeInfoResponse node;
        *node.mutable_devices() = sample.devices();
        v1::ListSessionsResponse listed;
        *listed.mutable_sessions() = sample.sessions();
        return printer.Print(node, {sample.running().begin(), sample.running().end()}, listed,
                             sample.time_ms());
      });
  if (streamed.code() == absl::StatusCode::kUnimplemented && printer.printed() == 0) {
    return PollTop(client, options, printer, err);
  }
  if (!streamed.ok()) return ReportCallError(streamed, client.address(), err);
  return kExitOk;
}

size_t ClusterTopNodeWidth(const std::vector<NodeTopSample>& nodes) {
  size_t width = 4;  // "node"
  for (const NodeTopSample& n : nodes) width = std::max(width, n.address.size());
  return std::min(width, kMaxNodeWidth);
}

std::string ClusterTopHeader(size_t node_width) {
  return absl::StrFormat("%-20s %-*s ", "TIME", static_cast<int>(node_width), "NODE") +
         ColumnsHeader();
}

std::string FormatClusterTopSample(const std::vector<NodeTopSample>& nodes, int64_t now_ms) {
  const size_t width = ClusterTopNodeWidth(nodes);
  std::string out;
  for (const NodeTopSample& n : nodes) {
    const std::string prefix = NodePrefix(now_ms, n.address, width);
    if (n.status.ok()) {
      out += DeviceLines(prefix, n.node, n.running);
    } else {
      absl::StrAppend(&out, prefix, absl::StrFormat("%4s ", "-"),
                      "no answer: ", NoAnswerText(n.status), "\n");
    }
  }
  return out;
}

nlohmann::json ClusterTopSampleJson(const std::vector<NodeTopSample>& nodes, int64_t now_ms) {
  nlohmann::json all = nlohmann::json::array();
  for (const NodeTopSample& n : nodes) {
    nlohmann::json j = {{"address", n.address}};
    if (n.status.ok()) {
      j["devices"] = TopSampleJson(n.node, n.running, now_ms)["devices"];
    } else {
      j["error"] = NoAnswerJson(n.status);
    }
    all.push_back(std::move(j));
  }
  return {{"time_ms", now_ms}, {"time", Rfc3339(now_ms)}, {"nodes", std::move(all)}};
}

namespace {

struct NodeNow {
  v1::GetNodeInfoResponse node;
  std::vector<v1::Job> running;
};

absl::StatusOr<NodeNow> SampleNode(DaemonClient& client) {
  absl::StatusOr<v1::GetNodeInfoResponse> node = client.GetNodeInfo();
  if (!node.ok()) return node.status();
  absl::StatusOr<v1::ListJobsResponse> jobs = client.ListJobs(v1::RUNNING, 0);
  if (!jobs.ok()) return jobs.status();
  return NodeNow{*std::move(node), {jobs->jobs().begin(), jobs->jobs().end()}};
}

}  // namespace

int RunClusterTop(std::vector<NodeClient>& nodes, const TopOptions& options, bool json,
                  std::ostream& out, std::ostream& err) {
  std::vector<NodeTopSample> samples;
  for (int sample = 0; options.count <= 0 || sample < options.count; ++sample) {
    if (sample > 0) absl::SleepFor(absl::Seconds(options.interval_s));
    std::vector<absl::StatusOr<NodeNow>> now = CallEveryNode<NodeNow>(nodes, SampleNode);
    samples.clear();
    for (size_t i = 0; i < nodes.size(); ++i) {
      NodeTopSample s{nodes[i].address, now[i].status(), {}, {}};
      if (now[i].ok()) {
        s.node = std::move(now[i]->node);
        s.running = std::move(now[i]->running);
      }
      samples.push_back(std::move(s));
    }
    const int64_t now_ms = absl::ToUnixMillis(absl::Now());
    if (json) {
      out << ClusterTopSampleJson(samples, now_ms).dump() << "\n";
    } else {
      if (sample % kHeaderEvery == 0) out << ClusterTopHeader(ClusterTopNodeWidth(samples));
      out << FormatClusterTopSample(samples, now_ms);
    }
    out.flush();
  }
  int rc = kExitOk;
  for (const NodeTopSample& s : samples) {
    if (s.status.ok()) continue;
    const int failed = ReportCallError(s.status, s.address, err);
    if (rc == kExitOk) rc = failed;
  }
  return rc;
}

}  // namespace overlap::client
