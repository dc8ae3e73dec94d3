#include "server/runner/layer_memory.h"

#include <limits>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "common/schedule.h"
#include "server/ops/op_context.h"
#include "server/runner/layer_members.h"
#include "server/runner/layer_plan.h"
#include "server/runner/op_phases.h"

namespace overlap::runner {
namespace {

// Each op as the edge rule sees it before the plan exists: on its groups'
// devices, as the plan places it, and whole (the plan cuts no op that
// another reads: layer_plan.cc, Cuttable).
std::vector<PlannedOp> Unplanned(const JobSpec& spec, int device_count) {
  std::vector<int> devices(device_count);
  std::iota(devices.begin(), devices.end(), 0);
  std::vector<PlannedOp> ops(spec.ops.size());
  for (size_t i = 0; i < spec.ops.size(); ++i) {
    ops[i].spec_index = static_cast<int>(i);
    ops[i].op = spec.ops[i];
    ops[i].devices = GroupMajorDevices(spec, devices, spec.ops[i].group);
  }
  return ops;
}

// The edge into `ops[i]` from its producer (OpSpec::input; `index` maps op
// ids to their places), as the step decides it (layer_step.cc, CreateMembers).
Edge EdgeInto(const JobSpec& spec, const std::vector<PlannedOp>& ops,
              const std::map<std::string, size_t>& index, size_t i, int device_count) {
  const OpSpec& op = ops[i].op;
  const auto producer = op.input.empty() ? index.end() : index.find(op.input);
  if (producer == index.end()) return Edge::kSeeded;
  const PlannedOp& from = ops[producer->second];
  return EdgeFor(ops[i], GroupSize(spec.mesh, op.group, device_count), from,
                 GroupSize(spec.mesh, from.op.group, device_count), spec.dtype);
}

}  // namespace

ops::BufferSizes OpAloneSizes(const OpSpec& op, int degree, const Mesh& mesh) {
  ops::BufferSizes sizes;
  for (const ops::Schedule& s : ops::CandidateSchedules(op, degree, true, mesh)) {
    sizes = ops::MaxSizes(sizes, ops::BuffersFor(op, degree, s));
  }
  return sizes;
}

int64_t LayerStepBytesPerDevice(const JobSpec& spec, int device_count) {
  const std::vector<PlannedOp> ops = Unplanned(spec, device_count);
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < ops.size(); ++i) index.emplace(ops[i].op.id, i);
  // In double: absurd shapes must saturate, not wrap, so that they are refused.
  double total = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    const OpSpec& op = ops[i].op;
    const int degree = GroupSize(spec.mesh, op.group, device_count);
    const Edge edge = EdgeInto(spec, ops, index, i, device_count);
    total += ops::BufferBytes(OwnBufferSizes(edge, op, degree, OpAloneSizes(op, degree, spec.mesh)),
                              ops::BufferDTypesFor(op.type, spec.dtype));
  }
  if (total >= 9.0e18) return std::numeric_limits<int64_t>::max();
  return static_cast<int64_t>(total);
}

}  // namespace overlap::runner
