// Hugging Face transformers config.json files as ModelSpecs: GPT-2 (model_type "gpt2", or the
// n_layer/n_embd keys of older files) and the Llama family (model_type "llama", "mistral",
// "qwen2", "qwen3", and the mixtures of experts "mixtral", "qwen3_moe", "qwen2_moe" (a gated
// shared expert, leading mlp_only_layers) and "deepseek_v2"/"deepseek_v3" (multi-latent
// attention, a shared expert, leading dense layers, multi-token prediction): docs/moe.md), with
// its head_dim where given; and Nemotron-4 (model_type "nemotron": squared ReLU, partial RoPE).
// Every key is read or named as harmless; an unknown key, an unsupported model_type or
// architecture, and a field that changes the maths we model (sliding-window attention, experts in
// another family or on some layers only, an activation other than the family's, attention or MLP
// biases where the family has none) are refused with one line naming it.
#pragma once

#include <string>

#include "core/json.h"
#include "core/model.h"
#include "core/status.h"

namespace ptdp {

// True when `j` looks like a transformers config (model_type, or GPT-2's n_layer / n_embd).
bool IsHfConfig(const Json& j);
// The sequence length is the config's max_position_embeddings (GPT-2: n_positions or n_ctx); the
// name is the file's "name" key if present, else "hf-<model_type>". `path` prefixes error key
// paths ("model").
Result<ModelSpec> ModelFromHfConfig(const Json& j, const std::string& path);

}  // namespace ptdp
