#include "client/format/timeline_html.h"

#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/format/html_chart.h"

namespace overlap::client {

namespace {

int KindColor(const std::string& kind) {
  if (kind == "gemm") return 0;
  if (kind == "copy") return 1;
  if (kind == "collective") return 2;
  if (kind == "sendrecv") return 3;
  if (kind == "reduce") return 5;
  return 7;
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
  return SvgGantt(absl::StrFormat("%s: %.3f ms (gemm blue, copy orange, collective green, "
                                  "send/recv pink, reduce red)",
                                  title, timeline.step_ms()),
                  ordered);
}

}  // namespace

std::string TimelineHtml(const v1::Job& job, const std::string& op_id) {
  std::vector<HtmlSection> sections;
  for (const v1::OpResult& op : job.result().ops()) {
    if (!op_id.empty() && op.id() != op_id) continue;
    if (op.timeline().spans().empty()) continue;
    sections.push_back({absl::StrCat("op ", op.id(), " (", op.schedule(), ")"),
                        Chart(op.id(), op.timeline())});
  }
  if (op_id.empty() && !job.result().layer_timeline().spans().empty()) {
    sections.push_back({"the layer step", Chart("layer", job.result().layer_timeline())});
  }
  if (sections.empty()) return "";
  return HtmlPage(absl::StrCat("overlapctl timeline ", job.id()),
                  absl::StrCat(job.name(), ": each op's traced iteration, a lane per rank and "
                               "stream"),
                  sections);
}

}  // namespace overlap::client
