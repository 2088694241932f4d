// DeepSeek-V3's Hugging Face folders (DeepseekV3ForCausalLM, runtime/checkpoint/hf_deepseek.h):
// multi-latent attention's tensors and config keys, the config read back, and what is refused
// (`make hf-check` 22 compares the logits with transformers').
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/hf_config.h"
#include "runtime/checkpoint/hf_llama.h"
#include "tests/runtime/hf_test_models.h"

namespace ptdp::runtime {
namespace {

// hf_test::SmallLlamaModel's widths with DeepSeek-V3's attention (6 heads of 4 + 2 query/key and
// 3 value features, latents of 5 and 7, normed) and router (4 experts of 6, top 2 from the better
// of 2 groups, a shared expert of one expert's width), one prediction depth.
ModelSpec SmallDeepseekModel() {
  ModelSpec m = hf_test::SmallLlamaModel();
  m.name = "small-deepseek";
  m.layers = 3;
  m.kv_heads = 0;
  m.head_dim = 4;
  m.mla_q_lora = 5;
  m.mla_kv_lora = 7;
  m.mla_rope_dim = 2;
  m.mla_v_dim = 3;
  m.qk_norm = true;
  m.moe_experts = 4;
  m.moe_topk = 2;
  m.moe_ffn_hidden = 6;
  m.moe_dense_layers = 1;
  m.moe_shared_ffn_hidden = 6;
  m.moe_router_groups = 2;
  m.moe_router_group_topk = 1;
  m.moe_router_sigmoid = m.moe_router_expert_bias = true;
  m.moe_router_topk_scale = 2.5;
  m.mtp_layers = 1;
  m.norm_eps = 1e-6;  // transformers' latent norms' epsilon, whatever rms_norm_eps says
  return m;
}

TEST(HfDeepseek, LatentAttentionTensorsAndConfigReadBack) {
  const ModelSpec m = SmallDeepseekModel();
  ASSERT_TRUE(m.Validate("m").ok()) << m.Validate("m").ToString();
  EXPECT_EQ(HfLlamaArchOf(m), HfLlamaArch::kDeepseekV3);
  EXPECT_STREQ(HfLlamaFormatName(HfLlamaArch::kDeepseekV3), "hf-deepseek-v3");
  EXPECT_STREQ(HfLlamaArchName(HfLlamaArch::kDeepseekV3), "DeepseekV3ForCausalLM");
  ASSERT_TRUE(CheckHfLlamaExportable(m, HfLlamaArch::kDeepseekV3, "m").ok())
      << CheckHfLlamaExportable(m, HfLlamaArch::kDeepseekV3, "m").ToString();
  std::vector<std::string> names;
  for (const HfTensorSpec& t : HfLlamaTensors(m)) {
    std::string shape;
    for (int64_t d : t.hf_shape) shape += "x" + std::to_string(d);
    names.push_back(t.ptdp + "=" + t.hf + shape);
  }
  auto has = [&](const std::string& s) {
    return std::find(names.begin(), names.end(), s) != names.end();
  };
  // h 24, 6 heads: q_b_proj 6 x (4 + 2) rows, kv_b_proj 6 x (4 + 3), o_proj from 6 x 3.
  EXPECT_TRUE(has("layer0.attn.q_down.weight=model.layers.0.self_attn.q_a_proj.weightx5x24"));
  EXPECT_TRUE(has("layer0.attn.q_norm.weight=model.layers.0.self_attn.q_a_layernorm.weightx5"));
  EXPECT_TRUE(has("layer0.attn.q_up.weight=model.layers.0.self_attn.q_b_proj.weightx36x5"));
  EXPECT_TRUE(
      has("layer2.attn.kv_down.weight=model.layers.2.self_attn.kv_a_proj_with_mqa.weightx9x24"));
  EXPECT_TRUE(has("layer2.attn.kv_norm.weight=model.layers.2.self_attn.kv_a_layernorm.weightx7"));
  EXPECT_TRUE(has("layer1.attn.kv_up.weight=model.layers.1.self_attn.kv_b_proj.weightx42x7"));
  EXPECT_TRUE(has("layer1.attn.proj.weight=model.layers.1.self_attn.o_proj.weightx24x18"));
  // The prediction depth is model.layers.3, with its own latent attention and expert bias.
  EXPECT_TRUE(has("mtp0.attn.kv_up.weight=model.layers.3.self_attn.kv_b_proj.weightx42x7"));
  EXPECT_TRUE(
      has("layer3.moe.router.expert_bias=model.layers.3.mlp.gate.e_score_correction_biasx4"));
  for (const std::string& n : names) EXPECT_EQ(n.find("q_proj"), std::string::npos) << n;
  EXPECT_EQ(hf_test::MatchEditedHeader(m, [](std::vector<StTensor>&) {}), "ok");

  const OrderedJson config = HfLlamaConfigToJson(m);
  EXPECT_EQ(config["model_type"], "deepseek_v3");
  EXPECT_EQ(config["rope_interleave"], true);  // DeepSeek's rows (kRopeInterleaved)
  EXPECT_EQ(config["qk_nope_head_dim"], 4);
  EXPECT_EQ(config["qk_rope_head_dim"], 2);
  EXPECT_EQ(config["v_head_dim"], 3);
  EXPECT_EQ(config["q_lora_rank"], 5);
  EXPECT_FALSE(config.contains("head_dim"));  // DeepseekV3Config's is the rotated width
  const Json j = Json::parse(config.dump());
  auto back = HfLlamaConfigFromJson(j, "config.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  const ModelSpec& r = back->model;
  EXPECT_TRUE(r.IsMla() && r.qk_norm && r.moe_router_sigmoid && r.moe_router_expert_bias);
  EXPECT_EQ(r.mla_q_lora, 5);
  EXPECT_EQ(r.mla_kv_lora, 7);
  EXPECT_EQ(r.HeadDim(), 4);
  EXPECT_EQ(r.mla_rope_dim, 2);
  EXPECT_EQ(r.mla_v_dim, 3);
  EXPECT_EQ(r.moe_shared_ffn_hidden, 6);
  EXPECT_EQ(r.mtp_layers, 1);
  EXPECT_EQ(HfLlamaTensors(r).size(), HfLlamaTensors(m).size());
}

// Without a query latent: q_proj; a query without latent has no q_a_layernorm either.
TEST(HfDeepseek, QueriesWithoutLatentAreQProj) {
  ModelSpec m = SmallDeepseekModel();
  m.mla_q_lora = 0;
  ASSERT_TRUE(m.Validate("m").ok()) << m.Validate("m").ToString();
  int q_proj = 0, q_a = 0;
  for (const HfTensorSpec& t : HfLlamaTensors(m)) {
    if (t.hf == "model.layers.0.self_attn.q_proj.weight") {
      ++q_proj;
      EXPECT_EQ(t.ptdp, "layer0.attn.q.weight");
      EXPECT_EQ(t.hf_shape, (std::vector<int64_t>{36, 24}));
    }
    if (t.hf.find("q_a_") != std::string::npos) ++q_a;
  }
  EXPECT_EQ(q_proj, 1);
  EXPECT_EQ(q_a, 0);
  EXPECT_TRUE(HfLlamaConfigToJson(m)["q_lora_rank"].is_null());
}

// The rotated rows: ptdp's halves x0 x1 | y0 y1 are HF's x0 y0 x1 y1, in each head of q_b_proj and
// at the end of kv_a_proj_with_mqa; the other rows stay; reading undoes writing.
TEST(HfDeepseek, RotatedRowsAreInterleavedBothWays) {
  const ModelSpec m = SmallDeepseekModel();  // 6 heads of 4 + 2; rope 2 would pair trivially
  ModelSpec w = m;
  w.head_dim = 2;
  w.mla_rope_dim = 4;  // heads of 2 + 4: rows x0 x1 y0 y1 after 2 unrotated ones
  w.mla_v_dim = 2;
  ASSERT_TRUE(w.Validate("w").ok()) << w.Validate("w").ToString();
  for (const HfTensorSpec& s : HfLlamaTensors(w)) {
    if (s.hf != "model.layers.0.self_attn.q_b_proj.weight" &&
        s.hf != "model.layers.0.self_attn.kv_a_proj_with_mqa.weight") {
      continue;
    }
    ASSERT_EQ(s.layout, HfLayout::kRopeInterleaved);
    const int64_t rows = s.hf_shape[0], cols = s.hf_shape[1];
    std::vector<float> rt(size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) rt[size_t(r * cols + c)] = float(r);  // row r holds r
    }
    const std::vector<float> hf = RuntimeToHf(s, w.heads, rt);
    std::vector<int64_t> order;
    for (int64_t r = 0; r < rows; ++r) order.push_back(int64_t(hf[size_t(r * cols)]));
    const int64_t unit = s.hf == "model.layers.0.self_attn.q_b_proj.weight" ? 6 : rows;
    for (int64_t u = 0; u < rows / unit; ++u) {
      const int64_t b = u * unit + unit - 4;  // the 4 rotated rows of unit u
      EXPECT_EQ(std::vector<int64_t>(order.begin() + u * unit, order.begin() + b),
                [&] {
                  std::vector<int64_t> same;
                  for (int64_t r = u * unit; r < b; ++r) same.push_back(r);
                  return same;
                }())
          << s.hf << " unit " << u;
      EXPECT_EQ(std::vector<int64_t>(order.begin() + b, order.begin() + b + 4),
                (std::vector<int64_t>{b, b + 2, b + 1, b + 3}))
          << s.hf << " unit " << u;
    }
    EXPECT_EQ(HfToRuntime(s, w.heads, hf), rt) << s.hf;
  }
}

TEST(HfDeepseek, RefusesWhatDeepseekV3DoesNotCompute) {
  const ModelSpec m = SmallDeepseekModel();
  // A folder whose rotated rows are in halves (rope_interleave false): refused by name; absent
  // reads as transformers' default, true.
  Json j = Json::parse(HfLlamaConfigToJson(m).dump());
  j["rope_interleave"] = false;
  auto r = HfLlamaConfigFromJson(j, "config.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("config.json: rope_interleave: false: only DeepSeek's "
                                      "interleaved rotated rows are read"),
            std::string::npos)
      << r.status().message();
  j.erase("rope_interleave");
  EXPECT_TRUE(HfLlamaConfigFromJson(j, "config.json").ok());
  // A latent-attention model without DeepSeek-V3's mixture, and one without latent norms.
  ModelSpec dense = m;
  dense.moe_experts = dense.moe_topk = 0;
  dense.moe_ffn_hidden = dense.moe_shared_ffn_hidden = 0;
  dense.moe_dense_layers = dense.moe_router_groups = dense.moe_router_group_topk = 0;
  dense.moe_router_sigmoid = dense.moe_router_expert_bias = false;
  dense.moe_router_topk_scale = 1;
  ASSERT_TRUE(dense.Validate("m").ok()) << dense.Validate("m").ToString();
  auto st = CheckHfLlamaExportable(dense, HfLlamaArch::kDeepseekV3, "m");
  EXPECT_NE(st.message().find("no mixture of experts with sigmoid scores"), std::string::npos)
      << st.message();
  ModelSpec eps = m;
  eps.norm_eps = 1e-5;
  st = CheckHfLlamaExportable(eps, HfLlamaArch::kDeepseekV3, "m");
  EXPECT_NE(st.message().find("transformers norms the latents with 1e-6"), std::string::npos)
      << st.message();
  ModelSpec unnormed = m;
  unnormed.qk_norm = false;
  st = CheckHfLlamaExportable(unnormed, HfLlamaArch::kDeepseekV3, "m");
  EXPECT_NE(st.message().find("its latents are not normed"), std::string::npos) << st.message();
  // Asked for another family: named.
  st = CheckHfLlamaExportable(m, HfLlamaArch::kGlm4Moe, "m");
  EXPECT_NE(st.message().find("it has multi-latent attention (--to hf-deepseek-v3 writes it)"),
            std::string::npos)
      << st.message();
}

}  // namespace
}  // namespace ptdp::runtime
