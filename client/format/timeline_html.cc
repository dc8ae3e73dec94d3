#include "client/format/timeline_html.h"

#include <map>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/format/html_chart.h"
#include "client/format/report.h"

namespace overlap::client {

namespace {

// A colour per span kind, and the legend's name for it.
struct Kind {
  const char* kind;
  const char* name;
  int color;
};
constexpr Kind kKinds[] = {{"gemm", "GEMM", 0},
                           {"copy", "copy", 1},
                           {"collective", "collective", 2},
                           {"sendrecv", "send/recv", 3},
                           {"reduce", "reduce", 5}};
constexpr int kOtherColor = 7;

int KindColor(const std::string& kind) {
  for (const Kind& k : kKinds) {
    if (kind == k.kind) return k.color;
  }
  return kOtherColor;
}

// Swatches for the kinds the timeline holds, in kKinds' order.
std::vector<LegendEntry> KindLegend(const v1::Timeline& timeline) {
  std::set<int> colors;
  for (const v1::TimelineSpan& s : timeline.spans()) colors.insert(KindColor(s.kind()));
  std::vector<LegendEntry> legend;
  for (const Kind& k : kKinds) {
    if (colors.count(k.color) > 0) legend.push_back({k.name, k.color});
  }
  if (colors.count(kOtherColor) > 0) legend.push_back({"other", kOtherColor});
  return legend;
}

std::string Chart(const std::string& title, const v1::Timeline& timeline) {
  std::map<std::pair<int, std::string>, GanttLane> lanes;
  for (const v1::TimelineSpan& s : timeline.spans()) {
    GanttLane& lane = lanes[{s.rank(), s.lane()}];
    lane.name = absl::StrCat("rank ", s.rank(), " ", s.lane());
    lane.spans.push_back({s.start_ms(), s.end_ms(),
                          absl::StrCat(s.name(), s.op().empty() ? "" : " (" + s.op() + ")"),
                          KindColor(s.kind())});
  }
  std::vector<GanttLane> ordered;
  for (auto& [key, lane] : lanes) ordered.push_back(std::move(lane));
  return SvgGantt(absl::StrFormat("%s: %.3f ms step", title, timeline.step_ms()), ordered,
                  KindLegend(timeline));
}

}  // namespace

std::string TimelineHtml(const v1::Job& job, const std::string& op_id) {
  std::vector<HtmlSection> sections;
  for (const v1::OpResult& op : job.result().ops()) {
    if (!op_id.empty() && op.id() != op_id) continue;
    if (op.timeline().spans().empty()) continue;
    sections.push_back(
        {absl::StrCat("op ", op.id(), " (", op.schedule(), ")"), Chart(op.id(), op.timeline())});
  }
  if (op_id.empty() && !job.result().layer_timeline().spans().empty()) {
    sections.push_back({"the layer step", Chart("layer", job.result().layer_timeline())});
  }
  if (sections.empty()) return "";
  return HtmlPage(absl::StrCat("overlapctl timeline ", job.id()),
                  absl::StrCat(job.name(),
                               ": each op's traced iteration, a lane per rank and "
                               "stream"),
                  sections,
                  CaveatLines(HostTimingsNote(job.result().backend()) +
                              SharedGpuNote(job.result().ranks_per_gpu())));
}

}  // namespace overlap::client
