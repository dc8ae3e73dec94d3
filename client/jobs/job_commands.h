// The overlapctl commands on jobs (submit, validate, get, list, cancel, watch,
// report, pin, timeline, compare), apart from argument parsing
// (jobs/jobs_cli.cc) so that they only see a DaemonClient and two streams.
// Each returns an exit status (core/command_io.h).
#pragma once

#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/core/command_io.h"
#include "client/core/daemon_client.h"

namespace overlap::client {

class JobCommands {
 public:
  // `err_is_tty` picks how progress is drawn: a live counter on a terminal,
  // one line per phase change otherwise (logs stay short).
  JobCommands(DaemonClient& client, std::ostream& out, std::ostream& err, bool err_is_tty,
              bool json)
      : client_(client), out_(out), err_(err), err_is_tty_(err_is_tty), json_(json) {}

  // `file` "-" reads standard input.
  // no_fuse: the graph runs as written (graph key fuse: false, the overlap pass off).
  // scheduler: "" keeps the graph's, else static | dynamic (graph key scheduler).
  // detach: an interrupted --wait leaves the job running (default: cancels it).
  int Submit(const std::string& file, bool wait, const std::vector<std::string>& nodes = {},
             bool no_fuse = false, const std::string& scheduler = "", bool detach = false);
  // submit --compare-fusion: the graph with the overlap pass, then without it,
  // one after the other, and their step times side by side.
  int CompareFusion(const std::string& file, const std::vector<std::string>& nodes);
  // submit --compare-scheduler: the graph under scheduler static, then dynamic,
  // and how each sent its deferred collectives, side by side.
  int CompareScheduler(const std::string& file, const std::vector<std::string>& nodes);
  // A dry run of `file` against the daemon (and the nodes a job spans): every
  // check a submission meets, nothing queued or run.
  int Validate(const std::string& file, const std::vector<std::string>& nodes);
  int Get(const std::string& id);
  // The flight recorder's rings of the job and its verdict (client/format/flight.h).
  int Flight(const std::string& id);
  // `state` is a state name in any case ("running"); empty means all.
  int List(const std::string& state, int limit);
  // ignore_not_found: a job that does not exist or has already ended is no
  // error (exit 0; kubectl delete's --ignore-not-found): it says so.
  int Cancel(const std::string& id, bool wait = false, bool ignore_not_found = false);
  int Watch(const std::string& id);
  int Report(const std::string& id);
  // The job's graph with the schedules its ops ran (pin.h), to standard output
  // or, when `out_file` is set, to that file.
  int Pin(const std::string& id, const std::string& out_file);
  // The traced iterations of a job's ops (timeline.h): charts, or with --json
  // the Chrome trace; `out_file` set: that trace is also written there, with
  // the flight rings on their own track (`flight`: however many they are).
  // NOT_FOUND-style refusal (kExitRefused) when no op has a timeline.
  int Timeline(const std::string& id, const std::string& op_id, int width, bool all_spans,
               const std::string& out_file, const std::string& html_file = "", bool flight = false);
  // Two finished jobs op by op (compare.h).
  int Compare(const std::string& a, const std::string& b, const std::string& html_file = "");

 private:
  // Submits each (label, graph text) in turn and follows it to its end; the
  // finished jobs, or the exit code to return (a refusal, a failed job's
  // report).
  absl::StatusOr<std::vector<v1::Job>> RunOneAfterAnother(
      const std::vector<std::pair<std::string, std::string>>& graphs, const std::string& source,
      const std::vector<std::string>& nodes, int* exit_code);
  int Fail(const absl::Status& status);
  // What an interrupt (Ctrl-C, SIGTERM) does to the job being followed.
  enum class OnStop { kCancelJob, kLeaveJob };
  // Follows a job to its end, drawing progress on err_, then prints it.
  int FollowAndPrint(const std::string& id, OnStop on_stop);
  // Prints a final job (report or JSON) and returns its exit status.
  int PrintFinal(const v1::Job& job);

  DaemonClient& client_;
  std::ostream& out_;
  std::ostream& err_;
  bool err_is_tty_;
  bool json_;
};

}  // namespace overlap::client
