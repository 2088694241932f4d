// DeepSeek-V3 folders (`ptdp export --to hf-deepseek-v3`, transformers' DeepseekV3ForCausalLM;
// docs/mla.md): the Llama family's folder (hf_llama.h) with multi-latent attention's tensors and
// config keys, DeepSeek-V3's router (GLM-4.5's: sigmoid scores, the expert bias as
// e_score_correction_bias, group-limited top k) and its prediction depths as model.layers.{L + d}.
// Internal to runtime/checkpoint: hf_llama.cc calls it for HfLlamaArch::kDeepseekV3.
//
//   model.layers.L.self_attn.q_a_proj.weight [q_lora, h]        layerL.attn.q_down.weight
//   model.layers.L.self_attn.q_a_layernorm.weight [q_lora]      layerL.attn.q_norm.weight
//   model.layers.L.self_attn.q_b_proj.weight [a dqk, q_lora]    layerL.attn.q_up.weight
//   model.layers.L.self_attn.q_proj.weight [a dqk, h]           layerL.attn.q.weight (no latent)
//   model.layers.L.self_attn.kv_a_proj_with_mqa.weight [kv_lora + rope, h]  layerL.attn.kv_down
//   model.layers.L.self_attn.kv_a_layernorm.weight [kv_lora]    layerL.attn.kv_norm.weight
//   model.layers.L.self_attn.kv_b_proj.weight [a (dh + dv), kv_lora]  layerL.attn.kv_up.weight
//   model.layers.L.self_attn.o_proj.weight [h, a dv]            layerL.attn.proj.weight
// Every one in ptdp's order (a head's query rows [dh | rope], its kv_b_proj rows [dh | dv], the
// rotated key's rows after the latent's) but the rotated rows: DeepSeek's folders pair them
// interleaved (rope_interleave true, transformers' default, DeepSeek's own checkpoints), ptdp in
// halves (rotate_half), so q_b_proj's (q_proj's) and kv_a_proj_with_mqa's rotated rows are
// permuted both ways (HfLayout::kRopeInterleaved). A folder with rope_interleave false is refused.
#pragma once

#include <string>
#include <vector>

#include "core/json.h"
#include "core/model.h"
#include "core/status.h"
#include "runtime/checkpoint/hf_gpt2.h"

namespace ptdp::runtime {

// Ok when Glm4MoeForCausalLM computes what ptdp's layers compute for `m` (GLM-4.5: Llama's
// attention with DeepSeek-V3's router); else one error naming what differs.
Status CheckGlm4MoeReadable(const ModelSpec& m, const std::string& what);
// Ok when DeepseekV3ForCausalLM computes what ptdp's layers compute for `m`; else one error
// `what` + ": ..." naming what differs.
Status CheckDeepseekV3Readable(const ModelSpec& m, const std::string& what);

// The multi-latent attention keys of its config.json (the router's are GLM-4.5's).
void AppendDeepseekV3Config(const ModelSpec& m, OrderedJson* j);

// Layer p's (ptdp prefix) attention tensors as q_ (HF prefix) names them, and o_proj.
void AppendHfMlaAttention(const ModelSpec& m, const std::string& p, const std::string& q_,
                          std::vector<HfTensorSpec>* out);

// A config.json's rope_interleave for reading: true or absent (transformers' default), else
// refused.
Status CheckDeepseekV3RopeLayout(const Json& j, const std::string& source);

}  // namespace ptdp::runtime
