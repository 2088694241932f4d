// Hugging Face Llama folders (runtime/checkpoint/hf_llama.h): the row split of QKV and fc1 and its
// inverse, config.json read back (and each field that would change the maths refused by name), and
// the safetensors header matched against the config. transformers' own check is make hf-check.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <numeric>

#include "runtime/checkpoint/hf_llama.h"
#include "runtime/checkpoint/param_io.h"
#include "runtime/checkpoint/safetensors.h"
#include "tests/runtime/hf_test_models.h"

namespace ptdp::runtime {
namespace {

using hf_test::SmallLlamaModel;

// Every part of QKV and fc1 taken out and put back gives the runtime tensor again, and the
// parts of one tensor cover it exactly once.
TEST(HfLlama, PartsSplitAndReassembleTheRuntimeRows) {
  const ModelSpec m = SmallLlamaModel();
  for (const char* name : {"layer0.attn.qkv.weight", "layer0.mlp.fc1.weight"}) {
    std::vector<HfTensorSpec> parts;
    for (const auto& s : HfLlamaTensors(m)) {
      if (s.ptdp == name) parts.push_back(s);
    }
    ASSERT_GE(parts.size(), 2u) << name;
    int64_t rows = 0;
    for (const auto& s : parts) rows += s.hf_shape[0];
    std::vector<float> rt(size_t(rows * m.hidden));
    std::iota(rt.begin(), rt.end(), 0.0f);
    std::vector<float> back(rt.size(), -1.0f);
    for (const auto& s : parts) LlamaPartInto(s, m.heads, LlamaPartOf(s, m.heads, rt), &back);
    EXPECT_EQ(back, rt) << name;
  }
  // q_proj's head 4 (group 1, its second query) is runtime row block 1 * (3 + 2) + 1.
  for (const auto& s : HfLlamaTensors(m)) {
    if (s.layout != HfLayout::kQProj || s.hf.find("layers.0.") == std::string::npos) continue;
    std::vector<float> rt(size_t(10 * 4 * m.hidden));
    std::iota(rt.begin(), rt.end(), 0.0f);
    const std::vector<float> q = LlamaPartOf(s, m.heads, rt);
    EXPECT_EQ(q[size_t(4 * 4 * m.hidden)], rt[size_t((1 * 5 + 1) * 4 * m.hidden)]);
  }
}

std::string LlamaConfigError(const std::function<void(Json&)>& edit) {
  Json j = Json::parse(HfLlamaConfigToJson(SmallLlamaModel()).dump());
  edit(j);
  auto c = HfLlamaConfigFromJson(j, "cfg.json");
  return c.ok() ? "ok" : c.status().message();
}

TEST(HfLlama, ConfigReadsWhatExportWritesAndRefusesOtherMaths) {
  Json j = Json::parse(HfLlamaConfigToJson(SmallLlamaModel()).dump());
  auto c = HfLlamaConfigFromJson(j, "cfg.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->model.KvHeads(), 2);
  EXPECT_EQ(c->model.rotary_base, 500000);
  EXPECT_EQ(c->model.FfnHidden(), 10);
  EXPECT_FALSE(c->model.tied_embeddings);
  EXPECT_EQ(c->n_positions, 8);
  EXPECT_EQ(LlamaConfigError([](Json&) {}), "ok");
  // rms_norm_eps becomes norm_eps; absent, transformers' default 1e-6.
  j["rms_norm_eps"] = 1e-6;
  EXPECT_EQ(HfLlamaConfigFromJson(j, "cfg.json")->model.norm_eps, 1e-6);
  j.erase("rms_norm_eps");
  EXPECT_EQ(HfLlamaConfigFromJson(j, "cfg.json")->model.norm_eps, 1e-6);
  // Llama 3.1's scaling needs its four numbers, YaRN its original length; other scalings are
  // refused by name.
  EXPECT_EQ(LlamaConfigError([](Json& x) {
              x["rope_scaling"] = {{"rope_type", "llama3"}};
            }),
            "cfg.json.rope_scaling.factor: llama3 scaling needs it as a number");
  EXPECT_EQ(LlamaConfigError([](Json& x) {  // a length no int64 holds: refused before the cast
              x["rope_scaling"] = {{"rope_type", "llama3"},
                                   {"factor", 8.0},
                                   {"low_freq_factor", 1.0},
                                   {"high_freq_factor", 4.0},
                                   {"original_max_position_embeddings", 1e30}};
            }),
            "cfg.json.rope_scaling.original_max_position_embeddings: from 1 to 2^40");
  EXPECT_EQ(LlamaConfigError([](Json& x) {
              x["rope_parameters"] = {{"rope_theta", 1e4}, {"rope_type", "yarn"}};
            }),
            "cfg.json.rope_parameters.original_max_position_embeddings: yarn needs it, from 1 "
            "to 2^40");
  // Keys read before the typed reader: a wrong type is an error, not an exception (fuzz_hf_llama
  // found model_type holding an object).
  EXPECT_EQ(HfLlamaConfigFromJson(Json::parse(R"({"model_type": {"x": 1}})"), "cfg.json")
                .status()
                .message(),
            "cfg.json.model_type: expected a string, got object");
  EXPECT_EQ(LlamaConfigError([](Json& x) {
              x["rope_scaling"] = {{"rope_type", 5}};
            }),
            "cfg.json.rope_scaling.rope_type: expected a string");
  EXPECT_EQ(LlamaConfigError([](Json& x) {
              x["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
            }),
            "cfg.json: rope_scaling.rope_type: linear is not supported: ptdp's rotation is "
            "unscaled, Llama 3.1's (llama3) or YaRN's (yarn)");
  EXPECT_NE(LlamaConfigError([](Json& x) { x["attention_bias"] = true; }).find("attention_bias"),
            std::string::npos);
  EXPECT_EQ(LlamaConfigError([](Json& x) { x["model_type"] = "gpt2"; }),
            "cfg.json: model_type: not \"llama\", \"mistral\", \"qwen2\", \"qwen3\" or "
            "\"nemotron\"");
  // Qwen2: biases on q, k and v alone, read (refused by the hf-llama export, --to hf-qwen2's).
  Json qwen = Json::parse(HfLlamaConfigToJson(SmallLlamaModel()).dump());
  qwen["model_type"] = "qwen2";
  qwen["architectures"] = {"Qwen2ForCausalLM"};
  qwen["use_sliding_window"] = false;
  auto q = HfLlamaConfigFromJson(qwen, "cfg.json");
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  EXPECT_TRUE(q->model.qkv_bias);
  EXPECT_EQ(CheckHfLlamaExportable(q->model, HfLlamaArch::kLlama, "m").message(),
            "m is not a model that Hugging Face's LlamaForCausalLM computes: it has a bias on q, k "
            "and v alone (--to hf-qwen2 writes it)");
  EXPECT_TRUE(CheckHfLlamaExportable(q->model, HfLlamaArch::kQwen2, "m").ok());
  const OrderedJson q_out = HfLlamaConfigToJson(q->model);
  EXPECT_EQ(q_out["architectures"][0], "Qwen2ForCausalLM");
  auto q_back = HfLlamaConfigFromJson(Json::parse(q_out.dump()), "cfg.json");
  ASSERT_TRUE(q_back.ok()) << q_back.status().ToString();
  EXPECT_TRUE(q_back->model.qkv_bias);
  int biases = 0;
  for (const auto& s : HfLlamaTensors(q->model)) biases += s.ptdp == "layer1.attn.qkv.bias";
  EXPECT_EQ(biases, 3);
  // Mistral without a window is Llama's computation, and with one that spans the sequence (8);
  // a shorter one is read as ptdp's window (HfLlama.MistralWindowReadAndWritten).
  EXPECT_EQ(LlamaConfigError([](Json& x) {
              x["model_type"] = "mistral";
              x["architectures"] = {"MistralForCausalLM"};
              x["sliding_window"] = nullptr;
            }),
            "ok");
  EXPECT_EQ(LlamaConfigError([](Json& x) {
              x["model_type"] = "mistral";
              x["architectures"] = {"MistralForCausalLM"};
              x["sliding_window"] = 8;
            }),
            "ok");
  EXPECT_EQ(LlamaConfigError([](Json& x) {
              x["model_type"] = "mistral";
              x["architectures"] = {"MistralForCausalLM"};
              x["sliding_window"] = 4;
            }),
            "ok");
  // Llama's classes turn every feature of a head: a partial rotation (Nemotron's) is not written
  // as one.
  ModelSpec partial = SmallLlamaModel();
  partial.rotary_percent = 0.5;
  EXPECT_EQ(
      CheckHfLlamaExportable(partial, HfLlamaArch::kLlama, "m").message(),
      "m is not a model of Hugging Face's Llama family (Llama, Mistral, Qwen2, Qwen3, Qwen3-MoE, "
      "Mixtral): it "
      "turns part of each head (rotary_percent)");
}

std::string LlamaMatch(const std::function<void(std::vector<StTensor>&)>& edit) {
  return hf_test::MatchEditedHeader(SmallLlamaModel(), edit);
}

TEST(HfLlama, HeaderMatchesAgainstTheConfig) {
  EXPECT_EQ(LlamaMatch([](auto&) {}), "ok");
  EXPECT_EQ(LlamaMatch([](auto& t) {
              t.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", "F32", {2}});
            }),
            "ok");  // an old file's buffer
  EXPECT_EQ(LlamaMatch([](auto& t) { t.pop_back(); }), "m.st: missing tensor 'lm_head.weight'");
  EXPECT_EQ(LlamaMatch([](auto& t) {
              t.push_back({"model.layers.0.mlp.extra", "F32", {2}});
            }),
            "m.st: tensor 'model.layers.0.mlp.extra' is not a parameter of the Llama model "
            "config.json describes");
  EXPECT_EQ(LlamaMatch([](auto& t) {
              t[2].shape = {8, 24};
            }),
            "m.st: tensor 'model.layers.0.self_attn.q_proj.weight' has shape [8, 24], config.json "
            "needs [24, 24]");
}

// Qwen3: heads of their own width (head_dim 8 at h 24 over 6 heads: the attention 48 wide) and QK
// norms. Export writes Qwen3ForCausalLM's config, which reads back to the same model; the two
// norms are tensors one head wide; each export format refuses the other's model by name.
TEST(HfLlama, Qwen3ConfigAndTensors) {
  ModelSpec m = SmallLlamaModel();
  m.head_dim = 8;
  m.qk_norm = true;
  m.norm_eps = 1e-6;
  ASSERT_TRUE(m.Validate().ok()) << m.Validate().ToString();
  const OrderedJson out = HfLlamaConfigToJson(m);
  EXPECT_EQ(out["architectures"][0], "Qwen3ForCausalLM");
  EXPECT_EQ(out["model_type"], "qwen3");
  auto c = HfLlamaConfigFromJson(Json::parse(out.dump()), "cfg.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->model.qk_norm);
  EXPECT_EQ(c->model.HeadDim(), 8);
  EXPECT_EQ(c->model.AttnWidth(), 48);
  EXPECT_EQ(c->model.norm_eps, 1e-6);
  EXPECT_FALSE(c->model.qkv_bias);
  int norms = 0;
  for (const auto& s : HfLlamaTensors(m)) {
    if (s.ptdp == "layer1.attn.q_norm.weight" || s.ptdp == "layer1.attn.k_norm.weight") {
      ++norms;
      EXPECT_EQ(s.hf_shape, std::vector<int64_t>{8}) << s.hf;
      EXPECT_NE(s.hf.find("model.layers.1.self_attn."), std::string::npos) << s.hf;
    }
    if (s.hf == "model.layers.0.self_attn.o_proj.weight") {
      EXPECT_EQ(s.hf_shape, (std::vector<int64_t>{24, 48}));
    }
  }
  EXPECT_EQ(norms, 2);
  EXPECT_TRUE(CheckHfLlamaExportable(m, HfLlamaArch::kQwen3, "m").ok());
  EXPECT_EQ(CheckHfLlamaExportable(m, HfLlamaArch::kLlama, "m").message(),
            "m is not a model that Hugging Face's LlamaForCausalLM computes: it has QK norms "
            "(--to hf-qwen3 writes it)");
  EXPECT_EQ(CheckHfLlamaExportable(SmallLlamaModel(), HfLlamaArch::kQwen3, "m").message(),
            "m is not a model that Hugging Face's Qwen3ForCausalLM computes: it has no QK norms "
            "(--to hf-llama writes it)");
  EXPECT_EQ(CheckHfLlamaExportable(SmallLlamaModel(), HfLlamaArch::kQwen2, "m").message(),
            "m is not a model that Hugging Face's Qwen2ForCausalLM computes: it has no bias on q, "
            "k and v (--to hf-llama writes it)");
}

// Mistral: transformers keeps q - k < sliding_window, ptdp the query and window_size keys before
// it, so S reads as S - 1 and is written back as S. The window is on every layer; export refuses
// it to the other classes, and a window ptdp's runtime has that Mistral's class does not compute
// (alternating layers, or with Qwen's features) is refused by name, on reading and on export.
TEST(HfLlama, MistralWindowReadAndWritten) {
  Json j = Json::parse(HfLlamaConfigToJson(SmallLlamaModel()).dump());
  j["model_type"] = "mistral";
  j["architectures"] = {"MistralForCausalLM"};
  j.erase("mlp_bias");
  j["sliding_window"] = 5;
  auto c = HfLlamaConfigFromJson(j, "cfg.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->model.window_size, 4);
  EXPECT_EQ(c->model.window_full_every, 0);
  EXPECT_EQ(HfLlamaArchOf(c->model), HfLlamaArch::kMistral);
  const OrderedJson out = HfLlamaConfigToJson(c->model);
  EXPECT_EQ(out["architectures"][0], "MistralForCausalLM");
  EXPECT_EQ(out["model_type"], "mistral");
  EXPECT_EQ(out["sliding_window"], 5);
  EXPECT_FALSE(out.contains("use_sliding_window"));
  auto back = HfLlamaConfigFromJson(Json::parse(out.dump()), "cfg.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->model.window_size, 4);
  EXPECT_TRUE(CheckHfLlamaExportable(c->model, HfLlamaArch::kMistral, "m").ok());
  EXPECT_EQ(CheckHfLlamaExportable(c->model, HfLlamaArch::kLlama, "m").message(),
            "m is not a model that Hugging Face's LlamaForCausalLM computes: it has a sliding "
            "window (window_size) (--to hf-mistral writes it)");
  EXPECT_EQ(CheckHfLlamaExportable(SmallLlamaModel(), HfLlamaArch::kMistral, "m").message(),
            "m is not a model that Hugging Face's MistralForCausalLM computes: it has no sliding "
            "window (--to hf-llama writes it)");
  // --init-from: the plan's window must be the folder's.
  EXPECT_TRUE(CheckHfMatchesModel(*c, c->model, "cfg.json").ok());
  EXPECT_EQ(CheckHfMatchesModel(*c, SmallLlamaModel(), "cfg.json").message(),
            "cfg.json: sliding_window is 5, the plan's model.window_size is 0 (sliding_window - 1 "
            "on every layer)");
  ModelSpec alternating = c->model;
  alternating.window_full_every = 2;
  EXPECT_NE(CheckHfMatchesModel(*c, alternating, "cfg.json").message().find("window_full_every"),
            std::string::npos);
  EXPECT_EQ(
      CheckHfLlamaExportable(alternating, HfLlamaArch::kMistral, "m").message(),
      "m is not a model of Hugging Face's Llama family (Llama, Mistral, Qwen2, Qwen3, Qwen3-MoE, "
      "Mixtral): it "
      "alternates windowed and full layers (window_full_every)");
  ModelSpec qwen = c->model;
  qwen.qk_norm = true;
  EXPECT_EQ(
      CheckHfLlamaReadable(qwen, "m").message(),
      "m is not a model of Hugging Face's Llama family (Llama, Mistral, Qwen2, Qwen3, Qwen3-MoE, "
      "Mixtral): it "
      "has a sliding window with QK norms or biases on q, k and v (Mistral's has neither)");
}

// Nemotron-4: LayerNorm1P with a bias (the weight stored as the offset from 1, as transformers'
// NemotronLayerNorm1P adds the 1 too), a squared-ReLU MLP of up_proj and down_proj, RoPE on half of
// each head. Export writes NemotronForCausalLM's config, which reads back to the same model; the
// other classes refuse it and it refuses theirs; --init-from refuses a Nemotron folder for a
// Llama plan.
TEST(HfLlama, NemotronConfigAndTensors) {
  ModelSpec m = SmallLlamaModel();
  m.rmsnorm = m.swiglu = false;
  m.squared_relu = m.layernorm_1p = true;
  m.rotary_percent = 0.5;
  ASSERT_TRUE(m.Validate().ok()) << m.Validate().ToString();
  EXPECT_EQ(HfLlamaArchOf(m), HfLlamaArch::kNemotron);
  const OrderedJson out = HfLlamaConfigToJson(m);
  EXPECT_EQ(out["architectures"][0], "NemotronForCausalLM");
  EXPECT_EQ(out["model_type"], "nemotron");
  EXPECT_EQ(out["hidden_act"], "relu2");
  EXPECT_EQ(out["partial_rotary_factor"], 0.5);
  EXPECT_TRUE(out.contains("norm_eps"));
  EXPECT_FALSE(out.contains("rms_norm_eps"));
  auto c = HfLlamaConfigFromJson(Json::parse(out.dump()), "cfg.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->model.squared_relu && c->model.layernorm_1p && !c->model.rmsnorm);
  EXPECT_EQ(c->model.rotary_percent, 0.5);
  EXPECT_EQ(c->model.KvHeads(), 2);
  EXPECT_TRUE(CheckHfMatchesModel(*c, m, "cfg.json").ok());
  std::vector<std::string> names;
  for (const auto& s : HfLlamaTensors(m)) {
    if (s.hf.rfind("model.layers.1.", 0) == 0 || s.hf.rfind("model.norm", 0) == 0) {
      names.push_back(s.hf.substr(6));  // after "model."
    }
    if (s.hf == "model.layers.0.mlp.up_proj.weight") {
      EXPECT_EQ(s.layout, HfLayout::kSame);
      EXPECT_EQ(s.hf_shape, (std::vector<int64_t>{10, 24}));
    }
  }
  EXPECT_EQ(names, (std::vector<std::string>{
                       "layers.1.input_layernorm.weight", "layers.1.input_layernorm.bias",
                       "layers.1.self_attn.q_proj.weight", "layers.1.self_attn.k_proj.weight",
                       "layers.1.self_attn.v_proj.weight", "layers.1.self_attn.o_proj.weight",
                       "layers.1.post_attention_layernorm.weight",
                       "layers.1.post_attention_layernorm.bias", "layers.1.mlp.up_proj.weight",
                       "layers.1.mlp.down_proj.weight", "norm.weight", "norm.bias"}));
  EXPECT_TRUE(CheckHfLlamaExportable(m, HfLlamaArch::kNemotron, "m").ok());
  EXPECT_EQ(CheckHfLlamaExportable(m, HfLlamaArch::kLlama, "m").message(),
            "m is not a model that Hugging Face's LlamaForCausalLM computes: it has Nemotron's "
            "squared-ReLU MLP and LayerNorm1P (--to hf-nemotron writes it)");
  EXPECT_EQ(CheckHfLlamaExportable(SmallLlamaModel(), HfLlamaArch::kNemotron, "m").message(),
            "m is not a model that Hugging Face's NemotronForCausalLM computes: it has SwiGLU and "
            "RMSNorm, not squared ReLU and LayerNorm1P (--to hf-llama writes it)");
  ModelSpec half = m;
  half.swiglu = true;  // squared ReLU and SwiGLU at once: no class of the family
  EXPECT_NE(CheckHfLlamaReadable(half, "m").message().find("it needs squared_relu, layernorm_1p"),
            std::string::npos);
  EXPECT_EQ(CheckHfMatchesModel(*c, SmallLlamaModel(), "cfg.json").message(),
            "cfg.json: partial_rotary_factor is 0.5, the plan's model.rotary_percent is 1");
  ModelSpec whole = m;
  whole.rotary_percent = 1;
  auto w = HfLlamaConfigFromJson(Json::parse(HfLlamaConfigToJson(whole).dump()), "cfg.json");
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  ModelSpec llama = SmallLlamaModel();
  EXPECT_EQ(CheckHfMatchesModel(*w, llama, "cfg.json").message(),
            "cfg.json: the folder's model is NemotronForCausalLM's, the plan's LlamaForCausalLM's");
}

// Llama 3.1's RoPE scaling: read from rope_scaling (transformers 4's form) and from
// rope_parameters (transformers 5's), written back by export, and compared with a plan's.
TEST(HfLlama, Llama31RopeScalingReadAndWritten) {
  const Json scaling = {{"rope_type", "llama3"},
                        {"factor", 8.0},
                        {"low_freq_factor", 1.0},
                        {"high_freq_factor", 4.0},
                        {"original_max_position_embeddings", 8192}};
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    Json j = Json::parse(HfLlamaConfigToJson(SmallLlamaModel()).dump());
    j[key] = scaling;
    if (std::string(key) == "rope_parameters") j["rope_parameters"]["rope_theta"] = 500000.0;
    auto c = HfLlamaConfigFromJson(j, "cfg.json");
    ASSERT_TRUE(c.ok()) << key << ": " << c.status().ToString();
    EXPECT_EQ(c->model.rope_scaling_factor, 8) << key;
    EXPECT_EQ(c->model.rope_low_freq_factor, 1) << key;
    EXPECT_EQ(c->model.rope_high_freq_factor, 4) << key;
    EXPECT_EQ(c->model.rope_original_max_positions, 8192) << key;
    const OrderedJson out = HfLlamaConfigToJson(c->model);
    EXPECT_EQ(out["rope_scaling"]["rope_type"], "llama3");
    auto back = HfLlamaConfigFromJson(Json::parse(out.dump()), "again");
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(back->model.rope_scaling_factor, 8);
    EXPECT_EQ(back->model.rope_original_max_positions, 8192);
  }
}

// YaRN: DeepSeek-V3's rope_scaling (the legacy "type" key, both mscales) and Qwen's (no mscale
// keys: cos and sin times 0.1 ln f + 1, which ptdp holds as mscale 1 beside mscale_all_dim 0),
// written back and read again; what ptdp's fields cannot hold is refused by name.
TEST(HfLlama, YarnRopeScalingReadWrittenAndRefused) {
  auto read = [](const Json& scaling) {
    Json j = Json::parse(HfLlamaConfigToJson(SmallLlamaModel()).dump());
    j["rope_scaling"] = scaling;
    auto c = HfLlamaConfigFromJson(j, "cfg.json");
    return c.ok() ? Result<ModelSpec>(c->model) : Result<ModelSpec>(c.status());
  };
  const Json v3 = {{"type", "yarn"},
                   {"factor", 40},
                   {"beta_fast", 32},
                   {"beta_slow", 1},
                   {"mscale", 1.0},
                   {"mscale_all_dim", 1.0},
                   {"original_max_position_embeddings", 4096}};
  auto m = read(v3);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_TRUE(m->RopeYarn());
  EXPECT_EQ(m->rope_scaling_factor, 40);
  EXPECT_EQ(m->rope_original_max_positions, 4096);
  EXPECT_EQ(m->rope_yarn_mscale_all_dim, 1);
  EXPECT_EQ(m->RopeAttentionFactor(), 1);
  auto back = HfLlamaConfigFromJson(Json::parse(HfLlamaConfigToJson(*m).dump()), "again");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->model.SameRopeScaling(*m)) << back->model.RopeScalingText();
  Json qwen = {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32}};
  m = read(qwen);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->rope_yarn_mscale, 1);
  EXPECT_EQ(m->rope_yarn_mscale_all_dim, 0);
  EXPECT_EQ(m->rope_yarn_beta_fast, 32);
  EXPECT_DOUBLE_EQ(m->RopeAttentionFactor(), 0.1 * std::log(4.0) + 1);
  // A null factor is the positions' ratio to the original length (8 / 2 here).
  qwen["factor"] = nullptr;
  qwen["original_max_position_embeddings"] = 2;
  EXPECT_EQ(read(qwen)->rope_scaling_factor, 4);
  qwen["attention_factor"] = 0.1 * std::log(4.0) + 1;  // the one ptdp computes: read
  EXPECT_TRUE(read(qwen).ok());
  qwen["attention_factor"] = 1.5;
  EXPECT_EQ(read(qwen).status().message(),
            "cfg.json.rope_scaling.attention_factor: 1.5 is not the concentration of its mscales "
            "(1.13863), which ptdp computes");
  Json edited = v3;
  edited["truncate"] = false;
  EXPECT_EQ(read(edited).status().message(),
            "cfg.json.rope_scaling.truncate: false: only the ramp's rounded ends (true) are read");
  edited = v3;
  edited.erase("mscale");
  EXPECT_EQ(read(edited).status().message(),
            "cfg.json.rope_scaling.mscale: absent beside mscale_all_dim: ptdp's concentration is "
            "Megatron-Core's ratio of the two");
  // mscale alone is Megatron-Core's concentration but not transformers': not exported.
  ModelSpec lone = *read(v3);
  lone.rope_yarn_mscale = 0.9;
  lone.rope_yarn_mscale_all_dim = 0;
  EXPECT_EQ(CheckHfLlamaReadable(lone, "the model").message(),
            "the model: its YaRN concentration (rope_yarn_mscale 0.9 without "
            "rope_yarn_mscale_all_dim) is not one transformers computes");
}

// Mixtures of experts: Qwen3-MoE's folder (QK norms; the router as mlp.gate, per-expert
// projections, the leading dense layers as mlp_only_layers) and Mixtral's (no QK norms, a mixture
// on every layer, block_sparse_moe's w1, w3, w2); each config reads back to the same mixture, a
// Qwen3-MoE folder without norm_topk_prob refused, and the mixtures that neither class computes
// refused by name (`make hf-check` 17 and 18 compare their logits with transformers').
TEST(HfLlama, MixturesAreQwen3MoeOrMixtral) {
  ModelSpec qwen = SmallLlamaModel();
  qwen.layers = 3;
  qwen.qk_norm = true;
  qwen.moe_experts = 4;
  qwen.moe_topk = 2;
  qwen.moe_ffn_hidden = 6;
  qwen.moe_dense_layers = 1;
  ASSERT_TRUE(qwen.Validate("m").ok()) << qwen.Validate("m").ToString();
  EXPECT_EQ(HfLlamaArchOf(qwen), HfLlamaArch::kQwen3Moe);
  ModelSpec mixtral = SmallLlamaModel();
  mixtral.moe_experts = 4;
  mixtral.moe_topk = 2;
  EXPECT_EQ(HfLlamaArchOf(mixtral), HfLlamaArch::kMixtral);
  auto names = [](const ModelSpec& m) {
    std::vector<std::string> out;
    for (const HfTensorSpec& t : HfLlamaTensors(m)) out.push_back(t.ptdp + "=" + t.hf);
    return out;
  };
  const std::vector<std::string> q = names(qwen), x = names(mixtral);
  auto has = [](const std::vector<std::string>& v, const std::string& s) {
    return std::find(v.begin(), v.end(), s) != v.end();
  };
  EXPECT_TRUE(has(q, "layer0.mlp.fc1.weight=model.layers.0.mlp.gate_proj.weight"));
  EXPECT_TRUE(has(q, "layer1.moe.router.weight=model.layers.1.mlp.gate.weight"));
  EXPECT_TRUE(has(q, "layer2.moe.expert3.fc1.weight=model.layers.2.mlp.experts.3.up_proj.weight"));
  EXPECT_TRUE(has(x, "layer0.moe.router.weight=model.layers.0.block_sparse_moe.gate.weight"));
  EXPECT_TRUE(
      has(x, "layer1.moe.expert2.fc2.weight=model.layers.1.block_sparse_moe.experts.2.w2.weight"));
  // The embedding; per layer its two norms, q, k, v, o and the QK norms (8); the dense layer's
  // gate, up and down (3); each mixture's router and 4 experts of 3 (13); the final norm, lm_head.
  EXPECT_EQ(q.size(), size_t(1 + 3 * 8 + 3 + 2 * 13 + 1 + 1));
  for (const ModelSpec& m : {qwen, mixtral}) {
    Json j = Json::parse(HfLlamaConfigToJson(m).dump());
    auto c = HfLlamaConfigFromJson(j, "cfg.json");
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->model.moe_experts, 4);
    EXPECT_EQ(c->model.moe_topk, 2);
    EXPECT_EQ(c->model.MoeFfnHidden(), m.MoeFfnHidden());
    EXPECT_EQ(c->model.moe_dense_layers, m.moe_dense_layers);
    EXPECT_TRUE(CheckHfMatchesModel(*c, m, "cfg.json").ok());
  }
  Json j = Json::parse(HfLlamaConfigToJson(qwen).dump());
  // Without norm_topk_prob (transformers' default false) the router is pre-softmax: read so, and
  // refused against a plan whose router renormalises.
  j.erase("norm_topk_prob");
  auto pre = HfLlamaConfigFromJson(j, "cfg.json");
  ASSERT_TRUE(pre.ok()) << pre.status().ToString();
  EXPECT_TRUE(pre->model.moe_router_pre_softmax);
  EXPECT_EQ(CheckHfMatchesModel(*pre, qwen, "cfg.json").message(),
            "cfg.json: norm_topk_prob is false, the plan's model has moe_router_pre_softmax false");
  ModelSpec dense_mixtral = mixtral;
  dense_mixtral.layers = 3;
  dense_mixtral.moe_dense_layers = 1;
  EXPECT_NE(CheckHfLlamaExportable(dense_mixtral, HfLlamaArch::kMixtral, "m")
                .message()
                .find("its mixture is not Mixtral's (dense layers, a sliding window, or "
                      "pre-softmax routing)"),
            std::string::npos);
  EXPECT_NE(
      CheckHfLlamaExportable(qwen, HfLlamaArch::kMixtral, "m").message().find("it has QK norms"),
      std::string::npos);
  EXPECT_NE(CheckHfLlamaExportable(mixtral, HfLlamaArch::kLlama, "m")
                .message()
                .find("it has a mixture of experts (--to hf-mixtral writes it)"),
            std::string::npos);
}

// Qwen2-MoE's folder: Qwen2's bias on q, k and v, the mixture after its mlp_only_layers, and the
// shared expert beside it (mlp.shared_expert's projections and its sigmoid gate
// mlp.shared_expert_gate [1, h]); its config reads back to the same model, and a shared expert
// without the gate or the bias is no class's (`make hf-check` 20 compares the logits).
TEST(HfLlama, Qwen2MoeHasTheGatedSharedExpert) {
  ModelSpec m = SmallLlamaModel();
  m.layers = 3;
  m.qkv_bias = true;
  m.moe_experts = 4;
  m.moe_topk = 2;
  m.moe_ffn_hidden = 6;
  m.moe_dense_layers = 1;
  m.moe_shared_ffn_hidden = 10;
  m.moe_shared_gate = true;
  m.moe_router_pre_softmax = true;
  ASSERT_TRUE(m.Validate("m").ok()) << m.Validate("m").ToString();
  EXPECT_EQ(HfLlamaArchOf(m), HfLlamaArch::kQwen2Moe);
  EXPECT_STREQ(HfLlamaFormatName(HfLlamaArch::kQwen2Moe), "hf-qwen2-moe");
  EXPECT_TRUE(CheckHfLlamaExportable(m, HfLlamaArch::kQwen2Moe, "m").ok());
  std::vector<std::string> names;
  for (const HfTensorSpec& t : HfLlamaTensors(m)) names.push_back(t.ptdp + "=" + t.hf);
  auto has = [&](const std::string& s) {
    return std::find(names.begin(), names.end(), s) != names.end();
  };
  EXPECT_TRUE(
      has("layer1.moe.shared.fc1.weight=model.layers.1.mlp.shared_expert.gate_proj.weight"));
  EXPECT_TRUE(
      has("layer2.moe.shared.fc2.weight=model.layers.2.mlp.shared_expert.down_proj.weight"));
  EXPECT_TRUE(has("layer2.moe.shared.gate.weight=model.layers.2.mlp.shared_expert_gate.weight"));
  EXPECT_TRUE(has("layer1.moe.expert0.fc1.weight=model.layers.1.mlp.experts.0.gate_proj.weight"));
  EXPECT_TRUE(has("layer0.attn.qkv.bias=model.layers.0.self_attn.v_proj.bias"));
  // Per layer its two norms, q, k, v, o and their three biases (9); the dense layer's gate, up
  // and down (3); each mixture's router, 4 experts of 3 and the shared expert's 4 (17).
  EXPECT_EQ(names.size(), size_t(1 + 3 * 9 + 3 + 2 * 17 + 1 + 1));
  const OrderedJson config = HfLlamaConfigToJson(m);
  EXPECT_EQ(config["model_type"], "qwen2_moe");
  EXPECT_EQ(config["shared_expert_intermediate_size"], 10);
  auto back = HfLlamaConfigFromJson(Json::parse(config.dump()), "cfg.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->model.moe_shared_gate);
  EXPECT_EQ(back->model.moe_shared_ffn_hidden, 10);
  EXPECT_TRUE(back->model.qkv_bias);
  EXPECT_TRUE(CheckHfMatchesModel(*back, m, "cfg.json").ok())
      << CheckHfMatchesModel(*back, m, "cfg.json").ToString();
  ModelSpec ungated = m;
  ungated.moe_shared_gate = false;
  EXPECT_NE(CheckHfLlamaExportable(ungated, HfLlamaArch::kQwen2Moe, "m")
                .message()
                .find("its shared expert is not Qwen2-MoE's"),
            std::string::npos);
  ModelSpec mixtral = m;
  mixtral.moe_shared_ffn_hidden = 0;
  mixtral.moe_shared_gate = false;
  mixtral.qkv_bias = false;
  EXPECT_NE(CheckHfLlamaExportable(mixtral, HfLlamaArch::kQwen2Moe, "m")
                .message()
                .find("it has no shared expert"),
            std::string::npos);
}

}  // namespace
}  // namespace ptdp::runtime
