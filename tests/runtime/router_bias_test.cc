// DeepSeek-V3's expert biases (runtime/model/router_bias.h): the step's update from the tokens per
// expert (sign(mean - count) times the rate, in fp32 as Megatron-Core's get_updated_expert_bias),
// the sum of the counts over the data group, and the manifest's record of them
// (runtime/checkpoint/manifest.h): a round trip exact to the bit, and each malformed entry refused
// by name.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/json.h"
#include "runtime/checkpoint/manifest.h"
#include "runtime/model/router_bias.h"

namespace ptdp::runtime {
namespace {

ModelSpec BiasedMoe() {
  ModelSpec m;
  m.name = "tiny";
  m.layers = 3;
  m.hidden = 64;
  m.heads = 4;
  m.seq_len = 32;
  m.vocab = 256;
  m.kv_heads = 2;
  m.swiglu = m.rmsnorm = m.rotary = true;
  m.linear_bias = false;
  m.tied_embeddings = false;
  m.moe_experts = 4;
  m.moe_topk = 2;
  m.moe_dense_layers = 1;
  m.moe_router_sigmoid = m.moe_router_expert_bias = true;
  m.moe_router_bias_rate = 1e-3;
  return m;
}

// Layer 0 is dense (no bias), layers 1 and 2 have one each; the counters add up the step.
TEST(RouterBiases, MoveBySignTowardsTheMeanInFp32) {
  CpuDevice dev;
  const ModelSpec m = BiasedMoe();
  auto b = RouterBiases::Create(&dev, m, {0, 1, 2}, DType::kFp32);
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_EQ(b->layers(), (std::vector<int>{1, 2}));
  EXPECT_TRUE(b->bias(0).empty());
  EXPECT_EQ(b->tokens(0), nullptr);
  ASSERT_EQ(b->bias(1).count, 4);
  // Layer 1: 10 tokens over 4 experts (mean 2.5): 4 above, 2 and 2 below, 2 below.
  int64_t* t1 = b->tokens(1);
  t1[0] = 4, t1[1] = 2, t1[2] = 2, t1[3] = 2;
  // Layer 2: every expert at the mean: no move.
  int64_t* t2 = b->tokens(2);
  for (int e = 0; e < 4; ++e) t2[e] = 3;
  ASSERT_TRUE(b->Update(nullptr).ok());
  const float r = float(1e-3);
  EXPECT_EQ(b->Values(1), (std::vector<double>{double(-r), double(r), double(r), double(r)}));
  EXPECT_EQ(b->Values(2), (std::vector<double>(4, 0.0)));
  // The device copy is the host's, and the counters start again from zero.
  std::vector<float> device(4);
  dev.Copy(device.data(), b->bias(1).data, 16);
  EXPECT_EQ(device[0], -r);
  EXPECT_EQ(t1[0], 0);
  // Ten steps of +rate in fp32 are not ten times the rate in double: the bias is an fp32 buffer.
  for (int step = 0; step < 10; ++step) {
    t1[0] = 0, t1[1] = 1, t1[2] = 1, t1[3] = 1;
    ASSERT_TRUE(b->Update(nullptr).ok());
  }
  float want = -r;
  for (int step = 0; step < 10; ++step) want += r;
  EXPECT_EQ(b->Values(1)[0], double(want));
  // A load sets them (rounded to fp32), and a wrong length is refused.
  ASSERT_TRUE(b->SetValues(2, {0.1, 0.2, 0.3, 0.4}).ok());
  EXPECT_EQ(b->Values(2)[0], double(0.1f));
  EXPECT_FALSE(b->SetValues(2, {0.1}).ok());
  EXPECT_FALSE(b->SetValues(0, {0, 0, 0, 0}).ok());
}

TEST(RouterBiases, NoneWithoutTheBias) {
  CpuDevice dev;
  ModelSpec m = BiasedMoe();
  m.moe_router_expert_bias = false;
  auto b = RouterBiases::Create(&dev, m, {0, 1, 2}, DType::kFp32);
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(b->empty());
  EXPECT_TRUE(b->bias(1).empty());
  EXPECT_TRUE(b->Update(nullptr).ok());
}

Manifest BiasedManifest() {
  Manifest m;
  m.step = 3;
  m.model = BiasedMoe();
  m.layout.global_batch = 16;
  m.token_count = 1000;
  m.adam_steps = 3;
  // fp32 values that need every digit of a double to come back (1/3, -0.003 in fp32).
  m.router_expert_bias[1] = {double(1.0f / 3), double(-0.003f), 0.0, double(1e-3f)};
  m.router_expert_bias[2] = {double(0.1f), 0.0, double(-0.1f), double(0.7f)};
  return m;
}

Result<Manifest> ReparseBiased(const OrderedJson& j) {
  auto parsed = ParseJson(j.dump(), "manifest.json");
  if (!parsed.ok()) return parsed.status();
  return ManifestFromJson(*parsed, "manifest.json");
}

TEST(RouterBiases, ManifestKeepsThemToTheBit) {
  const Manifest m = BiasedManifest();
  auto back = ReparseBiased(ManifestToJson(m));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->router_expert_bias, m.router_expert_bias);
}

TEST(RouterBiases, ManifestRefusesMalformedBiasesByName) {
  auto error = [](const OrderedJson& j) {
    auto r = ReparseBiased(j);
    return r.ok() ? std::string("(accepted)") : r.status().message();
  };
  OrderedJson j = ManifestToJson(BiasedManifest());
  j.erase("router_expert_bias");
  EXPECT_NE(error(j).find("router_expert_bias: missing (the model has moe_router_expert_bias)"),
            std::string::npos)
      << error(j);
  j = ManifestToJson(BiasedManifest());
  j["router_expert_bias"].erase("2");
  EXPECT_NE(error(j).find("router_expert_bias.2: missing (a mixture layer)"), std::string::npos)
      << error(j);
  j = ManifestToJson(BiasedManifest());
  j["router_expert_bias"]["0"] = {0, 0, 0, 0};  // layer 0 is dense
  EXPECT_NE(error(j).find("router_expert_bias.0: not a mixture layer"), std::string::npos)
      << error(j);
  j = ManifestToJson(BiasedManifest());
  j["router_expert_bias"]["1"] = {0, 0, 0};
  EXPECT_NE(error(j).find("router_expert_bias.1: expected 4 numbers"), std::string::npos)
      << error(j);
  j = ManifestToJson(BiasedManifest());
  j["router_expert_bias"]["1"][2] = "x";
  EXPECT_NE(error(j).find("router_expert_bias.1: expected finite numbers"), std::string::npos)
      << error(j);
  Manifest plain = BiasedManifest();
  plain.model.moe_router_expert_bias = false;
  j = ManifestToJson(plain);
  EXPECT_NE(error(j).find("router_expert_bias: present, but the model has no"), std::string::npos)
      << error(j);
}

}  // namespace
}  // namespace ptdp::runtime
