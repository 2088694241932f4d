// ModelSpec: a decoder-only transformer as the planner and the runtime see it. The defaults are a
// GPT (pre-LayerNorm, learned position embeddings, GeLU MLP, biases on every Linear, output layer
// tied to the input embedding); the architecture fields describe a Llama-style decoder (RMSNorm,
// SwiGLU MLP with three matrices, rotary position embeddings, grouped-query attention, no biases,
// untied output layer: Touvron et al. 2023; Dubey et al. 2024), as Mistral and Qwen2 are too.
#pragma once

#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/status.h"

namespace ptdp {

// Ranges of ModelSpec's fields, checked by Validate (and so by every reader). Generous (gpt-1t
// has l 128, h 25600, a 160, s 2048, V 51200) yet small enough that every size the planner and
// the runtime compute from them (parameter counts, padded vocabulary, per-layer tensors) fits
// in 64 bits.
inline constexpr int64_t kMaxLayers = 10000;
inline constexpr int64_t kMaxHidden = int64_t(1) << 20;  // 1048576
inline constexpr int64_t kMaxHeads = 4096;
inline constexpr int64_t kMaxFfnHidden = int64_t(1) << 22;  // 4194304; 0 means 4h
inline constexpr int64_t kMaxSeqLen = int64_t(1) << 20;     // 1048576
inline constexpr int64_t kMaxVocab = int64_t(1) << 24;      // 16777216
inline constexpr int64_t kMaxVocabDivisibleBy = 65536;
inline constexpr int64_t kMaxExperts = 4096;  // moe_experts (DeepSeek-V3 and Kimi K2 have 256, 384)
// dropout: [0, 1)

// Whether layer `layer` (from 0) of a model with these window fields is windowed: every layer
// with a window, but those numbered N, 2N, ... from 1 with window_full_every = N >= 2. The one rule
// the planner prices and the runtime runs (ModelSpec::IsWindowLayer, runtime LayerShape).
inline bool WindowedLayer(int64_t window_size, int window_full_every, int layer) {
  return window_size > 0 && (window_full_every < 2 || (layer + 1) % window_full_every != 0);
}

struct ModelSpec {
  std::string name;              // preset or file name, for reports
  int layers = 0;                // l: transformer layers
  int64_t hidden = 0;            // h
  int heads = 0;                 // a: attention heads; h % a == 0
  int64_t ffn_hidden = 0;        // MLP inner size; 0 means 4h
  int64_t seq_len = 0;           // s
  int64_t vocab = 0;             // V as given (unpadded); see PaddedVocab
  bool tied_embeddings = true;   // output layer shares the input embedding's weights
  int vocab_divisible_by = 128;  // Megatron-LM's --make-vocab-size-divisible-by
  double dropout = 0.0;  // hidden and attention dropout probability (Megatron-LM's default is 0.1)
  // Architecture (GPT's defaults; Llama: kv_heads 8, swiglu, rmsnorm, rotary, no linear_bias).
  int kv_heads = 0;  // key/value heads (query groups); 0 means heads (multi-head)
  // Features per attention head (Megatron-Core's --kv-channels, Hugging Face's head_dim); 0 means
  // hidden / heads. Qwen3 has 128 with h / a = 64 (30B-A3B) or 64 (235B-A22B): the queries and the
  // projection's input are then a dh wide, not h (AttnWidth).
  int64_t head_dim = 0;
  // An RMSNorm over each head's dh features of the queries and the keys, after the QKV projection
  // (Megatron-Core's --qk-layernorm; Qwen3's q_norm and k_norm): a weight of dh each.
  bool qk_norm = false;
  bool swiglu = false;  // SwiGLU MLP: gate and up [f, h], down [h, f] (else GeLU fc1, fc2)
  // Squared ReLU, relu(x)^2, in place of the GeLU of a two-matrix MLP (Megatron-Core's
  // --squared-relu; Nemotron-4). The same shapes and FLOPs; its elementwise pass is priced by
  // the bytes it moves, as no GEMM epilogue or measured GeLU rate applies to it.
  bool squared_relu = false;
  bool rmsnorm = false;  // RMSNorm (a weight, no bias, no mean) in place of LayerNorm
  // The norms' weight stored as its offset from 1 (LayerNorm1P: y = x_hat (1 + w) + b;
  // Megatron-LM's
  // --apply-layernorm-1p, Transformer Engine's zero_centered_gamma; Nemotron). The same shapes,
  // FLOPs and bytes: a numerics fact the flags and the runtime must carry.
  bool layernorm_1p = false;
  bool rotary = false;         // rotary position embeddings (no learned position table)
  double rotary_base = 10000;  // RoPE's theta (flags only: it changes no shape or FLOP)
  // The share of each head's features RoPE turns (Megatron-Core's --rotary-percent; Nemotron-4's
  // 0.5); 1 turns all. Flags only: the kernel still reads and writes every query and key.
  double rotary_percent = 1.0;
  // Llama 3.1's scaling of RoPE's frequencies (Hugging Face's rope_scaling of rope_type "llama3";
  // Megatron-Core's --use-rope-scaling --rope-scaling-factor, which fixes the other three at 1, 4
  // and 8192; kernels/reference/rope.h): none while the factor is 0. No shape or FLOP.
  double rope_scaling_factor = 0;
  double rope_low_freq_factor = 1;
  double rope_high_freq_factor = 4;
  int64_t rope_original_max_positions = 8192;
  // Which scaling the factor selects: "llama3" (above) or "yarn" (kernels/reference/rope.h; Hugging
  // Face's rope_type "yarn"; Megatron-Core's --position-embedding-type yarn, and multi-latent
  // attention's rope type): per-pair blending over the pairs between rope_yarn_beta_fast and
  // rope_yarn_beta_slow turns in rope_original_max_positions; cos and sin scaled by
  // RopeAttentionFactor(); under multi-latent attention the softmax scale by
  // MlaSoftmaxFactor(). DeepSeek-V3's: factor 40, original 4096, betas 32 and 1, both mscales 1.
  // No shape or FLOP.
  std::string rope_scaling_type = "llama3";
  double rope_yarn_beta_fast = 32;
  double rope_yarn_beta_slow = 1;
  double rope_yarn_mscale = 1;          // Megatron-Core's --mscale
  double rope_yarn_mscale_all_dim = 0;  // Megatron-Core's --mscale-all-dim
  // RMSNorm's epsilon (Hugging Face's rms_norm_eps: Llama 3 and Mistral 1e-5, Qwen2 1e-6); a
  // LayerNorm model keeps 1e-5 (Validate). No shape or FLOP.
  double norm_eps = 1e-5;
  bool linear_bias = true;  // biases on every Linear
  bool qkv_bias = false;    // a bias on QKV even without linear_bias (Qwen2)
  // Mixture of experts (Megatron-Core's --num-experts, --moe-router-topk, --moe-ffn-hidden-size;
  // Mixtral, Qwen3-MoE): every layer's MLP is moe_experts SwiGLU experts of moe_ffn_hidden, of
  // which a learned router ([E, h], softmax, top-k) sends each token to moe_topk; 0 experts is a
  // dense model. docs/moe.md.
  int moe_experts = 0;
  int moe_topk = 0;            // k experts per token, 1 <= k <= E (0 with no experts)
  int64_t moe_ffn_hidden = 0;  // one expert's inner size; 0 means ffn_hidden
  // A shared expert (--moe-shared-expert-intermediate-size; Qwen2-MoE, DeepSeek): a SwiGLU MLP of
  // this inner size that every token runs beside its routed experts, split over the tensor group
  // as a dense MLP; 0: none. DeepSeek-V3's one shared expert of 2048 is 2048 here.
  int64_t moe_shared_ffn_hidden = 0;
  // A sigmoid gate on the shared expert's output, a weight of [1, h] (--moe-shared-expert-gate;
  // Qwen2-MoE's shared_expert_gate; DeepSeek has none). Its GEMV is not counted in FLOPs.
  bool moe_shared_gate = false;
  // The first moe_dense_layers layers have a dense SwiGLU MLP of ffn_hidden in place of the
  // experts (DeepSeek-V3's first_k_dense_replace 3; Megatron-Core's --moe-layer-freq
  // "([0]*k+[1]*(l-k))"); 0: every layer is a mixture. LayerModel says which a layer is.
  int moe_dense_layers = 0;
  // Any placement of the two kinds (Megatron-Core's --moe-layer-freq as a list; Qwen's
  // decoder_sparse_step and mlp_only_layers): one entry per layer, 1 a mixture layer, 0 a dense
  // one; empty: every layer from moe_dense_layers on is a mixture. Exclusive with
  // moe_dense_layers.
  std::vector<int> moe_layer_pattern;
  // Group-limited routing (Megatron-Core's --moe-router-num-groups and --moe-router-group-topk;
  // DeepSeek's n_group and topk_group): the experts fall into moe_router_groups equal groups and
  // a token's k experts come from its moe_router_group_topk best groups; 0: no groups. DeepSeek-V3
  // routes to at most 4 of 8 groups, one node's experts each at EP 64 (node-limited routing).
  // What it changes here is the DeepEP dispatcher's traffic (costmodel/moe_cost.h).
  int moe_router_groups = 0;
  int moe_router_group_topk = 0;
  // The router's probabilities (Megatron-Core's --moe-router-pre-softmax; transformers'
  // norm_topk_prob false, DeepSeek-V2's): the softmax over all E logits, the top k's values as
  // they are; false (the default): the softmax over the top k's logits (Mixtral's, Qwen3's with
  // norm_topk_prob true).
  bool moe_router_pre_softmax = false;
  // DeepSeek-V3's router (Megatron-Core's --moe-router-score-function sigmoid; transformers'
  // scoring_func "sigmoid"): each expert's score is sigmoid(logit), the k chosen by score (plus
  // the expert bias below) and their scores renormalised over the k when k > 1, as Megatron-Core
  // always does under sigmoid (exclusive with moe_router_pre_softmax). No shape or FLOP.
  bool moe_router_sigmoid = false;
  // The chosen experts' weights times this (--moe-router-topk-scaling-factor; DeepSeek's
  // routed_scaling_factor: V3 2.5, V2 16); 1: none. No shape or FLOP.
  double moe_router_topk_scale = 1.0;
  // Auxiliary-loss-free load balancing (Wang et al. 2024; DeepSeek-V3's e_score_correction_bias,
  // Megatron-Core's --moe-router-enable-expert-bias; sigmoid scores only, as there): a bias [E]
  // per mixture layer added to the scores for the choice alone, not trained by the gradient but
  // moved after each step by moe_router_bias_rate towards the experts the global batch gave
  // fewer tokens than the mean (--moe-router-bias-update-rate, default 1e-3). A buffer, not a
  // parameter: no FLOP, E fp32 per layer.
  bool moe_router_expert_bias = false;
  double moe_router_bias_rate = 1e-3;
  // Token dropping (Megatron-Core's --moe-expert-capacity-factor, --moe-token-drop-policy and
  // --moe-pad-expert-input-to-capacity; GShard's and Switch's capacity): each expert takes at most
  // C = ceil(T k / E * factor) of a routing unit's T tokens (core/experts.h ExpertCapacity), the
  // rest of its copies dropped (their weight 0: a token whose experts all drop it is the residual
  // alone); 0: dropless (the default). A unit is one sequence's tokens on a context-parallel rank
  // (docs/moe.md says why not Megatron-Core's rank-local tokens). moe_drop_by_position keeps
  // each expert's first C tokens ("position"), else its C highest weights ("probs", Megatron-
  // Core's default). With moe_pad_to_capacity every expert runs C rows, the padding of weight 0:
  // the same maths at the cost of E C copies.
  double moe_capacity_factor = 0;
  bool moe_drop_by_position = false;
  bool moe_pad_to_capacity = false;
  bool DropsTokens() const { return moe_capacity_factor > 0; }

  // Multi-latent attention (DeepSeek-V2/V3; Megatron-Core's --multi-latent-attention): the
  // queries from a q_lora-wide latent (or straight from h when mla_q_lora is 0), keys and values
  // from one kv_lora-wide latent, each head's query and key of head_dim (--qk-head-dim, no
  // position) plus mla_rope_dim (--qk-pos-emb-head-dim, rotated; the key's one rotated part shared
  // by every head), its value of mla_v_dim (--v-head-dim). With qk_norm, RMSNorms on the two
  // latents (Megatron-Core's --qk-layernorm under MLA). 0 kv_lora: ordinary attention.
  int64_t mla_kv_lora = 0;
  int64_t mla_q_lora = 0;
  int64_t mla_rope_dim = 0;
  int64_t mla_v_dim = 0;

  // Multi-token prediction (Megatron-Core's --mtp-num-layers; DeepSeek-V3's 1): each of these
  // depths embeds the tokens one further on, norms them and the main model's output (two norms),
  // joins the two through eh_proj [h, 2h], runs one transformer layer of the last layer's kind and
  // a final norm, and scores the shared output layer again with its own cross-entropy; all on the
  // last pipeline stage, which holds a copy of the word embedding for it.
  int mtp_layers = 0;
  // Sliding-window attention (Megatron-Core's --window-size W,0 with --window-attn-skip-freq N;
  // Hugging Face's sliding_window and layer_types): each query of a windowed layer attends itself
  // and the window_size tokens before it; 0: every earlier token. With window_full_every = N >= 2
  // the layers numbered N, 2N, ... from 1 keep full attention (Megatron-Core's
  // is_layer_window_attention; GPT-OSS alternates, N = 2); 0: every layer is windowed. Windows cut
  // the fused kernel's work and the FLOPs (WindowPairShare), not its memory (the log-sum-exp per
  // row).
  int64_t window_size = 0;
  int window_full_every = 0;

  bool IsWindowLayer(int layer) const {  // `layer` from 0
    return WindowedLayer(window_size, window_full_every, layer);
  }
  int WindowLayersIn(int begin, int end) const;  // of layers [begin, end)
  // The share of a full causal layer's query-key pairs a windowed layer scores: with w + 1 keys
  // per query at most, (s (w + 1) - w (w + 1) / 2) / (s (s + 1) / 2); 1 without a window.
  double WindowPairShare() const;

  bool IsMla() const { return mla_kv_lora > 0; }
  bool RopeYarn() const { return rope_scaling_factor > 0 && rope_scaling_type == "yarn"; }
  // YaRN's concentration, cos and sin's factor: mscale(f, rope_yarn_mscale) /
  // mscale(f, rope_yarn_mscale_all_dim) with mscale(f, m) = 0.1 m ln f + 1 (1 for f <= 1), as
  // Megatron-Core's YarnRotaryEmbedding computes it; 1 without YaRN.
  double RopeAttentionFactor() const;
  // The softmax scale's factor over 1/sqrt(dqk) under multi-latent attention with YaRN:
  // mscale(f, rope_yarn_mscale_all_dim)^2 (Megatron-Core's MultiLatentAttention, transformers'
  // DeepseekV3Attention); 1 otherwise.
  double MlaSoftmaxFactor() const;
  // RoPE's scaling in words ("none", "llama3 factor 8, low 1, high 4, original 8192", "yarn factor
  // 40, original 4096, betas 32 and 1, mscales 1 and 1"), and whether o's is the same.
  std::string RopeScalingText() const;
  bool SameRopeScaling(const ModelSpec& o) const;
  bool IsMoe() const { return moe_experts > 0; }
  bool HasSharedExpert() const { return moe_shared_ffn_hidden > 0; }
  // Whether global layer `layer` runs experts (a dense model's never do). The layers after the
  // model's, layers + d, are the prediction depths' (mtp_layers), each of the last layer's kind.
  bool IsMoeLayer(int layer) const {
    if (!IsMoe()) return false;
    if (layer >= layers) layer = layers - 1;
    return moe_layer_pattern.empty() ? layer >= moe_dense_layers
                                     : moe_layer_pattern[size_t(layer)] != 0;
  }
  // Whether a mixture may have layers of both kinds (a dense model's are all of one).
  bool HasDenseLayers() const {
    return IsMoe() && (moe_dense_layers > 0 || !moe_layer_pattern.empty());
  }
  int64_t MoeFfnHidden() const { return moe_ffn_hidden > 0 ? moe_ffn_hidden : FfnHidden(); }

  int64_t FfnHidden() const { return ffn_hidden > 0 ? ffn_hidden : 4 * hidden; }
  int64_t HeadDim() const { return head_dim > 0 ? head_dim : hidden / heads; }
  // A head's query and key features, and its value's: dh both, or under multi-latent attention
  // head_dim + mla_rope_dim and mla_v_dim.
  int64_t QkHeadDim() const { return IsMla() ? HeadDim() + mla_rope_dim : HeadDim(); }
  int64_t VHeadDim() const { return IsMla() ? mla_v_dim : HeadDim(); }
  // The width of the attention's output and of the projection's input, a dv (h unless head_dim
  // says otherwise); and of the queries, a dqk (the same but under multi-latent attention).
  int64_t AttnWidth() const { return int64_t(heads) * VHeadDim(); }
  int64_t QkWidth() const { return int64_t(heads) * QkHeadDim(); }
  // Multi-latent attention in the runtime moves a head's features in blocks of this many (the
  // widths' gcd: dh, rope, dv; runtime/model/mla.h), and the ledger prices the blocks' indices.
  int64_t MlaBlock() const {
    return std::gcd(std::gcd(HeadDim(), int64_t(mla_rope_dim)), int64_t(mla_v_dim));
  }
  int KvHeads() const { return kv_heads > 0 ? kv_heads : heads; }
  // Output features of the fused QKV projection: a dh for the queries, 2 kv_heads dh for K and V
  // (3h without grouped-query attention); under multi-latent attention the Q, K and V the up
  // projections make, a (2 dqk + dv) (core/shapes.h MlaProjections has its GEMMs).
  int64_t QkvOut() const {
    if (IsMla()) return int64_t(heads) * (2 * QkHeadDim() + VHeadDim());
    return AttnWidth() + 2 * int64_t(KvHeads()) * HeadDim();
  }
  // Output features of the MLP's first GEMM: f, or 2f for SwiGLU's gate and up (Megatron-LM
  // fuses them into one column-parallel fc1).
  int64_t Fc1Out() const { return swiglu ? 2 * FfnHidden() : FfnHidden(); }
  bool HasQkvBias() const { return linear_bias || qkv_bias; }
  // True for the GPT the paper models (every architecture field at its default): its counts keep
  // the 2021 formulas' order, bit for bit.
  bool IsGpt() const {
    return KvHeads() == heads && !swiglu && !squared_relu && !rmsnorm && !rotary && linear_bias &&
           AttnWidth() == hidden && !IsMla();
  }

  // Every violated constraint, joined by "; ", each naming the field (a mixture of experts:
  // moe_topk in [1, moe_experts], SwiGLU experts only). `path` is where the model was read, as the
  // user sees it ("plan.model", "model"): fields are then named by their key path
  // ("plan.model.hidden: 0 is outside [1, 1048576]"); without one the message starts
  // "model <name>: " (a preset or a model built in code).
  Status Validate(const std::string& path = "") const;
};

// The model one layer of `m` is, as every per-layer count (shapes, ledger, cost) takes it: `m`
// itself, or for a mixture's leading dense layer (ModelSpec::moe_dense_layers) `m` without its
// experts, whose MLP is the dense SwiGLU of ffn_hidden (and no multi-token prediction depths of
// its own). A model has at most these two kinds of layer; DenseLayerModel is the second.
ModelSpec DenseLayerModel(const ModelSpec& m);
inline ModelSpec LayerModel(const ModelSpec& m, int layer) {
  return m.IsMoeLayer(layer) ? m : DenseLayerModel(m);
}
// Of the layers [begin, end), how many are dense layers of a mixture (0 for a dense model, whose
// layers are all of `m`'s one kind).
int MixtureDenseLayersIn(const ModelSpec& m, int begin, int end);

// Multi-latent attention's Q, K and V weights per layer, unsharded: q_down [q_lora, h] and q_up
// [a dqk, q_lora] (or one q [a dqk, h] without a query latent), kv_down [kv_lora + rope, h],
// kv_up [a (dh + dv), kv_lora], and with qk_norm the two latents' RMSNorm weights.
int64_t MlaProjectionParameters(const ModelSpec& m);

// Megatron-LM pads the vocabulary to a multiple of vocab_divisible_by * tp so that every tensor
// rank holds an equal slice (megatron/training/tokenizer: _vocab_size_with_padding).
int64_t PaddedVocab(const ModelSpec& m, int tp);

// One multi-token prediction depth's parameters beyond its transformer layer: the two input
// norms, eh_proj [h, 2h] and the final norm (the embedding and the output layer are shared).
int64_t MtpExtraParameters(const ModelSpec& m);

// Exact parameter count of the unsharded model with the padded vocabulary for `tp`: per layer
// 12h^2 + 13h for a GPT (with ffn = 4h); for a Llama-style layer h (h + 2 kv dh) + h^2 for
// attention, 3 h f for SwiGLU and 2h for the RMSNorms; word and (without rotary) position
// embeddings, the final norm, and a separate output matrix when embeddings are not tied.
int64_t ParameterCount(const ModelSpec& m, int tp = 1);
// The paper's eq. (2): 12 l h^2 (1 + 13/(12h) + (V+s)/(12 l h)).
double ParameterCountEq2(const ModelSpec& m);

// Built-in models: the ten of the paper's Table 1, gpt3-175b, GPT-2 sizes and small test models.
struct ModelPreset {
  ModelSpec spec;
  std::string about;
};
const std::vector<ModelPreset>& ModelPresets();

// A preset name, a path to a JSON file in our schema, or a Hugging Face config.json of a GPT-2,
// Llama, Mistral or Qwen2 model (core/hf_config.h).
Result<ModelSpec> LoadModel(const std::string& name_or_path);
// Our schema: {"name", "layers", "hidden", "heads", "seq_len", "vocab", optional "ffn_hidden",
// "tied_embeddings", "vocab_divisible_by", "dropout", "layernorm_1p", "window_size",
// "window_full_every" (these three written when set), "kv_heads", "swiglu", "squared_relu",
// "rmsnorm", "rotary", "rotary_base", "rotary_percent", "rope_scaling_factor",
// "rope_low_freq_factor", "rope_high_freq_factor", "rope_original_max_positions" (written when the
// factor is set), "rope_scaling_type", "rope_yarn_beta_fast", "rope_yarn_beta_slow",
// "rope_yarn_mscale", "rope_yarn_mscale_all_dim" (written under YaRN), "norm_eps", "linear_bias",
// "qkv_bias", "head_dim", "qk_norm", "moe_experts", "moe_topk", "moe_ffn_hidden",
// "moe_shared_ffn_hidden", "moe_shared_gate", "moe_router_pre_softmax" (written when true),
// "moe_router_sigmoid", "moe_router_topk_scale", "moe_router_expert_bias", "moe_router_bias_rate"
// (written when set), "moe_capacity_factor", "moe_token_drop_policy" ("probs" | "position"),
// "moe_pad_to_capacity" (written with a factor), "moe_dense_layers", "moe_layer_pattern",
// "moe_router_groups", "moe_router_group_topk", "mla_kv_lora", "mla_q_lora", "mla_rope_dim",
// "mla_v_dim", "mtp_layers"}; or HF GPT-2 keys (n_layer, n_embd, n_head, n_positions, vocab_size,
// n_inner). `path` prefixes error key paths.
Result<ModelSpec> ModelFromJson(const Json& j, const std::string& path);
OrderedJson ModelToJson(const ModelSpec& m);

}  // namespace ptdp
