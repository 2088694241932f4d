#include "runtime/checkpoint/hf_llama.h"

#include <set>

#include "core/checked.h"
#include "core/hf_config.h"
#include "kernels/reference/qkv_layout.h"
#include "runtime/checkpoint/hf_deepseek.h"

namespace ptdp::runtime {
namespace {

// Elements per row: a weight's columns, 1 for a bias.
int64_t ColsOf(const HfTensorSpec& s) {
  return s.hf_shape.size() == 2 ? s.hf_shape[1] : 1;
}

}  // namespace

std::string ExpertBiasName(int layer) {
  return "layer" + std::to_string(layer) + ".moe.router.expert_bias";
}

int ExpertBiasLayer(const std::string& name) {
  const std::string head = "layer", tail = ".moe.router.expert_bias";
  if (name.size() <= head.size() + tail.size() || name.compare(0, head.size(), head) != 0 ||
      name.compare(name.size() - tail.size(), tail.size(), tail) != 0) {
    return -1;
  }
  const std::string digits = name.substr(head.size(), name.size() - head.size() - tail.size());
  if (digits.empty() || digits.size() > 6 ||
      digits.find_first_not_of("0123456789") != std::string::npos) {
    return -1;
  }
  return std::stoi(digits);
}

HfLlamaArch HfLlamaArchOf(const ModelSpec& m) {
  if (m.IsMla()) return HfLlamaArch::kDeepseekV3;
  if (m.squared_relu || m.layernorm_1p) return HfLlamaArch::kNemotron;
  if (m.IsMoe() && m.moe_router_sigmoid) return HfLlamaArch::kGlm4Moe;
  if (m.IsMoe()) {
    if (m.qk_norm) return HfLlamaArch::kQwen3Moe;
    return m.HasSharedExpert() ? HfLlamaArch::kQwen2Moe : HfLlamaArch::kMixtral;
  }
  if (m.qk_norm) return HfLlamaArch::kQwen3;
  if (m.qkv_bias) return HfLlamaArch::kQwen2;
  return m.window_size > 0 ? HfLlamaArch::kMistral : HfLlamaArch::kLlama;
}

const char* HfLlamaFormatName(HfLlamaArch a) {
  switch (a) {
    case HfLlamaArch::kLlama:
      return "hf-llama";
    case HfLlamaArch::kQwen2:
      return "hf-qwen2";
    case HfLlamaArch::kQwen3:
      return "hf-qwen3";
    case HfLlamaArch::kMistral:
      return "hf-mistral";
    case HfLlamaArch::kNemotron:
      return "hf-nemotron";
    case HfLlamaArch::kQwen3Moe:
      return "hf-qwen3-moe";
    case HfLlamaArch::kMixtral:
      return "hf-mixtral";
    case HfLlamaArch::kQwen2Moe:
      return "hf-qwen2-moe";
    case HfLlamaArch::kGlm4Moe:
      return "hf-glm4-moe";
    case HfLlamaArch::kDeepseekV3:
      return "hf-deepseek-v3";
  }
  return "?";
}

std::optional<HfLlamaArch> HfLlamaArchOfFormat(const std::string& format) {
  for (HfLlamaArch a : kHfLlamaArchs) {
    if (format == HfLlamaFormatName(a)) return a;
  }
  return std::nullopt;
}

const char* HfLlamaArchName(HfLlamaArch a) {
  switch (a) {
    case HfLlamaArch::kLlama:
      return "LlamaForCausalLM";
    case HfLlamaArch::kQwen2:
      return "Qwen2ForCausalLM";
    case HfLlamaArch::kQwen3:
      return "Qwen3ForCausalLM";
    case HfLlamaArch::kMistral:
      return "MistralForCausalLM";
    case HfLlamaArch::kNemotron:
      return "NemotronForCausalLM";
    case HfLlamaArch::kQwen3Moe:
      return "Qwen3MoeForCausalLM";
    case HfLlamaArch::kMixtral:
      return "MixtralForCausalLM";
    case HfLlamaArch::kQwen2Moe:
      return "Qwen2MoeForCausalLM";
    case HfLlamaArch::kGlm4Moe:
      return "Glm4MoeForCausalLM";
    case HfLlamaArch::kDeepseekV3:
      return "DeepseekV3ForCausalLM";
  }
  return "?";
}

Status CheckHfLlamaExportable(const ModelSpec& m, HfLlamaArch arch, const std::string& what) {
  auto bad = [&](const std::string& why) {
    return Status::Invalid(what + " is not a model that Hugging Face's " + HfLlamaArchName(arch) +
                           " computes: " + why);
  };
  if (m.qkv_bias && m.qk_norm && arch != HfLlamaArch::kGlm4Moe) {
    return bad("it has both a bias on q, k and v and QK norms");
  }
  const HfLlamaArch its = HfLlamaArchOf(m);
  if (its != arch) {
    // What the model has that `arch` lacks, or (a plain Llama) what `arch` needs that it lacks.
    const auto moe = [](HfLlamaArch a) {
      return a == HfLlamaArch::kQwen3Moe || a == HfLlamaArch::kMixtral ||
             a == HfLlamaArch::kQwen2Moe || a == HfLlamaArch::kGlm4Moe;
    };
    // Between the mixtures: sigmoid scores make GLM-4.5's, QK norms Qwen3-MoE's, a shared expert
    // Qwen2-MoE's.
    const std::string mixture = its == HfLlamaArch::kGlm4Moe     ? "its router has sigmoid scores"
                                : arch == HfLlamaArch::kGlm4Moe  ? "its router has softmax scores"
                                : m.qk_norm                      ? "it has QK norms"
                                : arch == HfLlamaArch::kQwen3Moe ? "it has no QK norms"
                                : arch == HfLlamaArch::kQwen2Moe ? "it has no shared expert"
                                                                 : "it has a shared expert";
    const std::string has = its == HfLlamaArch::kDeepseekV3    ? "it has multi-latent attention"
                            : arch == HfLlamaArch::kDeepseekV3 ? "it has no multi-latent attention"
                            : its == HfLlamaArch::kNemotron
                                ? "it has Nemotron's squared-ReLU MLP and LayerNorm1P"
                            : moe(its)  ? (moe(arch) ? mixture : "it has a mixture of experts")
                            : moe(arch) ? "it has no mixture of experts"
                            : its == HfLlamaArch::kQwen3   ? "it has QK norms"
                            : its == HfLlamaArch::kQwen2   ? "it has a bias on q, k and v alone"
                            : its == HfLlamaArch::kMistral ? "it has a sliding window (window_size)"
                            : arch == HfLlamaArch::kQwen3  ? "it has no QK norms"
                            : arch == HfLlamaArch::kQwen2  ? "it has no bias on q, k and v"
                            : arch == HfLlamaArch::kMistral
                                ? "it has no sliding window"
                                : "it has SwiGLU and RMSNorm, not squared ReLU and LayerNorm1P";
    return bad(has + " (--to " + HfLlamaFormatName(its) + " writes it)");
  }
  return CheckHfLlamaReadable(m, what);
}

namespace {

// Nemotron-4 as transformers' NemotronForCausalLM computes it: LayerNorm1P (weight + 1, with a
// bias), a squared-ReLU MLP of two matrices, RoPE on partial_rotary_factor of each head, no biases
// on the Linears.
Status CheckNemotronReadable(const ModelSpec& m, const std::string& what) {
  auto bad = [&](const std::string& why) {
    return Status::Invalid(
        what + " is not a model of Hugging Face's Nemotron (NemotronForCausalLM): " + why);
  };
  if (!m.squared_relu || !m.layernorm_1p || !m.rotary || m.rmsnorm || m.swiglu) {
    return bad("it needs squared_relu, layernorm_1p and rotary true, rmsnorm and swiglu false");
  }
  if (m.linear_bias || m.qkv_bias) return bad("it has biases on its Linears");
  if (m.qk_norm) return bad("it has QK norms");
  if (m.IsMoe() || m.IsMla() || m.mtp_layers > 0) {
    return bad("it has experts, latent attention or prediction depths");
  }
  if (m.window_size > 0) return bad("it has sliding-window attention (window_size)");
  return Status::Ok();
}

}  // namespace

Status CheckHfLlamaReadable(const ModelSpec& m, const std::string& what) {
  // transformers' concentration without mscale_all_dim is mscale(f, 1), whatever mscale says.
  if (m.RopeYarn() && m.rope_yarn_mscale_all_dim == 0 && m.rope_yarn_mscale != 1) {
    return Status::Invalid(what + ": its YaRN concentration (rope_yarn_mscale " +
                           FormatDouble(m.rope_yarn_mscale) +
                           " without rope_yarn_mscale_all_dim) is not one transformers computes");
  }
  if (HfLlamaArchOf(m) == HfLlamaArch::kNemotron) return CheckNemotronReadable(m, what);
  if (HfLlamaArchOf(m) == HfLlamaArch::kGlm4Moe) return CheckGlm4MoeReadable(m, what);
  if (HfLlamaArchOf(m) == HfLlamaArch::kDeepseekV3) return CheckDeepseekV3Readable(m, what);
  auto bad = [&](const std::string& why) {
    return Status::Invalid(what +
                           " is not a model of Hugging Face's Llama family (Llama, Mistral, Qwen2, "
                           "Qwen3, Qwen3-MoE, Mixtral): " +
                           why);
  };
  if (!m.rmsnorm || !m.swiglu || !m.rotary) {
    return bad("it needs rmsnorm, swiglu and rotary all true");
  }
  if (m.linear_bias) return bad("it has biases on every Linear (linear_bias)");
  if (m.IsMla() || m.mtp_layers > 0) return bad("it has latent attention or prediction depths");
  // Qwen3-MoE's mixture (QK norms) or Mixtral's (none): its experts alone, a plain top-k router;
  // Mixtral's on every layer, without a window. Qwen2-MoE's: a shared expert with its gate
  // beside them, Qwen2's bias on q, k and v.
  if (m.IsMoe() && m.moe_router_groups > 0) return bad("its router has groups");
  if (m.IsMoe() && (m.moe_router_sigmoid || m.moe_router_topk_scale != 1)) {
    return bad("its router has sigmoid scores or a top-k scaling factor (DeepSeek-V3's)");
  }
  if (m.IsMoe() && m.HasSharedExpert() &&
      (m.qk_norm || !m.moe_shared_gate || !m.qkv_bias || m.window_size > 0)) {
    return bad(
        "its shared expert is not Qwen2-MoE's (which has its sigmoid gate, a bias on q, k and v, "
        "no QK norms and no window)");
  }
  if (m.IsMoe() && !m.HasSharedExpert() && m.qkv_bias) {
    return bad("its experts have a bias on q, k and v but no shared expert (Qwen2-MoE's has one)");
  }
  if (m.IsMoe() && !m.qk_norm && !m.HasSharedExpert() &&
      (m.HasDenseLayers() || m.window_size > 0 || m.moe_router_pre_softmax)) {
    return bad(
        "its mixture is not Mixtral's (dense layers, a sliding window, or pre-softmax routing); "
        "with QK norms it would be Qwen3-MoE's");
  }
  // Mistral's window is on every layer; Qwen's classes place theirs by max_window_layers, which
  // ptdp's rule (core/model.h WindowedLayer) does not express, and core/hf_config.cc refuses.
  if (m.window_size > 0 && m.window_full_every != 0) {
    return bad("it alternates windowed and full layers (window_full_every)");
  }
  if (m.window_size > 0 && (m.qk_norm || m.qkv_bias)) {
    return bad(
        "it has a sliding window with QK norms or biases on q, k and v (Mistral's has neither)");
  }
  // Llama's and Qwen's classes turn every feature of a head; Nemotron's partial rotation is a
  // family of its own.
  if (m.rotary_percent != 1) return bad("it turns part of each head (rotary_percent)");
  return Status::Ok();
}

OrderedJson HfLlamaConfigToJson(const ModelSpec& m) {
  const HfLlamaArch arch = HfLlamaArchOf(m);
  OrderedJson j;
  j["architectures"] = {HfLlamaArchName(arch)};
  const bool nemotron = arch == HfLlamaArch::kNemotron;
  const bool qwen2_moe = arch == HfLlamaArch::kQwen2Moe;
  const bool moe = arch == HfLlamaArch::kQwen3Moe || qwen2_moe;
  const bool mixtral = arch == HfLlamaArch::kMixtral;
  const bool deepseek = arch == HfLlamaArch::kDeepseekV3;
  const bool glm = arch == HfLlamaArch::kGlm4Moe || deepseek;  // GLM-4.5's router is DeepSeek-V3's
  j["model_type"] = deepseek                        ? "deepseek_v3"
                    : glm                           ? "glm4_moe"
                    : nemotron                      ? "nemotron"
                    : qwen2_moe                     ? "qwen2_moe"
                    : moe                           ? "qwen3_moe"
                    : mixtral                       ? "mixtral"
                    : arch == HfLlamaArch::kQwen3   ? "qwen3"
                    : arch == HfLlamaArch::kQwen2   ? "qwen2"
                    : arch == HfLlamaArch::kMistral ? "mistral"
                                                    : "llama";
  j["hidden_act"] = nemotron ? "relu2" : "silu";
  j["num_hidden_layers"] = m.layers;
  j["hidden_size"] = m.hidden;
  j["intermediate_size"] = mixtral ? m.MoeFfnHidden() : m.FfnHidden();
  if (mixtral) {  // top-k of the softmax, renormalised (ptdp's top-k softmax)
    j["num_local_experts"] = m.moe_experts;
    j["num_experts_per_tok"] = m.moe_topk;
    j["router_jitter_noise"] = 0.0;
    j["output_router_logits"] = false;
  }
  if (moe) {  // Qwen3-MoE's and Qwen2-MoE's: top-k of the softmax, renormalised unless pre-softmax
    j["num_experts"] = m.moe_experts;
    j["num_experts_per_tok"] = m.moe_topk;
    j["moe_intermediate_size"] = m.MoeFfnHidden();
    j["norm_topk_prob"] = !m.moe_router_pre_softmax;  // false: the top k's full-softmax values
    j["decoder_sparse_step"] = 1;
    std::vector<int> dense;
    for (int l = 0; l < m.layers; ++l) {
      if (!m.IsMoeLayer(l)) dense.push_back(l);
    }
    j["mlp_only_layers"] = dense;
    j["output_router_logits"] = false;
  }
  if (qwen2_moe) {  // its shared expert (always gated) and Qwen2's bias on q, k and v
    j["shared_expert_intermediate_size"] = m.moe_shared_ffn_hidden;
    j["qkv_bias"] = true;
  }
  if (glm) {  // DeepSeek-V3's router on leading dense layers, experts and their shared expert
    j["n_routed_experts"] = m.moe_experts;
    j["num_experts_per_tok"] = m.moe_topk;
    j["moe_intermediate_size"] = m.MoeFfnHidden();
    j["n_shared_experts"] = m.moe_shared_ffn_hidden / m.MoeFfnHidden();
    j["first_k_dense_replace"] = m.moe_dense_layers;
    j["routed_scaling_factor"] = m.moe_router_topk_scale;
    j["n_group"] = m.moe_router_groups > 0 ? m.moe_router_groups : 1;
    j["topk_group"] = m.moe_router_groups > 0 ? m.moe_router_group_topk : 1;
    j["norm_topk_prob"] = true;
    if (deepseek) {
      AppendDeepseekV3Config(m, &j);
    } else {
      j["use_qk_norm"] = m.qk_norm;
      j["partial_rotary_factor"] = m.rotary_percent;
    }
    j["num_nextn_predict_layers"] = m.mtp_layers;  // model.layers.{L + d}: HfLlamaTensors
    j["output_router_logits"] = false;
  }
  j["num_attention_heads"] = m.heads;
  j["num_key_value_heads"] = m.KvHeads();
  if (!deepseek) j["head_dim"] = m.HeadDim();  // DeepseekV3Config's is its rotated width
  j["max_position_embeddings"] = m.seq_len;
  j["vocab_size"] = m.vocab;
  j[nemotron ? "norm_eps" : "rms_norm_eps"] = m.norm_eps;
  j["rope_theta"] = m.rotary_base;
  if (nemotron) j["partial_rotary_factor"] = m.rotary_percent;
  if (m.RopeYarn()) {
    j["rope_scaling"] = {{"rope_type", "yarn"},
                         {"factor", m.rope_scaling_factor},
                         {"original_max_position_embeddings", m.rope_original_max_positions},
                         {"beta_fast", m.rope_yarn_beta_fast},
                         {"beta_slow", m.rope_yarn_beta_slow},
                         {"mscale", m.rope_yarn_mscale},
                         {"mscale_all_dim", m.rope_yarn_mscale_all_dim}};
  } else if (m.rope_scaling_factor > 0) {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", m.rope_scaling_factor},
                         {"low_freq_factor", m.rope_low_freq_factor},
                         {"high_freq_factor", m.rope_high_freq_factor},
                         {"original_max_position_embeddings", m.rope_original_max_positions}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  j["attention_bias"] = glm && m.qkv_bias;
  if (nemotron) {
    j["mlp_bias"] = false;
  } else if (glm) {  // no window, no MLP bias key in Glm4MoeConfig
  } else if (arch == HfLlamaArch::kMistral || mixtral) {
    if (mixtral) {
      j["sliding_window"] = nullptr;
    } else {
      // transformers' mask keeps q - k < sliding_window: the query and window_size keys before it.
      j["sliding_window"] = m.window_size + 1;
    }
  } else if (arch != HfLlamaArch::kLlama) {  // Qwen's: no window
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;
  } else {
    j["mlp_bias"] = false;
  }
  // LlamaForCausalLM has no residual dropout: a training-time difference only.
  j["attention_dropout"] = m.dropout;
  j["tie_word_embeddings"] = m.tied_embeddings;
  j["initializer_range"] = 0.02;
  j["use_cache"] = true;
  j["torch_dtype"] = "float32";
  return j;
}

namespace {

// A layer's q, k, v (Qwen2's biases, Qwen3's QK norms) and o_proj, named p... in ptdp and q_... in
// the folder.
void AppendHfAttention(const ModelSpec& m, const std::string& p, const std::string& q_,
                       std::vector<HfTensorSpec>* out_) {
  const int64_t h = m.hidden;
  const int64_t q = int64_t(m.heads) * m.HeadDim(), kv = int64_t(m.KvHeads()) * m.HeadDim();
  using L = HfLayout;
  auto spec = [](std::string ptdp, std::string hf, std::vector<int64_t> shape, L layout) {
    return HfTensorSpec{std::move(ptdp), std::move(hf), std::move(shape), layout, false, 1, 0};
  };
  std::vector<HfTensorSpec>& out = *out_;
  out.push_back(spec(p + "attn.qkv.weight", q_ + "self_attn.q_proj.weight", {q, h}, L::kQProj));
  out.push_back(spec(p + "attn.qkv.weight", q_ + "self_attn.k_proj.weight", {kv, h}, L::kKProj));
  out.push_back(spec(p + "attn.qkv.weight", q_ + "self_attn.v_proj.weight", {kv, h}, L::kVProj));
  if (m.qkv_bias) {  // Qwen2's: the parts of qkv.bias
    out.push_back(spec(p + "attn.qkv.bias", q_ + "self_attn.q_proj.bias", {q}, L::kQProj));
    out.push_back(spec(p + "attn.qkv.bias", q_ + "self_attn.k_proj.bias", {kv}, L::kKProj));
    out.push_back(spec(p + "attn.qkv.bias", q_ + "self_attn.v_proj.bias", {kv}, L::kVProj));
  }
  if (m.qk_norm) {  // Qwen3's, one head wide
    out.push_back(
        spec(p + "attn.q_norm.weight", q_ + "self_attn.q_norm.weight", {m.HeadDim()}, L::kSame));
    out.push_back(
        spec(p + "attn.k_norm.weight", q_ + "self_attn.k_norm.weight", {m.HeadDim()}, L::kSame));
  }
  out.push_back(spec(p + "attn.proj.weight", q_ + "self_attn.o_proj.weight", {h, q}, L::kSame));
}

// Global layer l's tensors, named p... in ptdp and q_... in the folder (a prediction depth's layer
// is layers + d, of the last layer's kind: ModelSpec::IsMoeLayer).
void AppendHfLayer(const ModelSpec& m, int l, const std::string& p, const std::string& q_,
                   std::vector<HfTensorSpec>* out_) {
  const int64_t h = m.hidden, f = m.FfnHidden();
  const bool nemotron = HfLlamaArchOf(m) == HfLlamaArch::kNemotron;
  using L = HfLayout;
  auto spec = [](std::string ptdp, std::string hf, std::vector<int64_t> shape, L layout) {
    return HfTensorSpec{std::move(ptdp), std::move(hf), std::move(shape), layout, false, 1, 0};
  };
  std::vector<HfTensorSpec>& out = *out_;
  out.push_back(spec(p + "ln1.weight", q_ + "input_layernorm.weight", {h}, L::kSame));
  if (nemotron) out.push_back(spec(p + "ln1.bias", q_ + "input_layernorm.bias", {h}, L::kSame));
  if (m.IsMla()) {
    AppendHfMlaAttention(m, p, q_, &out);  // hf_deepseek.h, o_proj included
  } else {
    AppendHfAttention(m, p, q_, &out);
  }
  out.push_back(spec(p + "ln2.weight", q_ + "post_attention_layernorm.weight", {h}, L::kSame));
  if (m.IsMoeLayer(l)) {  // Qwen3-MoE's or Qwen2-MoE's router and experts, or Mixtral's
    const int64_t fe = m.MoeFfnHidden();
    const bool mx = HfLlamaArchOf(m) == HfLlamaArch::kMixtral;
    // GLM-4.5's router and shared experts are DeepSeek-V3's.
    const bool glm =
        HfLlamaArchOf(m) == HfLlamaArch::kGlm4Moe || HfLlamaArchOf(m) == HfLlamaArch::kDeepseekV3;
    const std::string block = q_ + (mx ? "block_sparse_moe." : "mlp.");
    out.push_back(
        spec(p + "moe.router.weight", block + "gate.weight", {m.moe_experts, h}, L::kSame));
    if (glm) {  // its expert bias: RouterBiases', from the checkpoint's manifest
      out.push_back(spec(ExpertBiasName(l), block + "gate.e_score_correction_bias", {m.moe_experts},
                         L::kExpertBias));
    }
    if (m.HasSharedExpert()) {  // Qwen2-MoE's, with its gate; GLM-4.5's without
      const int64_t fs = m.moe_shared_ffn_hidden;
      const std::string hs = block + (glm ? "shared_experts." : "shared_expert.");
      out.push_back(
          spec(p + "moe.shared.fc1.weight", hs + "gate_proj.weight", {fs, h}, L::kGateProj));
      out.push_back(spec(p + "moe.shared.fc1.weight", hs + "up_proj.weight", {fs, h}, L::kUpProj));
      out.push_back(spec(p + "moe.shared.fc2.weight", hs + "down_proj.weight", {h, fs}, L::kSame));
      if (m.moe_shared_gate) {
        out.push_back(spec(p + "moe.shared.gate.weight", block + "shared_expert_gate.weight",
                           {1, h}, L::kSame));
      }
    }
    for (int e = 0; e < m.moe_experts; ++e) {
      const std::string pe = p + "moe.expert" + std::to_string(e) + ".";
      const std::string he = block + "experts." + std::to_string(e) + ".";
      out.push_back(spec(pe + "fc1.weight", he + (mx ? "w1.weight" : "gate_proj.weight"), {fe, h},
                         L::kGateProj));
      out.push_back(
          spec(pe + "fc1.weight", he + (mx ? "w3.weight" : "up_proj.weight"), {fe, h}, L::kUpProj));
      out.push_back(
          spec(pe + "fc2.weight", he + (mx ? "w2.weight" : "down_proj.weight"), {h, fe}, L::kSame));
    }
    return;
  }
  if (nemotron) {  // LayerNorm1P's bias, and the two-matrix MLP's fc1 whole
    out.push_back(spec(p + "ln2.bias", q_ + "post_attention_layernorm.bias", {h}, L::kSame));
    out.push_back(spec(p + "mlp.fc1.weight", q_ + "mlp.up_proj.weight", {f, h}, L::kSame));
  } else {
    out.push_back(spec(p + "mlp.fc1.weight", q_ + "mlp.gate_proj.weight", {f, h}, L::kGateProj));
    out.push_back(spec(p + "mlp.fc1.weight", q_ + "mlp.up_proj.weight", {f, h}, L::kUpProj));
  }
  out.push_back(spec(p + "mlp.fc2.weight", q_ + "mlp.down_proj.weight", {h, f}, L::kSame));
}

}  // namespace

std::vector<HfTensorSpec> HfLlamaTensors(const ModelSpec& m) {
  const int64_t h = m.hidden, V = m.vocab;
  const bool nemotron = HfLlamaArchOf(m) == HfLlamaArch::kNemotron;
  using L = HfLayout;
  auto spec = [](std::string ptdp, std::string hf, std::vector<int64_t> shape, L layout) {
    return HfTensorSpec{std::move(ptdp), std::move(hf), std::move(shape), layout, false, 1, 0};
  };
  std::vector<HfTensorSpec> out = {
      spec("embedding.word", "model.embed_tokens.weight", {V, h}, L::kSame)};
  for (int l = 0; l < m.layers; ++l) {
    AppendHfLayer(m, l, "layer" + std::to_string(l) + ".",
                  "model.layers." + std::to_string(l) + ".", &out);
  }
  // GLM-4.5's prediction depths, as its folders hold them (the layers transformers skips,
  // model.layers.{L + d}; vLLM's Glm4MoeMultiTokenPredictorLayer): the layer's tensors, enorm,
  // hnorm, eh_proj and shared_head.norm (the depth's final norm). The embedding and the output
  // matrix are the model's.
  for (int d = 0; d < m.mtp_layers; ++d) {
    const std::string p = "mtp" + std::to_string(d) + ".",
                      q_ = "model.layers." + std::to_string(m.layers + d) + ".";
    AppendHfLayer(m, m.layers + d, p, q_, &out);
    out.push_back(spec(p + "enorm.weight", q_ + "enorm.weight", {h}, L::kSame));
    out.push_back(spec(p + "hnorm.weight", q_ + "hnorm.weight", {h}, L::kSame));
    out.push_back(spec(p + "eh_proj.weight", q_ + "eh_proj.weight", {h, 2 * h}, L::kSame));
    out.push_back(spec(p + "final_norm.weight", q_ + "shared_head.norm.weight", {h}, L::kSame));
  }
  out.push_back(spec("final_ln.weight", "model.norm.weight", {h}, L::kSame));
  if (nemotron) out.push_back(spec("final_ln.bias", "model.norm.bias", {h}, L::kSame));
  if (!m.tied_embeddings) out.push_back(spec("output.weight", "lm_head.weight", {V, h}, L::kSame));
  return out;
}

namespace {

// The runtime row (of qkv.weight or fc1.weight, `rt_rows` rows) that HF row r of part s is.
int64_t RuntimeRowOf(const HfTensorSpec& s, int64_t heads, int64_t rt_rows, int64_t r) {
  const int64_t rows = s.hf_shape[0];
  if (s.layout == HfLayout::kGateProj) return 2 * r;  // fc1 rows [f][2]
  if (s.layout == HfLayout::kUpProj) return 2 * r + 1;
  // qkv rows (a + 2 kv) D: the query part has a D rows, the key and value parts kv D each.
  const int64_t d = s.layout == HfLayout::kQProj ? rows / heads : (rt_rows - 2 * rows) / heads;
  const int64_t kv = (rt_rows / d - heads) / 2;
  const kernels::QkvLayout row{heads, d, heads / kv};
  const int64_t head = r / d, e = r % d;
  if (s.layout == HfLayout::kQProj) return row.Q(head) + e;
  if (s.layout == HfLayout::kKProj) return row.KvOf(head) + e;
  return row.KvOf(head) + d + e;  // kVProj
}

}  // namespace

std::vector<float> LlamaPartOf(const HfTensorSpec& s, int64_t heads, const std::vector<float>& rt) {
  const int64_t rows = s.hf_shape[0], cols = ColsOf(s), rt_rows = int64_t(rt.size()) / cols;
  std::vector<float> hf(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    const auto from = rt.begin() + RuntimeRowOf(s, heads, rt_rows, r) * cols;
    std::copy(from, from + cols, hf.begin() + r * cols);
  }
  return hf;
}

void LlamaPartInto(const HfTensorSpec& s, int64_t heads, const std::vector<float>& hf,
                   std::vector<float>* rt) {
  const int64_t rows = s.hf_shape[0], cols = ColsOf(s), rt_rows = int64_t(rt->size()) / cols;
  for (int64_t r = 0; r < rows; ++r) {
    std::copy(hf.begin() + r * cols, hf.begin() + (r + 1) * cols,
              rt->begin() + RuntimeRowOf(s, heads, rt_rows, r) * cols);
  }
}

Result<HfGpt2Config> HfLlamaConfigFromJson(const Json& j, const std::string& source) {
  auto bad = [&](const std::string& key, const std::string& why) {
    return Status::Invalid(source + ": " + key + ": " + why);
  };
  // Mistral is Llama's computation with a sliding window (core/hf_config.cc reads it; the runtime
  // runs it only where it is null or spans the sequence), Qwen2 Llama's with biases on q, k and v,
  // and Qwen3 Llama's with QK norms; their tensors have Llama's names.
  PTDP_ASSIGN_OR_RETURN(const std::string type, StringAt(j, "model_type", "", source));
  if (!IsHfLlamaFamily(type)) {
    return bad("model_type", "not \"llama\", \"mistral\", \"qwen2\", \"qwen3\" or \"nemotron\"");
  }
  // rms_norm_eps becomes norm_eps (transformers' default 1e-6 when absent).
  PTDP_ASSIGN_OR_RETURN(ModelSpec m, ModelFromHfConfig(j, source));
  if (type == "deepseek_v3" || type == "kimi_k2") {
    PTDP_RETURN_IF_ERROR(CheckDeepseekV3RopeLayout(j, source));
  }
  // RoPE: unscaled, Llama 3.1's scaling or YaRN's (core/hf_config.cc read their numbers).
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    const auto rs = j.find(key);
    if (rs == j.end() || rs->is_null()) continue;
    PTDP_ASSIGN_OR_RETURN(const std::string legacy,
                          StringAt(*rs, "type", "default", source + "." + key));
    PTDP_ASSIGN_OR_RETURN(std::string type, StringAt(*rs, "rope_type", legacy, source + "." + key));
    if (!rs->is_object()) type = "?";
    if (type != "default" && type != "llama3" && type != "yarn") {
      return bad(std::string(key) + ".rope_type",
                 type +
                     " is not supported: ptdp's rotation is unscaled, Llama 3.1's (llama3) or "
                     "YaRN's (yarn)");
    }
  }
  PTDP_RETURN_IF_ERROR(CheckHfLlamaReadable(m, source + ": the model"));
  PTDP_ASSIGN_OR_RETURN(const Fp8Blocks fp8, Fp8BlocksFromConfig(j, source));
  return HfGpt2Config{m, m.seq_len, fp8};
}

Result<std::map<std::string, StTensor>> MatchHfLlamaHeader(const StHeader& h, const ModelSpec& m,
                                                           const std::string& source,
                                                           const Fp8Blocks& fp8) {
  std::map<std::string, const HfTensorSpec*> by_hf;
  const std::vector<HfTensorSpec> specs = HfLlamaTensors(m);
  for (const auto& s : specs) by_hf[s.hf] = &s;
  // A prediction depth's copies of the model's embedding and output matrix, which DeepSeek-V3's
  // folders hold beside its own tensors (their values are the model's: not read).
  std::set<std::string> depth_copies;
  for (int d = 0; d < m.mtp_layers; ++d) {
    const std::string q_ = "model.layers." + std::to_string(m.layers + d) + ".";
    depth_copies.insert({q_ + "embed_tokens.weight", q_ + "shared_head.head.weight"});
  }
  std::map<std::string, StTensor> out;
  const std::string inv_freq = ".rotary_emb.inv_freq";  // a buffer older files carry
  for (const StTensor& t : h.tensors) {
    if (IsFp8ScaleName(t.name)) continue;  // MatchFp8Scales's, below
    auto it = by_hf.find(t.name);
    if (it == by_hf.end()) {
      const bool buffer =
          t.name.size() > inv_freq.size() &&
          t.name.compare(t.name.size() - inv_freq.size(), inv_freq.size(), inv_freq) == 0;
      if (buffer || (t.name == "lm_head.weight" && m.tied_embeddings)) continue;
      if (depth_copies.count(t.name) > 0) continue;
      return Status::Invalid(source + ": tensor '" + t.name +
                             "' is not a parameter of the Llama model config.json describes");
    }
    if (out.count(t.name) > 0) {
      return Status::Invalid(source + ": tensor '" + t.name + "' appears twice");
    }
    StTensor as_float = t;  // a F8_E4M3 weight's shape is checked here, its scale below
    if (t.dtype == "F8_E4M3") as_float.dtype = "F32";
    PTDP_RETURN_IF_ERROR(CheckHfTensorEntry(as_float, *it->second, source));
    out[t.name] = t;
  }
  for (const auto& s : specs) {
    if (out.count(s.hf) == 0) return Status::Invalid(source + ": missing tensor '" + s.hf + "'");
  }
  PTDP_RETURN_IF_ERROR(MatchFp8Scales(
      h, fp8, std::vector<std::string>(depth_copies.begin(), depth_copies.end()), &out, source));
  return out;
}

}  // namespace ptdp::runtime
