// `overlapctl graph`: a layer graph from a model's dimensions, written without
// a daemon when tp is given, and run by the real overlapd (host backend, 4
// devices) end to end.
#include <sstream>
#include <string>
#include <vector>

#include "common/graph_parser.h"
#include "common/graph_validator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/harness.h"

namespace overlap::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// A small model, so that the host backend runs its layer in seconds.
const std::vector<std::string> kSmallModel = {"graph",   "--hidden", "256",   "--ffn", "512",
                                              "--heads", "4",        "--seq", "128"};

std::vector<std::string> With(std::vector<std::string> args, const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

TEST(GraphCliTest, TheModelsLayerRunsOnTheDaemonsGpus) {
  TempDir dir;
  Daemon daemon(dir.path());
  ASSERT_TRUE(daemon.Start());
  const std::string file = dir.File("layer.yaml");
  // No --tp: the graph splits over the daemon's 4 devices.
  RunResult graph = daemon.Ctl(
      With(kSmallModel, {"--pass", "both", "--grads", "--mlp", "plain", "--output-file", file}));
  ASSERT_EQ(graph.exit_code, 0) << Describe(graph);
  EXPECT_EQ(graph.out, "");
  EXPECT_EQ(graph.err, "wrote 18 ops of custom-layer-forward-backward-tp4 to " + file + "\n");

  RunResult submit = daemon.Ctl({"submit", file, "--wait", "--json"}, std::chrono::seconds(120));
  ASSERT_EQ(submit.exit_code, 0) << Describe(submit) << daemon.Log();
  const nlohmann::json job = nlohmann::json::parse(submit.out);
  EXPECT_EQ(job["state"], "SUCCEEDED");
  const nlohmann::json& ops = job["result"]["ops"];
  ASSERT_EQ(ops.size(), 18u) << job["result"].dump();
  std::vector<std::string> ids;
  for (const nlohmann::json& op : ops) {
    ids.push_back(op["id"]);
    EXPECT_TRUE(op["verified"].get<bool>()) << op.dump();
    EXPECT_LE(op["max_rel_error"].get<double>(), op["tolerance"].get<double>()) << op.dump();
  }
  EXPECT_THAT(ids, ::testing::ElementsAre("qkv", "proj", "fc1", "fc2", "fc2_dgrad", "fc2_wgrad",
                                          "fc1_x_gather", "fc1_dgrad", "fc1_wgrad", "fc2_grads",
                                          "fc1_grads", "proj_dgrad", "proj_wgrad", "qkv_x_gather",
                                          "qkv_dgrad", "qkv_wgrad", "proj_grads", "qkv_grads"));
  // The plain MLP's fc1 is ffn wide: 128 x 256 x 512.
  EXPECT_EQ(ops[2]["m"], 128);
  EXPECT_EQ(ops[2]["n"], 512);
}

// --tp 2 on a daemon of 4 devices: the graph names devices 0 and 1 and runs
// at tp 2 there, not over every device of the daemon.
TEST(GraphCliTest, ATp2GraphRunsAtTp2OnADaemonOfFourDevices) {
  TempDir dir;
  Daemon daemon(dir.path());
  ASSERT_TRUE(daemon.Start());
  const std::string file = dir.File("tp2.yaml");
  RunResult graph =
      daemon.Ctl(With(kSmallModel, {"--tp", "2", "--mlp", "plain", "--output-file", file}));
  ASSERT_EQ(graph.exit_code, 0) << Describe(graph);
  EXPECT_THAT(ReadFileOrEmpty(file), HasSubstr("\ndevices: [0, 1]\n"));
  RunResult submit = daemon.Ctl({"submit", file, "--wait", "--json"}, std::chrono::seconds(120));
  ASSERT_EQ(submit.exit_code, 0) << Describe(submit) << daemon.Log();
  const nlohmann::json job = nlohmann::json::parse(submit.out);
  EXPECT_EQ(job["state"], "SUCCEEDED");
  EXPECT_EQ(job["devices"], nlohmann::json::array({0, 1})) << job.dump();
  for (const nlohmann::json& op : job["result"]["ops"]) EXPECT_EQ(op["tp"], 2) << op.dump();
}

TEST(GraphCliTest, WithTpNoDaemonIsNeededAndJsonIsTheSameGraph) {
  TempDir dir;
  const std::string nobody = "unix:" + dir.File("nobody.sock");
  RunResult yaml = Overlapctl(dir.path(), nobody, With(kSmallModel, {"--tp", "2"}));
  ASSERT_EQ(yaml.exit_code, 0) << Describe(yaml);
  EXPECT_THAT(yaml.out, StartsWith("# One custom decoder layer's tensor-parallel ops, forward.\n"));
  RunResult json = Overlapctl(dir.path(), nobody, With(kSmallModel, {"--tp", "2", "--json"}));
  ASSERT_EQ(json.exit_code, 0) << Describe(json);
  absl::StatusOr<JobSpec> from_yaml = ParseJobSpec(yaml.out);
  absl::StatusOr<JobSpec> from_json = ParseJobSpec(json.out);
  ASSERT_TRUE(from_yaml.ok()) << from_yaml.status();
  ASSERT_TRUE(from_json.ok()) << from_json.status();
  EXPECT_EQ(from_yaml->name, "custom-layer-tp2");
  EXPECT_EQ(from_json->name, from_yaml->name);
  ASSERT_EQ(from_json->ops.size(), 4u);
  for (size_t i = 0; i < from_json->ops.size(); ++i) {
    const OpSpec& a = from_yaml->ops[i];
    const OpSpec& b = from_json->ops[i];
    EXPECT_EQ(std::tuple(a.id, a.type, a.m, a.k, a.n, a.after),
              std::tuple(b.id, b.type, b.m, b.k, b.n, b.after));
  }

  // A Hugging Face config.json gives the dimensions; --name names the graph.
  const std::string config = dir.File("config.json");
  WriteFileOrDie(config, R"({"model_type": "llama", "hidden_act": "silu", "hidden_size": 256,
                             "intermediate_size": 512, "num_attention_heads": 4})");
  RunResult from_config =
      Overlapctl(dir.path(), nobody,
                 {"graph", "--config", config, "--seq", "128", "--tp", "2", "--name", "tiny"});
  ASSERT_EQ(from_config.exit_code, 0) << Describe(from_config);
  absl::StatusOr<JobSpec> tiny = ParseJobSpec(from_config.out);
  ASSERT_TRUE(tiny.ok()) << tiny.status();
  EXPECT_EQ(tiny->name, "tiny-layer-tp2");
  ASSERT_EQ(tiny->ops.size(), 4u);
  EXPECT_EQ(tiny->ops[2].n, 1024) << "gated: fc1 is 2 x ffn";

  RunResult models = Overlapctl(dir.path(), nobody, {"graph", "--list-models"});
  ASSERT_EQ(models.exit_code, 0) << Describe(models);
  EXPECT_THAT(models.out,
              HasSubstr("\nllama3-70b     8192  28672     64         8       128  gated\n"));
}

// --dp 2: a tp 2 x dp 2 mesh, the gradient all-reduces across the replicas,
// the same in YAML and JSON, with the layer-step settings given.
TEST(GraphCliTest, WithDpTheGraphIsAMeshAndItsGradientsCrossTheReplicas) {
  TempDir dir;
  const std::string nobody = "unix:" + dir.File("nobody.sock");
  const std::vector<std::string> args =
      With(kSmallModel, {"--tp", "2", "--dp", "2", "--pass", "backward", "--grads", "--chunk-kib",
                         "64", "--defer-bound-ms", "5"});
  RunResult yaml = Overlapctl(dir.path(), nobody, args);
  ASSERT_EQ(yaml.exit_code, 0) << Describe(yaml);
  EXPECT_THAT(yaml.out, HasSubstr("\n# mesh: tp 2 x dp 2 (4 GPUs): "));
  RunResult json = Overlapctl(dir.path(), nobody, With(args, {"--json"}));
  ASSERT_EQ(json.exit_code, 0) << Describe(json);
  for (const RunResult* r : {&yaml, &json}) {
    absl::StatusOr<JobSpec> spec = ParseJobSpec(r->out);
    ASSERT_TRUE(spec.ok()) << spec.status() << "\n" << r->out;
    EXPECT_EQ(spec->name, "custom-layer-backward-tp2-dp2");
    EXPECT_EQ(std::pair(spec->mesh.tp, spec->mesh.dp), std::pair(2, 2));
    EXPECT_EQ(std::tuple(spec->bucket_mib, spec->chunk_kib, spec->defer_bound_ms),
              std::tuple(25, 64, 5.0));
    std::vector<std::string> dp_ops;
    for (const OpSpec& op : spec->ops) {
      if (op.group == OpGroup::kDp) dp_ops.push_back(op.id);
    }
    EXPECT_THAT(dp_ops,
                ::testing::ElementsAre("fc2_grads", "fc1_grads", "proj_grads", "qkv_grads"));
    ValidationLimits limits;
    limits.device_count = 4;
    absl::StatusOr<std::vector<int>> devices = ValidateJobSpec(*spec, limits);
    EXPECT_TRUE(devices.ok()) << devices.status();
  }
}

// The same layer in bf16 and in fp8 through the daemon: both verified, and
// `compare` puts them side by side, naming the dtype as what differs.
TEST(GraphCliTest, AnFp8LayerRunsAndComparesWithItsBf16Twin) {
  TempDir dir;
  Daemon daemon(dir.path());
  ASSERT_TRUE(daemon.Start());
  std::vector<std::string> ids;
  for (const char* dtype : {"bf16", "fp8"}) {
    const std::string file = dir.File(std::string(dtype) + ".yaml");
    RunResult graph =
        daemon.Ctl(With(kSmallModel, {"--mlp", "plain", "--dtype", dtype, "--output-file", file}));
    ASSERT_EQ(graph.exit_code, 0) << Describe(graph);
    RunResult submit = daemon.Ctl({"submit", file, "--wait", "--json"}, std::chrono::seconds(120));
    ASSERT_EQ(submit.exit_code, 0) << Describe(submit) << daemon.Log();
    const nlohmann::json job = nlohmann::json::parse(submit.out);
    EXPECT_EQ(job["state"], "SUCCEEDED");
    for (const nlohmann::json& op : job["result"]["ops"]) {
      EXPECT_EQ(op["dtype"], dtype) << op.dump();
      EXPECT_TRUE(op["verified"].get<bool>()) << op.dump();
    }
    ids.push_back(job["id"]);
  }
  RunResult compare = daemon.Ctl({"compare", ids[0], ids[1]});
  ASSERT_EQ(compare.exit_code, 0) << Describe(compare);
  EXPECT_THAT(compare.out, HasSubstr("differs: dtype: bf16 -> fp8"));
  EXPECT_THAT(compare.out, HasSubstr("\nfc2 "));
}

TEST(GraphCliTest, BadModelsAreUsageErrorsAndAMissingDaemonIsNamed) {
  TempDir dir;
  const std::string nobody = "unix:" + dir.File("nobody.sock");
  struct Case {
    std::vector<std::string> args;
    int exit_code;
    std::string error;
  };
  for (const Case& c : std::vector<Case>{
           {{"graph", "--model", "llama2-7b", "--tp", "2"},
            64,
            "overlapctl: graph: model: unknown \"llama2-7b\" (known: llama3-8b"},
           {{"graph", "--hidden", "4096", "--tp", "2"},
            64,
            "overlapctl: graph: a custom model needs --hidden, --ffn and --heads"},
           {{"graph", "--model", "llama3-70b", "--tp", "3"},
            64,
            "overlapctl: graph: heads: 64 query heads do not split over tp = 3"},
           {{"graph", "--model", "llama3-70b", "--tp", "2", "--pass", "sideways"},
            64,
            "overlapctl: graph: pass: unknown \"sideways\""},
           {{"graph", "--model", "llama3-70b", "--tp", "2", "--mlp", "wide"},
            64,
            "overlapctl: graph: mlp: unknown \"wide\" (gated or plain)"},
           {{"graph", "--model", "llama3-70b", "--config", "config.json", "--tp", "2"},
            64,
            "overlapctl: graph: give --model or --config, not both"},
           {{"graph", "--config", "no-such.json", "--tp", "2"},
            64,
            "overlapctl: graph: cannot read no-such.json: No such file or directory"},
           {{"graph", "--model", "llama3-70b", "--dp", "3", "--devices", "0,1,2,3"},
            64,
            "overlapctl: graph: dp: 3 replicas do not split the 4 devices given evenly: give "
            "--tp"},
           {{"graph", "--model", "llama3-70b"},
            2,
            "overlapctl: graph: give --tp, or start overlapd so that its GPUs can be counted\n"
            "overlapctl: cannot reach overlapd at " +
                nobody},
       }) {
    SCOPED_TRACE(c.error);
    RunResult r = Overlapctl(dir.path(), nobody, c.args);
    EXPECT_EQ(r.exit_code, c.exit_code) << Describe(r);
    EXPECT_THAT(r.err, StartsWith(c.error));
    EXPECT_EQ(r.out, "");
  }
}

}  // namespace
}  // namespace overlap::testing
