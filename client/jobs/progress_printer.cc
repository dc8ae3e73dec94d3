#include "client/jobs/progress_printer.h"

#include <algorithm>
#include <atomic>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/format/report.h"

namespace overlap::client {
namespace {

constexpr char kClearLine[] = "\r\033[K";
constexpr char kCandidate[] = ", candidate ";

std::string Seconds(int64_t ms) { return FormatDuration(std::max<int64_t>(0, ms) / 1000.0); }

// An autotune phase ("autotune round 1/2, candidate 3/7: chunked/4/nccl") as its
// round alone and the number of candidates; other phases as they are, 0.
std::pair<std::string, int> PhaseLine(const std::string& phase) {
  const size_t at = phase.find(kCandidate);
  if (phase.rfind("autotune ", 0) != 0 || at == std::string::npos) return {phase, 0};
  const size_t slash = phase.find('/', at);
  const size_t colon = phase.find(':', at);
  int candidates = 0;
  if (slash != std::string::npos && colon != std::string::npos && colon > slash) {
    absl::SimpleAtoi(phase.substr(slash + 1, colon - slash - 1), &candidates);
  }
  return {phase.substr(0, at), candidates};
}

std::atomic<bool>& Quiet() {
  static std::atomic<bool> quiet{false};
  return quiet;
}

// A phase without its count ("timed 2/4" -> "timed", "autotune round 1/2" ->
// "autotune round"): off a terminal each kind of phase is one line per op.
std::string PhaseKind(const std::string& phase) {
  const size_t space = phase.rfind(' ');
  if (space == std::string::npos) return phase;
  const std::string last = phase.substr(space + 1);
  const size_t slash = last.find('/');
  int done = 0, total = 0;
  const bool counted = slash != std::string::npos &&
                       absl::SimpleAtoi(last.substr(0, slash), &done) &&
                       absl::SimpleAtoi(last.substr(slash + 1), &total);
  return counted ? phase.substr(0, space) : phase;
}

}  // namespace

void SetQuietProgress(bool quiet) { Quiet().store(quiet); }
bool QuietProgress() { return Quiet().load(); }

std::ostream& ProgressStream(std::ostream& err) {
  static std::ostream dropped(nullptr);  // no buffer: every write is dropped
  return QuietProgress() ? dropped : err;
}

ProgressPrinter::ProgressPrinter(std::ostream& out, bool is_tty, std::function<int64_t()> now_ms)
    : out_(out), is_tty_(is_tty), quiet_(QuietProgress()), now_ms_(std::move(now_ms)) {
  if (!now_ms_) now_ms_ = [] { return absl::ToUnixMillis(absl::Now()); };
}

void ProgressPrinter::Finish() {
  if (counter_shown_) {
    out_ << kClearLine << std::flush;
    counter_shown_ = false;
  }
}

std::string ProgressPrinter::Timing(const v1::Job& job) const {
  if (job.start_time_ms() <= 0) return "";
  const int64_t now = now_ms_();
  std::string text = absl::StrCat("; ", Seconds(now - job.start_time_ms()), " elapsed");
  const int done = job.result().ops_size();
  const int count = job.progress().op_count();
  if (done > 0 && count > done && last_op_done_ms_ > job.start_time_ms()) {
    // The ops so far took this long each, on average; the current one has run
    // since the last finished.
    const int64_t per_op = (last_op_done_ms_ - job.start_time_ms()) / done;
    const int64_t left = per_op * (count - done) - (now - last_op_done_ms_);
    absl::StrAppend(&text,
                    left > 0 ? absl::StrCat(", about ", Seconds(left), " left") : ", finishing");
  }
  return text;
}

void ProgressPrinter::Update(const v1::Job& job) {
  if (quiet_) return;
  // Ops that finished since the last event first: a final state comes after them.
  for (; ops_done_ < job.result().ops_size(); ++ops_done_) {
    const v1::OpResult& op = job.result().ops(ops_done_);
    last_op_done_ms_ = now_ms_();
    Finish();
    out_ << "job " << job.id() << " " << op.id() << " done: " << ScheduleLabel(op) << ", step "
         << FormatMs(op.step().median_ms()) << " ms, ";
    if (IsCollectiveAlone(op)) {
      out_ << "busbw " << FormatRate(op.busbw_gbps()) << " GB/s\n";
    } else if (!HasCommToHide(op)) {  // a GEMM alone, or at one rank
      out_ << FormatRate(op.tflops()) << " TFLOP/s\n";
    } else {
      out_ << "hidden " << FormatHidden(op.hidden_fraction()) << "%\n";
    }
  }
  if (first_ || job.state() != state_) {
    Finish();
    out_ << "job " << job.id() << " " << JobStateName(job.state()) << "\n";
    state_ = job.state();
    first_ = false;
  }
  if (job.state() != v1::RUNNING || !job.has_progress()) return;
  const v1::Progress& progress = job.progress();
  if (progress.phase().empty()) return;
  const auto [phase, candidates] = PhaseLine(progress.phase());
  // On a terminal every phase gets its line; in a log, each kind once per op
  // (the repeats of "gemm_alone k/4", "timed k/4" ... would be most of it).
  const std::string key = absl::StrCat(progress.op_index(), "/", progress.op_id(), "/",
                                       is_tty_ ? phase : PhaseKind(phase));
  const bool shown = is_tty_ ? key == step_key_ : !phases_shown_.insert(key).second;
  if (!shown) {
    Finish();
    out_ << "job " << job.id() << " [" << progress.op_index() + 1 << "/" << progress.op_count()
         << "] " << progress.op_id() << " " << phase;
    if (candidates > 0) {
      out_ << " (" << candidates << (candidates == 1 ? " candidate" : " candidates") << ")";
    } else if (progress.iterations() > 0) {
      out_ << " (" << progress.iterations()
           << (progress.iterations() == 1 ? " iteration" : " iterations") << ")";
    }
    out_ << Timing(job) << "\n";
    step_key_ = key;
  }
  if (is_tty_ && progress.iterations() > 0) {
    out_ << kClearLine << "  " << FormatProgress(progress) << std::flush;
    counter_shown_ = true;
  }
}

}  // namespace overlap::client
