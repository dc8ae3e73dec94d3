// The export to TransformerEngine / Megatron-LM / torchtitan, checked against
// the frameworks' documented schema (TE's initialize_ub: layer names, the
// keys of each layer's dict and their types, which methods a layer takes),
// without the frameworks.
#include "client/export/framework_export.h"

#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "yaml-cpp/yaml.h"

namespace overlap::client {
namespace {

using ::testing::HasSubstr;

const std::set<std::string> kTeLayers = {"qkv_fprop",  "qkv_dgrad",  "qkv_wgrad", "proj_fprop",
                                         "proj_dgrad", "fc1_fprop",  "fc1_dgrad", "fc1_wgrad",
                                         "fc2_fprop",  "fc2_dgrad"};
const std::set<std::string> kTeKeys = {
    "method",       "is_reduce_scatter", "num_sm", "cga_size", "set_sm_margin",
    "num_splits",   "aggregate",         "atomic_gemm", "use_ce", "fp8_buf",
    "comm_priority", "gemm_priority",    "pipeline_rs_overlap_first_gemm"};
// TE refuses pipeline on a layer whose overlap gathers.
const std::set<std::string> kGathers = {"qkv_fprop", "fc1_fprop", "proj_dgrad", "fc2_dgrad"};

ops::Schedule S(const std::string& name) { return *ops::ParseScheduleName(name); }

// A choice with its figures as given (no statistic named).
ExportChoice C(const std::string& id, const std::string& type, const std::string& schedule,
               double step_ms, double serial_ms, const std::string& runner_up,
               double runner_up_ms) {
  ExportChoice c;
  c.op_id = id;
  c.op_type = type;
  c.schedule = S(schedule);
  c.step_ms = step_ms;
  c.serial_ms = serial_ms;
  c.runner_up = runner_up;
  c.runner_up_ms = runner_up_ms;
  return c;
}

std::vector<ExportChoice> Layer() {
  return {
      C("qkv", "ag_gemm", "ring/p2p", 1.0, 1.3, "ring/2/p2p", 1.01),
      C("proj", "gemm_rs", "chunked/4/nccl", 1.0, 1.2, "bulk/p2p", 1.1),
      C("fc1", "ag_gemm", "chunked/2/p2p", 2.0, 2.4, "", 0),
      C("fc2", "gemm_rs", "serial/nccl", 2.0, 2.0, "ring/p2p", 2.1),
      C("fc2_dgrad", "ag_gemm", "bulk/p2p", 2.0, 0, "", 0),
      C("fc1_dgrad", "gemm_rs", "ring/4/nccl", 2.0, 2.5, "ring/p2p", 2.2),
      C("fc2_wgrad", "gemm", "serial", 1.0, 0, "", 0),
      C("out", "gemm_ar", "ring/p2p", 1.0, 1.5, "", 0),
  };
}

TEST(FrameworkExportTest, TeUbCfgsFollowInitializeUbsSchema) {
  const nlohmann::json j = TeExport(Layer());
  const nlohmann::json& cfgs = j["ub_cfgs"];
  ASSERT_TRUE(cfgs.is_object());
  for (const auto& [layer, cfg] : cfgs.items()) {
    EXPECT_TRUE(kTeLayers.count(layer)) << layer;
    for (const auto& [key, value] : cfg.items()) EXPECT_TRUE(kTeKeys.count(key)) << layer << "." << key;
    const std::string method = cfg["method"];
    EXPECT_TRUE(method == "ring_exchange" || method == "pipeline" || method == "bulk") << method;
    if (method == "pipeline") {
      EXPECT_FALSE(kGathers.count(layer)) << layer << ": TE pipelines only reduce-scatters";
      EXPECT_TRUE(cfg["num_splits"].is_number_integer());
      EXPECT_GE(cfg["num_splits"].get<int>(), 1);
    }
    if (cfg.contains("use_ce")) {
      EXPECT_TRUE(cfg["use_ce"].is_boolean());
    }
  }
  // TE takes no wgrad entry beside a dgrad overlapped by reduce-scatter.
  if (cfgs.contains("fc1_dgrad")) {
    EXPECT_FALSE(cfgs.contains("fc1_wgrad"));
  }
  // One to one: ring over copy engines, a chunked reduce-scatter.
  EXPECT_EQ(cfgs["qkv_fprop"], (nlohmann::json{{"method", "ring_exchange"}, {"use_ce", true}}));
  EXPECT_EQ(cfgs["proj_fprop"], (nlohmann::json{{"method", "pipeline"}, {"num_splits", 4}}));
  EXPECT_EQ(j["overlapd"]["qkv_fprop"]["fidelity"], "exact");
  EXPECT_EQ(j["overlapd"]["proj_fprop"]["fidelity"], "exact");
  // Approximate: a chunked gather (TE's ring), bulk, a ring cut finer / over NCCL.
  EXPECT_EQ(cfgs["fc1_fprop"]["method"], "ring_exchange");
  EXPECT_EQ(j["overlapd"]["fc1_fprop"]["fidelity"], "approximate");
  EXPECT_EQ(j["overlapd"]["fc2_dgrad"]["fidelity"], "approximate");
  EXPECT_EQ(cfgs["fc1_dgrad"]["use_ce"], false);
  EXPECT_THAT(j["overlapd"]["fc1_dgrad"]["note"].get<std::string>(), HasSubstr("4 pieces"));
  // Serial: left out of ub_cfgs, said why.
  EXPECT_FALSE(cfgs.contains("fc2_fprop"));
  EXPECT_THAT(j["overlapd"]["fc2_fprop"]["note"].get<std::string>(), HasSubstr("ub_overlap_rs"));
  // None: gemm_ar and a weight gradient without a TE key.
  std::set<std::string> none;
  for (const nlohmann::json& n : j["not_exported"]) none.insert(n["op"]);
  EXPECT_EQ(none, (std::set<std::string>{"fc2_wgrad", "out"}));
}

// The mapping's table (client/export/te_ub_cfgs.json, which the Python client
// reads too) over every layer op and every overlapped mode: it parses, names
// each of TE's layers once, and keeps TE's rules.
TEST(FrameworkExportTest, TeTableMapsEveryLayerOpByTesRules) {
  EXPECT_EQ(TeLayerName("qkv"), "qkv_fprop");
  EXPECT_EQ(TeLayerName("fc2_dgrad"), "fc2_dgrad");
  EXPECT_EQ(TeLayerName("fc1_wgrad"), "fc1_wgrad");
  EXPECT_EQ(TeLayerName("attn"), "");
  std::set<std::string> named;
  for (const char* id :
       {"qkv", "proj", "fc1", "fc2", "qkv_dgrad", "proj_dgrad", "fc1_dgrad", "fc2_dgrad"}) {
    const std::string layer = TeLayerName(id);
    EXPECT_TRUE(named.insert(layer).second) << layer;
    for (const char* schedule : {"ring/p2p", "ring/nccl", "ring/2/p2p", "chunked/3/nccl",
                                 "chunked/3/p2p", "bulk/p2p", "bulk/nccl"}) {
      ExportChoice c = C(id, kGathers.count(layer) ? "ag_gemm" : "gemm_rs", schedule, 1, 0, "", 0);
      const TeEntry e = MapToTe(c);
      ASSERT_TRUE(e.overlapped) << id << " " << schedule;
      EXPECT_EQ(e.is_reduce_scatter, kGathers.count(layer) == 0) << id;
      if (e.method == "pipeline") {
        EXPECT_FALSE(kGathers.count(layer)) << id << " " << schedule;
        EXPECT_EQ(e.num_splits, c.schedule.mode == OverlapMode::kBulk ? 2 : c.schedule.chunks);
      } else {
        EXPECT_EQ(e.method, "ring_exchange") << id << " " << schedule;
        EXPECT_EQ(e.use_ce, c.schedule.transport == Transport::kP2p) << id << " " << schedule;
      }
    }
  }
  EXPECT_EQ(named.size(), 8u);
}

TEST(FrameworkExportTest, ChoicesCarryTheirMarginsAndNearTies) {
  const nlohmann::json j = TeExport(Layer());
  const nlohmann::json& qkv = j["overlapd"]["qkv_fprop"];
  EXPECT_TRUE(qkv["near_tie"].get<bool>());  // 1% over the runner-up
  EXPECT_EQ(qkv["margin"], "margin over serial +30.0%, over ring/2/p2p (runner-up) +1.0%: near-tie");
  EXPECT_FALSE(j["overlapd"]["proj_fprop"]["near_tie"].get<bool>());
  EXPECT_THAT(j["overlapd"]["fc1_fprop"]["margin"].get<std::string>(),
              HasSubstr("runner-up not measured"));
}

// A margin compares one statistic of one round: the run-off medians where both
// ran in the run-off, else both first-round bests; a runner-up within 2% either
// way is a near-tie, a faster one is said to be faster, a slower one is neither.
TEST(FrameworkExportTest, MarginsCompareOneStatisticAndNameAFasterRunnerUp) {
  const ops::Schedule ring = S("ring/p2p");
  auto fc2 = [&] {
    ExportChoice c;
    c.op_id = "fc2";
    c.op_type = "gemm_rs";
    c.schedule = ring;
    c.step_ms = 1.0;
    return c;
  };
  auto margins = [&](std::vector<CandidateFigures> others) {
    others.push_back({ring, 0.95, 1.0});
    ExportChoice c = fc2();
    SetMargins(c, others);
    return std::pair(c, TeExport({c})["overlapd"]["fc2_fprop"]);
  };
  struct Case {
    std::vector<CandidateFigures> others;
    std::string margin;
    bool near_tie;
    bool faster;
  };
  for (const Case& k : std::vector<Case>{
           {{{S("ring/nccl"), 0.90, 1.10}},
            "over ring/nccl (runner-up) +10.0% (run-off medians)",
            false,
            false},
           {{{S("ring/nccl"), 0.90, 0.90}},
            "over ring/nccl (runner-up) -10.0% (run-off medians): the runner-up was faster: this "
            "choice was not the fastest",
            false,
            true},
           {{{S("ring/nccl"), 0.90, 1.01}},
            "over ring/nccl (runner-up) +1.0% (run-off medians): "
            "near-tie",
            true,
            false},
           {{{S("ring/nccl"), 0.90, 0.985}},
            "over ring/nccl (runner-up) -1.5% (run-off medians): "
            "near-tie",
            true,
            false},
           // Not in the run-off: first-round bests, the winner's 0.95 against 0.8265,
           // not its run-off median 1.0 (which would read -17.4%).
           {{{S("ring/nccl"), 0.8265, 0}},
            "over ring/nccl (runner-up) -13.0% (first-round bests): the runner-up was faster",
            false,
            true},
           // Serial in the run-off as well; the closest of two others is the runner-up.
           {{{S("serial/nccl"), 1.2, 1.3},
             {S("bulk/p2p"), 1.0, 1.05},
             {S("chunked/2/p2p"), 1.0, 1.2}},
            "margin over serial +30.0% (run-off medians), over bulk/p2p (runner-up) +5.0% (run-off "
            "medians)",
            false,
            false},
       }) {
    const auto [choice, about] = margins(k.others);
    SCOPED_TRACE(k.margin);
    EXPECT_THAT(MarginText(choice), HasSubstr(k.margin));
    EXPECT_EQ(about["near_tie"].get<bool>(), k.near_tie);
    EXPECT_EQ(about["runner_up_faster"].get<bool>(), k.faster);
  }
  // A cached choice (not among the candidates) has no margins to give.
  ExportChoice cached = fc2();
  SetMargins(cached, {{S("ring/nccl"), 0.9, 0.9}});
  EXPECT_THAT(MarginText(cached), HasSubstr("runner-up not measured"));
  EXPECT_EQ(RunnerUpVerdict(-0.132), "the runner-up was faster: this choice was not the fastest");
  EXPECT_EQ(RunnerUpVerdict(0.02), "near-tie");
  EXPECT_EQ(RunnerUpVerdict(0.05), "");
}

TEST(FrameworkExportTest, MegatronYamlIsTheSameDictWithItsReasonsInComments) {
  const std::string text = MegatronYaml(Layer(), "job-000001");
  const YAML::Node doc = YAML::Load(text);
  const nlohmann::json te = TeExport(Layer())["ub_cfgs"];
  ASSERT_TRUE(doc.IsMap());
  EXPECT_EQ(doc.size(), te.size());
  for (const auto& entry : doc) {
    const std::string layer = entry.first.as<std::string>();
    ASSERT_TRUE(te.contains(layer)) << layer;
    EXPECT_EQ(entry.second["method"].as<std::string>(), te[layer]["method"]);
    if (te[layer].contains("num_splits")) {
      EXPECT_EQ(entry.second["num_splits"].as<int>(), te[layer]["num_splits"].get<int>());
    }
    if (te[layer].contains("use_ce")) {
      EXPECT_EQ(entry.second["use_ce"].as<bool>(), te[layer]["use_ce"].get<bool>());
    }
  }
  EXPECT_THAT(text, HasSubstr("# qkv: ring/p2p (exact); margin over serial +30.0%"));
  EXPECT_THAT(text, HasSubstr("# Left out:"));
}

TEST(FrameworkExportTest, TorchtitanSaysAsyncTpWasNotMeasured) {
  const std::string text = TorchtitanToml(Layer(), "job-000001");
  EXPECT_THAT(text, HasSubstr("[parallelism]"));
  EXPECT_THAT(text, HasSubstr("Not measured"));
  // The key is left unset: no line assigns it.
  EXPECT_EQ(text.find("enable_async_tensor_parallel ="), std::string::npos);
}

TEST(FrameworkExportTest, TorchtitanAnswersFromPyTorchsMeasuredAsyncTp) {
  // torch_tp.py's JSON: async TP 10% faster on the shapes that have it.
  const nlohmann::json peers = {
      {"rows",
       {{{"op", "ag_gemm"}, {"m", 4096}, {"k", 8192}, {"n", 8192},
         {"serial", {{"median_ms", 1.1}}}, {"async_tp", {{"median_ms", 1.0}}}},
        {{"op", "gemm_ar"}, {"m", 4096}, {"k", 8192}, {"n", 8192},
         {"serial", {{"median_ms", 2.0}}}, {"async_tp", nullptr}}}}};
  auto m = TorchMeasurementFromJson(peers, "torch.json");
  ASSERT_TRUE(m.ok()) << m.status();
  const std::string yes = TorchtitanToml(Layer(), "job-000001", &*m);
  EXPECT_THAT(yes, HasSubstr("enable_async_tensor_parallel = true\n"));
  EXPECT_THAT(yes, HasSubstr("async TP has no form for it"));
  EXPECT_THAT(yes, HasSubstr("(+10.0%): it pays off"));
  // bench --torch-peers' JSON: async TP slower.
  const nlohmann::json bench = {
      {"rows", {{{"op", "gemm_rs"}, {"m", 4096}, {"k", 8192}, {"n", 8192}, {"step_ms", 0.8},
                 {"torch_serial_ms", 1.0}, {"torch_async_tp_ms", 1.2}}}}};
  auto slower = TorchMeasurementFromJson(bench, "bench.json");
  ASSERT_TRUE(slower.ok()) << slower.status();
  const std::string no = TorchtitanToml({}, "", &*slower);
  EXPECT_THAT(no, HasSubstr("enable_async_tensor_parallel = false\n"));
  // Measured on one GPU: no answer.
  nlohmann::json one_gpu = bench;
  one_gpu["rows"][0]["tp"] = 1;
  const absl::StatusOr<TorchMeasurement> one = TorchMeasurementFromJson(one_gpu, "b.json");
  ASSERT_TRUE(one.ok());
  const std::string unset = TorchtitanToml({}, "", &*one);
  EXPECT_EQ(unset.find("enable_async_tensor_parallel ="), std::string::npos);
  EXPECT_THAT(unset, HasSubstr("Measured on one GPU"));
  EXPECT_THAT(no, HasSubstr("overlapd 0.800 ms"));
  // A file without async TP figures is refused.
  EXPECT_EQ(TorchMeasurementFromJson(nlohmann::json{{"rows", nlohmann::json::array()}}, "x")
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace overlap::client
