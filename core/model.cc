#include "core/model.h"

#include <algorithm>
#include <cmath>

#include "core/checked.h"
#include "core/hf_config.h"

namespace ptdp {

namespace {

// The scaling's numbers once rope_scaling_factor is set: Llama 3.1's band or YaRN's ramp.
Status ValidateRopeScaling(const ModelSpec& m, const std::string& at) {
  std::string err;
  auto add = [&](const Status& st) {
    if (!st.ok()) err += (err.empty() ? "" : "; ") + st.message();
  };
  if (!(std::isfinite(m.rope_scaling_factor) && m.rope_scaling_factor >= 1 &&
        m.rope_scaling_factor <= 1024)) {
    add(CheckRange(at + "rope_scaling_factor", m.rope_scaling_factor, 1.0, 1024.0));
  } else if (!m.rotary) {
    add(Status::Invalid(at + "rope_scaling_factor: needs rotary"));
  }
  if (m.rope_scaling_type == "llama3") {
    if (!(std::isfinite(m.rope_low_freq_factor) && std::isfinite(m.rope_high_freq_factor) &&
          m.rope_low_freq_factor > 0 && m.rope_low_freq_factor < m.rope_high_freq_factor &&
          m.rope_high_freq_factor <= 1e6)) {
      add(Status::Invalid(at + "rope_high_freq_factor: must exceed rope_low_freq_factor (" +
                          FormatDouble(m.rope_low_freq_factor) + "), which must exceed 0"));
    }
  } else if (m.rope_scaling_type == "yarn") {
    if (!(std::isfinite(m.rope_yarn_beta_fast) && std::isfinite(m.rope_yarn_beta_slow) &&
          m.rope_yarn_beta_slow > 0 && m.rope_yarn_beta_slow <= m.rope_yarn_beta_fast &&
          m.rope_yarn_beta_fast <= 1e6)) {
      // Equal betas are Kimi K2's (both 1).
      add(Status::Invalid(at + "rope_yarn_beta_fast: must be at least rope_yarn_beta_slow (" +
                          FormatDouble(m.rope_yarn_beta_slow) + "), which must exceed 0"));
    }
    for (const auto& [field, v] :
         {std::pair{"rope_yarn_mscale", m.rope_yarn_mscale},
          std::pair{"rope_yarn_mscale_all_dim", m.rope_yarn_mscale_all_dim}}) {
      if (!(std::isfinite(v) && v >= 0 && v <= 100)) add(CheckRange(at + field, v, 0.0, 100.0));
    }
  } else {
    add(Status::Invalid(at + "rope_scaling_type: \"" + m.rope_scaling_type +
                        "\" is not \"llama3\" or \"yarn\""));
  }
  if (m.rope_original_max_positions < 1 || m.rope_original_max_positions > (int64_t(1) << 30)) {
    add(CheckRange(at + "rope_original_max_positions", m.rope_original_max_positions, 1,
                   int64_t(1) << 30));
  }
  return err.empty() ? Status::Ok() : Status::Invalid(err);
}

// YaRN's mscale(f, m): the attention's temperature for a context `factor` times longer.
double YarnMscale(double factor, double mscale) {
  return factor <= 1 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0;
}

}  // namespace

double ModelSpec::RopeAttentionFactor() const {
  if (!RopeYarn()) return 1.0;
  return YarnMscale(rope_scaling_factor, rope_yarn_mscale) /
         YarnMscale(rope_scaling_factor, rope_yarn_mscale_all_dim);
}

double ModelSpec::MlaSoftmaxFactor() const {
  if (!RopeYarn() || !IsMla()) return 1.0;
  const double m = YarnMscale(rope_scaling_factor, rope_yarn_mscale_all_dim);
  return m * m;
}

std::string ModelSpec::RopeScalingText() const {
  if (!(rope_scaling_factor > 0)) return "none";
  const std::string head = rope_scaling_type + " factor " + FormatDouble(rope_scaling_factor);
  const std::string original = ", original " + std::to_string(rope_original_max_positions);
  if (RopeYarn()) {
    return head + original + ", betas " + FormatDouble(rope_yarn_beta_fast) + " and " +
           FormatDouble(rope_yarn_beta_slow) + ", mscales " + FormatDouble(rope_yarn_mscale) +
           " and " + FormatDouble(rope_yarn_mscale_all_dim);
  }
  return head + ", low " + FormatDouble(rope_low_freq_factor) + ", high " +
         FormatDouble(rope_high_freq_factor) + original;
}

bool ModelSpec::SameRopeScaling(const ModelSpec& o) const {
  if (rope_scaling_factor != o.rope_scaling_factor) return false;
  if (!(rope_scaling_factor > 0)) return true;
  if (rope_scaling_type != o.rope_scaling_type ||
      rope_original_max_positions != o.rope_original_max_positions) {
    return false;
  }
  if (!RopeYarn()) {
    return rope_low_freq_factor == o.rope_low_freq_factor &&
           rope_high_freq_factor == o.rope_high_freq_factor;
  }
  return rope_yarn_beta_fast == o.rope_yarn_beta_fast &&
         rope_yarn_beta_slow == o.rope_yarn_beta_slow && rope_yarn_mscale == o.rope_yarn_mscale &&
         rope_yarn_mscale_all_dim == o.rope_yarn_mscale_all_dim;
}

Status ModelSpec::Validate(const std::string& path) const {
  const std::string at = path.empty() ? "" : path + ".";
  std::string err;
  auto add = [&](const Status& st) {
    if (!st.ok()) err += (err.empty() ? "" : "; ") + st.message();
  };
  // A field's range, its message (and the key path's string) built only when it is out: the
  // planner validates the model with every layout it scores.
  auto range = [&](const char* field, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi) add(CheckRange(at + field, v, lo, hi));
  };
  range("layers", int64_t(layers), 1, kMaxLayers);
  range("hidden", hidden, 1, kMaxHidden);
  range("heads", int64_t(heads), 1, kMaxHeads);
  range("head_dim", head_dim, 0, kMaxHidden);
  if (heads > 0 && hidden > 0 && head_dim == 0 && hidden % heads != 0)
    add(Status::Invalid(at + "hidden: must be divisible by heads (or give head_dim)"));
  range("ffn_hidden", ffn_hidden, 0, kMaxFfnHidden);
  range("seq_len", seq_len, 1, kMaxSeqLen);
  range("vocab", vocab, 1, kMaxVocab);
  range("vocab_divisible_by", int64_t(vocab_divisible_by), 1, kMaxVocabDivisibleBy);
  if (!(std::isfinite(dropout) && dropout >= 0.0 && dropout < 1.0)) {
    add(CheckRange(at + "dropout", dropout, 0.0, 1.0, /*hi_open=*/true));
  }
  range("kv_heads", int64_t(kv_heads), 0, kMaxHeads);
  if (kv_heads > 0 && heads > 0 && heads % kv_heads != 0)
    add(Status::Invalid(at + "kv_heads: must divide heads (" + std::to_string(heads) + ")"));
  if (!(std::isfinite(rotary_base) && rotary_base >= 1.0 && rotary_base <= 1e12)) {
    add(CheckRange(at + "rotary_base", rotary_base, 1.0, 1e12));
  }
  if (rope_scaling_factor != 0) add(ValidateRopeScaling(*this, at));
  if (!(std::isfinite(rotary_percent) && rotary_percent > 0 && rotary_percent <= 1)) {
    add(Status::Invalid(at + "rotary_percent: " + FormatDouble(rotary_percent) +
                        " is outside (0, 1]"));
  } else if (rotary_percent != 1 && !rotary) {
    add(Status::Invalid(at + "rotary_percent: needs rotary"));
  } else if (rotary && heads > 0 && HeadDim() > 0) {  // (heads and head_dim checked above)
    // RoPE turns pairs (e, e + n / 2) of the first n features (Megatron-Core's int(kv_channels *
    // rotary_percent), Hugging Face's int(head_dim * partial_rotary_factor)).
    const int64_t turned = static_cast<int64_t>(double(HeadDim()) * rotary_percent);
    if (turned < 2 || turned % 2 != 0) {
      add(Status::Invalid(at + "rotary_percent: turns " + std::to_string(turned) + " of a head's " +
                          std::to_string(HeadDim()) +
                          " features; RoPE turns pairs, so it needs an even number of at least 2"));
    }
  }
  if (squared_relu && swiglu) {
    add(Status::Invalid(at + "squared_relu: replaces the GeLU of a two-matrix MLP, not SwiGLU "
                             "(set one of squared_relu and swiglu)"));
  }
  if (!(std::isfinite(norm_eps) && norm_eps >= 1e-12 && norm_eps <= 1e-2)) {
    add(CheckRange(at + "norm_eps", norm_eps, 1e-12, 1e-2));
  } else if (!rmsnorm && norm_eps != 1e-5) {
    add(Status::Invalid(at + "norm_eps: " + FormatDouble(norm_eps) +
                        " needs rmsnorm (LayerNorm's epsilon is 1e-05)"));
  }
  range("moe_experts", int64_t(moe_experts), 0, kMaxExperts);
  range("moe_ffn_hidden", moe_ffn_hidden, 0, kMaxFfnHidden);
  if (moe_experts > 0) {
    if (moe_topk < 1 || moe_topk > moe_experts) {
      add(Status::Invalid(at + "moe_topk: " + std::to_string(moe_topk) + " is outside [1, " +
                          std::to_string(moe_experts) + "] (the experts a token is sent to)"));
    }
    // The experts are priced as Megatron-Core's SwiGLU grouped MLP (Mixtral, Qwen3, DeepSeek).
    if (!swiglu || linear_bias) {
      add(Status::Invalid(at + "moe_experts: needs swiglu and no linear_bias (the experts are "
                               "modelled as SwiGLU without biases)"));
    }
    if (!moe_layer_pattern.empty()) {
      int mixture = 0;
      bool binary = true;
      for (int x : moe_layer_pattern) {
        mixture += x == 1;
        binary = binary && (x == 0 || x == 1);
      }
      if (int64_t(moe_layer_pattern.size()) != int64_t(layers) || !binary || mixture == 0 ||
          moe_dense_layers != 0) {
        add(Status::Invalid(at +
                            "moe_layer_pattern: expected one 0 (dense) or 1 (mixture) for each "
                            "of the " +
                            std::to_string(layers) +
                            " layers, at least one 1, and no moe_dense_layers beside it"));
      }
    }
    if (moe_dense_layers < 0 || moe_dense_layers >= layers) {
      add(Status::Invalid(at + "moe_dense_layers: " + std::to_string(moe_dense_layers) +
                          " is outside [0, " + std::to_string(layers - 1) +
                          "] (leading dense layers; at least one layer has experts)"));
    }
  } else if (moe_topk != 0 || moe_ffn_hidden != 0) {
    add(Status::Invalid(at + "moe_topk: set without moe_experts (a dense model has no router)"));
  } else if (moe_shared_ffn_hidden != 0 || moe_dense_layers != 0 || moe_shared_gate ||
             !moe_layer_pattern.empty() || moe_router_pre_softmax || moe_router_sigmoid ||
             moe_router_expert_bias || moe_router_topk_scale != 1) {
    add(Status::Invalid(at +
                        (moe_shared_ffn_hidden != 0   ? "moe_shared_ffn_hidden"
                         : moe_dense_layers != 0      ? "moe_dense_layers"
                         : !moe_layer_pattern.empty() ? "moe_layer_pattern"
                         : moe_shared_gate            ? "moe_shared_gate"
                         : moe_router_pre_softmax     ? "moe_router_pre_softmax"
                         : moe_router_sigmoid         ? "moe_router_sigmoid"
                         : moe_router_expert_bias     ? "moe_router_expert_bias"
                                                      : "moe_router_topk_scale") +
                        ": set without moe_experts (a dense model has no experts)"));
  }
  if (moe_router_groups != 0 || moe_router_group_topk != 0) {
    // Megatron-Core's TopKRouter: equal groups, k experts from the chosen groups' experts.
    const int64_t per_group = moe_router_groups > 0 ? moe_experts / moe_router_groups : 0;
    if (!IsMoe() || moe_router_groups < 1 || moe_experts % moe_router_groups != 0 ||
        moe_router_group_topk < 1 || moe_router_group_topk > moe_router_groups ||
        moe_router_group_topk * per_group < moe_topk) {
      add(Status::Invalid(at +
                          "moe_router_groups: needs experts, a group count that divides "
                          "moe_experts and 1 <= moe_router_group_topk <= moe_router_groups with "
                          "at least moe_topk experts in the chosen groups"));
    }
  }
  if (moe_router_sigmoid && moe_router_pre_softmax) {
    add(Status::Invalid(at + "moe_router_pre_softmax: not with moe_router_sigmoid (Megatron-Core "
                             "renormalises sigmoid scores over the top k and has no pre-softmax "
                             "form of them)"));
  }
  if (moe_router_expert_bias && !moe_router_sigmoid) {
    add(Status::Invalid(at + "moe_router_expert_bias: needs moe_router_sigmoid (Megatron-Core's "
                             "expert bias is for sigmoid scores only)"));
  }
  if (!(moe_router_topk_scale > 0 && moe_router_topk_scale <= 1e3)) {
    add(Status::Invalid(at + "moe_router_topk_scale: " + FormatDouble(moe_router_topk_scale) +
                        " is outside (0, 1000]"));
  }
  if (!(moe_router_bias_rate >= 0 && moe_router_bias_rate <= 1)) {
    add(Status::Invalid(at + "moe_router_bias_rate: " + FormatDouble(moe_router_bias_rate) +
                        " is outside [0, 1]"));
  }
  if (DropsTokens() || moe_capacity_factor != 0) {
    if (!IsMoe() || !(moe_capacity_factor > 0 && moe_capacity_factor <= 1e3)) {
      add(Status::Invalid(at + "moe_capacity_factor: " + FormatDouble(moe_capacity_factor) +
                          (IsMoe() ? " is outside (0, 1000]" : " set without moe_experts") +
                          " (each expert's capacity over its balanced share; 0: dropless)"));
    }
  } else if (moe_drop_by_position || moe_pad_to_capacity) {
    add(Status::Invalid(at +
                        (moe_pad_to_capacity ? "moe_pad_to_capacity" : "moe_token_drop_policy") +
                        ": set without moe_capacity_factor (a dropless router has no capacity)"));
  }
  if (moe_shared_gate && moe_shared_ffn_hidden == 0) {
    add(Status::Invalid(at + "moe_shared_gate: set without moe_shared_ffn_hidden (no shared "
                             "expert to gate)"));
  }
  range("moe_shared_ffn_hidden", moe_shared_ffn_hidden, 0, kMaxFfnHidden);
  range("mtp_layers", int64_t(mtp_layers), 0, 16);
  range("mla_kv_lora", mla_kv_lora, 0, kMaxHidden);
  range("mla_q_lora", mla_q_lora, 0, kMaxHidden);
  range("mla_rope_dim", mla_rope_dim, 0, kMaxHidden);
  range("mla_v_dim", mla_v_dim, 0, kMaxHidden);
  // The attention's widths a dqk and a dv bound every per-layer product (a parameter count is
  // at most a few of them times h or a latent, times l) well inside 64 bits.
  if (heads > 0 && heads <= kMaxHeads && head_dim <= kMaxHidden && mla_rope_dim <= kMaxHidden &&
      mla_v_dim <= kMaxHidden && std::max(QkWidth(), AttnWidth()) > kMaxFfnHidden) {
    add(Status::Invalid(at + "head_dim: heads x the head's width = " +
                        std::to_string(std::max(QkWidth(), AttnWidth())) + " is over " +
                        std::to_string(kMaxFfnHidden) + " (the attention's width)"));
  }
  if (IsMla()) {
    // Every head has its own key and value (no query groups), each of its own width, and the
    // rotated part is what rotary position embeddings act on.
    if (head_dim == 0 || mla_rope_dim == 0 || mla_v_dim == 0) {
      add(Status::Invalid(at + "mla_kv_lora: needs head_dim, mla_rope_dim and mla_v_dim (the "
                               "heads' unrotated, rotated and value features)"));
    }
    if (KvHeads() != heads) {
      add(Status::Invalid(at + "kv_heads: multi-latent attention has a key and a value per head"));
    }
    if (!rotary) add(Status::Invalid(at + "mla_kv_lora: needs rotary (its rotated features)"));
  } else if (mla_q_lora != 0 || mla_rope_dim != 0 || mla_v_dim != 0) {
    add(Status::Invalid(at + "mla_q_lora: set without mla_kv_lora (no multi-latent attention)"));
  }
  range("window_size", window_size, 0, kMaxSeqLen);
  range("window_full_every", int64_t(window_full_every), 0, kMaxLayers);
  if (window_full_every == 1 || (window_full_every > 1 && window_size == 0)) {
    add(Status::Invalid(at + "window_full_every: needs window_size > 0 and N >= 2 (1 would leave "
                             "no layer windowed)"));
  }
  if (window_size > 0 && (IsMla() || mtp_layers > 0 || HasDenseLayers())) {
    add(Status::Invalid(at + "window_size: sliding-window attention is not modelled with "
                             "multi-latent attention, prediction depths or a mixture's dense "
                             "layers"));
  }
  if (err.empty()) return Status::Ok();
  return Status::Invalid(path.empty() ? "model " + name + ": " + err : err);
}

ModelSpec DenseLayerModel(const ModelSpec& m) {
  ModelSpec dense = m;
  dense.moe_experts = dense.moe_topk = dense.moe_dense_layers = 0;
  dense.moe_ffn_hidden = dense.moe_shared_ffn_hidden = 0;
  dense.moe_shared_gate = dense.moe_router_pre_softmax = false;
  dense.moe_router_sigmoid = dense.moe_router_expert_bias = false;
  dense.moe_router_topk_scale = 1.0;
  dense.moe_router_bias_rate = 1e-3;
  dense.moe_capacity_factor = 0;
  dense.moe_drop_by_position = dense.moe_pad_to_capacity = false;
  dense.moe_layer_pattern.clear();
  dense.moe_router_groups = dense.moe_router_group_topk = 0;
  dense.mtp_layers = 0;  // a layer kind, not a model with its own prediction depths
  return dense;
}

int MixtureDenseLayersIn(const ModelSpec& m, int begin, int end) {
  if (!m.IsMoe()) return 0;
  if (!m.moe_layer_pattern.empty()) {
    int dense = 0;
    for (int l = std::max(begin, 0); l < end && l < int(m.moe_layer_pattern.size()); ++l) {
      dense += m.moe_layer_pattern[size_t(l)] == 0;
    }
    return dense;
  }
  const int dense_end = std::min(end, m.moe_dense_layers);
  return std::max(0, dense_end - begin);
}

int64_t PaddedVocab(const ModelSpec& m, int tp) {
  // Validate's ranges keep this far from overflow (2^16 * 2^10 * ... < 2^63); the checks turn a
  // caller that skipped Validate into an internal error instead of a silent wrap.
  int64_t multiple = 0, padded = 0;
  PTDP_CHECK(CheckedMul(int64_t(m.vocab_divisible_by), tp, &multiple) && multiple > 0);
  PTDP_CHECK(CheckedAdd(m.vocab, multiple - 1, &padded));
  return padded / multiple * multiple;
}

int ModelSpec::WindowLayersIn(int begin, int end) const {
  int n = 0;
  for (int l = begin; l < end; ++l) n += IsWindowLayer(l) ? 1 : 0;
  return n;
}

double ModelSpec::WindowPairShare() const {
  const double s = double(seq_len), w = double(window_size);
  if (window_size == 0 || w + 1 >= s) return 1.0;
  return (s * (w + 1) - w * (w + 1) / 2) / (s * (s + 1) / 2);
}

int64_t MlaProjectionParameters(const ModelSpec& m) {
  const int64_t h = m.hidden, a = m.heads, q = m.mla_q_lora, kv = m.mla_kv_lora;
  const int64_t norms = m.qk_norm ? (q > 0 ? q : 0) + kv : 0;
  const int64_t queries = q > 0 ? q * h + a * m.QkHeadDim() * q : a * m.QkHeadDim() * h;
  return queries + (kv + m.mla_rope_dim) * h + a * (m.HeadDim() + m.VHeadDim()) * kv + norms;
}

int64_t MtpExtraParameters(const ModelSpec& m) {
  const int64_t norm = m.rmsnorm ? m.hidden : 2 * m.hidden;
  return 3 * norm + 2 * m.hidden * m.hidden;
}

int64_t ParameterCount(const ModelSpec& m, int tp) {
  const int64_t h = m.hidden, f = m.FfnHidden();
  // Each product below is bounded by the ranges of ModelSpec::Validate (h <= 2^20, f <= 2^22,
  // l <= 10^4, V <= 2^24: about 2^60 in all); CheckedProduct turns a caller that skipped
  // Validate into an internal error rather than a wrapped count.
  auto mul = [](std::initializer_list<int64_t> xs) {
    auto r = CheckedProduct(xs, "parameter count");
    PTDP_CHECK_MSG(r.ok(), r.status().message());
    return *r;
  };
  const int64_t norm = m.rmsnorm ? h : 2 * h;  // RMSNorm has no bias
  const int64_t bias = m.linear_bias ? 1 : 0;
  const int64_t qk_norm = m.qk_norm ? 2 * m.HeadDim() : 0;  // one weight of dh each for Q and K
  // Q, K and V: the fused projection, or multi-latent attention's down and up projections (and
  // with qk_norm the latents' norms in place of Q's and K's).
  const int64_t qkv = m.IsMla()
                          ? MlaProjectionParameters(m)
                          : qk_norm + mul({m.QkvOut(), h}) + (m.HasQkvBias() ? m.QkvOut() : 0);
  const int64_t per_layer = norm                                        // ln1
                            + qkv                                       // qkv
                            + mul({h, m.AttnWidth()}) + bias * h        // projection
                            + norm                                      // ln2
                            + mul({m.Fc1Out(), h}) + bias * m.Fc1Out()  // fc1 (gate, up)
                            + mul({f, h}) + bias * h;                   // fc2 (down)
  // A mixture of experts replaces the dense MLP's matrices by the router's and E experts' (SwiGLU,
  // no biases: Validate).
  // A shared expert is a SwiGLU MLP of its own inner size beside them; the leading dense layers
  // keep the dense MLP.
  const int64_t f_moe = m.MoeFfnHidden();
  const int64_t moe_layer =
      m.IsMoe() ? per_layer - (mul({m.Fc1Out(), h}) + bias * m.Fc1Out() + mul({f, h}) + bias * h) +
                      mul({m.moe_experts, h}) + mul({m.moe_experts, 3 * f_moe, h}) +
                      mul({3 * m.moe_shared_ffn_hidden, h}) + (m.moe_shared_gate ? h : 0)
                : per_layer;
  const int64_t vp = PaddedVocab(m, tp);
  const int64_t positions = m.rotary ? 0 : mul({m.seq_len, h});
  const int64_t dense_layers = MixtureDenseLayersIn(m, 0, m.layers);
  int64_t total = mul({moe_layer, m.layers - dense_layers}) + mul({per_layer, dense_layers}) +
                  mul({vp, h}) + positions + norm;
  // Multi-token prediction: a layer of the last layer's kind and its own norms and eh_proj.
  if (m.mtp_layers > 0) {
    const int64_t last = m.IsMoeLayer(m.layers - 1) ? moe_layer : per_layer;
    total += mul({last + MtpExtraParameters(m), m.mtp_layers});
  }
  if (!m.tied_embeddings) total += mul({vp, h});
  return total;
}

double ParameterCountEq2(const ModelSpec& m) {
  const double l = m.layers, h = double(m.hidden), V = double(m.vocab), s = double(m.seq_len);
  return 12.0 * l * h * h * (1.0 + 13.0 / (12.0 * h) + (V + s) / (12.0 * l * h));
}

Result<ModelSpec> ModelFromJson(const Json& j, const std::string& path) {
  if (IsHfConfig(j)) return ModelFromHfConfig(j, path);
  ModelSpec m;
  JsonObjectReader r(j, path);
  r.Required("name", &m.name);
  r.Required("layers", &m.layers);
  r.Required("hidden", &m.hidden);
  r.Required("heads", &m.heads);
  r.Required("seq_len", &m.seq_len);
  r.Required("vocab", &m.vocab);
  r.Optional("ffn_hidden", &m.ffn_hidden);
  r.Optional("tied_embeddings", &m.tied_embeddings);
  r.Optional("vocab_divisible_by", &m.vocab_divisible_by);
  r.Optional("dropout", &m.dropout);
  r.Optional("kv_heads", &m.kv_heads);
  r.Optional("swiglu", &m.swiglu);
  r.Optional("squared_relu", &m.squared_relu);
  r.Optional("layernorm_1p", &m.layernorm_1p);
  r.Optional("window_size", &m.window_size);
  r.Optional("window_full_every", &m.window_full_every);
  r.Optional("rmsnorm", &m.rmsnorm);
  r.Optional("rotary", &m.rotary);
  r.Optional("rotary_base", &m.rotary_base);
  r.Optional("rotary_percent", &m.rotary_percent);
  r.Optional("rope_scaling_factor", &m.rope_scaling_factor);
  r.Optional("rope_low_freq_factor", &m.rope_low_freq_factor);
  r.Optional("rope_high_freq_factor", &m.rope_high_freq_factor);
  r.Optional("rope_original_max_positions", &m.rope_original_max_positions);
  r.Optional("rope_scaling_type", &m.rope_scaling_type);
  r.Optional("rope_yarn_beta_fast", &m.rope_yarn_beta_fast);
  r.Optional("rope_yarn_beta_slow", &m.rope_yarn_beta_slow);
  r.Optional("rope_yarn_mscale", &m.rope_yarn_mscale);
  r.Optional("rope_yarn_mscale_all_dim", &m.rope_yarn_mscale_all_dim);
  r.Optional("norm_eps", &m.norm_eps);
  r.Optional("linear_bias", &m.linear_bias);
  r.Optional("qkv_bias", &m.qkv_bias);
  r.Optional("head_dim", &m.head_dim);
  r.Optional("qk_norm", &m.qk_norm);
  r.Optional("moe_experts", &m.moe_experts);
  r.Optional("moe_topk", &m.moe_topk);
  r.Optional("moe_ffn_hidden", &m.moe_ffn_hidden);
  r.Optional("moe_shared_ffn_hidden", &m.moe_shared_ffn_hidden);
  r.Optional("moe_shared_gate", &m.moe_shared_gate);
  r.Optional("moe_router_pre_softmax", &m.moe_router_pre_softmax);
  r.Optional("moe_router_sigmoid", &m.moe_router_sigmoid);
  r.Optional("moe_router_topk_scale", &m.moe_router_topk_scale);
  r.Optional("moe_router_expert_bias", &m.moe_router_expert_bias);
  r.Optional("moe_router_bias_rate", &m.moe_router_bias_rate);
  r.Optional("moe_capacity_factor", &m.moe_capacity_factor);
  std::string policy = "probs";
  r.Optional("moe_token_drop_policy", &policy);
  if (policy != "probs" && policy != "position") {
    return Status::Invalid((path.empty() ? "" : path + ".") + "moe_token_drop_policy: \"" + policy +
                           "\" is not \"probs\" or \"position\"");
  }
  m.moe_drop_by_position = policy == "position";
  r.Optional("moe_pad_to_capacity", &m.moe_pad_to_capacity);
  r.Optional("moe_dense_layers", &m.moe_dense_layers);
  r.Optional("moe_layer_pattern", &m.moe_layer_pattern);
  r.Optional("moe_router_groups", &m.moe_router_groups);
  r.Optional("moe_router_group_topk", &m.moe_router_group_topk);
  r.Optional("mtp_layers", &m.mtp_layers);
  r.Optional("mla_kv_lora", &m.mla_kv_lora);
  r.Optional("mla_q_lora", &m.mla_q_lora);
  r.Optional("mla_rope_dim", &m.mla_rope_dim);
  r.Optional("mla_v_dim", &m.mla_v_dim);
  PTDP_RETURN_IF_ERROR(r.Finish());
  PTDP_RETURN_IF_ERROR(m.Validate(path));
  return m;
}

OrderedJson ModelToJson(const ModelSpec& m) {
  OrderedJson j;
  j["name"] = m.name;
  j["layers"] = m.layers;
  j["hidden"] = m.hidden;
  j["heads"] = m.heads;
  j["seq_len"] = m.seq_len;
  j["vocab"] = m.vocab;
  j["ffn_hidden"] = m.FfnHidden();
  j["tied_embeddings"] = m.tied_embeddings;
  j["vocab_divisible_by"] = m.vocab_divisible_by;
  j["dropout"] = m.dropout;
  if (m.layernorm_1p) j["layernorm_1p"] = true;             // files without it stay as they were
  if (m.window_size > 0) j["window_size"] = m.window_size;  // likewise
  if (m.window_full_every > 0) j["window_full_every"] = m.window_full_every;
  // A GPT's file keeps the 2021 schema.
  if (m.IsGpt() && !m.qkv_bias && !m.qk_norm && !m.IsMoe() && m.mtp_layers == 0) return j;
  j["kv_heads"] = m.KvHeads();
  j["swiglu"] = m.swiglu;
  if (m.squared_relu) j["squared_relu"] = true;  // files without it stay as they were
  j["rmsnorm"] = m.rmsnorm;
  j["rotary"] = m.rotary;
  j["rotary_base"] = m.rotary_base;
  if (m.rotary_percent != 1) j["rotary_percent"] = m.rotary_percent;  // likewise
  if (m.rope_scaling_factor != 0) {  // files without it stay as they were
    j["rope_scaling_factor"] = m.rope_scaling_factor;
    j["rope_low_freq_factor"] = m.rope_low_freq_factor;
    j["rope_high_freq_factor"] = m.rope_high_freq_factor;
    j["rope_original_max_positions"] = m.rope_original_max_positions;
    if (m.rope_scaling_type != "llama3") {  // files of Llama 3.1's scaling stay as they were
      j["rope_scaling_type"] = m.rope_scaling_type;
      j["rope_yarn_beta_fast"] = m.rope_yarn_beta_fast;
      j["rope_yarn_beta_slow"] = m.rope_yarn_beta_slow;
      j["rope_yarn_mscale"] = m.rope_yarn_mscale;
      j["rope_yarn_mscale_all_dim"] = m.rope_yarn_mscale_all_dim;
    }
  }
  if (m.norm_eps != 1e-5) j["norm_eps"] = m.norm_eps;  // files without it stay as they were
  j["linear_bias"] = m.linear_bias;
  j["qkv_bias"] = m.qkv_bias;
  if (m.head_dim > 0) j["head_dim"] = m.head_dim;  // files without it stay as they were
  if (m.qk_norm) j["qk_norm"] = true;              // likewise
  if (m.mtp_layers > 0) j["mtp_layers"] = m.mtp_layers;
  if (m.IsMla()) {
    j["mla_kv_lora"] = m.mla_kv_lora;
    j["mla_q_lora"] = m.mla_q_lora;
    j["mla_rope_dim"] = m.mla_rope_dim;
    j["mla_v_dim"] = m.mla_v_dim;
  }
  if (!m.IsMoe()) return j;  // dense models' files are as they were
  j["moe_experts"] = m.moe_experts;
  j["moe_topk"] = m.moe_topk;
  j["moe_ffn_hidden"] = m.MoeFfnHidden();
  if (m.HasSharedExpert()) j["moe_shared_ffn_hidden"] = m.moe_shared_ffn_hidden;
  if (m.moe_shared_gate) j["moe_shared_gate"] = true;
  if (m.moe_router_pre_softmax) j["moe_router_pre_softmax"] = true;
  if (m.moe_router_sigmoid) j["moe_router_sigmoid"] = true;
  if (m.moe_router_topk_scale != 1) j["moe_router_topk_scale"] = m.moe_router_topk_scale;
  if (m.moe_router_expert_bias) {
    j["moe_router_expert_bias"] = true;
    j["moe_router_bias_rate"] = m.moe_router_bias_rate;
  }
  if (m.DropsTokens()) {
    j["moe_capacity_factor"] = m.moe_capacity_factor;
    j["moe_token_drop_policy"] = m.moe_drop_by_position ? "position" : "probs";
    j["moe_pad_to_capacity"] = m.moe_pad_to_capacity;
  }
  if (m.moe_dense_layers > 0) j["moe_dense_layers"] = m.moe_dense_layers;
  if (!m.moe_layer_pattern.empty()) j["moe_layer_pattern"] = m.moe_layer_pattern;
  if (m.moe_router_groups > 0) {
    j["moe_router_groups"] = m.moe_router_groups;
    j["moe_router_group_topk"] = m.moe_router_group_topk;
  }
  return j;
}

Result<ModelSpec> LoadModel(const std::string& name_or_path) {
  for (const auto& p : ModelPresets()) {
    if (p.spec.name == name_or_path) return p.spec;
  }
  if (name_or_path.find('/') == std::string::npos &&
      name_or_path.find(".json") == std::string::npos) {
    std::string names;
    for (const auto& p : ModelPresets()) names += (names.empty() ? "" : ", ") + p.spec.name;
    return Status::NotFound("model: unknown preset '" + name_or_path + "' (presets: " + names +
                            "; or give a JSON file)");
  }
  PTDP_ASSIGN_OR_RETURN(Json j, ReadJsonFile(name_or_path));
  return ModelFromJson(j, "model");
}

}  // namespace ptdp
