#include "client/jobs/job_commands.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/core/interrupts.h"
#include "client/core/proto_json.h"
#include "client/format/flight.h"
#include "client/format/flight_trace.h"
#include "client/format/job_reason.h"
#include "client/format/report.h"
#include "client/format/timeline.h"
#include "client/format/timeline_html.h"
#include "client/jobs/compare.h"
#include "client/jobs/pin.h"
#include "client/jobs/progress_printer.h"
#include "nlohmann/json.hpp"

namespace overlap::client {
namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

int JobCommands::Fail(const absl::Status& status) {
  return ReportCallError(status, client_.address(), err_);
}

int JobCommands::PrintFinal(const v1::Job& job) {
  if (json_) {
    out_ << ToJson(job);
  } else {
    out_ << FormatReport(job);
  }
  if (IsUnsuccessfulState(job.state())) {
    err_ << "overlapctl: job " << job.id() << " " << JobStateName(job.state());
    if (!job.error().empty()) err_ << ": " << job.error();
    err_ << "\n";
    return kExitJobFailed;
  }
  return kExitOk;
}

int JobCommands::FollowAndPrint(const std::string& id, OnStop on_stop) {
  // Interrupted (Ctrl-C, SIGTERM from scancel or a time limit): submit --wait
  // cancels its job, so that nothing keeps GPUs for a client that is gone;
  // watch and submit --detach leave it running and say how to stop it.
  OnInterrupt interrupt([&, id](int signal) {
    if (on_stop == OnStop::kCancelJob) {
      absl::StatusOr<v1::Job> cancelled = client_.CancelJob(id);
      err_ << "\noverlapctl: interrupted: "
           << (cancelled.ok() ? "cancelled job " + id + " (submit --detach leaves it running)"
                              : "could not cancel job " + id + ": " +
                                    std::string(cancelled.status().message()))
           << std::endl;
      if (cancelled.ok()) return;  // the watch ends once the job has
    } else {
      err_ << "\noverlapctl: stopped watching; job " << id << " goes on (overlapctl cancel " << id
           << " stops it)" << std::endl;
    }
    std::_Exit(128 + signal);
  });
  ProgressPrinter progress(err_, err_is_tty_);
  absl::StatusOr<v1::Job> job =
      client_.WatchJob(id, [&progress](const v1::Job& event) { progress.Update(event); });
  progress.Finish();
  if (!job.ok()) return Fail(job.status());
  return PrintFinal(*job);
}

int JobCommands::Validate(const std::string& file, const std::vector<std::string>& nodes) {
  absl::StatusOr<std::string> spec = ReadGraphFile(file);
  if (!spec.ok()) {
    err_ << "overlapctl: " << spec.status().message() << "\n";
    return kExitUsage;
  }
  const std::string source = file == "-" ? "<stdin>" : file;
  absl::StatusOr<v1::Job> job = client_.SubmitJob(*spec, source, nodes, /*validate_only=*/true);
  if (!job.ok()) return Fail(job.status());
  if (json_) {
    out_ << ToJson(*job);
    return kExitOk;
  }
  out_ << source << ": valid: " << job->name() << ", priority " << job->priority() << ", ";
  if (job->nodes_size() > 0) {
    out_ << job->nodes_size() << " nodes (each checked its part)";
  } else {
    out_ << "devices " << absl::StrJoin(job->devices(), ",");
  }
  out_ << "; nothing was queued or run\n";
  return kExitOk;
}

int JobCommands::Submit(const std::string& file, bool wait, const std::vector<std::string>& nodes,
                        bool no_fuse, const std::string& scheduler, bool detach) {
  absl::StatusOr<std::string> spec = ReadGraphFile(file);
  if (spec.ok() && no_fuse) spec = WithFuseOff(*spec);
  if (spec.ok() && !scheduler.empty()) spec = WithScheduler(*spec, scheduler);
  if (!spec.ok()) {
    err_ << "overlapctl: " << spec.status().message() << "\n";
    return kExitUsage;
  }
  absl::StatusOr<v1::Job> job = client_.SubmitJob(*spec, file == "-" ? "<stdin>" : file, nodes);
  if (!job.ok()) return Fail(job.status());
  if (!wait) {
    if (json_) {
      out_ << ToJson(*job);
    } else {
      out_ << job->id() << "\n";
    }
    return kExitOk;
  }
  ProgressStream(err_) << "submitted job " << job->id() << "\n";
  return FollowAndPrint(job->id(), detach ? OnStop::kLeaveJob : OnStop::kCancelJob);
}

namespace {

// submit --compare-scheduler --json: one job's figures.
nlohmann::json SchedulerFigures(const v1::Job& job) {
  const v1::JobResult& r = job.result();
  nlohmann::json deferrals = nlohmann::json::array();
  for (const v1::LayerDeferral& d : r.layer_deferrals()) {
    nlohmann::json one = {{"op", d.op()}, {"how", d.how()}, {"pieces", d.pieces()}};
    if (d.dispatched()) {
      one.update({{"ready_ms", d.ready_ms()},
                  {"first_chunk_ms", d.first_chunk_ms()},
                  {"finished_ms", d.finished_ms()},
                  {"worst_delay_ms", d.worst_delay_ms()},
                  {"bound_ms", d.bound_ms()},
                  {"bound_met", d.worst_delay_ms() <= d.bound_ms()},
                  {"chunks_yielded", d.chunks_yielded()},
                  {"chunks_forced", d.chunks_forced()}});
    }
    deferrals.push_back(one);
  }
  nlohmann::json lanes = nlohmann::json::array();
  for (const v1::LaneFigures& f : r.lane_figures()) {
    lanes.push_back({{"device", f.device()},
                     {"inversion_ms", f.inversion_ms()},
                     {"deferred_busy_ms", f.deferred_busy_ms()}});
  }
  return {{"job", job.id()},
          {"scheduler", r.layer_scheduler()},
          {"captured", r.layer_captured()},
          {"layer_step_ms", r.layer_step().median_ms()},
          {"without_deferred_ms", r.layer_step_without_deferred().median_ms()},
          {"deferred_hidden_fraction", r.layer_deferred_hidden_fraction()},
          {"deferrals", deferrals},
          {"lanes", lanes}};
}

}  // namespace

absl::StatusOr<std::vector<v1::Job>> JobCommands::RunOneAfterAnother(
    const std::vector<std::pair<std::string, std::string>>& graphs, const std::string& source,
    const std::vector<std::string>& nodes, int* exit_code) {
  std::vector<v1::Job> jobs;
  for (const auto& [label, text] : graphs) {
    absl::StatusOr<v1::Job> job = client_.SubmitJob(text, source, nodes);
    if (job.ok()) {
      ProgressStream(err_) << "submitted job " << job->id() << " (" << label << ")\n";
      ProgressPrinter progress(err_, err_is_tty_);
      job = client_.WatchJob(job->id(),
                             [&progress](const v1::Job& event) { progress.Update(event); });
      progress.Finish();
    }
    if (!job.ok()) {
      *exit_code = Fail(job.status());
      return job.status();
    }
    if (IsUnsuccessfulState(job->state())) {
      *exit_code = PrintFinal(*job);
      return absl::AbortedError(absl::StrCat(label, " did not succeed"));
    }
    jobs.push_back(*std::move(job));
  }
  return jobs;
}

int JobCommands::CompareFusion(const std::string& file, const std::vector<std::string>& nodes) {
  absl::StatusOr<std::string> spec = ReadGraphFile(file);
  absl::StatusOr<std::string> unfused = spec.ok() ? WithFuseOff(*spec) : spec;
  if (!unfused.ok()) {
    err_ << "overlapctl: " << unfused.status().message() << "\n";
    return kExitUsage;
  }
  int exit_code = kExitOk;
  absl::StatusOr<std::vector<v1::Job>> ran = RunOneAfterAnother(
      {{"fused", *spec}, {"unfused", *unfused}}, file == "-" ? "<stdin>" : file, nodes, &exit_code);
  if (!ran.ok()) return exit_code;
  const std::vector<v1::Job>& jobs = *ran;
  auto row = [](const v1::Job& job) {
    const v1::JobResult& r = job.result();
    int fused = 0;
    for (const v1::Fusion& f : r.fusions()) fused += f.fused();
    return nlohmann::json{{"job", job.id()},
                          {"ops", r.ops_size()},
                          {"fused_pairs", fused},
                          {"layer_step_ms", r.layer_step().median_ms()},
                          {"op_by_op_ms", r.total_step_ms()},
                          {"layer_exposed_comm_ms", r.layer_exposed_comm_ms()}};
  };
  const nlohmann::json fused = row(jobs[0]), plain = row(jobs[1]);
  if (json_) {
    out_ << nlohmann::json{{"fused", fused}, {"unfused", plain}}.dump(1) << "\n";
    return kExitOk;
  }
  out_ << FormatFusionComparison(jobs[0], jobs[1]);
  return kExitOk;
}

int JobCommands::CompareScheduler(const std::string& file, const std::vector<std::string>& nodes) {
  absl::StatusOr<std::string> spec = ReadGraphFile(file);
  absl::StatusOr<std::string> planned = spec.ok() ? WithScheduler(*spec, "static") : spec;
  absl::StatusOr<std::string> dynamic = spec.ok() ? WithScheduler(*spec, "dynamic") : spec;
  if (!planned.ok() || !dynamic.ok()) {
    err_ << "overlapctl: " << (planned.ok() ? dynamic : planned).status().message() << "\n";
    return kExitUsage;
  }
  int exit_code = kExitOk;
  absl::StatusOr<std::vector<v1::Job>> ran =
      RunOneAfterAnother({{"static", *planned}, {"dynamic", *dynamic}},
                         file == "-" ? "<stdin>" : file, nodes, &exit_code);
  if (!ran.ok()) return exit_code;
  if (json_) {
    nlohmann::json j;
    for (const v1::Job& job : *ran) j[job.result().layer_scheduler()] = SchedulerFigures(job);
    out_ << j.dump(1) << "\n";
    return kExitOk;
  }
  out_ << FormatSchedulerComparison((*ran)[0], (*ran)[1]);
  return kExitOk;
}

int JobCommands::Get(const std::string& id) {
  absl::StatusOr<v1::Job> job = client_.GetJob(id);
  if (!job.ok()) return Fail(job.status());
  out_ << (json_ ? ToJson(*job) : FormatJobDetail(*job, NowMs()));
  return kExitOk;
}

int JobCommands::Flight(const std::string& id) {
  absl::StatusOr<v1::GetFlightResponse> flight = client_.GetFlight(id);
  if (!flight.ok()) return Fail(flight.status());
  out_ << (json_ ? ProtoToJson(*flight).dump(2) + "\n" : FormatFlight(*flight));
  return kExitOk;
}

int JobCommands::List(const std::string& state, int limit) {
  v1::JobState wanted = v1::JOB_STATE_UNSPECIFIED;
  if (!state.empty() && !v1::JobState_Parse(absl::AsciiStrToUpper(state), &wanted)) {
    err_ << "overlapctl: unknown state \"" << state
         << "\" (expected queued, running, succeeded, failed, cancelled, aborted)\n";
    return kExitUsage;
  }
  if (limit < 0) {
    err_ << "overlapctl: --limit must be >= 0\n";
    return kExitUsage;
  }
  // A page at a time (the daemon sends summaries, at most 1000 a call) until
  // --limit jobs or the oldest.
  v1::ListJobsResponse all;
  std::string token;
  do {
    const int want = limit > 0 ? limit - all.jobs_size() : 0;
    absl::StatusOr<v1::ListJobsResponse> page = client_.ListJobs(wanted, want, token);
    if (!page.ok()) return Fail(page.status());
    for (v1::Job& job : *page->mutable_jobs()) *all.add_jobs() = std::move(job);
    token = page->next_page_token();
  } while (!token.empty() && (limit == 0 || all.jobs_size() < limit));
  if (!json_) {
    out_ << FormatJobList(all.jobs(), NowMs());
    return kExitOk;
  }
  // The JSON says it too: "damaged": true beside such a job's fields, and the
  // one-word reason.
  nlohmann::json listed = ProtoToJson(all);
  if (listed.contains("jobs")) {
    for (int i = 0; i < all.jobs_size(); ++i) {
      if (IsDamaged(all.jobs(i))) listed["jobs"][i]["damaged"] = true;
      // The table's REASON cell, beside the whole text in "waiting" and "error".
      if (const std::string slug = ReasonSlug(all.jobs(i)); slug != "-") {
        listed["jobs"][i]["reason"] = slug;
      }
    }
  }
  out_ << listed.dump(2) << "\n";
  return kExitOk;
}

int JobCommands::Cancel(const std::string& id, bool wait, bool ignore_not_found) {
  absl::StatusOr<v1::Job> job = client_.CancelJob(id);
  if (ignore_not_found && absl::IsNotFound(job.status())) {
    err_ << "overlapctl: job " << id << " not found; nothing to cancel\n";
    return kExitOk;
  }
  if (ignore_not_found && absl::IsFailedPrecondition(job.status())) {
    // The daemon refuses a job that has ended: say how it ended.
    absl::StatusOr<v1::Job> ended = client_.GetJob(id);
    if (ended.ok() && IsFinalState(ended->state())) job = std::move(ended);
  }
  if (!job.ok()) return Fail(job.status());
  if (wait && !IsFinalState(job->state())) {
    job = client_.WatchJob(id, [](const v1::Job&) {});
    if (!job.ok()) return Fail(job.status());
  }
  if (json_) {
    out_ << ToJson(*job);
  } else if (IsFinalState(job->state())) {
    out_ << "job " << id << " " << JobStateName(job->state()) << "\n";
  } else {
    // The daemon stops it between iterations: say what was asked, not the old state.
    out_ << "job " << id << ": cancel requested (it was " << JobStateName(job->state())
         << "; overlapctl cancel --wait " << id << " waits for it to end)\n";
  }
  return kExitOk;
}

int JobCommands::Watch(const std::string& id) { return FollowAndPrint(id, OnStop::kLeaveJob); }

int JobCommands::Report(const std::string& id) {
  absl::StatusOr<v1::Job> job = client_.GetJob(id);
  if (!job.ok()) return Fail(job.status());
  if (!IsFinalState(job->state())) {
    err_ << "overlapctl: FAILED_PRECONDITION: job " << id << " is " << JobStateName(job->state())
         << " and has no report yet (use `overlapctl watch " << id << "`)\n";
    return kExitRefused;
  }
  return PrintFinal(*job);
}

int JobCommands::Pin(const std::string& id, const std::string& out_file) {
  absl::StatusOr<v1::Job> job = client_.GetJob(id);
  if (!job.ok()) return Fail(job.status());
  absl::StatusOr<std::string> pinned = PinnedGraph(*job);
  if (!pinned.ok()) return Fail(pinned.status());
  if (out_file.empty()) {
    // The graph is YAML either way; --json wraps it for scripts.
    out_ << (json_ ? nlohmann::json{{"job", id}, {"graph", *pinned}}.dump(1) + "\n" : *pinned);
    return kExitOk;
  }
  if (int rc = WriteTextFile(out_file, *pinned, err_); rc != kExitOk) return rc;
  err_ << "wrote " << out_file << "\n";
  return kExitOk;
}

int JobCommands::Timeline(const std::string& id, const std::string& op_id, int width,
                          bool all_spans, const std::string& out_file, const std::string& html_file,
                          bool flight) {
  absl::StatusOr<v1::Job> job = client_.GetJob(id);
  if (!job.ok()) return Fail(job.status());
  const std::string charts = FormatTimelines(*job, op_id, width, all_spans);
  if (charts.empty()) {
    const bool known =
        op_id.empty() || std::any_of(job->result().ops().begin(), job->result().ops().end(),
                                     [&](const auto& op) { return op.id() == op_id; });
    err_ << "overlapctl: " << (known ? "FAILED_PRECONDITION" : "NOT_FOUND") << ": job " << id
         << (op_id.empty() ? "" : " op " + op_id)
         << (known ? " has no timeline (the job is " + JobStateName(job->state()) +
                         "; a graph with `timeline: false` records none)"
                   : " is not in the job")
         << "\n";
    return kExitRefused;
  }
  nlohmann::json trace = ChromeTrace(*job, op_id);
  // The flight rings on their own track: asked for, or small enough to come along.
  if (!out_file.empty() || json_) {
    absl::StatusOr<v1::GetFlightResponse> rings = client_.GetFlight(id);
    if (!rings.ok() && flight) return Fail(rings.status());
    if (rings.ok() && (flight || FlightEntryCount(*rings) <= kSmallFlightEntries)) {
      AppendFlightTrace(*rings, op_id, trace);
    }
  }
  if (!out_file.empty()) {
    if (int rc = WriteTextFile(out_file, trace.dump() + "\n", err_); rc != kExitOk) return rc;
    err_ << "wrote " << out_file << "\n";
  }
  if (!html_file.empty()) {
    if (int rc = WriteTextFile(html_file, TimelineHtml(*job, op_id), err_); rc != kExitOk)
      return rc;
    err_ << "wrote " << html_file << "\n";
  }
  out_ << (json_ ? trace.dump(1) + "\n" : charts);
  return kExitOk;
}

int JobCommands::Compare(const std::string& a, const std::string& b, const std::string& html_file) {
  absl::StatusOr<v1::Job> job_a = client_.GetJob(a);
  if (!job_a.ok()) return Fail(job_a.status());
  absl::StatusOr<v1::Job> job_b = client_.GetJob(b);
  if (!job_b.ok()) return Fail(job_b.status());
  for (const v1::Job* job : {&*job_a, &*job_b}) {
    if (job->result().ops().empty()) {
      err_ << "overlapctl: FAILED_PRECONDITION: job " << job->id() << " is "
           << JobStateName(job->state()) << " and has no op results to compare\n";
      return kExitRefused;
    }
  }
  const Comparison c = CompareJobs(*job_a, *job_b);
  if (!html_file.empty()) {
    if (int rc = WriteTextFile(html_file, CompareHtml(*job_a, *job_b, c), err_); rc != kExitOk) {
      return rc;
    }
  }
  out_ << (json_ ? ComparisonJson(*job_a, *job_b, c).dump(1) + "\n"
                 : FormatComparison(*job_a, *job_b, c));
  return kExitOk;
}

}  // namespace overlap::client
