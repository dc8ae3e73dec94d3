#include "client/jobs/progress_printer.h"

#include "absl/strings/str_cat.h"
#include "client/format/report.h"

namespace overlap::client {
namespace {

constexpr char kClearLine[] = "\r\033[K";

}  // namespace

void ProgressPrinter::Finish() {
  if (counter_shown_) {
    out_ << kClearLine << std::flush;
    counter_shown_ = false;
  }
}

void ProgressPrinter::Update(const v1::Job& job) {
  // Ops that finished since the last event first: a final state comes after them.
  for (; ops_done_ < job.result().ops_size(); ++ops_done_) {
    const v1::OpResult& op = job.result().ops(ops_done_);
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
  const std::string key =
      absl::StrCat(progress.op_index(), "/", progress.op_id(), "/", progress.phase());
  if (key != step_key_) {
    Finish();
    out_ << "job " << job.id() << " [" << progress.op_index() + 1 << "/" << progress.op_count()
         << "] " << progress.op_id() << " " << progress.phase();
    if (progress.iterations() > 0) {
      out_ << " (" << progress.iterations()
           << (progress.iterations() == 1 ? " iteration)" : " iterations)");
    }
    out_ << "\n";
    step_key_ = key;
  }
  if (is_tty_ && progress.iterations() > 0) {
    out_ << kClearLine << "  " << FormatProgress(progress) << std::flush;
    counter_shown_ = true;
  }
}

}  // namespace overlap::client
