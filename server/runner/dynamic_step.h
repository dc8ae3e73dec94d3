// scheduler: dynamic: the layer step with its deferred collectives (gradient
// all-reduces nothing in the step waits on) dispatched at run time.
//
// The main streams' work (GEMM ops, overlapped ops, critical collectives and
// their joins) is enqueued in the layer order as the planned step enqueues it.
// Each deferred collective instead marks where its input is ready (an event on
// the main streams right after the last op it waits on: LaneReadyPoints, not
// its place in the layer order) and goes to a DeferredDispatcher
// (deferred_dispatcher.h). Between ops and then until every chunk is out, the
// host polls the events: a collective becomes ready when its event completes,
// and its chunks go on the deferred lane (lowest-priority streams, their own
// communicator) only while no critical collective is queued or running on its
// devices, unless its deadline is near. Queued means queued on the device:
// its streams reached it (its start event completed), not merely enqueued by
// a host that runs ahead, or nothing deferred would go before the step's last
// collective. The step ends by joining the lane back into the main streams.
//
// Why it cannot deadlock: each lane's communicator sees its collectives in one
// order on every rank (the critical lane: the layer order, which every rank
// derives from the same figures, layer_step.h; the deferred lane: the
// dispatcher's fixed order, the layer order's deferred collectives, which no
// timing changes: a collective whose input is ready early still waits for the
// ones before it in that order); a deferred chunk
// waits only on events recorded before it on the main streams, whose work is
// all enqueued ahead of it and never waits on the deferred lane until the
// step's end, after the last chunk was issued; and the host's waits are
// bounded by the deadline, so the last chunk is issued even if critical work
// never ends. The waits with no bound of ours, for an input to become ready
// or for the lane's chunks in flight to finish, are capped by
// kDispatchReadyTimeout beyond the bound and then fail the step.
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/graph.h"
#include "server/engine/device_lanes.h"
#include "server/runner/deferred_dispatcher.h"
#include "server/runner/job_report.h"
#include "server/runner/layer_members.h"

namespace overlap::runner {

class TimelineEngine;

// How long, beyond defer_bound_ms, the dispatcher waits for a deferred
// collective's input (or its lane) before the step fails with
// DEADLINE_EXCEEDED (the work before it hung).
inline constexpr absl::Duration kDispatchReadyTimeout = absl::Seconds(120);

// Where each deferred-lane member's input is ready, by lane index (the
// members with on_deferred_lane, in the order of `members`): the index into
// `members` of the op after which the main streams record its ready event.
// That is the last of the ops it waits on (its `after` and `input`; a
// bucket's: every merged op's) where they all run on the main streams, so its
// chunks may start as soon as its producer finished; -1 when it waits on
// nothing (ready from the step's start); its own index where one of them runs
// on the side streams, which the main streams see only where it joins.
std::vector<int> LaneReadyPoints(const std::vector<Member>& members);

// One layer iteration, dispatched at run time; returns what the dispatcher did
// (by deferred-lane member, in the layer order). `tracer` labels spans.
//
// With `lanes` (the node's, where the job runs beside sessions: a job of
// priority_class deferred), the step's critical collectives count as critical
// work on their devices while pending, so that sessions' deferred chunks
// yield to them; its chunks yield to sessions' critical work as to its own,
// pass the node's deferred gate before they go (device_lanes.h), and their
// yields are counted there. Its engine must then be one that shares the
// devices with the lanes' thread (engine/lane_shared_engine.h).
absl::StatusOr<std::vector<DispatchRecord>> EnqueueLayerDynamic(
    std::vector<Member>& members, OpContext& main, double bound_ms,
    TimelineEngine* tracer = nullptr, engine::DeviceLanes* lanes = nullptr);

// What MeasureDispatch measured: the deferrals it was given, the dispatched
// ones with their figures, and each device's lane figures.
struct DispatchFigures {
  std::vector<LayerDeferral> deferrals;
  std::vector<LaneFigures> lanes;
  int iterations = 0;
};

// Runs `iterations` more dispatched iterations, each on its own, and returns
// each dispatched deferral's figures and the per-device lane figures from the
// devices' events.
absl::StatusOr<DispatchFigures> MeasureDispatch(std::vector<Member>& members, OpContext& main,
                                                double bound_ms, int iterations,
                                                std::vector<LayerDeferral> deferrals,
                                                engine::DeviceLanes* lanes = nullptr);

}  // namespace overlap::runner
