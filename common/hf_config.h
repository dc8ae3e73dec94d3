// A model's dimensions from its Hugging Face `config.json`, the file every
// checkpoint ships with, so that `overlapctl graph --config` writes the layer of
// the exact model a user trains.
//
// Read: hidden_size (n_embd, d_model), intermediate_size (n_inner, ffn_dim;
// 4 x hidden when absent or null, as GPT-2's), num_attention_heads (n_head),
// num_key_value_heads (= heads when absent), head_dim (when given). The MLP is
// gated when hidden_act is silu/swish or a *_glu activation, or model_type is
// one whose MLP has a gate projection (llama, mistral, qwen2, gemma, ...).
// Mixture-of-experts configs are refused: their experts run expert-parallel,
// which a TP layer graph does not model.
#pragma once

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/model_graph.h"

namespace overlap {

// INVALID_ARGUMENT, prefixed with `source`, when the text is not JSON, a field
// is missing or not a positive integer, or the model is a mixture of experts.
// The model's name is `name` when given, else the config's model_type.
absl::StatusOr<ModelDims> ModelFromHfConfig(absl::string_view json_text, absl::string_view source,
                                            absl::string_view name = "");

}  // namespace overlap
