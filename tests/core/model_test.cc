#include "core/model.h"

#include <gtest/gtest.h>

namespace ptdp {
namespace {

TEST(Model, PresetsOfTable1) {
  auto m = LoadModel("gpt-1t").value();
  EXPECT_EQ(m.layers, 128);
  EXPECT_EQ(m.hidden, 25600);
  EXPECT_EQ(m.heads, 160);
  EXPECT_EQ(m.FfnHidden(), 4 * 25600);
  // Eq. (2) gives 1008 billion for the 1T row, as Table 1 prints (1008.0).
  EXPECT_NEAR(ParameterCountEq2(m) / 1e9, 1008.0, 0.5);
  EXPECT_NEAR(ParameterCountEq2(LoadModel("gpt-1.7b").value()) / 1e9, 1.7, 0.05);
  EXPECT_NEAR(ParameterCountEq2(LoadModel("gpt-530b").value()) / 1e9, 529.6, 0.5);
}

TEST(Model, ExactCountMatchesEq2PlusFinalLayerNorm) {
  // Eq. (2) counts 12 l h^2 + 13 l h + (V + s) h; the exact count adds the final LayerNorm (2h).
  auto m = LoadModel("gpt-18b").value();
  EXPECT_EQ(double(ParameterCount(m, 1)), ParameterCountEq2(m) + 2.0 * m.hidden);
}

TEST(Model, VocabPaddedAsMegatron) {
  ModelSpec m = LoadModel("gpt3-175b").value();  // 50257
  EXPECT_EQ(PaddedVocab(m, 1), 50304);           // multiple of 128
  EXPECT_EQ(PaddedVocab(m, 8), 51200);           // multiple of 1024
  m.vocab = 256;
  EXPECT_EQ(PaddedVocab(m, 4), 512);
}

TEST(Model, OurSchemaAndHuggingFace) {
  auto ours = ModelFromJson(
      Json::parse(
          R"({"name": "tiny", "layers": 4, "hidden": 64, "heads": 4, "seq_len": 32, "vocab": 256})"),
      "model");
  ASSERT_TRUE(ours.ok()) << ours.status().ToString();
  EXPECT_EQ(ours->FfnHidden(), 256);
  auto hf = ModelFromJson(Json::parse(R"({"n_layer": 12, "n_embd": 768, "n_head": 12,
      "n_positions": 1024, "vocab_size": 50257, "n_inner": null, "model_type": "gpt2",
      "activation_function": "gelu_new"})"),
                          "model");
  ASSERT_TRUE(hf.ok()) << hf.status().ToString();
  EXPECT_EQ(hf->layers, 12);
  EXPECT_EQ(hf->seq_len, 1024);
}

TEST(Model, BadInputNamesTheField) {
  auto r = ModelFromJson(Json::parse(R"({"name": "x", "layers": 4, "hidden": 60, "heads": 8,
      "seq_len": 32, "vocab": 256})"),
                         "model");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("hidden: must be divisible by heads"), std::string::npos);
  auto u = ModelFromJson(Json::parse(R"({"name": "x", "layers": 4, "hidden": 64, "heads": 8,
      "seq_len": 32, "vocab": 256, "hiden": 3})"),
                         "model");
  EXPECT_EQ(u.status().message(), "model.hiden: unknown key");
  auto p = LoadModel("gpt-2t");
  EXPECT_EQ(p.status().code(), StatusCode::kNotFound);
  EXPECT_NE(p.status().message().find("unknown preset 'gpt-2t'"), std::string::npos);
}

}  // namespace
}  // namespace ptdp
