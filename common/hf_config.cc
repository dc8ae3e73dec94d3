#include "common/hf_config.h"

#include <initializer_list>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/checked_size.h"
#include "nlohmann/json.hpp"

namespace overlap {
namespace {

using Json = nlohmann::json;

// Model types whose MLP multiplies a gate projection into the up projection
// (SwiGLU, GeGLU), so that Megatron's fc1 is 2 x ffn wide.
constexpr const char* kGatedModelTypes[] = {
    "llama", "mistral",  "qwen2", "qwen3",       "gemma",   "gemma2", "gemma3_text",
    "phi3",  "olmo",     "olmo2", "internlm2",   "granite", "cohere", "exaone",
    "yi",    "baichuan", "glm",   "deepseek_v3", "minicpm", "smollm3"};

// The string at `key`, or "" when it is absent or not a string.
std::string StringField(const Json& config, const char* key) {
  const auto it = config.find(key);
  return it != config.end() && it->is_string() ? it->get<std::string>() : "";
}

bool IsGated(const Json& config) {
  const std::string type = StringField(config, "model_type");
  for (const char* gated : kGatedModelTypes) {
    if (type == gated) return true;
  }
  for (const char* key : {"hidden_act", "activation_function", "hidden_activation"}) {
    const std::string act = absl::AsciiStrToLower(StringField(config, key));
    if (act == "silu" || act == "swish" || absl::EndsWith(act, "glu")) return true;
  }
  return false;
}

// The first of `keys` present and not null: 0 when none is, an error when the
// value is not a positive integer.
absl::StatusOr<int64_t> Dim(const Json& config, std::initializer_list<const char*> keys,
                            absl::string_view source) {
  for (const char* key : keys) {
    const auto it = config.find(key);
    if (it == config.end() || it->is_null()) continue;
    if (!it->is_number_integer() || it->get<int64_t>() <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": ", key, " must be a positive integer (got ", it->dump(), ")"));
    }
    return it->get<int64_t>();
  }
  return 0;
}

}  // namespace

absl::StatusOr<ModelDims> ModelFromHfConfig(absl::string_view json_text, absl::string_view source,
                                            absl::string_view name) {
  // A model's config.json is a few KiB; a bound keeps the parse's time and
  // memory small whatever file is named.
  constexpr size_t kMaxConfigBytes = 4 << 20;
  if (json_text.size() > kMaxConfigBytes) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", json_text.size(),
                                                   " bytes is not a model's config.json (at most ",
                                                   kMaxConfigBytes, ")"));
  }
  Json config =
      Json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded() || !config.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": not a JSON object (a Hugging Face config.json is expected)"));
  }
  // Vision-language models keep the decoder's dimensions in text_config.
  if (!config.contains("hidden_size") && config.contains("text_config") &&
      config["text_config"].is_object()) {
    const std::string outer_type = StringField(config, "model_type");
    config = config["text_config"];
    if (!config.contains("model_type")) config["model_type"] = outer_type;
  }
  for (const char* key :
       {"num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts"}) {
    const auto it = config.find(key);
    if (it != config.end() && it->is_number_integer() && it->get<int64_t>() > 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": a mixture of experts (", key, " ", it->get<int64_t>(),
          "): its experts run expert-parallel, which a tensor-parallel layer graph does not "
          "model; give --hidden, --ffn and --heads for its dense layers instead"));
    }
  }
  ModelDims model;
  struct Field {
    int64_t* out;
    std::initializer_list<const char*> keys;
    bool required;
  };
  for (const Field& field :
       {Field{&model.hidden, {"hidden_size", "n_embd", "n_embed", "d_model"}, true},
        Field{&model.heads, {"num_attention_heads", "n_head", "num_heads"}, true},
        Field{&model.ffn, {"intermediate_size", "n_inner", "ffn_dim", "ffn_hidden_size"}, false},
        Field{&model.kv_heads, {"num_key_value_heads", "num_kv_heads", "n_head_kv"}, false},
        Field{&model.head_dim, {"head_dim", "kv_channels"}, false}}) {
    absl::StatusOr<int64_t> value = Dim(config, field.keys, source);
    if (!value.ok()) return value.status();
    if (*value == 0 && field.required) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": no ", *field.keys.begin(), " (nor any other name for it)"));
    }
    *field.out = *value;
  }
  if (model.ffn == 0) {
    // GPT-2's n_inner: null, an MLP 4 x the hidden size. The hidden size is
    // whatever positive integer the file holds; too large a one is refused by
    // name here, and by kMaxModelDim when a graph is built.
    absl::StatusOr<int64_t> ffn = CheckedMul(
        4, model.hidden,
        absl::StrCat(source,
                     ": hidden_size (the MLP's size, with no intermediate_size, is 4 x it)"));
    if (!ffn.ok()) return ffn.status();
    model.ffn = *ffn;
  }
  model.gated = IsGated(config);
  const std::string type = StringField(config, "model_type");
  model.name = !name.empty() ? std::string(name) : !type.empty() ? type : "custom";
  return model;
}

}  // namespace overlap
