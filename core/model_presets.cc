// The shipped model presets (core/model.h ModelPresets): each model's shapes with the source they
// were read from.
#include <string>
#include <vector>

#include "core/model.h"

namespace ptdp {

namespace {

ModelSpec Gpt(const std::string& name, int l, int64_t h, int a, int64_t s = 2048,
              int64_t v = 51200) {
  ModelSpec m;
  m.name = name;
  m.layers = l;
  m.hidden = h;
  m.heads = a;
  m.seq_len = s;
  m.vocab = v;
  m.dropout = 0.1;  // Megatron-LM's default --hidden-dropout / --attention-dropout
  return m;
}

// A Llama 3 model (Dubey et al. 2024, "The Llama 3 Herd of Models", Table 3; and the
// config.json of meta-llama/Meta-Llama-3-8B, -70B, Llama-3.1-405B): grouped-query attention with 8
// key/value heads, SwiGLU, RMSNorm, RoPE with theta 500,000, a 128,256-token vocabulary, no
// biases, untied output layer, no dropout.
ModelSpec Llama3(const std::string& name, int l, int64_t h, int64_t f, int a) {
  ModelSpec m = Gpt(name, l, h, a, 8192, 128256);
  m.ffn_hidden = f;
  m.kv_heads = 8;
  m.swiglu = m.rmsnorm = m.rotary = true;
  m.rotary_base = 500000;
  m.linear_bias = false;
  m.tied_embeddings = false;
  m.dropout = 0.0;
  return m;
}

// A Llama 3.1 model: Llama 3's decoder with the RoPE scaling every Llama 3.1 config.json carries
// (rope_type llama3, factor 8, low 1, high 4, original 8192; Megatron-Bridge's llama_bridge.py
// turns it into rope_scaling with that factor). No shape or FLOP changes.
ModelSpec Llama31(const std::string& name, int l, int64_t h, int64_t f, int a) {
  ModelSpec m = Llama3(name, l, h, f, a);
  m.rope_scaling_factor = 8;
  return m;
}

// Llama 3.2's small models (meta-llama/Llama-3.2-1B and -3B config.json): Llama 3's decoder with
// tied embeddings and Llama 3.1's RoPE scaling of factor 32 (low 1, high 4, original 8192).
ModelSpec Llama32(const std::string& name, int l, int64_t h, int a) {
  ModelSpec m = Llama3(name, l, h, 8192, a);
  m.tied_embeddings = true;
  m.rope_scaling_factor = 32;
  return m;
}

// A dense Qwen3 (Yang et al. 2025, "Qwen3 Technical Report"): a Llama-style decoder with QK norms
// (RMSNorm of each query and key head), heads of 128 whatever the hidden size, 8 key/value heads,
// RMSNorm eps 1e-6, RoPE theta 1,000,000, untied, vocabulary 151936; sequence 4096, the length of
// the report's general pre-training stage (S1).
ModelSpec Qwen3(const std::string& name, int l, int64_t h, int64_t f, int a, bool tied = false) {
  ModelSpec m = Llama3(name, l, h, f, a);
  m.tied_embeddings = tied;  // the small ones (0.6B to 4B) tie their embeddings
  m.seq_len = 4096;
  m.vocab = 151936;
  m.head_dim = 128;
  m.qk_norm = true;
  m.norm_eps = 1e-6;
  m.rotary_base = 1000000;
  return m;
}

// Nemotron-4 (dgxc-benchmarking v25.01 nemotron/*-synth.yaml): 8 key/value heads, squared ReLU of
// 4h, LayerNorm1P (layernorm_1p: LayerNorm's shapes), RoPE on half of dh, no biases, untied, s
// 4096.
ModelSpec Nemotron4(const std::string& name, int l, int64_t h, int a) {
  ModelSpec m = Gpt(name, l, h, a, 4096, 256000);
  m.kv_heads = 8;
  m.squared_relu = m.rotary = m.layernorm_1p = true;
  m.rotary_percent = 0.5;
  m.linear_bias = m.tied_embeddings = false;
  m.dropout = 0.0;
  return m;
}

// A mixture of experts on a Llama-style decoder: every layer's MLP is `experts` SwiGLU experts of
// `f_moe`, `topk` per token; RoPE theta 1,000,000, untied, no biases or dropout.
ModelSpec Moe(const std::string& name, int l, int64_t h, int a, int kv, int64_t head_dim,
              bool qk_norm, int experts, int topk, int64_t f_moe, int64_t vocab) {
  ModelSpec m = Llama3(name, l, h, f_moe, a);
  m.seq_len = 4096;  // the published pre-training runs' (docs/moe.md)
  m.vocab = vocab;
  m.kv_heads = kv;
  m.head_dim = head_dim;
  m.qk_norm = qk_norm;
  m.rotary_base = 1000000;
  m.moe_experts = experts;
  m.moe_topk = topk;
  m.moe_ffn_hidden = f_moe;
  return m;
}

// Qwen3's mixtures of experts: heads of 128, QK norms, RMSNorm eps 1e-6 (their config.json's
// rms_norm_eps), vocabulary 151936.
ModelSpec Qwen3Moe(const std::string& name, int l, int64_t h, int a, int experts, int topk,
                   int64_t f_moe) {
  ModelSpec m = Moe(name, l, h, a, 4, 128, true, experts, topk, f_moe, 151936);
  m.norm_eps = 1e-6;
  return m;
}

// DeepSeek-V3 (DeepSeek-AI 2024, "DeepSeek-V3 Technical Report"; deepseek-ai/DeepSeek-V3's
// config.json as Megatron-Bridge's test fixture holds it, tests/unit_tests/models/deepseek/
// test_deepseek_bridges.py at 067f987d): 61 layers of multi-latent attention (q latent 1536, kv
// latent 512, heads' 128 + 64 rotated features, values 128, the latents normed), the first 3
// with a dense SwiGLU MLP of 18432, the others 256 experts of 2048, top-8, and one shared expert
// of 2048; vocabulary 129280 padded to a multiple of 1280 as Megatron-Bridge's provider does.
ModelSpec DeepSeekV3() {
  ModelSpec m = Moe("deepseek-v3", 61, 7168, 128, 128, 128, true, 256, 8, 2048, 129280);
  m.ffn_hidden = 18432;
  m.moe_dense_layers = 3;
  m.moe_shared_ffn_hidden = 2048;
  m.mla_q_lora = 1536;
  m.mla_kv_lora = 512;
  m.mla_rope_dim = 64;
  m.mla_v_dim = 128;
  m.rotary_base = 10000;
  // config.json's rope_scaling: YaRN of factor 40 over the original 4096 positions, betas 32 and 1,
  // mscale and mscale_all_dim 1 (the softmax scale times (0.1 ln 40 + 1)^2).
  m.rope_scaling_type = "yarn";
  m.rope_scaling_factor = 40;
  m.rope_original_max_positions = 4096;
  m.rope_yarn_mscale = m.rope_yarn_mscale_all_dim = 1;
  m.norm_eps = 1e-6;  // config.json's rms_norm_eps
  m.vocab_divisible_by = 1280;
  m.mtp_layers = 1;
  m.moe_router_groups = 8;  // n_group, topk_group: node-limited routing
  m.moe_router_group_topk = 4;
  // scoring_func sigmoid, routed_scaling_factor 2.5, topk_method noaux_tc (the expert bias, whose
  // update speed the report gives as 0.001: Megatron-Core's default rate).
  m.moe_router_sigmoid = true;
  m.moe_router_topk_scale = 2.5;
  m.moe_router_expert_bias = true;
  return m;
}

// Kimi K2 (Moonshot AI 2025, "Kimi K2: Open Agentic Intelligence"; Megatron-Bridge's
// KimiK2Provider, src/megatron/bridge/models/kimi/kimi_provider.py at 1e591140, read 2026-12-01):
// DeepSeek-V3's architecture with 64 heads, 384 experts of 2048 (top 8, one group: no group
// limit), one leading dense layer, no prediction depth, RoPE base 50000 with YaRN of factor 32
// over 4096 positions (betas 1 and 1, mscales 1), routed scaling 2.827, RMSNorm eps 1e-6 and a
// vocabulary of 163840.
ModelSpec KimiK2() {
  ModelSpec m = DeepSeekV3();
  m.name = "kimi-k2";
  m.heads = m.kv_heads = 64;
  m.moe_experts = 384;
  m.moe_dense_layers = 1;
  m.mtp_layers = 0;
  m.rotary_base = 50000;
  m.rope_scaling_factor = 32;
  m.rope_yarn_beta_fast = m.rope_yarn_beta_slow = 1;
  m.moe_router_groups = m.moe_router_group_topk = 0;
  m.moe_router_topk_scale = 2.827;
  m.vocab = 163840;
  return m;
}

ModelSpec Tiny() {
  ModelSpec m = Gpt("tiny", 4, 64, 4, 32, 256);
  m.dropout = 0.0;
  return m;
}

}  // namespace

const std::vector<ModelPreset>& ModelPresets() {
  static const std::vector<ModelPreset> presets = {
      {Gpt("gpt-1.7b", 24, 2304, 24), "Narayanan et al. SC'21, Table 1 row 1"},
      {Gpt("gpt-3.6b", 30, 3072, 32), "Table 1 row 2"},
      {Gpt("gpt-7.5b", 36, 4096, 32), "Table 1 row 3"},
      {Gpt("gpt-18b", 40, 6144, 48), "Table 1 row 4"},
      {Gpt("gpt-39b", 48, 8192, 64), "Table 1 row 5"},
      {Gpt("gpt-76b", 60, 10240, 80), "Table 1 row 6"},
      {Gpt("gpt-145b", 80, 12288, 96), "Table 1 row 7"},
      {Gpt("gpt-310b", 96, 16384, 128), "Table 1 row 8"},
      {Gpt("gpt-530b", 105, 20480, 128), "Table 1 row 9"},
      {Gpt("gpt-1t", 128, 25600, 160), "Table 1 row 10"},
      {Gpt("gpt-22b", 48, 6144, 64), "Korthikanti et al. 2022, Table 3 (22B)"},
      {Gpt("gpt3-175b", 96, 12288, 96, 2048, 50257),
       "Brown et al. 2020, GPT-3 175B (GPT-2 BPE vocabulary)"},
      {Gpt("gpt2-124m", 12, 768, 12, 1024, 50257), "GPT-2 small (Radford et al. 2019)"},
      {Gpt("gpt2-350m", 24, 1024, 16, 1024, 50257), "GPT-2 medium"},
      {Gpt("gpt-1.3b", 24, 2048, 16, 2048, 50257), "GPT-3 XL shape (Brown et al. 2020)"},
      {Llama3("llama3-8b", 32, 4096, 14336, 32),
       "Dubey et al. 2024 (The Llama 3 Herd of Models), Table 3; meta-llama/Meta-Llama-3-8B "
       "config.json; 8.03B parameters"},
      {Llama3("llama3-70b", 80, 8192, 28672, 64),
       "Dubey et al. 2024, Table 3; meta-llama/Meta-Llama-3-70B config.json; 70.6B parameters"},
      {Llama31("llama3.1-405b", 126, 16384, 53248, 128),
       "Dubey et al. 2024, Table 3 (sequence 8192 as in pre-training); "
       "meta-llama/Llama-3.1-405B config.json (rope_scaling llama3 factor 8); 405.9B parameters"},
      {Llama32("llama3.2-1b", 16, 2048, 32),
       "meta-llama/Llama-3.2-1B config.json (tied, rope_scaling llama3 factor 32; sequence 8192 as "
       "the Llama 3 presets); 1,235,814,400 parameters on its Hugging Face page"},
      {Llama32("llama3.2-3b", 28, 3072, 24),
       "meta-llama/Llama-3.2-3B config.json (tied, rope_scaling llama3 factor 32); 3,212,749,824 "
       "parameters on its Hugging Face page"},
      {Qwen3("qwen3-0.6b", 28, 1024, 3072, 16, true),
       "Qwen/Qwen3-0.6B config.json (tied; 16 heads of 128: attention 2048 wide at hidden 1024); "
       "Yang et al. 2025, Table 1; 0.6B parameters (0.44B without the embedding) on its model "
       "card"},
      {Qwen3("qwen3-4b", 36, 2560, 9728, 32, true),
       "Qwen/Qwen3-4B config.json (tied); Yang et al. 2025, Table 1; 4.0B parameters (3.6B without "
       "the embedding) on its model card"},
      {Qwen3("qwen3-8b", 36, 4096, 12288, 32),
       "Qwen/Qwen3-8B config.json; Yang et al. 2025 (Qwen3 Technical Report), Table 1; 8.2B "
       "parameters (6.95B without the embeddings) on its model card"},
      {Qwen3("qwen3-32b", 64, 5120, 25600, 64),
       "Qwen/Qwen3-32B config.json (64 heads of 128: attention 8192 wide at hidden 5120); Yang et "
       "al. 2025, Table 1; 32.8B parameters (31.2B without the embeddings) on its model card"},
      {Nemotron4("nemotron4-15b", 32, 6144, 48),
       "NVIDIA/dgxc-benchmarking v25.01 nemotron4-15b-synth.yaml; Parmar et al. 2024"},
      {Nemotron4("nemotron4-340b", 96, 18432, 96),
       "NVIDIA/dgxc-benchmarking v25.01 nemotron4-340b-synth.yaml; NVIDIA 2024 (tech. report)"},
      {Moe("mixtral-8x7b", 32, 4096, 32, 8, 0, false, 8, 2, 14336, 32000),
       "Jiang et al. 2024 (Mixtral of Experts); mistralai/Mixtral-8x7B-v0.1 config.json "
       "(sequence 4096 as Megatron-LM's reference mapping runs it); 46.7B parameters"},
      {Qwen3Moe("qwen3-30b-a3b", 48, 2048, 32, 128, 8, 768),
       "Qwen/Qwen3-30B-A3B config.json (head_dim 128, qk-norm); 30.5B parameters, "
       "3.3B active"},
      {Qwen3Moe("qwen3-235b-a22b", 94, 4096, 64, 128, 8, 1536),
       "Qwen/Qwen3-235B-A22B config.json (head_dim 128, qk-norm); 235B parameters, "
       "22B active"},
      {DeepSeekV3(),
       "DeepSeek-AI 2024 (DeepSeek-V3 Technical Report); deepseek-ai/DeepSeek-V3 config.json "
       "(sequence 4096 as Megatron-Bridge's recipes run it; one multi-token prediction depth); "
       "671B parameters in the main model, 37B active, and 11.6B in the depth (685B on Hugging "
       "Face with the depth's embedding and output copies)"},
      {KimiK2(),
       "Megatron-Bridge's KimiK2Provider (kimi_provider.py at 1e591140; sequence 4096 as there); "
       "moonshotai/Kimi-K2 model card: 1T parameters, 32B activated (1.026T and 32.7B here)"},
      {Tiny(), "test model: 4 layers, h 64, 4 heads, s 32, byte-level vocabulary, no dropout"},
  };
  return presets;
}

}  // namespace ptdp
