// DeepSeek-V3's folder: multi-latent attention's tensors and config keys, and the check of
// GLM-4.5's, whose router is DeepSeek-V3's (hf_deepseek.h).
#include "runtime/checkpoint/hf_deepseek.h"

#include <algorithm>

namespace ptdp::runtime {

namespace {

// What in m's mixture DeepSeek-V3's MoE block in transformers (DeepseekV3MoE, and GLM-4.5's copy
// of it) does not compute, or "": its shared expert is n_shared_experts ungated experts, its dense
// layers the leading ones, and a group is scored by its 2 best experts.
std::string RouterMismatch(const ModelSpec& m) {
  if (m.moe_shared_gate || !m.HasSharedExpert() ||
      m.moe_shared_ffn_hidden % m.MoeFfnHidden() != 0) {
    return "its shared expert is not n_shared_experts ungated experts' width";
  }
  if (!m.moe_layer_pattern.empty()) return "its dense layers are not the leading ones";
  if (m.moe_router_groups > 0 && std::max(1, m.moe_topk / m.moe_router_group_topk) != 2) {
    return "its groups are scored by their k / group_topk best experts, HF's by their 2 best";
  }
  return "";
}

}  // namespace

// GLM-4.5 as transformers' Glm4MoeForCausalLM computes it: Llama's layers with partial RoPE (any
// rotary_percent), optional QK norms and q, k, v biases; leading dense layers, then experts beside
// one shared expert of a whole number of experts' width; DeepSeek-V3's router with its expert
// bias, groups scored by their 2 best experts (HF's fixed rule; Megatron-Core's k / group_topk).
Status CheckGlm4MoeReadable(const ModelSpec& m, const std::string& what) {
  auto bad = [&](const std::string& why) {
    return Status::Invalid(
        what + " is not a model of Hugging Face's GLM-4.5 (Glm4MoeForCausalLM): " + why);
  };
  if (!m.rmsnorm || !m.swiglu || !m.rotary) return bad("it needs rmsnorm, swiglu and rotary");
  if (m.linear_bias) return bad("it has biases on every Linear (linear_bias)");
  if (m.IsMla()) return bad("it has latent attention");
  if (m.window_size > 0) return bad("it has sliding-window attention (window_size)");
  if (!m.moe_router_expert_bias) return bad("its router has no expert bias");
  if (const std::string why = RouterMismatch(m); !why.empty()) return bad(why);
  if (m.rope_scaling_factor > 0 && m.rotary_percent != 1) {
    return bad("it scales the frequencies of a partial rotation (rope_scaling_factor)");
  }
  return Status::Ok();
}

Status CheckDeepseekV3Readable(const ModelSpec& m, const std::string& what) {
  auto bad = [&](const std::string& why) {
    return Status::Invalid(
        what + " is not a model of Hugging Face's DeepSeek-V3 (DeepseekV3ForCausalLM): " + why);
  };
  if (!m.rmsnorm || !m.swiglu || !m.rotary) return bad("it needs rmsnorm, swiglu and rotary");
  if (m.linear_bias || m.qkv_bias) return bad("it has biases on its Linears");
  // transformers norms both latents always (q_a_layernorm, kv_a_layernorm).
  if (!m.qk_norm) return bad("its latents are not normed (qk_norm false)");
  // DeepseekV3RMSNorm(q_lora_rank) and (kv_lora_rank) take the class's default epsilon, 1e-6 (as
  // DeepSeek's own code does), not rms_norm_eps; ptdp norms every RMSNorm with norm_eps.
  if (m.norm_eps != 1e-6) {
    return bad("its norm_eps is " + std::to_string(m.norm_eps) +
               ", and transformers norms the latents with 1e-6 whatever rms_norm_eps says");
  }
  if (m.rotary_percent != 1) return bad("it turns part of the rotated features (rotary_percent)");
  if (m.window_size > 0) return bad("it has sliding-window attention (window_size)");
  // DeepseekV3MoE: the router of GLM-4.5's check (sigmoid, the bias, groups by their 2 best), on
  // every layer from first_k_dense_replace, beside n_shared_experts experts' width.
  if (!m.IsMoe() || !m.moe_router_sigmoid || !m.moe_router_expert_bias) {
    return bad("it has no mixture of experts with sigmoid scores and the expert bias");
  }
  if (const std::string why = RouterMismatch(m); !why.empty()) return bad(why);
  return Status::Ok();
}

void AppendDeepseekV3Config(const ModelSpec& m, OrderedJson* j) {
  OrderedJson& c = *j;
  if (m.mla_q_lora > 0) {
    c["q_lora_rank"] = m.mla_q_lora;
  } else {
    c["q_lora_rank"] = nullptr;
  }
  c["kv_lora_rank"] = m.mla_kv_lora;
  c["qk_nope_head_dim"] = m.HeadDim();
  c["qk_rope_head_dim"] = m.mla_rope_dim;
  c["v_head_dim"] = m.mla_v_dim;
  c["rope_interleave"] = true;  // DeepSeek's rotated rows, interleaved (kRopeInterleaved)
  c["scoring_func"] = "sigmoid";
  c["topk_method"] = "noaux_tc";
}

void AppendHfMlaAttention(const ModelSpec& m, const std::string& p, const std::string& q_,
                          std::vector<HfTensorSpec>* out) {
  const int64_t h = m.hidden, a = m.heads, ql = m.mla_q_lora, kvl = m.mla_kv_lora;
  // (units, rotated rows) of a query projection (a head each) and kv_a_proj (one):
  // kRopeInterleaved.
  auto add = [&](const std::string& ptdp, const std::string& hf, std::vector<int64_t> shape,
                 int64_t units = 1, int64_t rope = 0) {
    out->push_back(HfTensorSpec{p + ptdp, q_ + "self_attn." + hf, std::move(shape),
                                rope > 0 ? HfLayout::kRopeInterleaved : HfLayout::kSame, false,
                                units, rope});
  };
  const int64_t rope = m.mla_rope_dim;
  if (ql > 0) {
    add("attn.q_down.weight", "q_a_proj.weight", {ql, h});
    add("attn.q_norm.weight", "q_a_layernorm.weight", {ql});
    add("attn.q_up.weight", "q_b_proj.weight", {a * m.QkHeadDim(), ql}, a, rope);
  } else {
    add("attn.q.weight", "q_proj.weight", {a * m.QkHeadDim(), h}, a, rope);
  }
  add("attn.kv_down.weight", "kv_a_proj_with_mqa.weight", {kvl + rope, h}, 1, rope);
  add("attn.kv_norm.weight", "kv_a_layernorm.weight", {kvl});
  add("attn.kv_up.weight", "kv_b_proj.weight", {a * (m.HeadDim() + m.VHeadDim()), kvl});
  add("attn.proj.weight", "o_proj.weight", {h, m.AttnWidth()});
}

Status CheckDeepseekV3RopeLayout(const Json& j, const std::string& source) {
  const auto it = j.find("rope_interleave");
  if (it == j.end() || (it->is_boolean() && it->get<bool>())) return Status::Ok();
  return Status::Invalid(source + ": rope_interleave: " + it->dump() +
                         ": only DeepSeek's interleaved rotated rows are read (true, "
                         "transformers' default)");
}

}  // namespace ptdp::runtime
