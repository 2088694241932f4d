// Hugging Face Llama folders as `ptdp export --to hf-llama` writes them (docs/llama.md):
// config.json and model.safetensors for transformers' LlamaForCausalLM, from a checkpoint of a
// Llama-style model; Qwen2 folders (`--to hf-qwen2`, Qwen2ForCausalLM), the same with biases on
// q, k and v; Qwen3 folders (`--to hf-qwen3`, Qwen3ForCausalLM), the same with QK norms; and
// Mistral folders (`--to hf-mistral`, MistralForCausalLM), the same with a sliding window; and
// Nemotron folders (`--to hf-nemotron`, NemotronForCausalLM): LayerNorm1P with its bias
// (input_layernorm, post_attention_layernorm and model.norm carry .weight, the offset from 1 as
// ptdp stores it, and .bias), a squared-ReLU MLP of up_proj and down_proj (up_proj is fc1 whole),
// RoPE on partial_rotary_factor of each head, norm_eps for rms_norm_eps.
// Pure functions over values, like hf_gpt2.h; the file writing is param_io.h ExportHf's.
//
// The mapping (every HF name whole, "model." included):
//   model.embed_tokens.weight [V, h]              embedding.word (vocabulary rows unpadded)
//   model.layers.L.input_layernorm.weight         layerL.ln1.weight
//   model.layers.L.self_attn.{q,k,v}_proj.weight  the query, key and value rows of
//                                                 layerL.attn.qkv.weight ([kv][group + 2][D] rows,
//                                                 kernels/reference/qkv_layout.h)
//   model.layers.L.self_attn.{q,k}_norm.weight    layerL.attn.{q,k}_norm.weight (Qwen3's)
//   model.layers.L.self_attn.o_proj.weight        layerL.attn.proj.weight
//   model.layers.L.post_attention_layernorm.weight layerL.ln2.weight
//   model.layers.L.mlp.{gate,up}_proj.weight      the even and odd rows of layerL.mlp.fc1.weight
//   model.layers.L.mlp.down_proj.weight           layerL.mlp.fc2.weight
//   model.layers.L.mlp.gate.weight [E, h]         layerL.moe.router.weight (Qwen3-MoE's layers)
//   model.layers.L.mlp.experts.X.{gate,up}_proj   the even and odd rows of
//                                                 layerL.moe.expertX.fc1.weight
//   model.layers.L.mlp.experts.X.down_proj        layerL.moe.expertX.fc2.weight
//   model.layers.L.block_sparse_moe.gate.weight   layerL.moe.router.weight (Mixtral's), and
//   ...block_sparse_moe.experts.X.{w1,w3,w2}      its experts' gate, up and down projections
//   model.layers.L.mlp.shared_expert.{gate,up,down}_proj  layerL.moe.shared.fc1 (even and odd
//                                                 rows), .fc2 (Qwen2-MoE's shared expert), and
//   model.layers.L.mlp.shared_expert_gate.weight  layerL.moe.shared.gate.weight [1, h]
//   model.norm.weight                             final_ln.weight
//   lm_head.weight [V, h]                         output.weight (untied models only)
// Both rotate q and k in halves (rotate_half) by position * rope_theta^(-2e/d), norm with
// rms_norm_eps and gate with SiLU, so LlamaForCausalLM computes ptdp's logits; Qwen3ForCausalLM
// norms each query and key head before the rotation, as ptdp's QK norm does.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/model.h"
#include "core/status.h"
#include "runtime/checkpoint/hf_gpt2.h"

namespace ptdp::runtime {

// The Llama family's architectures, told apart by the model: Qwen2's biases on q, k and v alone
// (ModelSpec::qkv_bias), Qwen3's QK norms (qk_norm), Mistral's sliding window on every layer
// (window_size), Nemotron-4's squared-ReLU MLP and LayerNorm1P (squared_relu, layernorm_1p),
// Llama's none of them.
enum class HfLlamaArch {
  kLlama,
  kQwen2,
  kQwen3,
  kMistral,
  kNemotron,
  kQwen3Moe,
  kMixtral,
  kQwen2Moe,
  kGlm4Moe,
  kDeepseekV3  // multi-latent attention (hf_deepseek.h)
};
HfLlamaArch HfLlamaArchOf(const ModelSpec& m);
// "LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "MistralForCausalLM",
// "NemotronForCausalLM", "Qwen3MoeForCausalLM" (Qwen3's attention with a mixture of experts:
// model.moe_experts with QK norms; its leading dense layers are mlp_only_layers),
// "MixtralForCausalLM" (Llama's attention with a mixture on every layer: no QK norms),
// "Qwen2MoeForCausalLM", "Glm4MoeForCausalLM" (GLM-4.5's: DeepSeek-V3's router, sigmoid scores
// with the expert bias, on a mixture with a shared expert; partial RoPE, q, k, v biases),
// "DeepseekV3ForCausalLM" (multi-latent attention with GLM-4.5's router: hf_deepseek.h).
const char* HfLlamaArchName(HfLlamaArch a);
// The `ptdp export --to` that writes it: "hf-llama", "hf-qwen2", "hf-qwen3", "hf-mistral",
// "hf-nemotron", "hf-qwen3-moe", "hf-mixtral", "hf-qwen2-moe", "hf-glm4-moe", "hf-deepseek-v3".
const char* HfLlamaFormatName(HfLlamaArch a);
// Every architecture, and the one `ptdp export --to FORMAT` writes (HfLlamaFormatName's inverse;
// none for another format).
inline constexpr HfLlamaArch kHfLlamaArchs[] = {
    HfLlamaArch::kLlama,    HfLlamaArch::kQwen2,     HfLlamaArch::kQwen3,   HfLlamaArch::kMistral,
    HfLlamaArch::kNemotron, HfLlamaArch::kQwen3Moe,  HfLlamaArch::kMixtral, HfLlamaArch::kQwen2Moe,
    HfLlamaArch::kGlm4Moe,  HfLlamaArch::kDeepseekV3};
std::optional<HfLlamaArch> HfLlamaArchOfFormat(const std::string& format);

// Ok when `arch`'s transformers class computes what ptdp's layers compute for `m`: RMSNorm, SwiGLU
// and rotary embeddings, no biases but `arch`'s, QK norms exactly for Qwen3, a sliding window
// (on every layer) exactly for Mistral, no experts, latent
// attention or prediction depths; else one error `what` + ": ..." naming what differs (and the
// --to that writes the model). Any head_dim.
Status CheckHfLlamaExportable(const ModelSpec& m, HfLlamaArch arch, const std::string& what);
// The same for reading a folder, which may be any of the four: Mistral's window must be on every
// layer, and with neither QK norms nor biases on q, k and v.
Status CheckHfLlamaReadable(const ModelSpec& m, const std::string& what);
// The model_types read here: "llama", "mistral", "qwen2", "qwen3", "nemotron", the mixtures'
// "qwen3_moe", "mixtral", "qwen2_moe", "glm4_moe", and "deepseek_v3" with Kimi K2's "kimi_k2" (its
// class and tensors are DeepSeek-V3's).
inline bool IsHfLlamaFamily(const std::string& model_type) {
  return model_type == "llama" || model_type == "mistral" || model_type == "qwen2" ||
         model_type == "qwen3" || model_type == "nemotron" || model_type == "qwen3_moe" ||
         model_type == "mixtral" || model_type == "qwen2_moe" || model_type == "glm4_moe" ||
         model_type == "deepseek_v3" || model_type == "kimi_k2";
}

// The runtime name of mixture layer `layer`'s expert bias in the HF tensor list (HfLayout::
// kExpertBias: not a parameter of the store but RouterBiases'), and the layer such a name is of
// (-1 for any other name).
std::string ExpertBiasName(int layer);
int ExpertBiasLayer(const std::string& ptdp_name);

// The config.json for `m` (max_position_embeddings = m.seq_len), of HfLlamaArchOf(m).
OrderedJson HfLlamaConfigToJson(const ModelSpec& m);

// Every HF tensor of the model, in LlamaForCausalLM's order.
std::vector<HfTensorSpec> HfLlamaTensors(const ModelSpec& m);

// The part `s` (kQProj, kKProj, kVProj, kGateProj, kUpProj) of the runtime global tensor `rt`
// (qkv.weight, or fc1.weight), in HF's row-major [rows][h]; `heads` of the model.
std::vector<float> LlamaPartOf(const HfTensorSpec& s, int64_t heads, const std::vector<float>& rt);
// The inverse: writes the part's rows into `rt`, which holds the whole runtime tensor.
void LlamaPartInto(const HfTensorSpec& s, int64_t heads, const std::vector<float>& hf,
                   std::vector<float>* rt);

// Reading a folder (`ptdp train --init-from`, `ptdp forward --hf`). The config through
// core/hf_config.h (model_type "llama", "mistral" with or without a sliding window, "qwen2" or
// "qwen3"; its rms_norm_eps becomes norm_eps), then no rope_scaling and a "default" rope_type, and
// CheckHfLlamaReadable's architecture; one error naming the field otherwise.
Result<HfGpt2Config> HfLlamaConfigFromJson(const Json& j, const std::string& source);
// Every tensor of HfLlamaTensors present once with its shape and a float dtype, by HF name;
// rotary inv_freq buffers and, with tied embeddings, lm_head.weight skipped; any other refused.
// With `fp8` blocks (the config's quantization_config), F8_E4M3 weights and their scales
// (fp8.h MatchFp8Scales; the scales join the map by their own names).
Result<std::map<std::string, StTensor>> MatchHfLlamaHeader(const StHeader& h, const ModelSpec& m,
                                                           const std::string& source,
                                                           const Fp8Blocks& fp8 = {});

}  // namespace ptdp::runtime
