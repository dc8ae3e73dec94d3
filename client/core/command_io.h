// What every overlapctl command shares: its exit statuses, reading a graph
// file, writing a file, the JSON form of a reply and the line for a failed call.
//
// Exit status of every command: kExitOk on success; kExitJobFailed when the job
// being followed or reported ended FAILED, CANCELLED or ABORTED; kExitUnreachable
// when no daemon answered; kExitRefused when the daemon refused the request
// (printed as "overlapctl: <CODE_NAME>: <message>"); kExitUsage for bad
// arguments.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"

namespace overlap::client {

inline constexpr int kExitOk = 0;
inline constexpr int kExitJobFailed = 1;
inline constexpr int kExitUnreachable = 2;
inline constexpr int kExitRefused = 3;
inline constexpr int kExitUsage = 64;  // sysexits EX_USAGE

// The most overlapctl reads from any one file: a graph, a model's config, a
// bench result, a calibration.
inline constexpr size_t kMaxInputFileBytes = size_t{64} << 20;

// The bytes of `path` ("-": standard input), read through one descriptor
// whatever it is (a pipe, a FIFO, a device such as /dev/zero), never more than
// max_bytes + 1. NOT_FOUND naming the path and the reason when it cannot be
// opened ("cannot read PATH: ..."), INVALID_ARGUMENT for a directory or more
// than `max_bytes`, DATA_LOSS for a read error.
absl::StatusOr<std::string> ReadBoundedFile(const std::string& path, size_t max_bytes);
// A graph file's text (ReadBoundedFile with kMaxInputFileBytes).
absl::StatusOr<std::string> ReadGraphFile(const std::string& file);
// The graph text with `fuse: false` set (submit --no-fuse), as YAML: the
// daemon keeps it, so that the job runs unfused after a restart too.
// INVALID_ARGUMENT for a text that is not one YAML or JSON mapping.
absl::StatusOr<std::string> WithFuseOff(const std::string& graph);
// The graph text with `scheduler: NAME` set (submit --scheduler), as above.
absl::StatusOr<std::string> WithScheduler(const std::string& graph, const std::string& scheduler);

// Writes `text` to `path`, replacing it: kExitOk, or kExitUsage after printing
// "overlapctl: cannot write PATH: reason" to `err`.
int WriteTextFile(const std::string& path, const std::string& text, std::ostream& err);

// `message` as --json writes it (proto_json.h: 64-bit integers as numbers,
// times also in RFC 3339), indented, ending in a newline.
std::string ToJson(const google::protobuf::Message& message);

// Why this user cannot reach the unix socket at `path`, for people: a
// directory on the way it may not enter, no socket there, or a socket it may
// not write (each naming the path, the uid and what to ask for); "" when none
// of these is the reason.
std::string UnixSocketProblem(const std::string& path);

// The one-line error for a failed call and the matching exit status.
int ReportCallError(const absl::Status& status, const std::string& address, std::ostream& err);
// Prints "overlapctl: <message>" for input the user gave that cannot be used
// (a flag, a file) and returns kExitUsage.
int UsageError(const absl::Status& status, std::ostream& err);

// Splits "MxKxN" (a shape on the command line) into its three integers; false
// when it is not that form.
bool ParseShapeDims(absl::string_view text, int64_t* m, int64_t* k, int64_t* n);

}  // namespace overlap::client
