// `overlapctl timeline`: where one traced iteration of each op spent its time
// (the daemon's ops/timeline.h), as a per-lane chart in the terminal and as a
// Chrome trace (the Trace Event Format that chrome://tracing and Perfetto
// open). Pure functions of the job; thread-safe.
#pragma once

#include <string>

#include "nlohmann/json.hpp"
#include "overlap/v1/overlap.pb.h"

namespace overlap::client {

// One rank of a traced iteration, summed over its spans.
struct RankTimeline {
  int rank = 0;
  double end_ms = 0;           // its last span's end
  double compute_busy_ms = 0;  // spans on the compute stream
  double waiting_ms = 0;       // end - compute busy: the compute stream idle, waiting
  double gemm_ms = 0;          // GEMM spans (on any stream)
  int gemms = 0;
  double transfer_ms = 0;  // copies, collectives and send/recv groups
  int transfers = 0;
  double reduce_ms = 0;  // reduction kernels
  int reduces = 0;
  double elementwise_ms = 0;  // activations and casts between a chain's GEMMs
  int elementwise = 0;
};

// Ranks in order; empty when the op has no timeline.
std::vector<RankTimeline> SummarizeTimeline(const v1::Timeline& timeline);

// The rank that finished last (the one that set the step); a zero RankTimeline
// for an empty timeline.
RankTimeline LastRank(const v1::Timeline& timeline);

// The report's line for an op with a timeline: the rank that finished last,
// its compute stream's GEMM time against the GEMM alone and its waiting, e.g.
// "fc2 timeline: rank 1 ran 4 GEMMs in 0.205 ms (GEMM alone 0.181 ms: +13.3%
// for pieces and contention), 2 transfers in 0.098 ms; its compute stream
// waited 0.026 ms; traced step 0.231 ms". "" without one.
std::string FormatTimelineNote(const v1::OpResult& op);
// The same for any timeline: `label` names it ("layer" compares the GEMMs with
// the sum of the ops' GEMMs alone, `gemm_alone_ms`; 0 leaves the comparison out).
std::string FormatTimelineNote(const std::string& label, const v1::Timeline& timeline,
                               double gemm_alone_ms);
// The layer step's line: its GEMMs against the sum of the ops' GEMMs alone;
// "" without a layer timeline.
std::string FormatLayerTimelineNote(const v1::JobResult& result);

// For each op with a timeline, then the layer step's (or only `op_id`'s where it
// is not empty; "layer" is the layer step's): a header, one chart row per rank
// and lane `width` characters wide (G GEMM, C copy, N collective, S send/recv,
// R reduction, . idle), each rank's sums, then every span with its start, end
// and length where there are at most kListedSpans or `all_spans` is set (else
// a line saying how many there are). "" when nothing matches.
inline constexpr int kListedSpans = 64;
std::string FormatTimelines(const v1::Job& job, const std::string& op_id, int width,
                            bool all_spans = false);

// A timeline with its per-rank sums, for JSON records (bench): {"step_ms",
// "enqueued_not_replayed", "ranks": [SummarizeTimeline], "spans": [...]}; null
// for an empty one.
nlohmann::json TimelineJson(const v1::Timeline& timeline);

// The Chrome trace of the job's timelines: one process per rank, one thread
// per lane, the ops' traced iterations one after another (each starting where
// the previous ended, plus a gap), every span an "X" event named by its op.
nlohmann::json ChromeTrace(const v1::Job& job, const std::string& op_id);

}  // namespace overlap::client
