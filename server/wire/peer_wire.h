// The peer calls about parts (server/peer/part_calls.h) on the wire
// (peer.proto), both ways: the one mapping the peer listener (on the way in)
// and GrpcPeerLink (on the way out) use.
//
// ToProto(FromProto(m)) equals m for every m that ToProto made
// (tests/wire/peer_wire_test.cc). Pure functions; thread-safe.
#pragma once

#include "absl/status/statusor.h"
#include "overlap/v1/peer.pb.h"
#include "server/peer/part_calls.h"

namespace overlap::wire {

v1::GlobalJobId ToProto(const peer::GlobalJobId& id);
peer::GlobalJobId FromProto(const v1::GlobalJobId& id);

// The decisions go one DecidedSchedule per op, in op id order. Read back:
// INVALID_ARGUMENT naming the op for a name that is no mode, transport or
// algorithm, an auto, a chunk count below 1, or an op decided twice (whether
// they fit the graph is ops::CheckDecidedSchedules's to say); each note cut
// to kMaxDecisionNote printable characters (text from another daemon, only
// ever shown).
inline constexpr int kMaxDecisionNote = 400;
v1::AdmitPartRequest ToProto(const peer::PartRequest& request);
absl::StatusOr<peer::PartRequest> FromProto(const v1::AdmitPartRequest& request);

v1::CancelPartRequest ToProto(const peer::CancelRequest& request);
peer::CancelRequest FromProto(const v1::CancelPartRequest& request);

v1::HoldPartRequest ToProto(const peer::HoldRequest& request);
peer::HoldRequest FromProto(const v1::HoldPartRequest& request);

v1::HoldPartResponse ToProto(const peer::HoldAnswer& answer);
peer::HoldAnswer FromProto(const v1::HoldPartResponse& answer);

v1::ReportPartRequest ToProto(const peer::PartReport& report);
peer::PartReport FromProto(const v1::ReportPartRequest& report);

v1::StoreSetRequest ToStoreSet(const peer::StoreCall& call);
v1::StoreGetRequest ToStoreGet(const peer::StoreCall& call);
peer::StoreCall FromProto(const v1::StoreSetRequest& request);
peer::StoreCall FromProto(const v1::StoreGetRequest& request);

}  // namespace overlap::wire
