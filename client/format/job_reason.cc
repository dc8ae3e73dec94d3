#include "client/format/job_reason.h"

#include <cctype>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace overlap::client {

namespace {

constexpr size_t kMaxSlugChars = 32;

// The first `max_words` words of `text`, lower case, letters and digits only,
// joined with '-': "daemon restarted" -> "daemon-restarted".
std::string Kebab(absl::string_view text, int max_words) {
  std::string out;
  int words = 0;
  bool in_word = false;
  for (char c : text) {
    if (std::isalnum(static_cast<unsigned char>(c)) != 0) {
      if (!in_word) {
        if (words == max_words) break;
        if (!out.empty()) out += '-';
        ++words;
        in_word = true;
      }
      out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else {
      in_word = false;
    }
  }
  if (out.size() > kMaxSlugChars) out.resize(kMaxSlugChars);
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out.empty() ? "-" : out;
}

// The device number after "device " in `text`, or "" when there is none.
std::string DeviceAfter(absl::string_view text, absl::string_view from) {
  const size_t at = text.find(from);
  if (at == absl::string_view::npos) return "";
  size_t end = at + from.size();
  while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end])) != 0) ++end;
  absl::string_view digits = text.substr(at + from.size(), end - at - from.size());
  int device = 0;
  return absl::SimpleAtoi(digits, &device) ? absl::StrCat("dev", device) : "";
}

// The queue's words (server/jobs/job_queue.cc): "device D is held by session
// S", "device D runs J", "device D goes first to J, queued ahead", "device D
// goes first to a job being submitted", "memory: needs X, free Y on device D
// while session S holds it".
std::string WaitingSlug(absl::string_view waiting) {
  if (absl::StartsWith(waiting, "memory:")) {
    const std::string device = DeviceAfter(waiting, "on device ");
    return device.empty() ? "memory-short" : absl::StrCat("memory-short-", device);
  }
  const std::string device = DeviceAfter(waiting, "device ");
  if (device.empty()) return Kebab(waiting, 3);
  if (absl::StrContains(waiting, "held by session")) return "session-holds-" + device;
  if (absl::StrContains(waiting, "being submitted")) return "submission-first-" + device;
  if (absl::StrContains(waiting, "goes first to")) return "job-ahead-" + device;
  if (absl::StrContains(waiting, " runs ")) return "job-holds-" + device;
  return Kebab(waiting, 3);
}

// A status code name at the start ("DATA_LOSS: ...") names the error; so does
// a message of three words or fewer ("daemon restarted"); else the job's
// status code, else the message's first three words.
std::string ErrorSlug(absl::string_view line, int32_t code) {
  const size_t colon = line.find(':');
  if (colon != absl::string_view::npos && colon > 0) {
    absl::string_view head = line.substr(0, colon);
    bool code_name = true;
    for (char c : head) code_name = code_name && (absl::ascii_isupper(c) || c == '_');
    if (code_name) return Kebab(head, 4);
  }
  int words = 0;
  bool in_word = false;
  for (char c : line) {
    const bool space = absl::ascii_isspace(c);
    words += !space && !in_word;
    in_word = !space;
  }
  if (words <= 3) return Kebab(line, 3);
  const auto status = static_cast<absl::StatusCode>(code);
  if (status != absl::StatusCode::kOk && status != absl::StatusCode::kUnknown) {
    return Kebab(absl::StatusCodeToString(status), 4);
  }
  return Kebab(line, 3);
}

}  // namespace

std::string ReasonText(const v1::Job& job) {
  const std::string& text =
      job.state() == v1::QUEUED && !job.waiting().empty() ? job.waiting() : job.error();
  return text.substr(0, text.find('\n'));
}

std::string ReasonSlug(const v1::Job& job) {
  if (job.state() == v1::QUEUED && !job.waiting().empty()) return WaitingSlug(job.waiting());
  const std::string line = ReasonText(job);
  if (line.empty()) return "-";
  return ErrorSlug(line, job.error_code());
}

}  // namespace overlap::client
