// Helpers shared by the server tests: temporary directories and a fake job
// runner whose behaviour each job picks by name.
#pragma once

#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "server/jobs/job_record.h"
#include "server/runner/job_runner.h"

namespace overlap::testing {

// A fresh directory, removed with its contents on destruction.
class TempDir {
 public:
  TempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "overlapd-test-XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

struct RunRecord {
  std::string id;
  std::vector<int> devices;
  std::chrono::steady_clock::time_point start, end;
};

// Behaviour by job name: "sleep:MS" sleeps MS ms; "iter:N:MS" runs N iterations
// of MS ms each, reporting progress and honouring cancel; "fail" fails with
// FAILED_PRECONDITION; "abort" returns ABORTED; "block" runs until cancelled.
class FakeRunner {
 public:
  absl::StatusOr<runner::JobReport> Run(const jobs::JobRecord& job, const runner::RunHooks& hooks) {
    RunRecord record{job.id, job.devices, std::chrono::steady_clock::now(), {}};
    absl::StatusOr<runner::JobReport> result = RunBody(job, hooks);
    record.end = std::chrono::steady_clock::now();
    std::lock_guard<std::mutex> lock(mu_);
    records_.push_back(record);
    return result;
  }

  std::vector<RunRecord> records() {
    std::lock_guard<std::mutex> lock(mu_);
    return records_;
  }

 private:
  static absl::StatusOr<runner::JobReport> RunBody(const jobs::JobRecord& job,
                                                   const runner::RunHooks& hooks) {
    std::vector<std::string> parts = absl::StrSplit(job.name, ':');
    const std::string& kind = parts[0];
    auto arg = [&](size_t i) {
      int value = 0;
      if (i < parts.size()) (void)absl::SimpleAtoi(parts[i], &value);
      return value;
    };
    if (kind == "fail") return absl::FailedPreconditionError("verification failed: op ag");
    // "ops:N:then": N ops finish (each reported), then "fail" or "block" until cancelled.
    if (kind == "ops") {
      runner::JobReport header;
      for (int i = 0; i < arg(1); ++i) {
        runner::OpReport op;
        op.id = absl::StrCat("op", i);
        op.step = Summarize({static_cast<double>(i + 1)});
        op.timeline.emplace().spans.emplace_back().name = "gemm";
        header.total_step_ms += i + 1;
        if (hooks.on_op_done) hooks.on_op_done(header, op);
      }
      while (parts.size() > 2 && parts[2] == "block") {
        if (hooks.cancelled && hooks.cancelled()) return absl::CancelledError("run cancelled");
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      return absl::FailedPreconditionError(absl::StrCat("op op", arg(1), " failed"));
    }
    if (kind == "abort") return absl::AbortedError("communicator aborted: collective timeout");
    int iterations = 1, ms = 0;
    if (kind == "sleep") ms = arg(1);
    if (kind == "iter") iterations = arg(1), ms = arg(2);
    if (kind == "block") iterations = 1 << 30, ms = 2;
    for (int i = 0; i < iterations; ++i) {
      if (hooks.cancelled && hooks.cancelled()) return absl::CancelledError("run cancelled");
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      runner::Progress progress;
      progress.phase = "timed";
      progress.iteration = i + 1;
      progress.iterations = iterations;
      if (hooks.on_progress) hooks.on_progress(progress);
    }
    runner::JobReport result;
    result.backend = "fake";
    result.total_step_ms = ms;
    return result;
  }

  std::mutex mu_;
  std::vector<RunRecord> records_;
};

}  // namespace overlap::testing
