// Llama-style decoders (grouped-query attention, SwiGLU, RMSNorm, rotary embeddings, no biases,
// untied output layer): parameter counts against the published ones, the Hugging Face configs of
// the Llama family and their refusals, the ledger's FLOPs against a derivation from the shapes,
// and the tensor-parallel split over query groups.
#include <gtest/gtest.h>

#include <cmath>
#include <tuple>

#include "core/ledger.h"
#include "core/model.h"
#include "core/parallel.h"
#include "core/shapes.h"

namespace ptdp {
namespace {

// Published counts (the Hugging Face model pages' safetensors totals; the Llama 3 paper rounds
// them to 8B, 70B and 405B). By hand for 8B: per layer q and o 2 x 4096^2, k and v 2 x 4096 x 1024,
// SwiGLU 3 x 4096 x 14336, two RMSNorms 2 x 4096: 218,112,000; x 32 = 6,979,584,000; input and
// output embeddings 2 x 128,256 x 4096 = 1,050,673,152; final norm 4096: 8,030,261,248.
TEST(Llama, PresetParameterCountsArePublished) {
  EXPECT_EQ(ParameterCount(LoadModel("llama3-8b").value(), 1), 8030261248);
  EXPECT_EQ(ParameterCount(LoadModel("llama3-70b").value(), 1), 70553706496);
  EXPECT_EQ(ParameterCount(LoadModel("llama3.1-405b").value(), 1), 405853388800);
  EXPECT_EQ(ParameterCount(LoadModel("llama3.2-1b").value(), 1), 1235814400);
  EXPECT_EQ(ParameterCount(LoadModel("llama3.2-3b").value(), 1), 3212749824);
  EXPECT_EQ(LoadModel("llama3.2-1b").value().rope_scaling_factor, 32);
  // Qwen3's model cards round to 0.1B (0.6B, 4.0B, 8.2B, 32.8B) and, without the embeddings of
  // 151936 x h (one when tied, two untied), to 0.01B or 0.1B (0.44B, 3.6B, 6.95B, 31.2B).
  for (const auto& [name, total, body, body_unit] :
       {std::tuple{"qwen3-0.6b", 6, 44, 1e7}, std::tuple{"qwen3-4b", 40, 36, 1e8},
        std::tuple{"qwen3-8b", 82, 695, 1e7}, std::tuple{"qwen3-32b", 328, 312, 1e8}}) {
    const ModelSpec m = LoadModel(name).value();
    const int64_t n = ParameterCount(m, 1);
    const int64_t embeddings = (m.tied_embeddings ? 1 : 2) * m.vocab * m.hidden;
    EXPECT_EQ(std::llround(double(n) / 1e8), total) << name << " " << n;
    EXPECT_EQ(std::llround(double(n - embeddings) / body_unit), body) << name << " " << n;
  }
}

// meta-llama/Meta-Llama-3-8B's config.json as published.
constexpr const char* kLlama3_8b = R"({"architectures": ["LlamaForCausalLM"],
  "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 128000,
  "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
  "intermediate_size": 14336, "max_position_embeddings": 8192, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": null, "rope_theta": 500000.0,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.40.0.dev0",
  "use_cache": true, "vocab_size": 128256})";

// mistralai/Mistral-7B-v0.3's shape (v0.1 with sliding_window null and a 32,768 vocabulary).
constexpr const char* kMistral7b = R"({"architectures": ["MistralForCausalLM"],
  "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
  "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
  "max_position_embeddings": 32768, "model_type": "mistral", "num_attention_heads": 32,
  "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
  "rope_theta": 1000000.0, "sliding_window": null, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "transformers_version": "4.42.0.dev0", "use_cache": true,
  "vocab_size": 32768})";

// Qwen/Qwen2-7B's config.json: biases on q, k and v only.
constexpr const char* kQwen2_7b = R"({"architectures": ["Qwen2ForCausalLM"],
  "attention_dropout": 0.0, "bos_token_id": 151643, "eos_token_id": 151643, "hidden_act": "silu",
  "hidden_size": 3584, "initializer_range": 0.02, "intermediate_size": 18944,
  "max_position_embeddings": 131072, "max_window_layers": 28, "model_type": "qwen2",
  "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4,
  "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 131072,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.37.2",
  "use_cache": true, "use_sliding_window": false, "vocab_size": 152064})";

Result<ModelSpec> Parse(const std::string& text) {
  return ModelFromJson(Json::parse(text), "model");
}

// meta-llama/Llama-3.2-3B's config.json as published: head_dim given, tied embeddings, Llama 3.1's
// RoPE scaling of factor 32.
constexpr const char* kLlama32_3b = R"({"architectures": ["LlamaForCausalLM"],
  "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 128000,
  "eos_token_id": 128001, "head_dim": 128, "hidden_act": "silu", "hidden_size": 3072,
  "initializer_range": 0.02, "intermediate_size": 8192, "max_position_embeddings": 131072,
  "mlp_bias": false, "model_type": "llama", "num_attention_heads": 24, "num_hidden_layers": 28,
  "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "transformers_version": "4.45.0.dev0", "use_cache": true, "vocab_size": 128256})";

// It reads as the preset but for the sequence (its max_position_embeddings against the preset's
// pre-training 8192): the count, the ties and the scaling.
TEST(Llama, Llama32ConfigReadsAsThePreset) {
  auto m = Parse(kLlama32_3b);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const ModelSpec preset = LoadModel("llama3.2-3b").value();
  EXPECT_EQ(ParameterCount(*m, 1), ParameterCount(preset, 1));
  EXPECT_TRUE(m->tied_embeddings);
  EXPECT_EQ(m->rope_scaling_factor, preset.rope_scaling_factor);
  EXPECT_EQ(m->rope_original_max_positions, preset.rope_original_max_positions);
  EXPECT_EQ(m->rope_high_freq_factor, preset.rope_high_freq_factor);
  EXPECT_EQ(m->seq_len, 131072);
}

// transformers 5 writes RoPE's theta inside rope_parameters: read from there too.
TEST(Llama, RopeThetaInsideRopeParameters) {
  std::string text = kLlama3_8b;
  const std::string old_key = "\"rope_theta\": 500000.0,";
  text.replace(text.find(old_key), old_key.size(),
               "\"rope_parameters\": {\"rope_theta\": 250000.0, \"rope_type\": \"default\"},");
  auto m = Parse(text);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->rotary_base, 250000);
}

// Llama 3.1's RoPE scaling: read from config.json's rope_scaling, round-tripped through the plan
// file's model object (and absent from files without it), and refused where it cannot apply.
TEST(Llama, RopeScalingIsAModelField) {
  std::string text = kLlama3_8b;
  const std::string old_key = "\"rope_scaling\": null,";
  ASSERT_NE(text.find(old_key), std::string::npos);
  text.replace(text.find(old_key), old_key.size(),
               "\"rope_scaling\": {\"factor\": 8.0, \"low_freq_factor\": 1.0, "
               "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192, "
               "\"rope_type\": \"llama3\"},");
  auto m = Parse(text);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->rope_scaling_factor, 8);
  EXPECT_EQ(m->rope_high_freq_factor, 4);
  EXPECT_EQ(m->rope_original_max_positions, 8192);
  const OrderedJson j = ModelToJson(*m);
  auto back = ModelFromJson(Json::parse(j.dump()), "model");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->rope_scaling_factor, 8);
  EXPECT_EQ(back->rope_original_max_positions, 8192);
  EXPECT_FALSE(ModelToJson(LoadModel("llama3-8b").value()).contains("rope_scaling_factor"));
  ModelSpec bad = *m;
  bad.rotary = false;
  EXPECT_NE(bad.Validate().message().find("rope_scaling_factor: needs rotary"), std::string::npos)
      << bad.Validate().message();
  bad = *m;
  bad.rope_low_freq_factor = 4;
  EXPECT_NE(bad.Validate().message().find("rope_high_freq_factor: must exceed"), std::string::npos)
      << bad.Validate().message();
  bad = *m;
  bad.rope_scaling_factor = 0.5;
  EXPECT_NE(bad.Validate().message().find("rope_scaling_factor"), std::string::npos);
}

// YaRN (DeepSeek-V3's preset: factor 40 over 4096, both mscales 1): its fields round-trip through
// the plan file's model object, its concentration and MLA softmax factor are mscale's, and a type
// or betas it cannot use are refused by name.
TEST(Llama, YarnIsAModelField) {
  const ModelSpec v3 = LoadModel("deepseek-v3").value();
  ASSERT_TRUE(v3.RopeYarn());
  EXPECT_EQ(v3.RopeAttentionFactor(), 1);
  const double mscale = 0.1 * std::log(40.0) + 1;
  EXPECT_DOUBLE_EQ(v3.MlaSoftmaxFactor(), mscale * mscale);
  ModelSpec dense = v3;
  dense.mla_kv_lora = 0;  // YaRN without latent attention leaves the softmax alone
  EXPECT_EQ(dense.MlaSoftmaxFactor(), 1);
  ModelSpec odd = v3;
  odd.rope_yarn_mscale = 0.5;
  odd.rope_yarn_beta_fast = 16;
  auto back = ModelFromJson(Json::parse(ModelToJson(odd).dump()), "model");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->SameRopeScaling(odd)) << back->RopeScalingText();
  EXPECT_FALSE(back->SameRopeScaling(v3));
  EXPECT_DOUBLE_EQ(back->RopeAttentionFactor(), (0.05 * std::log(40.0) + 1) / mscale);
  EXPECT_EQ(v3.RopeScalingText(), "yarn factor 40, original 4096, betas 32 and 1, mscales 1 and 1");
  ModelSpec bad = v3;
  bad.rope_scaling_type = "ntk";
  EXPECT_EQ(bad.Validate("model").message(),
            "model.rope_scaling_type: \"ntk\" is not \"llama3\" or \"yarn\"");
  bad = v3;
  bad.rope_yarn_beta_slow = 64;
  EXPECT_EQ(bad.Validate("model").message(),
            "model.rope_yarn_beta_fast: must be at least rope_yarn_beta_slow (64), which must "
            "exceed 0");
}

// RMSNorm's epsilon: Qwen2's 1e-6 read from config.json, written back by ModelToJson only when it
// is not the default, and refused on a LayerNorm model.
TEST(Llama, NormEpsilonIsAModelField) {
  auto qwen = Parse(kQwen2_7b);
  ASSERT_TRUE(qwen.ok()) << qwen.status().ToString();
  EXPECT_EQ(qwen->norm_eps, 1e-6);
  auto back = ModelFromJson(Json::parse(ModelToJson(*qwen).dump()), "model");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->norm_eps, 1e-6);
  EXPECT_EQ(ModelToJson(LoadModel("llama3-8b").value()).dump().find("norm_eps"), std::string::npos);
  ModelSpec gpt = LoadModel("gpt-1.3b").value();
  gpt.norm_eps = 1e-6;
  EXPECT_EQ(gpt.Validate("model").message(),
            "model.norm_eps: 1e-06 needs rmsnorm (LayerNorm's epsilon is 1e-05)");
}

TEST(Llama, HuggingFaceConfigsGiveThePublishedCounts) {
  auto llama = Parse(kLlama3_8b);
  ASSERT_TRUE(llama.ok()) << llama.status().ToString();
  EXPECT_EQ(llama->name, "hf-llama");
  EXPECT_EQ(llama->KvHeads(), 8);
  EXPECT_EQ(llama->rotary_base, 500000);
  EXPECT_EQ(ParameterCount(*llama, 1), ParameterCount(LoadModel("llama3-8b").value(), 1));
  // Mistral 7B v0.3: 7,248,023,552 (its model page); v0.1's 32,000 vocabulary gives 7,241,732,096.
  auto mistral = Parse(kMistral7b);
  ASSERT_TRUE(mistral.ok()) << mistral.status().ToString();
  EXPECT_EQ(ParameterCount(*mistral, 1), 7248023552);
  // Qwen2-7B: 7,615,616,512 (its model page), 4608 QKV biases per layer included.
  auto qwen = Parse(kQwen2_7b);
  ASSERT_TRUE(qwen.ok()) << qwen.status().ToString();
  EXPECT_TRUE(qwen->qkv_bias);
  EXPECT_EQ(ParameterCount(*qwen, 1), 7615616512);
}

// One line naming the field, for what changes the maths or is not a supported family.
TEST(Llama, HuggingFaceRefusalsNameTheField) {
  auto refused = [](const std::string& text) {
    auto r = Parse(text);
    return r.ok() ? std::string("accepted") : r.status().message();
  };
  auto edit = [](std::string text, const std::string& from, const std::string& to) {
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return text.replace(at, from.size(), to);
  };
  EXPECT_EQ(refused(edit(kLlama3_8b, R"("model_type": "llama")", R"("model_type": "gemma")")),
            "model.model_type: 'gemma' is not supported (supported: gpt2, llama, mistral, "
            "qwen2, qwen3, mixtral, qwen3_moe, qwen2_moe, deepseek_v2, deepseek_v3, kimi_k2, "
            "glm4_moe, nemotron)");
  // Mistral's window is read (tests/planner SlidingWindow.*); a bad one is named.
  EXPECT_NE(refused(edit(kMistral7b, R"("sliding_window": null)", R"("sliding_window": -1)"))
                .find("model.sliding_window: -1 is not a positive number of tokens"),
            std::string::npos);
  EXPECT_NE(
      refused(edit(kQwen2_7b, R"("use_sliding_window": false)", R"("use_sliding_window": true)"))
          .find("model.use_sliding_window"),
      std::string::npos);
  EXPECT_EQ(refused(edit(kLlama3_8b, R"("use_cache": true)", R"("num_local_experts": 8)")),
            "model.num_local_experts: a mixture of experts is not modelled");
  EXPECT_NE(refused(edit(kLlama3_8b, R"("use_cache": true)", R"("head_dim": -1)"))
                .find("model.head_dim: -1"),
            std::string::npos);
  EXPECT_NE(refused(edit(kLlama3_8b, R"("hidden_act": "silu")", R"("hidden_act": "gelu")"))
                .find("model.hidden_act"),
            std::string::npos);
  EXPECT_NE(refused(edit(kLlama3_8b, R"("attention_bias": false)", R"("attention_bias": true)"))
                .find("model.attention_bias"),
            std::string::npos);
  EXPECT_NE(refused(edit(kLlama3_8b, "LlamaForCausalLM", "LlamaForSequenceClassification"))
                .find("model.architectures: 'LlamaForSequenceClassification' is not supported"),
            std::string::npos);
  EXPECT_EQ(refused(edit(kLlama3_8b, R"("use_cache": true)", R"("use_kache": true)")),
            "model.use_kache: unknown key");
}

// The ledger's FLOPs against a count from the parameter shapes: every weight matrix of a layer
// and the output layer costs 2 FLOPs per token forward, 4 backward; attention's scores and
// scores.V 4 s h per token and layer forward (each query head scores all s keys whatever the
// key/value heads), twice that backward. Norms, rotary and the SwiGLU product are not GEMMs.
TEST(Llama, FlopsPerTokenByHand) {
  const ModelSpec m = LoadModel("llama3-8b").value();
  ParallelConfig c;
  c.global_batch = 3;
  // Matrix parameters of one layer, from the preset's sizes (h 4096, 32 heads of 128, 8 key/value
  // heads, f 14336): q, k, v, o and gate, up, down.
  const double h = 4096, kv = 8 * 128, f = 14336, s = 8192, V = 128256, l = 32;
  const double layer_matrices = h * h + 2 * h * kv + h * h + 3 * h * f;
  const double per_token = 6 * (l * layer_matrices + V * h) + 3 * l * 4 * s * h;
  const double tokens = 3 * s;
  EXPECT_DOUBLE_EQ(ModelIterationFlops(m, c), per_token * tokens);
  // Full recomputation runs every layer's forward once more.
  c.recompute = Recompute::kFull;
  const double layers_forward = l * (2 * layer_matrices + 4 * s * h) * tokens;
  EXPECT_DOUBLE_EQ(HardwareIterationFlops(m, c), per_token * tokens + layers_forward);
}

// Tensor parallelism splits query groups: each of t ranks holds kv_heads / t key/value heads and
// h / t queries, so the QKV weight's local rows are (h + 2 kv dh) / t; a t that does not divide
// the key/value heads is refused naming them.
TEST(Llama, TensorParallelOverQueryGroups) {
  const ModelSpec m = LoadModel("llama3-70b").value();
  ParallelConfig c;
  c.tp = 8;
  c.pp = 10;
  c.global_batch = 8;
  ASSERT_TRUE(c.Validate(m).ok()) << c.Validate(m).ToString();
  const auto ps = ChunkParameters(m, c, 1, 0);
  ASSERT_FALSE(ps.empty());
  EXPECT_EQ(ps[0].name, "layer8.ln1.weight");  // RMSNorm: a weight, no bias
  EXPECT_EQ(ps[1].name, "layer8.attn.qkv.weight");
  EXPECT_EQ(ps[1].local_shape, (std::vector<int64_t>{(8192 + 2 * 8 * 128) / 8, 8192}));
  // Every layer's local elements add up to the model's layers over t (norms replicated).
  const LayerParameters per_layer = LayerParameterCounts(m, 8);
  EXPECT_EQ(per_layer.tensors, 6);  // 2 norms, qkv, proj, fc1 (gate and up), fc2
  EXPECT_EQ(per_layer.elements, (8192 * 10240 + 8192 * 8192 + 3 * 8192 * 28672) / 8 + 2 * 8192);
  // Summed over the pipeline with tp = 1, the stages hold the whole model.
  c.tp = 1;
  int64_t total = 0;
  for (int r = 0; r < c.pp; ++r) total += StageParameterElements(m, c, r);
  EXPECT_EQ(total, ParameterCount(m, 1));
  c.tp = 16;
  const Status st = c.Validate(m);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("tp: 16 does not divide the 8 key/value heads"), std::string::npos)
      << st.ToString();
}

// A Llama layer keeps K and V at kv_heads dh features, SwiGLU's 2f input, and no LayerNorm
// means; the runtime names what it cannot execute.
TEST(Llama, ActivationsAndRuntimeFeatures) {
  const ModelSpec m = LoadModel("llama3-8b").value();
  ParallelConfig c;
  c.tp = 2;
  c.mbs = 1;
  int64_t k = 0, swiglu = 0, means = 0;
  for (const auto& a : LayerActivations(m, c, false)) {
    if (a.name == "attn.k") k = a.elements;
    if (a.name == "mlp.swiglu.input") swiglu = a.elements;
    if (a.name.find(".mean") != std::string::npos) ++means;
  }
  EXPECT_EQ(k, 8192 * 1024 / 2);
  EXPECT_EQ(swiglu, 8192 * 2 * 14336 / 2);
  EXPECT_EQ(means, 0);
}

// zai-org/GLM-4.5's config.json (Hugging Face, as transformers 5 reads it): DeepSeek-V3's router
// (sigmoid, the expert bias, 2.5) on grouped-query attention with q, k, v biases, QK norms and
// half-turned RoPE; 3 dense layers, then 160 experts of 1536 and one shared expert; one prediction
// depth. Planned as read; the runtime would refuse its prediction depth by name.
TEST(HfConfig, Glm45ReadsDeepSeekV3sRouterOnGroupedAttention) {
  const char* glm = R"({"architectures": ["Glm4MoeForCausalLM"], "attention_bias": true,
    "attention_dropout": 0.0, "pad_token_id": 151329, "eos_token_id": [151329, 151336, 151338],
    "head_dim": 128, "hidden_act": "silu", "hidden_size": 5120, "partial_rotary_factor": 0.5,
    "initializer_range": 0.02, "intermediate_size": 12288, "max_position_embeddings": 131072,
    "model_type": "glm4_moe", "moe_intermediate_size": 1536, "norm_topk_prob": true,
    "num_attention_heads": 96, "n_group": 1, "topk_group": 1, "n_routed_experts": 160,
    "n_shared_experts": 1, "routed_scaling_factor": 2.5, "num_experts_per_tok": 8,
    "first_k_dense_replace": 3, "num_hidden_layers": 92, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05, "rope_theta": 1000000, "num_nextn_predict_layers": 1,
    "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.54.0",
    "use_cache": true, "use_qk_norm": true, "vocab_size": 151552})";
  auto m = Parse(glm);
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_TRUE(m->qkv_bias && m->qk_norm && !m->linear_bias);
  EXPECT_EQ(m->rotary_percent, 0.5);
  EXPECT_EQ(m->rotary_base, 1e6);
  EXPECT_EQ(m->KvHeads(), 8);
  EXPECT_EQ(m->HeadDim(), 128);
  EXPECT_EQ(m->moe_experts, 160);
  EXPECT_EQ(m->moe_topk, 8);
  EXPECT_EQ(m->MoeFfnHidden(), 1536);
  EXPECT_EQ(m->moe_shared_ffn_hidden, 1536);
  EXPECT_EQ(m->moe_dense_layers, 3);
  EXPECT_EQ(m->FfnHidden(), 12288);
  EXPECT_EQ(m->moe_router_groups, 0);  // n_group 1: none
  EXPECT_TRUE(m->moe_router_sigmoid && m->moe_router_expert_bias);
  EXPECT_EQ(m->moe_router_topk_scale, 2.5);
  EXPECT_EQ(m->mtp_layers, 1);
  // zai-org/GLM-4.5's model card: 355B parameters in all (a rounded figure); ParameterCount
  // counts the main model and its prediction depth, 356.8B (+0.5%).
  const double total = double(ParameterCount(*m)) / 1e9;
  EXPECT_NEAR(total, 355.0, 0.01 * 355.0);
}

}  // namespace
}  // namespace ptdp
