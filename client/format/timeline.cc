#include "client/format/timeline.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/format/report.h"

namespace overlap::client {
namespace {

// A gap between ops in the Chrome trace, so that each op's iteration stands apart.
constexpr double kGapBetweenOpsMs = 0.05;
// GEMM time within this fraction of the GEMM alone's is the same time.
constexpr double kSameGemmFraction = 0.005;

bool IsTransfer(const std::string& kind) {
  return kind == "copy" || kind == "collective" || kind == "sendrecv";
}

// "4 GEMMs in 0.205 ms", "1 transfer in 0.090 ms".
std::string Counted(int count, const std::string& what, double ms) {
  return absl::StrFormat("%d %s%s in %s ms", count, what, count == 1 ? "" : "s", FormatMs(ms));
}

// Microseconds for the Chrome trace, to the nanosecond.
double Micros(double ms) { return std::round(ms * 1e6) / 1e3; }

char ChartChar(const std::string& kind) {
  if (kind == "gemm") return 'G';
  if (kind == "copy") return 'C';
  if (kind == "collective") return 'N';
  if (kind == "sendrecv") return 'S';
  if (kind == "reduce") return 'R';
  if (kind == "elementwise") return 'E';
  return 'F';
}

// The lanes of a timeline in chart order: by rank, then compute, comm, side.
std::vector<std::pair<int, std::string>> Lanes(const v1::Timeline& timeline) {
  std::vector<std::pair<int, std::string>> lanes;
  for (const v1::TimelineSpan& s : timeline.spans()) {
    const std::pair<int, std::string> lane{s.rank(), s.lane()};
    if (std::find(lanes.begin(), lanes.end(), lane) == lanes.end()) lanes.push_back(lane);
  }
  auto place = [](const std::string& lane) {
    return lane == "compute" ? 0 : lane == "comm" ? 1 : lane == "side" ? 2 : 3;
  };
  std::stable_sort(lanes.begin(), lanes.end(), [&](const auto& a, const auto& b) {
    if (a.first != b.first) return a.first < b.first;
    return place(a.second) < place(b.second);
  });
  return lanes;
}

// A timeline as the formatters show it: an op's, or the layer step's.
struct Shown {
  std::string id;        // the op's id, or "layer"
  std::string header;    // what precedes ": traced step"
  std::string schedule;  // Chrome trace args
  const v1::Timeline* timeline = nullptr;
  double timed_ms = 0;  // the timed median
  bool layer = false;   // spans of several ops: names say whose
};

std::vector<Shown> ShownTimelines(const v1::Job& job, const std::string& id) {
  std::vector<Shown> out;
  for (const v1::OpResult& op : job.result().ops()) {
    if (!op.has_timeline() || !(id.empty() || op.id() == id)) continue;
    out.push_back(Shown{
        op.id(),
        absl::StrCat(op.id(), "  ", op.type(), "  ", FormatShape(op), "  ", ScheduleLabel(op)),
        ScheduleLabel(op), &op.timeline(), op.step().median_ms(), false});
  }
  const v1::JobResult& r = job.result();
  if (r.has_layer_timeline() && (id.empty() || id == "layer")) {
    out.push_back(Shown{"layer", absl::StrCat("layer  ", absl::StrJoin(r.layer_order(), ", ")),
                        "layer step", &r.layer_timeline(), r.layer_step().median_ms(), true});
  }
  return out;
}

double TimelineEnd(const v1::Timeline& timeline) {
  double end = timeline.step_ms();
  for (const v1::TimelineSpan& s : timeline.spans()) end = std::max(end, s.end_ms());
  return end;
}

// Column c covers [c, c + 1) x end / width. It shows the span that covers most
// of it when spans cover at least half of it, else a span that lies wholly
// inside it (a short one), else idle: back-to-back spans show no gap between
// them, and no span is too short to show.
std::string ChartRow(const v1::Timeline& timeline, int rank, const std::string& lane, double end,
                     int width) {
  std::vector<const v1::TimelineSpan*> spans;
  for (const v1::TimelineSpan& s : timeline.spans()) {
    if (s.rank() == rank && s.lane() == lane) spans.push_back(&s);
  }
  std::string row(width, '.');
  if (end <= 0) return row;
  const double column = end / width;
  for (int c = 0; c < width; ++c) {
    const double from = c * column, to = from + column;
    double covered = 0, most = 0;
    char widest = '.', inside = '.';
    for (const v1::TimelineSpan* s : spans) {
      const double overlap = std::min(to, s->end_ms()) - std::max(from, s->start_ms());
      if (overlap <= 0 && !(s->start_ms() >= from && s->start_ms() < to)) continue;
      covered += std::max(0.0, overlap);
      if (overlap > most) {
        most = overlap;
        widest = ChartChar(s->kind());
      }
      if (s->start_ms() >= from && s->end_ms() <= to) inside = ChartChar(s->kind());
    }
    row[c] = covered >= column / 2 ? widest : inside;
  }
  return row;
}

std::string FormatOneTimeline(const Shown& shown, int width, bool all_spans) {
  const v1::Timeline& timeline = *shown.timeline;
  std::string out =
      absl::StrFormat("%s: traced step %s ms (timed median %s ms)%s\n", shown.header,
                      FormatMs(timeline.step_ms()), FormatMs(shown.timed_ms),
                      timeline.enqueued_not_replayed()
                          ? "; enqueued call by call, where the timed iterations replayed a graph"
                          : "");
  const double end = TimelineEnd(timeline);
  for (const auto& [rank, lane] : Lanes(timeline)) {
    absl::StrAppendFormat(&out, "  rank %d %-7s |%s|\n", rank, lane,
                          ChartRow(timeline, rank, lane, end, width));
  }
  absl::StrAppendFormat(&out, "  %-14s  0 ms%*s ms\n", "", width - 3, FormatMs(end));
  absl::StrAppend(&out,
                  "  G GEMM  C copy  N collective  S send/recv  R reduction  E elementwise  "
                  ". idle\n");
  for (const RankTimeline& r : SummarizeTimeline(timeline)) {
    std::string work = Counted(r.gemms, "GEMM", r.gemm_ms);
    if (r.transfers > 0) {
      absl::StrAppend(&work, ", ", Counted(r.transfers, "transfer", r.transfer_ms));
    }
    if (r.reduces > 0) {
      absl::StrAppend(&work, ", ", Counted(r.reduces, "reduction", r.reduce_ms));
    }
    if (r.elementwise > 0) {
      absl::StrAppend(&work, ", ", Counted(r.elementwise, "elementwise kernel", r.elementwise_ms));
    }
    absl::StrAppendFormat(
        &out, "  rank %d: %s; compute stream busy %s ms, waiting %s ms; ends at %s ms\n", r.rank,
        work, FormatMs(r.compute_busy_ms), FormatMs(r.waiting_ms), FormatMs(r.end_ms));
  }
  if (!all_spans && timeline.spans_size() > kListedSpans) {
    absl::StrAppendFormat(
        &out, "  %d spans: --spans lists them, --output-file FILE writes them as a Chrome trace\n",
        timeline.spans_size());
    return out;
  }
  // IDLE_MS: how long the span's stream sat idle since its previous span (or
  // the iteration start): on the compute stream, a GEMM that waited.
  absl::StrAppendFormat(&out, "  %-4s  %-7s  %8s  %8s  %8s  %11s  %s\n", "RANK", "LANE", "START_MS",
                        "END_MS", "MS", "IDLE_MS", "SPAN");
  std::vector<const v1::TimelineSpan*> spans;
  for (const v1::TimelineSpan& s : timeline.spans()) spans.push_back(&s);
  std::stable_sort(spans.begin(), spans.end(), [](const auto* a, const auto* b) {
    if (a->rank() != b->rank()) return a->rank() < b->rank();
    return a->start_ms() < b->start_ms();
  });
  std::map<std::pair<int, std::string>, double> lane_free;  // the end of each lane's last span
  for (const v1::TimelineSpan* s : spans) {
    double& free = lane_free[{s->rank(), s->lane()}];
    absl::StrAppendFormat(&out, "  %-4d  %-7s  %8s  %8s  %8s  %11s  %s\n", s->rank(), s->lane(),
                          FormatMs(s->start_ms()), FormatMs(s->end_ms()),
                          FormatMs(s->end_ms() - s->start_ms()),
                          FormatMs(std::max(0.0, s->start_ms() - free)),
                          shown.layer ? absl::StrCat(s->op(), ": ", s->name()) : s->name());
    free = std::max(free, s->end_ms());
  }
  return out;
}

}  // namespace

std::vector<RankTimeline> SummarizeTimeline(const v1::Timeline& timeline) {
  std::map<int, RankTimeline> ranks;
  for (const v1::TimelineSpan& s : timeline.spans()) {
    RankTimeline& r = ranks[s.rank()];
    r.rank = s.rank();
    const double ms = s.end_ms() - s.start_ms();
    r.end_ms = std::max(r.end_ms, s.end_ms());
    if (s.lane() == "compute") r.compute_busy_ms += ms;
    if (s.kind() == "gemm") {
      r.gemm_ms += ms;
      ++r.gemms;
    } else if (IsTransfer(s.kind())) {
      r.transfer_ms += ms;
      ++r.transfers;
    } else if (s.kind() == "reduce") {
      r.reduce_ms += ms;
      ++r.reduces;
    } else if (s.kind() == "elementwise") {
      r.elementwise_ms += ms;
      ++r.elementwise;
    }
  }
  std::vector<RankTimeline> out;
  for (auto& [rank, r] : ranks) {
    r.waiting_ms = std::max(0.0, r.end_ms - r.compute_busy_ms);
    out.push_back(r);
  }
  return out;
}

RankTimeline LastRank(const v1::Timeline& timeline) {
  const std::vector<RankTimeline> ranks = SummarizeTimeline(timeline);
  if (ranks.empty()) return RankTimeline{};
  return *std::max_element(ranks.begin(), ranks.end(),
                           [](const auto& a, const auto& b) { return a.end_ms < b.end_ms; });
}

std::string FormatTimelineNote(const std::string& label, const v1::Timeline& timeline,
                               double gemm_alone_ms) {
  if (timeline.spans().empty()) return "";
  const RankTimeline last = LastRank(timeline);
  std::string out = absl::StrFormat("%s timeline: rank %d ran %s", label, last.rank,
                                    Counted(last.gemms, "GEMM", last.gemm_ms));
  if (gemm_alone_ms > 0 && last.gemms > 0) {
    absl::StrAppendFormat(
        &out, " (GEMM%s alone %s ms: %+.1f%%%s)", label == "layer" ? "s" : "",
        FormatMs(gemm_alone_ms), 100.0 * (last.gemm_ms / gemm_alone_ms - 1.0),
        last.gemm_ms > gemm_alone_ms * (1 + kSameGemmFraction) ? " for pieces and contention" : "");
  }
  if (last.transfers > 0) {
    absl::StrAppend(&out, ", ", Counted(last.transfers, "transfer", last.transfer_ms));
  }
  if (last.reduces > 0) {
    absl::StrAppend(&out, ", ", Counted(last.reduces, "reduction", last.reduce_ms));
  }
  if (last.elementwise > 0) {
    absl::StrAppend(&out, ", ",
                    Counted(last.elementwise, "elementwise kernel", last.elementwise_ms));
  }
  absl::StrAppendFormat(&out, "; its compute stream waited %s ms; traced step %s ms\n",
                        FormatMs(last.waiting_ms), FormatMs(timeline.step_ms()));
  return out;
}

std::string FormatTimelineNote(const v1::OpResult& op) {
  if (!op.has_timeline()) return "";
  return FormatTimelineNote(op.id(), op.timeline(),
                            IsGemmAlone(op) ? 0 : op.gemm_alone().median_ms());
}

std::string FormatLayerTimelineNote(const v1::JobResult& result) {
  if (!result.has_layer_timeline()) return "";
  double gemms_alone = 0;
  for (const v1::OpResult& op : result.ops()) gemms_alone += op.gemm_alone().median_ms();
  return FormatTimelineNote("layer", result.layer_timeline(), gemms_alone);
}

std::string FormatTimelines(const v1::Job& job, const std::string& op_id, int width,
                            bool all_spans) {
  std::string out;
  for (const Shown& shown : ShownTimelines(job, op_id)) {
    if (!out.empty()) absl::StrAppend(&out, "\n");
    absl::StrAppend(&out, FormatOneTimeline(shown, std::max(width, 10), all_spans));
  }
  return out;
}

nlohmann::json TimelineJson(const v1::Timeline& timeline) {
  if (timeline.spans().empty()) return nullptr;
  nlohmann::json ranks = nlohmann::json::array(), spans = nlohmann::json::array();
  for (const RankTimeline& r : SummarizeTimeline(timeline)) {
    ranks.push_back({{"rank", r.rank},
                     {"end_ms", r.end_ms},
                     {"compute_busy_ms", r.compute_busy_ms},
                     {"waiting_ms", r.waiting_ms},
                     {"gemms", r.gemms},
                     {"gemm_ms", r.gemm_ms},
                     {"transfers", r.transfers},
                     {"transfer_ms", r.transfer_ms},
                     {"reduces", r.reduces},
                     {"reduce_ms", r.reduce_ms},
                     {"elementwise", r.elementwise},
                     {"elementwise_ms", r.elementwise_ms}});
  }
  for (const v1::TimelineSpan& s : timeline.spans()) {
    spans.push_back({{"op", s.op()},
                     {"rank", s.rank()},
                     {"lane", s.lane()},
                     {"kind", s.kind()},
                     {"name", s.name()},
                     {"start_ms", s.start_ms()},
                     {"end_ms", s.end_ms()}});
  }
  return {{"step_ms", timeline.step_ms()},
          {"enqueued_not_replayed", timeline.enqueued_not_replayed()},
          {"ranks", ranks},
          {"spans", spans}};
}

nlohmann::json ChromeTrace(const v1::Job& job, const std::string& op_id) {
  nlohmann::json events = nlohmann::json::array();
  std::map<int, std::vector<std::string>> lanes_of_rank;  // thread ids by lane name
  double offset_ms = 0;
  for (const Shown& shown : ShownTimelines(job, op_id)) {
    for (const v1::TimelineSpan& s : shown.timeline->spans()) {
      std::vector<std::string>& lanes = lanes_of_rank[s.rank()];
      auto lane = std::find(lanes.begin(), lanes.end(), s.lane());
      if (lane == lanes.end()) lane = lanes.insert(lanes.end(), s.lane());
      const std::string op = shown.layer ? s.op() : shown.id;
      events.push_back(
          {{"name", absl::StrCat(op, ": ", s.name())},
           {"cat", s.kind()},
           {"ph", "X"},
           {"ts", Micros(offset_ms + s.start_ms())},
           {"dur", Micros(s.end_ms() - s.start_ms())},
           {"pid", s.rank()},
           {"tid", lane - lanes.begin()},
           {"args", {{"op", op}, {"timeline", shown.id}, {"schedule", shown.schedule}}}});
    }
    offset_ms += TimelineEnd(*shown.timeline) + kGapBetweenOpsMs;
  }
  for (const auto& [rank, lanes] : lanes_of_rank) {
    events.push_back({{"name", "process_name"},
                      {"ph", "M"},
                      {"pid", rank},
                      {"args", {{"name", absl::StrCat("rank ", rank)}}}});
    for (size_t i = 0; i < lanes.size(); ++i) {
      events.push_back({{"name", "thread_name"},
                        {"ph", "M"},
                        {"pid", rank},
                        {"tid", i},
                        {"args", {{"name", lanes[i]}}}});
    }
  }
  return nlohmann::json{{"traceEvents", events},
                        {"displayTimeUnit", "ms"},
                        {"otherData", {{"job", job.id()}, {"name", job.name()}}}};
}

}  // namespace overlap::client
