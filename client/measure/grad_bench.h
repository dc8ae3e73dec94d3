// `overlapctl bench --peers`: the data-parallel gradient all-reduces across
// daemons, in a layer step beside GEMMs, whole, bucketed, chunked (planned
// before the step: scheduler static) and dynamic (chunked, dispatched at run
// time).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/core/daemon_client.h"
#include "client/format/verify_cell.h"
#include "client/measure/bench.h"
#include "nlohmann/json.hpp"
#include "overlap/v1/overlap.pb.h"

namespace overlap::client {

// `bench --peers`: the data-parallel gradient all-reduces across daemons, in a
// layer step beside GEMMs, three ways. One graph over the mesh tp = devices
// per node x dp = nodes, the same for the three forms but for its layer-step
// keys: per gradient, `gemms_per_grad` GEMMs standing in for the backward
// that produces it, then its all-reduce across the nodes (group dp: each tp
// rank's shard, that many bytes), and as many GEMMs after the last (the rest
// of the backward). One job per form; then one that times alone what the
// bucketed and chunked forms sent (their buckets, their pieces), so that each
// form's all-reduces alone and bus bandwidth are of what it sent.
enum class GradForm { kWhole, kBucketed, kChunked, kDynamic };
std::string GradFormName(GradForm form);  // whole | bucketed | chunked | dynamic

struct GradBenchOptions {
  std::vector<std::string> nodes;   // peer addresses, this daemon's among them
  std::vector<int64_t> grad_bytes;  // empty = DefaultGradSizes(backend)
  BenchShape gemm;                  // op "gemm", global (n splits over tp); m 0 = the default
  int gemms_per_grad = 4;
  int bucket_mib = 25;       // the bucketed form's bucket_mib (PyTorch DDP's)
  int chunk_kib = 256;       // the chunked and dynamic forms' chunk_kib
  std::vector<int> devices;  // each node's; empty = every device
  std::string dtype = "bf16";
  int iterations = 20;
  int warmup = 5;
  uint64_t seed = 1234;
  bool verify = true;
};
// cuda: 1, 4, 16 and 64 MiB; host: 256 KiB, 1 MiB and 4 MiB.
std::vector<int64_t> DefaultGradSizes(const std::string& backend);
// 8192 x 8192 x 8192; on the host backend divided by kHostBenchShapeDivisor.
BenchShape DefaultGradGemm(const std::string& backend);
// "1MiB,4MiB": INVALID_ARGUMENT naming --grad-sizes when one is not a size.
absl::StatusOr<std::vector<int64_t>> ParseGradSizes(const std::string& text);
// INVALID_ARGUMENT naming the flag: fewer than two nodes, a size, GEMM, count,
// bucket or chunk that is not positive, fp8 or an unknown dtype.
absl::Status ValidateGradBenchOptions(const GradBenchOptions& options);
// The form's graph for `tp` devices per node (options complete: sizes, GEMM).
std::string BuildGradBenchSpec(const GradBenchOptions& options, GradForm form, int tp);

// What a form sent, from its job's layer deferrals: a whole gradient, a bucket
// of several, or one gradient in pieces; `m` x `n` is the all_reduce that
// went (one piece's), timed alone: its own op's time (whole), or the
// messages job's (times the pieces).
struct GradMessage {
  std::string op;   // the gradient's id, or bucket(grad0+grad1)
  std::string how;  // whole | bucketed | chunked
  int pieces = 1;
  int64_t m = 0, n = 0;
  double alone_ms = 0;  // 0 until timed
};
std::vector<GradMessage> GradMessages(const v1::Job& form_job, const GradBenchOptions& options);
// The job that times the buckets and pieces alone (ids msg-MxN, each shape
// once); "" when every message was a whole gradient.
std::string BuildGradMessagesSpec(const GradBenchOptions& options,
                                  const std::vector<GradMessage>& messages, int tp);

struct GradBenchRow {
  GradForm form = GradForm::kWhole;
  std::string job_id;
  std::vector<GradMessage> messages;
  double step_ms = 0, without_ms = 0, exposed_ms = 0;
  double hidden = 0;          // the daemon's layer_deferred_hidden_fraction
  double whole_alone_ms = 0;  // the gradients' whole all-reduces alone: its base
  double sent_alone_ms = 0, sent_bytes = 0, algbw_gbps = 0, busbw_gbps = 0;  // of what it sent
  VerifyTally verify;      // every op of the form's job and of what it sent, timed alone
  std::string layer_note;  // why the job has no layer step, when it has none
};
// A form's row from its job and the messages job (null: none ran).
GradBenchRow FoldGradForm(GradForm form, const v1::Job& job, const v1::Job* messages_job,
                          const GradBenchOptions& options);
std::string FormatGradBench(const std::vector<GradBenchRow>& rows, const v1::Job& first,
                            const GradBenchOptions& options, int tp);
nlohmann::json GradBenchJson(const v1::Job& first, const v1::GetNodeInfoResponse& node,
                             const v1::GetNodeInfoResponse* node_after,
                             const std::vector<GradBenchRow>& rows, const GradBenchOptions& options,
                             int tp);
int RunGradBench(DaemonClient& client, const GradBenchOptions& options,
                 const std::string& json_file, bool json, bool err_is_tty, std::ostream& out,
                 std::ostream& err);

// Submits, follows with progress on `err`, prints the table (or JSON), writes
// `json_file` when given. Exit status as the other commands.
int RunBench(DaemonClient& client, const BenchOptions& options, const std::string& json_file,
             bool json, bool err_is_tty, std::ostream& out, std::ostream& err);

}  // namespace overlap::client
