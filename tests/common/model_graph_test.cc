#include "common/model_graph.h"

#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/graph_parser.h"
#include "common/graph_validator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace overlap {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

// What a test compares of an op: id, type, m, k, n and its dependencies.
using OpRow =
    std::tuple<std::string, std::string, int64_t, int64_t, int64_t, std::vector<std::string>>;

std::vector<OpRow> Rows(const std::vector<OpSpec>& ops) {
  std::vector<OpRow> rows;
  for (const OpSpec& op : ops)
    rows.emplace_back(op.id, OpTypeName(op.type), op.m, op.k, op.n, op.after);
  return rows;
}

const OpSpec* Find(const JobSpec& spec, const std::string& id) {
  for (const OpSpec& op : spec.ops) {
    if (op.id == id) return &op;
  }
  return nullptr;
}

JobSpec DeployGraph(const std::string& name) {
  std::ifstream in(std::string(OVERLAP_SOURCE_DIR) + "/deploy/graphs/" + name);
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<JobSpec> spec = ParseJobSpec(text.str(), name);
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : JobSpec{};
}

ModelDims Preset(const std::string& name) {
  absl::StatusOr<ModelDims> model = FindModelPreset(name);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *model : ModelDims{};
}

LayerGraphOptions Tp(int tp, LayerPass pass = LayerPass::kForward) {
  LayerGraphOptions options;
  options.tp = tp;
  options.pass = pass;
  return options;
}

TEST(ModelGraphTest, Llama70bForwardWithSequenceParallelism) {
  absl::StatusOr<LayerGraph> graph = BuildLayerGraph(Preset("llama3-70b"), Tp(2));
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_EQ(graph->spec.name, "llama3-70b-layer-tp2");
  EXPECT_THAT(graph->spec.devices, ElementsAre(0, 1));
  using V = std::vector<std::string>;
  // qkv: 64 + 2 x 8 heads of 128; fc1: gate and up, 2 x 28672.
  EXPECT_THAT(Rows(graph->spec.ops),
              ElementsAre(OpRow{"qkv", "ag_gemm", 8192, 8192, 10240, V{}},
                          OpRow{"proj", "gemm_rs", 8192, 8192, 8192, V{"qkv"}},
                          OpRow{"fc1", "ag_gemm", 8192, 8192, 57344, V{"proj"}},
                          OpRow{"fc2", "gemm_rs", 8192, 28672, 8192, V{"fc1"}}));
  ASSERT_EQ(graph->op_notes.size(), graph->spec.ops.size());
  EXPECT_THAT(graph->op_notes[2], HasSubstr("gate and up"));
}

// The hand-written graphs in deploy/graphs model the MLP ungated (fc1 the up
// projection alone): the generator, told so, writes the same ops.
TEST(ModelGraphTest, MatchesTheHandWrittenLlama70bGraphs) {
  ModelDims plain = Preset("llama3-70b");
  plain.gated = false;
  absl::StatusOr<LayerGraph> forward = BuildLayerGraph(plain, Tp(2));
  ASSERT_TRUE(forward.ok()) << forward.status();
  EXPECT_EQ(Rows(forward->spec.ops), Rows(DeployGraph("llama70b-layer.yaml").ops));

  absl::StatusOr<LayerGraph> backward = BuildLayerGraph(plain, Tp(2, LayerPass::kBackward));
  ASSERT_TRUE(backward.ok()) << backward.status();
  const JobSpec hand = DeployGraph("llama70b-mlp-backward.yaml");
  for (const auto& [ours, theirs] : {std::pair<std::string, std::string>{"fc2_dgrad", "fc2_dgrad"},
                                     {"fc2_wgrad", "fc2_wgrad"},
                                     {"fc1_x_gather", "x_gather"},
                                     {"fc1_dgrad", "fc1_dgrad"},
                                     {"fc1_wgrad", "fc1_wgrad"}}) {
    SCOPED_TRACE(ours);
    const OpSpec* a = Find(backward->spec, ours);
    const OpSpec* b = Find(hand, theirs);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(std::tuple(a->type, a->m, a->k, a->n), std::tuple(b->type, b->m, b->k, b->n));
  }
}

// deploy/graphs/llama70b-mlp.yaml is the gated block as the generator writes
// it: fc1 gate and up, fc2 reading fc1's output through SwiGLU.
TEST(ModelGraphTest, MatchesTheWiredLlama70bMlpGraph) {
  absl::StatusOr<LayerGraph> layer = BuildLayerGraph(Preset("llama3-70b"), Tp(2));
  ASSERT_TRUE(layer.ok()) << layer.status();
  const JobSpec hand = DeployGraph("llama70b-mlp.yaml");
  for (const char* id : {"fc1", "fc2"}) {
    SCOPED_TRACE(id);
    const OpSpec* a = Find(layer->spec, id);
    const OpSpec* b = Find(hand, id);
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(std::tuple(a->type, a->m, a->k, a->n, a->input, a->activation),
              std::tuple(b->type, b->m, b->k, b->n, b->input, b->activation));
  }
  EXPECT_EQ(Find(hand, "fc2")->activation, Activation::kSwiglu);
}

TEST(ModelGraphTest, BackwardOrderAndDependencies) {
  LayerGraphOptions options = Tp(2, LayerPass::kBoth);
  options.grads = true;
  absl::StatusOr<LayerGraph> graph = BuildLayerGraph(Preset("llama3-8b"), options);
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_EQ(graph->spec.name, "llama3-8b-layer-forward-backward-tp2");
  using V = std::vector<std::string>;
  // h 4096, T 8192, q 4096, qkv 4096 + 2 x 8 x 128 = 6144, fc1 2 x 14336.
  EXPECT_THAT(
      Rows(graph->spec.ops),
      ElementsAre(OpRow{"qkv", "ag_gemm", 8192, 4096, 6144, V{}},
                  OpRow{"proj", "gemm_rs", 8192, 4096, 4096, V{"qkv"}},
                  OpRow{"fc1", "ag_gemm", 8192, 4096, 28672, V{"proj"}},
                  OpRow{"fc2", "gemm_rs", 8192, 14336, 4096, V{"fc1"}},
                  OpRow{"fc2_dgrad", "ag_gemm", 8192, 4096, 14336, V{"fc2"}},
                  OpRow{"fc2_wgrad", "gemm", 4096, 8192, 14336, V{"fc2_dgrad"}},
                  OpRow{"fc1_x_gather", "all_gather", 8192, 0, 4096, V{"fc2_dgrad"}},
                  OpRow{"fc1_dgrad", "gemm_rs", 8192, 28672, 4096, V{"fc2_dgrad"}},
                  OpRow{"fc1_wgrad", "gemm", 4096, 8192, 28672, V{"fc1_dgrad", "fc1_x_gather"}},
                  OpRow{"fc2_grads", "all_reduce", 4096, 0, 7168, V{"fc2_wgrad"}},
                  OpRow{"fc1_grads", "all_reduce", 4096, 0, 14336, V{"fc1_wgrad"}},
                  OpRow{"proj_dgrad", "ag_gemm", 8192, 4096, 4096, V{"fc1_dgrad"}},
                  OpRow{"proj_wgrad", "gemm", 4096, 8192, 4096, V{"proj_dgrad"}},
                  OpRow{"qkv_x_gather", "all_gather", 8192, 0, 4096, V{"proj_dgrad"}},
                  OpRow{"qkv_dgrad", "gemm_rs", 8192, 6144, 4096, V{"proj_dgrad"}},
                  OpRow{"qkv_wgrad", "gemm", 4096, 8192, 6144, V{"qkv_dgrad", "qkv_x_gather"}},
                  OpRow{"proj_grads", "all_reduce", 4096, 0, 2048, V{"proj_wgrad"}},
                  OpRow{"qkv_grads", "all_reduce", 4096, 0, 3072, V{"qkv_wgrad"}}));
}

// Each forward GEMM has a data and a weight gradient of its own size: the
// backward pass does twice the forward's FLOPs, with and without SP.
TEST(ModelGraphTest, BackwardDoesTwiceTheForwardFlops) {
  for (const ModelDims& model : ModelPresets()) {
    for (bool sp : {true, false}) {
      SCOPED_TRACE(model.name + (sp ? " sp" : " no sp"));
      LayerGraphOptions options = Tp(8);
      options.sequence_parallel = sp;
      absl::StatusOr<LayerGraph> forward = BuildLayerGraph(model, options);
      options.pass = LayerPass::kBackward;
      absl::StatusOr<LayerGraph> backward = BuildLayerGraph(model, options);
      ASSERT_TRUE(forward.ok()) << forward.status();
      ASSERT_TRUE(backward.ok()) << backward.status();
      double forward_flops = 0, backward_flops = 0;
      for (const OpSpec& op : forward->spec.ops) forward_flops += OpFlops(op);
      for (const OpSpec& op : backward->spec.ops) backward_flops += OpFlops(op);
      EXPECT_GT(forward_flops, 0);
      EXPECT_DOUBLE_EQ(backward_flops, 2 * forward_flops);
    }
  }
}

TEST(ModelGraphTest, WithoutSequenceParallelismNothingIsGatheredOrScattered) {
  LayerGraphOptions options = Tp(4, LayerPass::kBoth);
  options.sequence_parallel = false;
  absl::StatusOr<LayerGraph> graph = BuildLayerGraph(Preset("gpt3-175b"), options);
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_EQ(graph->spec.name, "gpt3-175b-layer-forward-backward-nosp-tp4");
  std::vector<std::string> types;
  for (const OpSpec& op : graph->spec.ops) types.push_back(OpTypeName(op.type));
  EXPECT_THAT(types, ElementsAre("gemm", "gemm_ar", "gemm", "gemm_ar",  // forward
                                 "gemm", "gemm", "gemm_ar", "gemm",     // MLP backward
                                 "gemm", "gemm", "gemm_ar", "gemm"));   // attention
  // GPT-3's MLP is plain: fc1 is 4h wide, not 2 x ffn.
  EXPECT_EQ(Find(graph->spec, "fc1")->n, 49152);
  EXPECT_EQ(Find(graph->spec, "qkv")->n, 3 * 12288);
}

// The YAML (with its comments) parses back to the same graph, and the graph
// passes the daemon's validator, for every preset, pass and layout.
TEST(ModelGraphTest, YamlRoundTripsAndValidates) {
  for (const ModelDims& model : ModelPresets()) {
    for (LayerPass pass : {LayerPass::kForward, LayerPass::kBackward, LayerPass::kBoth}) {
      for (bool sp : {true, false}) {
        SCOPED_TRACE(model.name + " pass " + std::to_string(static_cast<int>(pass)) +
                     (sp ? " sp" : " no sp"));
        LayerGraphOptions options = Tp(2, pass);
        options.sequence_parallel = sp;
        options.grads = pass != LayerPass::kForward;
        options.devices = {2, 3};
        options.dtype = DType::kF16;
        absl::StatusOr<LayerGraph> graph = BuildLayerGraph(model, options);
        ASSERT_TRUE(graph.ok()) << graph.status();
        absl::StatusOr<JobSpec> parsed = ParseJobSpec(LayerGraphYaml(*graph), "generated");
        ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << LayerGraphYaml(*graph);
        EXPECT_EQ(parsed->name, graph->spec.name);
        EXPECT_THAT(parsed->devices, ElementsAre(2, 3));
        EXPECT_EQ(parsed->dtype, DType::kF16);
        EXPECT_EQ(Rows(parsed->ops), Rows(graph->spec.ops));
        ValidationLimits limits;
        limits.device_count = 4;
        absl::StatusOr<std::vector<int>> group = ValidateJobSpec(*parsed, limits);
        EXPECT_TRUE(group.ok()) << group.status();
      }
    }
  }
}

// dp 2: a tp 2 x dp 2 mesh; the layer's ops stay on each replica's tp group
// and each weight gradient's shard is all-reduced across the replicas. The
// YAML says so and parses back to the same graph, which holds on 4 devices.
TEST(ModelGraphTest, DataParallelGradientsRunAcrossTheReplicas) {
  LayerGraphOptions options = Tp(2, LayerPass::kBackward);
  options.dp = 2;
  options.grads = true;
  options.chunk_kib = 512;
  options.defer_bound_ms = 12.5;
  absl::StatusOr<LayerGraph> graph = BuildLayerGraph(Preset("llama3-8b"), options);
  ASSERT_TRUE(graph.ok()) << graph.status();
  const JobSpec& spec = graph->spec;
  EXPECT_EQ(spec.name, "llama3-8b-layer-backward-tp2-dp2");
  EXPECT_EQ(std::pair(spec.mesh.tp, spec.mesh.dp), std::pair(2, 2));
  EXPECT_THAT(graph->header, Contains("mesh: tp 2 x dp 2 (4 GPUs): each replica's tp group runs "
                                      "the layer; the gradient all-reduces run across the "
                                      "replicas (group dp)."));
  // m = h = 4096; n = each weight's width over tp: fc2 14336, fc1 28672, proj 4096, qkv 6144.
  std::vector<std::tuple<std::string, int64_t, int64_t>> grads;
  for (size_t i = 0; i < spec.ops.size(); ++i) {
    const OpSpec& op = spec.ops[i];
    if (op.id.size() > 6 && op.id.substr(op.id.size() - 6) == "_grads") {
      EXPECT_EQ(op.group, OpGroup::kDp) << op.id;
      EXPECT_THAT(graph->op_notes[i], HasSubstr("all-reduced across the 2 data-parallel replicas"));
      grads.emplace_back(op.id, op.m, op.n);
    } else {
      EXPECT_EQ(op.group, OpGroup::kTp) << op.id;
    }
  }
  using G = std::tuple<std::string, int64_t, int64_t>;
  EXPECT_THAT(grads, ElementsAre(G{"fc2_grads", 4096, 7168}, G{"fc1_grads", 4096, 14336},
                                 G{"proj_grads", 4096, 2048}, G{"qkv_grads", 4096, 3072}));

  const std::string yaml = LayerGraphYaml(*graph);
  EXPECT_THAT(yaml, HasSubstr("\nmesh: {tp: 2, dp: 2}\n"));
  EXPECT_THAT(yaml, HasSubstr("\nchunk_kib: 512\ndefer_bound_ms: 12.5\nops:\n"));
  EXPECT_THAT(yaml, Not(HasSubstr("bucket_mib")));
  EXPECT_THAT(yaml, Not(HasSubstr("group: tp")));
  absl::StatusOr<JobSpec> parsed = ParseJobSpec(yaml, "generated");
  ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << yaml;
  EXPECT_EQ(parsed->name, spec.name);
  EXPECT_EQ(std::pair(parsed->mesh.tp, parsed->mesh.dp), std::pair(2, 2));
  EXPECT_EQ(std::tuple(parsed->bucket_mib, parsed->chunk_kib, parsed->defer_bound_ms),
            std::tuple(25, 512, 12.5));
  EXPECT_EQ(Rows(parsed->ops), Rows(spec.ops));
  for (size_t i = 0; i < spec.ops.size(); ++i) {
    EXPECT_EQ(parsed->ops[i].group, spec.ops[i].group) << spec.ops[i].id;
  }
  ValidationLimits limits;
  limits.device_count = 4;
  absl::StatusOr<std::vector<int>> devices = ValidateJobSpec(*parsed, limits);
  EXPECT_TRUE(devices.ok()) << devices.status();
  limits.device_count = 2;
  EXPECT_FALSE(ValidateJobSpec(*parsed, limits).ok()) << "a tp 2 x dp 2 mesh needs 4 devices";

  // Given devices are the mesh's, tp-major.
  options.devices = {4, 5, 6, 7};
  options.bucket_mib = 0;
  graph = BuildLayerGraph(Preset("llama3-8b"), options);
  ASSERT_TRUE(graph.ok()) << graph.status();
  parsed = ParseJobSpec(LayerGraphYaml(*graph), "generated");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_THAT(parsed->devices, ElementsAre(4, 5, 6, 7));
  EXPECT_EQ(parsed->bucket_mib, 0);
  limits.device_count = 8;
  EXPECT_TRUE(ValidateJobSpec(*parsed, limits).ok());

  // A mesh without gradients: the layer on each replica, nothing across them.
  options = Tp(2);
  options.dp = 4;
  graph = BuildLayerGraph(Preset("llama3-8b"), options);
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_EQ(graph->spec.name, "llama3-8b-layer-tp2-dp4");
  EXPECT_THAT(graph->header, Contains("mesh: tp 2 x dp 4 (8 GPUs): each replica's tp group runs "
                                      "the layer."));
  for (const OpSpec& op : graph->spec.ops) EXPECT_EQ(op.group, OpGroup::kTp) << op.id;
}

// A graph's tp is its own: without devices given, a tp N graph names devices
// 0..N-1, so that a daemon with more devices runs it at tp N and one with fewer
// refuses it with both counts; a mesh names none (it says how many devices it
// needs, and the daemon refuses any other count).
TEST(ModelGraphTest, ATpGraphNamesTheDevicesItAssumed) {
  for (int tp : {1, 2, 4}) {
    SCOPED_TRACE(tp);
    absl::StatusOr<LayerGraph> graph = BuildLayerGraph(Preset("llama3-8b"), Tp(tp));
    ASSERT_TRUE(graph.ok()) << graph.status();
    std::vector<int> first(tp);
    for (int d = 0; d < tp; ++d) first[d] = d;
    EXPECT_EQ(graph->spec.devices, first);
    absl::StatusOr<JobSpec> parsed = ParseJobSpec(LayerGraphYaml(*graph), "generated");
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(parsed->devices, first);
    ValidationLimits limits;
    limits.device_count = 8;
    absl::StatusOr<std::vector<int>> group = ValidateJobSpec(*parsed, limits);
    ASSERT_TRUE(group.ok()) << group.status();
    EXPECT_EQ(*group, first) << "a tp " << tp << " graph never widens to the daemon's 8 devices";
    if (tp > 1) {
      limits.device_count = tp - 1;
      EXPECT_THAT(ValidateJobSpec(*parsed, limits).status().message(),
                  HasSubstr(absl::StrCat("device ", tp - 1, " does not exist (this node has ",
                                         tp - 1, ")")));
    }
  }
  LayerGraphOptions mesh = Tp(2);
  mesh.dp = 2;
  absl::StatusOr<LayerGraph> graph = BuildLayerGraph(Preset("llama3-8b"), mesh);
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_THAT(graph->spec.devices, IsEmpty());
  ValidationLimits limits;
  limits.device_count = 8;
  const absl::Status wider = ValidateJobSpec(graph->spec, limits).status();
  EXPECT_EQ(wider.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(wider.message(), HasSubstr("tp x dp = 2 x 2 = 4 devices, but the job has 8"));
}

// dp 1 (the default): no mesh, the gradient all-reduces over the tp group as
// before, and a YAML with none of the mesh's keys or layer-step settings.
TEST(ModelGraphTest, OneReplicaDeclaresNoMesh) {
  LayerGraphOptions options = Tp(2, LayerPass::kBackward);
  options.grads = true;
  absl::StatusOr<LayerGraph> graph = BuildLayerGraph(Preset("llama3-8b"), options);
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_EQ(graph->spec.name, "llama3-8b-layer-backward-tp2");
  EXPECT_FALSE(graph->spec.mesh.declared());
  for (const OpSpec& op : graph->spec.ops) EXPECT_EQ(op.group, OpGroup::kTp) << op.id;
  EXPECT_EQ(Find(graph->spec, "fc1_grads")->n, 14336);
  const std::string yaml = LayerGraphYaml(*graph);
  for (const char* key : {"mesh", "group", "bucket_mib", "chunk_kib", "defer_bound_ms"}) {
    EXPECT_THAT(yaml, Not(HasSubstr(key)));
  }
  EXPECT_THAT(graph->op_notes[5], HasSubstr("a stand-in for data parallelism"));
}

// fp8: every preset's layer holds at tp 1, 2, 4 and 8 (each rank's widths in
// 16s), the header says what runs in bf16, and a width that is not refuses.
TEST(ModelGraphTest, Fp8LayersHoldAndSayWhatStaysBf16) {
  for (const ModelDims& model : ModelPresets()) {
    for (int tp : {1, 2, 4, 8}) {
      LayerGraphOptions options = Tp(tp, LayerPass::kBoth);
      options.grads = true;
      options.dtype = DType::kFP8;
      absl::StatusOr<LayerGraph> graph = BuildLayerGraph(model, options);
      ASSERT_TRUE(graph.ok()) << model.name << " tp " << tp << ": " << graph.status();
      EXPECT_THAT(LayerGraphYaml(*graph),
                  HasSubstr("# fp8: E4M3 GEMM inputs, gathered in fp8; GEMM outputs, "
                            "reduce-scatters and gradient all-reduces in bf16.\n# Wired"));
    }
  }
  ModelDims narrow = Preset("llama3-8b");
  narrow.name = "narrow";
  narrow.ffn = 14344;  // 7172 per rank at tp 2
  LayerGraphOptions options = Tp(2);
  options.dtype = DType::kFP8;
  absl::StatusOr<LayerGraph> graph = BuildLayerGraph(narrow, options);
  ASSERT_FALSE(graph.ok());
  EXPECT_THAT(graph.status().message(), HasSubstr("is not a multiple of 16, which fp8 GEMMs need"));
  options.dtype = DType::kBF16;
  EXPECT_TRUE(BuildLayerGraph(narrow, options).ok());
}

// Two layers: the forward up, the backward down, each layer's ops after the
// last of the one before; ids name the layer.
TEST(ModelGraphTest, LayersRunOneAfterAnother) {
  LayerGraphOptions options = Tp(2, LayerPass::kBoth);
  options.layers = 2;
  options.grads = true;
  absl::StatusOr<LayerGraph> two = BuildLayerGraph(Preset("llama3-8b"), options);
  options.layers = 1;
  absl::StatusOr<LayerGraph> one = BuildLayerGraph(Preset("llama3-8b"), options);
  ASSERT_TRUE(two.ok()) << two.status();
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(two->spec.name, "llama3-8b-2-layers-forward-backward-tp2");
  ASSERT_EQ(two->spec.ops.size(), 2 * one->spec.ops.size());
  std::vector<std::string> ids;
  for (const OpSpec& op : two->spec.ops) ids.push_back(op.id);
  EXPECT_EQ(ids[0], "l0.qkv");
  EXPECT_EQ(ids[4], "l1.qkv");
  EXPECT_EQ(ids[8], "l1.fc2_dgrad");
  EXPECT_EQ(ids[8 + 14], "l0.fc2_dgrad");
  using V = std::vector<std::string>;
  EXPECT_EQ(Find(two->spec, "l0.qkv")->after, V{});
  EXPECT_EQ(Find(two->spec, "l1.qkv")->after, V{"l0.fc2"});
  EXPECT_EQ(Find(two->spec, "l1.fc2_dgrad")->after, V{"l1.fc2"});
  EXPECT_EQ(Find(two->spec, "l0.fc2_dgrad")->after, V{"l1.qkv_dgrad"});
  EXPECT_EQ(Find(two->spec, "l0.fc1_wgrad")->after, (V{"l0.fc1_dgrad", "l0.fc1_x_gather"}));
  EXPECT_EQ(Find(two->spec, "l1.qkv_grads")->after, V{"l1.qkv_wgrad"});
  // Each layer's ops have the one layer's shapes.
  for (size_t i = 0; i < one->spec.ops.size(); ++i) {
    const OpSpec& a = one->spec.ops[i];
    const OpSpec* b = Find(two->spec, "l1." + a.id);
    ASSERT_NE(b, nullptr) << a.id;
    EXPECT_EQ(std::tuple(a.type, a.m, a.k, a.n), std::tuple(b->type, b->m, b->k, b->n)) << a.id;
  }
  ValidationLimits limits;
  limits.device_count = 2;
  EXPECT_TRUE(ValidateJobSpec(two->spec, limits).ok());
}

// A name YAML would misread (a colon, a hash) is written quoted.
TEST(ModelGraphTest, AnyNameSurvivesTheYaml) {
  ModelDims model = Preset("llama3-8b");
  model.name = "my model: v2 # \"final\"";
  absl::StatusOr<LayerGraph> graph = BuildLayerGraph(model, Tp(2));
  ASSERT_TRUE(graph.ok()) << graph.status();
  absl::StatusOr<JobSpec> parsed = ParseJobSpec(LayerGraphYaml(*graph));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->name, "my model: v2 # \"final\"-layer-tp2");
}

TEST(ModelGraphTest, ShapesThatDoNotSplitNameTheDimension) {
  struct Case {
    ModelDims model;
    LayerGraphOptions options;
    std::string error;
  };
  ModelDims custom;
  custom.hidden = 1000;
  custom.ffn = 4096;
  custom.heads = 16;
  LayerGraphOptions odd_tokens = Tp(2);
  odd_tokens.seq = 4095;
  LayerGraphOptions zero_seq = Tp(2);
  zero_seq.seq = 0;
  LayerGraphOptions grads_forward = Tp(2);
  grads_forward.grads = true;
  LayerGraphOptions no_layers = Tp(2);
  no_layers.layers = 0;
  LayerGraphOptions many_layers = Tp(2);
  many_layers.layers = 17;
  LayerGraphOptions wrong_devices = Tp(2);
  wrong_devices.devices = {0, 1, 2};
  ModelDims huge = Preset("llama3-8b");
  huge.ffn = int64_t{1} << 40;
  ModelDims two_lines = Preset("llama3-8b");
  two_lines.name = "a\nb";
  ModelDims gqa = Preset("llama3-8b");
  gqa.kv_heads = 5;
  LayerGraphOptions odd_dp = Tp(2, LayerPass::kBackward);
  odd_dp.dp = 3;
  odd_dp.grads = true;
  LayerGraphOptions zero_dp = Tp(2);
  zero_dp.dp = 0;
  LayerGraphOptions huge_dp = Tp(2);
  huge_dp.dp = 1 << 20;
  LayerGraphOptions mesh_devices = Tp(2);
  mesh_devices.dp = 2;
  mesh_devices.devices = {0, 1};
  LayerGraphOptions negative_chunk = Tp(2);
  negative_chunk.chunk_kib = -1;
  LayerGraphOptions negative_bound = Tp(2);
  negative_bound.defer_bound_ms = -0.5;
  for (const Case& c : std::vector<Case>{
           {Preset("llama3-70b"), Tp(3), "heads: 64 query heads do not split over tp = 3"},
           {Preset("llama3-70b"), Tp(16), "kv_heads: 8 key/value heads do not split over tp = 16"},
           {Preset("llama3-70b"), Tp(0), "tp: must be at least 1 (got 0)"},
           {Preset("llama3-70b"), odd_tokens,
            "seq: 4095 tokens (seq x micro_batch) do not split over tp = 2"},
           {Preset("llama3-70b"), zero_seq, "seq: must be positive (got 0)"},
           {custom, Tp(2), "head_dim: hidden 1000 does not split into 16 heads"},
           {gqa, Tp(1), "kv_heads: 32 query heads do not group evenly over 5 key/value heads"},
           {Preset("llama3-8b"), grads_forward, "grads: weight gradients come with the backward"},
           {Preset("llama3-8b"), wrong_devices, "devices: 3 devices given for tp = 2"},
           {Preset("llama3-8b"), no_layers, "layers: must be 1 to 16 (got 0)"},
           {two_lines, Tp(2), "name: must be a non-empty line of text"},
           {huge, Tp(2), "ffn: must be at most 16777216 (got 1099511627776)"},
           {Preset("llama3-8b"), many_layers, "layers: must be 1 to 16 (got 17)"},
           {Preset("llama3-8b"), odd_dp,
            "hidden: 4096 does not split over dp = 3 (the gradient all-reduces split it over "
            "the replicas)"},
           {Preset("llama3-8b"), zero_dp, "dp: must be at least 1 (got 0)"},
           {Preset("llama3-8b"), huge_dp, "dp: tp x dp = 2 x 1048576 is more than 65536 devices"},
           {Preset("llama3-8b"), mesh_devices, "devices: 2 devices given for tp x dp = 2 x 2 = 4"},
           {Preset("llama3-8b"), negative_chunk, "chunk_kib: must not be negative (got -1)"},
           {Preset("llama3-8b"), negative_bound,
            "defer_bound_ms: must be a non-negative number (got -0.5)"},
       }) {
    SCOPED_TRACE(c.error);
    absl::StatusOr<LayerGraph> graph = BuildLayerGraph(c.model, c.options);
    ASSERT_FALSE(graph.ok());
    EXPECT_EQ(graph.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(graph.status().message(), HasSubstr(c.error));
  }
}

TEST(ModelGraphTest, PresetsAndPassesByName) {
  absl::StatusOr<ModelDims> unknown = FindModelPreset("llama2-7b");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown.status().message(),
              HasSubstr("unknown \"llama2-7b\" (known: llama3-8b, llama3-70b, llama3-405b"));
  EXPECT_EQ(*ParseLayerPass("both"), LayerPass::kBoth);
  EXPECT_FALSE(ParseLayerPass("sideways").ok());
  // tp = 1: nothing to split, the graph still validates (its ops then run alone).
  EXPECT_TRUE(BuildLayerGraph(Preset("llama3-405b"), Tp(1, LayerPass::kBoth)).ok());
}

}  // namespace
}  // namespace overlap
