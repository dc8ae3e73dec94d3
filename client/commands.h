// The overlapctl commands, separated from argument parsing (client/main.cc) so
// that they only see a DaemonClient and two streams.
//
// Exit status of every command: kExitOk on success; kExitJobFailed when the job
// being followed or reported ended FAILED, CANCELLED or ABORTED; kExitUnreachable
// when no daemon answered; kExitRefused when the daemon refused the request
// (printed as "overlapctl: <CODE_NAME>: <message>"); kExitUsage for bad
// arguments.
#pragma once

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/daemon_client.h"
#include "google/protobuf/message.h"

namespace overlap::client {

inline constexpr int kExitOk = 0;
inline constexpr int kExitJobFailed = 1;
inline constexpr int kExitUnreachable = 2;
inline constexpr int kExitRefused = 3;
inline constexpr int kExitUsage = 64;  // sysexits EX_USAGE

// A graph file's text; "-" reads standard input. NOT_FOUND when it cannot be opened.
absl::StatusOr<std::string> ReadGraphFile(const std::string& file);

// Writes `text` to `path`, replacing it: kExitOk, or kExitUsage after printing
// "overlapctl: cannot write PATH: reason" to `err`.
int WriteTextFile(const std::string& path, const std::string& text, std::ostream& err);

// The protobuf JSON form: proto field names, primitive fields always printed.
std::string ToJson(const google::protobuf::Message& message);

// The one-line error for a failed call and the matching exit status.
int ReportCallError(const absl::Status& status, const std::string& address, std::ostream& err);

class Commands {
 public:
  // `err_is_tty` picks how progress is drawn: a live counter on a terminal,
  // one line per phase change otherwise (logs stay short).
  Commands(DaemonClient& client, std::ostream& out, std::ostream& err, bool err_is_tty, bool json)
      : client_(client), out_(out), err_(err), err_is_tty_(err_is_tty), json_(json) {}

  // `file` "-" reads standard input.
  int Submit(const std::string& file, bool wait, const std::vector<std::string>& nodes = {});
  int Get(const std::string& id);
  // `state` is a state name in any case ("running"); empty means all.
  int List(const std::string& state, int limit);
  int Cancel(const std::string& id);
  int Watch(const std::string& id);
  int Node();
  // The GPUs' health from NVML now (device_health.h): the table and each
  // problem; exit kExitJobFailed when a GPU has one, kExitRefused when the
  // daemon has no readings to judge by.
  int Health();
  // Sets GPU `device`'s Xid counts of this boot back to 0 (after a GPU reset).
  int ForgetXids(int device);
  int Stats();
  int Report(const std::string& id);
  // The job's graph with the schedules its ops ran (pin.h), to standard output
  // or, when `out_file` is set, to that file.
  int Pin(const std::string& id, const std::string& out_file);
  // The traced iterations of a job's ops (timeline.h): charts, or with --json
  // the Chrome trace; `out_file` set: that trace is also written there.
  // NOT_FOUND-style refusal (kExitRefused) when no op has a timeline.
  int Timeline(const std::string& id, const std::string& op_id, int width, bool all_spans,
               const std::string& out_file);
  // Two finished jobs op by op (compare.h).
  int Compare(const std::string& a, const std::string& b);

 private:
  int Fail(const absl::Status& status);
  // Follows a job to its end, drawing progress on err_, then prints it.
  int FollowAndPrint(const std::string& id);
  // Prints a final job (report or JSON) and returns its exit status.
  int PrintFinal(const v1::Job& job);

  DaemonClient& client_;
  std::ostream& out_;
  std::ostream& err_;
  bool err_is_tty_;
  bool json_;
};

}  // namespace overlap::client
