#include "client/format/report.h"

#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "client/format/table.h"
#include "client/jobs/progress_printer.h"
#include "common/graph.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace overlap::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

void SetTiming(v1::TimingStats* stats, double median) {
  stats->set_median_ms(median);
  stats->set_min_ms(median * 0.9);
  stats->set_max_ms(median * 1.1);
  stats->set_samples(20);
}

v1::OpResult MakeOp(const std::string& id, const std::string& type, int64_t m, int64_t k, int64_t n,
                    const std::string& mode, int chunks, double step, double gemm, double comm) {
  v1::OpResult op;
  op.set_id(id);
  op.set_type(type);
  op.set_mode(mode);
  op.set_requested_mode(mode);
  op.set_transport("nccl");
  op.set_chunks(chunks);
  op.set_m(m);
  op.set_k(k);
  op.set_n(n);
  op.set_tp(2);
  op.set_dtype("bf16");
  SetTiming(op.mutable_step(), step);
  SetTiming(op.mutable_gemm_alone(), gemm);
  SetTiming(op.mutable_comm_alone(), comm);
  op.set_exposed_comm_ms(std::max(0.0, step - gemm));
  op.set_hidden_fraction(1 - std::max(0.0, step - gemm) / comm);
  op.set_host_enqueue_ms(step / 25);
  return op;
}

v1::Job MakeJob() {
  v1::Job job;
  job.set_id("42");
  job.set_name("llama70b-mlp");
  job.set_state(v1::SUCCEEDED);
  v1::JobResult* result = job.mutable_result();
  result->set_backend("cuda");
  result->set_launch_gate(true);
  v1::OpResult fc1 = MakeOp("fc1", "ag_gemm", 8192, 8192, 28672, "chunked", 4, 5.25, 4.75, 1.5);
  fc1.set_tflops(715.81);
  fc1.set_busbw_gbps(231.4);
  fc1.set_verified(true);
  fc1.set_max_rel_error(3.1e-3);
  fc1.set_tolerance(2e-2);
  fc1.set_requested_mode("auto");
  fc1.set_transport("p2p");
  fc1.set_schedule("chunked/4/p2p");
  fc1.set_auto_reason("comm 1.500 ms < gemm 4.750 ms");
  v1::OpResult fc2 = MakeOp("fc2", "gemm_rs", 8192, 28672, 8192, "serial", 1, 6.5, 4.75, 1.75);
  fc2.set_tflops(9.8765);
  fc2.set_busbw_gbps(0.5);
  fc2.set_verified(true);
  fc2.set_max_rel_error(0.2);
  fc2.set_tolerance(2e-2);
  v1::OpResult out = MakeOp("out", "gemm_ar", 64, 128, 256, "bulk", 0, 0.125, 0.1, 0.05);
  out.set_verified(false);
  *result->add_ops() = fc1;
  *result->add_ops() = fc2;
  *result->add_ops() = out;
  result->set_total_step_ms(5.25 + 6.5 + 0.125);
  result->set_total_exposed_comm_ms(0.5 + 1.75 + 0.025);
  return job;
}

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

// --wide for one test: every column, as the exact tables below list them.
struct WideTables {
  WideTables() { SetTableWidth(0); }
  ~WideTables() { SetTableWidth(kDefaultTableWidth); }
};

TEST(ReportTest, ExactTable) {
  const WideTables wide;
  const std::string report = FormatReport(MakeJob());
  const std::vector<std::string> expected = {
      "job 42  name: llama70b-mlp  backend: cuda  tp: 2  dtype: bf16",
      "OP     TYPE     SHAPE            MODE     CHUNKS  TRANSPORT  STEP_MS  HOST_MS"
      "  GEMM_ALONE_MS  COMM_ALONE_MS  EXPOSED_MS  HIDDEN_%  TFLOPS  BUSBW_GBPS  MAX_REL_ERR"
      "  VERIFY",
      std::string(170, '-'),
      "fc1    ag_gemm  8192x8192x28672  chunked       4  p2p          5.250    0.210"
      "          4.750          1.500       0.500      66.7   715.8       231.4      3.1e-03  ok",
      "fc2    gemm_rs  8192x28672x8192  serial        1  nccl         6.500    0.260"
      "          4.750          1.750       1.750         -   9.877       0.500      2.0e-01"
      "  failed",
      "out    gemm_ar  64x128x256       bulk          -  nccl         0.125    0.005"
      "          0.100          0.050       0.025      50.0   0.000       0.000            -  off",
      std::string(170, '-'),
      // The total's TFLOP/s: every GEMM's 2mnk over the sum of the steps.
      "total                                                         11.875"
      "                                              2.275             648.1",
      "fc2: verify failed: max relative error 2.0e-01 against the float64 reference, above the "
      "tolerance 2.0e-02",
      "fc1: auto chose chunked/4/p2p: comm 1.500 ms < gemm 4.750 ms",
  };
  EXPECT_EQ(Lines(report), expected) << report;
}

// A GEMM alone moves nothing and a collective alone computes nothing: their
// rows dash what does not apply, and neither has an auto choice to explain.
TEST(ReportTest, OpsAloneDashWhatDoesNotApply) {
  const WideTables wide;
  v1::Job job = MakeJob();
  v1::OpResult wgrad = MakeOp("wgrad", "gemm", 8192, 8192, 28672, "serial", 1, 5.0, 5.0, 0);
  wgrad.set_requested_mode("auto");
  wgrad.set_schedule("serial");
  wgrad.set_transport("none");
  wgrad.set_tflops(770.0);
  wgrad.set_hidden_fraction(1.0);
  v1::OpResult grads = MakeOp("grads", "all_reduce", 8192, 0, 8192, "serial", 1, 0.5, 0, 0.5);
  grads.set_busbw_gbps(268.4);
  grads.set_hidden_fraction(0);
  *job.mutable_result()->add_ops() = wgrad;
  *job.mutable_result()->add_ops() = grads;
  const std::vector<std::string> lines = Lines(FormatReport(job));
  auto row = [&](const std::string& id) {
    for (const std::string& line : lines) {
      if (line.rfind(id + " ", 0) == 0)
        return std::vector<std::string>(absl::StrSplit(line, ' ', absl::SkipWhitespace()));
    }
    return std::vector<std::string>{};
  };
  EXPECT_EQ(row("wgrad"), (std::vector<std::string>{"wgrad", "gemm", "8192x8192x28672", "serial",
                                                    "1", "-", "5.000", "0.200", "5.000", "-", "-",
                                                    "-", "770.0", "-", "-", "off"}));
  EXPECT_EQ(row("grads"), (std::vector<std::string>{"grads", "all_reduce", "8192x-x8192", "serial",
                                                    "1", "nccl", "0.500", "0.020", "-", "0.500",
                                                    "0.500", "-", "-", "268.4", "-", "off"}));
  for (const std::string& line : lines) {
    EXPECT_EQ(line.rfind("wgrad: auto chose", 0), std::string::npos) << line;
  }
  // An all_reduce that pinned an algorithm names it beside the transport.
  job.mutable_result()->mutable_ops(job.result().ops_size() - 1)->set_algorithm("tree");
  EXPECT_THAT(FormatReport(job), ::testing::ContainsRegex("grads +all_reduce .* nccl/tree +0.500"));
}

// Ops for which auto had one schedule (one GPU) share one line instead of a
// line each.
TEST(ReportTest, OpsWithOneScheduleShareOneLine) {
  v1::Job job = MakeJob();
  for (v1::OpResult& op : *job.mutable_result()->mutable_ops()) {
    op.set_tp(1);
    op.set_requested_mode("auto");
    op.set_auto_reason(overlap::kOnlyOneSchedule);
  }
  const std::vector<std::string> lines = Lines(FormatReport(job));
  EXPECT_THAT(lines, ::testing::Contains(
                         "auto: fc1, fc2, out have one schedule to run (one GPU: nothing to "
                         "overlap)"));
  for (const std::string& line : lines) {
    EXPECT_EQ(line.find("auto chose"), std::string::npos) << line;
  }
  job.mutable_result()->mutable_ops()->DeleteSubrange(1, 2);
  job.mutable_result()->mutable_ops(0)->set_tp(2);
  EXPECT_THAT(Lines(FormatReport(job)), ::testing::Contains("auto: fc1 has one schedule to run"));
}

TEST(ReportTest, ReplayedScheduleIsMarked) {
  v1::Job job = MakeJob();
  job.mutable_result()->mutable_ops(0)->set_graph_replay(true);
  const std::vector<std::string> lines = Lines(FormatReport(job));
  EXPECT_EQ(lines.back(), "fc1: auto chose chunked/4/p2p+graph: comm 1.500 ms < gemm 4.750 ms");
}

TEST(ReportTest, ResultWithoutTheScheduleNameShowsModeAndTransport) {
  v1::Job job = MakeJob();  // as a daemon before OpResult.schedule stored it
  job.mutable_result()->mutable_ops(0)->clear_schedule();
  EXPECT_EQ(Lines(FormatReport(job)).back(),
            "fc1: auto chose chunked/p2p: comm 1.500 ms < gemm 4.750 ms");
}

TEST(ReportTest, UngatedTimingIsSaid) {
  v1::Job job = MakeJob();
  EXPECT_EQ(FormatReport(job).find("timing: ungated"), std::string::npos);
  job.mutable_result()->set_launch_gate(false);  // or stored by a daemon before the gates
  EXPECT_EQ(Lines(FormatReport(job)).back(),
            "timing: ungated (launch_gate off, or a daemon before launch gates): step times "
            "include the host's enqueue latency");
}

TEST(ReportTest, CandidatesShowByHowMuchEachScheduleLost) {
  v1::OpResult op;
  EXPECT_EQ(FormatCandidates(op), "");
  const std::pair<const char*, double> measured[] = {{"ring/p2p", 0.365},
                                                     {"ring/2/p2p", 0.371},
                                                     {"chunked/4/p2p", 0.380},
                                                     {"bulk/p2p", 0.41},
                                                     {"serial/nccl", 0.499}};
  for (const auto& [schedule, ms] : measured) {
    v1::CandidateTiming* c = op.add_candidates();
    c->set_schedule(schedule);
    c->set_best_ms(ms);
  }
  EXPECT_EQ(FormatCandidates(op),
            "ring/p2p 0.365, ring/2/p2p 0.371 (+1.6%), chunked/4/p2p 0.380 (+4.1%), bulk/p2p "
            "0.410 (+12.3%), serial/nccl 0.499 (+36.7%)");
  // Cut to the fastest two, serial over NCCL still shown.
  EXPECT_EQ(FormatCandidates(op, 2),
            "ring/p2p 0.365, ring/2/p2p 0.371 (+1.6%), ..., serial/nccl 0.499 (+36.7%)");
  v1::Job job = MakeJob();
  *job.mutable_result()->mutable_ops(0)->mutable_candidates() = op.candidates();
  EXPECT_THAT(Lines(FormatReport(job)),
              ::testing::Contains("fc1: measured " + FormatCandidates(op)));
}

TEST(ReportTest, IdleHeadStartIsSaid) {
  v1::Job job = MakeJob();
  job.mutable_result()->set_head_start("heat");
  EXPECT_EQ(FormatReport(job).find("head start"), std::string::npos);
  job.mutable_result()->set_head_start("idle");
  EXPECT_THAT(Lines(FormatReport(job)),
              ::testing::Contains("timing: idle head start: the GPUs waited while the host "
                                  "enqueued each iteration, and a rested GPU runs faster"));
}

TEST(ReportTest, LayerEdgesSayWhatAnEpilogueIs) {
  v1::Job job = MakeJob();
  job.mutable_result()->mutable_ops(1)->set_edge("fused swiglu");
  job.mutable_result()->mutable_ops(2)->set_edge("alias");
  EXPECT_THAT(Lines(FormatReport(job)),
              ::testing::Contains(
                  "layer edges (alias: read in place, no copy): fc2 fused swiglu, out alias"));
  job.mutable_result()->mutable_ops(1)->set_edge("epilogue gelu");
  EXPECT_THAT(
      Lines(FormatReport(job)),
      ::testing::Contains("layer edges (alias: read in place, no copy; epilogue: written "
                          "by the producer's GEMM, no pass): fc2 epilogue gelu, out alias"));
}

TEST(ReportTest, LayerLimitIsItsGemmsAloneAndActivationPasses) {
  v1::Job job = MakeJob();
  v1::JobResult& result = *job.mutable_result();
  result.mutable_layer_step()->set_median_ms(4.2);
  double gemms = 0;
  for (int i = 0; i < result.ops_size(); ++i) {
    result.mutable_ops(i)->mutable_gemm_alone()->set_median_ms(1.0 + i);
    gemms += 1.0 + i;
  }
  result.set_layer_activation_ms(0.2);
  const double limit = gemms + 0.2;
  EXPECT_THAT(FormatLayerStep(result),
              HasSubstr(absl::StrFormat("layer limit: %.3f ms (its GEMMs alone %.3f + activation "
                                        "passes 0.200); the step %+.1f%%\n",
                                        limit, gemms, 100 * (4.2 / limit - 1))));
  for (int i = 0; i < result.ops_size(); ++i) {
    result.mutable_ops(i)->mutable_gemm_alone()->set_median_ms(0);
  }
  EXPECT_THAT(FormatLayerStep(result), Not(HasSubstr("layer limit")));
}

TEST(ReportTest, LayerStepLineComparesTheStepWithTheOpsOneByOne) {
  v1::Job job = MakeJob();
  EXPECT_EQ(FormatLayerStep(job.result()), "") << "not measured";
  job.mutable_result()->mutable_layer_step()->set_median_ms(11.0);
  job.mutable_result()->add_layer_deferred("grads");
  job.mutable_result()->set_layer_exposed_comm_ms(1.4);
  EXPECT_THAT(Lines(FormatReport(job)),
              ::testing::Contains("layer: 11.000 ms as one step (beside the ops after them on a "
                                  "side stream: grads to the end), 11.875 ms op by op: -7.4%; "
                                  "699.7 TFLOP/s; exposed comm 1.400 ms (op by op 2.275)"));
  // The activation passes (SwiGLU) are named apart from the communication.
  job.mutable_result()->set_layer_activation_ms(0.9);
  EXPECT_THAT(FormatLayerStep(job.result()),
              HasSubstr("; exposed comm 1.400 ms (op by op 2.275), activation passes 0.900 ms "
                        "apart\n"));
  job.mutable_result()->set_layer_activation_ms(0);
  // A result stored before layer_joined_before existed joined everything at the end.
  job.mutable_result()->add_layer_deferred("x_gather");
  job.mutable_result()->add_layer_joined_before("");
  job.mutable_result()->add_layer_joined_before("wgrad1");
  job.mutable_result()->add_layer_deferred("bucket(g1+g2)");
  EXPECT_THAT(FormatLayerStep(job.result()),
              HasSubstr("(beside the ops after them on a side stream: grads to the end, x_gather "
                        "until wgrad1, bucket(g1+g2) to the end)"));
  // The order the step ran the ops in is said when it is not the table's.
  for (const char* id : {"fc1", "fc2", "out"}) job.mutable_result()->add_layer_order(id);
  EXPECT_THAT(FormatLayerStep(job.result()), Not(HasSubstr("layer order")));
  job.mutable_result()->clear_layer_order();
  for (const char* id : {"fc1", "out", "fc2"}) job.mutable_result()->add_layer_order(id);
  EXPECT_THAT(Lines(FormatLayerStep(job.result())),
              ::testing::Contains("layer order (critical-path collectives first): fc1, out, fc2"));
  job.mutable_result()->clear_layer_step();
  job.mutable_result()->clear_layer_deferred();
  job.mutable_result()->set_layer_note("no layer step: the buffers of every op do not fit");
  EXPECT_EQ(FormatLayerStep(job.result()),
            "layer: no layer step: the buffers of every op do not fit\n");
}

TEST(ReportTest, SlowRankNoteNamesTheSlowestRankPastTheThreshold) {
  EXPECT_EQ(SlowRankNote({}, {}), "");
  EXPECT_EQ(SlowRankNote({0.345}, {0}), "") << "one rank has no peers to compare with";
  EXPECT_EQ(SlowRankNote({0.345, 0.360}, {0, 1}), "") << "4.3% is within the threshold";
  EXPECT_EQ(SlowRankNote({0.0, 0.360}, {0, 1}), "") << "no timing, no verdict";
  EXPECT_EQ(SlowRankNote({0.350, 0.345, 0.380, 0.372}, {4, 5, 6, 7}),
            "rank 2 (device 6): GEMM alone 0.380 ms, 10.1% above rank 1 (device 5)'s 0.345 ms");
  EXPECT_EQ(SlowRankNote({0.372, 0.345}, {}),
            "rank 0: GEMM alone 0.372 ms, 7.8% above rank 1's 0.345 ms");
}

TEST(ReportTest, ASlowRankIsCalledOut) {
  v1::Job job = MakeJob();
  job.add_devices(2);
  job.add_devices(3);
  EXPECT_THAT(FormatReport(job), Not(HasSubstr("slow GPU?")));
  for (double ms : {4.75, 5.2}) job.mutable_result()->mutable_ops(1)->add_gemm_alone_rank_ms(ms);
  EXPECT_THAT(Lines(FormatReport(job)),
              ::testing::Contains(
                  "fc2: slow GPU? rank 1 (device 3): GEMM alone 5.200 ms, 9.5% above rank 0 "
                  "(device 2)'s 4.750 ms (`overlapctl node` shows its clocks, power and "
                  "temperature)"));
  job.mutable_result()->set_ranks_per_gpu(2);
  EXPECT_THAT(FormatReport(job), Not(HasSubstr("slow GPU?")))
      << "ranks of one GPU run their GEMMs alone one after the other";
  job.mutable_result()->set_ranks_per_gpu(1);
  job.mutable_result()->set_backend("host");
  EXPECT_THAT(FormatReport(job), Not(HasSubstr("slow GPU?")))
      << "host ranks are threads on shared cores: their spread is no GPU's";
}

TEST(ReportTest, RanksSharingAGpuAreSaidToTimeNothing) {
  v1::Job job = MakeJob();
  EXPECT_THAT(FormatReport(job), Not(HasSubstr("ranks share GPUs")));
  job.mutable_result()->set_ranks_per_gpu(2);
  const std::vector<std::string> lines = Lines(FormatReport(job));
  ASSERT_GE(lines.size(), 2u);
  EXPECT_THAT(lines[1], ::testing::StartsWith("ranks share GPUs (ranks_per_gpu 2): every output "
                                              "is checked as usual"));
  EXPECT_EQ(SharedGpuNote(1), "");
  EXPECT_EQ(SharedGpuNote(0), "");
}

TEST(ReportTest, EveryLineOfTheTableHasTheSameColumnStarts) {
  const std::vector<std::string> lines = Lines(FormatReport(MakeJob()));
  const size_t verify_col = lines[1].find("VERIFY");
  ASSERT_NE(verify_col, std::string::npos);
  EXPECT_EQ(lines[3].find("ok", verify_col), verify_col);
  EXPECT_EQ(lines[4].find("failed"), verify_col);
  EXPECT_EQ(lines[5].find("off"), verify_col);
  // Right-aligned numbers: the total's figures end where their titles end.
  const size_t step_end = lines[1].find("STEP_MS") + 7;
  EXPECT_EQ(lines[7].find("11.875") + 6, step_end);
  const size_t exposed_end = lines[1].find("EXPOSED_MS") + 10;
  EXPECT_EQ(lines[7].find("2.275") + 5, exposed_end);
}

TEST(ReportTest, OneRankHasNoHiddenShare) {
  v1::Job job = MakeJob();
  v1::OpResult* fc1 = job.mutable_result()->mutable_ops(0);
  fc1->set_tp(1);
  SetTiming(fc1->mutable_comm_alone(), 0);
  fc1->set_hidden_fraction(1);
  const std::vector<std::string> lines = Lines(FormatReport(job));
  const size_t hidden_end = lines[1].find("HIDDEN_%") + 8;
  EXPECT_EQ(lines[3].substr(hidden_end - 5, 5), "    -") << lines[3];
  EXPECT_EQ(Lines(FormatReport(MakeJob()))[3].substr(hidden_end - 5, 5), " 66.7");
}

TEST(ReportTest, ASerialScheduleHidesNothingByDesign) {
  v1::Job job = MakeJob();
  v1::OpResult* fc1 = job.mutable_result()->mutable_ops(0);
  fc1->set_mode("serial");
  fc1->set_hidden_fraction(1);  // its step came in under GEMM alone, by noise
  const std::vector<std::string> lines = Lines(FormatReport(job));
  const size_t hidden_end = lines[1].find("HIDDEN_%") + 8;
  EXPECT_EQ(lines[3].substr(hidden_end - 5, 5), "    -") << lines[3];
}

TEST(ReportTest, HiddenIsFlooredAtZeroAndCappedAt100) {
  v1::Job job = MakeJob();
  job.mutable_result()->mutable_ops(1)->set_hidden_fraction(-9.373);  // slower than serial
  job.mutable_result()->mutable_ops(2)->set_hidden_fraction(1.2);
  const std::vector<std::string> lines = Lines(FormatReport(job));
  const std::vector<std::string> base = Lines(FormatReport(MakeJob()));
  EXPECT_EQ(lines[4], base[4]) << "fc2 prints 0.0 as with a fraction of exactly 0";
  const size_t hidden_end = lines[1].find("HIDDEN_%") + 8;
  EXPECT_EQ(lines[5].substr(hidden_end - 5, 5), "100.0");
}

TEST(ReportTest, JobWithoutResultsShowsStateAndError) {
  v1::Job job;
  job.set_id("7");
  job.set_name("mlp");
  job.set_state(v1::FAILED);
  job.set_error("daemon restarted");
  EXPECT_EQ(FormatReport(job),
            "job 7  name: mlp  backend: -  tp: -  dtype: -\n"
            "state: FAILED  error: daemon restarted\n");
}

TEST(ReportTest, States) {
  EXPECT_EQ(JobStateName(v1::RUNNING), "RUNNING");
  EXPECT_EQ(JobStateName(v1::JOB_STATE_UNSPECIFIED), "UNSPECIFIED");
  EXPECT_TRUE(IsFinalState(v1::SUCCEEDED));
  EXPECT_TRUE(IsFinalState(v1::ABORTED));
  EXPECT_FALSE(IsFinalState(v1::RUNNING));
  EXPECT_FALSE(IsFinalState(v1::QUEUED));
  EXPECT_FALSE(IsUnsuccessfulState(v1::SUCCEEDED));
  EXPECT_TRUE(IsUnsuccessfulState(v1::CANCELLED));
  EXPECT_TRUE(IsUnsuccessfulState(v1::FAILED));
}

TEST(ReportTest, Helpers) {
  EXPECT_EQ(FormatMs(1.23456), "1.235");
  EXPECT_EQ(FormatBytes(17), "17 B");
  EXPECT_EQ(FormatBytes(int64_t{2} << 30), "2.00 GiB");
  EXPECT_EQ(FormatBytes(int64_t{3} << 19), "1.50 MiB");
  EXPECT_EQ(FormatUtc(0), "-");
  EXPECT_EQ(FormatUtc(1764505696000), "2025-11-30T12:28:16Z");
  EXPECT_EQ(FormatDuration(0.25), "250 ms");
  EXPECT_EQ(FormatDuration(12.34), "12.3 s");
  EXPECT_EQ(FormatDuration(245), "245.0 s");  // one style: no "4m05s"
  EXPECT_EQ(FormatDuration(7380), "7380.0 s");
}

TEST(ReportTest, JobList) {
  const WideTables wide;
  google::protobuf::RepeatedPtrField<v1::Job> jobs;
  v1::Job* done = jobs.Add();
  *done = MakeJob();
  done->add_devices(0);
  done->add_devices(1);
  done->set_submit_time_ms(1764505696000);
  done->set_start_time_ms(1764505697000);
  done->set_end_time_ms(1764505699500);
  v1::Job* queued = jobs.Add();
  queued->set_id("43");
  queued->set_state(v1::QUEUED);
  queued->set_priority(5);
  queued->set_submit_time_ms(1764505700000);
  v1::Job* running = jobs.Add();
  running->set_id("44");
  running->set_name("long");
  running->set_state(v1::RUNNING);
  running->set_submit_time_ms(1764505700000);
  running->set_start_time_ms(1764505700000);
  v1::Job* failed = jobs.Add();
  failed->set_id("45");
  failed->set_state(v1::FAILED);
  failed->set_submit_time_ms(1764505700000);
  failed->set_error("daemon restarted");
  v1::Job* damaged = jobs.Add();
  damaged->set_id("46");
  damaged->set_state(v1::FAILED);
  damaged->set_submit_time_ms(1764505700000);
  damaged->set_error(
      "DATA_LOSS: job 46: its stored result does not parse (the state directory is damaged)");
  jobs.Mutable(0)->set_owner("uid:1000");
  jobs.Mutable(0)->set_owner_name("alice");
  jobs.Mutable(1)->set_owner("anonymous");
  jobs.Mutable(1)->set_owner_name("anonymous");
  const std::vector<std::string> expected = {
      "ID  STATE      OWNER      NAME          PRIO  DEVICES  OPS  SUBMITTED             "
      "DURATION_S  STEP_MS  REASON",
      std::string(119, '-'),
      "42  SUCCEEDED  alice      llama70b-mlp     0  0,1        3  2025-11-30T12:28:16Z         "
      "2.5   11.875  -",
      "43  QUEUED     anonymous  -                5  -          -  2025-11-30T12:28:20Z           "
      "-        -  -",
      "44  RUNNING    -          long             0  -          -  2025-11-30T12:28:20Z        "
      "65.0        -  -",
      "45  FAILED     -          -                0  -          -  2025-11-30T12:28:20Z           "
      "-        -  daemon-restarted",
      "46  FAILED     -          -                0  -          -  2025-11-30T12:28:20Z           "
      "-        -  data-loss",
  };
  EXPECT_EQ(Lines(FormatJobList(jobs, 1764505765000)), expected);
  // -o wide: each reason's whole text on a line under the table.
  SetWideOutput(true);
  std::vector<std::string> with_notes = expected;
  with_notes.push_back("reason of 45: daemon restarted");
  with_notes.push_back(
      "reason of 46: DATA_LOSS: job 46: its stored result does not parse (the state directory is "
      "damaged)");
  EXPECT_EQ(Lines(FormatJobList(jobs, 1764505765000)), with_notes);
  SetWideOutput(false);
}

// A job spanning daemons is one row under its global id, with its nodes: on
// its coordinator the node's own part folds into the coordinator's job; on
// another node its part is the row. Nothing is cut where tables are not.
TEST(ReportTest, JobListShowsAJobSpanningDaemonsOnceUnderItsGlobalId) {
  const WideTables wide;
  const std::string global = "node0.example.com:7070/job-000001";
  google::protobuf::RepeatedPtrField<v1::Job> jobs;
  v1::Job* part = jobs.Add();  // newest first: the coordinator's own part
  part->set_id("job-000002");
  part->set_name("layer (part 0 of " + global + ")");
  part->set_state(v1::RUNNING);
  part->add_devices(0);
  part->add_devices(1);
  part->add_nodes("node0.example.com:7070");
  part->add_nodes("node1.example.com:7070");
  part->set_coordinator("node0.example.com:7070");
  part->set_global_job_id("job-000001");
  part->set_global_id(global);
  v1::Job* coordinator = jobs.Add();
  coordinator->set_id("job-000001");
  coordinator->set_name("layer");
  coordinator->set_state(v1::RUNNING);
  *coordinator->mutable_nodes() = part->nodes();
  coordinator->set_global_id(global);
  v1::Job* local = jobs.Add();
  local->set_id("job-000000");
  local->set_state(v1::SUCCEEDED);
  local->add_devices(0);

  std::vector<std::string> rows = Lines(FormatJobList(jobs, 0));
  ASSERT_EQ(rows.size(), 4u);  // title, rule, the spanning job, the local one
  EXPECT_EQ(rows[2].substr(0, rows[2].find(' ')), global);
  EXPECT_NE(rows[2].find("nodes=node0.example.com:7070,node1.example.com:7070"), std::string::npos);
  EXPECT_EQ(rows[3].substr(0, rows[3].find(' ')), "job-000000");

  // On the other node its part is the row, with its devices and place.
  google::protobuf::RepeatedPtrField<v1::Job> on_peer;
  v1::Job* peer_part = on_peer.Add();
  *peer_part = *part;
  peer_part->set_id("job-000007");
  peer_part->set_node_index(1);
  peer_part->set_name("a name much longer than forty characters (part 1 of " + global + ")");
  rows = Lines(FormatJobList(on_peer, 0));
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[2].substr(0, rows[2].find(' ')), global);
  EXPECT_NE(rows[2].find("0,1@node1;nodes=node0.example.com:7070,node1.example.com:7070"),
            std::string::npos);
  EXPECT_NE(rows[2].find(WordCell(peer_part->name())), std::string::npos) << rows[2];
}

TEST(ReportTest, JobDetailOfRunningJobShowsProgress) {
  v1::Job job;
  job.set_id("44");
  job.set_name("long");
  job.set_state(v1::RUNNING);
  job.add_devices(0);
  job.add_devices(1);
  job.set_submit_time_ms(1764505700000);
  job.set_start_time_ms(1764505700000);
  v1::Progress* progress = job.mutable_progress();
  progress->set_op_index(1);
  progress->set_op_count(3);
  progress->set_op_id("fc2");
  progress->set_phase("timed");
  progress->set_iteration(7);
  progress->set_iterations(20);
  const std::string detail = FormatJobDetail(job, 1764505712300);
  EXPECT_THAT(detail, HasSubstr("state:     RUNNING\n"));
  EXPECT_THAT(detail, HasSubstr("devices:   0,1\n"));
  EXPECT_THAT(detail, HasSubstr("duration:  12.3 s\n"));
  EXPECT_THAT(detail, HasSubstr("progress:  [2/3] fc2 timed 7/20\n"));
  EXPECT_THAT(detail, HasSubstr("ended:     -\n"));
  EXPECT_THAT(detail, Not(HasSubstr("STEP_MS")));
}

TEST(ReportTest, JobDetailOfFinishedJobIncludesReport) {
  const std::string detail = FormatJobDetail(MakeJob(), 0);
  EXPECT_THAT(detail, HasSubstr("state:     SUCCEEDED\n"));
  EXPECT_THAT(detail,
              HasSubstr("\njob 42  name: llama70b-mlp  backend: cuda  tp: 2  dtype: bf16\n"));
  EXPECT_THAT(detail, HasSubstr("66.7  ok\n"));
  EXPECT_THAT(detail, Not(HasSubstr("ran on:"))) << "a result from before versions were kept";

  v1::Job job = MakeJob();
  v1::JobResult* r = job.mutable_result();
  r->set_overlapd_version("0.1.0 (abc1234)");
  r->set_gpu("NVIDIA H200");
  r->set_cuda_runtime("13.0");
  r->set_cuda_driver("13.0");
  r->set_nccl("2.28.3");
  r->set_cublas("13.1.0");
  EXPECT_THAT(FormatJobDetail(job, 0),
              HasSubstr("ran on:    NVIDIA H200; overlapd 0.1.0 (abc1234); cuda 13.0, driver 13.0; "
                        "nccl 2.28.3; cublas 13.1.0\n"));
}

TEST(ReportTest, NodeInfo) {
  v1::GetNodeInfoResponse node;
  node.set_backend("host");
  node.set_healthy(true);
  node.set_overlapd_version("0.1.0");
  node.set_git_commit("abc1234");
  for (int i = 0; i < 2; ++i) {
    v1::Device* device = node.add_devices();
    device->set_index(i);
    device->set_name("host" + std::to_string(i));
    device->set_memory_bytes(int64_t{2} << 30);
    device->set_memory_used_bytes(i == 0 ? (int64_t{1} << 20) : 0);
    if (i == 0) device->set_total_memory_bytes(int64_t{2} << 30);
  }
  (*node.mutable_library_env())["NCCL_NVLS_ENABLE"] = "0";
  (*node.mutable_library_env())["CUDA_VISIBLE_DEVICES"] = "0,1";
  const std::string text = FormatNodeInfo(node);
  EXPECT_THAT(text, HasSubstr("env:      CUDA_VISIBLE_DEVICES=0,1 NCCL_NVLS_ENABLE=0\n"));
  EXPECT_THAT(text, HasSubstr("backend:  host\n"));
  EXPECT_THAT(text, HasSubstr("healthy:  yes\n"));
  EXPECT_THAT(text, HasSubstr("version:  0.1.0 (abc1234)\n"));
  EXPECT_THAT(text, HasSubstr("devices:  2\n"));
  EXPECT_THAT(text, HasSubstr("INDEX  NAME    MEMORY     POOL  POOL_USED  PCI\n"));
  EXPECT_THAT(text, HasSubstr("    0  host0  2.00GiB  2.00GiB    1.00MiB  -\n"));
  EXPECT_THAT(text, HasSubstr("    1  host1        -  2.00GiB         0B  -\n"));
  EXPECT_THAT(text, Not(HasSubstr("cuda:")));
  EXPECT_THAT(text, Not(HasSubstr("SM_MHZ")));  // no telemetry: no telemetry columns
  EXPECT_THAT(text, Not(HasSubstr("ranks:")));
  node.set_ranks_per_gpu(2);
  EXPECT_THAT(FormatNodeInfo(node),
              HasSubstr("ranks:    2 per GPU (config ranks_per_gpu): for checking schedules, not "
                        "timing them\n"));
}

TEST(ReportTest, NodeInfoShowsTelemetryWhenTheBackendHasIt) {
  v1::GetNodeInfoResponse node;
  node.set_backend("cuda");
  v1::Device* device = node.add_devices();
  device->set_index(0);
  device->set_name("NVIDIA H200");
  device->set_memory_bytes(int64_t{16} << 30);
  device->set_pci_bus_id("0000:00:06.0");
  device->set_telemetry_valid(true);
  device->set_sm_clock_mhz(1980);
  device->set_mem_clock_mhz(3201);
  device->set_temperature_c(41);
  device->set_power_w(129.4);
  device->set_utilization_pct(87);
  device->set_max_sm_clock_mhz(1980);
  device->set_clock_limits_valid(true);
  device->add_clock_limits("power");
  std::string text = FormatNodeInfo(node);
  EXPECT_THAT(text, HasSubstr("SM_MHZ  MAX_MHZ  MEM_MHZ  TEMP_C  POWER_W  UTIL_%  CLOCK_LIMITS"));
  EXPECT_THAT(text, HasSubstr("0000:00:06.0    1980     1980     3201      41      129      87  "
                              "power\n"))
      << text;
  device->clear_clock_limits();
  device->set_max_sm_clock_mhz(0);
  text = FormatNodeInfo(node);
  EXPECT_THAT(text,
              HasSubstr("0000:00:06.0    1980        -     3201      41      129      87  -\n"))
      << text;
}

TEST(ReportTest, StatsListsEveryStateInOrder) {
  v1::GetStatsResponse stats;
  (*stats.mutable_jobs_by_state())["SUCCEEDED"] = 3;
  (*stats.mutable_jobs_by_state())["FAILED"] = 1;
  stats.set_jobs_submitted(5);
  stats.set_jobs_rejected(2);
  stats.set_uptime_s(65);
  v1::DeviceStats* device = stats.add_devices();
  device->set_device(0);
  device->set_jobs_run(4);
  device->set_busy_ms(1500);
  const std::string text = FormatStats(stats);
  EXPECT_THAT(text, HasSubstr("uptime:         65.0 s\n"));
  EXPECT_THAT(text, HasSubstr("jobs submitted: 5\n"));
  EXPECT_THAT(text, HasSubstr("jobs rejected:  2\n"));
  EXPECT_THAT(text, HasSubstr("jobs by state:  QUEUED 0, RUNNING 0, SUCCEEDED 3, FAILED 1, "
                              "CANCELLED 0, ABORTED 0\n"));
  EXPECT_THAT(text, HasSubstr("     0     4     1.5\n"));
}

// By default a table fits 120 columns: detail columns go, the highest rank
// first, and a line names them; essential ones stay even past the limit.
TEST(TextTableTest, FitsTheWidthByDroppingDetailColumns) {
  TextTable table({{"name"}, {"a", Align::kRight, 1}, {"b", Align::kRight, 2}, {"c"}});
  table.AddRow({std::string(110, 'x'), "1", "2", "note"});
  EXPECT_EQ(table.Render(), std::string("name") + std::string(106, ' ') + "  a  c\n" +
                                std::string(119, '-') + "\n" + std::string(110, 'x') +
                                "  1  note\n"
                                "(to fit 120 columns, not shown: b; --wide shows every column)\n");
  SetTableWidth(0);
  EXPECT_EQ(table.Render().find("not shown"), std::string::npos);
  SetTableWidth(kDefaultTableWidth);
  TextTable essential({{"name"}, {"c"}});
  essential.AddRow({std::string(130, 'x'), "y"});
  EXPECT_EQ(essential.Render().find("not shown"), std::string::npos) << "nothing to drop";
}

// Columns() builds the same columns as writing each one out: words left,
// figures right, each run with its detail rank.
TEST(TextTableTest, ColumnsInRunsAreTheColumnsWrittenOut) {
  const std::vector<TextTable::Column> columns =
      Columns({Words({"op", "mode"}), Figures({"ms"}), Figures({"host"}, 3), Words({"note"}, 1)});
  ASSERT_EQ(columns.size(), 5u);
  const std::vector<std::tuple<std::string, Align, int>> expected = {{"op", Align::kLeft, 0},
                                                                     {"mode", Align::kLeft, 0},
                                                                     {"ms", Align::kRight, 0},
                                                                     {"host", Align::kRight, 3},
                                                                     {"note", Align::kLeft, 1}};
  for (size_t i = 0; i < columns.size(); ++i) {
    EXPECT_EQ(std::make_tuple(columns[i].title, columns[i].align, columns[i].detail), expected[i])
        << i;
  }
}

// Cells pad by the columns a terminal shows, not their bytes.
TEST(TextTableTest, PadsUtf8ByDisplayWidth) {
  EXPECT_EQ(DisplayWidth("abc"), 3u);
  EXPECT_EQ(DisplayWidth("r\xc3\xa9sum\xc3\xa9"), 6u);      // résumé: 2-byte letters
  EXPECT_EQ(DisplayWidth("\xe6\xa8\xa1\xe5\x9e\x8b"), 4u);  // 模型: two wide characters
  EXPECT_EQ(DisplayWidth("e\xcc\x81"), 1u);                 // e + combining acute
  EXPECT_EQ(DisplayWidth("\xff\xfe"), 2u);                  // not UTF-8: a column a byte
  TextTable table({{"name"}, {"n", Align::kRight}});
  table.AddRow({"r\xc3\xa9sum\xc3\xa9", "1"});
  table.AddRow({"\xe6\xa8\xa1\xe5\x9e\x8b", "22"});
  EXPECT_EQ(table.Render(),
            "name     n\n"
            "----------\n"
            "r\xc3\xa9sum\xc3\xa9   1\n"
            "\xe6\xa8\xa1\xe5\x9e\x8b    22\n");
}

TEST(TextTableTest, AlignsAndTrims) {
  TextTable table({{"a"}, {"num", Align::kRight}, {"z"}});
  table.AddRow({"long-cell", "1"});
  table.AddRow({"x", "12345", "end"});
  EXPECT_EQ(table.Render(),
            "a            num  z\n"
            "---------------------\n"
            "long-cell      1\n"
            "x          12345  end\n");
}

v1::Job ProgressEvent(v1::JobState state, int op_index, const std::string& op_id,
                      const std::string& phase, int iteration, int iterations) {
  v1::Job job;
  job.set_id("9");
  job.set_state(state);
  if (!phase.empty()) {
    job.mutable_progress()->set_op_index(op_index);
    job.mutable_progress()->set_op_count(2);
    job.mutable_progress()->set_op_id(op_id);
    job.mutable_progress()->set_phase(phase);
    job.mutable_progress()->set_iteration(iteration);
    job.mutable_progress()->set_iterations(iterations);
  }
  return job;
}

void Feed(ProgressPrinter& printer) {
  printer.Update(ProgressEvent(v1::QUEUED, 0, "", "", 0, 0));
  printer.Update(ProgressEvent(v1::RUNNING, 0, "fc1", "setup", 0, 0));
  for (int i = 1; i <= 3; ++i) printer.Update(ProgressEvent(v1::RUNNING, 0, "fc1", "timed", i, 3));
  printer.Update(ProgressEvent(v1::RUNNING, 1, "fc2", "timed", 1, 3));
  printer.Update(ProgressEvent(v1::SUCCEEDED, 0, "", "", 0, 0));
  printer.Finish();
}

TEST(ProgressPrinterTest, OffTerminalOneLinePerChange) {
  std::ostringstream out;
  ProgressPrinter printer(out, /*is_tty=*/false);
  Feed(printer);
  EXPECT_EQ(out.str(),
            "job 9 QUEUED\n"
            "job 9 RUNNING\n"
            "job 9 [1/2] fc1 setup\n"
            "job 9 [1/2] fc1 timed (3 iterations)\n"
            "job 9 [2/2] fc2 timed (3 iterations)\n"
            "job 9 SUCCEEDED\n");
}

TEST(ProgressPrinterTest, EachOpIsReportedOnceAsItFinishes) {
  std::ostringstream out;
  ProgressPrinter printer(out, /*is_tty=*/false);
  v1::Job job = MakeJob();
  job.set_id("9");
  job.set_state(v1::RUNNING);
  job.mutable_result()->mutable_ops()->DeleteSubrange(1, 2);  // only fc1 done so far
  printer.Update(job);
  printer.Update(job);
  job = MakeJob();
  job.set_id("9");
  printer.Update(job);
  EXPECT_EQ(out.str(),
            "job 9 fc1 done: chunked/4/p2p, step 5.250 ms, hidden 66.7%\n"
            "job 9 RUNNING\n"
            "job 9 fc2 done: serial/nccl, step 6.500 ms, 9.877 TFLOP/s\n"
            "job 9 out done: bulk/nccl, step 0.125 ms, hidden 50.0%\n"
            "job 9 SUCCEEDED\n");

  // A GEMM alone has nothing hidden to report: its rate instead.
  std::ostringstream gemm_out;
  ProgressPrinter gemm_printer(gemm_out, /*is_tty=*/false);
  v1::OpResult wgrad = MakeOp("wgrad", "gemm", 64, 64, 64, "serial", 1, 0.5, 0.5, 0);
  wgrad.set_schedule("serial");
  wgrad.set_tflops(1.25);
  job.mutable_result()->clear_ops();
  *job.mutable_result()->add_ops() = wgrad;
  gemm_printer.Update(job);
  EXPECT_THAT(gemm_out.str(),
              ::testing::StartsWith("job 9 wgrad done: serial, step 0.500 ms, 1.250 TFLOP/s\n"));
}

// Autotune logs one line off a terminal, not one per round or candidate; each
// phase line says how long the job has run, and once an op finished, about how
// long is left.
TEST(ProgressPrinterTest, AutotuneRoundsElapsedAndTimeLeft) {
  std::ostringstream out;
  int64_t now = 1'000'000;
  ProgressPrinter printer(out, /*is_tty=*/false, [&now] { return now; });
  v1::Job job = ProgressEvent(v1::RUNNING, 0, "fc1", "setup", 0, 0);
  job.set_start_time_ms(1'000'000);
  printer.Update(job);
  for (int round = 1; round <= 2; ++round) {
    for (int k = 1; k <= 7; ++k) {
      now += 1000;
      job.mutable_progress()->set_phase(
          absl::StrFormat("autotune round %d/2, candidate %d/7: chunked/%d/nccl", round, k, k));
      job.mutable_progress()->set_iterations(5);
      printer.Update(job);
    }
  }
  now = 1'020'000;  // fc1 took 20 s
  *job.mutable_result()->add_ops() = MakeOp("fc1", "ag_gemm", 64, 64, 64, "serial", 1, 1, 1, 0);
  job.mutable_progress()->set_op_index(1);
  job.mutable_progress()->set_op_id("fc2");
  job.mutable_progress()->set_phase("timed");
  printer.Update(job);
  now = 1'026'000;
  job.mutable_progress()->set_phase("verify");
  printer.Update(job);
  now = 1'045'000;
  job.mutable_progress()->set_phase("timeline");
  printer.Update(job);
  const std::string text = out.str();
  EXPECT_THAT(text, HasSubstr("job 9 [1/2] fc1 setup; 0 ms elapsed\n"));
  EXPECT_THAT(text,
              HasSubstr("job 9 [1/2] fc1 autotune round 1/2 (7 candidates); 1.0 s elapsed\n"));
  EXPECT_THAT(text, Not(HasSubstr("round 2/2"))) << "one line per kind of phase";
  EXPECT_THAT(text, Not(HasSubstr("candidate 3/7")));
  EXPECT_THAT(
      text, HasSubstr("job 9 [2/2] fc2 timed (5 iterations); 20.0 s elapsed, about 20.0 s left\n"));
  EXPECT_THAT(
      text,
      HasSubstr("job 9 [2/2] fc2 verify (5 iterations); 26.0 s elapsed, about 14.0 s left\n"));
  EXPECT_THAT(text,
              HasSubstr("job 9 [2/2] fc2 timeline (5 iterations); 45.0 s elapsed, finishing\n"));
}

TEST(ProgressPrinterTest, TerminalRewritesCounterInPlace) {
  std::ostringstream out;
  ProgressPrinter printer(out, /*is_tty=*/true);
  Feed(printer);
  const std::string text = out.str();
  EXPECT_THAT(text, HasSubstr("\r\033[K  [1/2] fc1 timed 1/3\r\033[K  [1/2] fc1 timed 2/3"));
  EXPECT_THAT(text, HasSubstr("\r\033[K  [1/2] fc1 timed 3/3\r\033[Kjob 9 [2/2] fc2 timed"));
  // The counter is erased before the final state line and at the end.
  EXPECT_THAT(text, HasSubstr("\r\033[Kjob 9 SUCCEEDED\n"));
}

}  // namespace
}  // namespace overlap::client
