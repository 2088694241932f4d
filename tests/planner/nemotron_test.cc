// Nemotron-4 (squared-ReLU MLP, RoPE on half of each head): the model's fields, what the runtime
// refuses, its FLOPs, and the flags `--emit megatron` writes for it.
#include <gtest/gtest.h>

#include <string>

#include "core/cluster.h"
#include "core/json.h"
#include "core/ledger.h"
#include "core/model.h"
#include "planner/fix.h"
#include "planner/report.h"
#include "planner/search.h"

namespace ptdp::planner {
namespace {

// Every part of Nemotron-4's layer runs in the runtime since 2026-11-30 (squared ReLU, partial
// RoPE, LayerNorm1P).
TEST(Nemotron, PresetFieldsAndWhatTheRuntimeRefuses) {
  const ModelSpec m = *LoadModel("nemotron4-15b");
  EXPECT_TRUE(m.squared_relu && m.rotary && m.layernorm_1p && !m.swiglu && !m.rmsnorm &&
              !m.linear_bias);
  EXPECT_EQ(m.rotary_percent, 0.5);
  EXPECT_EQ(m.KvHeads(), 8);
  EXPECT_EQ(m.FfnHidden(), 4 * 6144);
  EXPECT_EQ(m.vocab, 256000);
  EXPECT_FALSE(m.IsGpt());
}

// Squared ReLU has GeLU's shapes: the same FLOPs.
TEST(Nemotron, SquaredReluHasTheGeluMlpsFlops) {
  const ModelSpec m = *LoadModel("nemotron4-340b");
  ModelSpec gelu = m;
  gelu.squared_relu = false;
  ParallelConfig c;
  c.global_batch = 32;
  EXPECT_EQ(ModelIterationFlops(m, c), ModelIterationFlops(gelu, c));
  EXPECT_GT(ModelIterationFlops(m, c), 0);
}

TEST(Nemotron, BadFieldsAreNamed) {
  ModelSpec m = *LoadModel("nemotron4-15b");
  m.swiglu = true;
  const Status both = m.Validate("model");
  EXPECT_NE(both.message().find("model.squared_relu: replaces the GeLU"), std::string::npos)
      << both.ToString();
  m = *LoadModel("nemotron4-15b");
  m.rotary_percent = 0;
  EXPECT_NE(m.Validate("model").message().find("model.rotary_percent: 0 is outside (0, 1]"),
            std::string::npos)
      << m.Validate("model").ToString();
  m.rotary_percent = 0.5;
  m.rotary = false;
  EXPECT_NE(m.Validate("model").message().find("model.rotary_percent: needs rotary"),
            std::string::npos)
      << m.Validate("model").ToString();
}

// The two fields survive a plan file; a model without them writes neither key.
TEST(Nemotron, FieldsRoundTripThroughJson) {
  const ModelSpec m = *LoadModel("nemotron4-15b");
  const OrderedJson j = ModelToJson(m);
  auto back = ModelFromJson(Json::parse(j.dump()), "model");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(back->squared_relu);
  EXPECT_EQ(back->rotary_percent, 0.5);
  EXPECT_TRUE(back->layernorm_1p);
  // A GPT keeps its 2021 schema, and the key where set (LayerNorm1P changes no shape or cost).
  ModelSpec gpt = *LoadModel("gpt-1.7b");
  EXPECT_FALSE(ModelToJson(gpt).contains("layernorm_1p"));
  gpt.layernorm_1p = true;
  EXPECT_TRUE(ModelFromJson(Json::parse(ModelToJson(gpt).dump()), "model")->layernorm_1p);
  const OrderedJson llama = ModelToJson(*LoadModel("llama3-8b"));
  EXPECT_FALSE(llama.contains("squared_relu"));
  EXPECT_FALSE(llama.contains("rotary_percent"));
}

// A transformers NemotronConfig (model_type nemotron) with the 15B's shapes reads as the preset; an
// activation other than relu2 is refused by name.
TEST(Nemotron, HuggingFaceConfigReadsAsThePreset) {
  const std::string config = R"({"architectures": ["NemotronForCausalLM"], "model_type": "nemotron",
    "hidden_act": "relu2", "hidden_size": 6144, "intermediate_size": 24576,
    "num_hidden_layers": 32, "num_attention_heads": 48, "num_key_value_heads": 8,
    "max_position_embeddings": 4096, "vocab_size": 256000, "norm_eps": 1e-05,
    "partial_rotary_factor": 0.5, "rope_theta": 10000.0, "attention_bias": false,
    "mlp_bias": false, "tie_word_embeddings": false, "attention_dropout": 0.0,
    "initializer_range": 0.0134, "bos_token_id": 2, "eos_token_id": 3, "torch_dtype": "bfloat16"})";
  auto m = ModelFromJson(Json::parse(config), "model");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ModelSpec read = *m;
  read.name = "nemotron4-15b";  // "hf-nemotron" from the file
  EXPECT_EQ(ModelToJson(read).dump(), ModelToJson(*LoadModel("nemotron4-15b")).dump());
  std::string silu = config;
  silu.replace(silu.find("relu2"), 5, "silu");
  auto refused = ModelFromJson(Json::parse(silu), "model");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(
      refused.status().message().find(
          "model.hidden_act: \"silu\": an activation other than squared ReLU is not modelled"),
      std::string::npos)
      << refused.status().ToString();
  // transformers 5 writes rope_theta and partial_rotary_factor inside rope_parameters.
  std::string v5 = config;
  v5.replace(v5.find(R"("partial_rotary_factor": 0.5, "rope_theta": 10000.0,)"),
             std::string(R"("partial_rotary_factor": 0.5, "rope_theta": 10000.0,)").size(),
             R"("rope_parameters": {"rope_type": "default", "rope_theta": 500000.0,
                "partial_rotary_factor": 0.25},)");
  auto five = ModelFromJson(Json::parse(v5), "model");
  ASSERT_TRUE(five.ok()) << five.status().ToString();
  EXPECT_EQ(five->rotary_base, 500000.0);
  EXPECT_EQ(five->rotary_percent, 0.25);
}

// The recipe's layout of dgxc-benchmarking's 15B runs (TP 4, MBS 4, 16 H100s), and its flags:
// the activation and the partial RoPE are said, SwiGLU is not.
TEST(Nemotron, PlanAndMegatronFlags) {
  auto m = LoadModel("nemotron4-15b");
  auto c = LoadCluster("dgx-h100", 16);
  ASSERT_TRUE(m.ok() && c.ok());
  SearchOptions o;
  o.global_batch = 64;
  o.fused_attention = o.sequence_parallel = o.distributed_optimizer = true;
  o.fix = *ParseFix("tp=4,pp=1,mbs=4,recompute=none");
  auto r = Search(*m, *c, o);
  ASSERT_TRUE(r.ok()) << r.status().message();
  const std::string args = MegatronArgs(*m, r->top.front().layout);
  for (const char* flag : {"--squared-relu", "--apply-layernorm-1p", "--rotary-percent 0.5",
                           "--group-query-attention --num-query-groups 8", "--disable-bias-linear",
                           "--untie-embeddings-and-output-weights", "--ffn-hidden-size 24576"}) {
    EXPECT_NE(args.find(flag), std::string::npos) << flag << " not in " << args;
  }
  EXPECT_EQ(args.find("--swiglu"), std::string::npos) << args;
  EXPECT_EQ(args.find("RMSNorm"), std::string::npos) << args;
  ModelSpec plain = *m;
  plain.layernorm_1p = false;
  EXPECT_EQ(MegatronArgs(plain, r->top.front().layout).find("--apply-layernorm-1p"),
            std::string::npos);
}

}  // namespace
}  // namespace ptdp::planner
