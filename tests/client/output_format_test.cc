// The global output choice (-o), table widths, times, and progress off a
// terminal and under --quiet.
#include "client/format/output_format.h"

#include <gtest/gtest.h>

#include <ostream>
#include <sstream>
#include <string>
#include <vector>

#include "client/format/report.h"
#include "client/format/table.h"
#include "client/jobs/progress_printer.h"

namespace overlap::client {
namespace {

TEST(OutputFormatTest, ParsesTheFormatsAndRefusesAFileNamingOutputFile) {
  EXPECT_EQ(*ParseOutputFormat(""), OutputFormat::kTable);
  EXPECT_EQ(*ParseOutputFormat("json"), OutputFormat::kJson);
  EXPECT_EQ(*ParseOutputFormat("yaml"), OutputFormat::kYaml);
  EXPECT_EQ(*ParseOutputFormat("wide"), OutputFormat::kWide);
  EXPECT_EQ(*ParseOutputFormat("name"), OutputFormat::kName);
  absl::StatusOr<OutputFormat> file = ParseOutputFormat("layer.yaml");
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().message(),
            "-o/--output takes a format: json, yaml, wide or name, not \"layer.yaml\"; to write "
            "a file (graph, pin, timeline, calibrate, export), use --output-file layer.yaml");
}

TEST(OutputFormatTest, YamlKeepsTypesAndQuotesStringsThatLookLikeOthers) {
  const nlohmann::json doc = nlohmann::json::parse(
      R"({"id": "job-000001", "sequence": 42, "step_ms": 0.25, "ok": true, "error": "",
          "version": "0.2", "flag": "yes", "none": null, "devices": [0, 1], "result": {}})");
  EXPECT_EQ(JsonToYaml(doc),
            "devices:\n  - 0\n  - 1\nerror: \"\"\nflag: \"yes\"\nid: job-000001\nnone: ~\n"
            "ok: true\nresult: {}\nsequence: 42\nstep_ms: 0.25\nversion: \"0.2\"\n");
}

TEST(OutputFormatTest, NamesAreAJobsIdOrEveryListedJobsId) {
  EXPECT_EQ(JobNames(nlohmann::json::parse(R"({"id": "job-000007", "state": "RUNNING"})")),
            std::vector<std::string>({"job-000007"}));
  EXPECT_EQ(JobNames(nlohmann::json::parse(R"({"jobs": [{"id": "a"}, {"id": "b"}]})")),
            std::vector<std::string>({"a", "b"}));
  EXPECT_TRUE(JobNames(nlohmann::json::parse(R"({"jobs_by_state": {}})")).empty());
}

TEST(OutputFormatTest, AJobSpanningDaemonsIsNamedByItsGlobalIdOnce) {
  EXPECT_EQ(JobNames(nlohmann::json::parse(
                R"({"id": "job-000003", "global_id": "10.0.0.1:7070/job-000003"})")),
            std::vector<std::string>({"10.0.0.1:7070/job-000003"}));
  // The coordinator's job, its part on this same node (left out, as in the
  // table), a part of a job coordinated elsewhere, and a job of one node.
  const nlohmann::json list = nlohmann::json::parse(R"({"jobs": [
      {"id": "job-000004", "global_id": "a:7070/job-000004", "coordinator": ""},
      {"id": "job-000005", "global_id": "a:7070/job-000004", "coordinator": "a:7070"},
      {"id": "job-000002", "global_id": "b:7070/job-000009", "coordinator": "b:7070"},
      {"id": "job-000001", "global_id": ""}]})");
  EXPECT_EQ(JobNames(list),
            std::vector<std::string>({"a:7070/job-000004", "b:7070/job-000009", "job-000001"}));
}

TEST(OutputFormatTest, BufferHandsOnEachDocumentWhenWholeAndPassesTheRestOn) {
  std::vector<std::string> ids;
  std::ostringstream rest;
  JsonDocumentBuffer buffer([&](const nlohmann::json& doc) { ids.push_back(doc.dump()); }, rest);
  std::ostream out(&buffer);
  out << "{\n \"a\": \"}\\\"{\",\n \"b\": [1,\n 2]\n}\n";  // brackets inside a string
  EXPECT_EQ(ids, std::vector<std::string>({R"({"a":"}\"{","b":[1,2]})"}));
  out << "{\"n\": 1}\n{\"n\": 2}\n";  // one a line, as top prints
  EXPECT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids.back(), R"({"n":2})");
  out << "not json\n";
  out.flush();
  buffer.Flush();
  EXPECT_EQ(rest.str(), "not json\n");
}

TEST(TableWidthTest, PipedNeverCutsAndATerminalTakesColumnsThenItsWidth) {
  EXPECT_EQ(ChooseTableWidth(/*stdout_is_terminal=*/false, "80", 100), 0u);
  EXPECT_EQ(ChooseTableWidth(true, "80", 100), 80u);
  EXPECT_EQ(ChooseTableWidth(true, nullptr, 100), 100u);
  EXPECT_EQ(ChooseTableWidth(true, "wide", 0), kDefaultTableWidth);
  EXPECT_EQ(ChooseTableWidth(true, "0", 0), kDefaultTableWidth);
}

TEST(TableWidthTest, AWideTableIsCutOnlyToTheWidthGiven) {
  TextTable table(Columns({Words({"ID"}), Figures({"DETAIL_MS"}, 1)}));
  table.AddRow({std::string(30, 'x'), "1.000"});
  SetTableWidth(ChooseTableWidth(true, "35", 0));
  EXPECT_EQ(table.Render(), "ID\n" + std::string(30, '-') + "\n" + std::string(30, 'x') +
                                "\n(to fit 35 columns, not shown: DETAIL_MS; --wide shows every "
                                "column)\n");
  SetTableWidth(ChooseTableWidth(true, "20", 0));  // ID alone is wider: the note says so
  EXPECT_EQ(table.Render(), "ID\n" + std::string(30, '-') + "\n" + std::string(30, 'x') +
                                "\n(narrowing toward 20 columns, not shown: DETAIL_MS; --wide "
                                "shows every column)\n");
  SetTableWidth(ChooseTableWidth(false, "35", 0));
  EXPECT_EQ(table.Render(), "ID                              DETAIL_MS\n" + std::string(41, '-') +
                                "\n" + std::string(30, 'x') + "      1.000\n");
  SetTableWidth(kDefaultTableWidth);
}

TEST(TimeFormatTest, TimesAreRfc3339AndDurationsMillisecondsOrSeconds) {
  EXPECT_EQ(FormatUtc(1796581946123), "2026-12-06T18:32:26Z");
  EXPECT_EQ(FormatUtc(0), "-");
  EXPECT_EQ(FormatDuration(0.294), "294 ms");
  EXPECT_EQ(FormatDuration(54.74), "54.7 s");
  EXPECT_EQ(FormatDuration(63.2), "63.2 s");
  EXPECT_EQ(FormatSeconds(63.24), "63.2");
}

TEST(QuietProgressTest, QuietPrintsNoProgress) {
  v1::Job job;
  job.set_id("job-000001");
  job.set_state(v1::RUNNING);
  job.mutable_progress()->set_phase("warmup");
  job.mutable_progress()->set_op_id("fc1");
  job.mutable_progress()->set_op_count(1);
  std::ostringstream err;
  SetQuietProgress(true);
  ProgressPrinter quiet(err, /*is_tty=*/false, [] { return int64_t{0}; });
  quiet.Update(job);
  ProgressStream(err) << "check: GEMM on 2 GPU(s)\n";
  SetQuietProgress(false);
  EXPECT_EQ(err.str(), "");
  ProgressPrinter loud(err, /*is_tty=*/false, [] { return int64_t{0}; });
  loud.Update(job);
  EXPECT_EQ(err.str(), "job job-000001 RUNNING\njob job-000001 [1/1] fc1 warmup\n");
}

TEST(ProgressOffATerminalTest, EachKindOfPhasePrintsOncePerOp) {
  std::ostringstream err;
  ProgressPrinter progress(err, /*is_tty=*/false, [] { return int64_t{0}; });
  v1::Job job;
  job.set_id("job-000002");
  job.set_state(v1::RUNNING);
  job.mutable_progress()->set_op_id("fc1");
  job.mutable_progress()->set_op_count(2);
  for (const char* phase : {"autotune round 1/2, candidate 1/3: serial/nccl",
                            "autotune round 1/2, candidate 2/3: ring/p2p", "autotune round 2/2",
                            "timed 1/4", "gemm_alone 2/4", "timed 2/4", "timed 4/4", "verify"}) {
    job.mutable_progress()->set_phase(phase);
    progress.Update(job);
  }
  job.mutable_progress()->set_op_index(1);
  job.mutable_progress()->set_op_id("fc2");
  job.mutable_progress()->set_phase("timed 1/4");
  progress.Update(job);
  EXPECT_EQ(err.str(),
            "job job-000002 RUNNING\n"
            "job job-000002 [1/2] fc1 autotune round 1/2 (3 candidates)\n"
            "job job-000002 [1/2] fc1 timed 1/4\n"
            "job job-000002 [1/2] fc1 gemm_alone 2/4\n"
            "job job-000002 [1/2] fc1 verify\n"
            "job job-000002 [2/2] fc2 timed 1/4\n");
}

}  // namespace
}  // namespace overlap::client
