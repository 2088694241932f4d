// GLM-4.5's Hugging Face folders (Glm4MoeForCausalLM, runtime/checkpoint/hf_llama.h): its tensors,
// config and refusals, and its prediction depths (split from hf_llama_test.cc).
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "runtime/checkpoint/hf_llama.h"
#include "runtime/checkpoint/param_io.h"
#include "runtime/checkpoint/safetensors.h"
#include "tests/runtime/hf_test_models.h"

namespace ptdp::runtime {
namespace {

// hf_test::SmallLlamaModel's layers with GLM-4.5's parts: q, k, v biases, RoPE on half of each
// head, one dense layer, then 4 experts of 6 (top 2) beside a shared expert of two experts' width,
// DeepSeek-V3's router in 2 groups.
ModelSpec SmallGlmModel() {
  ModelSpec m = hf_test::SmallLlamaModel();
  m.name = "small-glm";
  m.layers = 3;
  m.qkv_bias = true;
  m.rotary_percent = 0.5;
  m.moe_experts = 4;
  m.moe_topk = 2;
  m.moe_ffn_hidden = 6;
  m.moe_dense_layers = 1;
  m.moe_shared_ffn_hidden = 12;  // two experts' width: n_shared_experts 2
  m.moe_router_groups = 2;       // each group scored by its 2 best, as HF scores them
  m.moe_router_group_topk = 1;
  m.moe_router_sigmoid = m.moe_router_expert_bias = true;
  m.moe_router_topk_scale = 2.5;
  return m;
}

// GLM-4.5's folder (Glm4MoeForCausalLM): DeepSeek-V3's router on Llama's layers with partial RoPE
// and q, k, v biases: the router's e_score_correction_bias (the expert bias, from RouterBiases,
// fp32) beside gate.weight, mlp.shared_experts' ungated projections; its config reads back to the
// same model (`make hf-check` 21 compares the logits with transformers').
TEST(HfLlama, Glm4MoeHasTheExpertBiasAndSharedExperts) {
  const ModelSpec m = SmallGlmModel();
  ASSERT_TRUE(m.Validate("m").ok()) << m.Validate("m").ToString();
  EXPECT_EQ(HfLlamaArchOf(m), HfLlamaArch::kGlm4Moe);
  EXPECT_STREQ(HfLlamaFormatName(HfLlamaArch::kGlm4Moe), "hf-glm4-moe");
  EXPECT_TRUE(CheckHfLlamaExportable(m, HfLlamaArch::kGlm4Moe, "m").ok())
      << CheckHfLlamaExportable(m, HfLlamaArch::kGlm4Moe, "m").ToString();
  std::vector<std::string> names;
  for (const HfTensorSpec& t : HfLlamaTensors(m)) {
    names.push_back(t.ptdp + "=" + t.hf);
    EXPECT_EQ(t.layout == HfLayout::kExpertBias, ExpertBiasLayer(t.ptdp) >= 0) << t.ptdp;
  }
  auto has = [&](const std::string& s) {
    return std::find(names.begin(), names.end(), s) != names.end();
  };
  EXPECT_TRUE(has("layer1.moe.router.expert_bias=model.layers.1.mlp.gate.e_score_correction_bias"));
  EXPECT_TRUE(has("layer2.moe.shared.fc1.weight=model.layers.2.mlp.shared_experts.up_proj.weight"));
  EXPECT_TRUE(has("layer1.moe.expert3.fc2.weight=model.layers.1.mlp.experts.3.down_proj.weight"));
  // Per layer 9 as Qwen2-MoE's; the dense layer's 3; each mixture's router, its bias, 4 experts
  // of 3 and the shared expert's 3 (17).
  EXPECT_EQ(names.size(), size_t(1 + 3 * 9 + 3 + 2 * 17 + 1 + 1));
  EXPECT_EQ(ExpertBiasLayer("layer12.moe.router.expert_bias"), 12);
  EXPECT_EQ(ExpertBiasLayer("layer1.moe.router.weight"), -1);
  EXPECT_EQ(ExpertBiasLayer("layerx.moe.router.expert_bias"), -1);
  const OrderedJson config = HfLlamaConfigToJson(m);
  EXPECT_EQ(config["model_type"], "glm4_moe");
  EXPECT_EQ(config["n_shared_experts"], 2);
  EXPECT_EQ(config["routed_scaling_factor"], 2.5);
  EXPECT_EQ(config["partial_rotary_factor"], 0.5);
  EXPECT_EQ(config["attention_bias"], true);
  auto back = HfLlamaConfigFromJson(Json::parse(config.dump()), "cfg.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->model.moe_router_sigmoid && back->model.moe_router_expert_bias);
  EXPECT_EQ(back->model.moe_router_topk_scale, 2.5);
  EXPECT_EQ(back->model.moe_router_groups, 2);
  EXPECT_EQ(back->model.rotary_percent, 0.5);
  EXPECT_EQ(back->model.mtp_layers, 0);
  EXPECT_TRUE(CheckHfMatchesModel(*back, m, "cfg.json").ok())
      << CheckHfMatchesModel(*back, m, "cfg.json").ToString();
  // What GLM-4.5's class does not compute, refused by name.
  ModelSpec four_groups = m;
  four_groups.moe_router_groups = 4;
  four_groups.moe_router_group_topk = 2;  // Megatron-Core scores each group by its best 1
  EXPECT_NE(CheckHfLlamaExportable(four_groups, HfLlamaArch::kGlm4Moe, "m")
                .message()
                .find("HF's by their 2 best"),
            std::string::npos);
  ModelSpec odd = m;
  odd.moe_shared_ffn_hidden = 7;
  EXPECT_NE(
      CheckHfLlamaExportable(odd, HfLlamaArch::kGlm4Moe, "m").message().find("n_shared_experts"),
      std::string::npos);
  ModelSpec qwen = m;
  qwen.moe_router_sigmoid = qwen.moe_router_expert_bias = false;
  qwen.moe_router_topk_scale = 1;
  EXPECT_NE(CheckHfLlamaExportable(qwen, HfLlamaArch::kGlm4Moe, "m")
                .message()
                .find("its router has softmax scores"),
            std::string::npos)
      << CheckHfLlamaExportable(qwen, HfLlamaArch::kGlm4Moe, "m").ToString();
}

// GLM-4.5's prediction depth: the layer after the model's (model.layers.3 here, 92 in GLM-4.5,
// the layers transformers skips) with its own tensors beside a mixture layer's, and the config's
// num_nextn_predict_layers. A folder may also hold the depth's copies of the embedding and the
// output matrix (DeepSeek-V3's do): read past; any other stray tensor is refused.
TEST(HfLlama, Glm4MoePredictionDepthIsTheLayerAfterTheModels) {
  ModelSpec m = SmallGlmModel();
  m.mtp_layers = 1;
  ASSERT_TRUE(CheckHfLlamaExportable(m, HfLlamaArch::kGlm4Moe, "m").ok())
      << CheckHfLlamaExportable(m, HfLlamaArch::kGlm4Moe, "m").ToString();
  std::vector<std::string> names;
  for (const HfTensorSpec& t : HfLlamaTensors(m)) names.push_back(t.ptdp + "=" + t.hf);
  auto has = [&](const std::string& s) {
    return std::find(names.begin(), names.end(), s) != names.end();
  };
  EXPECT_TRUE(has("mtp0.eh_proj.weight=model.layers.3.eh_proj.weight"));
  EXPECT_TRUE(has("mtp0.enorm.weight=model.layers.3.enorm.weight"));
  EXPECT_TRUE(has("mtp0.hnorm.weight=model.layers.3.hnorm.weight"));
  EXPECT_TRUE(has("mtp0.final_norm.weight=model.layers.3.shared_head.norm.weight"));
  EXPECT_TRUE(has("mtp0.moe.expert2.fc1.weight=model.layers.3.mlp.experts.2.gate_proj.weight"));
  EXPECT_TRUE(has("layer3.moe.router.expert_bias=model.layers.3.mlp.gate.e_score_correction_bias"));
  // The model's 67 (Glm4MoeHasTheExpertBiasAndSharedExperts), the depth's mixture layer's 9 + 17
  // and its 4.
  EXPECT_EQ(names.size(), size_t(1 + 3 * 9 + 3 + 2 * 17 + 1 + 1 + 26 + 4));
  const OrderedJson config = HfLlamaConfigToJson(m);
  EXPECT_EQ(config["num_nextn_predict_layers"], 1);
  auto back = HfLlamaConfigFromJson(Json::parse(config.dump()), "cfg.json");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->model.mtp_layers, 1);
  auto match = [&](const std::function<void(std::vector<StTensor>&)>& edit) {
    return hf_test::MatchEditedHeader(m, edit);
  };

  EXPECT_EQ(match([](auto&) {}), "ok");
  EXPECT_EQ(match([](auto& t) {
              t.push_back({"model.layers.3.embed_tokens.weight", "F32", {13, 24}});
              t.push_back({"model.layers.3.shared_head.head.weight", "F32", {13, 24}});
            }),
            "ok");
  EXPECT_EQ(match([](auto& t) {
              t.push_back({"model.layers.2.shared_head.head.weight", "F32", {13, 24}});
            }),
            "m.st: tensor 'model.layers.2.shared_head.head.weight' is not a parameter of the Llama "
            "model config.json describes");
  EXPECT_EQ(match([](auto& t) {
              t.erase(std::find_if(t.begin(), t.end(), [](const StTensor& x) {
                return x.name == "model.layers.3.eh_proj.weight";
              }));
            }),
            "m.st: missing tensor 'model.layers.3.eh_proj.weight'");
}

}  // namespace
}  // namespace ptdp::runtime
