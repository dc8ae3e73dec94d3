// Seeded random layer graphs through the job runner on the host backend, with
// the hazard checker on: 2 to 6 ops of every type (tests/random_op_util.h),
// each waiting on a random set of the ops before it, tp 2 to 4, buckets on or
// off. Every op must run alone and verify, and the layer step must run the
// whole graph in an order that keeps every dependency (on the side streams and
// in buckets too), defer only collectives alone, and verify every output again.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "server/runner/job_runner.h"
#include "tests/host_engine_util.h"
#include "tests/job_result_util.h"
#include "tests/random_op_util.h"

namespace overlap::runner {
namespace {

JobSpec RandomGraph(std::mt19937& rng, int tp) {
  JobSpec spec;
  spec.name = "random";
  spec.dtype = DType::kF32;
  spec.iterations = 2;
  spec.warmup = 1;
  spec.bucket_mib = RandomInt(rng, 0, 1);
  spec.timeline = RandomInt(rng, 0, 1) == 1;
  for (int d = 0; d < tp; ++d) spec.devices.push_back(d);
  const std::vector<OpType> types = {OpType::kAgGemm,       OpType::kGemmRs,    OpType::kGemmAr,
                                     OpType::kGemm,         OpType::kAllGather, OpType::kAllReduce,
                                     OpType::kReduceScatter};
  const int count = RandomInt(rng, 2, 6);
  for (int i = 0; i < count; ++i) {
    OpSpec op = RandomOp(rng, tp, types, absl::StrCat("op", i));
    for (int before = 0; before < i; ++before) {
      if (RandomInt(rng, 0, 2) == 0) op.after.push_back(absl::StrCat("op", before));
    }
    spec.ops.push_back(op);
  }
  return spec;
}

std::string Describe(const JobSpec& spec) {
  std::string out = absl::StrCat("tp ", spec.devices.size(), ", bucket ", spec.bucket_mib, ":");
  for (const OpSpec& op : spec.ops) {
    absl::StrAppend(&out, " ", op.id, "=", DescribeOp(op));
    if (!op.after.empty()) absl::StrAppend(&out, " after ", absl::StrJoin(op.after, "+"));
    absl::StrAppend(&out, ";");
  }
  return out;
}

// The ids in a deferred entry: a bucket's members, or the op itself.
std::vector<std::string> BucketMembers(const std::string& entry) {
  const std::string prefix = "bucket(";
  if (entry.rfind(prefix, 0) != 0 || entry.back() != ')') return {entry};
  return absl::StrSplit(entry.substr(prefix.size(), entry.size() - prefix.size() - 1), '+');
}

// Per op, every op it waits on, directly or through others.
std::map<std::string, std::set<std::string>> TransitiveWaits(const JobSpec& spec) {
  std::map<std::string, std::set<std::string>> waits;
  for (const OpSpec& op : spec.ops) {  // ops only wait on earlier ones here
    for (const std::string& before : op.after) {
      waits[op.id].insert(before);
      waits[op.id].insert(waits[before].begin(), waits[before].end());
    }
    waits[op.id];
  }
  return waits;
}

TEST(RandomGraphsTest, EveryDrawnGraphRunsInOrderAndVerifies) {
  // With this seed, 4 of the 24 graphs caught buckets that merged an
  // all-reduce with one it waits on, or fired past an op that waits on one.
  std::mt19937 rng(2);
  auto engine = CheckedHostEngine(4);
  for (int g = 0; g < 24; ++g) {
    const JobSpec spec = RandomGraph(rng, RandomInt(rng, 2, 4));
    SCOPED_TRACE(absl::StrCat("graph ", g, ": ", Describe(spec)));
    auto result = RunJobResult(*engine, spec, spec.devices, {}, nullptr);
    ASSERT_TRUE(result.ok()) << result.status();

    ASSERT_EQ(result->ops_size(), static_cast<int>(spec.ops.size()));
    for (const v1::OpResult& op : result->ops()) {
      EXPECT_TRUE(op.verified()) << op.id();
      EXPECT_LE(op.max_rel_error(), op.tolerance()) << op.id();
    }
    ASSERT_TRUE(result->layer_note().empty()) << result->layer_note();
    EXPECT_EQ(result->layer_step().samples(), spec.iterations);

    std::map<std::string, int> position;
    for (int i = 0; i < result->layer_order_size(); ++i) position[result->layer_order(i)] = i;
    ASSERT_EQ(position.size(), spec.ops.size());
    std::map<std::string, OpType> type_of;
    for (const OpSpec& op : spec.ops) {
      type_of[op.id] = op.type;
      for (const std::string& before : op.after) {
        EXPECT_LT(position[before], position[op.id]) << before << " before " << op.id;
      }
    }
    // A deferred entry is an op or a bucket of all-reduces, "bucket(a+b)",
    // listed in the order they run on the side streams. A bucket runs its
    // members as one, so none of them may wait on another, and an entry runs
    // after every deferred op it waits on.
    const std::map<std::string, std::set<std::string>> waits_on = TransitiveWaits(spec);
    std::map<std::string, int> side_position;
    for (int i = 0; i < result->layer_deferred_size(); ++i) {
      for (const std::string& id : BucketMembers(result->layer_deferred(i))) side_position[id] = i;
    }
    for (const std::string& entry : result->layer_deferred()) {
      const std::vector<std::string> members = BucketMembers(entry);
      for (const std::string& id : members) {
        ASSERT_EQ(type_of.count(id), 1u) << entry;
        EXPECT_TRUE(IsCollectiveOnly(type_of[id])) << id << " deferred";
        if (members.size() > 1) {
          EXPECT_EQ(type_of[id], OpType::kAllReduce) << entry;
        }
        for (const std::string& before : waits_on.at(id)) {
          if (side_position.count(before) == 0) continue;
          EXPECT_LT(side_position[before], side_position[id]) << id << " waits on " << before;
        }
        for (const std::string& other : members) {
          EXPECT_EQ(waits_on.at(id).count(other), 0u)
              << entry << ": " << id << " waits on " << other;
        }
      }
    }
  }
}

}  // namespace
}  // namespace overlap::runner
