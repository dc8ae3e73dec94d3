// Writes one --html page from a JSON fixture (tests/charts/fixtures), through
// the functions overlapctl's bench, commbench, compare and timeline call:
//
//   chart_pages FIXTURE.json OUT.html
//
// A fixture holds {"page": "bench" | "commbench" | "compare" | "timeline", ...}:
// bench rows and predictions, commbench rows per variant, or jobs in the
// protobuf JSON mapping (compare's "a" and "b", timeline's "job").
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "client/format/html_chart.h"
#include "client/format/timeline_html.h"
#include "client/jobs/compare.h"
#include "client/measure/bench_html.h"
#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"

namespace {

using overlap::client::BenchPrediction;
using overlap::client::BenchRow;
using overlap::client::CommBenchRow;
namespace v1 = overlap::v1;

bool ReadJob(const nlohmann::json& j, v1::Job* job) {
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  return google::protobuf::util::JsonStringToMessage(j.dump(), job, options).ok();
}

std::string BenchPage(const nlohmann::json& f) {
  std::vector<BenchRow> rows;
  for (const nlohmann::json& r : f.at("rows")) {
    BenchRow row;
    row.shape = {r.at("op").get<std::string>(), r.at("m").get<int64_t>(), r.at("k").get<int64_t>(),
                 r.at("n").get<int64_t>()};
    row.tp = r.value("tp", 2);
    row.step_ms = r.at("step_ms").get<double>();
    row.ideal_ms = r.at("ideal_ms").get<double>();
    row.serial_ms = r.at("serial_ms").get<double>();
    row.comm_ms = r.value("comm_ms", 0.0);
    row.hidden = r.value("hidden", 0.0);
    row.hides = r.value("hides", true);
    row.host_backend = f.value("backend", "") == "host";
    row.ranks_per_gpu = f.value("ranks_per_gpu", 1);
    rows.push_back(row);
  }
  std::vector<BenchPrediction> predictions;
  for (const nlohmann::json& p : f.value("predictions", nlohmann::json::array())) {
    BenchPrediction prediction;
    prediction.predicted = !p.is_null();
    prediction.step_ms = p.is_null() ? 0 : p.get<double>();
    predictions.push_back(prediction);
  }
  return overlap::client::BenchHtml(rows, predictions, f.value("subtitle", ""));
}

std::string CommBenchPage(const nlohmann::json& f) {
  std::vector<CommBenchRow> rows;
  for (const nlohmann::json& r : f.at("rows")) {
    CommBenchRow row;
    row.collective = r.at("collective").get<std::string>();
    row.bytes = r.at("bytes").get<int64_t>();
    for (const auto& [variant, busbw] : r.at("busbw").items()) {
      row.by_transport[variant].busbw_gbps = busbw.get<double>();
    }
    rows.push_back(row);
  }
  return overlap::client::CommBenchHtml(
      rows, f.at("variants").get<std::vector<std::string>>(), f.value("subtitle", ""),
      overlap::client::CommBenchCaveats(f.value("backend", ""), f.value("ranks_per_gpu", 1),
                                        f.value("across_nodes", false)));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: chart_pages FIXTURE.json OUT.html\n";
    return 2;
  }
  std::ifstream in(argv[1]);
  const nlohmann::json f = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (f.is_discarded()) {
    std::cerr << argv[1] << ": not JSON\n";
    return 1;
  }
  const std::string page = f.value("page", "");
  std::string html;
  try {
    if (page == "bench") {
      html = BenchPage(f);
    } else if (page == "commbench") {
      html = CommBenchPage(f);
    } else if (page == "compare") {
      v1::Job a, b;
      if (!ReadJob(f.at("a"), &a) || !ReadJob(f.at("b"), &b)) {
        std::cerr << argv[1] << ": a or b is no job\n";
        return 1;
      }
      html = overlap::client::CompareHtml(a, b, overlap::client::CompareJobs(a, b));
    } else if (page == "timeline") {
      v1::Job job;
      if (!ReadJob(f.at("job"), &job)) {
        std::cerr << argv[1] << ": job is no job\n";
        return 1;
      }
      html = overlap::client::TimelineHtml(job, "");
    } else {
      std::cerr << argv[1] << ": unknown page \"" << page << "\"\n";
      return 1;
    }
  } catch (const nlohmann::json::exception& e) {
    std::cerr << argv[1] << ": " << e.what() << "\n";
    return 1;
  }
  std::ofstream out(argv[2]);
  out << html;
  return out.good() ? 0 : 1;
}
