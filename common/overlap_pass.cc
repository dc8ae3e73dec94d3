#include "common/overlap_pass.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace overlap {
namespace {

// The ops that read `id`'s output.
int ReadersOf(const JobSpec& spec, const std::string& id) {
  int readers = 0;
  for (const OpSpec& op : spec.ops) readers += op.input == id;
  return readers;
}

std::string SeedIdOf(const std::string& seed_id, const std::string& id) {
  return seed_id.empty() ? id : seed_id;
}

// Every reference to `from` (input and after) becomes `to`, each `after` once.
void Rename(JobSpec& spec, const std::string& from, const std::string& to) {
  for (OpSpec& op : spec.ops) {
    if (op.input == from) op.input = to;
    std::vector<std::string> after;
    for (std::string& dep : op.after) {
      if (dep == from) dep = to;
      if (dep != op.id && std::find(after.begin(), after.end(), dep) == after.end()) {
        after.push_back(dep);
      }
    }
    op.after = std::move(after);
  }
}

// A collective and the GEMM beside it, by index, and what they would make.
struct Pair {
  size_t gemm, collective;
  OpType fused;
};

// Why `pair` may not be fused; "" when it may.
std::string WhyNot(const JobSpec& spec, const Pair& pair) {
  const OpSpec& gemm = spec.ops[pair.gemm];
  const OpSpec& collective = spec.ops[pair.collective];
  if (!spec.fuse) return "fuse: false";
  const bool gather = collective.type == OpType::kAllGather;
  const OpSpec& reader = gather ? gemm : collective;
  if (reader.activation != Activation::kNone) {
    return absl::StrCat("an activation (", ActivationName(reader.activation), ") between them");
  }
  const OpSpec& producer = gather ? collective : gemm;
  if (const int readers = ReadersOf(spec, producer.id); readers > 1) {
    return absl::StrCat(producer.id, "'s output feeds ", readers, " ops");
  }
  if (gemm.group != collective.group) {
    return absl::StrCat("they run over different groups (", OpGroupName(gemm.group), ", ",
                        OpGroupName(collective.group), ")");
  }
  const bool agree = gather ? collective.m == gemm.m && collective.n == gemm.k
                            : collective.m == gemm.m && collective.n == gemm.n;
  if (!agree) {
    return absl::StrCat("shapes disagree: ", OpTypeName(collective.type), " [", collective.m,
                        ", ", collective.n, "], gemm [", gemm.m, ", ", gather ? gemm.k : gemm.n,
                        "]");
  }
  if (collective.algorithm != AllReduceAlgorithm::kDefault) {
    return absl::StrCat("its algorithm is pinned (", AllReduceAlgorithmName(collective.algorithm),
                        ")");
  }
  return "";
}

// The pairs the dataflow holds, in file order of their GEMMs.
std::vector<Pair> PairsOf(const JobSpec& spec) {
  std::map<std::string, size_t> index_of;
  for (size_t i = 0; i < spec.ops.size(); ++i) index_of[spec.ops[i].id] = i;
  std::vector<Pair> pairs;
  for (size_t g = 0; g < spec.ops.size(); ++g) {
    const OpSpec& gemm = spec.ops[g];
    if (gemm.type != OpType::kGemm) continue;
    if (!gemm.row_parallel) {
      const auto it = index_of.find(gemm.input);
      if (it != index_of.end() && spec.ops[it->second].type == OpType::kAllGather) {
        pairs.push_back({g, it->second, OpType::kAgGemm});
      }
      continue;
    }
    for (size_t c = 0; c < spec.ops.size(); ++c) {
      const OpSpec& reader = spec.ops[c];
      if (reader.input != gemm.id) continue;
      if (reader.type == OpType::kReduceScatter) pairs.push_back({g, c, OpType::kGemmRs});
      if (reader.type == OpType::kAllReduce) pairs.push_back({g, c, OpType::kGemmAr});
    }
  }
  return pairs;
}

}  // namespace

JobSpec FuseCollectives(JobSpec spec) {
  spec.fusions.clear();
  std::vector<size_t> removed;
  for (const Pair& pair : PairsOf(spec)) {
    OpSpec& gemm = spec.ops[pair.gemm];
    const OpSpec collective = spec.ops[pair.collective];
    FusionNote note{gemm.id, collective.id, OpTypeName(pair.fused), false, WhyNot(spec, pair)};
    if (!note.why_not.empty()) {
      spec.fusions.push_back(std::move(note));
      continue;
    }
    note.fused = true;
    spec.fusions.push_back(std::move(note));
    const bool gather = pair.fused == OpType::kAgGemm;
    // The fused op reads what the pair read: the gather's input, or the GEMM's.
    const OpSpec& reader = gather ? collective : gemm;
    OpSpec fused = gemm;
    fused.type = pair.fused;
    fused.row_parallel = false;
    fused.mode = OverlapMode::kAuto;
    fused.chunks = 0;
    fused.transport = collective.transport;
    fused.input = reader.input;
    fused.activation = reader.activation;
    fused.a_seed_id = SeedIdOf(reader.a_seed_id, reader.id);
    fused.w_seed_id = SeedIdOf(gemm.w_seed_id, gemm.id);
    for (const std::string& dep : collective.after) {
      if (std::find(fused.after.begin(), fused.after.end(), dep) == fused.after.end()) {
        fused.after.push_back(dep);
      }
    }
    gemm = std::move(fused);
    removed.push_back(pair.collective);
    Rename(spec, collective.id, gemm.id);
  }
  std::sort(removed.rbegin(), removed.rend());
  for (const size_t i : removed) spec.ops.erase(spec.ops.begin() + static_cast<std::ptrdiff_t>(i));
  return spec;
}

JobSpec UnfuseCollectives(const JobSpec& spec, std::vector<size_t>* origin) {
  JobSpec out = spec;
  out.ops.clear();
  out.fusions.clear();
  if (origin != nullptr) origin->clear();
  std::map<std::string, std::string> last_of;  // a split op's id -> its pair's last op
  for (size_t i = 0; i < spec.ops.size(); ++i) {
    const OpSpec& op = spec.ops[i];
    auto emit = [&](OpSpec part) {
      out.ops.push_back(std::move(part));
      if (origin != nullptr) origin->push_back(i);
    };
    if (op.type != OpType::kAgGemm && op.type != OpType::kGemmRs && op.type != OpType::kGemmAr) {
      emit(op);
      continue;
    }
    OpSpec collective;
    collective.group = op.group;
    collective.transport = op.transport;
    collective.m = op.m;
    OpSpec gemm = op;
    gemm.type = OpType::kGemm;
    gemm.mode = OverlapMode::kAuto;
    gemm.chunks = 0;
    gemm.transport = Transport::kAuto;
    if (op.type == OpType::kAgGemm) {
      collective.id = op.id + "_gather";
      collective.type = OpType::kAllGather;
      collective.n = op.k;
      collective.input = op.input;
      collective.activation = op.activation;
      collective.after = op.after;
      gemm.input = collective.id;
      gemm.activation = Activation::kNone;
      gemm.after = {collective.id};
      emit(std::move(collective));
      emit(std::move(gemm));
      continue;
    }
    collective.id = op.id + (op.type == OpType::kGemmRs ? "_rs" : "_ar");
    collective.type = op.type == OpType::kGemmRs ? OpType::kReduceScatter : OpType::kAllReduce;
    collective.n = op.n;
    collective.input = op.id;
    collective.after = {op.id};
    gemm.row_parallel = true;
    last_of[op.id] = collective.id;
    emit(std::move(gemm));
    emit(std::move(collective));
  }
  // What read or waited on a split op reads or waits on its pair's last op.
  for (OpSpec& op : out.ops) {
    const bool own_pair = last_of.count(op.input) > 0 && last_of.at(op.input) == op.id;
    if (!own_pair && last_of.count(op.input) > 0) op.input = last_of.at(op.input);
    for (std::string& dep : op.after) {
      if (last_of.count(dep) > 0 && last_of.at(dep) != op.id) dep = last_of.at(dep);
    }
  }
  return out;
}

}  // namespace overlap
