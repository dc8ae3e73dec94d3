// The one mapping between the job core's types and the API's messages
// (server/wire/): a report with every field set reaches every field of the
// messages and comes back whole; the reports of real host-engine runs (a
// layer step traced and verified, a tp x dp mesh, the dynamic dispatcher)
// and the jobs a daemon of the version before this mapping stored
// (tests/data/wire/) come back to the same bytes.
#include "server/wire/report_wire.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/graph_parser.h"
#include "google/protobuf/util/message_differencer.h"
#include "server/runner/job_runner.h"
#include "server/wire/job_wire.h"
#include "tests/host_engine_util.h"
#include "tests/wire/unset_fields.h"

namespace overlap::wire {
namespace {

using google::protobuf::Message;
using google::protobuf::util::MessageDifferencer;

Summary SummaryOf(double base) { return Summary{base, base - 0.5, base + 0.5, 7}; }

runner::Timeline TimelineOf(const std::string& op) {
  runner::Timeline timeline;
  timeline.step_ms = 1.5;
  timeline.enqueued_not_replayed = true;
  timeline.spans.push_back({op, 1, "comm", "collective", "all_reduce 1.0 MiB", 0.25, 1.25});
  return timeline;
}

// Energy figures with every field set (the note included).
runner::EnergyFigures EveryEnergyField(double base) {
  runner::EnergyFigures e;
  e.valid = true;
  e.step_joules = base;
  e.step_watts = 100 * base;
  e.window_s = 0.5;
  e.steps = 20;
  e.serial_valid = true;
  e.serial_joules = base + 0.25;
  e.serial_watts = 80 * base;
  e.serial_ms = 3.5;
  e.note = "overlap saves 30% of the time but draws 25% more power";
  e.step_error = 0.02;
  e.serial_error = 0.4;
  e.counter_period_ms = 100;
  return e;
}

runner::OpReport EveryOpField() {
  runner::OpReport op;
  op.id = "fc1";
  op.type = "ag_gemm";
  op.mode = "ring";
  op.requested_mode = "auto";
  op.schedule = "ring/2/p2p";
  op.transport = "p2p";
  op.algorithm = "ring";
  op.dtype = "bf16";
  op.group = "tp";
  op.auto_reason = "fastest of 3";
  op.chunks = 2;
  op.m = 512;
  op.k = 1024;
  op.n = 3584;
  op.tp = 2;
  op.candidates = {{"ring/2/p2p", 1.25, 1.5}, {"bulk/1/nccl", 2.0, 0}};
  op.step = SummaryOf(2);
  op.gemm_alone = SummaryOf(1.5);
  op.comm_alone = SummaryOf(1);
  op.comm_alone_nccl = SummaryOf(1.25);
  op.comm_alone_p2p = SummaryOf(1);
  op.gemm_beside_comm = SummaryOf(1.75);
  op.gemm_slowdown = 1.125;
  op.gemm_alone_rank_ms = {1.5, 1.625};
  op.host_enqueue_ms = 0.25;
  op.graph_replay = true;
  op.timeline = TimelineOf("fc1");
  op.compute_wait_rank_ms = {0.125, 0.25};
  op.group_step_ms = {2, 1.875};
  op.slowest_group = 1;
  op.exposed_comm_ms = 0.5;
  op.hidden_fraction = 0.5;
  op.ideal_ms = 1.5;
  op.tflops = 3.5;
  op.algbw_gbps = 10;
  op.busbw_gbps = 5;
  op.tolerance = 0.01;
  op.verified = true;
  op.max_rel_error = 0.001;
  op.spans_nodes = true;
  op.edge = "fused swiglu";
  op.energy = EveryEnergyField(1.5);
  op.joules_per_tflop = 0.75;
  return op;
}

runner::LayerStepReport EveryLayerField() {
  runner::LayerStepReport layer;
  layer.step = SummaryOf(4);
  layer.order = {"fc1", "grads"};
  layer.deferred = {"grads"};
  layer.joined_before = {""};
  layer.exposed_comm_ms = 0.75;
  layer.activation_ms = 0.125;
  layer.timeline = TimelineOf("layer");
  runner::LayerDeferral d;
  d.op = "grads";
  d.how = "chunked";
  d.pieces = 4;
  d.piece_bytes = 16384;
  d.joined_before = "out";
  d.alone_ms = 1;
  d.dispatched = true;
  d.ready_ms = 0.5;
  d.first_chunk_ms = 0.75;
  d.finished_ms = 2;
  d.worst_delay_ms = 1.5;
  d.bound_ms = 3;
  d.chunks_yielded = 2;
  d.chunks_forced = 1;
  layer.deferrals = {d};
  layer.without_deferred = SummaryOf(3.5);
  layer.deferred_hidden_fraction = 0.5;
  layer.chains = {{"fc2", "fc1 -swiglu-> fc2", 0.002, 0.01}};
  layer.scheduler = "dynamic";
  layer.captured = true;
  layer.lanes = "2 lanes";
  layer.dispatch_iterations = 3;
  layer.lane_figures = {{1, 0.25, 1.5}};
  layer.scheduler_notes = {"the bound was missed by 0.5 ms"};
  layer.energy = EveryEnergyField(4);
  layer.joules_per_tflop = 0.625;
  return layer;
}

runner::JobReport EveryReportField() {
  runner::JobReport report;
  report.backend = "cuda";
  report.launch_gate = true;
  report.head_start = "heat";
  report.preheat_ms = 2;
  report.nccl_overlap_ctas = 8;
  report.ranks_per_gpu = 2;
  report.mesh_tp = 2;
  report.mesh_dp = 2;
  report.overlapd_version = "0.1.0 (abc)";
  report.gpu = "H100";
  report.versions = {"12.4", "550.54", "2.21.5", "12.4.5"};
  report.library_env = {{"NCCL_ALGO", "Ring"}, {"NCCL_PROTO", "Simple"}};
  report.ops = {EveryOpField(), EveryOpField()};
  report.ops[1].id = "fc2";
  report.total_step_ms = 4;
  report.total_exposed_comm_ms = 1;
  report.fusions = {{"fc1", "ag", "ag_gemm", true, "(kept for the test)"}};
  report.layer = EveryLayerField();
  report.layer_note = "a note";
  report.nodes = {{"node1:7000", 1, "job-000002", 2, 2, 4, 4.5, 3, "host", "cpu"}};
  report.slowest_rank = 3;
  report.slowest_node = "node1:7000";
  report.inter_node_busbw_gbps = 2.5;
  return report;
}

jobs::JobRecord EveryJobField() {
  jobs::JobRecord job;
  job.sequence = 2;
  job.id = "job-000002";
  job.name = "block";
  job.priority = 3;
  job.priority_class = PriorityClass::kDeferred;
  job.devices = {0, 1};
  job.spec = "ops: []\n";
  job.owner = "uid:1000";
  job.owner_name = "ada";
  job.owner_admin = true;
  job.nodes = {"node0:7000", "node1:7000"};
  job.coordinator = "node0:7000";
  job.global_job_id = "job-000001";
  job.global_id = "node0:7000/job-000001";
  job.node_index = 1;
  job.counted_as_coordinated = true;
  job.waiting = "device 1 is held by session sess-000002";
  job.state = jobs::JobState::kAborted;
  job.submit_time_ms = 1000;
  job.start_time_ms = 2000;
  job.end_time_ms = 3000;
  job.error = "communicator aborted";
  job.error_code = absl::StatusCode::kAborted;
  job.progress = runner::Progress{1, 2, "fc2", "timed", 3, 10};
  job.result = EveryReportField();
  return job;
}

// p -> the job core's types -> p, compared field by field.
template <typename Proto>
void ExpectComesBack(const Proto& p) {
  const Proto again = ToProto(FromProto(p));
  std::string diff;
  MessageDifferencer differencer;
  differencer.ReportDifferencesToString(&diff);
  EXPECT_TRUE(differencer.Compare(p, again)) << diff;
}

TEST(ReportWireTest, EveryFieldOfTheReportReachesTheMessageAndComesBack) {
  const v1::JobResult result = ToProto(EveryReportField());
  EXPECT_EQ(Unset(result), std::vector<std::string>{});
  ExpectComesBack(result);
  // Back in the job core's types, as it was: spot checks of what a reader uses.
  const runner::JobReport back = FromProto(result);
  ASSERT_EQ(back.ops.size(), 2u);
  EXPECT_EQ(back.ops[1].id, "fc2");
  EXPECT_EQ(back.ops[0].comm_alone_p2p->median, 1);
  EXPECT_EQ(back.ops[0].timeline->spans[0].end_ms, 1.25);
  ASSERT_TRUE(back.layer.has_value());
  EXPECT_EQ(back.layer->deferrals[0].chunks_forced, 1);
  EXPECT_EQ(back.layer->without_deferred->median, 3.5);
  EXPECT_EQ(back.nodes[0].slowest_rank, 3);
  EXPECT_EQ(back.library_env.at("NCCL_PROTO"), "Simple");
  EXPECT_TRUE(back.ops[0].energy.valid);
  EXPECT_EQ(back.ops[0].energy.steps, 20);
  EXPECT_EQ(back.ops[0].joules_per_tflop, 0.75);
  EXPECT_EQ(back.layer->energy.serial_joules, 4.25);
  EXPECT_EQ(back.layer->joules_per_tflop, 0.625);
}

TEST(ReportWireTest, EveryFieldOfTheJobReachesTheMessageAndComesBack) {
  const v1::Job job = ToProto(EveryJobField());
  EXPECT_EQ(Unset(job), std::vector<std::string>{});
  ExpectComesBack(job);
  const jobs::JobRecord back = FromProto(job);
  EXPECT_EQ(back.state, jobs::JobState::kAborted);
  EXPECT_EQ(back.error_code, absl::StatusCode::kAborted);
  EXPECT_EQ(back.progress->op_id, "fc2");
  EXPECT_EQ(back.ops_finished, 2);
}

// What is absent stays absent: a GEMM alone has no comm_alone, a job without
// a layer step none, a queued job no progress; and a list's summary keeps its
// count of ops without them.
TEST(ReportWireTest, AbsentMessagesStayAbsent) {
  runner::OpReport gemm;
  gemm.id = "wgrad";
  const v1::OpResult op = ToProto(gemm);
  EXPECT_FALSE(op.has_comm_alone());
  EXPECT_FALSE(op.has_timeline());
  EXPECT_FALSE(op.has_energy());  // no energy counter
  EXPECT_TRUE(op.has_step());
  ExpectComesBack(op);

  jobs::JobRecord queued;
  queued.id = "job-000001";
  const v1::Job job = ToProto(queued);
  EXPECT_FALSE(job.has_progress());
  EXPECT_FALSE(job.result().has_layer_step());
  ExpectComesBack(job);

  v1::Job summary = job;
  summary.set_ops_finished(3);
  summary.mutable_progress();
  ExpectComesBack(summary);
}

TEST(ReportWireTest, StatesAndFilters) {
  for (v1::JobState state :
       {v1::QUEUED, v1::RUNNING, v1::SUCCEEDED, v1::FAILED, v1::CANCELLED, v1::ABORTED}) {
    EXPECT_EQ(ToProto(FromProto(state)), state);
    EXPECT_EQ(ToProto(StateFilter(state)), state);
  }
  EXPECT_FALSE(StateFilter(v1::JOB_STATE_UNSPECIFIED).has_value());
  EXPECT_EQ(ToProto(std::optional<jobs::JobState>()), v1::JOB_STATE_UNSPECIFIED);
}

JobSpec Parse(const std::string& yaml) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(yaml);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

// The reports real runs make come back to the same bytes.
TEST(ReportWireTest, ReportsOfRealRunsComeBack) {
  const std::string layer = R"(name: layer
dtype: bf16
iterations: 2
warmup: 1
verify: true
timeline: true
ops:
  - {id: fc1, type: ag_gemm, m: 64, k: 64, n: 128, mode: bulk}
  - {id: fc2, type: gemm_rs, m: 64, k: 128, n: 64, mode: auto, after: [fc1]}
  - {id: out, type: gemm_ar, m: 64, k: 64, n: 64, mode: serial}
)";
  const std::string mesh = R"(name: mesh
dtype: f32
iterations: 2
warmup: 1
verify: true
mesh: {tp: 2, dp: 2}
chunk_kib: 16
SCHEDULER
ops:
  - {id: dgrad, type: ag_gemm, m: 128, k: 128, n: 256, mode: serial, transport: nccl}
  - {id: wgrad, type: gemm, m: 128, k: 128, n: 256, after: [dgrad]}
  - {id: grads, type: all_reduce, m: 128, n: 128, group: dp, input: wgrad}
  - {id: next, type: gemm_rs, m: 128, k: 256, n: 128, mode: serial, transport: nccl, after: [dgrad]}
  - {id: loss, type: all_reduce, m: 64, n: 64, group: world}
)";
  struct Run {
    std::string yaml;
    int devices;
  };
  const std::vector<Run> runs = {
      {layer, 2},
      {absl::StrReplaceAll(mesh, {{"SCHEDULER", ""}}), 4},
      {absl::StrReplaceAll(mesh, {{"SCHEDULER", "scheduler: dynamic\ntimeline: true"}}), 4}};
  for (const Run& run : runs) {
    std::unique_ptr<engine::Engine> engine = CheckedHostEngine(run.devices);
    std::vector<int> devices(run.devices);
    for (int d = 0; d < run.devices; ++d) devices[d] = d;
    absl::StatusOr<runner::JobReport> report =
        runner::RunJob(*engine, Parse(run.yaml), devices, {}, nullptr);
    ASSERT_TRUE(report.ok()) << report.status();
    ASSERT_TRUE(report->layer.has_value()) << report->layer_note;
    const v1::JobResult result = ToProto(*report);
    ExpectComesBack(result);
    jobs::JobRecord job;
    job.id = "job-000001";
    job.state = jobs::JobState::kSucceeded;
    job.result = *report;
    ExpectComesBack(ToProto(job));
  }
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

// Jobs as a daemon before the job core had its own types stored them (a
// layer step traced and verified; a tp x dp mesh under scheduler: dynamic):
// they read back as the same messages.
TEST(ReportWireTest, JobsStoredBeforeComeBack) {
  for (const char* name : {"job-layer.pb", "job-mesh-dynamic.pb"}) {
    v1::Job job;
    ASSERT_TRUE(
        job.ParseFromString(ReadFile(absl::StrCat(OVERLAP_SOURCE_DIR, "/tests/data/wire/", name))))
        << name;
    ASSERT_GT(job.result().ops_size(), 0) << name;
    ExpectComesBack(job);
  }
}

}  // namespace
}  // namespace overlap::wire
