// The coordinator's schedule decisions (ops::DecidedSchedules) as a part
// request carries them (v1::DecidedSchedule, peer.proto), and back.
#pragma once

#include "absl/status/statusor.h"
#include "overlap/v1/peer.pb.h"
#include "server/ops/decided_schedules.h"

namespace overlap::cluster {

// Adds one DecidedSchedule per op to `request`, in op id order.
// `notes` (may be null) gives each its reason.
void AddDecidedSchedules(const ops::DecidedSchedules& decided, const ops::DecisionNotes* notes,
                         v1::AdmitPartRequest& request);

// The request's decisions. INVALID_ARGUMENT for a name that is no mode,
// transport or algorithm, an auto, a chunk count below 1, or an op decided
// twice; whether they fit the graph is ops::CheckDecidedSchedules's to say.
absl::StatusOr<ops::DecidedSchedules> DecidedSchedulesOf(const v1::AdmitPartRequest& request);
// Their reasons, each cut to kMaxDecisionNote printable characters (text
// from another daemon, only ever shown).
inline constexpr int kMaxDecisionNote = 400;
ops::DecisionNotes DecisionNotesOf(const v1::AdmitPartRequest& request);

}  // namespace overlap::cluster
