// What the layer step (layer_step.h) holds on each device while it runs: every
// op's own buffers at once, an aliased input not counted (it is its
// producer's output: layer_members.h, EdgeFor and OwnBufferSizes, the same
// rule the step allocates by). Admission weighs it (JobBytesPerDevice).
#pragma once

#include <cstdint>

#include "common/graph.h"
#include "server/ops/op_context.h"

namespace overlap::runner {

// The buffers `op`'s own run allocates over groups of `degree`: the largest
// of its candidate schedules' (op_phases.h, CreateOpContext).
ops::BufferSizes OpAloneSizes(const OpSpec& op, int degree, const Mesh& mesh);

// Bytes per device of `spec`'s layer step over `device_count` devices: each
// op's buffers for the largest of its candidate schedules (its own run
// allocates those), less what an alias edge reads in place. Saturates at
// INT64_MAX.
int64_t LayerStepBytesPerDevice(const JobSpec& spec, int device_count);

}  // namespace overlap::runner
