#include "common/hf_config.h"

#include <cstdint>
#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace overlap {
namespace {

using ::testing::HasSubstr;

// The fields that matter of the published config.json files.
constexpr char kLlama3_70b[] = R"({
  "architectures": ["LlamaForCausalLM"], "hidden_act": "silu", "hidden_size": 8192,
  "intermediate_size": 28672, "max_position_embeddings": 8192, "model_type": "llama",
  "num_attention_heads": 64, "num_hidden_layers": 80, "num_key_value_heads": 8,
  "rope_theta": 500000.0, "torch_dtype": "bfloat16", "vocab_size": 128256})";

constexpr char kGpt2Xl[] = R"({
  "activation_function": "gelu_new", "model_type": "gpt2", "n_embd": 1600, "n_head": 25,
  "n_inner": null, "n_layer": 48, "n_positions": 1024})";

constexpr char kGemma7b[] = R"({
  "hidden_act": "gelu", "head_dim": 256, "hidden_size": 3072, "intermediate_size": 24576,
  "model_type": "gemma", "num_attention_heads": 16, "num_key_value_heads": 16})";

constexpr char kLlavaNext[] = R"({
  "model_type": "llava_next",
  "text_config": {"hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
                  "num_key_value_heads": 8, "model_type": "mistral"},
  "vision_config": {"hidden_size": 1024}})";

constexpr char kMixtral[] = R"({
  "hidden_size": 4096, "intermediate_size": 14336, "model_type": "mixtral",
  "num_attention_heads": 32, "num_key_value_heads": 8, "num_local_experts": 8})";

using Dims = std::tuple<std::string, int64_t, int64_t, int64_t, int64_t, int64_t, bool>;
Dims DimsOf(const ModelDims& m) {
  return {m.name, m.hidden, m.ffn, m.heads, m.kv_heads, m.head_dim, m.gated};
}

TEST(HfConfigTest, ReadsTheDimensionsOfPublishedConfigs) {
  struct Case {
    const char* text;
    Dims want;
  };
  for (const Case& c : {
           Case{kLlama3_70b, {"llama", 8192, 28672, 64, 8, 0, true}},
           // GPT-2's n_inner null means 4 x hidden; gelu, no gate.
           Case{kGpt2Xl, {"gpt2", 1600, 6400, 25, 0, 0, false}},
           // Gemma's MLP is GeGLU (gated by model type), its heads 256 wide.
           Case{kGemma7b, {"gemma", 3072, 24576, 16, 16, 256, true}},
           // A vision-language model's decoder, from its text_config.
           Case{kLlavaNext, {"mistral", 4096, 14336, 32, 8, 0, true}},
       }) {
    absl::StatusOr<ModelDims> model = ModelFromHfConfig(c.text, "config.json");
    ASSERT_TRUE(model.ok()) << model.status();
    EXPECT_EQ(DimsOf(*model), c.want);
  }
}

TEST(HfConfigTest, Llama70bConfigWritesThePresetsGraph) {
  absl::StatusOr<ModelDims> model = ModelFromHfConfig(kLlama3_70b, "config.json", "llama3-70b");
  ASSERT_TRUE(model.ok()) << model.status();
  LayerGraphOptions options;
  options.tp = 8;
  options.pass = LayerPass::kBoth;
  absl::StatusOr<LayerGraph> from_config = BuildLayerGraph(*model, options);
  absl::StatusOr<LayerGraph> from_preset = BuildLayerGraph(*FindModelPreset("llama3-70b"), options);
  ASSERT_TRUE(from_config.ok()) << from_config.status();
  ASSERT_TRUE(from_preset.ok()) << from_preset.status();
  EXPECT_EQ(LayerGraphYaml(*from_config), LayerGraphYaml(*from_preset));
}

TEST(HfConfigTest, RefusesWhatIsNotADenseDecoder) {
  struct Case {
    std::string text;
    std::string error;
  };
  for (const Case& c : {
           Case{kMixtral, "m.json: a mixture of experts (num_local_experts 8)"},
           Case{"{\"hidden_size\": 4096,", "m.json: not a JSON object"},
           Case{"[1, 2]", "m.json: not a JSON object"},
           Case{R"({"num_attention_heads": 32, "intermediate_size": 11008})",
                "m.json: no hidden_size (nor any other name for it)"},
           Case{R"({"hidden_size": "big", "num_attention_heads": 32})",
                "m.json: hidden_size must be a positive integer (got \"big\")"},
           Case{R"({"hidden_size": 4096, "num_attention_heads": -1})",
                "m.json: num_attention_heads must be a positive integer (got -1)"},
       }) {
    SCOPED_TRACE(c.text);
    absl::StatusOr<ModelDims> model = ModelFromHfConfig(c.text, "m.json");
    ASSERT_FALSE(model.ok());
    EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(model.status().message(), HasSubstr(c.error));
  }
}

// GPT-2's n_inner: null makes the MLP 4 x the hidden size; a hidden size whose
// four-fold passes 2^63 was a signed overflow (UBSan, the hf_config fuzzer).
TEST(HfConfigTest, AnMlpOfFourHiddenSizesThatOverflowsIsRefusedByName) {
  absl::StatusOr<ModelDims> model = ModelFromHfConfig(
      R"({"model_type": "gpt2", "n_embd": 6646744073709551615, "n_head": 25, "n_inner": null})",
      "m.json");
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(model.status().message(), HasSubstr("m.json: hidden_size"));
  EXPECT_THAT(model.status().message(), HasSubstr("4 x 6646744073709551615 overflows 64 bits"));

  // The largest hidden size whose four-fold fits is read as it is.
  const int64_t largest = INT64_MAX / 4;
  model = ModelFromHfConfig(absl::StrCat(R"({"n_embd": )", largest, R"(, "n_head": 1})"), "m.json");
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->ffn, 4 * largest);
}

}  // namespace
}  // namespace overlap
