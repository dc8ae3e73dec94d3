// Human-readable output of overlapctl: the per-op report table of a finished
// job, the job list, job details, node info and stats. Pure functions of the
// protobuf messages (no I/O, no clock: callers pass `now_ms`), so every row can
// be unit-tested without a daemon. Thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/byte_size.h"
#include "google/protobuf/repeated_field.h"
#include "nlohmann/json.hpp"
#include "overlap/v1/overlap.pb.h"

namespace overlap::client {

// "QUEUED", "RUNNING", ... ("UNSPECIFIED" for 0).
std::string JobStateName(v1::JobState state);
// SUCCEEDED, FAILED, CANCELLED or ABORTED.
bool IsFinalState(v1::JobState state);
// Whether the daemon could not read the job's stored data: the store rebuilt
// it from its row's plain columns (state, name, devices, times), its spec and
// results are lost, and it carries error_code DATA_LOSS. Lists show it DAMAGED.
bool IsDamaged(const v1::Job& job);
// "DAMAGED" for such a job, else its state's name.
std::string ListedState(const v1::Job& job);
// FAILED, CANCELLED or ABORTED: overlapctl exits 1 for these.
bool IsUnsuccessfulState(v1::JobState state);

// all_gather, reduce_scatter or all_reduce: a collective with no GEMM, whose
// GEMM alone, hidden % and TFLOP/s the report shows as "-".
bool IsCollectiveAlone(const v1::OpResult& op);
// gemm: a GEMM with no collective, whose transport, comm alone, exposed comm,
// hidden % and busbw the report shows as "-".
bool IsGemmAlone(const v1::OpResult& op);
// A GEMM with a collective that took time beside it: an op with a share of its
// communication hidden. Not so at one rank, where nothing moves (comm alone 0).
bool HasCommToHide(const v1::OpResult& op);
// "layer: 10.790 ms as one step (beside the ops after them on a side stream:
// grads to the end), 10.862 ms op by op: -0.7%; exposed comm 0.190 ms (op by
// op 0.262)\n", and a "layer order: ..." line when the step ran the ops in
// another order than the table's; the reason when there is no layer step; ""
// for a job of one op.
std::string FormatLayerStep(const v1::JobResult& result);
// "8192x8192x28672" (MxKxN, as --shapes and --shape take it; one word, for awk);
// "8192x-x8192" for a collective alone.
std::string FormatShape(const v1::OpResult& op);

// The report of a job: a header line (id, name, backend, tp, dtype), one row
// per op (op | type | shape | mode | chunks | transport | step ms | GEMM alone
// ms | comm alone ms | exposed comm ms | hidden % | TFLOP/s | busbw GB/s |
// verify), a total row (sum of step medians, sum of exposed comm), then one
// line per op whose mode was picked by auto, saying why, and one per op with a
// slow rank (SlowRankNote). A job without results
// prints the header and its state (and error).
std::string FormatReport(const v1::Job& job);
// submit --compare-fusion: a graph's job with the overlap pass and its job
// without, their ops, layer steps and exposed communication side by side.
std::string FormatFusionComparison(const v1::Job& fused, const v1::Job& unfused);
// submit --compare-scheduler: the layer step under static and under dynamic,
// how much of the deferred collectives hid, and whether the bounds held.
std::string FormatSchedulerComparison(const v1::Job& planned, const v1::Job& dynamic);

// A rank (or, in `overlapctl check`, a GPU) whose GEMM alone ran more than this
// fraction above the fastest one's is called out: all ranks run the same GEMM at once, and ranks
// agreed within ~2% on healthy H200s.
inline constexpr double kSlowRankFraction = 0.05;
// "rank 1 (device 3): GEMM alone 0.372 ms, 7.8% above rank 0 (device 2)'s
// 0.345 ms", for the slowest rank when it is past kSlowRankFraction; ""
// otherwise. `devices` is the TP group in rank order (may be empty).
std::string SlowRankNote(const std::vector<double>& gemm_alone_rank_ms,
                         const std::vector<int>& devices);
// Where the daemon ran several ranks per GPU (config ranks_per_gpu), a line
// saying what its figures are worth; "" for one rank per GPU. Slow-GPU notes
// are left out there: ranks of one GPU run their GEMMs one after the other.
std::string SharedGpuNote(int ranks_per_gpu);
// On the host backend, a line saying its timings mean nothing (its "GPUs" are
// threads sharing the CPU cores: only the checks count); "" on any other.
std::string HostTimingsNote(const std::string& backend);
// Shared with `overlapctl check`: the index of the smallest positive time
// (ms.size() when there is none), and the indices more than kSlowRankFraction
// above it.
size_t FastestIndex(const std::vector<double>& ms);
std::vector<size_t> SlowerThanFastest(const std::vector<double>& ms);

// "ring/p2p 0.365, ring/2/p2p 0.371 (+1.6%), ..., serial/nccl 0.499 (+36.7%)":
// what autotune measured of each candidate (best medians of its rounds), the
// fastest `shown` and serial over NCCL; "" when the op was not tuned.
std::string FormatCandidates(const v1::OpResult& op, size_t shown = 6);

// The header line of FormatReport.
std::string FormatReportHeader(const v1::Job& job);

// One line: "<id>  <STATE>  <name>" plus the error when there is one.
std::string FormatJobLine(const v1::Job& job);

// A table, one job per row: id, state, name, priority, devices, ops, submitted
// (UTC), duration, total step ms. A job spanning daemons is one row, under its
// global id, with its nodes: on its coordinator, that node's own part is left
// out (the coordinator's job stands for it); on another node, its part there
// is the row. Names are cut to fit only where tables are (TableWidth() > 0).
// REASON is one word (ReasonSlug, job_reason.h); under -o wide (WideOutput())
// a line per such job under the table gives its whole text.
std::string FormatJobList(const google::protobuf::RepeatedPtrField<v1::Job>& jobs, int64_t now_ms);

// `key: value` lines describing one job (times, devices, progress, error),
// followed by the report when the job has results.
std::string FormatJobDetail(const v1::Job& job, int64_t now_ms);

// "[2/3] fc2 timed 7/20": where a running job is.
std::string FormatProgress(const v1::Progress& progress);

std::string FormatNodeInfo(const v1::GetNodeInfoResponse& node);
// What holds a GPU's clocks back now, e.g. "power,thermal"; "-" for nothing or
// no telemetry.
std::string FormatClockLimits(const v1::Device& device);
// The device's NVML readings as JSON fields of `out` (sm_clock_mhz, ...,
// clock_limits, power_capped_s; health: device_health.h, where it has health
// readings); none where the backend has no telemetry.
void AddTelemetryJson(const v1::Device& device, nlohmann::json* out);
std::string FormatStats(const v1::GetStatsResponse& stats);

// Small helpers shared by the formatters, exposed for tests.
// The schedule an op ran, as the daemon names it ("chunked/4/p2p", "ring/p2p"),
// with "+graph" where its timed iterations replayed a CUDA graph.
std::string ScheduleLabel(const v1::OpResult& op);
// The transport an op ran, and an all_reduce's algorithm where it pinned one:
// "p2p", "nccl/tree" (the report's transport column, commbench's columns).
std::string TransportLabel(const v1::OpResult& op);

std::string FormatMs(double ms);             // "1.234"
std::string FormatHidden(double fraction);   // percent of the collective hidden, "66.7", 0-100
std::string FormatRate(double value);        // TFLOP/s or GB/s: "0.125", "812.4"
std::string FormatUtc(int64_t unix_ms);      // RFC 3339: "2026-11-30T12:34:56Z", "-" for 0
std::string FormatDuration(double seconds);  // "850 ms" below a second, else "12.3 s", "245.0 s"
std::string FormatSeconds(double seconds);   // "0.9", "245.0": a table cell under a *_S header

}  // namespace overlap::client
