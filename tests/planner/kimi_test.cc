// The kimi-k2 preset (core/model_presets.cc, from Megatron-Bridge's KimiK2Provider): its parameter
// counts against the model card's and the sum of its parts written out here, the YaRN and router
// fields the provider sets, and Megatron-LM's flags for it.
#include <gtest/gtest.h>

#include <string>

#include "core/model.h"
#include "core/shapes.h"
#include "planner/report.h"

namespace ptdp::planner {
namespace {

TEST(KimiK2, ParameterCountsMatchTheModelCard) {
  const auto m = LoadModel("kimi-k2");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  // Per layer: multi-latent attention (q down 7168 x 1536, q up 1536 x 64 x 192, kv down 7168 x
  // 576, kv up 512 x 64 x 256, out 64 x 128 x 7168, the two latents' norms) and the two norms;
  // layer 0 a dense SwiGLU of 18432, the 60 others 384 experts of 2048, a shared expert of 2048
  // and the router; untied embeddings of 163840.
  const int64_t h = 7168;
  const int64_t attention =
      h * 1536 + 1536 * 64 * 192 + h * 576 + 512 * 64 * 256 + 64 * 128 * h + 1536 + 512 + 2 * h;
  const int64_t dense = 3 * 18432 * h, expert = 3 * 2048 * h;
  const int64_t want = 61 * attention + dense + 60 * (385 * expert + 384 * h) + 2 * 163840 * h + h;
  EXPECT_EQ(ParameterCount(*m), want);
  EXPECT_NEAR(double(ParameterCount(*m)) / 1e12, 1.026, 0.001);  // the card's "1T"
  // Activated: 8 of the 384 experts.
  ModelSpec active = *m;
  active.moe_experts = 8;
  EXPECT_NEAR(double(ParameterCount(active)) / 1e9, 32.7, 0.05);  // the card's "32B"
  EXPECT_TRUE(m->RopeYarn());
  EXPECT_EQ(m->rope_scaling_factor, 32);
  EXPECT_EQ(m->rope_yarn_beta_fast, 1);
  EXPECT_EQ(m->rope_yarn_beta_slow, 1);
  EXPECT_EQ(m->rotary_base, 50000);
  EXPECT_EQ(m->mtp_layers, 0);
  EXPECT_EQ(m->moe_dense_layers, 1);
  EXPECT_TRUE(m->moe_router_sigmoid && m->moe_router_expert_bias);
}

TEST(KimiK2, TheEmittedFlags) {
  const auto m = LoadModel("kimi-k2");
  ASSERT_TRUE(m.ok());
  ParallelConfig c;
  c.tp = 8;
  c.sequence_parallel = true;
  c.pp = 16;
  c.ep = 8;
  c.global_batch = 1024;
  c.precision = Precision::kBf16;
  const std::string args = MegatronArgs(*m, c);
  for (const char* flag :
       {" --num-experts 384 --moe-router-topk 8 --moe-ffn-hidden-size 2048",
        " --moe-router-topk-scaling-factor 2.827", " --moe-layer-freq \"([0]*1+[1]*60)\"",
        " --rope-type yarn --rotary-scaling-factor 32", " --num-attention-heads 64"}) {
    EXPECT_NE(args.find(flag), std::string::npos) << flag << " in " << args;
  }
  // Megatron-Core's MLA fixes YaRN's betas at 32 and 1; Kimi K2's 1 and 1 are the provider's
  // config fields, which no flag sets.
  EXPECT_NE(MegatronModelNote(*m).find("this model's are 4096, 1 and 1"), std::string::npos)
      << MegatronModelNote(*m);
}

}  // namespace
}  // namespace ptdp::planner
