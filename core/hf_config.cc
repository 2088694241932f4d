#include "core/hf_config.h"

#include <cmath>
#include <set>

#include "core/checked.h"

namespace ptdp {

namespace {

// Keys every transformers config may carry that change no shape or FLOP we model.
const std::set<std::string>& CommonIgnoredKeys() {
  static const std::set<std::string> keys = {
      "_name_or_path", "bos_token_id", "eos_token_id", "pad_token_id", "initializer_range",
      "torch_dtype",
      "dtype",  // transformers 5's name for torch_dtype
      "transformers_version", "use_cache", "id2label", "label2id", "tokenizer_class", "prefix",
      "problem_type", "output_attentions", "output_hidden_states", "return_dict",
      "gradient_checkpointing", "task_specific_params",
      // the repository's own Python classes
      // (trust_remote_code; DeepSeek-V3's folder)
      "auto_map"};
  return keys;
}

// GPT-2's own harmless keys.
const std::set<std::string>& Gpt2IgnoredKeys() {
  static const std::set<std::string> keys = {"activation_function",
                                             "attn_pdrop",
                                             "embd_pdrop",
                                             "layer_norm_epsilon",
                                             "n_ctx",
                                             "output_past",
                                             "resid_pdrop",
                                             "summary_activation",
                                             "summary_first_dropout",
                                             "summary_proj_to_labels",
                                             "summary_type",
                                             "summary_use_proj",
                                             "scale_attn_weights",
                                             "reorder_and_upcast_attn",
                                             "scale_attn_by_inverse_layer_idx",
                                             "add_cross_attention",
                                             "bias",
                                             "dropout"};
  return keys;
}

// The Llama family's harmless keys: norm epsilon, RoPE scaling for long context (it rescales
// frequencies, no shape or FLOP), Megatron-era tensor-parallel hints, Qwen2's window-layer count
// (used only with use_sliding_window, refused below), and the weights' storage (fp8 blocks: the
// runtime's folder reader checks it, runtime/checkpoint/fp8.h).
const std::set<std::string>& LlamaIgnoredKeys() {
  static const std::set<std::string> keys = {"rope_scaling", "pretraining_tp", "max_window_layers",
                                             "rope_parameters", "quantization_config"};
  return keys;
}

// Keys that make a mixture of experts: read for the families that are one (ReadExperts), refused
// in the others'.
const std::set<std::string>& ExpertKeys() {
  static const std::set<std::string> keys = {"num_local_experts",
                                             "num_experts",
                                             "num_experts_per_tok",
                                             "moe_intermediate_size",
                                             "shared_expert_intermediate_size",
                                             "n_routed_experts"};
  return keys;
}

struct Family {
  const char* model_type;
  const char* architecture;
};
constexpr Family kFamilies[] = {{"gpt2", "GPT2LMHeadModel"},
                                {"llama", "LlamaForCausalLM"},
                                {"mistral", "MistralForCausalLM"},
                                {"qwen2", "Qwen2ForCausalLM"},
                                {"qwen3", "Qwen3ForCausalLM"},
                                {"mixtral", "MixtralForCausalLM"},
                                {"qwen3_moe", "Qwen3MoeForCausalLM"},
                                {"qwen2_moe", "Qwen2MoeForCausalLM"},
                                {"deepseek_v2", "DeepseekV2ForCausalLM"},
                                {"deepseek_v3", "DeepseekV3ForCausalLM"},
                                // Kimi K2's folders: DeepSeek-V3's class under its own type
                                {"kimi_k2", "DeepseekV3ForCausalLM"},
                                {"glm4_moe", "Glm4MoeForCausalLM"},
                                {"nemotron", "NemotronForCausalLM"}};

bool IsDeepSeek(const std::string& model_type) {
  return model_type == "deepseek_v2" || model_type == "deepseek_v3" || model_type == "kimi_k2";
}

bool IsExpertFamily(const std::string& model_type) {
  return model_type == "mixtral" || model_type == "qwen3_moe" || model_type == "qwen2_moe" ||
         model_type == "glm4_moe" || IsDeepSeek(model_type);
}

std::string SupportedTypes() {
  std::string out;
  for (const auto& f : kFamilies) out += (out.empty() ? "" : ", ") + std::string(f.model_type);
  return out;
}

const Family* FindFamily(const std::string& model_type) {
  for (const auto& f : kFamilies) {
    if (model_type == f.model_type) return &f;
  }
  return nullptr;
}

// "architectures" must name the family's causal-LM class (GPT-2 also accepts the bare model).
void CheckArchitectures(JsonObjectReader& r, const Family& family) {
  const Json* archs = r.Child("architectures", false);
  if (archs == nullptr || archs->is_null()) return;
  if (!archs->is_array()) return r.Fail("architectures", "expected a list of class names");
  for (const auto& a : *archs) {
    const std::string name = a.is_string() ? a.get<std::string>() : a.dump();
    if (name != family.architecture && name != "GPT2Model") {
      return r.Fail("architectures", "'" + name + "' is not supported (supported for " +
                                         family.model_type + ": " + family.architecture + ")");
    }
  }
}

// A key whose value, if present and not `harmless`, changes the maths: refused naming it.
void RefuseUnless(JsonObjectReader& r, const std::string& key, const Json& harmless,
                  const std::string& what) {
  const Json* v = r.Child(key, false);
  if (v != nullptr && !v->is_null() && *v != harmless) {
    r.Fail(key, v->dump() + ": " + what + " is not modelled");
  }
}

// Mistral's sliding_window S (null: none): each query attends the S tokens up to itself
// (transformers' sliding-window mask keeps q - k < S), so S - 1 before it; a window as long as
// the sequence changes nothing and is not kept. Read after max_position_embeddings.
void ReadSlidingWindow(JsonObjectReader& r, ModelSpec* m) {
  const Json* v = r.Child("sliding_window", false);
  if (v == nullptr || v->is_null()) return;
  int64_t window = 0;
  r.Optional("sliding_window", &window);
  if (window < 1) {
    r.Fail("sliding_window", v->dump() + " is not a positive number of tokens");
  } else if (window < m->seq_len) {
    m->window_size = window - 1;
  }
}

void ReadGpt2(JsonObjectReader& r, ModelSpec* m) {
  r.Required("n_layer", &m->layers);
  r.Required("n_embd", &m->hidden);
  r.Required("n_head", &m->heads);
  if (r.Has("n_positions")) {
    r.Required("n_positions", &m->seq_len);
  } else {
    r.Required("n_ctx", &m->seq_len);
  }
  r.Required("vocab_size", &m->vocab);
  if (const Json* inner = r.Child("n_inner", false); inner && !inner->is_null()) {
    r.Optional("n_inner", &m->ffn_hidden);
  }
  r.Optional("tie_word_embeddings", &m->tied_embeddings);
  for (const auto& k : Gpt2IgnoredKeys()) r.Allow(k);
}

// Qwen's placement of its experts (transformers' Qwen2MoeDecoderLayer, Qwen3MoeDecoderLayer): layer
// i is a mixture when it is not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0, else a
// dense MLP of intermediate_size. Leading dense layers only are moe_dense_layers; any other
// placement is moe_layer_pattern.
void ReadQwenExpertPlacement(JsonObjectReader& r, ModelSpec* m) {
  int step = 1;
  if (const Json* v = r.Child("decoder_sparse_step", false); v && !v->is_null()) {
    r.Optional("decoder_sparse_step", &step);
    if (step < 1) return r.Fail("decoder_sparse_step", std::to_string(step) + " is not >= 1");
  }
  std::vector<int> dense_only;
  if (const Json* v = r.Child("mlp_only_layers", false); v && !v->is_null()) {
    r.Optional("mlp_only_layers", &dense_only);
  }
  if (m->layers < 1 || m->layers > kMaxLayers) return;  // Validate names num_hidden_layers
  std::vector<int> pattern(size_t(m->layers), 0);
  for (int l = 0; l < m->layers; ++l) pattern[size_t(l)] = (l + 1) % step == 0 ? 1 : 0;
  for (int l : dense_only) {
    if (l < 0 || l >= m->layers) {
      return r.Fail("mlp_only_layers", std::to_string(l) + " is not a layer (0 to " +
                                           std::to_string(m->layers - 1) + ")");
    }
    pattern[size_t(l)] = 0;
  }
  int leading = 0;
  while (leading < m->layers && pattern[size_t(leading)] == 0) ++leading;
  bool rest_mixture = true;
  for (int l = leading; l < m->layers; ++l) rest_mixture = rest_mixture && pattern[size_t(l)] == 1;
  if (rest_mixture) {
    m->moe_dense_layers = leading;  // 0: every layer a mixture (Validate refuses all dense)
  } else {
    m->moe_layer_pattern = pattern;
  }
}

// A mixture of experts: Mixtral's num_local_experts experts of intermediate_size, Qwen3-MoE's and
// Qwen2-MoE's num_experts of moe_intermediate_size on the layers ReadQwenExpertPlacement says,
// Qwen2-MoE's shared expert of shared_expert_intermediate_size; the
// router's loss coefficients, noise and normalisation change no shape or FLOP.
void ReadExperts(JsonObjectReader& r, const Family& family, ModelSpec* m) {
  const bool mixtral = std::string(family.model_type) == "mixtral";
  r.Required(mixtral ? "num_local_experts" : "num_experts", &m->moe_experts);
  r.Required("num_experts_per_tok", &m->moe_topk);
  if (!mixtral) {
    r.Required("moe_intermediate_size", &m->moe_ffn_hidden);
    ReadQwenExpertPlacement(r, m);
  }
  if (std::string(family.model_type) == "qwen2_moe") {
    r.Required("shared_expert_intermediate_size", &m->moe_shared_ffn_hidden);
    m->moe_shared_gate = true;  // Qwen2MoeSparseMoeBlock's shared_expert_gate, [1, h]
  }
  // Qwen's routers renormalise their top k only with norm_topk_prob (transformers' default
  // false): without it the top k's full-softmax values (pre-softmax routing). Mixtral's always do.
  if (!mixtral) {
    bool norm_topk_prob = false;
    r.Optional("norm_topk_prob", &norm_topk_prob);
    m->moe_router_pre_softmax = !norm_topk_prob;
  }
  for (const char* k :
       {"router_aux_loss_coef", "router_jitter_noise", "output_router_logits", "norm_topk_prob"}) {
    r.Allow(k);
  }
}

// DeepSeek-V2 and -V3 (deepseek-ai's config.json; Megatron-Bridge's DeepSeek providers map the
// same keys): multi-latent attention (q_lora_rank, null without a query latent; kv_lora_rank;
// qk_nope_head_dim, qk_rope_head_dim, v_head_dim; the latents normed), n_routed_experts of
// moe_intermediate_size on every layer from first_k_dense_replace on (moe_layer_freq 1),
// n_shared_experts of that size as one shared expert, num_nextn_predict_layers multi-token
// prediction depths, n_group and topk_group group-limited routing. The router's scoring, bias
// and scaling change no shape or FLOP we count.
void ReadDeepSeek(JsonObjectReader& r, bool v3, ModelSpec* m) {
  r.Required("n_routed_experts", &m->moe_experts);
  r.Required("num_experts_per_tok", &m->moe_topk);
  r.Required("moe_intermediate_size", &m->moe_ffn_hidden);
  int shared = 0;
  r.Optional("n_shared_experts", &shared);
  m->moe_shared_ffn_hidden = int64_t(shared) * m->moe_ffn_hidden;
  r.Optional("first_k_dense_replace", &m->moe_dense_layers);
  RefuseUnless(r, "moe_layer_freq", 1, "experts on every n-th layer only");
  r.Optional("num_nextn_predict_layers", &m->mtp_layers);
  if (const Json* q = r.Child("q_lora_rank", false); q && !q->is_null()) {
    r.Optional("q_lora_rank", &m->mla_q_lora);
  }
  r.Required("kv_lora_rank", &m->mla_kv_lora);
  r.Required("qk_nope_head_dim", &m->head_dim);
  r.Required("qk_rope_head_dim", &m->mla_rope_dim);
  r.Required("v_head_dim", &m->mla_v_dim);
  // transformers' DeepseekV3Config writes their sum too.
  if (const Json* qk = r.Child("qk_head_dim", false); qk && !qk->is_null()) {
    int64_t sum = 0;
    r.Optional("qk_head_dim", &sum);
    if (sum != m->head_dim + m->mla_rope_dim) {
      r.Fail("qk_head_dim", std::to_string(sum) + " is not qk_nope_head_dim + qk_rope_head_dim");
    }
  }
  m->qk_norm = true;  // q_a_layernorm (with a query latent) and kv_a_layernorm
  // Group-limited routing (DeepSeek-V2: devices, V3: nodes); 1 group is none.
  int groups = 0, group_topk = 0;
  r.Optional("n_group", &groups);
  r.Optional("topk_group", &group_topk);
  if (groups > 1) m->moe_router_groups = groups, m->moe_router_group_topk = group_topk;
  // The router's numerics (no shape or FLOP): V3's sigmoid scores renormalised over the top k and
  // its bias (topk_method noaux_tc); V2's softmax over all E, the top k's values as they are
  // (norm_topk_prob false); each scaled by routed_scaling_factor. transformers' DeepseekV3Config
  // has neither key (its router is V3's always): V3's by default.
  std::string scoring = v3 ? "sigmoid" : "softmax", method = v3 ? "noaux_tc" : "";
  bool norm_topk_prob = false;
  r.Optional("scoring_func", &scoring);
  r.Optional("topk_method", &method);
  r.Optional("norm_topk_prob", &norm_topk_prob);
  r.Optional("routed_scaling_factor", &m->moe_router_topk_scale);
  if (scoring != "softmax" && scoring != "sigmoid") {
    r.Fail("scoring_func", "expected softmax or sigmoid, got " + scoring);
  }
  m->moe_router_sigmoid = scoring == "sigmoid";
  m->moe_router_expert_bias = method == "noaux_tc";
  // Megatron-Core renormalises sigmoid scores always; a sigmoid router without norm_topk_prob is
  // left to the model's Validate, which refuses the combination by name.
  m->moe_router_pre_softmax = !norm_topk_prob;
  // rope_interleave: how the rotated features' weights pair (no shape or FLOP; the runtime's
  // folder reader checks it, runtime/checkpoint/hf_deepseek.h).
  for (const char* k : {"aux_loss_alpha", "ep_size", "seq_aux", "quantization_config",
                        "rope_interleave", "output_router_logits"}) {
    r.Allow(k);
  }
}

// YaRN's numbers (rope_type "yarn") as transformers reads them: the factor (null: the positions'
// ratio to the original length), the original length, beta_fast and beta_slow (absent, null or 0:
// 32 and 1), and the concentration: mscale(f, mscale) / mscale(f, mscale_all_dim) when both are
// set, else mscale(f, 1), which ptdp's fields (Megatron-Core's ratio always) hold as mscale 1 and
// mscale_all_dim 0. What they cannot hold is refused by name.
void ReadYarn(JsonObjectReader& r, const std::string& key, const Json& rs, ModelSpec* m) {
  auto number = [&](const char* field, double fallback) {
    const auto it = rs.find(field);
    if (it == rs.end() || it->is_null()) return fallback;
    if (!it->is_number()) {
      r.Fail(key + "." + field, "expected a number");
      return fallback;
    }
    return it->get<double>();
  };
  const double original = number("original_max_position_embeddings", 0);
  if (!(original >= 1 && original <= double(int64_t(1) << 40))) {
    return r.Fail(key + ".original_max_position_embeddings", "yarn needs it, from 1 to 2^40");
  }
  m->rope_scaling_type = "yarn";
  m->rope_original_max_positions = static_cast<int64_t>(original);
  m->rope_scaling_factor = number("factor", double(m->seq_len) / original);
  m->rope_yarn_beta_fast = number("beta_fast", 0);
  m->rope_yarn_beta_slow = number("beta_slow", 0);
  if (m->rope_yarn_beta_fast == 0) m->rope_yarn_beta_fast = 32;
  if (m->rope_yarn_beta_slow == 0) m->rope_yarn_beta_slow = 1;
  const double mscale = number("mscale", 0), all_dim = number("mscale_all_dim", 0);
  if (all_dim != 0 && mscale == 0) {
    return r.Fail(key + ".mscale",
                  "absent beside mscale_all_dim: ptdp's concentration is "
                  "Megatron-Core's ratio of the two");
  }
  m->rope_yarn_mscale = all_dim != 0 ? mscale : 1;
  m->rope_yarn_mscale_all_dim = all_dim;
  if (const auto t = rs.find("truncate"); t != rs.end() && *t != Json(true)) {
    return r.Fail(key + ".truncate", t->dump() + ": only the ramp's rounded ends (true) are read");
  }
  const double given = number("attention_factor", 0), own = m->RopeAttentionFactor();
  if (given != 0 && std::abs(given - own) > 1e-9 * own) {
    r.Fail(key + ".attention_factor", FormatDouble(given) +
                                          " is not the concentration of its mscales (" +
                                          FormatDouble(own) + "), which ptdp computes");
  }
}

// Llama 3.1's RoPE scaling (rope_type "llama3", in rope_scaling or transformers 5's
// rope_parameters): its four numbers become the model's rope_scaling fields; YaRN's are ReadYarn's.
// Other scalings change no shape or FLOP and are left to the runtime's reader, which refuses them.
void ReadRopeScaling(JsonObjectReader& r, ModelSpec* m) {
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    const Json* rs = r.Child(key, false);
    if (rs == nullptr || !rs->is_object()) continue;
    const auto legacy = StringAt(*rs, "type", "", key);
    const auto type = StringAt(*rs, "rope_type", legacy.ok() ? *legacy : "", key);
    if (!legacy.ok() || !type.ok()) {
      r.Fail(std::string(key) + ".rope_type", "expected a string");
      return;
    }
    if (*type == "yarn") return ReadYarn(r, key, *rs, m);
    if (*type != "llama3") continue;
    auto number = [&](const char* field, double* out) {
      const auto it = rs->find(field);
      if (it == rs->end() || !it->is_number()) {
        r.Fail(std::string(key) + "." + field, "llama3 scaling needs it as a number");
        return;
      }
      *out = it->get<double>();
    };
    double original = 0;
    number("factor", &m->rope_scaling_factor);
    number("low_freq_factor", &m->rope_low_freq_factor);
    number("high_freq_factor", &m->rope_high_freq_factor);
    number("original_max_position_embeddings", &original);
    if (!(original >= 1 && original <= double(int64_t(1) << 40))) {  // a cast to int64 within range
      return r.Fail(std::string(key) + ".original_max_position_embeddings", "from 1 to 2^40");
    }
    m->rope_original_max_positions = static_cast<int64_t>(original);
    return;
  }
}

// The shapes every decoder family's config states alike: layers, widths, heads, sequence,
// vocabulary, the key/value heads and RoPE's theta.
void ReadDecoderShapes(JsonObjectReader& r, ModelSpec* m) {
  r.Required("num_hidden_layers", &m->layers);
  r.Required("hidden_size", &m->hidden);
  r.Required("num_attention_heads", &m->heads);
  r.Required("intermediate_size", &m->ffn_hidden);
  r.Required("max_position_embeddings", &m->seq_len);
  r.Required("vocab_size", &m->vocab);
  m->kv_heads = m->heads;  // transformers' default when num_key_value_heads is absent
  r.Optional("num_key_value_heads", &m->kv_heads);
  r.Optional("rope_theta", &m->rotary_base);
  // transformers 5 writes RoPE's theta inside rope_parameters (with its rope_type).
  if (const Json* rp = r.Child("rope_parameters", false); rp && rp->is_object()) {
    if (auto t = rp->find("rope_theta"); t != rp->end() && t->is_number()) {
      m->rotary_base = t->get<double>();
    }
  }
}

// What Llama's layers and GLM-4.5's state alike: the shapes, RMSNorm's epsilon (`default_eps`
// when rms_norm_eps is absent), RoPE's scaling, the attention dropout, untied embeddings unless the
// file says tied; SwiGLU, RMSNorm and rotary embeddings, no biases on the Linears.
void ReadSwigluDecoder(JsonObjectReader& r, double default_eps, ModelSpec* m) {
  ReadDecoderShapes(r, m);
  m->norm_eps = default_eps;
  r.Optional("rms_norm_eps", &m->norm_eps);
  ReadRopeScaling(r, m);
  r.Optional("attention_dropout", &m->dropout);
  m->tied_embeddings = false;
  r.Optional("tie_word_embeddings", &m->tied_embeddings);
  m->swiglu = m->rmsnorm = m->rotary = true;
  m->linear_bias = false;
}

void ReadLlamaFamily(JsonObjectReader& r, const Family& family, ModelSpec* m) {
  ReadSwigluDecoder(r, 1e-6, m);  // transformers' LlamaConfig default epsilon
  // Qwen2's (and Qwen2-MoE's) q, k, v carry biases; Qwen2-MoE's config may say so (qkv_bias,
  // transformers' default true).
  m->qkv_bias = std::string(family.model_type).rfind("qwen2", 0) == 0;
  if (std::string(family.model_type) == "qwen2_moe") r.Optional("qkv_bias", &m->qkv_bias);
  m->qk_norm = std::string(family.model_type).rfind("qwen3", 0) == 0;
  RefuseUnless(r, "hidden_act", "silu", "an activation other than SiLU (SwiGLU)");
  RefuseUnless(r, "attention_bias", false, "a bias on the attention projections");
  RefuseUnless(r, "mlp_bias", false, "a bias on the MLP");
  RefuseUnless(r, "use_sliding_window", false, "sliding-window attention");
  // Mistral's window (Qwen2 writes one even when use_sliding_window is false).
  if (std::string(family.model_type).rfind("qwen", 0) == 0) {
    r.Allow("sliding_window");
  } else if (std::string(family.model_type) == "mistral") {
    ReadSlidingWindow(r, m);
  } else {
    RefuseUnless(r, "sliding_window", Json(), "sliding-window attention");
  }
  if (const Json* types = r.Child("layer_types", false); types && types->is_array()) {
    for (const auto& t : *types) {
      if (t != "full_attention") return r.Fail("layer_types", t.dump() + " is not modelled");
    }
  }
  // Qwen3's 128 against h / a = 64; Validate checks the range. Qwen3's per-head RMSNorm of the
  // queries and keys (q_norm, k_norm) has no key of its own: the family has it.
  if (const Json* hd = r.Child("head_dim", false); hd && !hd->is_null()) {
    r.Optional("head_dim", &m->head_dim);
  }
  if (IsDeepSeek(family.model_type)) {
    ReadDeepSeek(r, std::string(family.model_type) != "deepseek_v2", m);
  } else if (IsExpertFamily(family.model_type)) {
    ReadExperts(r, family, m);
  }
  for (const auto& k : LlamaIgnoredKeys()) r.Allow(k);
}

// RoPE on partial_rotary_factor of each head (Nemotron's and GLM-4.5's classes default to 0.5),
// top-level or, as transformers 5 writes it, inside rope_parameters beside rope_theta.
void ReadPartialRotary(JsonObjectReader& r, ModelSpec* m) {
  m->rotary_percent = 0.5;
  r.Optional("partial_rotary_factor", &m->rotary_percent);
  if (const Json* rp = r.Child("rope_parameters", false); rp && rp->is_object()) {
    if (auto f = rp->find("partial_rotary_factor"); f != rp->end() && f->is_number()) {
      m->rotary_percent = f->get<double>();
    }
  }
}

// Nemotron-4 (transformers' NemotronConfig): grouped-query attention, a squared-ReLU MLP
// (hidden_act relu2, two matrices), LayerNorm1P (layernorm_1p: LayerNorm's shapes and cost; its
// epsilon is norm_eps), RoPE on partial_rotary_factor of each head, no biases.
void ReadNemotron(JsonObjectReader& r, ModelSpec* m) {
  ReadDecoderShapes(r, m);
  ReadPartialRotary(r, m);
  r.Optional("norm_eps", &m->norm_eps);
  r.Optional("attention_dropout", &m->dropout);
  m->tied_embeddings = false;
  r.Optional("tie_word_embeddings", &m->tied_embeddings);
  m->squared_relu = m->rotary = m->layernorm_1p = true;
  m->linear_bias = false;
  RefuseUnless(r, "hidden_act", "relu2", "an activation other than squared ReLU");
  RefuseUnless(r, "attention_bias", false, "a bias on the attention projections");
  RefuseUnless(r, "mlp_bias", false, "a bias on the MLP");
  if (const Json* hd = r.Child("head_dim", false); hd && !hd->is_null()) {
    r.Optional("head_dim", &m->head_dim);
  }
  ReadRopeScaling(r, m);
  for (const auto& k : LlamaIgnoredKeys()) r.Allow(k);
}

// GLM-4.5 and GLM-4.5-Air (transformers' Glm4MoeConfig, zai-org's config.json): grouped-query
// attention with a bias on q, k and v (attention_bias) and optional QK norms (use_qk_norm), RoPE on
// partial_rotary_factor of each head (the class's default 0.5), the first first_k_dense_replace
// layers dense (intermediate_size), the others n_routed_experts of moe_intermediate_size beside
// n_shared_experts of that size as one shared expert, DeepSeek-V3's router (Glm4MoeTopkRouter:
// sigmoid scores, e_score_correction_bias, routed_scaling_factor, n_group and topk_group), and
// num_nextn_predict_layers prediction depths.
void ReadGlm4Moe(JsonObjectReader& r, ModelSpec* m) {
  ReadSwigluDecoder(r, 1e-5, m);  // Glm4MoeConfig's default epsilon
  ReadPartialRotary(r, m);
  r.Optional("attention_bias", &m->qkv_bias);  // q, k and v only: o_proj has none
  r.Optional("use_qk_norm", &m->qk_norm);
  RefuseUnless(r, "hidden_act", "silu", "an activation other than SiLU (SwiGLU)");
  if (const Json* hd = r.Child("head_dim", false); hd && !hd->is_null()) {
    r.Optional("head_dim", &m->head_dim);
  }
  r.Required("n_routed_experts", &m->moe_experts);
  r.Required("num_experts_per_tok", &m->moe_topk);
  r.Required("moe_intermediate_size", &m->moe_ffn_hidden);
  int shared = 1, groups = 1, group_topk = 1;
  r.Optional("n_shared_experts", &shared);
  m->moe_shared_ffn_hidden = int64_t(shared) * m->moe_ffn_hidden;
  m->moe_dense_layers = 1;  // Glm4MoeConfig's default
  r.Optional("first_k_dense_replace", &m->moe_dense_layers);
  r.Optional("n_group", &groups);
  r.Optional("topk_group", &group_topk);
  if (groups > 1) m->moe_router_groups = groups, m->moe_router_group_topk = group_topk;
  m->moe_router_sigmoid = m->moe_router_expert_bias = true;
  r.Optional("routed_scaling_factor", &m->moe_router_topk_scale);
  bool norm_topk_prob = true;
  r.Optional("norm_topk_prob", &norm_topk_prob);
  m->moe_router_pre_softmax = !norm_topk_prob;  // Validate refuses it beside sigmoid scores
  m->mtp_layers = 1;  // Glm4MoeConfig's default; transformers 5 names it num_mtp_layers too
  r.Optional("num_mtp_layers", &m->mtp_layers);
  r.Optional("num_nextn_predict_layers", &m->mtp_layers);
  r.Allow("output_router_logits");
  for (const auto& k : LlamaIgnoredKeys()) r.Allow(k);
}

}  // namespace

bool IsHfConfig(const Json& j) {
  return j.is_object() &&
         (j.contains("model_type") || j.contains("n_layer") || j.contains("n_embd"));
}

Result<ModelSpec> ModelFromHfConfig(const Json& j, const std::string& path) {
  JsonObjectReader r(j, path);
  std::string model_type = "gpt2";  // older GPT-2 files carry no model_type
  r.Optional("model_type", &model_type);
  const Family* family = FindFamily(model_type);
  if (family == nullptr) {
    return Status::Invalid(r.PathOf("model_type") + ": '" + model_type +
                           "' is not supported (supported: " + SupportedTypes() + ")");
  }
  for (const auto& k : ExpertKeys()) {
    if (!IsExpertFamily(model_type) && r.Has(k)) {
      return Status::Invalid(r.PathOf(k) + ": a mixture of experts is not modelled");
    }
  }
  ModelSpec m;
  m.name = "hf-" + model_type;
  CheckArchitectures(r, *family);
  if (model_type == "gpt2") {
    ReadGpt2(r, &m);
  } else if (model_type == "nemotron") {
    ReadNemotron(r, &m);
  } else if (model_type == "glm4_moe") {
    ReadGlm4Moe(r, &m);
  } else {
    ReadLlamaFamily(r, *family, &m);
  }
  r.Optional("name", &m.name);
  for (const auto& k : CommonIgnoredKeys()) r.Allow(k);
  PTDP_RETURN_IF_ERROR(r.Finish());
  PTDP_RETURN_IF_ERROR(m.Validate(path));
  return m;
}

}  // namespace ptdp
